//===- WgmmaBackward.h - the backward pass on wgmma (sm_90a) -----*- C++ -*-===//
// Why: on Hopper the backward's five products per tile belong on the
// warpgroup tensor cores (wgmma), whose m64 x n256 products from shared
// memory run about twice as fast as mma.sync's. This template builds the
// main backward kernel that way; the kernels around it (preprocess,
// convert), the ABI, the grid and the workspace are the backward's
// (MmaSyncBackward.h), so the runtime launches both families alike.
//
// The kernel: one block per (key block of 128 keys, KV head, batch), two
// warpgroups of 64 key rows each. K and V stay in shared memory; for each
// query head of the GQA group and each visible query block of block_m rows
// (its Q and dO loaded by TMA into 128-byte swizzled shared tiles, its LSE
// and D with cp.async, the next block's during this one; the kernel takes
// TMA maps of Q and dO after the other parameters):
//   S^T  = K Q^T, dP^T = V dO^T     A and B from shared memory;
//   P^T  = 2^(S^T c - LSE log2 e), dS^T = P^T (dP^T - D);
//   dV  += P^T dO, dK += dS^T Q     A from registers (the accumulators of
//                                   S^T and dS^T), dK and dV stay there;
//   dS^T to shared memory, then dQ = dS K (A = dS^T read MN-major): each
//   warpgroup a half of the columns (block_m 64) or of the rows (128),
//   staged in shared memory as f32 rows and added into the f32 workspace
//   during the next step by one bulk reduction of the whole tile
//   (cp.reduce.async.bulk .add.f32; the workspace's rows are padded and
//   rounded up like the staging rows, DqAccumLayout), far cheaper than
//   per-element reductions (docs/backward.md has the measurements).
// Deterministic variant (wgmma_bwd_det): the blocks that add into one
// query block of dQ take turns, highest key block first, as
// mma_sync_bwd_det's do; a block's turn ends once its bulk reductions
// have completed.
#ifndef FLASHJIT_TEMPLATES_WGMMABACKWARD_H
#define FLASHJIT_TEMPLATES_WGMMABACKWARD_H

#include "flashjit/Dialect/AttentionSpec.h"
#include "flashjit/Templates/KernelTemplate.h"
#include "flashjit/Templates/Target.h"
#include "flashjit/Templates/TileConfig.h"

#include "llvm/Support/Error.h"
#include <cstdint>
#include <vector>

namespace mlir {
class OpBuilder;
class Location;
} // namespace mlir

namespace flashjit {

/// The sm_90a backward template, family "wgmma_bwd": block_n 128 key rows
/// per block (64 per warpgroup, 8 warps), block_m 64 query rows per step
/// or 128 at head dim 64 (the default there), stages 1 to 3 (the Q, dO,
/// LSE and D of the next stages - 1 steps load during this one; as many
/// as fit in shared memory).
class WgmmaBackward {
public:
  static llvm::StringRef family() { return "wgmma_bwd"; }
  /// The deterministic variant: the same tile sizes; the blocks that add
  /// into one query block of dQ take turns (BackwardDqTurns.cpp), each
  /// waiting for its bulk reductions to complete before passing the turn.
  static llvm::StringRef deterministicFamily() { return "wgmma_bwd_det"; }
  /// Whether `config` is of this template (either variant).
  static bool owns(const TileConfig &config) {
    return config.family == family() || config.family == deterministicFamily();
  }
  static constexpr int kComputeCapability = 90;
  static constexpr int64_t kBlockN = 128;
  static constexpr int64_t kWarps = 8;
  /// Shared memory one block may use on sm_90a (227 KB).
  static constexpr unsigned kMaxSharedBytes = 232448;
  /// Bytes after each f32 row of the dQ staging rows (bank spread) and of
  /// the workspace's dQ accumulator rows (DqAccumLayout).
  static constexpr int64_t kDqRowPadding = 32;
  static std::vector<int64_t> headDims() { return {64, 128}; }

  /// The main kernel's shared memory, byte offsets from its 1024-aligned
  /// base: K and V; per stage Q and dO (stageBytes apart), then dS^T
  /// [block_n][block_m]; per stage the query rows' LSE and D (f32,
  /// smallStageBytes apart); the dQ staging rows (f32 [block_m][d],
  /// dqRowBytes apart); an mbarrier per stage; with a mask_mod, each
  /// warp's staged query reads (4 bytes per query row of a step). `bytes`
  /// is what a block asks for, the alignment slack included.
  struct SharedLayout {
    int64_t kOff, vOff, qOff, doOff, stageBytes, dsOff, lseOff, dOff,
        smallStageBytes, dqOff, dqRowBytes, barOff, maskOff, bytes;
    static SharedLayout of(const AttentionSpec &spec,
                           const TileConfig &config);
  };

  /// Whether the template builds the spec for the target: sm_90a, head
  /// dim 64 or 128, f16/bf16; of those, every spec the backward supports
  /// (MmaSyncBackward::supports), varlen ones too: a block narrows to its
  /// sequence's rows (the grid's z is the sequence).
  static llvm::Error supports(const AttentionSpec &spec, const Target &target);
  static llvm::Error checkConfig(const AttentionSpec &spec,
                                 const TileConfig &config);
  static TemplateResources resources(const AttentionSpec &spec,
                                     const TileConfig &config);
  static std::vector<TileConfig> candidates(const AttentionSpec &spec);
  static TileConfig defaultConfig(const AttentionSpec &spec);
  /// Emits the main kernel `name` (BackwardMainArgs; the deterministic
  /// variant takes the turn counters next, then the maps and the mods'
  /// captured tensors) with the spec's mods (their score_grad region
  /// where there is a score_mod); the config has passed checkConfig.
  static void buildMain(mlir::OpBuilder &builder, mlir::Location loc,
                        const AttentionSpec &spec, const TileConfig &config,
                        llvm::StringRef name, const ModRegions &mods);
};

} // namespace flashjit

#endif
