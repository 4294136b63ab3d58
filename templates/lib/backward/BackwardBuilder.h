//===- BackwardBuilder.h - IR builders of the backward kernels ---*- C++ -*-===//
// Why: the main backward kernel is made of the mma_sync template's pieces
// (cp.async tile copies, ldmatrix, mma.sync m16n8k16, packing) in a new
// schedule, so its builder derives from that template's builder; the
// wgmma one (WgmmaBackwardMain.cpp) shares its parameters; the two small
// kernels around them (preprocess, convert) need only KernelIR.
#ifndef FLASHJIT_TEMPLATES_BACKWARD_BACKWARDBUILDER_H
#define FLASHJIT_TEMPLATES_BACKWARD_BACKWARDBUILDER_H

#include "../MmaSyncBuilder.h"
#include "../ScoreMods.h"

#include "flashjit/Templates/MmaSyncBackward.h"

namespace flashjit::backward {

using mlir::ArrayRef;
using mlir::Location;
using mlir::OpBuilder;
using mlir::SmallVector;
using mlir::StringRef;
using mlir::Value;
using mlir::ValueRange;

/// The main kernel's parameters (BackwardMainArgs) as IR values, seqlens
/// widened to i64.
struct MainParams {
  Value q, k, v, dO, dk, dv, lse, d, dqAccum;
  SmallVector<Value, 3> qStrides, kStrides, vStrides, dOStrides, dkStrides,
      dvStrides, lseStrides;
  Value seqlenQ, seqlenK, scaleLog2, scale;
  /// The turn counters (deterministic variant only; null otherwise).
  Value turns;
  /// The TMA maps of Q and dO (by-value parameters; wgmma kernels only).
  SmallVector<Value, 2> tensorMaps;
  /// What the mods read: the captured tensors (KernelABI.h's variant
  /// parameters) and scaleLog2, in the forward's form (ScoreMods); a
  /// varlen kernel's offsets.
  ForwardParams variant;
  /// Varlen, once narrowToSequence has run: the launch's packed query rows
  /// (D and the dQ accumulator lay them out as one sequence of batch 1)
  /// and the first packed row of the block's sequence in Q (i64). Null
  /// otherwise.
  Value packedRowsQ, qRowBase;
};
/// Creates the main kernel `name` (BackwardMainArgs, with the turn
/// counters when `deterministic`, then the tensor maps of Q and dO when
/// `withTensorMaps`, then the captured tensors of the spec's mods) of
/// `threads` threads and moves the insertion point into its body.
MainParams beginMainKernel(KernelIR &ir, StringRef name, int64_t threads,
                           bool deterministic, bool withTensorMaps = false);
/// A varlen main kernel (launched with the packed lengths as seqlens, the
/// sequences' offsets last and one grid z per sequence) narrowed to
/// sequence `batch`: its rows of the packed Q, dO, LSE and of K, V, dK, dV
/// (each clamped to the packed lengths, as KernelIR::sequenceRows does)
/// become the seqlens and the tensors' bases (batch strides 0).
void narrowToSequence(KernelIR &ir, MainParams &p, Value batch);
/// Element `row` (i64) of (batch, head) in the [batch, heads, seqlen_q]
/// layout of D in the workspace.
Value workspaceRow(KernelIR &ir, Value seqlenQ, Value batch, Value head,
                   Value row);
/// The same for the main kernel's query row `row` of (batch, head): of the
/// packed rows once narrowToSequence has run.
Value workspaceRow(KernelIR &ir, const MainParams &p, Value batch, Value head,
                   Value row);
/// The first element of row `row` (i64) of (batch, head) in the dQ
/// accumulator (DqAccumLayout).
Value dqAccumRow(KernelIR &ir, const DqAccumLayout &layout, Value seqlenQ,
                 Value batch, Value head, Value row);
/// The same for the main kernel's query row `row`, as workspaceRow.
Value dqAccumRow(KernelIR &ir, const DqAccumLayout &layout,
                 const MainParams &p, Value batch, Value head, Value row);

/// The steps of a main kernel's loop: every (query head of the GQA group,
/// query block that the causal mask and the window leave visible to some
/// key of the block_n keys from n0), head-major; `count` of them (i64
/// values). Block-sparse, a query head's steps are instead the query
/// blocks its transposed lists give for the key block (partial ones, then
/// full ones, in tiles of block_m rows): an index out of range gives a
/// step past seqlen_q, all masked.
struct BackwardSteps {
  Value queryBlocks, firstBlock, blocks, count;
  Value kvHead;
  int64_t group = 1, blockM = 0;
  /// Block-sparse: each query head's list walk and the steps before it.
  SmallVector<KvTileRange> lists;
  SmallVector<Value> prefix;
  static BackwardSteps of(KernelIR &ir, const MainParams &p, Value batch,
                          Value kvHead, Value n0, Value diagonal,
                          int64_t blockM, int64_t blockN);
  /// The query head and the first query row of step t (i64).
  Value head(KernelIR &ir, Value t) const;
  Value firstRow(KernelIR &ir, Value t) const;
  /// Whether the mask_mod applies at step t (i1): on a partial block of
  /// a block-sparse mask; null (everywhere) otherwise.
  Value maskModApplies(KernelIR &ir, Value t) const;

private:
  /// Block-sparse: the list walk of step t's head, and its first step.
  std::pair<KvTileRange, Value> listOf(KernelIR &ir, Value t) const;
};
/// Starts the 4-byte cp.async of query row m0 + offset's LSE and D (f32)
/// of (batch, head) to the shared pointers lseDst and dDst; a row at or
/// past seqlen_q reads as zeros (m0 is below seqlen_q).
void copyRowStats(KernelIR &ir, const MainParams &p, Value batch, Value head,
                  Value m0, Value offset, Value lseDst, Value dDst);
/// The causal mask and the window of the spec in a backward tile: key j
/// is visible to query row i iff j - i <= right (hasRightBound: the
/// diagonal plus the right extent) and j - i >= left (hasLeftBound: the
/// diagonal minus the window's left extent); null where the spec has no
/// such bound.
struct WindowDiagonals {
  Value right, left;
  static WindowDiagonals of(KernelIR &ir, Value diagonal);
  /// needMask, or'ed with whether the tile of keys [n0, n0 + blockN) and
  /// query rows [m0, m0 + blockM) crosses a bound.
  Value orCrossed(KernelIR &ir, Value needMask, Value n0, int64_t blockN,
                  Value m0, int64_t blockM) const;
  /// For a key `offset` = key - (the first query row of a thread's
  /// columns) (i64): the first and the last column c (i32, clamped to
  /// [-1, columns]) that see the key, null where unbounded.
  std::pair<Value, Value> columns(KernelIR &ir, Value offset,
                                  int64_t columns) const;
};
/// The spec's score_mod and mask_mod on a thread's S^T accumulators
/// (BackwardMods.cpp): accumulator tile * 4 + 2 h + e holds key keys[h]
/// and query firstQuery + 8 tile + e (i64, unclamped) of (batch, head).
class BackwardMods {
public:
  BackwardMods(KernelIR &ir, const ModRegions &mods, const MainParams &p);
  bool hasScoreMod() const { return mods.hasScoreMod(); }
  bool hasMaskMod() const { return mods.hasMaskMod(); }

