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
// Three families share the kernel: "wgmma", one block per tile of block_m
// query rows; "wgmma_persistent", one block per SM taking tiles from a
// counter (longest causal tiles first), so a block's epilogue overlaps its
// next tile's loads; and "wgmma_cluster", persistent in clusters of two
// blocks that take adjacent query blocks of one head and load each K/V
// tile once for both (TMA multicast), which halves the K/V bytes L2 sends
// to the SMs (without a mask only: both blocks need the same K/V tiles).
// Where shared memory has room, the persistent kernel
// stages O in a buffer of its own, so the next tile's Q loads under this
// tile's last products and epilogue. It offers candidates for causal
// attention, and without a mask from head dim 128 with O staged apart
// (at head dim 64 without a mask it gains nothing over one block per
// tile). What each grid gains is in docs/performance.md.
#ifndef FLASHJIT_TEMPLATES_WGMMAFORWARD_H
#define FLASHJIT_TEMPLATES_WGMMAFORWARD_H

#include "flashjit/Templates/KernelTemplate.h"

namespace flashjit {

class WgmmaForward final : public KernelTemplate {
public:
  /// How the kernel's blocks cover the tiles.
  enum class Grid {
    /// One block per tile.
    PerTile,
    /// One block per SM, taking tiles from the launch's counter.
    Persistent,
    /// Persistent, in clusters of kClusterSize blocks that share each K/V
    /// tile (TMA multicast) and take adjacent query blocks in a fixed order.
    Cluster,
  };
  explicit WgmmaForward(Grid grid = Grid::PerTile) : Kind(grid) {}

  /// Blocks of one cluster of the Cluster grid.
  static constexpr int64_t kClusterSize = 2;

  /// Query rows of one consumer warpgroup (the M of wgmma m64nNk16).
  static constexpr int64_t kRowsPerWarpgroup = 64;
  static constexpr int64_t kWarpsPerWarpgroup = 4;
  /// Bytes of one consumer's tile record in shared memory (four i32:
  /// WgmmaPersistent.cpp; eight for varlen, with the tile's sequence's
  /// rows).
  static constexpr int64_t kRecordBytes = 16;
  static int64_t recordBytes(const AttentionSpec &spec) {
    return spec.varlen ? 2 * kRecordBytes : kRecordBytes;
  }
  /// Elements of one 128-byte swizzled shared row: tiles are stored as
  /// panels of this many columns.
  static constexpr int64_t kPanelCols = 64;
  /// Blocks per SM a kernel is built for: one, or two with a single
  /// consumer warpgroup (block_m 64), so that one block's softmax,
  /// epilogue and tile start run under the other's products, as a second
  /// consumer's would (nvvm.minctasm; the registers and shared memory are
  /// budgeted for it).
  static int64_t blocksPerSM(int64_t consumers);
  /// Registers per thread the producer keeps and the consumers get, by the
  /// number of consumer warpgroups (setmaxnreg; 128 threads each must fit
  /// the SM's 64K registers).
  static unsigned producerRegisters(int64_t consumers, bool persistent,
                                    bool causal);
  static unsigned consumerRegisters(int64_t consumers, bool persistent,
                                    bool causal);
  /// Where the kernel's shared memory goes, in bytes from its 1024-aligned
  /// base: `qBuffers` Q tiles, `stages` K tiles, `stages` V tiles, the O
  /// buffer when O is staged apart, the mbarriers, each consumer's tile
  /// record per Q tile (kRecordBytes). The IR builder lays it out so and
  /// resources() reports `bytes`.
  struct SharedLayout {
    int64_t k = 0, v = 0, o = 0, barriers = 0, records = 0;
    /// With a mask_mod: each consumer warp's scratch for the mask_mod's
    /// key-column reads (4 bytes per column of a K/V tile; IndexStaging in
    /// templates/lib/ScoreMods.h); 0 bytes without one.
    int64_t maskColumns = 0;
    /// The whole block's bytes, the alignment slack included.
    int64_t bytes = 0;
    /// See stagesOutputApart.
    bool outputApart = false;
    /// Two where a persistent kernel with O staged apart at head dim 64
    /// has room for a second Q tile: the producer then loads a tile's Q
    /// (and writes its record) while the consumers still work on the tile
    /// before, rather than once they have released their Q rows; one
    /// otherwise.
    int64_t qBuffers = 1;
  };
  static SharedLayout sharedLayout(const AttentionSpec &spec,
                                   const TileConfig &config, bool persistent);
  /// Whether a persistent kernel stages O in a buffer of its own (when
  /// shared memory has room for it), so each consumer hands its Q rows to
  /// the producer once its last S has landed and the next tile's Q loads
  /// under this tile's last P V and epilogue. Otherwise O is staged in the
  /// Q rows, which wait for the store.
  static bool stagesOutputApart(const AttentionSpec &spec,
                                const TileConfig &config, bool persistent);

  llvm::StringRef family() const override {
    switch (Kind) {
    case Grid::PerTile:
      return "wgmma";
    case Grid::Persistent:
      return "wgmma_persistent";
    case Grid::Cluster:
      return "wgmma_cluster";
    }
    return "wgmma";
  }
  int minComputeCapability() const override { return 90; }
  bool needsArchSpecificTarget() const override { return true; }
  bool persistent() const override { return Kind != Grid::PerTile; }
  unsigned clusterSize() const override {
    return Kind == Grid::Cluster ? kClusterSize : 1;
  }
  /// Clusters take their tiles in a fixed order.
  bool takesTilesFromCounter() const override {
    return Kind == Grid::Persistent;
  }
  bool prefersAlignedCausalTiles() const override { return true; }
  bool supportsVarlen() const override { return Kind != Grid::Cluster; }
  std::vector<int64_t> headDims() const override { return {64, 128, 256}; }
  std::optional<TensorMapBoxes>
  tensorMapBoxes(const AttentionSpec &spec,
                 const TileConfig &config) const override;
  llvm::Error checkConfig(const AttentionSpec &spec,
                          const TileConfig &config) const override;
  TemplateResources resources(const AttentionSpec &spec,
                              const TileConfig &config) const override;
  std::vector<TileConfig>
  candidates(const AttentionSpec &spec) const override;

protected:
  void emit(mlir::OpBuilder &builder, mlir::Location loc,
            const AttentionSpec &spec, const TileConfig &config,
            llvm::StringRef name, const ModRegions &mods) const override;

private:
  Grid Kind;
};

} // namespace flashjit

#endif
