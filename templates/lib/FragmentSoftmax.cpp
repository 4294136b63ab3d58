//===- FragmentSoftmax.cpp - online softmax on tensor-core fragments ------===//
// Why: see FragmentSoftmax.h.
#include "FragmentSoftmax.h"

#include "FoldRepeats.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

using namespace mlir;
using Pred = arith::CmpIPredicate;

namespace flashjit {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
/// Independent add chains per row sum: enough to cover the add latency
/// with one warp per scheduler.
constexpr size_t kPartialSums = 4;
} // namespace

namespace {
/// The indices a mod sees for the thread's scores of the tile at n0: rows
/// and columns past the sequences (masked) are clamped to the last ones,
/// so that captured tensors are read in bounds. 32-bit, as the mods'
/// indices (ScoreModInline.cpp).
struct ModIndices {
  ModIndices(KernelIR &ir, const ScoreRules &rules, Value n0, Value quadCol,
             function_ref<Value(int64_t, int64_t)> rowOf)
      : ir(ir), rowOf(rowOf) {
    lastRow = ir.toI32(ir.sub(rules.seqlenQ, ir.c64(1)));
    lastColumn = ir.toI32(ir.sub(rules.seqlenK, ir.c64(1)));
    base = ir.toI32(ir.add(n0, quadCol));
  }
  /// Row half h of m tile mt (row slot mt * 2 + h): the thread's first
  /// row plus the fragment's offset, 16 mt + 8 h, so that every row slot
  /// shares one base and a mod's index sums (ALiBi's kv - q) differ between
  /// slots only in their constants: two slots whose sums are equal share
  /// their float form and what the mod computes from it.
  ModIndex row(int64_t mt, int64_t h) const {
    Value first = ir.toI32(rowOf(0, 0));
    int64_t offset = 16 * mt + 8 * h;
    return ModIndex(ir.minS(ir.add(first, ir.c32(offset)), lastRow), first,
                    offset);
  }
  /// Element r of n8 tile nt (column slot nt * 2 + r % 2).
  ModIndex column(int64_t nt, int64_t r) const {
    int64_t offset = nt * 8 + r % 2;
    return ModIndex(ir.minS(ir.add(base, ir.c32(offset)), lastColumn), base,
                    offset);
  }
  KernelIR &ir;
  function_ref<Value(int64_t, int64_t)> rowOf;
  Value lastRow, lastColumn, base;
};
} // namespace

ModReads FragmentSoftmax::readMaskAhead(
    Value n0, Value quadCol, const ScoreRules &rules,
    function_ref<Value(int64_t, int64_t)> rowOf) {
  if (!rules.mods || !rules.mods->hasMaskMod())
    return {};
  auto readAll = [&] {
    ModIndices at(ir, rules, n0, quadCol, rowOf);
    SmallVector<ModIndex> rows, columns;
    for (int64_t mt = 0; mt < mTiles; ++mt)
      for (int64_t h = 0; h < 2; ++h)
        rows.push_back(at.row(mt, h));
    for (int64_t nt = 0; nt < nTiles; ++nt)
      for (int64_t e = 0; e < 2; ++e)
        columns.push_back(at.column(nt, e));
    if (!staging)
      return rules.mods->readMaskAhead(rules.batch, rules.head, rows,
                                       columns);
    // Each column slot's offset from the tile's first column.
    IndexStaging stage = *staging;
    for (const ModIndex &column : columns)
      stage.slotOffsets.push_back(
          ir.add(ir.toI32(quadCol), ir.c32(column.offset)));
    return rules.mods->readMaskAhead(rules.batch, rules.head, rows, columns,
                                     &stage, n0, at.lastColumn);
  };
  // A block mask's full tiles skip the mask_mod: they read nothing.
  return rules.mods->readWhere(rules.maskModOn, readAll);
}

