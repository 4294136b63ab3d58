//===- WgmmaPersistent.cpp - the wgmma kernel's persistent tile loop -----===//
// Why: the persistent form of the wgmma kernel (family wgmma_persistent)
// runs one block per SM. Its producer takes tiles from the launch's counter
// (two u32 the runtime keeps per stream, KernelABI.h) in the order of
// PersistentTiles.cpp, so the longest causal tiles go first and the short
// ones fill in, as the hardware hands out the blocks of a grid of tiles; it
// tells each consumer its tile through a small shared record. In clusters
// (wgmma_cluster) both blocks must take the same tile, two adjacent query
// blocks: cluster c takes tiles c, c + clusters, ... (without a mask all
// cost the same), and no counter is used. This file holds that loop and the
// record; WgmmaConsumer.cpp the work of one tile.
//
// The record protocol, per consumer: the producer waits on Q-empty (all 128
// consumer threads arrive once their last O has been stored from the Q
// rows, or, with O staged apart, once their last S has landed and they
// have read the record), writes the record, then arrives on Q-full with
// the Q rows' bytes expected, and loads Q. The consumer waits on Q-full,
// reads the record and runs the tile. An end mark (kNoTile) in place of a
// tile ends its loop.
#include "WgmmaBuilder.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace flashjit::wgmma {

void Builder::forEachTile(
    TypeRange tileTypes, function_ref<Value()> tileCount,
    function_ref<SmallVector<Value>(Value done)> nextTile,
    function_ref<Value(ValueRange tile, Value iteration, Value done)> body,
    function_ref<void(Value iteration, Value done)> after) {
  // State: the K/V tiles of the block's earlier tiles (the ring position)
  // and how many tiles it has done (the phase of the Q barriers). The
  // before region passes on (tile values..., iteration, done).
  Value zero = c32(0);
  SmallVector<Type> passed(tileTypes.begin(), tileTypes.end());
  passed.append({i32, i32});
  const int64_t n = passed.size();
  auto loop = scf::WhileOp::create(
      b, loc, passed, ValueRange{zero, zero},
      [&](OpBuilder &, Location, ValueRange state) {
        SmallVector<Value> args = nextTile(state[1]);
        Value more = cmp(Pred::ult, args[0], tileCount());
        args.append({state[0], state[1]});
        scf::ConditionOp::create(b, loc, more, args);
      },
      [&](OpBuilder &, Location, ValueRange args) {
        Value kvTileCount =
            body(args.drop_back(2), args[n - 2], args[n - 1]);
        scf::YieldOp::create(b, loc,
                             ValueRange{add(args[n - 2], kvTileCount),
                                        add(args[n - 1], c32(1))});
      });
  after(loop.getResult(n - 2), loop.getResult(n - 1));
}

Value Builder::takeTile(const ForwardParams &p) {
  return LLVM::AtomicRMWOp::create(b, loc, LLVM::AtomicBinOp::add,
                                   p.tileCounter, c32(1),
                                   LLVM::AtomicOrdering::monotonic)
      .getResult();
}

Value Builder::clusterTile(Value done) {
  // Every block of a cluster must take the same tile, and without a mask
  // all tiles cost the same: cluster c takes c, c + clusters, ...
  Value cluster = NVVM::ClusterIdXOp::create(b, loc, i32);
  Value clusters = NVVM::ClusterDimXOp::create(b, loc, i32);
  return add(cluster, mul(done, clusters));
}

void Builder::endTiles(const ForwardParams &p, Value done) {
  // No tile left: each consumer gets the end mark once its rows are free.
  for (int64_t c = 0; c < consumers; ++c) {
    waitQRowsFree(c32(c), done);
    Value slot = qSlot(c32(c), done);
    LLVM::StoreOp::create(b, loc, c32(kNoTile), tileInfo(slot),
                          /*alignment=*/4);
    barrierArrive(qFull(slot));
  }
  // A cluster kernel takes no tiles from the counter.
  if (multicast)
    return;
  // The last block to finish sets the counters back for the next launch
  // on this stream.
  Value counter = p.tileCounter;
  Value finished = LLVM::GEPOp::create(b, loc, globalPtr, i32, counter,
                                       ValueRange{c32(1)});
  LLVM::FenceOp::create(b, loc, LLVM::AtomicOrdering::seq_cst);
  Value before = LLVM::AtomicRMWOp::create(
      b, loc, LLVM::AtomicBinOp::add, finished, c32(1),
      LLVM::AtomicOrdering::acq_rel);
  // gridDim.x (the blocks that take tiles) is read here rather than kept
  // in a register through the producer's loop.
  Value blocks = toI32(gpu::GridDimOp::create(b, loc, gpu::Dimension::x));
  ifThen(cmp(Pred::eq, add(before, c32(1)), blocks), [&] {
    for (Value word : {counter, finished})
      LLVM::AtomicRMWOp::create(b, loc, LLVM::AtomicBinOp::xchg, word,
                                c32(0), LLVM::AtomicOrdering::monotonic);
  });
}

