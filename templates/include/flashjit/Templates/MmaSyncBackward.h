//===- MmaSyncBackward.h - the backward pass on mma.sync (sm_80+) -*- C++
//-*-===//
// Why: training needs dQ, dK and dV. FlashAttention-2's backward recomputes
// the score tiles from Q, K, V and the forward's log-sum-exp instead of
// storing the N x N probabilities, so memory stays O(N). It is three
// kernels, built together from one description into one module:
//
//   preprocess  D = rowsum(dO * O) per query row (f32 workspace), and the
//               f32 dQ accumulator zeroed;
//   main        one block per (key block, KV head, batch): K and V stay in
//               shared memory; for each query head of the GQA group and
//               each query block it recomputes S = Q K^T and
//               P = exp(S * scale - LSE), keeps dV += P^T dO and
//               dK += dS^T Q on chip (dS = P * (dP - D), dP = dO V^T) and
//               adds dS K into the f32 dQ workspace with atomics;
//   convert     dQ = scale * workspace, rounded to f16/bf16.
//
// The deterministic variant (family mma_sync_bwd_det, same tile sizes)
// makes dQ bitwise reproducible: the blocks that add into one (batch,
// query head, query block) of the accumulator take turns in a fixed order
// (highest key block first), kept by an i32 counter per query block in
// the workspace (BackwardDqTurns.cpp says how and what it assumes).
//
// This header is the contract between the generated kernels and the
// runtime: their parameter lists, grids and the workspace layout.
#ifndef FLASHJIT_TEMPLATES_MMASYNCBACKWARD_H
#define FLASHJIT_TEMPLATES_MMASYNCBACKWARD_H

#include "flashjit/Dialect/AttentionSpec.h"
#include "flashjit/Templates/KernelABI.h"
#include "flashjit/Templates/KernelTemplate.h"
#include "flashjit/Templates/Target.h"
#include "flashjit/Templates/TileConfig.h"

#include "llvm/Support/Error.h"
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mlir {
class OpBuilder;
class Location;
} // namespace mlir