void FragmentSoftmax::mask(MutableArrayRef<Value> s, Value n0, int64_t blockN,
                           Value firstRow, Value lastRow, Value quadCol,
                           const ScoreRules &rules,
                           function_ref<Value(int64_t, int64_t)> rowOf) {
  OpBuilder &b = ir.b;
  Location loc = ir.loc;
  const AttentionSpec &spec = ir.spec;
  // The mods' regions come out once per score: their repeats are folded
  // as they are emitted (FoldRepeats.h).
  RepeatFolder repeats(b);
  Value base = ir.add(n0, quadCol);
  ScoreMods *mods = rules.mods;
  std::optional<ModIndices> indices;
  if (mods)
    indices.emplace(ir, rules, n0, quadCol, rowOf);
  auto modRow = [&](int64_t mt, int64_t h) { return indices->row(mt, h); };
  auto modColumn = [&](int64_t nt, int64_t r) {
    return indices->column(nt, r);
  };
  // With a fixed reference nothing but P's exponent reads the scores, so
  // a positive factor still pending on the score_mod's result (soft-cap's
  // cap) joins that exponent's multiply-add (scoreFactor): one multiply a
  // score fewer. The factor is the same for every score; masks keep their
  // -inf through it.
  scoreFactor = {};
  if (mods && mods->hasScoreMod())
    for (int64_t mt = 0; mt < mTiles; ++mt)
      for (int64_t nt = 0; nt < nTiles; ++nt)
        for (int64_t r = 0; r < kAccPerTile; ++r) {
          Value &score = s[scoreAt(mt, nt) + r];
          Value factor;
          score = mods->score(score, rules.batch, rules.head,
                              modRow(mt, r / 2), modColumn(nt, r),
                              fixedMax ? &factor : nullptr);
          if (factor && !scoreFactor)
            scoreFactor = factor;
        }
  repeats.fold();
  const bool hasMaskMod = mods && mods->hasMaskMod();
  const bool maskEveryTile = hasMaskMod && !rules.maskModOn;
  // Whether the bounds (sequence end, causal diagonal, window) cut this
  // tile; a block mask's partial tiles take the mask_mod besides.
  Value boundsCut;
  if (!maskEveryTile) {
    boundsCut =
        ir.cmp(Pred::sgt, ir.add(n0, ir.c64(blockN)), rules.seqlenK);
    if (spec.hasRightBound())
      boundsCut = arith::OrIOp::create(
          b, loc, boundsCut,
          ir.cmp(Pred::sgt, ir.add(n0, ir.c64(blockN - 1)),
                 ir.add(firstRow, ir.add(rules.diagonal,
                                         ir.c64(spec.rightExtent())))));
    if (spec.hasLeftBound())
      boundsCut = arith::OrIOp::create(
          b, loc, boundsCut,
          ir.cmp(Pred::slt, n0,
                 ir.sub(ir.add(lastRow, rules.diagonal),
                        ir.c64(spec.windowLeft))));
  }
  // The masked scores, with the mask_mod or without it.
  auto emitMasked = [&](bool withMaskMod) {
    RepeatFolder maskRepeats(b);
    // Score (row, n0 + quadCol + c) stays iff first <= c <= last, with
    // last = seqlenK - 1 - n0 - quadCol (and at most row + diagonal +
    // right extent - n0 - quadCol), first = row + diagonal - left extent -
    // n0 - quadCol, clamped to [-1, blockN] and made 32-bit once per row
    // half: then one compare with a constant per score and bound, no
    // 64-bit column arithmetic.
    Value lastByLength = ir.sub(ir.sub(rules.seqlenK, ir.c64(1)), base);
    // The clamped bound goes through a mov that LLVM cannot see through:
    // knowing it clamped, LLVM would otherwise compare each score's column
    // with the unclamped 64-bit bound, two instructions a score, not one.
    auto clamp32 = [&](Value bound) {
      Value clamped =
          ir.toI32(ir.maxS(ir.minS(bound, ir.c64(blockN)), ir.c64(-1)));
      return LLVM::InlineAsmOp::create(
                 b, loc, ir.i32, clamped, "mov.b32 $0, $1;", "=r,r",
                 /*has_side_effects=*/false, /*is_align_stack=*/false,
                 LLVM::tailcallkind::TailCallKind::None,
                 LLVM::AsmDialectAttr::get(b.getContext(),
                                           LLVM::AsmDialect::AD_ATT),
                 /*operand_attrs=*/ArrayAttr())
          .getResult(0);
    };
    SmallVector<Value> out;
    for (int64_t mt = 0; mt < mTiles; ++mt) {
      Value last[2], first[2];
      for (int64_t h = 0; h < 2; ++h) {
        Value diagonal = ir.sub(ir.add(rowOf(mt, h), rules.diagonal), base);
        Value bound = lastByLength;
        if (spec.hasRightBound())
          bound = ir.minS(bound,
                          ir.add(diagonal, ir.c64(spec.rightExtent())));
        last[h] = clamp32(bound);
        if (spec.hasLeftBound())
          first[h] = clamp32(ir.sub(diagonal, ir.c64(spec.windowLeft)));
      }
      for (int64_t nt = 0; nt < nTiles; ++nt)
        for (int64_t r = 0; r < kAccPerTile; ++r) {
          Value column = ir.c32(nt * 8 + r % 2);
          Value valid = ir.cmp(Pred::sle, column, last[r / 2]);
          if (spec.hasLeftBound())
            valid = arith::AndIOp::create(
                b, loc, valid, ir.cmp(Pred::sge, column, first[r / 2]));
          if (withMaskMod)
            valid = arith::AndIOp::create(
                b, loc, valid,
                mods->keep(rules.batch, rules.head, modRow(mt, r / 2),
                           modColumn(nt, r), {}, rules.reads,
                           mt * 2 + r / 2, nt * 2 + r % 2));
          out.push_back(arith::SelectOp::create(
              b, loc, valid, s[scoreAt(mt, nt) + r], ir.cF32(kNegInf)));
        }
    }
    maskRepeats.fold();
    return out;
  };
  if (maskEveryTile) {
    SmallVector<Value> out = emitMasked(/*withMaskMod=*/true);
    for (size_t i = 0; i < s.size(); ++i)
      s[i] = out[i];
    return;
  }
  // if (cut) masked else s; with a block mask's mask_mod: if (partial)
  // masked with the mod, else the same on the bounds alone. The mod's
  // tiles are uniform per tile, so each path's selects are the few it
  // needs.
  SmallVector<Type> types(s.size(), ir.f32);
  auto branch = [&](Value cond, function_ref<SmallVector<Value>()> then,
                    function_ref<SmallVector<Value>()> otherwise) {
    return ir.ifElse(types, cond, then, otherwise);
  };
  auto boundsOnly = [&] {
    return branch(
        boundsCut, [&] { return emitMasked(/*withMaskMod=*/false); },
        [&] { return SmallVector<Value>(s.begin(), s.end()); });
  };
  SmallVector<Value> out =
      hasMaskMod ? branch(
                       rules.maskModOn,
                       [&] { return emitMasked(/*withMaskMod=*/true); },
                       boundsOnly)
                 : boundsOnly();
  for (size_t i = 0; i < s.size(); ++i)
    s[i] = out[i];
}

