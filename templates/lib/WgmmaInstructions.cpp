//===- WgmmaInstructions.cpp - the wgmma forward's TMA, clusters, products ===//
// Why: the pieces of the forward kernel that are its own: TMA tile loads
// and stores (multicast to a cluster), cluster barriers, the two products
// S = Q K^T and O += P V in the forward's tile shapes, and the warpgroup
// vote. The Hopper instructions every wgmma kernel uses are in HopperIR.
#include "WgmmaBuilder.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;

namespace flashjit::wgmma {


void Builder::tmaLoad(Value tensorMap, Value dst, Value bar,
                      ValueRange coords, bool toCluster) {
  // dst and bar are this block's shared::cta addresses, which are its own
  // shared::cluster addresses; multicast, each block of the mask receives
  // the box at the same offsets of its own shared memory.
  if (!toCluster) {
    tmaLoadBox(tensorMap, dst, bar, coords);
    return;
  }
  SmallVector<Value> operands = {dst, tensorMap};
  operands.append(coords.begin(), coords.end());
  operands.push_back(bar);
  const char *load = "cp.async.bulk.tensor.4d.shared::cluster.global.tile."
                     "mbarrier::complete_tx::bytes";
  operands.push_back(LLVM::ConstantOp::create(
      b, loc, b.getI16Type(),
      b.getI16IntegerAttr((1 << WgmmaForward::kClusterSize) - 1)));
  asmVoid(std::string(load) +
              ".multicast::cluster [$0], [$1, {$2, $3, $4, $5}], [$6], $7;",
          "r,l,r,r,r,r,r,h", operands);
}

void Builder::tmaLoadTile(Value tensorMap, int64_t dstOffset,
                          Value dynamicOffset, Value bar, Value row0,
                          Value head, Value batch, int64_t rows) {
  const int64_t panels = d / WgmmaForward::kPanelCols;
  // With multicast this block loads rows [rank * share, (rank + 1) *
  // share) of the tile for the whole cluster.
  if (multicast) {
    const int64_t share = rows / WgmmaForward::kClusterSize;
    Value rank = clusterRank();
    dynamicOffset = add(dynamicOffset, mul(rank, c32(share * kRowBytes)));
    row0 = add(row0, toI64(mul(rank, c32(share))));
  }
  for (int64_t panel = 0; panel < panels; ++panel) {
    Value dst = sharedAddress(
        add(dynamicOffset, c32(dstOffset + panel * rows * kRowBytes)));
    SmallVector<Value> coords = {c32(panel * WgmmaForward::kPanelCols),
                                 toI32(row0), toI32(head), toI32(batch)};
    tmaLoad(tensorMap, dst, bar, coords, /*toCluster=*/multicast);
  }
}

SmallVector<Value> Builder::pagedBoxRows(const ForwardParams &p, Value key0) {
  // The boxes' table loads do not depend on one another, so they issue
  // together (before the caller's wait for the K slot).
  const int64_t boxRows = std::min(spec.pageSize, cfg.blockN);
  SmallVector<Value> rows;
  for (int64_t box = 0; box < cfg.blockN / boxRows; ++box)
    rows.push_back(toI32(pagedKey(p, add(key0, c64(box * boxRows))).row));
  return rows;
}

void Builder::tmaLoadPagedTile(Value tensorMap, int64_t dstOffset,
                               Value dynamicOffset, Value bar,
                               ArrayRef<Value> rows, Value head) {
  // Boxes of min(page, block_n) rows: a page holds whole boxes, and the
  // 128-byte swizzle repeats every 8 rows, so boxes stacked in a panel
  // give the layout of one box of block_n rows.
  const int64_t boxRows = cfg.blockN / static_cast<int64_t>(rows.size());
  const int64_t panels = d / WgmmaForward::kPanelCols;
  for (auto [box, row] : llvm::enumerate(rows))
    for (int64_t panel = 0; panel < panels; ++panel) {
      Value dst = sharedAddress(add(
          dynamicOffset,
          c32(dstOffset + (panel * cfg.blockN + int64_t(box) * boxRows) *
                              kRowBytes)));
      SmallVector<Value> coords = {c32(panel * WgmmaForward::kPanelCols), row,
                                   toI32(head), c32(0)};
      tmaLoad(tensorMap, dst, bar, coords);
    }
}

Value Builder::clusterRank() { return NVVM::ClusterId::create(b, loc, i32); }

void Builder::barrierArriveInCluster(Value bar, Value rank) {
  asmVoid("{\n\t.reg .b32 remote;\n\t"
          "mapa.shared::cluster.u32 remote, $0, $1;\n\t"
          "mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t}",
          "r,r", {bar, rank});
}

void Builder::clusterSync() {
  NVVM::ClusterArriveOp::create(b, loc, /*aligned=*/UnitAttr());
  NVVM::ClusterWaitOp::create(b, loc, /*aligned=*/UnitAttr());
}

void Builder::tmaStore(Value tensorMap, Value src, ValueRange coords) {
  NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp::create(
      b, loc, tensorMap, src, coords, /*l2CacheHint=*/Value(),
      NVVM::TMAStoreModeAttr::get(b.getContext(), NVVM::TMAStoreMode::TILE),
      /*predicate=*/Value());
}

Value Builder::consumerRows(Value consumer, int64_t panel) {
  Value rows = mul(consumer, c32(WgmmaForward::kRowsPerWarpgroup * 128));
  return panel == 0 ? rows : add(c32(panel * cfg.blockM * 128), rows);
}

SmallVector<Value> Builder::issueScores(Value qDesc, Value kDesc,
                                        int64_t keys) {
  // k step ks: 32 bytes into a 128-byte row, in panel ks / 4.
  const int64_t perPanel = WgmmaForward::kPanelCols / 16;
  auto step = [&](int64_t rows) {
    return [rows, perPanel](int64_t ks) {
      return (ks / perPanel) * rows * kRowBytes + (ks % perPanel) * 32;
    };
  };
  auto qStep = step(cfg.blockM), kStep = step(cfg.blockN);
  Product scores;
  scores.n = keys ? keys : cfg.blockN;
  scores.kSteps = d / 16;
  scores.aStepBytes = qStep;
  scores.bStepBytes = kStep;
  return issueProduct(scores, {}, qDesc, {}, kDesc);
}

SmallVector<Value> Builder::issueAccumulate(ValueRange o,
                                            ArrayRef<Value> pPacked,
                                            Value vDesc, int64_t keys) {
  // k step kk: 16 key rows of 128 bytes further into each panel.
  auto vStep = [](int64_t kk) { return kk * 16 * kRowBytes; };
  Product accumulate;
  accumulate.n = d;
  accumulate.kSteps = (keys ? keys : cfg.blockN) / 16;
  accumulate.transB = true;
  accumulate.bStepBytes = vStep;
  accumulate.zeroFirst = false;
  return issueProduct(accumulate, o, Value(), pPacked, vDesc);
}

Value Builder::warpgroupAny(Value flag, Value consumer) {
  Value any = LLVM::InlineAsmOp::create(
                  b, loc, i32,
                  ValueRange{arith::ExtUIOp::create(b, loc, i32, flag),
                             voteBarrier(consumer)},
                  llvm::formatv("{\n\t.reg .pred p;\n\t"
                                "setp.ne.b32 p, $1, 0;\n\t"
                                "bar.red.or.pred p, $2, {0}, p;\n\t"
                                "selp.b32 $0, 1, 0, p;\n\t}",
                                kWarpgroupThreads)
                      .str(),
                  "=r,r,r", /*has_side_effects=*/true,
                  /*is_align_stack=*/false,
                  LLVM::tailcallkind::TailCallKind::None,
                  LLVM::AsmDialectAttr::get(b.getContext(),
                                            LLVM::AsmDialect::AD_ATT),
                  /*operand_attrs=*/ArrayAttr())
                  .getResult(0);
  // Every thread holds the same value; read from lane 0, ptxas knows it.
  any = gpu::ShuffleOp::create(b, loc, any, 0, 32, gpu::ShuffleMode::IDX)
            .getShuffleResult();
  return cmp(Pred::ne, any, c32(0));
}

} // namespace flashjit::wgmma
