//===- ModInterpreter.cpp - a spec's mods evaluated on the host -----------===//
// Why: see ModInterpreter.h. Values are doubles; integers and i1 are held
// exactly (|x| < 2^53 for the indices and ids a mod computes with).
// Integer ops run on int64 without C++'s undefined behaviour: sums and
// products wrap, and a division by zero, INT64_MIN / -1 or a shift past 63
// bits is an error (the GPU's result there is poison), never a trap.
#include "flashjit/Compiler/ModInterpreter.h"
#include "flashjit/Compiler/ParserGuard.h"
#include "flashjit/Compiler/Description.h"
#include "flashjit/Dialect/AttnDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstdint>

using namespace mlir;

namespace flashjit {

namespace {
/// `x` as an int64, truncated toward zero and saturated (NaN as 0): a
/// double outside the range cannot be cast directly.
int64_t toInteger(double x) {
  if (std::isnan(x))
    return 0;
  if (x >= 9223372036854775808.0)
    return INT64_MAX;
  if (x < -9223372036854775808.0)
    return INT64_MIN;
  return static_cast<int64_t>(x);
}

/// The two's complement bits of `x` as an int64 (how sums and products
/// wrap without signed overflow).
int64_t wrapped(uint64_t x) { return static_cast<int64_t>(x); }

/// Whether `a / b` is defined for int64.
bool divides(int64_t a, int64_t b) {
  return b != 0 && !(a == INT64_MIN && b == -1);
}

/// One op applied to its operands' values; false: an op it cannot evaluate,
/// or not on these operands.
bool evaluate(Operation &op, ArrayRef<double> in, double &out) {
  auto f = [&](size_t i) { return in[i]; };
  auto i = [&](size_t k) { return toInteger(in[k]); };
  auto u = [&](size_t k) { return static_cast<uint64_t>(toInteger(in[k])); };
  if (auto c = dyn_cast<arith::ConstantOp>(op)) {
    if (auto fa = dyn_cast<FloatAttr>(c.getValue()))
      out = fa.getValueAsDouble();
    else if (auto ia = dyn_cast<IntegerAttr>(c.getValue()))
      out = ia.getType().isInteger(1) ? double(ia.getValue().getBoolValue())
                                      : double(ia.getValue().getSExtValue());
    else
      return false;
    return true;
  }
  if (auto cmp = dyn_cast<arith::CmpIOp>(op)) {
    int64_t a = i(0), b = i(1);
    uint64_t ua = a, ub = b;
    using P = arith::CmpIPredicate;
    switch (cmp.getPredicate()) {
    case P::eq: out = a == b; break;
    case P::ne: out = a != b; break;
    case P::slt: out = a < b; break;
    case P::sle: out = a <= b; break;
    case P::sgt: out = a > b; break;
    case P::sge: out = a >= b; break;
    case P::ult: out = ua < ub; break;
    case P::ule: out = ua <= ub; break;
    case P::ugt: out = ua > ub; break;
    case P::uge: out = ua >= ub; break;
    }
    return true;
  }
  if (auto cmp = dyn_cast<arith::CmpFOp>(op)) {
    double a = f(0), b = f(1);
    bool unordered = std::isnan(a) || std::isnan(b);
    using P = arith::CmpFPredicate;
    switch (cmp.getPredicate()) {
    case P::AlwaysFalse: out = 0; break;
    case P::OEQ: out = !unordered && a == b; break;
    case P::OGT: out = !unordered && a > b; break;
    case P::OGE: out = !unordered && a >= b; break;
    case P::OLT: out = !unordered && a < b; break;
    case P::OLE: out = !unordered && a <= b; break;
    case P::ONE: out = !unordered && a != b; break;
    case P::ORD: out = !unordered; break;
    case P::UEQ: out = unordered || a == b; break;
    case P::UGT: out = unordered || a > b; break;
    case P::UGE: out = unordered || a >= b; break;
    case P::ULT: out = unordered || a < b; break;
    case P::ULE: out = unordered || a <= b; break;
    case P::UNE: out = unordered || a != b; break;
    case P::UNO: out = unordered; break;
    case P::AlwaysTrue: out = 1; break;
    }
    return true;
  }
  if (isa<arith::SelectOp>(op)) {
    out = in[0] != 0 ? in[1] : in[2];
    return true;
  }
  // Casts that keep the value (the reference computes in double).
  if (isa<arith::IndexCastOp, arith::IndexCastUIOp, arith::SIToFPOp,
          arith::UIToFPOp, arith::ExtFOp, arith::TruncFOp, arith::ExtSIOp,
          arith::ExtUIOp, arith::TruncIOp>(op)) {
    out = in[0];
    return true;
  }
  if (isa<arith::FPToSIOp, arith::FPToUIOp>(op)) {
    out = std::trunc(in[0]);
    return true;
  }
  if (isa<arith::AddFOp>(op)) return out = f(0) + f(1), true;
  if (isa<arith::SubFOp>(op)) return out = f(0) - f(1), true;
  if (isa<arith::MulFOp>(op)) return out = f(0) * f(1), true;
  if (isa<arith::DivFOp>(op)) return out = f(0) / f(1), true;
  if (isa<arith::NegFOp>(op)) return out = -f(0), true;
  if (isa<arith::RemFOp>(op)) return out = std::fmod(f(0), f(1)), true;
  if (isa<arith::MaximumFOp>(op))
    return out = std::isnan(f(0)) || std::isnan(f(1)) ? NAN
                                                      : std::max(f(0), f(1)),
           true;
  if (isa<arith::MinimumFOp>(op))
    return out = std::isnan(f(0)) || std::isnan(f(1)) ? NAN
                                                      : std::min(f(0), f(1)),
           true;
  if (isa<arith::MaxNumFOp>(op)) return out = std::fmax(f(0), f(1)), true;
  if (isa<arith::MinNumFOp>(op)) return out = std::fmin(f(0), f(1)), true;
  if (isa<arith::AddIOp>(op)) return out = double(wrapped(u(0) + u(1))), true;
  if (isa<arith::SubIOp>(op)) return out = double(wrapped(u(0) - u(1))), true;
  if (isa<arith::MulIOp>(op)) return out = double(wrapped(u(0) * u(1))), true;
  if (isa<arith::DivSIOp, arith::DivUIOp>(op))
    return divides(i(0), i(1)) && (out = double(i(0) / i(1)), true);
  if (isa<arith::RemSIOp, arith::RemUIOp>(op))
    return divides(i(0), i(1)) && (out = double(i(0) % i(1)), true);
  if (isa<arith::FloorDivSIOp>(op)) {
    if (i(1) == 0)
      return false;
    out = std::floor(double(i(0)) / double(i(1)));
    return true;
  }
  if (isa<arith::CeilDivSIOp>(op)) {
    if (i(1) == 0)
      return false;
    out = std::ceil(double(i(0)) / double(i(1)));
    return true;
  }
  if (isa<arith::MaxSIOp>(op)) return out = double(std::max(i(0), i(1))), true;
  if (isa<arith::MinSIOp>(op)) return out = double(std::min(i(0), i(1))), true;
  if (isa<arith::AndIOp>(op)) return out = double(i(0) & i(1)), true;
  if (isa<arith::OrIOp>(op)) return out = double(i(0) | i(1)), true;
  if (isa<arith::XOrIOp>(op)) return out = double(i(0) ^ i(1)), true;
  if (isa<arith::ShLIOp, arith::ShRSIOp>(op)) {
    if (i(1) < 0 || i(1) > 63)
      return false;
    // An arithmetic right shift, spelled without shifting a negative value.
    int64_t a = i(0), n = i(1);
    out = isa<arith::ShLIOp>(op) ? double(wrapped(u(0) << n))
          : a < 0               ? double(~(~a >> n))
                                : double(a >> n);
    return true;
  }
  if (isa<math::ExpOp>(op)) return out = std::exp(f(0)), true;
  if (isa<math::Exp2Op>(op)) return out = std::exp2(f(0)), true;
  if (isa<math::LogOp>(op)) return out = std::log(f(0)), true;
  if (isa<math::Log2Op>(op)) return out = std::log2(f(0)), true;
  if (isa<math::TanhOp>(op)) return out = std::tanh(f(0)), true;
  if (isa<math::SqrtOp>(op)) return out = std::sqrt(f(0)), true;
  if (isa<math::RsqrtOp>(op)) return out = 1.0 / std::sqrt(f(0)), true;
  if (isa<math::AbsFOp>(op)) return out = std::fabs(f(0)), true;
  if (isa<math::FloorOp>(op)) return out = std::floor(f(0)), true;
  if (isa<math::CeilOp>(op)) return out = std::ceil(f(0)), true;
  if (isa<math::FmaOp>(op)) return out = f(0) * f(1) + f(2), true;
  return false;
}

/// Whether evaluate() knows `op` (checked once, when the mods are parsed).
bool known(Operation &op) {
  if (isa<func::ReturnOp, tensor::ExtractOp>(op))
    return true;
  SmallVector<double> zeros(op.getNumOperands(), 1.0);
  double out;
  return evaluate(op, zeros, out);
}
} // namespace

/// Interprets `block` (a func.func body or an attn.attention mod region)
/// with its leading arguments bound to `fixed`; the values it returns or
/// yields.
static llvm::Expected<std::vector<double>>
runBlock(Block &block, ArrayRef<double> fixed, ArrayRef<HostCapture> captures) {
  llvm::DenseMap<Value, double> values;
  for (auto [arg, value] : llvm::zip(block.getArguments(), fixed))
    values[arg] = value;
  auto results = [&](ValueRange returned) {
    std::vector<double> out;
    for (Value v : returned)
      out.push_back(values.lookup(v));
    return out;
  };
  for (Operation &op : block) {
    if (auto ret = dyn_cast<func::ReturnOp>(op))
      return results(ret.getOperands());
    if (auto yield = dyn_cast<attn::YieldOp>(op))
      return results(yield.getValues());
    if (auto extract = dyn_cast<tensor::ExtractOp>(op)) {
      auto arg = dyn_cast<BlockArgument>(extract.getTensor());
      size_t which = arg ? arg.getArgNumber() - fixed.size() : SIZE_MAX;
      if (which >= captures.size())
        return llvm::createStringError(
            "a mod reads a tensor that is not one of its captures");
      const HostCapture &c = captures[which];
      int64_t offset = 0;
      for (auto [d, index] : llvm::enumerate(extract.getIndices())) {
        int64_t at = toInteger(values.lookup(index));
        if (d >= c.shape.size() || at < 0 || at >= c.shape[d])
          return llvm::createStringError(
              llvm::formatv("a mod reads captured tensor {0} at index {1} "
                            "of dimension {2}, out of its bounds",
                            which, at, d)
                  .str());
        offset = offset * c.shape[d] + at;
      }
      values[extract.getResult()] = c.values[offset];
      continue;
    }
    SmallVector<double> in;
    for (Value v : op.getOperands())
      in.push_back(values.lookup(v));
    double out = 0;
    if (!evaluate(op, in, out))
      return llvm::createStringError(
          ("cannot evaluate '" + op.getName().getStringRef() +
           "' on these operands (an integer division by zero or of "
           "INT64_MIN by -1, or a shift by more than 63 bits?)")
              .str());
    values[op.getResult(0)] = out;
  }
  return llvm::createStringError("a mod has no return");
}

struct ModInterpreter::Impl {
  MLIRContext context;
  OwningOpRef<ModuleOp> scoreModule, maskModule;
  func::FuncOp scoreFn, maskFn;