namespace {
/// Folds `values` pairwise: depth log2(n) instead of a chain of n - 1
/// dependent instructions, which one warp per scheduler cannot hide.
Value treeReduce(SmallVector<Value> values,
                 function_ref<Value(Value, Value)> combine) {
  while (values.size() > 1) {
    SmallVector<Value> next;
    for (size_t i = 0; i + 1 < values.size(); i += 2)
      next.push_back(combine(values[i], values[i + 1]));
    if (values.size() % 2)
      next.push_back(values.back());
    values = std::move(next);
  }
  return values.front();
}

/// The sum of `values` as a tree (treeReduce).
Value sumTree(OpBuilder &b, Location loc, SmallVector<Value> values) {
  return treeReduce(std::move(values), [&](Value x, Value y) -> Value {
    return arith::AddFOp::create(b, loc, x, y);
  });
}
} // namespace

float FragmentSoftmax::maxProbability() const {
  return ir.spec.dtype == DType::F16 ? 0x1p15f : 0x1p64f;
}

SmallVector<Value> FragmentSoftmax::exponentiate(ValueRange s, int64_t row,
                                                 Value scaleLog2,
                                                 Value negShift,
                                                 SmallVector<Value> &probs) {
  OpBuilder &b = ir.b;
  Location loc = ir.loc;
  const int64_t mt = row / 2, h = row % 2;
  // mask() left the scores times scoreFactor to form: here, in the
  // multiply-add.
  if (scoreFactor) {
    assert(scoreFactor.getParentRegion()->isAncestor(
               b.getInsertionBlock()->getParent()) &&
           "mask() and the update of its tile in one region");
    scaleLog2 = arith::MulFOp::create(b, loc, scaleLog2, scoreFactor);
  }
  // One multiply-add and one exp2 per score, summed into kPartialSums
  // chains as they come (each P can die once it is packed; a tree would
  // keep every P alive until the sum).
  SmallVector<Value> partial;
  // shareExp2WithFmaUnits(): score k of the row goes to the FMA units
  // where k * eighths mod 8 < eighths, the given share spread evenly.
  auto onFmaUnits = [&](size_t k) {
    return static_cast<int64_t>(k) * exp2EighthsOnFma % 8 < exp2EighthsOnFma;
  };
  size_t k = 0;
  for (int64_t nt = 0; nt < nTiles; ++nt)
    for (int64_t e = 0; e < 2; ++e, ++k) {
      int64_t i = scoreAt(mt, nt) + 2 * h + e;
      Value exponent = LLVM::FMAOp::create(b, loc, s[i], scaleLog2, negShift);
      probs[i] = onFmaUnits(k) ? ir.exp2OnFmaUnits(exponent)
                               : ir.exp2(exponent);
      if (k < kPartialSums)
        partial.push_back(probs[i]);
      else
        partial[k % kPartialSums] = arith::AddFOp::create(
            b, loc, partial[k % kPartialSums], probs[i]);
    }
  return partial;
}

