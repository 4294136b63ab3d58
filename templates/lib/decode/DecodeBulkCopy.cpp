//===- DecodeBulkCopy.cpp - K/V tiles of the split kernel by bulk copies --===//
// Why: a decode step is a stream of the KV cache, so what matters is how
// many bytes each SM keeps in flight and how few instructions it spends to
// do so. With per-thread cp.async a 64-key tile of K and V at head dim 128
// is 2048 16-byte requests; on sm_90 one warp issues it as 128 bulk copies
// of whole key rows (cp.async.bulk) that complete on the stage's mbarrier,
// and the other warps only wait on that barrier. The shared tile keeps the
// padded rows of the cp.async path, so the ldmatrix reads are unchanged.
#include "DecodeBuilder.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace flashjit::decode {

namespace {
/// Suspend-time hint of mbarrier.try_wait, in nanoseconds.
constexpr int32_t kWaitTicks = 10000000;
/// The lanes that arrive on a stage's mbarrier: the copying warp.
constexpr int64_t kArrivals = 32;
} // namespace

Value Builder::evictFirstPolicy() {
  return LLVM::InlineAsmOp::create(
             b, loc, i64, ValueRange{},
             "createpolicy.fractional.L2::evict_first.b64 $0, 1.0;", "=l",
             /*has_side_effects=*/false, /*is_align_stack=*/false,
             LLVM::tailcallkind::TailCallKind::None,
             LLVM::AsmDialectAttr::get(b.getContext(),
                                       LLVM::AsmDialect::AD_ATT),
             /*operand_attrs=*/ArrayAttr())
      .getResult(0);
}

Value Builder::stageBarrier(Value slot) {
  return sharedAddress(
      toI32(add(c64(tiling.barrierOffset(dspec)), mul(slot, c64(8)))));
}

void Builder::initStageBarriers() {
  OpBuilder::InsertionGuard g(b);
  auto first = scf::IfOp::create(b, loc, cmp(Pred::eq, tid, c64(0)),
                                 /*withElse=*/false);
  b.setInsertionPoint(first.thenBlock()->getTerminator());
  for (int64_t s = 0; s < tiling.stages; ++s)
    NVVM::MBarrierInitOp::create(b, loc, stageBarrier(c64(s)), c32(kArrivals),
                                 /*predicate=*/Value());
  // The async proxy (the bulk copies' complete_tx) sees the initialized
  // barriers.
  asmVoid("fence.mbarrier_init.release.cluster;", "", ValueRange());
}

void Builder::waitStage(Value j) {
  Value slot = remU(j, tiling.stages);
  Value parity = toI32(remU(divU(j, tiling.stages), 2));
  NVVM::MBarrierTryWaitParityOp::create(b, loc, stageBarrier(slot), parity,
                                        c32(kWaitTicks));
}

void Builder::bulkCopyTile(const DecodeParams &p, Value batch, Value kvHead,
                           Value firstKey, Value kvLen, Value slot) {
  const int64_t rowBytes = rowElems * eltBytes;
  const int64_t dataBytes = d * eltBytes;
  const int64_t kTileOffset = tiling.rowsPadded * rowBytes;
  const int64_t vTileOffset = kTileOffset + tiling.blockN * rowBytes;
  const int64_t stageBytes = 2 * tiling.blockN * rowBytes;
  const int64_t rowsPerLane = tiling.blockN / 32;
  Value lane = remU(tid, 32);
  Value lastKey = sub(kvLen, c64(1));
  Value stage = mul(slot, c64(stageBytes));
  Value table = dspec.paged() ? globalAddress(p.blockTable, i32,
                                              mul(batch, p.blockTableStride))
                              : Value();

  // This lane's rows (row lane + 32 i of the tile), the same for K and V.
  struct Row {
    Value offsetK, offsetV; ///< element offsets in the cache
    Value valid;            ///< i1; null: always
    Value dst;              ///< shared byte offset within the K tile
  };
  SmallVector<Row> rows;
  for (int64_t i = 0; i < rowsPerLane; ++i) {
    Value r = add(lane, c64(32 * i));
    Value key = minS(add(firstKey, r), lastKey);
    Row row;
    row.dst = add(stage, mul(r, c64(rowBytes)));
    if (!dspec.paged()) {
      row.offsetK = rowOffset(p.kStrides, batch, kvHead, key);
      row.offsetV = rowOffset(p.vStrides, batch, kvHead, key);
    } else {
      TablePage page = tablePage(p, table, key);
      row.valid = page.inPool;
      Value safePage = page.page;
      Value inPage = remU(key, dspec.pageSize);
      row.offsetK =
          add(add(mul(safePage, p.kStrides[0]), mul(inPage, p.kStrides[2])),
              mul(kvHead, p.kStrides[1]));
      row.offsetV =
          add(add(mul(safePage, p.vStrides[0]), mul(inPage, p.vStrides[2])),
              mul(kvHead, p.vStrides[1]));
    }
    rows.push_back(row);
  }

  Value bar = stageBarrier(slot);
  Value bytes = c32(static_cast<int32_t>(2 * rowsPerLane * dataBytes));
  if (dspec.paged()) {
    // Rows of pages outside the pool: zeros by plain stores, ordered
    // before the bulk copies that later reuse the buffer.
    bytes = c32(0);
    for (const Row &row : rows) {
      bytes = add(bytes, arith::SelectOp::create(b, loc, row.valid,
                                                 c32(2 * dataBytes), c32(0)));
      OpBuilder::InsertionGuard g(b);
      auto ok = scf::IfOp::create(b, loc, row.valid, /*withElse=*/true);
      b.setInsertionPoint(ok.elseBlock()->getTerminator());
      auto v4 = VectorType::get({4}, i32);
      Value zero = LLVM::ConstantOp::create(b, loc, v4, b.getZeroAttr(v4));
      for (int64_t tile : {kTileOffset, vTileOffset})
        for (int64_t c = 0; c < dataBytes; c += 16)
          LLVM::StoreOp::create(
              b, loc, zero, sharedAddress(toI32(add(row.dst, c64(tile + c)))),
              /*alignment=*/16);
      asmVoid("fence.proxy.async.shared::cta;", "", ValueRange());
    }
  }
  // Each lane announces its bytes and arrives; the phase completes when
  // all 32 lanes have and every copy has landed.
  asmVoid("mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "l,r",
          {bar, bytes});
  Value policy = evictFirst ? evictFirstPolicy() : Value();
  for (const Row &row : rows) {
    OpBuilder::InsertionGuard g(b);
    if (row.valid) {
      auto ok = scf::IfOp::create(b, loc, row.valid, /*withElse=*/false);
      b.setInsertionPoint(ok.thenBlock()->getTerminator());
    }
    for (bool isV : {false, true}) {
      Value src =
          globalAddress(isV ? p.v : p.k, elt, isV ? row.offsetV : row.offsetK);
      Value dst = sharedAddress(
          toI32(add(row.dst, c64(isV ? vTileOffset : kTileOffset))));
      std::string text = "cp.async.bulk.shared::cluster.global.mbarrier::"
                         "complete_tx::bytes";
      if (policy)
        asmVoid(text + ".L2::cache_hint [$0], [$1], $2, [$3], $4;", "l,l,r,l,l",
                {dst, src, c32(dataBytes), bar, policy});
      else
        asmVoid(text + " [$0], [$1], $2, [$3];", "l,l,r,l",
                {dst, src, c32(dataBytes), bar});
    }
  }
}

} // namespace flashjit::decode
