//===- BackwardAuxKernels.cpp - preprocess and convert of the backward ----===//
// Why: the two memory-bound steps around the main backward kernel. Both
// read or write rows of head_dim elements in 16-byte chunks with the
// chunks of a row on adjacent lanes, so each warp's accesses coalesce.
//   preprocess: D[row] = sum_d dO[row, d] * O[row, d] in f32 (the lanes of
//               a row reduce with xor shuffles), the row's f32 dQ
//               accumulator zeroed (and, deterministic, the turn counter
//               of each query block by its first row);
//   convert:    dQ[row, d] = scale * accumulator[row, d], rounded.
#include "BackwardBuilder.h"

#include "flashjit/Templates/MmaSyncBackward.h"
#include "flashjit/Templates/WgmmaBackward.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;

namespace flashjit::backward {

using Pred = arith::CmpIPredicate;

namespace {
/// The (head, batch) of a block of the auxiliary grids (x: rows, y: head,
/// z: batch).
struct AuxBlock {
  Value blockX, head, batch;
};
AuxBlock auxBlock(KernelIR &ir) {
  AuxBlock a;
  a.blockX = ir.toI64(gpu::BlockIdOp::create(ir.b, ir.loc, gpu::Dimension::x));
  a.head = ir.toI64(gpu::BlockIdOp::create(ir.b, ir.loc, gpu::Dimension::y));
  a.batch = ir.toI64(gpu::BlockIdOp::create(ir.b, ir.loc, gpu::Dimension::z));
  return a;
}
} // namespace

void buildPreprocessKernel(OpBuilder &b, Location loc,
                           const AttentionSpec &spec, StringRef name,
                           const DqAccumLayout &dqLayout, int64_t turnBlockM) {
  OpBuilder::InsertionGuard funcGuard(b);
  KernelIR ir(b, loc, spec);
  SmallVector<Type> argTypes(4, ir.globalPtr);
  argTypes.append(6, ir.i64);
  argTypes.push_back(ir.i32);
  if (turnBlockM > 0)
    argTypes.push_back(ir.globalPtr);
  gpu::GPUFuncOp func = ir.beginKernel(name, argTypes, kBackwardAuxThreads);
  ValueRange args = func.getBody().front().getArguments();
  Value o = args[0], dO = args[1], dBuf = args[2], accum = args[3];
  SmallVector<Value, 3> oStrides(args.begin() + 4, args.begin() + 7);
  SmallVector<Value, 3> dOStrides(args.begin() + 7, args.begin() + 10);
  Value seqlenQ = arith::ExtSIOp::create(b, loc, ir.i64, args[10]);

  const int64_t chunks = spec.headDim / 8;
  const int64_t lanesPerRow = static_cast<int64_t>(
      llvm::PowerOf2Ceil(static_cast<uint64_t>(chunks)));
  const int64_t rowsPerBlock = kBackwardAuxThreads / lanesPerRow;
  AuxBlock at = auxBlock(ir);
  Value tid = ir.threadIdX();
  Value row = ir.add(ir.mul(at.blockX, ir.c64(rowsPerBlock)),
                     ir.divU(tid, lanesPerRow));
  Value chunk = ir.remU(tid, lanesPerRow);
  Value rowOk = ir.cmp(Pred::slt, row, seqlenQ);
  Value active = arith::AndIOp::create(
      b, loc, rowOk, ir.cmp(Pred::slt, chunk, ir.c64(chunks)));

  auto partial = scf::IfOp::create(b, loc, TypeRange{ir.f32}, active,
                                   /*withElse=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(partial.thenBlock());
    auto vec = VectorType::get({8}, ir.elt);
    auto wide = VectorType::get({8}, ir.f32);
    Value column = ir.mul(chunk, ir.c64(8));
    auto load = [&](Value base, ValueRange strides) {
      Value offset = ir.add(ir.rowOffset(strides, at.batch, at.head, row),
                            column);
      Value raw = LLVM::LoadOp::create(
          b, loc, vec, ir.globalAddress(base, ir.elt, offset),
          /*alignment=*/16);
      return arith::ExtFOp::create(b, loc, wide, raw);
    };
    Value product = arith::MulFOp::create(b, loc, load(o, oStrides),
                                          load(dO, dOStrides));
    // The chunk's 8 f32 of the dQ accumulator start at zero.
    Value zeros = arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(wide, b.getF32FloatAttr(0.0f)));
    LLVM::StoreOp::create(
        b, loc, zeros,
        ir.globalAddress(accum, ir.f32,
                         ir.add(dqAccumRow(ir, dqLayout, seqlenQ, at.batch,
                                           at.head, row),
                                column)),
        /*alignment=*/16);
    Value sum = vector::ReductionOp::create(b, loc, vector::CombiningKind::ADD,
                                            product);
    scf::YieldOp::create(b, loc, sum);
    b.setInsertionPointToStart(partial.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange{ir.cF32(0.0f)});
  }
  // Every lane takes part in the shuffles.
  Value total = ir.shuffleXorReduce(partial.getResult(0), lanesPerRow,
                                    /*isMax=*/false);
  {
    OpBuilder::InsertionGuard g(b);
    auto owner = scf::IfOp::create(
        b, loc,
        arith::AndIOp::create(b, loc, rowOk,
                              ir.cmp(Pred::eq, chunk, ir.c64(0))),
        /*withElse=*/false);
    b.setInsertionPoint(owner.thenBlock()->getTerminator());
    LLVM::StoreOp::create(
        b, loc, total,
        ir.globalAddress(dBuf, ir.f32,
                         workspaceRow(ir, seqlenQ, at.batch, at.head, row)),
        /*alignment=*/4);
    if (turnBlockM > 0) {
      // The first row of each query block zeroes its turn counter
      // (BackwardDqTurns.cpp), [batch, heads, ceil(seqlen_q / block_m)].
      auto first = scf::IfOp::create(
          b, loc, ir.cmp(Pred::eq, ir.remU(row, turnBlockM), ir.c64(0)),
          /*withElse=*/false);
      b.setInsertionPoint(first.thenBlock()->getTerminator());
      Value blocks =
          ir.divU(ir.add(seqlenQ, ir.c64(turnBlockM - 1)), turnBlockM);
      Value headIndex =
          ir.add(ir.mul(at.batch, ir.c64(spec.numHeads)), at.head);
      Value counter =
          ir.add(ir.mul(headIndex, blocks), ir.divU(row, turnBlockM));
      LLVM::StoreOp::create(b, loc, ir.c32(0),
                            ir.globalAddress(args[11], ir.i32, counter),
                            /*alignment=*/4);
    }
  }
  gpu::ReturnOp::create(b, loc);
}