namespace flashjit {

/// The entry symbols of the three backward kernels of `base` (a spec's
/// kernel name): base_bwd_pre, base_bwd, base_bwd_dq.
struct BackwardKernelNames {
  std::string preprocess, main, convert;
  static BackwardKernelNames of(llvm::StringRef base);
};

/// How the f32 dQ accumulator lays out the rows of one (batch, head): row
/// r starts at float ((batch * heads + head) * rowsPerHead(seqlen_q) + r)
/// * rowFloats. mma_sync families: dense rows (rowFloats = head_dim,
/// rowMultiple 1). wgmma families: each row padded like the kernel's
/// shared staging rows and the rows rounded up to block_m, so that a query
/// block's rows are one contiguous range of the workspace, added by one
/// bulk reduction. The padding takes additions but is never read. A
/// varlen spec's query blocks start at any packed row (a sequence's first
/// row plus a multiple of block_m), so each head's rows end with
/// `extraRows` (block_m) more: the last sequence's last block lies inside
/// them.
struct DqAccumLayout {
  int64_t rowFloats = 0, rowMultiple = 1, extraRows = 0;
  static DqAccumLayout of(const AttentionSpec &spec, const TileConfig &config);
  uint64_t rowsPerHead(int64_t seqlenQ) const {
    return static_cast<uint64_t>((seqlenQ + rowMultiple - 1) / rowMultiple *
                                     rowMultiple +
                                 extraRows);
  }
};

/// The f32 workspace of one backward call, in this order (each part 256-
/// byte aligned): D [batch, heads, seqlen_q] and the dQ accumulator
/// (DqAccumLayout), both contiguous; for a
/// deterministic config also the turn counters, i32 [batch, heads,
/// ceil(seqlen_q / block_m)] (turnsOffset 0 otherwise). The preprocess
/// kernel writes D and zeroes the accumulator and the counters.
struct BackwardWorkspaceLayout {
  uint64_t dOffset = 0, dqAccumOffset = 0, turnsOffset = 0, totalBytes = 0;
  static BackwardWorkspaceLayout of(const AttentionSpec &spec,
                                    const TileConfig &config, int64_t batch,
                                    int64_t seqlenQ);
};

/// Parameters of the preprocess kernel: O and dO [batch, heads, seqlen_q,
/// head_dim] with (batch, head, row) strides in elements, D and the dQ
/// accumulator (workspace), which it zeroes; the deterministic kernel
/// takes the turn counters last and zeroes them too. (The driver reads as
/// many parameters as the kernel declares, so one list serves both.)
struct BackwardPreprocessArgs {
  const void *o = nullptr, *dO = nullptr;
  float *d = nullptr, *dqAccum = nullptr;
  std::array<int64_t, 3> oStrides{}, dOStrides{};
  int32_t seqlenQ = 0;
  int32_t *turns = nullptr;
  static constexpr unsigned kNumParams = 4 + 6 + 1 + 1;
  std::array<void *, kNumParams> paramPointers();
};

/// Parameters of the main kernel. Q, dO [batch, heads, seqlen_q, d]; K,
/// V, dK, dV [batch, kv_heads, seqlen_k, d]; LSE f32 [batch, heads,
/// seqlen_q] (the forward's, natural log); D and dQ accumulator from the
/// workspace. Strides in elements, (batch, head, row). The deterministic
/// kernel takes the turn counters next; the wgmma kernels then take the
/// TMA maps of Q and dO by value (boxes of block_m rows x 64 columns,
/// 128-byte swizzle), which the runtime appends; last come the spec's
/// captured tensors and a block-sparse spec's transposed block mask (the
/// forward's variant parameters, KernelABI.h, with the lists of
/// BackwardArgs::blockMask).
struct BackwardMainArgs {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *dO = nullptr;
  void *dk = nullptr, *dv = nullptr;
  const float *lse = nullptr, *d = nullptr;
  float *dqAccum = nullptr;
  std::array<int64_t, 3> qStrides{}, kStrides{}, vStrides{}, dOStrides{},
      dkStrides{}, dvStrides{}, lseStrides{};
  int32_t seqlenQ = 0, seqlenK = 0;
  /// softmax scale * log2(e), and the softmax scale.
  float scaleLog2 = 0, scale = 0;
  int32_t *turns = nullptr;
  static constexpr unsigned kNumParams = 9 + 21 + 4 + 1;
  std::array<void *, kNumParams> paramPointers();
};

/// Parameters of the convert kernel: the dQ accumulator (workspace), dQ
/// [batch, heads, seqlen_q, d] with strides in elements, the scale.
struct BackwardConvertArgs {
  const float *dqAccum = nullptr;
  void *dq = nullptr;
  std::array<int64_t, 3> dqStrides{};
  int32_t seqlenQ = 0;
  float scale = 0;
  static constexpr unsigned kNumParams = 2 + 3 + 2;
  std::array<void *, kNumParams> paramPointers();
};

/// Threads of one block of the preprocess and convert kernels.
constexpr unsigned kBackwardAuxThreads = 128;

/// The backward kernels' grids. Main: (ceil(seqlen_k / block_n), kv_heads,
/// batch), warps * 32 threads, the config's shared memory (the
/// deterministic kernel takes key block ceil(seqlen_k / block_n) - 1 - x,
/// so the first in each (batch, KV head) to add is launched first).
/// Preprocess and
/// convert: kBackwardAuxThreads threads, no dynamic shared memory.
struct BackwardGeometry {
  LaunchGeometry preprocess, main, convert;
  static BackwardGeometry of(const AttentionSpec &spec,
                             const TileConfig &config, int64_t batch,
                             int64_t seqlenQ, int64_t seqlenK);
};

/// The sm_80+ backward template, and the backward's entry for the runtime:
/// checkConfig, resources and build also take the sm_90a family
/// "wgmma_bwd" (WgmmaBackward.h), which shares the kernels' ABI, grid and
/// workspace. A config names family "mma_sync_bwd":
/// block_n key rows per block (16 per warp and column part, so warps =
/// block_n / 16 x kvColumnParts: 2 at head dim 256, where each of two
/// warps keeps half of a key tile's dK and dV columns),
/// block_m query rows per inner step (16 to block_n), stages 1 or 2 (2:
/// the next step's Q, dO, LSE and D load during this one). Family
/// "mma_sync_bwd_det" takes the same tile sizes and builds the
/// deterministic variant.
class MmaSyncBackward {
public:
  static llvm::StringRef family() { return "mma_sync_bwd"; }
  static llvm::StringRef deterministicFamily() { return "mma_sync_bwd_det"; }
  /// Whether `config` names a deterministic variant (mma_sync_bwd_det or
  /// wgmma_bwd_det).
  static bool isDeterministic(const TileConfig &config);
  /// `config`'s tile sizes in the family of the variant asked for (of
  /// its own template: mma_sync_bwd or wgmma_bwd).
  static TileConfig withVariant(TileConfig config, bool deterministic);
  static constexpr int minComputeCapability() { return 80; }
  /// Key rows each warp owns (one m16 tile).
  static constexpr int64_t kKeyRowsPerWarp = 16;
  static std::vector<int64_t> headDims() { return {64, 96, 128, 256}; }
  /// The parts dK and dV's columns are split into, one warp each per 16
  /// key rows: a warp's dK and dV (head dim / 2 f32 per thread each) fit
  /// its registers up to head dim 128; at 256 two warps share a key tile
  /// (each computes half of its S^T and dP^T columns, and they exchange
  /// P^T and dS^T through shared memory).
  static int64_t kvColumnParts(const AttentionSpec &spec) {
    return spec.headDim > 128 ? 2 : 1;
  }

