//===- TileOrderKernel.cpp - the tile-order kernel's IR -------------------===//
// Why: see TileOrderKernel.h. One block per list row sorts the row's query
// blocks without shared memory: its threads first write each block's key
// (its weighed listed blocks, -1 for the padding) into the second half of
// the row, then, after one barrier, each thread ranks its own blocks by
// reading all the keys, four at a time, and writes each block at its rank
// in the first half. Ranking is quadratic in the query blocks of a row
// (128 at 16k tokens of block_m 128: 32 vector loads per block), which
// stays far below the forward's own work at any length.
#include "flashjit/Templates/TileOrderKernel.h"
#include "KernelIR.h"

#include "flashjit/Templates/KernelTemplate.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace flashjit {

bool usesTileOrder(const AttentionSpec &spec, const TileConfig &config) {
  if (!spec.isBlockSparse() || spec.varlen)
    return false;
  const KernelTemplate *tmpl = lookupTemplate(config.family);
  return tmpl && tmpl->takesTilesFromCounter();
}

std::string tileOrderKernelName(llvm::StringRef forwardName) {
  return (forwardName + "_tile_order").str();
}

int64_t tileOrderRowElements(int64_t seqlenQ, int64_t blockM) {
  const int64_t blocks = (seqlenQ + blockM - 1) / blockM;
  return 2 * ((blocks + 3) / 4 * 4);
}

LaunchGeometry tileOrderGeometry(int64_t listBatch, int64_t listHeads) {
  LaunchGeometry g;
  g.gridX = static_cast<unsigned>(listHeads);
  g.gridY = static_cast<unsigned>(listBatch);
  g.blockX = kTileOrderThreads;
  return g;
}

namespace {

class TileOrderBuilder : public KernelIR {
public:
  TileOrderBuilder(OpBuilder &b, Location loc, const AttentionSpec &spec)
      : KernelIR(b, loc, spec) {}
  void emit(StringRef name, int64_t blockM);

private:
  /// for (i = tid; i < end; i += threads) body(i), i i64.
  void forEachOwn(Value tid, Value end, function_ref<void(Value)> body) {
    scf::ForOp::create(b, loc, toIndex(tid), toIndex(end),
                       cIdx(kTileOrderThreads), ValueRange{},
                       [&](OpBuilder &, Location, Value i, ValueRange) {
                         body(toI64(i));
                         scf::YieldOp::create(b, loc);
                       });
  }
};

void TileOrderBuilder::emit(StringRef name, int64_t blockM) {
  OpBuilder::InsertionGuard funcGuard(b);
  SmallVector<Type> argTypes = {i32, i32};
  const int64_t ranks[] = {3, 4, 3, 4};
  for (int64_t rank : ranks) {
    argTypes.push_back(globalPtr);
    argTypes.append(rank, i64);
  }
  argTypes.push_back(globalPtr);
  gpu::GPUFuncOp func = beginKernel(name, argTypes, kTileOrderThreads);
  ValueRange args = func.getBody().front().getArguments();
  Value seqlenQ = arith::ExtSIOp::create(b, loc, i64, args[0]);
  Value seqlenK = arith::ExtSIOp::create(b, loc, i64, args[1]);
  SmallVector<ForwardParams::Capture> lists;
  unsigned at = 2;
  for (int64_t rank : ranks) {
    ForwardParams::Capture list;
    list.data = args[at++];
    for (int64_t d = 0; d < rank; ++d)
      list.strides.push_back(args[at++]);
    lists.push_back(list);
  }
  Value order = args[at];

  Value head = toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::x));
  Value batch = toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::y));
  Value heads = toI64(gpu::GridDimOp::create(b, loc, gpu::Dimension::x));
  Value tid = threadIdX();
  Value blocks = divU(add(seqlenQ, c64(blockM - 1)), blockM);
  Value padded = mul(divU(add(blocks, c64(3)), 4), c64(4));
  Value row = globalAddress(
      order, i32, mul(add(mul(batch, heads), head), mul(padded, c64(2))));
  Value keys = globalAddress(row, i32, padded);

  // Each query block's key: its list row's weighed lengths (the row of
  // the mask block that holds the query block's first row).
  forEachOwn(tid, padded, [&](Value i) {
    Value key = ifElse(
        TypeRange{i32}, cmp(arith::CmpIPredicate::slt, i, blocks),
        [&]() -> SmallVector<Value> {
          Value listRow = divU(mul(i, c64(blockM)), spec.sparseBlockM);
          KvTileRange r =
              blockListRange(lists, batch, head, listRow, spec.sparseBlockN,
                             spec.sparseBlockN, seqlenK);
          return {
              toI32(add(mul(r.numPartial, c64(3)), mul(r.numFull, c64(2))))};
        },
        [&]() -> SmallVector<Value> { return {c32(-1)}; })[0];
    LLVM::StoreOp::create(b, loc, key, globalAddress(keys, i32, i),
                          /*alignment=*/4);
  });
  // The keys' stores are visible to the block's threads after it.
  gpu::BarrierOp::create(b, loc);

  // Block i's rank: the blocks of a larger key, and of the same key before
  // it. The padding's -1 is below every key.
  auto quad = VectorType::get({4}, i32);
  forEachOwn(tid, blocks, [&](Value i) {
    Value own = LLVM::LoadOp::create(b, loc, i32, globalAddress(keys, i32, i),
                                     /*alignment=*/4);
    auto ranking = scf::ForOp::create(
        b, loc, cIdx(0), toIndex(padded), cIdx(4), ValueRange{c32(0)},
        [&](OpBuilder &, Location, Value j0, ValueRange carried) {
          Value first = toI64(j0);
          Value four = LLVM::LoadOp::create(
              b, loc, quad, globalAddress(keys, i32, first), /*alignment=*/16);
          Value rank = carried[0];
          for (int64_t e = 0; e < 4; ++e) {
            Value other = vector::ExtractOp::create(b, loc, four, e);
            Value j = add(first, c64(e));
            Value larger = cmp(arith::CmpIPredicate::sgt, other, own);
            Value tieBefore = arith::AndIOp::create(
                b, loc, cmp(arith::CmpIPredicate::eq, other, own),
                cmp(arith::CmpIPredicate::slt, j, i));
            Value before = arith::OrIOp::create(b, loc, larger, tieBefore);
            rank = add(rank, arith::ExtUIOp::create(b, loc, i32, before));
          }
          scf::YieldOp::create(b, loc, rank);
        });
    LLVM::StoreOp::create(b, loc, toI32(i),
                          globalAddress(row, i32, toI64(ranking.getResult(0))),
                          /*alignment=*/4);
  });
  gpu::ReturnOp::create(b, loc);
}

} // namespace

void buildTileOrderKernel(OpBuilder &builder, Location loc,
                          const AttentionSpec &spec, int64_t blockM,
                          StringRef name) {
  TileOrderBuilder(builder, loc, spec).emit(name, blockM);
}

} // namespace flashjit
