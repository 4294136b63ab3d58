//===- WgmmaForward.h - the Hopper forward template (sm_90a) -----*- C++ -*-===//
// Why: on Hopper, mma.sync reaches about half of the tensor cores' rate and
// synchronous loads leave them waiting. This template is FlashAttention-3's
// structure: a producer warpgroup that only issues TMA loads of K and V into
// a ring of shared buffers guarded by mbarriers, and consumer warpgroups
// (64 query rows each) that run wgmma for S = Q K^T (both operands in shared
// memory) and O += P V (P from registers), with setmaxnreg moving registers
// from the producer to the consumers, and O stored through shared memory
// with TMA.
//
// Two families share the kernel: "wgmma", one block per tile of block_m
// query rows, and "wgmma_persistent", one block per SM taking tiles from a
// counter (longest causal tiles first), so a block's epilogue overlaps its
// next tile's loads. The persistent one offers candidates for causal
// attention only, where it was faster at short lengths (H100, bf16, seqlen
// 2k: 1.06x for head dim 64, 1.09x for 128); without a mask its consumers'
// fewer registers cost 2-4% (seqlen 8k).
#ifndef FLASHJIT_TEMPLATES_WGMMAFORWARD_H
#define FLASHJIT_TEMPLATES_WGMMAFORWARD_H

#include "flashjit/Templates/KernelTemplate.h"

namespace flashjit {

class WgmmaForward final : public KernelTemplate {
public:
  explicit WgmmaForward(bool persistent = false) : Persistent(persistent) {}

  /// Query rows of one consumer warpgroup (the M of wgmma m64nNk16).
  static constexpr int64_t kRowsPerWarpgroup = 64;
  static constexpr int64_t kWarpsPerWarpgroup = 4;
  /// Elements of one 128-byte swizzled shared row: tiles are stored as
  /// panels of this many columns.
  static constexpr int64_t kPanelCols = 64;
  /// Registers per thread the producer keeps and the consumers get, by the
  /// number of consumer warpgroups (setmaxnreg; 128 threads each must fit
  /// the SM's 64K registers).
  static unsigned producerRegisters(int64_t consumers, bool persistent);
  static unsigned consumerRegisters(int64_t consumers, bool persistent);

  llvm::StringRef family() const override {
    return Persistent ? "wgmma_persistent" : "wgmma";
  }
  int minComputeCapability() const override { return 90; }
  bool needsArchSpecificTarget() const override { return true; }
  bool persistent() const override { return Persistent; }
  bool prefersAlignedCausalTiles() const override { return true; }
  std::vector<int64_t> headDims() const override { return {64, 128, 256}; }
  std::optional<TensorMapBoxes>
  tensorMapBoxes(const TileConfig &config) const override;
  llvm::Error checkConfig(const AttentionSpec &spec,
                          const TileConfig &config) const override;
  TemplateResources resources(const AttentionSpec &spec,
                              const TileConfig &config) const override;
  std::vector<TileConfig>
  candidates(const AttentionSpec &spec) const override;

protected:
  void emit(mlir::OpBuilder &builder, mlir::Location loc,
            const AttentionSpec &spec, const TileConfig &config,
            llvm::StringRef name) const override;

private:
  bool Persistent;
};

} // namespace flashjit

#endif
