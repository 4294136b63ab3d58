//===- WgmmaBuilder.h - the wgmma template's IR builder ----------*- C++ -*-===//
// Why: the builder of the wgmma kernel is one class, on HopperIR's Hopper
// pieces (mbarriers, descriptors, wgmma issue and wait); its own TMA
// loads, clusters and products live in WgmmaInstructions.cpp, the producer
// in WgmmaProducer.cpp, the kernel's structure (its entry, the roles) in
// WgmmaForward.cpp and the consumers (the loop over K/V tiles) in
// WgmmaConsumer.cpp, their softmax step within the bound in
// WgmmaBoundedStep.cpp and their turns at the tensor cores in
// WgmmaTurns.cpp.
#ifndef FLASHJIT_TEMPLATES_WGMMABUILDER_H
#define FLASHJIT_TEMPLATES_WGMMABUILDER_H

#include "FragmentSoftmax.h"
#include "HopperIR.h"

#include "flashjit/Templates/TileConfig.h"
#include "flashjit/Templates/WgmmaForward.h"

namespace flashjit {
class FragmentSoftmax;
}

namespace flashjit::wgmma {

class Builder : public HopperIR {
public:
  /// `persistent`: one block per SM taking tiles from the launch's counter
  /// (PersistentTiles.cpp); otherwise one block per tile. `multicast`
  /// (persistent, no mask): clusters of WgmmaForward::kClusterSize blocks
  /// that take adjacent query blocks of one head in a fixed order and load
  /// each K/V tile once for all of them.
  Builder(OpBuilder &b, Location loc, const AttentionSpec &spec,
          const TileConfig &config, bool persistent, bool multicast);

  void build(StringRef name, const ModRegions &mods);

private:
  // ---- the two roles (WgmmaProducer.cpp, WgmmaConsumer.cpp) -------------
  /// Warpgroup 0: one thread loads each consumer's Q rows and the K and V
  /// tiles into the ring, for one tile or (persistent) tile after tile.
  void emitProducer(const ForwardParams &p, Value tid);
  /// Warpgroups 1..C: the products, the online softmax and the epilogue.
  void emitConsumer(const ForwardParams &p, Value tid, Value warpgroup);
  /// The epilogue of one consumer (WgmmaEpilogue.cpp): O / l staged at
  /// byte offset `rows` (its Q rows, or its rows of the O buffer when
  /// outputApart), stored with TMA; when staged in Q in a persistent
  /// kernel, the rows then go back to the producer.
  void storeOutput(const ForwardParams &p, FragmentSoftmax &softmax,
                   Value consumer, Value quadRow, Value quadCol,
                   Value warpInGroup, Value tid, const BlockCoordinates &at,
                   Value rows, ValueRange max, ValueRange sum, ValueRange o);
  /// The TMA half of storeOutput: O / l staged at `rows`, then stored from
  /// row `consumerRow0` of the tile's sequence (`myRow` as the softmax's).
  void stageAndStoreOutput(const ForwardParams &p, FragmentSoftmax &softmax,
                           Value consumer, Value quadRow, Value quadCol,
                           Value warpInGroup, Value tid,
                           const BlockCoordinates &at, Value rows,
                           ValueRange max, ValueRange sum, ValueRange o,
                           Value consumerRow0,
                           llvm::function_ref<Value(int64_t, int64_t)> myRow);
  /// Whether thread `tid` (i32) issues its warpgroup's TMA stores of O.
  Value isStoreIssuer(Value tid);
  /// The store issuer of `tid`'s warpgroup waits until its TMA stores have
  /// read their shared rows.
  void waitForStores(Value tid);
  /// K/V tiles of the tile at `at` (KernelIR::kvTileRange).
  KvTileRange kvTiles(const ForwardParams &p, const BlockCoordinates &at);