  llvm::Expected<double> run(func::FuncOp fn, ArrayRef<double> fixed,
                             ArrayRef<HostCapture> captures) const {
    auto values = runBlock(fn.getBody().front(), fixed, captures);
    if (!values)
      return values.takeError();
    return values->front();
  }
};

llvm::Expected<std::vector<double>>
ModInterpreter::evaluateBlock(Block &block, ArrayRef<double> fixed,
                              ArrayRef<HostCapture> captures) {
  for (Operation &op : block)
    if (!isa<func::ReturnOp, attn::YieldOp, tensor::ExtractOp>(op) &&
        !known(op))
      return llvm::createStringError(
          ("the reference cannot evaluate '" + op.getName().getStringRef() +
           "'")
              .str());
  return runBlock(block, fixed, captures);
}

ModInterpreter::ModInterpreter() : impl(std::make_unique<Impl>()) {}
ModInterpreter::~ModInterpreter() = default;

llvm::Expected<std::unique_ptr<ModInterpreter>>
ModInterpreter::create(const AttentionSpec &spec) {
  std::unique_ptr<ModInterpreter> m(new ModInterpreter());
  MLIRContext &ctx = m->impl->context;
  ctx.loadDialect<func::FuncDialect, arith::ArithDialect, math::MathDialect,
                  tensor::TensorDialect>();
  ctx.printOpOnDiagnostic(false);
  auto parse = [&](StringRef name, StringRef text,
                   OwningOpRef<ModuleOp> &module,
                   func::FuncOp &fn) -> llvm::Error {
    if (text.empty())
      return llvm::Error::success();
    std::string diagnostics;
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
      diagnostics += diag.str() + "\n";
      return success();
    });
    if (auto err = checkParserSafe(text, name))
      return err;
    module = parseSourceString<ModuleOp>(text, &ctx, name);
    if (!module)
      return llvm::createStringError(
          (name + " does not parse: " + diagnostics).str());
    auto funcs = llvm::to_vector(module->getOps<func::FuncOp>());
    if (funcs.size() != 1 || !funcs[0].getBody().hasOneBlock())
      return llvm::createStringError(
          (name + " must be one func.func of one block").str());
    fn = funcs[0];
    for (Operation &op : fn.getBody().front())
      if (!known(op))
        return llvm::createStringError(
            (name + ": the reference cannot evaluate '" +
             op.getName().getStringRef() + "'")
                .str());
    return llvm::Error::success();
  };
  if (auto err = parse("score_mod", spec.scoreMod, m->impl->scoreModule,
                       m->impl->scoreFn))
    return std::move(err);
  if (auto err = parse("mask_mod", spec.maskMod, m->impl->maskModule,
                       m->impl->maskFn))
    return std::move(err);
  return m;
}

