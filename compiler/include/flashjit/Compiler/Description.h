//===- Description.h - an AttentionSpec as MLIR ---------------------*- C++ -*-===//
// Why: the runtime and the command line describe attention in C++; the
// pipeline starts from IR. This builds the IR form of a spec.
#ifndef FLASHJIT_COMPILER_DESCRIPTION_H
#define FLASHJIT_COMPILER_DESCRIPTION_H

#include "flashjit/Dialect/AttentionSpec.h"
#include "flashjit/Templates/TileConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include <optional>

namespace flashjit {

/// A module holding `func.func @<spec.kernelName()>(q, k, v, scale,
/// captures...)` whose body is one attn.attention (batch and seqlens
/// dynamic), with `config` attached when given and the spec's score_mod and
/// mask_mod functions parsed into its regions. Malformed mod text, or a
/// function whose signature does not match, is an error (the parser's
/// diagnostics go to the context's handler).
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
buildDescription(mlir::MLIRContext &ctx, const AttentionSpec &spec,
                 const std::optional<TileConfig> &config);

/// Registers every dialect, interface and translation the pipeline needs.
void registerCompilerDialects(mlir::DialectRegistry &registry);

} // namespace flashjit

#endif
