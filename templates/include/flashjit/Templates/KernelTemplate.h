//===- KernelTemplate.h - a family of kernels built from one template ---*- C++ -*-===//
// Why: each kernel family (CUDA cores, sm80 mma.sync, sm90 wgmma) says which
// problems and configs it supports and what resources a config needs, so the
// autotuner can reason about it without building IR; build() then emits the
// kernel for one chosen config.
#ifndef FLASHJIT_TEMPLATES_KERNELTEMPLATE_H
#define FLASHJIT_TEMPLATES_KERNELTEMPLATE_H

#include "flashjit/Dialect/AttentionSpec.h"
#include "flashjit/Templates/KernelABI.h"
#include "flashjit/Templates/Target.h"
#include "flashjit/Templates/TileConfig.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include <optional>
#include <vector>

namespace mlir {
class OpBuilder;
class Location;
class Region;
} // namespace mlir

namespace flashjit {

/// The IR part of a variant: the attn op's score_mod and mask_mod regions
/// (null: none), and for the backward pass the score_mod's derivative
/// (score_grad: the score_mod's arguments -> (score, d score / d input
/// score)). Their trailing block arguments are the captured tensors of
/// AttentionSpec::captures, in order.
struct ModRegions {
  mlir::Region *scoreMod = nullptr;
  mlir::Region *maskMod = nullptr;
  mlir::Region *scoreGrad = nullptr;
};

/// Resources one thread block of a config needs.
struct TemplateResources {
  unsigned threadsPerBlock = 0;
  unsigned sharedMemoryBytes = 0;
  /// Estimated registers per thread (the autotuner's occupancy input).
  unsigned registersPerThread = 0;
  /// Query rows one warp computes: each K/V element a warp reads from shared
  /// memory feeds that many rows, so more rows mean fewer shared reads per
  /// FLOP (0: not stated).
  unsigned queryRowsPerWarp = 0;
  /// Warpgroups that each run a softmax of their own rows (the Hopper
  /// templates' consumers; 0: not stated).
  unsigned softmaxWarpgroups = 0;
};

class KernelTemplate {
public:
  virtual ~KernelTemplate() = default;
  /// The family name written in #attn.tile_config (e.g. "cuda_core").
  virtual llvm::StringRef family() const = 0;
  /// Lowest compute capability the template runs on (e.g. 80).
  virtual int minComputeCapability() const = 0;
  /// A variant that computes something else on purpose, to time a part of
  /// a kernel (e.g. without its softmax): built only when a config names
  /// it, never a candidate of the heuristic or the tuner.
  virtual bool measurementOnly() const { return false; }
  /// Whether the kernels need the arch-specific target of their minimum
  /// compute capability (sm_90a, for wgmma and setmaxnreg), which newer
  /// chips do not run.
  virtual bool needsArchSpecificTarget() const { return false; }
  /// The tensor maps a kernel of this spec and config takes (KernelABI.h),
  /// or none when it loads through plain pointers.
  virtual std::optional<TensorMapBoxes>
  tensorMapBoxes(const AttentionSpec &spec, const TileConfig &config) const {
    (void)spec;
    (void)config;
    return std::nullopt;
  }
  /// Whether its kernels are persistent: launched with one block per SM,
  /// each looping over tiles (forwardGeometry in KernelABI.h).
  virtual bool persistent() const { return false; }
  /// Blocks per cluster its kernels are built for (PTX .reqnctapercluster):
  /// a persistent grid is then a whole number of clusters, as many as the
  /// GPU holds at once (forwardGeometry).
  virtual unsigned clusterSize() const { return 1; }
  /// Whether its kernels take tiles from the launch's counter
  /// (ForwardKernelArgs::tileCounter), which the runtime then keeps per
  /// stream: persistent kernels do unless they take a fixed order.
  virtual bool takesTilesFromCounter() const { return persistent(); }
  /// Whether, for causal attention, its configs should have block_n divide
  /// block_m, so the diagonal crosses whole K/V tiles (the heuristic's
  /// DiagonalTiles rule). Measured for wgmma; other templates keep their
  /// ranking.
  virtual bool prefersAlignedCausalTiles() const { return false; }
  /// Whether it builds the varlen form (AttentionSpec::varlen: one block
  /// per query block of each sequence, which a persistent tile order does
  /// not have); supports() refuses varlen specs elsewhere.
  virtual bool supportsVarlen() const { return false; }
  /// Head dims the template builds, ascending.
  virtual std::vector<int64_t> headDims() const = 0;
  /// Whether the template can build this problem for this target (a valid
  /// spec, one of headDims(), compute capability at least the minimum); the
  /// error says what it supports.
  llvm::Error supports(const AttentionSpec &spec, const Target &target) const;
  /// Whether the config is one this template can build for the spec.
  virtual llvm::Error checkConfig(const AttentionSpec &spec,
                                  const TileConfig &config) const = 0;
  /// Threads, shared memory and registers of one block of this config.
  virtual TemplateResources resources(const AttentionSpec &spec,
                                      const TileConfig &config) const = 0;
  /// Every config the template can build for the spec (autotuner input).
  virtual std::vector<TileConfig>
  candidates(const AttentionSpec &spec) const = 0;
  /// Checks the config, then emits `gpu.func @name` for the spec, config
  /// and mods at the builder's insertion point (inside a gpu.module).
  llvm::Error build(mlir::OpBuilder &builder, mlir::Location loc,
                    const AttentionSpec &spec, const TileConfig &config,
                    llvm::StringRef name, const ModRegions &mods = {}) const;

protected:
  /// The template's IR builder; the config has passed checkConfig.
  virtual void emit(mlir::OpBuilder &builder, mlir::Location loc,
                    const AttentionSpec &spec, const TileConfig &config,
                    llvm::StringRef name, const ModRegions &mods) const = 0;
};

/// All templates, most capable first.
const std::vector<const KernelTemplate *> &allTemplates();
/// The template of a family, or null when no template has it.
const KernelTemplate *lookupTemplate(llvm::StringRef family);
/// The template of a family, or an error listing the families.
llvm::Expected<const KernelTemplate *> findTemplate(llvm::StringRef family);
/// The cluster size of `config`'s family (KernelTemplate::clusterSize); 1
/// for a family no template has.
unsigned clusterSizeOf(const TileConfig &config);
/// What every template's supports() asks first: a valid spec, a head dim
/// of `dims`, a target of at least `minComputeCapability`; the error names
/// `family`'s template and what it supports.
llvm::Error checkHeadDimAndTarget(const AttentionSpec &spec,
                                  const Target &target,
                                  llvm::ArrayRef<int64_t> dims,
                                  llvm::StringRef family,
                                  int minComputeCapability);
/// What every template's checkConfig asks of a block-sparse spec: the
/// config's block_m and block_n divide the mask's block, so that each
/// query tile reads one row of the block mask and each key tile lies in
/// one mask block.
llvm::Error checkSparseTile(const AttentionSpec &spec,
                            const TileConfig &config);
/// Operations of the special-function unit (MUFU on NVIDIA GPUs: tanh,
/// exp, exp2, log, log2, sqrt, rsqrt) in `spec`'s score_mod, as its text
/// spells them: what each score costs that unit beyond the softmax's own
/// exponential (ScoreModCost.cpp).
unsigned scoreModSpecialFunctions(const AttentionSpec &spec);
/// Head dim 128, a score_mod with such operations and nothing bounding the
/// keys on the right: the special-function unit is then as busy as the
/// tensor cores, wgmma_persistent offers three softmax warpgroups and the
/// heuristic's ThreeWarpgroups rule ranks them (ScoreModCost.cpp).
bool specialFunctionBound(const AttentionSpec &spec);
/// Head dim 128 with nothing on the scores but the softmax: no mask, no
/// score_mod or mask_mod, not block-sparse, not varlen. wgmma_persistent
/// offers three softmax warpgroups for it as well (one warpgroup's
/// softmax runs under two others' products), and the heuristic's
/// ThreeWarpgroups rule ranks them first at long lengths
/// (WgmmaForwardConfig.cpp).
bool plainHeadDim128(const AttentionSpec &spec);

} // namespace flashjit

#endif
