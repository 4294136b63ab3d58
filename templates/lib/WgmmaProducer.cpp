//===- WgmmaProducer.cpp - the wgmma kernel's producer warpgroup ----------===//
// Why: the producer is one role of the wgmma kernel (WgmmaForward.cpp holds
// the kernel's structure and its consumers): warpgroup 0 gives registers
// back (setmaxnreg) and one of its threads issues every TMA load. Per tile:
// the first K tile, then each consumer's 64 rows of Q (persistent: once that
// consumer has freed them, with the tile's coordinates in its record), then
// the K and V tiles, each once the consumers (with multicast: of every block
// of the cluster) have released its slot of the ring. A persistent producer
// recomputes its shared addresses and the tile order for each tile from
// opaque copies: kept through its loops, they would not fit its registers.
#include "WgmmaBuilder.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace flashjit::wgmma {

void Builder::emitProducer(const ForwardParams &p, Value tid) {
  NVVM::SetMaxRegisterOp::create(
      b, loc,
      WgmmaForward::producerRegisters(consumers, persistent,
                                      spec.hasStructuralMask() || spec.varlen),
      NVVM::SetMaxRegisterAction::decrease);
  auto issuer = scf::IfOp::create(b, loc, cmp(Pred::eq, tid, c32(0)),
                                  /*withElse=*/false);
  b.setInsertionPoint(issuer.thenBlock()->getTerminator());
  Value qMap = p.tensorMaps[0], kMap = p.tensorMaps[1],
        vMap = p.tensorMaps[2];
  // The parameters of the tile being loaded: a persistent varlen producer
  // narrows a copy of `p` to each tile's sequence (narrowToSequence).
  ForwardParams cur = p;
  SequenceRows sequence;
  // Box coordinates of a Q or K/V row and of the batch: a varlen kernel's
  // maps span the packed tensors (batch 1) and its sequence starts at a
  // row base.
  auto boxRow = [&](Value row, Value rowBase) {
    return rowBase ? add(row, rowBase) : row;
  };
  auto boxBatch = [&](const BlockCoordinates &at) {
    return spec.varlen ? c64(0) : at.batch;
  };
  // Each consumer's 64 rows of Q, one box per 64-column panel, into its
  // Q slot `slot`.
  auto forEachQBox = [&](const BlockCoordinates &at, Value consumer,
                         Value slot,
                         function_ref<void(Value dst, ValueRange coords)> f) {
    Value row = add(mul(at.queryBlock, c64(cfg.blockM)),
                    toI64(mul(consumer, c32(WgmmaForward::kRowsPerWarpgroup))));
    for (int64_t panel = 0; panel < d / WgmmaForward::kPanelCols; ++panel)
      f(sharedAddress(qSlotRows(slot, panel)),
        {c32(panel * WgmmaForward::kPanelCols),
         toI32(boxRow(row, cur.qRowBase)),
         toI32(at.head), toI32(boxBatch(at))});
  };
  const int64_t qRowBytes = qBytes / consumers;
  // Warps of the idle consumers of the tile being loaded (skipsIdleRows),
  // for whom loadKV releases each slot.
  Value idle;
  // K/V tile j (i32) of the tile at `at`, ring position g (i32): each
  // waits until the consumers have released its slot. The first round
  // finds every slot free (the parity before a fresh barrier's phase 0
  // returns at once).
  // Paged: the pool rows of tile j's boxes, computed once for its K and V
  // (pagedRows(j) before loadKV's wait, so the table loads overlap it).
  auto pagedRows = [&](Value j) {
    return spec.paged() ? pagedBoxRows(cur, toI64(mul(j, c32(cfg.blockN))))
                        : SmallVector<Value>();
  };
  auto loadKV = [&](const BlockCoordinates &at, Value j, Value g, bool isK,
                    ArrayRef<Value> rows) {
    Value s = remU(g, stages);
    Value freeParity = arith::XOrIOp::create(
        b, loc, arith::AndIOp::create(b, loc, divU(g, stages), c32(1)),
        c32(1));
    Value full = isK ? kFull(s) : vFull(s);
    barrierWait(isK ? kEmpty(s) : vEmpty(s), freeParity);
    barrierExpect(full, kvTileBytes);
    if (spec.paged())
      tmaLoadPagedTile(isK ? kMap : vMap, isK ? layout.k : layout.v,
                       mul(s, c32(kvTileBytes)), full, rows, at.kvHead);
    else
      tmaLoadTile(isK ? kMap : vMap, isK ? layout.k : layout.v,
                  mul(s, c32(kvTileBytes)), full,
                  boxRow(toI64(mul(j, c32(cfg.blockN))), cur.kRowBase),
                  at.kvHead, boxBatch(at), cfg.blockN);
    // The slot's arrivals of the idle consumers, counted in the phase the
    // load fills: the producer waited for the previous one above.
    if (idle)
      ifThen(cmp(Pred::ne, idle, c32(0)), [&] {
        barrierArriveCount(isK ? kEmpty(s) : vEmpty(s), idle);
      });
  };
  // A persistent producer recomputes its shared addresses in each loop
  // body: hoisted out of the loops, they would not fit its registers.
  auto freshBase = [&](function_ref<void()> body) {
    if (persistent)
      withFreshBase(body);
    else
      body();
  };
  // One tile at `at`, ring position `iteration` (i32), after `done` tiles
  // (i32; persistent only); returns its K/V tile count.
  auto loadTile = [&](const BlockCoordinates &at, Value iteration,
                      Value done) {
    KvTileRange range = kvTiles(cur, at);
    Value numTiles = range.count;
    Value first = toI32(kvTile(range, c32(0)));
    if (skipsIdleRows)
      idle = idleWarps(cur, at);
    auto loadQ = [&] {
      for (int64_t c = 0; c < consumers; ++c) {
        if (persistent)
          writeTileInfo(at, c32(c), done, spec.varlen ? &sequence : nullptr);
        // The arrive releases the record above to the consumer.
        Value slot = qSlot(c32(c), done);
        barrierExpect(qFull(slot), qRowBytes);
        forEachQBox(at, c32(c), slot, [&](Value dst, ValueRange coords) {
          tmaLoad(qMap, dst, qFull(slot), coords);
        });
      }
    };
    // With one Q tile, Q after the first K: K_0 fills a slot freed early in
    // the last tile, Q waits until each consumer frees its rows (after its
    // last S with O staged apart, else once its O, staged there, is
    // stored). With two, Q first: its slot was freed a tile ago, so it
    // loads under the last tile's products.
    SmallVector<Value> firstRows = pagedRows(first);
    if (qBuffers == 2)
      loadQ();
    loadKV(at, first, iteration, /*isK=*/true, firstRows);
    if (qBuffers == 1)
      loadQ();
    loadKV(at, first, iteration, /*isK=*/false, firstRows);
    auto kvLoop = scf::ForOp::create(
        b, loc, c32(1), toI32(numTiles), c32(1), ValueRange{},
        [&](OpBuilder &, Location, Value j, ValueRange) {
          Value g = add(iteration, j);
          freshBase([&] {
            // Persistent: j * block_n from an opaque j, so that LLVM keeps
            // no second induction variable for it.
            Value row =
                spec.isBlockSparse()
                    ? toI32(kvTile(range, j))
                    : add(persistent ? opaque(j) : j, toI32(range.first));
            SmallVector<Value> rows = pagedRows(row);
            loadKV(at, row, g, /*isK=*/true, rows);
            loadKV(at, row, g, /*isK=*/false, rows);
          });
          scf::YieldOp::create(b, loc);
        });
    // Unrolled by two (head dim 64, where the body is short), the
    // persistent producer's loop spilled 44-92 bytes (ptxas, CUDA 13.0).
    if (persistent)
      keepRolled(kvLoop);
    return toI32(numTiles);
  };
  if (!persistent) {
    loadTile(blockCoordinates(), c32(0), Value());
    return;
  }
  // The tile order's values are recomputed for each tile from opaque
  // copies of the launch's parameters (which stay in the constant bank):
  // kept through the loop, they would not fit the producer's registers.
  // With multicast a tile is a cluster's: kClusterSize adjacent query
  // blocks, one per block by its rank.
  const int64_t tileRows =
      multicast ? cfg.blockM * WgmmaForward::kClusterSize : cfg.blockM;
  auto freshTiles = [&] {
    ForwardParams fresh = p;
    fresh.seqlenQ = opaque(p.seqlenQ);
    fresh.seqlenK = opaque(p.seqlenK);
    fresh.batch = opaque(p.batch);
    return persistentTiles(fresh, tileRows);
  };
  // Varlen: a tile's number is a query block of the packed sequences'
  // numbering (varlenBlock); `valid` is set where it is one of its
  // sequence's blocks.
  auto blockTile = [&](Value tile, Value *valid = nullptr) {
    BlockCoordinates at = tileCoordinates(freshTiles(), tile);
    if (multicast)
      at.queryBlock =
          add(mul(at.queryBlock, c64(WgmmaForward::kClusterSize)),
              toI64(clusterRank()));
    if (spec.varlen) {
      ForwardParams fresh = p;
      fresh.seqlenQ = opaque(p.seqlenQ);
      fresh.batch = opaque(p.batch);
      Value inside = varlenBlock(fresh, at.queryBlock, tileRows, at);
      if (valid)
        *valid = inside;
    }
    return at;
  };
  // Varlen: numbers in the gaps between sequences are taken and passed
  // over; the search that found the tile's sequence and block
  // (varlenBlock) hands them on with it, so that the body need not
  // search again.
  auto nextTile = [&](Value done) -> SmallVector<Value> {
    if (multicast)
      return {clusterTile(done)};
    if (!spec.varlen)
      return {takeTile(p)};
    auto taking = scf::WhileOp::create(
        b, loc, TypeRange{i32, i64, i64}, ValueRange{takeTile(p)},
        [&](OpBuilder &, Location, ValueRange tile) {
          Value valid;
          BlockCoordinates at = blockTile(tile[0], &valid);
          Value inGap = arith::XOrIOp::create(
              b, loc, valid, arith::ConstantIntOp::create(b, loc, 1, 1));
          Value gap = arith::AndIOp::create(
              b, loc, cmp(Pred::ult, tile[0], freshTiles().count), inGap);
          scf::ConditionOp::create(b, loc, gap,
                                   ValueRange{tile[0], at.batch, at.queryBlock});
        },
        [&](OpBuilder &, Location, ValueRange) {
          scf::YieldOp::create(b, loc, takeTile(p));
        });
    return SmallVector<Value>(taking.getResults());
  };
  SmallVector<Type> tileTypes{i32};
  if (spec.varlen && !multicast)
    tileTypes.append({i64, i64});
  forEachTile(
      tileTypes, [&] { return freshTiles().count; }, nextTile,
      [&](ValueRange tile, Value iteration, Value done) {
        Value count;
        freshBase([&] {
          BlockCoordinates at;
          if (tile.size() == 3) {
            at = tileCoordinates(freshTiles(), tile[0]);
            at.batch = tile[1];
            at.queryBlock = tile[2];
          } else {
            at = blockTile(tile[0]);
          }
          if (spec.varlen) {
            sequence = sequenceRows(p, at.batch);
            cur = p;
            narrowToRows(cur, at.batch, sequence);
          }
          count = loadTile(at, iteration, done);
        });
        return count;
      },
      [&](Value, Value done) {
        freshBase([&] { endTiles(p, done); });
      });
}

} // namespace flashjit::wgmma