bool FragmentSoftmax::fixReference(ScoreMods &mods) {
  std::optional<ScoreInterval> range = mods.scoreInterval();
  if (!range)
    return false;
  // P at most maxProbability(), and for f16 at least its smallest normal
  // number, 2^-14.
  const double halfWidthLog2 = (range->hi - range->lo) / 2 * M_LOG2E;
  double limit = std::log2(maxProbability());
  if (ir.spec.dtype == DType::F16)
    limit = std::min(limit, 14.0);
  if (!(halfWidthLog2 <= limit))
    return false;
  fixedMax = mods.inFamilyUnits(
      static_cast<float>((range->lo + range->hi) / 2));
  return true;
}

FragmentSoftmax::Update FragmentSoftmax::update(ValueRange s, ValueRange max,
                                                ValueRange sum,
                                                Value scaleLog2) {
  OpBuilder &b = ir.b;
  Location loc = ir.loc;
  if (fixedMax) {
    SmallVector<Value> reference(rowStates(), fixedMax);
    Update u = updateWithinBound(s, reference, sum, scaleLog2);
    u.outgrown = {};
    return u;
  }
  Update u;
  u.max.resize(rowStates());
  u.sum.resize(rowStates());
  u.alpha.resize(rowStates());
  u.probs.resize(s.size());
  auto maxOf = [&](Value x, Value y) { return ir.maxF(x, y); };
  for (int64_t mt = 0; mt < mTiles; ++mt)
    for (int64_t h = 0; h < 2; ++h) {
      int64_t row = mt * 2 + h;
      // New max, and alpha. A row with every score masked so far keeps
      // m = -inf; it shifts by 0 then, so no -inf - -inf appears.
      SmallVector<Value> rowScores = {max[row]};
      for (int64_t nt = 0; nt < nTiles; ++nt)
        for (int64_t e = 0; e < 2; ++e)
          rowScores.push_back(s[scoreAt(mt, nt) + 2 * h + e]);
      Value rowMax = ir.shuffleXorReduce(treeReduce(rowScores, maxOf), 4,
                                         /*isMax=*/true);
      Value isEmpty = arith::CmpFOp::create(
          b, loc, arith::CmpFPredicate::OEQ, rowMax, ir.cF32(kNegInf));
      Value scaledMax = arith::MulFOp::create(b, loc, rowMax, scaleLog2);
      Value shift =
          arith::SelectOp::create(b, loc, isEmpty, ir.cF32(0.0f), scaledMax);
      Value oldScaled = arith::MulFOp::create(b, loc, max[row], scaleLog2);
      u.alpha[row] = ir.exp2(arith::SubFOp::create(b, loc, oldScaled, shift));
      u.max[row] = rowMax;
      SmallVector<Value> partial =
          exponentiate(s, row, scaleLog2,
                       arith::NegFOp::create(b, loc, shift), u.probs);
      partial.push_back(
          arith::MulFOp::create(b, loc, sum[row], u.alpha[row]));
      u.sum[row] = sumTree(b, loc, std::move(partial));
    }
  return u;
}

