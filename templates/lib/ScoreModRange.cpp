//===- ScoreModRange.cpp - the scores a score_mod can yield ---------------===//
// Why: a score_mod whose result lies in an interval known at compile time,
// whatever its inputs (soft-capping's cap * tanh(score / cap) in
// [-cap, cap]), lets the softmax take every P against a fixed reference
// instead of each row's running max: no row max, no vote on the bound, no
// rescale of O (FragmentSoftmax::fixReference). This file finds that
// interval by interval arithmetic over the region's ops; an op it does not
// know, or a value with no bound, leaves the result unbounded.
#include "ScoreMods.h"

#include "flashjit/Dialect/AttnDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/BuiltinAttributes.h"

#include "llvm/ADT/DenseMap.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>

using namespace mlir;

namespace flashjit {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

/// The whole line: a value with no known bound. Intervals' ends may be
/// infinite.
ScoreInterval whole() { return {-kInf, kInf}; }

/// The smallest interval holding `ends`; a NaN end (inf - inf, 0 * inf)
/// widens it to the whole line.
ScoreInterval hull(std::initializer_list<double> ends) {
  double lo = kInf, hi = -kInf;
  for (double e : ends) {
    if (std::isnan(e))
      return whole();
    lo = std::min(lo, e);
    hi = std::max(hi, e);
  }
  return {lo, hi};
}

ScoreInterval product(ScoreInterval a, ScoreInterval b) {
  return hull({a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi});
}

/// A monotone non-decreasing f over [lo, hi].
template <typename F> ScoreInterval monotone(ScoreInterval a, F f) {
  return hull({f(a.lo), f(a.hi)});
}

class IntervalWalk {
public:
  ScoreInterval of(Value v) const {
    auto it = known.find(v);
    return it == known.end() ? whole() : it->second;
  }

  void visit(Operation &op) {
    if (op.getNumResults() != 1 || op.getNumRegions() != 0)
      return;
    if (std::optional<ScoreInterval> r = resultOf(op))
      known[op.getResult(0)] = *r;
  }

private:
  std::optional<ScoreInterval> resultOf(Operation &op) const {
    auto operand = [&](unsigned i) { return of(op.getOperand(i)); };
    if (auto c = dyn_cast<arith::ConstantOp>(op)) {
      if (auto f = dyn_cast<FloatAttr>(c.getValue()))
        return ScoreInterval{f.getValueAsDouble(), f.getValueAsDouble()};
      if (auto i = dyn_cast<IntegerAttr>(c.getValue())) {
        double v = static_cast<double>(i.getValue().getSExtValue());
        return ScoreInterval{v, v};
      }
      return std::nullopt;
    }
    if (isa<arith::SIToFPOp>(op))
      return operand(0);
    if (isa<arith::AddFOp>(op))
      return hull({operand(0).lo + operand(1).lo,
                   operand(0).hi + operand(1).hi});
    if (isa<arith::SubFOp>(op))
      return hull({operand(0).lo - operand(1).hi,
                   operand(0).hi - operand(1).lo});
    if (isa<arith::NegFOp>(op))
      return ScoreInterval{-operand(0).hi, -operand(0).lo};
    if (isa<arith::MulFOp>(op))
      return product(operand(0), operand(1));
    if (isa<arith::DivFOp>(op)) {
      ScoreInterval d = operand(1);
      if (d.lo > 0 || d.hi < 0)
        return product(operand(0), hull({1.0 / d.lo, 1.0 / d.hi}));
      return std::nullopt;
    }
    if (isa<arith::MaximumFOp, arith::MaxNumFOp>(op))
      return ScoreInterval{std::max(operand(0).lo, operand(1).lo),
                           std::max(operand(0).hi, operand(1).hi)};
    if (isa<arith::MinimumFOp, arith::MinNumFOp>(op))
      return ScoreInterval{std::min(operand(0).lo, operand(1).lo),
                           std::min(operand(0).hi, operand(1).hi)};
    if (isa<arith::SelectOp>(op))
      return hull({operand(1).lo, operand(1).hi, operand(2).lo,
                   operand(2).hi});
    if (isa<math::TanhOp>(op))
      return monotone(operand(0), [](double x) { return std::tanh(x); });
    if (isa<math::ExpOp>(op))
      return monotone(operand(0), [](double x) { return std::exp(x); });
    if (isa<math::Exp2Op>(op))
      return monotone(operand(0), [](double x) { return std::exp2(x); });
    if (isa<math::AbsFOp>(op)) {
      ScoreInterval a = operand(0);
      if (a.lo >= 0)
        return a;
      if (a.hi <= 0)
        return ScoreInterval{-a.hi, -a.lo};
      return ScoreInterval{0.0, std::max(-a.lo, a.hi)};
    }
    return std::nullopt;
  }

  llvm::DenseMap<Value, ScoreInterval> known;
};
} // namespace

std::optional<ScoreInterval> scoreModInterval(Region &scoreMod) {
  if (!scoreMod.hasOneBlock())
    return std::nullopt;
  IntervalWalk walk;
  for (Operation &op : scoreMod.front()) {
    if (auto yield = dyn_cast<attn::YieldOp>(op)) {
      if (yield.getValues().empty())
        return std::nullopt;
      ScoreInterval r = walk.of(yield.getValues()[0]);
      if (!std::isfinite(r.lo) || !std::isfinite(r.hi))
        return std::nullopt;
      return r;
    }
    walk.visit(op);
  }
  return std::nullopt;
}

} // namespace flashjit
