//===- WgmmaEpilogue.cpp - how a wgmma consumer stores its O --------------===//
// Why: the epilogue of one consumer of the wgmma kernel (WgmmaConsumer.cpp
// runs the tile, this file writes its result): O / l is staged in shared
// memory in the 128-byte swizzled layout of a TMA box, either in the
// consumer's own Q rows (its last product has read them) or, in a
// persistent kernel with room for it, in an O buffer of its own; then one
// thread stores the 64 rows with TMA, one box per 64-column panel, and the
// store drops the rows past seqlenQ.
#include "WgmmaBuilder.h"

#include "FragmentSoftmax.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;

namespace flashjit::wgmma {

void Builder::storeOutput(const ForwardParams &p, FragmentSoftmax &softmax,
                          Value consumer, Value quadRow, Value quadCol,
                          Value warpInGroup, Value tid,
                          const BlockCoordinates &at, Value rows,
                          ValueRange max, ValueRange sum, ValueRange o) {
  // O / l into the consumer's staging rows (`rows`: its Q rows, or its
  // rows of the O buffer), in the 128-byte swizzled layout of a TMA box,
  // then one thread stores the 64 rows with TMA, one box per 64-column
  // panel; rows past seqlenQ are dropped by the store. Staged in Q in a
  // persistent kernel, the rows then go back to the producer for the next
  // tile's Q.
  Value consumerRow0 =
      add(mul(at.queryBlock, c64(cfg.blockM)),
          toI64(mul(consumer, c32(WgmmaForward::kRowsPerWarpgroup))));
  Value warpRow0 = add(consumerRow0, toI64(mul(warpInGroup, c32(16))));
  auto myRow = [&](int64_t, int64_t h) {
    return add(warpRow0, add(quadRow, c64(8 * h)));
  };
  // Varlen: a TMA store would write past the sequence's end into the next
  // sequence's rows, so a consumer whose rows reach past it stores its own
  // rows below the length from registers; one whose 64 rows lie inside the
  // sequence stores them with TMA, at the sequence's row base. Persistent
  // with O staged in the Q rows, the bounded store leaves them unused, so
  // they go back to the producer at once (staged apart, the consumer
  // handed them back after its last S: handBackQ, WgmmaConsumer.cpp).
  if (spec.varlen) {
    Value inside = cmp(arith::CmpIPredicate::sle,
                       add(consumerRow0, c64(WgmmaForward::kRowsPerWarpgroup)),
                       p.seqlenQ);
    auto branch = scf::IfOp::create(b, loc, inside, /*withElse=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(branch.thenBlock()->getTerminator());
    stageAndStoreOutput(p, softmax, consumer, quadRow, quadCol, warpInGroup,
                        tid, at, rows, max, sum, o, consumerRow0, myRow);
    b.setInsertionPoint(branch.elseBlock()->getTerminator());
    softmax.store(p, at, max, sum, o, quadCol, myRow);
    if (persistent && !outputApart)
      barrierArrive(qEmpty(consumer));
    return;
  }
  stageAndStoreOutput(p, softmax, consumer, quadRow, quadCol, warpInGroup,
                      tid, at, rows, max, sum, o, consumerRow0, myRow);
}

void Builder::stageAndStoreOutput(
    const ForwardParams &p, FragmentSoftmax &softmax, Value consumer,
    Value quadRow, Value quadCol, Value warpInGroup, Value tid,
    const BlockCoordinates &at, Value rows, ValueRange max, ValueRange sum,
    ValueRange o, Value consumerRow0,
    function_ref<Value(int64_t, int64_t)> myRow) {
  SmallVector<Value> packed =
      softmax.finish(p, at, max, sum, o, quadCol, myRow);
  // Staged apart, the rows may still be read by the last tile's store: its
  // issuer waits for that, then the warpgroup meets before writing them.
  if (outputApart) {
    waitForStores(tid);
    namedBarrierSync(storeBarrier(consumer), kWarpgroupThreads);
  }
  const int64_t dTiles = d / 8;
  Value rowBase = add(mul(warpInGroup, c32(16 * kRowBytes)),
                      mul(toI32(quadRow), c32(kRowBytes)));
  Value quadBytes = mul(toI32(quadCol), c32(2));
  Value swizzle = toI32(quadRow); // row % 8: the 16-byte chunk XOR
  for (int64_t dt = 0; dt < dTiles; ++dt) {
    int64_t panel = dt / 8, chunk = dt % 8;
    Value chunkBytes =
        mul(arith::XOrIOp::create(b, loc, c32(chunk), swizzle), c32(16));
    for (int64_t h = 0; h < 2; ++h) {
      Value offset =
          add(add(rows, add(rowBase, add(chunkBytes, quadBytes))),
              c32(panel * cfg.blockM * kRowBytes + h * 8 * kRowBytes));
      LLVM::StoreOp::create(b, loc, packed[dt * 2 + h], shared(offset),
                            /*alignment=*/4);
    }
  }
  // The generic-proxy writes become visible to the copy engine, then the
  // warpgroup's threads meet before one of them issues the stores.
  NVVM::FenceProxyOp::create(
      b, loc, NVVM::ProxyKind::async_shared,
      NVVM::SharedSpaceAttr::get(b.getContext(),
                                 NVVM::SharedSpace::shared_cta));
  namedBarrierSync(storeBarrier(consumer), kWarpgroupThreads);
  ifThen(isStoreIssuer(tid), [&] {
    for (int64_t panel = 0; panel < d / WgmmaForward::kPanelCols; ++panel)
      tmaStore(p.tensorMaps[3],
               shared(add(rows, c32(panel * cfg.blockM * kRowBytes))),
               {c32(panel * WgmmaForward::kPanelCols),
                toI32(p.qRowBase ? add(consumerRow0, p.qRowBase)
                                 : consumerRow0),
                toI32(at.head), toI32(spec.varlen ? c64(0) : at.batch)});
    NVVM::CpAsyncBulkCommitGroupOp::create(b, loc);
    // Staged apart, the next epilogue waits for the store instead.
    if (!outputApart)
      NVVM::CpAsyncBulkWaitGroupOp::create(b, loc, 0, b.getUnitAttr());
  });
  // Each of the 128 threads hands the rows and the record back itself (the
  // barrier counts 128): its reads of the record are then ordered before
  // the producer's next write of it (the next tile or the end mark) by its
  // own release, not through the named barrier and another thread's arrive,
  // which racecheck does not follow. The issuing thread arrives only once
  // the store has read the rows, so the phase still waits for the store.
  if (persistent && !outputApart)
    barrierArrive(qEmpty(consumer));
}

Value Builder::isStoreIssuer(Value tid) {
  return cmp(Pred::eq, remU(tid, kWarpgroupThreads), c32(0));
}

void Builder::waitForStores(Value tid) {
  ifThen(isStoreIssuer(tid), [&] {
    NVVM::CpAsyncBulkWaitGroupOp::create(b, loc, 0, b.getUnitAttr());
  });
}

} // namespace flashjit::wgmma