FragmentSoftmax::Update FragmentSoftmax::updateWithinBound(ValueRange s,
                                                           ValueRange max,
                                                           ValueRange sum,
                                                           Value scaleLog2) {
  OpBuilder &b = ir.b;
  Location loc = ir.loc;
  Update u;
  u.max.assign(max.begin(), max.end());
  u.sum.resize(rowStates());
  u.alpha.assign(rowStates(), ir.cF32(1.0f));
  u.probs.resize(s.size());
  for (int64_t row = 0; row < rowStates(); ++row) {
    // -m c: +inf with no reference yet (m = -inf), so that P is inf or NaN
    // and the tile goes back to update().
    Value negShift = arith::MulFOp::create(
        b, loc, max[row], arith::NegFOp::create(b, loc, scaleLog2));
    Value tileSum =
        sumTree(b, loc, exponentiate(s, row, scaleLog2, negShift, u.probs));
    // Every P is at most the thread's sum of the row; unordered (NaN) or
    // greater fails.
    Value outgrown =
        arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UGT, tileSum,
                              ir.cF32(maxProbability()));
    u.outgrown = u.outgrown
                     ? arith::OrIOp::create(b, loc, u.outgrown, outgrown)
                     : outgrown;
    u.sum[row] = arith::AddFOp::create(b, loc, sum[row], tileSum);
  }
  return u;
}

SmallVector<Value>
FragmentSoftmax::pack(ValueRange probs) {
  SmallVector<Value> packed(mTiles * nTiles * 2);
  for (int64_t mt = 0; mt < mTiles; ++mt)
    for (int64_t nt = 0; nt < nTiles; ++nt)
      for (int64_t h = 0; h < 2; ++h) {
        int64_t i = scoreAt(mt, nt) + 2 * h;
        packed[(mt * nTiles + nt) * 2 + h] = ir.packPair(probs[i], probs[i + 1]);
      }
  return packed;
}

