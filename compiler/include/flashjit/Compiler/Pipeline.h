//===- Pipeline.h - the one pipeline from description to PTX ------*- C++ -*-===//
// Why: flashjit-opt, the runtime and the command line build the same pass
// pipeline through this one function.
#ifndef FLASHJIT_COMPILER_PIPELINE_H
#define FLASHJIT_COMPILER_PIPELINE_H

#include "flashjit/Compiler/Compiler.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace flashjit {

struct PipelineOptions : public mlir::PassPipelineOptions<PipelineOptions> {
  Option<std::string> chip{*this, "chip",
                           llvm::cl::desc("Target chip (sm_80 ... sm_90a)"),
                           llvm::cl::init("sm_90a")};
  Option<std::string> device{
      *this, "device",
      llvm::cl::desc("Known GPU for the tile-size heuristic (e.g. h100)"),
      llvm::cl::init("")};
  Option<std::string> stopAfter{
      *this, "stop-after",
      llvm::cl::desc("Last stage to run: attn, kernel, llvm or ptx"),
      llvm::cl::init("ptx")};
  Option<std::string> kernel{
      *this, "kernel",
      llvm::cl::desc("Kernel to build: forward, block-mask or backward"),
      llvm::cl::init("forward")};
};

/// Adds the passes from `attn.attention` to a `gpu.binary` holding PTX:
///  1. attn-attach-config           tile config from the autotuner
///  2. attn-lower-to-kernel         tiled gpu.func (online softmax),
///     then canonicalize (one bottom-up sweep) and cse
///  3. scf -> cf, nvvm-attach-target (chip, PTX features, O3)
///  4. in gpu.module: convert-gpu-to-nvvm, nvvm-to-llvm,
///     attn-mark-grid-constant-params
///  5. attn-emit-ptx (PTX text; LLVM -O3 without the SLP vectorizer)
/// Post-condition of each stage: `Stage` in Compiler.h. The chip must come
/// from Target::parse (LLVM aborts on an unknown chip/feature pair). For
/// KernelKind::BlockMask, step 1 is skipped and step 2 builds the
/// block-mask kernel; for KernelKind::Backward, step 1 is
/// attn-differentiate-score-mod (a score_mod's derivative) and step 2
/// builds the three backward kernels from the op's config.
void buildAttentionPipeline(mlir::OpPassManager &pm, const Target &target,
                            llvm::StringRef device, Stage stopAfter,
                            KernelKind kind = KernelKind::Forward);

/// Registers "flashjit-pipeline" for flashjit-opt.
void registerAttentionPipeline();

} // namespace flashjit

#endif