  // ---- the persistent tile loop (WgmmaPersistent.cpp) ---------------------
  /// The next tile from the launch's counter (i32; past the last tile once
  /// they are all taken).
  Value takeTile(const ForwardParams &p);
  /// The cluster's tile after `done` (i32) of its own: clusters take the
  /// tiles (pairs of query blocks) in turn, in a fixed order.
  Value clusterTile(Value done);
  /// After the producer's last tile: the end mark for each consumer, and
  /// the last block to finish resets the counters.
  void endTiles(const ForwardParams &p, Value done);
  /// Where the producer leaves a consumer the record of a tile, in the
  /// consumer's Q slot `slot` (qSlot) (four i32: query block, head, batch,
  /// and the offset of the consumer's rows, consumerRows(consumer, 0)),
  /// written before the Q loads that complete on the slot's Q-full barrier.
  Value tileInfo(Value slot);
  /// Waits until `consumer` has freed the Q rows and record of the slot its
  /// tile after `done` tiles (i32) takes.
  void waitQRowsFree(Value consumer, Value done);
  /// waitQRowsFree, then writes the record of the tile at `at` (varlen:
  /// with its sequence's rows, so the consumers load no offsets).
  void writeTileInfo(const BlockCoordinates &at, Value consumer, Value done,
                     const SequenceRows *rows = nullptr);
  Value readTileInfoField(Value slot, int64_t field);
  SequenceRows readTileRows(Value slot);
  BlockCoordinates readTileInfo(Value slot);
  /// The Q slot (i32) of `consumer`'s tile after `done` tiles (i32; null:
  /// the one tile of a block per tile): with two Q tiles (qBuffers), tiles
  /// alternate between them. Its Q rows, barriers and record go together.
  Value qSlot(Value consumer, Value done);
  /// The parity of the phase of a Q slot's barriers that the tile after
  /// `done` tiles (i32) fills.
  Value qParity(Value done);
  /// Byte offset (i32) of slot `slot`'s 64 Q rows in 64-column panel
  /// `panel` (consumerRows, in the slot's Q tile).
  Value qSlotRows(Value slot, int64_t panel);
  /// Runs `body` for each tile `nextTile` hands this block: values of
  /// `tileTypes`, the first the tile (i32; one at or past `tileCount()`
  /// ends the loop), any further ones what nextTile found out about it,
  /// passed on to `body` with it; with the ring position before it (K/V
  /// tiles of the earlier tiles, i32) and the tiles done (i32). `body`
  /// returns its tile's K/V tile count (i32). Then `after` with the final
  /// ring position and tile count.
  void forEachTile(
      mlir::TypeRange tileTypes, function_ref<Value()> tileCount,
      function_ref<SmallVector<Value>(Value done)> nextTile,
      function_ref<Value(ValueRange tile, Value iteration, Value done)> body,
      function_ref<void(Value iteration, Value done)> after);
  /// The end mark in a consumer's tile record.
  static constexpr int32_t kNoTile = -1;

  /// The mbarriers after the tiles: per Q slot (qSlot) Q full, then per Q
  /// slot Q empty, then per K/V slot K full, V full, K empty, V empty
  /// (`stages` each). K and V slots are released apart: K_j once the
  /// softmax of S_j no longer needs it, V_j after P_j V_j, a tile later.
  Value slotBarrier(int64_t first, Value slot);
  Value qFull(Value qSlot) { return slotBarrier(0, qSlot); }
  Value qEmpty(Value qSlot) { return slotBarrier(qSlots, qSlot); }
  Value kFull(Value slot) { return slotBarrier(2 * qSlots, slot); }
  Value vFull(Value slot) { return slotBarrier(2 * qSlots + stages, slot); }
  Value kEmpty(Value slot) {
    return slotBarrier(2 * qSlots + 2 * stages, slot);
  }
  Value vEmpty(Value slot) {
    return slotBarrier(2 * qSlots + 3 * stages, slot);
  }

  // ---- TMA (WgmmaInstructions.cpp) ---------------------------------------
  /// The warps of the consumers whose rows of the tile at `at` all lie past
  /// seqlenQ (i32), for whom the producer releases each K/V slot.
  Value idleWarps(const ForwardParams &p, const BlockCoordinates &at);
  /// TMA: one box of `tensorMap` at (col, row, head, batch) (i32) into the
  /// shared bytes at 32-bit address `dst`, completing on `bar`; with
  /// `toCluster`, into the same address of every block of the cluster,
  /// completing on the barrier at the same address in each.
  void tmaLoad(Value tensorMap, Value dst, Value bar, ValueRange coords,
               bool toCluster = false);
  /// Loads rows [row0, row0 + rows) of a whole tile, one box per 64-column
  /// panel, panels `rows` * 128 bytes apart from `dstOffset`. With
  /// multicast, this block loads its share of the rows (rows / cluster
  /// size, by its rank) into every block of the cluster.
  void tmaLoadTile(Value tensorMap, int64_t dstOffset, Value dynamicOffset,
                   Value bar, Value row0, Value head, Value batch,
                   int64_t rows);

  /// Paged K/V (AttentionSpec::pageSize): the pool rows (i32) of the
  /// boxes of min(page size, block_n) keys that hold keys [key0, key0 +
  /// block_n) of the block's sequence (key0 i64; KernelIR::pagedKey: keys
  /// past the length and pages outside the pool give a row past the pool,
  /// which reads zeros). K and V of a tile share them.
  SmallVector<Value> pagedBoxRows(const ForwardParams &p, Value key0);
  /// tmaLoadTile for a paged K or V: one box per row of pagedBoxRows.
  void tmaLoadPagedTile(Value tensorMap, int64_t dstOffset,
                        Value dynamicOffset, Value bar, ArrayRef<Value> rows,
                        Value head);

  // ---- clusters (WgmmaInstructions.cpp) ----------------------------------
  /// This block's rank in its cluster (i32).
  Value clusterRank();
  /// Arrives on the mbarrier at 32-bit shared address `bar` of the block of
  /// rank `rank` (i32) in the cluster. The arrive's default semantics
  /// (release at CTA scope) suffice for the slot's reuse: the products that
  /// read it are complete, and the next write is the copy engine's.
  void barrierArriveInCluster(Value bar, Value rank);
  /// Every thread of the cluster meets (release, then acquire).
  void clusterSync();