  struct Tile {
    Value batch, head;
    std::array<Value, 2> keys;
    Value firstQuery;
  };
  /// Replaces the dot products `s` by the score_mod's scores (in dot
  /// product units, as the forward's) and returns d score_mod / d score
  /// per accumulator, the factor of dS; none without a score_mod.
  SmallVector<Value> applyScoreMod(mlir::MutableArrayRef<Value> s,
                                   const Tile &tile);
  /// needMask (i1, the tile's structural masks) or'ed with whether the
  /// mask_mod must run on this tile: on every tile, or on a block mask's
  /// partial blocks (`maskModOn`, BackwardSteps::maskModApplies; null:
  /// every tile).
  Value orMaskModNeeded(Value needMask, Value maskModOn);
  /// Issues the mask_mod's captured-tensor reads for the tile's
  /// `accumulators` ahead of its scores (ScoreMods::readMaskAhead), only
  /// where `appliesHere` (null: everywhere). With `staging` (its scratch,
  /// lane and extent; slots and axis filled in here), a read of the query
  /// alone goes through the warp's shared scratch; `firstQuery` (i64) is
  /// then the tile's first query.
  ModReads readAhead(const Tile &tile, int64_t accumulators, Value appliesHere,
                     const IndexStaging *staging = nullptr,
                     Value firstQuery = {});
  /// The mask_mod of accumulator i (i1): true where the score is kept
  /// (and where `appliesHere`, if given, is false); with `reads`, the
  /// captured tensors' values come from readAhead().
  Value keep(const Tile &tile, int64_t i, Value appliesHere = {},
             const ModReads *reads = nullptr);

private:
  ModIndex query(const Tile &tile, int64_t i);
  ModIndex key(const Tile &tile, int64_t i);

