//===- DecodeBuilder.h - IR builder of the decode kernels ---------*- C++
//-*-===//
// Why: the decode kernels are made of the mma_sync template's pieces (tile
// copies, ldmatrix, mma.sync) and the shared fragment softmax; this class
// adds what is decode's own: the packed (token, head) rows, the split of
// the KV length, paged K/V rows, the merge of the warps that split a tile's
// keys, and the partial/combine epilogues. DecodeSplitKernel.cpp has the
// split kernel, DecodeCombineKernel.cpp the combine kernel.
#ifndef FLASHJIT_TEMPLATES_DECODE_DECODEBUILDER_H
#define FLASHJIT_TEMPLATES_DECODE_DECODEBUILDER_H

#include "../MmaSyncBuilder.h"

#include "flashjit/Templates/DecodeKernel.h"

namespace flashjit::decode {

using mlir::Location;
using mlir::OpBuilder;
using mlir::SmallVector;
using mlir::StringRef;
using mlir::Type;
using mlir::Value;
using mlir::ValueRange;
using mlir::VectorType;
using mma_sync::kAccPerTile;
using mma_sync::LaneTile;
using mma_sync::Pred;

/// The split kernel's parameters (DecodeKernelArgs) as IR values; the i32
/// scalars widened to i64.
struct DecodeParams {
  Value q, k, v, o, lse, oPartial, lsePartial, kvLens, blockTable;
  SmallVector<Value, 3> qStrides, kStrides, vStrides, oStrides, lseStrides;
  Value blockTableStride, kvCapacity, numPages, numSplits, scaleLog2;
};

/// A paged K/V tile's pages, read from the block table once for K and V
/// and ahead of the copies (the split kernel reads them before it waits
/// for the tile in work, so the reads' latency hides behind that wait).
/// This holds where a tile starts on a page boundary and a thread's rows
/// (tid / chunksPerRow + i * rowsPerRound) fall on the same page slots in
/// every tile: the tile a whole number of pages (blockN % pageSize == 0)
/// whose size a whole number of rounds (pageSize % rowsPerRound == 0), or
/// the page a whole number of tiles. `page[s]` is slot s's page id (i64,
/// 0 where outside the pool), `inPool[s]` whether it was inside. Slots
/// past the sequence read the table at its last key. Empty: each row
/// reads the table itself.
struct TilePages {
  SmallVector<Value> page, inPool;
  /// Rows per slot; a slot of the whole tile when the page holds it.
  int64_t slotRows = 0;
  bool empty() const { return page.empty(); }
};

/// One thread's share of a row group's softmax state after the KV loop:
/// per row state (m tile, row half) the max in base 2 (scaled) and the row
/// sum (reduced over the quad), and the O accumulators.
struct RowsState {
  SmallVector<Value> maxBase2, sum, acc;
};

class Builder : public mma_sync::Builder {
public:
  /// `attention` and `config` must outlive the builder.
  Builder(OpBuilder &b, mlir::Location loc, const DecodeSpec &spec,
          const AttentionSpec &attention, const TileConfig &config,
          const DecodeTiling &tiling)
      : mma_sync::Builder(b, loc, attention, config, /*withSoftmax=*/true,
                          tiling.swizzledRows),
        dspec(spec), tiling(tiling) {
    l2PrefetchBytes = spec.l2Prefetch == 0  ? kDecodeL2Prefetch
                      : spec.l2Prefetch < 0 ? 0
                                            : spec.l2Prefetch;
  }

  void emitSplitKernel(StringRef name);
  void emitCombineKernel(StringRef name);
  using mma_sync::Builder::l2PrefetchBytes;
  /// K/V tiles by bulk copies on per-stage mbarriers (sm_90 and newer)
  /// instead of per-thread cp.async.
  bool bulk = false;
  /// The K/V loads carry an L2 evict_first policy (PTX ISA 7.4 and later).
  bool evictFirst = false;

private:
  DecodeParams beginSplitKernel(StringRef name);
  /// The Q rows of this block (token r / headsPerBlock, head headBase + r
  /// % headsPerBlock) into the shared Q tile; padding rows are zero.
  void copyQueries(const DecodeParams &p, Value batch, Value headBase);
  /// Keys [firstKey, firstKey + blockN) of `base` (K or V) into the tile at
  /// `tileOffset`; keys at or past kvLen are zero-filled.
  void copyKeys(const DecodeParams &p, Value base, ValueRange strides,
                Value batch, Value kvHead, Value firstKey, Value kvLen,
                Value tileOffset, const TilePages &pages);
  /// copyKeys through the block table: key n sits at row n % pageSize of
  /// page blockTable[batch][n / pageSize]; a page id outside the pool
  /// reads zeros. With `pages` (tilePages of the same tile), the table is
  /// not read here.
  void copyPagedKeys(const DecodeParams &p, Value base, ValueRange strides,
                     Value batch, Value kvHead, Value firstKey, Value kvLen,
                     Value tileOffset, const TilePages *pages);
  /// The page of key `key` (i64, within the sequence's pages) from the
  /// sequence's row `table` of the block table: its id (i64; 0 where the
  /// id lies outside the pool, so that an address from it stays inside)
  /// and whether it lies inside.
  struct TablePage {
    Value page, inPool;
  };
  TablePage tablePage(const DecodeParams &p, Value table, Value key);
  /// The block-table reads of the tile at `firstKey`, where every tile's
  /// rows fall on its pages alike (TilePages); empty otherwise.
  TilePages tilePages(const DecodeParams &p, Value batch, Value firstKey,
                      Value kvLen);
  /// Merges the partial softmax of the warpsN warps of each row group
  /// (exact, by their maxima) into the warps with wn = 0, through shared
  /// memory at `scratchOffset`; returns, for those, the merged state.
  RowsState mergeWarps(const RowsState &mine, Value warp, Value wn, Value lane,
                       int64_t scratchOffset);
  /// Writes the merged rows: O and LSE when there is one split, else the
  /// split's partial O and base-2 LSE.
  void storeRows(const DecodeParams &p, const RowsState &rows, Value batch,
                 Value headBase, Value split, Value wm, Value quadRow,
                 Value quadCol);
  // ---- bulk copies (DecodeBulkCopy.cpp) ----------------------------------
  /// createpolicy's L2 evict_first policy (an i64 for .L2::cache_hint).
  Value evictFirstPolicy();
  /// The mbarrier of stage `slot` (i64) as a shared pointer.
  Value stageBarrier(Value slot);
  /// Thread 0 initializes the stages' mbarriers (32 arrivals: the lanes of
  /// the copying warp) and fences the initialization; the caller's
  /// barrier makes it visible to the block.
  void initStageBarriers();
  /// Waits until the copies of tile `j` (i64) have landed in its stage.
  void waitStage(Value j);
  /// Warp 0 only: keys [firstKey, firstKey + blockN) of K and V into stage
  /// `slot` (i64), one bulk copy per key row completing on the stage's
  /// mbarrier. Rows past kvLen copy the sequence's last key (finite, and
  /// masked out of the scores); a paged row whose page id is outside the
  /// pool is zero-filled by plain stores instead.
  void bulkCopyTile(const DecodeParams &p, Value batch, Value kvHead,
                    Value firstKey, Value kvLen, Value slot);

  Value loadF32(Value address);
  void storeF32(Value value, Value address);
  Value sharedF32Address(Value byteOffset);

  const DecodeSpec &dspec;
  const DecodeTiling &tiling;
};

} // namespace flashjit::decode

#endif
