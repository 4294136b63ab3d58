//===- ScoreMods.cpp - score_mod and mask_mod placed in a kernel ----------===//
// Why: see ScoreMods.h. The cloning of a region itself is
// ScoreModInline.cpp's; the reads issued ahead ScoreModReads.cpp's.
#include "ScoreMods.h"

#include "flashjit/Dialect/AttnDialect.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"

#include <cmath>

using namespace mlir;

namespace flashjit {

namespace {
constexpr float kLog2E = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
} // namespace

ScoreMods::ScoreMods(KernelIR &ir, const ModRegions &mods,
                     const ForwardParams &p, Value toNatural,
                     Value fromNatural)
    : ir(ir), mods(mods), p(p), toNatural(toNatural),
      fromNatural(fromNatural) {}

ScoreMods ScoreMods::onDotProducts(KernelIR &ir, const ModRegions &mods,
                                   const ForwardParams &p) {
  Value scale =
      arith::MulFOp::create(ir.b, ir.loc, p.scaleLog2, ir.cF32(kLn2));
  return ScoreMods(ir, mods, p, scale,
                   arith::DivFOp::create(ir.b, ir.loc, ir.cF32(1.0f), scale));
}

Value ScoreMods::inFamilyUnits(float natural) {
  return arith::MulFOp::create(ir.b, ir.loc, ir.cF32(natural), fromNatural);
}

ScoreMods ScoreMods::onBase2Scores(KernelIR &ir, const ModRegions &mods,
                                   const ForwardParams &p) {
  return ScoreMods(ir, mods, p, ir.cF32(kLn2), ir.cF32(kLog2E));
}

namespace {
/// For a score_mod `score + bias` (ALiBi, relative position biases): the
/// region's bias value, which does not read the score; null otherwise.
Value additiveBias(Region &region) {
  Block &block = region.front();
  Value score = block.getArgument(0);
  auto yield = cast<attn::YieldOp>(block.getTerminator());
  auto add = yield.getValues()[0].getDefiningOp<arith::AddFOp>();
  if (!add)
    return {};
  Value bias = add.getLhs() == score   ? add.getRhs()
               : add.getRhs() == score ? add.getLhs()
                                       : Value();
  if (!bias)
    return {};
  // The bias must not read the score, directly or through other values.
  llvm::SmallVector<Value> work{bias};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (v == score)
      return {};
    if (!seen.insert(v).second)
      continue;
    if (Operation *def = v.getDefiningOp())
      llvm::append_range(work, def->getOperands());
  }
  return bias;
}
} // namespace

bool ScoreMods::knownPositive(Value factor) const {
  if (factor == toNatural || factor == fromNatural)
    return true;
  FloatAttr c;
  if (matchPattern(factor, m_Constant(&c)))
    return c.getValueAsDouble() > 0;
  auto product = factor.getDefiningOp<arith::MulFOp>();
  return product && knownPositive(product.getLhs()) &&
         knownPositive(product.getRhs());
}

Value ScoreMods::score(Value s, Value batch, Value head, ModIndex row,
                       ModIndex column, Value *factorOut) {
  if (!hasScoreMod())
    return s;
  OpBuilder &b = ir.b;
  auto natural = arith::MulFOp::create(b, ir.loc, s, toNatural);
  allowContraction(natural);
  SmallVector<ModIndex> fixed{natural.getResult(), batch, head, row, column};
  if (Value bias = additiveBias(*mods.scoreMod)) {
    // s + bias * fromNatural: one fma per score in the family's units,
    // not a scaling to the natural score and back around the add. For
    // bias = x * f(indices) (ALiBi: slope * (kv - q)) fromNatural goes
    // onto x, once per tile, and the score pays fma(f, x', s) with f a
    // per-tile value plus an immediate (floatOf).
    auto product = bias.getDefiningOp<arith::MulFOp>();
    Value x = product ? product.getLhs() : bias;
    Value f = product ? product.getRhs() : Value();
    if (f && x.getDefiningOp<arith::SIToFPOp>())
      std::swap(x, f);
    SmallVector<Value> want{x};
    if (f)
      want.push_back(f);
    SmallVector<Value> inlined = inlineRegion(*mods.scoreMod, fixed, want);
    Value term = arith::MulFOp::create(b, ir.loc, inlined[0], fromNatural);
    // f = tile + c (floatOf): the bias is fma(c, x', tile * x'), one
    // instruction for each distinct c, which the thread's scores share
    // (row slots 8 rows apart meet columns 8 apart: 34 biases for 64
    // scores of a 128-key tile), where (tile + c) * x' took two.
    auto shifted = f ? inlined[1].getDefiningOp<arith::AddFOp>() : nullptr;
    FloatAttr c;
    if (shifted && matchPattern(shifted.getRhs(), m_Constant(&c)))
      term = LLVM::FMAOp::create(
          b, ir.loc, ir.cF32(c.getValueAsDouble()), term,
          arith::MulFOp::create(b, ir.loc, shifted.getLhs(), term));
    else if (f)
      term = arith::MulFOp::create(b, ir.loc, inlined[1], term);
    allowContraction(term.getDefiningOp());
    auto sum = arith::AddFOp::create(b, ir.loc, term, s);
    allowContraction(sum);
    return sum;
  }
  // The score in natural units is s * toNatural, formed where the region
  // needs it; a factor still pending on the result joins fromNatural.
  fixed.front() = ModIndex(s);
  Value resultScale;
  Value modded = inlineRegion(*mods.scoreMod, fixed, {}, nullptr, -1, -1,
                              toNatural, &resultScale)
                     .front();
  Value factor = fromNatural;
  if (resultScale)
    factor = arith::MulFOp::create(b, ir.loc, resultScale, fromNatural);
  if (factorOut && knownPositive(factor)) {
    *factorOut = factor;
    return modded;
  }
  auto back = arith::MulFOp::create(b, ir.loc, modded, factor);
  allowContraction(back);
  return back;
}

Value ScoreMods::scoreGradient(Value s, Value batch, Value head,
                               ModIndex row, ModIndex column) {
  Region &region = *mods.scoreGrad;
  auto yield = cast<attn::YieldOp>(region.front().getTerminator());
  return inlineRegion(region, {s, batch, head, row, column},
                      {yield.getValues()[1]}, nullptr, -1, -1, toNatural)
      .front();
}

Value ScoreMods::keep(Value batch, Value head, ModIndex row,
                      ModIndex column, Value appliesHere,
                      const ModReads *reads, int64_t rowSlot,
                      int64_t columnSlot) {
  OpBuilder &b = ir.b;
  auto yes = [&] {
    return arith::ConstantOp::create(b, ir.loc, b.getBoolAttr(true));
  };
  if (!hasMaskMod())
    return yes();
  Value kept = inlineRegion(*mods.maskMod, {batch, head, row, column}, {},
                            reads, rowSlot, columnSlot)
                   .front();
  if (!appliesHere)
    return kept;
  return arith::OrIOp::create(
      b, ir.loc, kept, arith::XOrIOp::create(b, ir.loc, appliesHere, yes()));
}

} // namespace flashjit
