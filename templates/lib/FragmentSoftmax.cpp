//===- FragmentSoftmax.cpp - online softmax on tensor-core fragments ------===//
// Why: see FragmentSoftmax.h.
#include "FragmentSoftmax.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>

using namespace mlir;
using Pred = arith::CmpIPredicate;

namespace flashjit {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
} // namespace

void FragmentSoftmax::mask(MutableArrayRef<Value> s, Value n0, int64_t blockN,
                           Value firstRow, Value quadCol, Value seqlenK,
                           function_ref<Value(int64_t, int64_t)> rowOf) {
  OpBuilder &b = ir.b;
  Location loc = ir.loc;
  Value needMask = ir.cmp(Pred::sgt, ir.add(n0, ir.c64(blockN)), seqlenK);
  if (ir.spec.causal)
    needMask = arith::OrIOp::create(
        b, loc, needMask,
        ir.cmp(Pred::sgt, ir.add(n0, ir.c64(blockN - 1)), firstRow));
  SmallVector<Type> types(s.size(), ir.f32);
  auto masked = scf::IfOp::create(b, loc, types, needMask,
                                  /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(masked.thenBlock());
    SmallVector<Value> out;
    for (int64_t mt = 0; mt < mTiles; ++mt) {
      Value rows[2] = {rowOf(mt, 0), rowOf(mt, 1)};
      for (int64_t nt = 0; nt < nTiles; ++nt)
        for (int64_t r = 0; r < kAccPerTile; ++r) {
          Value col = ir.add(ir.add(n0, quadCol), ir.c64(nt * 8 + r % 2));
          Value valid = ir.cmp(Pred::slt, col, seqlenK);
          if (ir.spec.causal)
            valid = arith::AndIOp::create(b, loc, valid,
                                          ir.cmp(Pred::sle, col, rows[r / 2]));
          out.push_back(arith::SelectOp::create(
              b, loc, valid, s[scoreAt(mt, nt) + r], ir.cF32(kNegInf)));
        }
    }
    scf::YieldOp::create(b, loc, out);
    b.setInsertionPointToStart(masked.elseBlock());
    scf::YieldOp::create(b, loc, ValueRange(s));
  }
  for (size_t i = 0; i < s.size(); ++i)
    s[i] = masked.getResult(i);
}

FragmentSoftmax::Update
FragmentSoftmax::update(ValueRange s, ValueRange max,
                        ValueRange sum, Value scaleLog2,
                        function_ref<Value(Value, Value)> packPair) {
  OpBuilder &b = ir.b;
  Location loc = ir.loc;
  Update u;
  u.max.resize(rowStates());
  u.sum.resize(rowStates());
  u.alpha.resize(rowStates());
  u.packed.resize(mTiles * nTiles * 2);
  SmallVector<Value> negShift(rowStates());
  // New max, and alpha. A row with every score masked so far keeps
  // m = -inf; it shifts by 0 then, so no -inf - -inf appears.
  for (int64_t mt = 0; mt < mTiles; ++mt)
    for (int64_t h = 0; h < 2; ++h) {
      int64_t row = mt * 2 + h;
      Value rowMax = max[row];
      for (int64_t nt = 0; nt < nTiles; ++nt)
        for (int64_t e = 0; e < 2; ++e)
          rowMax = ir.maxF(rowMax, s[scoreAt(mt, nt) + 2 * h + e]);
      rowMax = ir.shuffleXorReduce(rowMax, 4, /*isMax=*/true);
      Value isEmpty = arith::CmpFOp::create(
          b, loc, arith::CmpFPredicate::OEQ, rowMax, ir.cF32(kNegInf));
      Value scaledMax = arith::MulFOp::create(b, loc, rowMax, scaleLog2);
      Value shift =
          arith::SelectOp::create(b, loc, isEmpty, ir.cF32(0.0f), scaledMax);
      Value oldScaled = arith::MulFOp::create(b, loc, max[row], scaleLog2);
      u.alpha[row] = ir.exp2(arith::SubFOp::create(b, loc, oldScaled, shift));
      negShift[row] = arith::NegFOp::create(b, loc, shift);
      u.max[row] = rowMax;
    }
  // P, rounded and packed at once (half the registers of f32 P).
  for (int64_t mt = 0; mt < mTiles; ++mt)
    for (int64_t h = 0; h < 2; ++h) {
      int64_t row = mt * 2 + h;
      Value rowSum = arith::MulFOp::create(b, loc, sum[row], u.alpha[row]);
      for (int64_t nt = 0; nt < nTiles; ++nt) {
        Value pair[2];
        for (int64_t e = 0; e < 2; ++e) {
          Value score = s[scoreAt(mt, nt) + 2 * h + e];
          pair[e] = ir.exp2(
              LLVM::FMAOp::create(b, loc, score, scaleLog2, negShift[row]));
          rowSum = arith::AddFOp::create(b, loc, rowSum, pair[e]);
        }
        u.packed[(mt * nTiles + nt) * 2 + h] = packPair(pair[0], pair[1]);
      }
      u.sum[row] = rowSum;
    }
  return u;
}