SmallVector<Value> FragmentSoftmax::rescale(ValueRange acc,
                                            ValueRange alpha) {
  if (fixedMax)
    return SmallVector<Value>(acc);
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
  return ir.ifElse(
      types, anyChanged,
      [&] {
        const int64_t perMTile = acc.size() / mTiles;
        SmallVector<Value> scaled;
        for (int64_t mt = 0; mt < mTiles; ++mt)
          for (int64_t i = 0; i < perMTile; ++i)
            scaled.push_back(arith::MulFOp::create(
                b, loc, acc[mt * perMTile + i],
                alpha[mt * 2 + (i % kAccPerTile) / 2]));
        return scaled;
      },
      [&] { return SmallVector<Value>(acc); });
}

SmallVector<Value>
FragmentSoftmax::finish(const ForwardParams &p, const BlockCoordinates &at,
                        ValueRange max, ValueRange sum, ValueRange acc,
                        Value quadCol,
                        function_ref<Value(int64_t, int64_t)> rowOf) {
  OpBuilder &b = ir.b;
  Location loc = ir.loc;
  const int64_t dTiles = acc.size() / (mTiles * kAccPerTile);
  SmallVector<Value> packed(mTiles * dTiles * 2);
  for (int64_t mt = 0; mt < mTiles; ++mt)
    for (int64_t h = 0; h < 2; ++h) {
      int64_t rowState = mt * 2 + h;
      Value rowMax = arith::MulFOp::create(b, loc, max[rowState], p.scaleLog2);
      Value rowSum =
          ir.shuffleXorReduce(sum[rowState], 4, /*isMax=*/false);
      Value inverse = ir.inverseOfSum(rowSum);
      for (int64_t dt = 0; dt < dTiles; ++dt) {
        int64_t i = (mt * dTiles + dt) * kAccPerTile + 2 * h;
        packed[(mt * dTiles + dt) * 2 + h] =
            ir.packPair(arith::MulFOp::create(b, loc, acc[i], inverse),
                        arith::MulFOp::create(b, loc, acc[i + 1], inverse));
      }
      Value row = rowOf(mt, h);
      OpBuilder::InsertionGuard g(b);
      auto lseOwner = scf::IfOp::create(
          b, loc,
          arith::AndIOp::create(b, loc, ir.cmp(Pred::slt, row, p.seqlenQ),
                                ir.cmp(Pred::eq, quadCol, ir.c64(0))),
          /*withElse=*/false);
      b.setInsertionPoint(lseOwner.thenBlock()->getTerminator());
      LLVM::StoreOp::create(
          b, loc, ir.lseFromBase2(rowMax, rowSum),
          ir.globalAddress(p.lse, ir.f32,
                           ir.rowOffset(p.lseStrides, at.batch, at.head, row)),
          /*alignment=*/4);
    }
  return packed;
}

void FragmentSoftmax::store(const ForwardParams &p, const BlockCoordinates &at,
                            ValueRange max, ValueRange sum,
                            ValueRange acc, Value quadCol,
                            function_ref<Value(int64_t, int64_t)> rowOf) {
  OpBuilder &b = ir.b;
  Location loc = ir.loc;
  const int64_t dTiles = acc.size() / (mTiles * kAccPerTile);
  SmallVector<Value> packed = finish(p, at, max, sum, acc, quadCol, rowOf);
  for (int64_t mt = 0; mt < mTiles; ++mt)
    for (int64_t h = 0; h < 2; ++h) {
      Value row = rowOf(mt, h);
      OpBuilder::InsertionGuard g(b);
      auto inRange = scf::IfOp::create(
          b, loc, ir.cmp(Pred::slt, row, p.seqlenQ), /*withElse=*/false);
      b.setInsertionPoint(inRange.thenBlock()->getTerminator());
      Value oRow =
          ir.add(ir.rowOffset(p.oStrides, at.batch, at.head, row), quadCol);
      for (int64_t dt = 0; dt < dTiles; ++dt)
        LLVM::StoreOp::create(
            b, loc, packed[(mt * dTiles + dt) * 2 + h],
            ir.globalAddress(p.o, ir.elt, ir.add(oRow, ir.c64(dt * 8))),
            /*alignment=*/4);
    }
}

} // namespace flashjit
