//===- DecodeKernel.h - Flash-Decoding: split-KV attention for few queries -*-
//C++ -*-===//
// Why: a decode step has 1 to 16 query tokens per sequence against a long
// KV cache, so the forward kernels (one block per block_m query rows) would
// start a handful of blocks and read the cache at a fraction of the GPU's
// bandwidth. The decode kernels instead start one block per (batch, KV
// head, split of the KV length): the query heads of one KV group times the
// query tokens are the rows of one tile (each K/V byte is read once per
// group), each block writes a partial O and LSE for its keys, and a combine
// kernel merges the splits exactly by their log-sum-exp.
//
// This header is the contract between the generator (templates/lib/decode)
// and the runtime (flashjit/Decode.h): the spec, the tiling derived from
// it, the kernels' parameters and grids, and the rule that picks the
// number of splits.
#ifndef FLASHJIT_TEMPLATES_DECODEKERNEL_H
#define FLASHJIT_TEMPLATES_DECODEKERNEL_H

#include "flashjit/Dialect/AttentionSpec.h"
#include "flashjit/Templates/KernelABI.h"
#include "flashjit/Templates/TileConfig.h"

#include "llvm/Support/Error.h"
#include <array>
#include <cstdint>
#include <string>

namespace mlir {
class OpBuilder;
class Location;
} // namespace mlir

namespace flashjit {

/// What one decode kernel computes. Q is [batch, qLen, heads, headDim], the
/// K/V cache [batch, capacity, kvHeads, headDim] (contiguous) or
/// [pages, pageSize, kvHeads, headDim] with a block table (paged), each
/// sequence with its own KV length (i32 [batch], on the GPU).
struct DecodeSpec {
  int64_t headDim = 128; ///< 64, 128 or 256
  DType dtype = DType::BF16;
  int64_t numHeads = 32, numKVHeads = 8;
  /// Query tokens per sequence, 1 to 16 (speculative decoding verifies
  /// several). They are the last qLen positions of the sequence.
  int64_t qLen = 1;
  /// Bottom-right causal alignment: query token i of n sees keys
  /// [0, kvLen - n + i]. False: every token sees all kvLen keys.
  bool causal = true;
  /// Tokens per page of a paged cache, 16 to 256; 0: contiguous cache.
  int64_t pageSize = 0;
  /// Tile overrides (autotuning; 0: decodeTiling's choice): keys per K/V
  /// tile (32, 64 or 128; each warp's share a multiple of 16) and cp.async
  /// buffers (2 to 8), within 227 KiB of shared memory.
  int64_t blockN = 0, stages = 0;
  /// L2 prefetch of the K/V copies (PTX .L2::NB, PTX ISA 7.4 and later;
  /// none for older targets): 0 the default (kDecodeL2Prefetch), -1 none,
  /// or 64, 128, 256 bytes.
  int64_t l2Prefetch = 0;
  /// How K/V tiles reach shared memory: 0 the target's default
  /// (decodeBulkCopyDefault), 1 per-thread 16-byte cp.async, 2 one bulk
  /// copy (cp.async.bulk, completing on an mbarrier) per key row, issued
  /// by one warp (sm_90 and newer).
  int64_t copyMode = 0;
  /// L2 eviction priority of the streamed K/V: 0 the default
  /// (decodeUsesEvictFirst), -1 normal, 1 evict_first (each byte is read
  /// once; keeping it out of the way of the partials and of other work).
  int64_t evictFirst = 0;