llvm::Expected<std::unique_ptr<ModInterpreter>>
ModInterpreter::forCheck(const AttentionSpec &spec,
                         ArrayRef<HostCapture> captures) {
  if (captures.size() != spec.captures.size())
    return llvm::createStringError(
        llvm::formatv("the spec reads {0} captured tensors, the check gives "
                      "{1}",
                      spec.captures.size(), captures.size())
            .str());
  if (!spec.hasMods())
    return std::unique_ptr<ModInterpreter>();
  return create(spec);
}

bool ModInterpreter::hasScoreMod() const { return bool(impl->scoreFn); }
bool ModInterpreter::hasMaskMod() const { return bool(impl->maskFn); }

llvm::Expected<double>
ModInterpreter::score(double s, int64_t b, int64_t h, int64_t q, int64_t kv,
                      ArrayRef<HostCapture> captures) const {
  if (!impl->scoreFn)
    return s;
  return impl->run(impl->scoreFn,
                   {s, double(b), double(h), double(q), double(kv)}, captures);
}

llvm::Expected<bool> ModInterpreter::keep(int64_t b, int64_t h, int64_t q,
                                          int64_t kv,
                                          ArrayRef<HostCapture> captures) const {
  if (!impl->maskFn)
    return true;
  auto v = impl->run(impl->maskFn, {double(b), double(h), double(q), double(kv)},
                     captures);
  if (!v)
    return v.takeError();
  return *v != 0;
}

} // namespace flashjit
