//===- ConfigChoice.h - the default tile config of a spec ----------*- C++ -*-===//
// Why: the compiler asks the autotuner's heuristic through this one call.
#ifndef FLASHJIT_COMPILER_CONFIGCHOICE_H
#define FLASHJIT_COMPILER_CONFIGCHOICE_H

#include "flashjit/Dialect/AttentionSpec.h"
#include "flashjit/Templates/Target.h"
#include "flashjit/Templates/TileConfig.h"

namespace flashjit::autotune {
struct Choice;
struct DeviceModel;
} // namespace flashjit::autotune

namespace flashjit {

/// The GPU model the heuristic reasons with: the known GPU `device` names,
/// or (empty) the reference GPU of the target's compute capability.
llvm::Expected<autotune::DeviceModel>
heuristicDeviceModel(const Target &target, llvm::StringRef device);

/// The heuristic's config for `spec` on `target`; `device` names a known
/// GPU (empty: the reference GPU of the chip). `seqlen` is the sequence
/// length the kernel will run at (autotune::shapeForSeqlen; 0: the
/// default hint, 2048).
llvm::Expected<TileConfig> chooseTileConfig(const AttentionSpec &spec,
                                            const Target &target,
                                            llvm::StringRef device,
                                            int64_t seqlen = 0);

/// The heuristic's choice among one kernel family's configs (e.g.
/// "mma_sync" where another family is the default); an unknown family, or
/// one that cannot build the spec on the target, is an error that says so.
llvm::Expected<autotune::Choice>
explainFamilyChoice(const AttentionSpec &spec, const Target &target,
                    llvm::StringRef device, llvm::StringRef family,
                    int64_t seqlen = 0);

/// The same choice with every candidate considered and why one won
/// (`flashjit compile --explain`).
llvm::Expected<autotune::Choice> explainTileConfig(const AttentionSpec &spec,
                                                   const Target &target,
                                                   llvm::StringRef device,
                                                   int64_t seqlen = 0);

} // namespace flashjit

#endif