void buildConvertKernel(OpBuilder &b, Location loc, const AttentionSpec &spec,
                        StringRef name, const DqAccumLayout &dqLayout) {
  OpBuilder::InsertionGuard funcGuard(b);
  KernelIR ir(b, loc, spec);
  SmallVector<Type> argTypes(2, ir.globalPtr);
  argTypes.append(3, ir.i64);
  argTypes.append({ir.i32, ir.f32});
  gpu::GPUFuncOp func = ir.beginKernel(name, argTypes, kBackwardAuxThreads);
  ValueRange args = func.getBody().front().getArguments();
  Value accum = args[0], dq = args[1];
  SmallVector<Value, 3> dqStrides(args.begin() + 2, args.begin() + 5);
  Value seqlenQ = arith::ExtSIOp::create(b, loc, ir.i64, args[5]);
  Value scale = args[6];

  const int64_t chunks = spec.headDim / 8;
  AuxBlock at = auxBlock(ir);
  Value index = ir.add(ir.mul(at.blockX, ir.c64(kBackwardAuxThreads)),
                       ir.threadIdX());
  Value row = ir.divU(index, chunks);
  Value column = ir.mul(ir.remU(index, chunks), ir.c64(8));
  OpBuilder::InsertionGuard g(b);
  auto inRange = scf::IfOp::create(b, loc, ir.cmp(Pred::slt, row, seqlenQ),
                                   /*withElse=*/false);
  b.setInsertionPoint(inRange.thenBlock()->getTerminator());
  auto wide = VectorType::get({8}, ir.f32);
  Value from = ir.globalAddress(
      accum, ir.f32,
      ir.add(dqAccumRow(ir, dqLayout, seqlenQ, at.batch, at.head, row),
             column));
  Value values = LLVM::LoadOp::create(b, loc, wide, from, /*alignment=*/16);
  Value scaled = arith::MulFOp::create(
      b, loc, values, vector::BroadcastOp::create(b, loc, wide, scale));
  Value rounded = arith::TruncFOp::create(
      b, loc, VectorType::get({8}, ir.elt), scaled);
  Value to = ir.globalAddress(
      dq, ir.elt,
      ir.add(ir.rowOffset(dqStrides, at.batch, at.head, row), column));
  LLVM::StoreOp::create(b, loc, rounded, to, /*alignment=*/16);
  b.setInsertionPointAfter(inRange);
  gpu::ReturnOp::create(b, loc);
}

} // namespace flashjit::backward

namespace flashjit {

llvm::Error MmaSyncBackward::build(mlir::OpBuilder &builder,
                                   mlir::Location loc,
                                   const AttentionSpec &spec,
                                   const TileConfig &config,
                                   llvm::StringRef baseName,
                                   const ModRegions &mods) {
  if (auto err = checkConfig(spec, config))
    return err;
  BackwardKernelNames names = BackwardKernelNames::of(baseName);
  const DqAccumLayout dqLayout = DqAccumLayout::of(spec, config);
  backward::buildPreprocessKernel(builder, loc, spec, names.preprocess,
                                  dqLayout,
                                  isDeterministic(config) ? config.blockM : 0);
  if (WgmmaBackward::owns(config))
    WgmmaBackward::buildMain(builder, loc, spec, config, names.main, mods);
  else
    backward::MainKernelBuilder(builder, loc, spec, config)
        .buildMain(names.main, mods);
  backward::buildConvertKernel(builder, loc, spec, names.convert, dqLayout);
  return llvm::Error::success();
}

} // namespace flashjit
