//===- DifferentiateScoreMod.cpp - the derivative of a score_mod ----------===//
// Why: the backward pass needs, for every score, dy/ds of y = score_mod(s)
// (dL/ds = dL/dy * dy/ds). Rather than ask each user for a second function
// that must agree with the first, this pass derives it: forward-mode
// differentiation of the region's ops with respect to its `score`
// argument. Each op is cloned into the `score_grad` region and followed by
// the ops of its derivative (the chain rule, one op at a time), so the
// region yields both the score and its derivative and the kernel computes
// shared subexpressions once (tanh(s / c) for the value and for 1 - t^2).
// An op on the score's path with no rule here is a compile-time error that
// names it; a score_grad region written by hand is kept as it is.
#include "flashjit/Compiler/Passes.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"

#include <cmath>

namespace flashjit {
#define GEN_PASS_DEF_DIFFERENTIATESCOREMOD
#include "flashjit/Compiler/Passes.h.inc"

using namespace mlir;

namespace {

/// Builds the tangents (d value / d score) of the cloned ops; a value with
/// no entry does not depend on the score (its tangent is zero).
class Tangents {
public:
  Tangents(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  void seed(Value score) {
    tangent[score] = constant(score.getType(), 1.0);
  }
  Value of(Value v) const { return tangent.lookup(v); }
  /// The tangent of v, or zero of its type.
  Value orZero(Value v) {
    if (Value t = of(v))
      return t;
    return constant(v.getType(), 0.0);
  }

  /// Sets the tangents of `clone` (the clone of `original`, whose operands
  /// map to the clone's). Failure: an op on the score's path with no rule.
  LogicalResult differentiate(Operation *original, Operation *clone);

private:
  Value constant(Type type, double value) {
    return arith::ConstantOp::create(b, loc, b.getFloatAttr(type, value));
  }
  Value mul(Value x, Value y) { return arith::MulFOp::create(b, loc, x, y); }
  Value div(Value x, Value y) { return arith::DivFOp::create(b, loc, x, y); }
  Value add(Value x, Value y) {
    if (!x)
      return y;
    if (!y)
      return x;
    return arith::AddFOp::create(b, loc, x, y);
  }
  Value neg(Value x) { return arith::NegFOp::create(b, loc, x); }
  /// dy = factor * dx for a unary op y = f(x).
  void chain(Value y, Value dx, Value factor) {
    tangent[y] = mul(factor, dx);
  }

  OpBuilder &b;
  Location loc;
  llvm::DenseMap<Value, Value> tangent;
};

LogicalResult Tangents::differentiate(Operation *original, Operation *clone) {
  const bool onPath = llvm::any_of(clone->getOperands(),
                                   [&](Value v) { return of(v) != nullptr; });
  if (!onPath)
    return success();
  // Results that are not floats (compares, conversions to integers) are
  // piecewise constant in the score: their derivative is zero where it
  // exists, as for floor and ceil.
  if (isa<arith::CmpFOp, arith::FPToSIOp, arith::FPToUIOp, math::FloorOp,
          math::CeilOp>(clone))
    return success();
  auto operand = [&](unsigned i) { return clone->getOperand(i); };
  auto d = [&](unsigned i) { return of(operand(i)); };
  Value y = clone->getNumResults() == 1 ? clone->getResult(0) : Value();
  if (isa<arith::AddFOp>(clone)) {
    tangent[y] = add(d(0), d(1));
  } else if (isa<arith::SubFOp>(clone)) {
    Value right = d(1) ? neg(d(1)) : Value();
    tangent[y] = add(d(0), right);
  } else if (isa<arith::NegFOp>(clone)) {
    tangent[y] = neg(d(0));
  } else if (isa<arith::MulFOp>(clone)) {
    // d(a b) = da b + a db
    tangent[y] = add(d(0) ? mul(d(0), operand(1)) : Value(),
                     d(1) ? mul(operand(0), d(1)) : Value());
  } else if (isa<arith::DivFOp>(clone)) {
    // d(a / b) = (da - (a / b) db) / b
    Value top = d(1) ? neg(mul(y, d(1))) : Value();
    tangent[y] = div(add(d(0), top), operand(1));
  } else if (auto fma = dyn_cast<math::FmaOp>(clone)) {
    // d(a b + c) = da b + a db + dc
    tangent[y] = add(add(d(0) ? mul(d(0), operand(1)) : Value(),
                         d(1) ? mul(operand(0), d(1)) : Value()),
                     d(2));
  } else if (isa<arith::MaximumFOp, arith::MaxNumFOp, arith::MinimumFOp,
                 arith::MinNumFOp>(clone)) {
    // The derivative of the operand that is taken.
    const bool max = isa<arith::MaximumFOp, arith::MaxNumFOp>(clone);
    Value first = arith::CmpFOp::create(
        b, loc, max ? arith::CmpFPredicate::OGE : arith::CmpFPredicate::OLE,
        operand(0), operand(1));
    tangent[y] = arith::SelectOp::create(b, loc, first, orZero(operand(0)),
                                         orZero(operand(1)));
  } else if (auto select = dyn_cast<arith::SelectOp>(clone)) {
    if (!isa<FloatType>(y.getType()))
      return original->emitOpError(
          "selects between values of the score that are not floats: the "
          "backward pass cannot differentiate it (write a score_grad region "
          "yourself)");
    tangent[y] = arith::SelectOp::create(b, loc, select.getCondition(),
                                         orZero(select.getTrueValue()),
                                         orZero(select.getFalseValue()));
  } else if (isa<arith::ExtFOp, arith::TruncFOp>(clone)) {
    OperationState state(loc, clone->getName(), ValueRange{d(0)},
                         TypeRange{y.getType()}, clone->getAttrs());
    tangent[y] = b.create(state)->getResult(0);
  } else if (isa<math::ExpOp>(clone)) {
    chain(y, d(0), y);
  } else if (isa<math::Exp2Op>(clone)) {
    chain(y, d(0), mul(y, constant(y.getType(), M_LN2)));
  } else if (isa<math::LogOp>(clone)) {
    tangent[y] = div(d(0), operand(0));
  } else if (isa<math::Log2Op>(clone)) {
    tangent[y] = div(d(0), mul(operand(0), constant(y.getType(), M_LN2)));
  } else if (isa<math::TanhOp>(clone)) {
    // 1 - tanh^2
    chain(y, d(0),
          arith::SubFOp::create(b, loc, constant(y.getType(), 1.0),
                                mul(y, y)));
  } else if (isa<math::SqrtOp>(clone)) {
    // 1 / (2 sqrt x)
    tangent[y] = div(d(0), mul(constant(y.getType(), 2.0), y));
  } else if (isa<math::RsqrtOp>(clone)) {
    // -rsqrt(x) / (2 x)
    tangent[y] = neg(div(mul(y, d(0)), mul(constant(y.getType(), 2.0),
                                          operand(0))));
  } else if (isa<math::AbsFOp>(clone)) {
    Value negative = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT,
                                           operand(0),
                                           constant(y.getType(), 0.0));
    tangent[y] = arith::SelectOp::create(b, loc, negative, neg(d(0)), d(0));
  } else {
    return original->emitOpError(
               "computes on the score with no derivative rule: the backward "
               "pass cannot differentiate it; use ops it knows (addf, subf, "
               "mulf, divf, negf, fma, maximumf, minimumf, select, extf, "
               "truncf, exp, exp2, log, log2, tanh, sqrt, rsqrt, absf, "
               "floor, ceil, compares) or give the attention a score_grad "
               "region of your own");
  }
  return success();
}

/// Fills `op`'s empty score_grad region from its score_mod.
LogicalResult differentiate(attn::AttentionOp op) {
  Region &source = op.getScoreMod();
  Block &from = source.front();
  Region &target = op.getScoreGrad();
  OpBuilder b(op.getContext());
  Block *to = b.createBlock(&target);
  IRMapping map;
  for (BlockArgument arg : from.getArguments())
    map.map(arg, to->addArgument(arg.getType(), arg.getLoc()));
  b.setInsertionPointToEnd(to);
  Tangents tangents(b, op.getLoc());
  tangents.seed(to->getArgument(0));
  for (Operation &inner : from) {
    if (auto yield = dyn_cast<attn::YieldOp>(inner)) {
      Value value = map.lookup(yield.getValues()[0]);
      attn::YieldOp::create(b, yield.getLoc(),
                            ValueRange{value, tangents.orZero(value)});
      return success();
    }
    Operation *clone = b.clone(inner, map);
    if (failed(tangents.differentiate(&inner, clone))) {
      target.getBlocks().clear();
      return failure();
    }
  }
  return success();
}

struct DifferentiateScoreModPass
    : impl::DifferentiateScoreModBase<DifferentiateScoreModPass> {
  void runOnOperation() override {
    bool failedAny = false;
    getOperation().walk([&](attn::AttentionOp op) {
      if (op.getScoreMod().empty() || !op.getScoreGrad().empty())
        return;
      failedAny |= failed(differentiate(op));
    });
    if (failedAny)
      signalPassFailure();
  }
};

} // namespace
} // namespace flashjit