SmallVector<Value> FragmentSoftmax::rescale(ValueRange acc,
                                            ValueRange alpha) {
  OpBuilder &b = ir.b;
  Location loc = ir.loc;
  Value changed;
  for (Value a : alpha) {
    Value ne = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, a,
                                     ir.cF32(1.0f));
    changed = changed ? arith::OrIOp::create(b, loc, changed, ne) : ne;
  }
  Value anyChanged = NVVM::VoteSyncOp::create(
      b, loc, b.getI1Type(), ir.c32(-1), changed, NVVM::VoteSyncKind::any);
  SmallVector<Type> types(acc.size(), ir.f32);
  auto rescaled = scf::IfOp::create(b, loc, types, anyChanged,
                                    /*withElseRegion=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(rescaled.thenBlock());
  const int64_t perMTile = acc.size() / mTiles;
  SmallVector<Value> scaled;
  for (int64_t mt = 0; mt < mTiles; ++mt)
    for (int64_t i = 0; i < perMTile; ++i)
      scaled.push_back(arith::MulFOp::create(
          b, loc, acc[mt * perMTile + i],
          alpha[mt * 2 + (i % kAccPerTile) / 2]));
  scf::YieldOp::create(b, loc, scaled);
  b.setInsertionPointToStart(rescaled.elseBlock());
  scf::YieldOp::create(b, loc, ValueRange(acc));
  return SmallVector<Value>(rescaled.getResults());
}

void FragmentSoftmax::store(const ForwardParams &p, const BlockCoordinates &at,
                            ValueRange max, ValueRange sum,
                            ValueRange acc, Value quadCol,
                            function_ref<Value(int64_t, int64_t)> rowOf,
                            function_ref<Value(Value, Value)> packPair) {
  OpBuilder &b = ir.b;
  Location loc = ir.loc;
  const int64_t dTiles = acc.size() / (mTiles * kAccPerTile);
  for (int64_t mt = 0; mt < mTiles; ++mt)
    for (int64_t h = 0; h < 2; ++h) {
      int64_t rowState = mt * 2 + h;
      Value rowMax = arith::MulFOp::create(b, loc, max[rowState], p.scaleLog2);
      Value rowSum = ir.shuffleXorReduce(sum[rowState], 4, /*isMax=*/false);
      Value inverse = arith::DivFOp::create(b, loc, ir.cF32(1.0f), rowSum);
      Value row = rowOf(mt, h);
      OpBuilder::InsertionGuard g(b);
      auto inRange = scf::IfOp::create(
          b, loc, ir.cmp(Pred::slt, row, p.seqlenQ), /*withElse=*/false);
      b.setInsertionPoint(inRange.thenBlock()->getTerminator());
      Value oRow =
          ir.add(ir.rowOffset(p.oStrides, at.batch, at.head, row), quadCol);
      for (int64_t dt = 0; dt < dTiles; ++dt) {
        int64_t i = (mt * dTiles + dt) * kAccPerTile + 2 * h;
        Value lo = arith::MulFOp::create(b, loc, acc[i], inverse);
        Value hi = arith::MulFOp::create(b, loc, acc[i + 1], inverse);
        LLVM::StoreOp::create(
            b, loc, packPair(lo, hi),
            ir.globalAddress(p.o, ir.elt, ir.add(oRow, ir.c64(dt * 8))),
            /*alignment=*/4);
      }
      auto firstOfQuad = scf::IfOp::create(
          b, loc, ir.cmp(Pred::eq, quadCol, ir.c64(0)), /*withElse=*/false);
      b.setInsertionPoint(firstOfQuad.thenBlock()->getTerminator());
      LLVM::StoreOp::create(
          b, loc, ir.lseFromBase2(rowMax, rowSum),
          ir.globalAddress(p.lse, ir.f32,
                           ir.rowOffset(p.lseStrides, at.batch, at.head, row)),
          /*alignment=*/4);
    }
}

} // namespace flashjit