Value Builder::qSlot(Value consumer, Value done) {
  if (qBuffers == 1 || !done)
    return consumer;
  return add(consumer, mul(remU(done, qBuffers), c32(consumers)));
}

Value Builder::qParity(Value done) {
  return arith::AndIOp::create(b, loc, divU(done, qBuffers), c32(1));
}

Value Builder::qSlotRows(Value slot, int64_t panel) {
  if (qBuffers == 1)
    return consumerRows(slot, panel);
  return add(consumerRows(remU(slot, consumers), panel),
             mul(divU(slot, consumers), c32(qBytes)));
}

Value Builder::tileInfo(Value slot) {
  return shared(add(c32(layout.records),
                    mul(slot, c32(WgmmaForward::recordBytes(spec)))));
}

Value Builder::readTileInfoField(Value slot, int64_t field) {
  return LLVM::LoadOp::create(b, loc, i32,
                              LLVM::GEPOp::create(b, loc, sharedPtr, i32,
                                                  tileInfo(slot),
                                                  ValueRange{c32(field)}),
                              /*alignment=*/4);
}

KernelIR::SequenceRows Builder::readTileRows(Value slot) {
  return {toI64(readTileInfoField(slot, 4)),
          toI64(readTileInfoField(slot, 5)),
          toI64(readTileInfoField(slot, 6)),
          toI64(readTileInfoField(slot, 7))};
}

BlockCoordinates Builder::readTileInfo(Value slot) {
  Value fields[3];
  for (int64_t i = 0; i < 3; ++i)
    fields[i] = readTileInfoField(slot, i);
  BlockCoordinates at;
  at.queryBlock = toI64(fields[0]);
  at.head = toI64(fields[1]);
  at.batch = toI64(fields[2]);
  at.kvHead = divU(at.head, spec.groupSize());
  return at;
}

void Builder::waitQRowsFree(Value consumer, Value done) {
  // The phase of the slot's Q-empty before the one this tile fills (the
  // slot's last tile); at a slot's first tile the parity of the phase
  // before phase 0 returns at once.
  Value freeParity =
      arith::XOrIOp::create(b, loc, qParity(done), c32(1));
  barrierWait(qEmpty(qSlot(consumer, done)), freeParity);
}

void Builder::writeTileInfo(const BlockCoordinates &at, Value consumer,
                            Value done, const SequenceRows *rows) {
  waitQRowsFree(consumer, done);
  SmallVector<Value, 8> fields = {toI32(at.queryBlock), toI32(at.head),
                                  toI32(at.batch), consumerRows(consumer, 0)};
  if (rows)
    fields.append({toI32(rows->qStart), toI32(rows->qLength),
                   toI32(rows->kStart), toI32(rows->kLength)});
  Value slot = qSlot(consumer, done);
  for (int64_t i = 0; i < static_cast<int64_t>(fields.size()); ++i)
    LLVM::StoreOp::create(b, loc, fields[i],
                          LLVM::GEPOp::create(b, loc, sharedPtr, i32,
                                              tileInfo(slot),
                                              ValueRange{c32(i)}),
                          /*alignment=*/4);
}

Value Builder::idleWarps(const ForwardParams &p, const BlockCoordinates &at) {
  // Rows of the tile left before seqlenQ (at least one), in consumers of
  // 64 rows, rounded up; from an opaque seqlenQ, recomputed per tile.
  Value rows = sub(toI32(opaque(p.seqlenQ)),
                   mul(toI32(at.queryBlock), c32(cfg.blockM)));
  Value busy = divU(add(rows, c32(WgmmaForward::kRowsPerWarpgroup - 1)),
                    WgmmaForward::kRowsPerWarpgroup);
  busy = arith::MinUIOp::create(b, loc, busy, c32(consumers));
  return mul(sub(c32(consumers), busy), c32(WgmmaForward::kWarpsPerWarpgroup));
}

} // namespace flashjit::wgmma