  /// Head dim 64, 128 or 256, heads positive and a multiple of KV heads, qLen
  /// in [1, 16], page size 0 or in [16, 256], overrides that tile; the
  /// error says which.
  llvm::Error validate() const;
  int64_t groupSize() const { return numHeads / numKVHeads; }
  bool paged() const { return pageSize > 0; }
  /// "decode;d=128;dtype=bf16;hq=32;hkv=8;q=1;causal=1;page=0" (and
  /// ";n=..;s=.." with overrides): what the
  /// kernel computes, the spec part of its cache key (distinct from every
  /// forward spec, which starts with "fwd").
  std::string canonical() const;
  /// "flashjit_decode_d128_bf16_h32_kv8_q1_c1_p0" (the combine kernel
  /// appends "_combine").
  std::string kernelName() const;
  /// The attention of one row (head dim, dtype, heads, causal from the
  /// bottom right): what the shared fragment pieces read.
  AttentionSpec attentionSpec() const;
  double defaultScale() const;
};

/// How the split kernel tiles its work, derived from the spec alone (the
/// kernel's "config"; TileConfig() names it in the cache key).
///
/// A block owns `headsPerBlock` query heads of one KV group for all qLen
/// tokens: rows = headsPerBlock x qLen (row r is token r / headsPerBlock,
/// head r % headsPerBlock of the chunk), at most 128, padded to m16 tiles.
/// Its 4 warps form warpsM x warpsN: warpsM split the rows (one or two m16
/// tiles each), warpsN split the keys of each K/V tile of blockN keys; the
/// warps of one row group merge their partial softmax through shared
/// memory at the end. K/V tiles stream through `stages` cp.async buffers.
struct DecodeTiling {
  int64_t headsPerBlock = 1, headChunks = 1;
  int64_t rows = 1, rowsPadded = 16;
  int64_t warpsM = 1, warpsN = 4, mTilesPerWarp = 1;
  int64_t blockN = 64, keysPerWarp = 16;
  int64_t stages = 3;
  int64_t warps = 4;
  /// Blocks per SM the split rule plans a wave for (chooseDecodeSplits'
  /// residentBlocks, as DecodeKernel::ruleSplits caps them); 0: as many
  /// as the occupancy allows.
  int64_t splitBlocksPerSM = 0;

  /// The shared rows' layout (mma_sync::Builder::swizzledRows): unpadded
  /// rows with swizzled 16-byte chunks for cp.async copies, padded rows
  /// (head dim + 8, as mma_sync's) where the K/V tiles may be bulk copies.
  bool swizzledRows = true;

  int64_t threads() const { return warps * 32; }
  /// Elements per shared row.
  int64_t rowElems(int64_t headDim) const {
    return swizzledRows ? headDim : headDim + 8;
  }
  /// Bytes of dynamic shared memory: the Q tile, then `stages` buffers of
  /// a K tile and a V tile (the warps' merge reuses the buffers), then one
  /// 8-byte mbarrier per stage (used by bulk copies).
  unsigned sharedBytes(const DecodeSpec &spec) const;
  /// Byte offset of the first stage's mbarrier.
  int64_t barrierOffset(const DecodeSpec &spec) const;
  /// family "decode" (or "decode_paged"), block_m rowsPadded, block_n,
  /// stages, warps.
  TileConfig config(const DecodeSpec &spec) const;
};
DecodeTiling decodeTiling(const DecodeSpec &spec);

/// The split kernel's parameters, in order (the gpu.func signature).
/// Strides are in elements. Q and O: (batch, token, head); K and V:
/// contiguous (batch, head, row), paged (page, head, row within the page);
/// LSE: (batch, head, token). The block table is i32 [batch, >= pages of
/// the longest sequence] with `blockTableStride` between sequences.
struct DecodeKernelArgs {
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  void *o = nullptr;
  float *lse = nullptr;
  /// Partials, used when numSplits > 1: O [batch, heads, qLen, splits,
  /// headDim] and LSE (base 2) [batch, heads, qLen, splits], f32.
  float *oPartial = nullptr, *lsePartial = nullptr;
  const int32_t *kvLens = nullptr, *blockTable = nullptr;
  std::array<int64_t, 3> qStrides{}, kStrides{}, vStrides{}, oStrides{},
      lseStrides{};
  int64_t blockTableStride = 0;
  /// Tokens a sequence can hold (contiguous: the cache's length; paged:
  /// block-table columns x page size): lengths are clamped to it.
  int32_t kvCapacity = 0;
  /// Pages in the pool (paged): a page id outside [0, numPages) reads
  /// zeros instead of memory. Unused for a contiguous cache.
  int32_t numPages = 0;
  int32_t numSplits = 1;
  /// softmax scale * log2(e).
  float scaleLog2 = 0;