  KernelIR &ir;
  const MainParams &p;
  ScoreMods mods;
};

/// How many of a thread's `columns` query columns are rows below
/// seqlen_q (i32): column c (query firstRow + laneColumn + c, i64 values)
/// is one iff c < seqlen_q - firstRow - laneColumn, clamped to [0,
/// columns].
Value queryColumnsBelow(KernelIR &ir, Value seqlenQ, Value firstRow,
                        Value laneColumn, int64_t columns);
/// `values` (f32), or `masked()` where needMask (i1, uniform) holds: the
/// mask's work only on the tiles that need it.
SmallVector<Value> maskWhere(KernelIR &ir, Value needMask,
                             ArrayRef<Value> values,
                             llvm::function_ref<SmallVector<Value>()> masked);
/// Writes dK = scale * dk and dV = dv of a block of `rows` key rows from
/// key n0 (i64), rows below seqlen_k, through shared memory. The thread's
/// accumulators are n8 tiles of four (rows keyRow + 8 h of the block,
/// columns `column` + {0, 1} of the row's 16-byte chunk firstChunk + t, at
/// t * 4 + 2 h + {0, 1}); they go to [rows][head_dim] tiles at byte
/// offsets dkTile and dvTile of shared memory (`sharedAt` makes the
/// pointer; chunk c of row r at chunk c ^ (r % 8) where rows hold a
/// multiple of 8 chunks, so the pairs a warp writes at once fall in
/// distinct banks); after a block barrier, thread `tid` of `threads` copies
/// 16-byte chunks out, a warp's 32 chunks contiguous in the tiles (the runtime's tensor checks make every row of dK and dV
/// 16-byte aligned). The caller makes sure no thread still reads the
/// tiles' bytes. Stored directly, the 4-byte pairs were 8 times the store
/// instructions, and with one block per SM the products wait for them.
void storeKeyRows(KernelIR &ir, const MainParams &p, Value batch,
                  Value kvHead, Value n0, int64_t rows, Value keyRow,
                  Value firstChunk, Value column, ArrayRef<Value> dk,
                  ArrayRef<Value> dv, llvm::function_ref<Value(Value)> sharedAt,
                  int64_t dkTile, int64_t dvTile, Value tid, int64_t threads);

// The deterministic variants' turns (BackwardDqTurns.cpp).
/// Key block of this block: highest first along blockIdx.x.
Value dqTurnKeyBlock(KernelIR &ir, Value keyBlocks);
struct DqTurn {
  Value counter; ///< address of the query block's counter
  Value ordinal; ///< i32: the counter's value when it is this block's turn
};
/// The turn of key block `keyBlock` at (batch, query head, query block)
/// for blocks of blockM query rows and blockN keys.
DqTurn dqTurn(KernelIR &ir, const MainParams &p, Value batch, Value head,
              Value queryBlock, Value queryBlocks, Value keyBlock,
              Value keyBlocks, Value diagonal, int64_t blockM, int64_t blockN);
/// Thread `tid` 0 (i64 or i32) spins until it is the block's turn; then
/// `barrier` publishes that (the threads that add).
void waitForDqTurn(KernelIR &ir, const DqTurn &turn, Value tid,
                   llvm::function_ref<void()> barrier);
/// After the block's additions (`barrier` first): the next block's turn.
void passDqTurn(KernelIR &ir, const DqTurn &turn, Value tid,
                llvm::function_ref<void()> barrier);

/// The main kernel (MmaSyncBackward.h): one block per (key block, KV
/// head, batch), warp w owning key rows [16 w, 16 w + 16) of the block
/// (at head dim 256, rows 16 (w mod block_n / 16) on and half the dK and
/// dV columns).
class MainKernelBuilder : public mma_sync::Builder {
public:
  MainKernelBuilder(OpBuilder &b, Location loc, const AttentionSpec &spec,
                    const TileConfig &config)
      : Builder(b, loc, spec, config, /*withSoftmax=*/true) {}

  void buildMain(StringRef name, const ModRegions &mods);

private:
  using Params = MainParams;
  /// Scores of this warp's key rows against the block's query columns
  /// (S^T = K Q^T, or dP^T = V dO^T): A from the warp's rows of a tile of
  /// [block_n][d], B from a tile of [block_m][d], both at lane addresses.
  SmallVector<Value> rowTimesColumns(Value aLane, Value bLane, int64_t nTiles);
  /// acc += X^T-tile products: A of each k16 step over the query
  /// dimension from aOf(step) (packed accumulators, or ldmatrix from shared
  /// memory), B by ldmatrix.trans from a [block_m][d] tile, `columns` of it
  /// from the lane address on.
  void accumulateOverQueries(
      llvm::function_ref<SmallVector<Value, 4>(int64_t)> aOf,
      Value bLaneTrans, int64_t columns, mlir::MutableArrayRef<Value> acc);
  /// f32 -> shared memory at byte offset `offset` (i64), and back.
  void storeShared(Value value, Value offset);
  Value loadShared(mlir::Type type, Value offset);
};

/// Emits the preprocess kernel: D = rowsum(dO * O) (BackwardPreprocessArgs).
/// turnBlockM > 0 (the deterministic variant's block_m): it also takes the
/// turn counters and zeroes them.
void buildPreprocessKernel(OpBuilder &b, Location loc,
                           const AttentionSpec &spec, StringRef name,
                           const DqAccumLayout &dqLayout, int64_t turnBlockM);
/// Emits the convert kernel: dQ = scale * accumulator (BackwardConvertArgs).
void buildConvertKernel(OpBuilder &b, Location loc, const AttentionSpec &spec,
                        StringRef name, const DqAccumLayout &dqLayout);

} // namespace flashjit::backward

#endif
