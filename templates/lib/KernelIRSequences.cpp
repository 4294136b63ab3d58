//===- KernelIRSequences.cpp - varlen and paged rows in the templates ----===//
// Why: a packed (varlen) batch gives each sequence its rows by offsets, and
// a paged cache gives each key its row by a block table; every prefill
// template narrows its parameters to one sequence and finds a key's row
// through these helpers of KernelIR (declared in KernelIR.h).
#include "KernelIR.h"

using namespace mlir;

namespace flashjit {

namespace {
/// Entry `index` (i64) of an i32 array in global memory, as i64.
Value loadOffset(KernelIR &ir, Value array, Value index) {
  Value raw = LLVM::LoadOp::create(ir.b, ir.loc, ir.i32,
                                   ir.globalAddress(array, ir.i32, index),
                                   /*alignment=*/4);
  return arith::ExtSIOp::create(ir.b, ir.loc, ir.i64, raw).getResult();
}
} // namespace

scf::IfOp KernelIR::beginVarlenSequence(ForwardParams &p,
                                        const BlockCoordinates &at,
                                        int64_t blockM) {
  narrowToSequence(p, at.batch);
  auto guard = scf::IfOp::create(
      b, loc,
      cmp(arith::CmpIPredicate::slt, mul(at.queryBlock, c64(blockM)),
          p.seqlenQ),
      /*withElse=*/false);
  b.setInsertionPoint(guard.thenBlock()->getTerminator());
  return guard;
}

Value KernelIR::varlenBlock(const ForwardParams &p, Value block,
                            int64_t blockM, BlockCoordinates &at) {
  Value rows = p.seqlenQ;
  auto startOf = [&](Value batch) {
    return minS(maxS(loadOffset(*this, p.cuSeqlensQ, batch), c64(0)), rows);
  };
  auto firstBlockOf = [&](Value batch) {
    return add(divU(startOf(batch), blockM), batch);
  };
  // The last sequence whose first number is at most `block`: lo keeps
  // that property (or is 0), hi is past the answer.
  Value batch = toI64(p.batch);
  auto search = scf::WhileOp::create(
      b, loc, TypeRange{i64, i64}, ValueRange{c64(0), batch},
      [&](OpBuilder &, Location, ValueRange range) {
        scf::ConditionOp::create(
            b, loc,
            cmp(arith::CmpIPredicate::sgt, sub(range[1], range[0]), c64(1)),
            range);
      },
      [&](OpBuilder &, Location, ValueRange range) {
        Value mid = divU(add(range[0], range[1]), 2);
        Value below = cmp(arith::CmpIPredicate::sle, firstBlockOf(mid), block);
        scf::YieldOp::create(
            b, loc,
            ValueRange{arith::SelectOp::create(b, loc, below, mid, range[0]),
                       arith::SelectOp::create(b, loc, below, range[1], mid)});
      });
  at.batch = search.getResult(0);
  Value first = firstBlockOf(at.batch);
  at.queryBlock = sub(block, first);
  Value end = minS(maxS(loadOffset(*this, p.cuSeqlensQ, add(at.batch, c64(1))),
                        startOf(at.batch)),
                   rows);
  Value length = sub(end, startOf(at.batch));
  Value inside = arith::AndIOp::create(
      b, loc, cmp(arith::CmpIPredicate::sle, first, block),
      cmp(arith::CmpIPredicate::slt, mul(at.queryBlock, c64(blockM)), length));
  return arith::AndIOp::create(
      b, loc, inside, cmp(arith::CmpIPredicate::sgt, batch, c64(0)));
}

void KernelIR::narrowToSequence(ForwardParams &p, Value batch) {
  narrowToRows(p, batch, sequenceRows(p, batch));
}

KernelIR::SequenceRows KernelIR::sequenceRows(const ForwardParams &p,
                                              Value batch) {
  // Rows [start, end) of sequence `batch`, within [0, total): offsets that
  // are not monotone or run past the buffers give a shorter (or empty)
  // sequence, never a row outside them.
  auto rowsOf = [&](Value offsets, Value total) {
    Value start =
        minS(maxS(loadOffset(*this, offsets, batch), c64(0)), total);
    Value end = minS(
        maxS(loadOffset(*this, offsets, add(batch, c64(1))), start), total);
    return std::make_pair(start, sub(end, start));
  };
  SequenceRows rows;
  std::tie(rows.qStart, rows.qLength) = rowsOf(p.cuSeqlensQ, p.seqlenQ);
  if (spec.paged()) {
    // The sequence's key count, at most what its row of the table holds.
    Value keys = loadOffset(*this, p.cuSeqlensK, batch);
    rows.kStart = c64(0);
    rows.kLength =
        minS(maxS(keys, c64(0)), mul(p.maxPages, c64(spec.pageSize)));
  } else {
    std::tie(rows.kStart, rows.kLength) = rowsOf(p.cuSeqlensK, p.seqlenK);
  }
  return rows;
}

void KernelIR::narrowToRows(ForwardParams &p, Value batch,
                            const SequenceRows &rows) {
  Value qStart = rows.qStart, qLength = rows.qLength;
  Value kStart = rows.kStart, kLength = rows.kLength;
  if (spec.paged()) {
    // K and V stay the pool (pagedKey finds each key's row).
    kStart = Value();
    p.poolRows = p.seqlenK;
    p.blockTable = globalAddress(p.blockTable, i32, mul(batch, p.maxPages));
  }
  p.qRowBase = qStart;
  p.kRowBase = kStart;
  p.seqlenQ = qLength;
  p.seqlenK = kLength;
  rebaseRows(p.q, p.qStrides, elt, qStart);
  rebaseRows(p.o, p.oStrides, elt, qStart);
  rebaseRows(p.lse, p.lseStrides, f32, qStart);
  if (spec.paged()) {
    p.kStrides[0] = c64(0);
    p.vStrides[0] = c64(0);
  } else {
    rebaseRows(p.k, p.kStrides, elt, kStart);
    rebaseRows(p.v, p.vStrides, elt, kStart);
  }
}

void KernelIR::rebaseRows(Value &base, SmallVectorImpl<Value> &strides,
                          Type type, Value start) {
  base = globalAddress(base, type, mul(start, strides[2]));
  strides[0] = c64(0);
}

PagedKey KernelIR::pagedKey(const ForwardParams &p, Value key) {
  Value inSequence = cmp(arith::CmpIPredicate::slt, key, p.seqlenK);
  // Keys past the length read slot 0 of the row, which every sequence
  // with keys has; the result is discarded for them.
  Value slot = arith::SelectOp::create(b, loc, inSequence,
                                       divU(key, spec.pageSize), c64(0));
  Value page = arith::ExtSIOp::create(
      b, loc, i64,
      LLVM::LoadOp::create(b, loc, i32, globalAddress(p.blockTable, i32, slot),
                           /*alignment=*/4));
  Value pages = divU(p.poolRows, spec.pageSize);
  Value inPool = arith::AndIOp::create(
      b, loc, cmp(arith::CmpIPredicate::sge, page, c64(0)),
      cmp(arith::CmpIPredicate::slt, page, pages));
  PagedKey k;
  k.valid = arith::AndIOp::create(b, loc, inSequence, inPool);
  Value row = add(mul(page, c64(spec.pageSize)), remU(key, spec.pageSize));
  k.row = arith::SelectOp::create(b, loc, k.valid, row, p.poolRows);
  return k;
}

} // namespace flashjit