  /// Whether the backward can be built for this spec and target: head dim
  /// in headDims(), sm_80 or newer, dense or causal attention (either
  /// alignment), sliding windows, score_mod and mask_mod, block masks
  /// (checkConfig refuses the deterministic family with a block mask, and
  /// tiles that do not divide the mask's block).
  static llvm::Error supports(const AttentionSpec &spec, const Target &target);
  static llvm::Error checkConfig(const AttentionSpec &spec,
                                 const TileConfig &config);
  /// checkConfig, and for a wgmma_bwd config whether that template builds
  /// the spec for the target (WgmmaBackward::supports).
  static llvm::Error checkConfig(const AttentionSpec &spec,
                                 const TileConfig &config,
                                 const Target &target);
  /// Threads and shared memory of the main kernel's block.
  static TemplateResources resources(const AttentionSpec &spec,
                                     const TileConfig &config);
  /// The configs it builds for the spec, the default first (family
  /// mma_sync_bwd; withVariant gives the deterministic ones).
  static std::vector<TileConfig> candidates(const AttentionSpec &spec);
  static TileConfig defaultConfig(const AttentionSpec &spec);
  /// The backward's configs for the target: the wgmma_bwd ones first where
  /// that template builds the spec (WgmmaBackward.h), then candidates().
  static std::vector<TileConfig> candidates(const AttentionSpec &spec,
                                            const Target &target);
  /// The backward's default for the target: wgmma_bwd's where that
  /// template builds the spec, else defaultConfig(spec).
  static TileConfig defaultConfig(const AttentionSpec &spec,
                                  const Target &target);
  /// The KernelInfo of the main kernel (its name, config, threads, shared
  /// memory); the runtime finds the other two by BackwardKernelNames.
  static KernelInfo mainKernelInfo(const AttentionSpec &spec,
                                   const TileConfig &config,
                                   llvm::StringRef baseName);

  /// Checks, then emits the three kernels of `baseName` at the builder's
  /// insertion point (inside a gpu.module), with the spec's mods (a
  /// score_mod needs its score_grad region).
  static llvm::Error build(mlir::OpBuilder &builder, mlir::Location loc,
                           const AttentionSpec &spec, const TileConfig &config,
                           llvm::StringRef baseName,
                           const ModRegions &mods = {});
};

} // namespace flashjit

#endif