  /// TMA: the box of `tensorMap` at (col, row, head, batch) (i32) from the
  /// shared bytes at `src` (a bulk-group store).
  void tmaStore(Value tensorMap, Value src, ValueRange coords);
  /// Byte offset (i32) of consumer `consumer`'s 64 rows of the Q tile in
  /// 64-column panel `panel`: its A operand of S = Q K^T, and where its O
  /// is staged for the TMA store.
  Value consumerRows(Value consumer, int64_t panel);

  // ---- wgmma (WgmmaInstructions.cpp) -------------------------------------
  /// Issues S = Q K^T for one warpgroup: fence, head_dim / 16 wgmma
  /// m64nNk16 with both operands in shared memory, commit (one group). The
  /// block_n / 2 f32 per thread (FragmentSoftmax's layout) are valid only
  /// after waitGroups. `keys` (a multiple of 8; 0: block_n) narrows the
  /// product to the tile's first keys (keys / 2 f32 per thread).
  SmallVector<Value> issueScores(Value qDesc, Value kDesc, int64_t keys = 0);
  /// Issues O += P V: fence, per k step of block_n / 16 one wgmma m64nDk16
  /// with P from registers (four packed i32 per k step) and V from shared
  /// memory, commit (one group). `o` is O (D / 2 f32). `keys` (a multiple
  /// of 16; 0: block_n): only the tile's first keys, P's first keys / 4
  /// packed registers.
  SmallVector<Value> issueAccumulate(ValueRange o, ArrayRef<Value> pPacked,
                                     Value vDesc, int64_t keys = 0);
  /// Tile j's softmax step against the max as it stands
  /// (WgmmaBoundedStep.cpp): `mask` the scores `s`, then P against `max`.
  /// Where a row of the warpgroup outgrew the bound the tile goes through
  /// the max after all (`withMax`) on S_j taken again (`scoresAgain`: a
  /// wgmma, hence the warpgroup's vote, which also waits for the P V in
  /// flight). With random scores only the first tile of a row needs the
  /// max. `outgrew` (i1, with a score_mod; null without): some earlier tile
  /// of this query block outgrew the bound; such a tile takes the max on
  /// the scores it holds, without the second product, and sets `outgrew`
  /// for the tiles after. With a fixed reference
  /// (FragmentSoftmax::fixReference) there is no bound to outgrow: the
  /// step is `withMax`'s, with no vote.
  FragmentSoftmax::Update
  boundedStep(ArrayRef<Value> s, FragmentSoftmax &sm, ValueRange max,
              ValueRange sum, Value scaleLog2, Value consumer, Value &outgrew,
              function_ref<void(SmallVector<Value> &)> mask,
              function_ref<FragmentSoftmax::Update(SmallVector<Value> &)>
                  withMax,
              function_ref<SmallVector<Value>()> scoresAgain);
  /// Whether `flag` (i1) is set in any thread of this consumer's
  /// warpgroup (bar.red.or on its named barrier voteBarrier), as an i1
  /// ptxas knows to be warp-uniform: a branch on it may hold a wgmma.
  Value warpgroupAny(Value flag, Value consumer);
  /// Named barriers: 1 + c for consumer c's turn (ping-pong), 1 + C + c
  /// for its epilogue's stores, 1 + 2 C + c for its votes (C consumers).
  Value storeBarrier(Value consumer) {
    return add(c32(1 + consumers), consumer);
  }
  Value voteBarrier(Value consumer) {
    return add(c32(1 + 2 * consumers), consumer);
  }

  const TileConfig &cfg;
  const bool persistent, multicast;
  /// The description's score_mod and mask_mod (ScoreMods.h).
  ModRegions mods;
  /// Byte offsets of the K and V rings, the O buffer, the barriers and the
  /// tile records (WgmmaForward::sharedLayout, which resources() counts).
  const WgmmaForward::SharedLayout layout;
  /// O is staged apart from Q (WgmmaForward::stagesOutputApart).
  const bool outputApart;
  /// A consumer whose rows all lie past seqlenQ skips the tile, and the
  /// producer releases the K/V slots for it (idleWarps): three persistent
  /// consumers with O staged apart and no mask (head dim 64 at short
  /// lengths, where block_m 192 leaves the last query block a third or two
  /// thirds empty). Elsewhere the kernels are as measured before
  /// (docs/performance.md).
  const bool skipsIdleRows;
  const int64_t d, consumers, threads, stages;
  /// Q tiles (WgmmaForward::SharedLayout::qBuffers) and Q slots (one per
  /// consumer and Q tile).
  const int64_t qBuffers, qSlots;
  const int64_t qBytes, kvTileBytes;
};

} // namespace flashjit::wgmma

#endif
