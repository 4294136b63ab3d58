//===- Compiler.h - the one entry point from a spec to PTX --------*- C++ -*-===//
// Why: the runtime and the command line reach the MLIR pipeline only
// through this interface (docs/architecture.md: the runtime calls the
// compiler through one interface; the compiler never includes the runtime).
#ifndef FLASHJIT_COMPILER_COMPILER_H
#define FLASHJIT_COMPILER_COMPILER_H

#include "flashjit/Dialect/AttentionSpec.h"
#include "flashjit/Templates/DecodeKernel.h"
#include "flashjit/Templates/KernelABI.h"
#include "flashjit/Templates/Target.h"
#include "flashjit/Templates/TileConfig.h"

#include "llvm/Support/Error.h"
#include <optional>
#include <string>

namespace flashjit {

/// Stages whose IR `compile --emit` can print, in pipeline order.
enum class Stage {
  Description, ///< attn.attention in a func, config attached
  Kernel,      ///< tiled gpu.func (scf loops, online softmax)
  LLVM,        ///< gpu.module in the LLVM/NVVM dialects
  PTX          ///< PTX text
};
llvm::Expected<Stage> parseStage(llvm::StringRef name);
const char *stageName(Stage stage);

/// The kernels a spec has: its forward pass, for a block-sparse spec
/// the kernel that builds its block mask on the GPU (BlockMaskKernel.h),
/// and the three kernels of its backward pass (MmaSyncBackward.h);
/// Decode: the split and combine kernels of a DecodeSpec (DecodeKernel.h),
/// built straight into a gpu.module (no attn description).
enum class KernelKind { Forward, BlockMask, Backward, Decode };

struct CompileOptions {
  Target target;
  /// Tile config to build; none: the autotuner's heuristic for `target`.
  std::optional<TileConfig> config;
  /// Where to stop; the result's `text` holds that stage's IR or PTX.
  Stage stopAfter = Stage::PTX;
  /// Run the MLIR verifier after each pass (debug knob).
  bool verifyEachPass = false;
};

struct CompiledKernel {
  KernelInfo info;
  /// PTX text (or the IR of options.stopAfter).
  std::string text;
};

/// Builds the description of `spec` and lowers it through the pipeline.
/// Never aborts: bad specs, targets and configs come back as errors.
llvm::Expected<CompiledKernel> compileAttention(const AttentionSpec &spec,
                                                const CompileOptions &options);

/// Builds the block-mask kernel of a block-sparse `spec` from the same
/// description (its mask_mod, causal mask and window); options.config is
/// ignored. Its KernelInfo comes from blockMaskKernelInfo.
llvm::Expected<CompiledKernel>
compileBlockMaskKernel(const AttentionSpec &spec, const CompileOptions &options);

/// Builds the backward kernels of `spec` (MmaSyncBackward.h) with
/// options.config (a "mma_sync_bwd" config; none: the template's default)
/// into one module. Its KernelInfo names the main kernel.
llvm::Expected<CompiledKernel> compileBackward(const AttentionSpec &spec,
                                               const CompileOptions &options);

/// Builds the decode kernels of `spec` (DecodeKernel.h): the split kernel,
/// whose KernelInfo (decodeKernelInfo) the result carries, and the combine
/// kernel in the same PTX; options.config is ignored.
llvm::Expected<CompiledKernel> compileDecodeKernel(const DecodeSpec &spec,
                                                   const CompileOptions &options);

/// Parses `mlirText` (a module holding one func with one attn.attention,
/// as `compile --emit attn` prints) and lowers it like compileAttention.
/// Malformed text, or not exactly one attention, is an error with the
/// parser's diagnostics.
llvm::Expected<CompiledKernel> compileDescription(llvm::StringRef mlirText,
                                                  const CompileOptions &options);

/// How many kernels are built in one MLIR context before the next compile
/// gets a fresh one (default 32; 0 counts as 1). A context keeps what it
/// interns, every kernel's PTX included, so this bounds the memory that
/// compiling holds; tests set 1 to build every kernel in a new context.
void setKernelsPerContext(unsigned kernels);

/// Versions that, with the spec, config and target, key the kernel cache.
struct ToolchainVersions {
  std::string flashjit;  ///< e.g. "0.1.0"
  std::string llvm;      ///< e.g. "22.1.8"
  std::string generator; ///< generatorId()
};

/// 16 hex digits hashing every source of the dialect, the templates and
/// the compiler at build time: any change of the code that generates
/// kernels changes it, so the kernel cache never serves an older
/// generator's PTX under the same version string.
const char *generatorId();
ToolchainVersions toolchainVersions();

} // namespace flashjit

#endif