  static constexpr unsigned kNumParams = 9 + 15 + 1 + 4;
  std::array<void *, kNumParams> paramPointers();
};

/// The combine kernel's parameters: the partials, O and LSE as above,
/// rows = batch x heads x qLen, and the splits.
struct DecodeCombineArgs {
  const float *oPartial = nullptr, *lsePartial = nullptr;
  void *o = nullptr;
  float *lse = nullptr;
  std::array<int64_t, 3> oStrides{}, lseStrides{};
  int32_t rows = 0;
  int32_t numSplits = 1;

  static constexpr unsigned kNumParams = 4 + 6 + 2;
  std::array<void *, kNumParams> paramPointers();
};

/// The L2 prefetch of the K/V copies when DecodeSpec::l2Prefetch is 0:
/// none, as measured in docs/inference.md (the hint is a tuning knob
/// until a measurement on each GPU says which size to default to).
constexpr int64_t kDecodeL2Prefetch = 0;

/// Whether a copyMode-0 kernel for compute capability `cc` copies its K/V
/// tiles in bulk (cp.async.bulk needs sm_90; the choice, measured, is in
/// DecodeConfig.cpp and docs/inference.md).
bool decodeBulkCopyDefault(int computeCapability);
/// Whether the K/V copies of `spec` for `cc` are bulk copies.
bool decodeUsesBulkCopy(const DecodeSpec &spec, int computeCapability);
/// Whether the K/V loads of `spec` carry the L2 evict_first hint
/// (DecodeSpec::evictFirst, or the measured default when it is 0).
bool decodeUsesEvictFirst(const DecodeSpec &spec, int computeCapability);

/// Threads of a combine block; each warp merges one (batch, head, token).
constexpr unsigned kDecodeCombineThreads = 128;
/// Splits the kernels accept at most.
constexpr int64_t kMaxDecodeSplits = 256;

/// Split kernel grid: (numSplits x headChunks, kvHeads, batch); the head
/// chunks of one split are adjacent, so they read the same keys from L2.
LaunchGeometry decodeGeometry(const DecodeSpec &spec, int64_t batch,
                              int64_t numSplits);
/// Combine kernel grid: one warp per (batch, head, token).
LaunchGeometry decodeCombineGeometry(const DecodeSpec &spec, int64_t batch);

/// The number of splits of the KV length (the documented rule, as
/// FlashAttention-2's): `work` = batch x kvHeads x headChunks blocks
/// without splitting. When they fill 80% of a wave of `residentBlocks`
/// (the blocks the GPU holds at once; DecodeKernel caps them at
/// DecodeTiling::splitBlocksPerSM per SM), 1. Otherwise s = residentBlocks /
/// work (rounded down; one wave holds every block), at most
/// kMaxDecodeSplits and the tiles of the longest sequence, then lowered
/// to the fewest splits with the same tiles per split. `splitWaves` > 1
/// (a tuning knob) aims at that many waves instead of one.
int64_t chooseDecodeSplits(const DecodeSpec &spec, int64_t batch,
                           int64_t maxKvLen, int64_t residentBlocks,
                           int64_t splitWaves = 1);

/// f32 elements of the partial O and LSE for `numSplits` (0 when 1).
int64_t decodeWorkspaceFloats(const DecodeSpec &spec, int64_t batch,
                              int64_t numSplits);

/// KernelInfo of the split kernel (the combine kernel is kernelName() +
/// "_combine" in the same module).
KernelInfo decodeKernelInfo(const DecodeSpec &spec);

/// Emits the split kernel and the combine kernel of `spec` at the
/// builder's insertion point (inside a gpu.module), for PTX ISA
/// `ptxVersion` (e.g. 80; the L2 prefetch and cache hints need 74 or later
/// and are left out below) and compute capability `computeCapability`
/// (e.g. 90). Errors: a spec that fails validate(), bulk copies asked of
/// a target before sm_90.
llvm::Error buildDecodeKernels(mlir::OpBuilder &builder, mlir::Location loc,
                               const DecodeSpec &spec, int ptxVersion,
                               int computeCapability);

} // namespace flashjit

#endif
