//===- ScoreModInline.cpp - a mod region's ops cloned into a kernel -------===//
// Why: every family places the score_mod and mask_mod by cloning their
// region where a score exists (ScoreMods.h); this file is that cloning
// (ScoreMods::inlineRegion). Most ops are cloned as they are (index as
// i32); the ones that would cost a score more than they must are rewritten
// as they come: math ops and f32 division become the fast NVVM forms,
// tensor.extract of a captured tensor a global load, an int-to-float
// conversion of an index sum a per-tile value plus a constant, and
// multiplies by constants of the score a factor formed once per tile.
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

/// An integer of a mod region as a sum of i32 bases (the callers'
/// ModIndex bases, or the batch and head) with constant coefficients plus
/// a constant, where it is one: what an int-to-float conversion of it can
/// be rebuilt from.
struct IndexSum {
  llvm::SmallVector<std::pair<Value, int64_t>, 2> terms;
  int64_t constant = 0;

  /// this + sign * other; false when a coefficient or the constant leaves
  /// the range where the float form rounds as the conversion does.
  bool accumulate(const IndexSum &other, int64_t sign) {
    for (const auto &term : other.terms) {
      auto it = llvm::find_if(
          terms, [&](const auto &t) { return t.first == term.first; });
      if (it == terms.end())
        terms.push_back({term.first, sign * term.second});
      else
        it->second += sign * term.second;
    }
    constant += sign * other.constant;
    return inRange();
  }
  bool scale(int64_t factor) {
    for (auto &term : terms)
      term.second *= factor;
    constant *= factor;
    return inRange();
  }
  /// Coefficients up to 2^10 and constants below 2^24 in magnitude: every
  /// step of the float form is exact while the indices stay below 2^24
  /// tokens, and within an f32 rounding of the conversion beyond.
  bool inRange() const {
    for (auto [base, coeff] : terms)
      if (coeff < -1024 || coeff > 1024)
        return false;
    return constant > -(int64_t(1) << 24) && constant < (int64_t(1) << 24);
  }
};

/// One cloning of a region (ScoreMods::inlineRegion): the value map and
/// what is known of the values cloned so far.
class RegionInliner {
public:
  RegionInliner(KernelIR &ir, const ForwardParams &p, Region &region,
                ArrayRef<ModIndex> fixed, const ModReads *reads,
                int64_t rowSlot, int64_t columnSlot, Value argScale)
      : ir(ir), b(ir.b), loc(ir.loc), p(p), block(region.front()),
        fixedCount(fixed.size()), reads(reads), rowSlot(rowSlot),
        columnSlot(columnSlot) {
    bindArguments(fixed);
    if (argScale)
      pending[block.getArgument(0)] = argScale;
  }

  SmallVector<Value> run(ArrayRef<Value> want, Value *resultScale) {
    for (Operation &op : block) {
      if (auto yield = dyn_cast<attn::YieldOp>(op))
        return yielded(yield, want, resultScale);
      if (foldConstantFactor(op))
        continue;
      for (Value operand : op.getOperands())
        formProduct(operand);
      trackSum(op);
      if (floatIndexSum(op) || distributeTileProduct(op) ||
          capturedRead(op) || mathOp(op) || division(op) || indexOp(op))
        continue;
      Operation *clone = b.clone(op, map);
      ScoreMods::allowContraction(clone);
      for (Value result : clone->getResults())
        if (result.getType().isIndex())
          result.setType(ir.i32);
    }
    llvm_unreachable("a verified mod region ends in attn.yield");
  }

private:
  KernelIR &ir;
  OpBuilder &b;
  Location loc;
  const ForwardParams &p;
  Block &block;
  const size_t fixedCount;
  const ModReads *reads;
  const int64_t rowSlot, columnSlot;
  IRMapping map;
  llvm::DenseMap<Value, IndexSum> sums;
  /// The float form of an index sum, as a tile part (the bases' per-tile
  /// conversions and their sum, which LLVM shares between the scores and
  /// hoists) and the constant: the value is tile + constant.
  struct FloatSum {
    Value tile;
    float constant;
  };
  llvm::DenseMap<Value, FloatSum> floatSums;
  /// Region values held as map.lookup(v) * pending[v] (argScale): a
  /// multiply or division by a constant only updates the factor (once per
  /// tile, not per score); any other use forms the product first.
  llvm::DenseMap<Value, Value> pending;

  // `index` values are 32-bit here, as FlexAttention's int32 indices: the
  // mods' integer work (a distance, a document id compare) then takes one
  // instruction per score, and int-to-float conversions are 32-bit. The
  // fixed arguments are below 2^31; a mod whose index arithmetic could
  // exceed it (q_idx * seqlen) casts to i64 first.
  void bindArguments(ArrayRef<ModIndex> fixed) {
    for (auto [arg, index] : llvm::zip(block.getArguments(), fixed)) {
      if (!arg.getType().isIndex()) {
        map.map(arg, index.value);
        continue;
      }
      map.map(arg, ir.toI32(index.value));
      IndexSum sum;
      sum.terms.push_back(
          {index.base ? ir.toI32(index.base) : map.lookup(arg), 1});
      sum.constant = index.base ? index.offset : 0;
      if (sum.inRange())
        sums[arg] = sum;
    }
  }

  SmallVector<Value> yielded(attn::YieldOp yield, ArrayRef<Value> want,
                             Value *resultScale) {
    Value first = want.empty() ? yield.getValues()[0] : want.front();
    if (resultScale && want.size() <= 1 && pending.count(first)) {
      *resultScale = pending[first];
      return {map.lookup(first)};
    }
    for (Value v : want.empty() ? ArrayRef<Value>(first) : want)
      formProduct(v);
    if (want.empty())
      return {map.lookup(first)};
    return llvm::map_to_vector(want, [&](Value v) { return map.lookup(v); });
  }

  FloatSum floatOf(const IndexSum &sum) {
    Value total;
    for (auto [base, coeff] : sum.terms) {
      if (coeff == 0)
        continue;
      Value f = arith::SIToFPOp::create(b, loc, ir.f32, base);
      if (coeff != 1 && coeff != -1)
        f = arith::MulFOp::create(b, loc, f,
                                  ir.cF32(static_cast<float>(std::abs(coeff))));
      if (!total)
        total = coeff > 0 ? f : arith::NegFOp::create(b, loc, f).getResult();
      else if (coeff > 0)
        total = arith::AddFOp::create(b, loc, total, f);
      else
        total = arith::SubFOp::create(b, loc, total, f);
    }
    if (!total)
      total = ir.cF32(0.0f);
    return {total, static_cast<float>(sum.constant)};
  }

  Value contracted(Operation *op) {
    ScoreMods::allowContraction(op);
    return op->getResult(0);
  }

  /// Records the index sum of `op`'s result where it is one.
  void trackSum(Operation &op) {
    auto sumOf = [&](Value v) -> const IndexSum * {
      auto it = sums.find(v);
      return it == sums.end() ? nullptr : &it->second;
    };
    IndexSum result;
    bool ok = false;
    if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
      if (auto value = dyn_cast<IntegerAttr>(constant.getValue())) {
        result.constant = value.getValue().getSExtValue();
        ok = result.inRange();
      }
    } else if (isa<arith::AddIOp, arith::SubIOp>(op)) {
      const IndexSum *x = sumOf(op.getOperand(0)), *y = sumOf(op.getOperand(1));
      if (x && y) {
        result = *x;
        ok = result.accumulate(*y, isa<arith::AddIOp>(op) ? 1 : -1);
      }
    } else if (isa<arith::MulIOp>(op)) {
      const IndexSum *x = sumOf(op.getOperand(0)), *y = sumOf(op.getOperand(1));
      if (x && y && (x->terms.empty() || y->terms.empty())) {
        result = x->terms.empty() ? *y : *x;
        ok = result.scale(x->terms.empty() ? x->constant : y->constant);
      }
    } else if (isa<arith::IndexCastOp, arith::ExtSIOp>(op)) {
      if (const IndexSum *x = sumOf(op.getOperand(0))) {
        result = *x;
        ok = true;
      }
    }
    if (ok)
      sums[op.getResult(0)] = result;
  }

  /// An integer of `width` bits from a 32-bit index, or back.
  Value resize(Value v, Type to, bool isSigned) {
    unsigned from = v.getType().getIntOrFloatBitWidth(),
             width = to.getIntOrFloatBitWidth();
    if (from == width)
      return v;
    if (from > width)
      return arith::TruncIOp::create(b, loc, to, v);
    return isSigned ? arith::ExtSIOp::create(b, loc, to, v).getResult()
                    : arith::ExtUIOp::create(b, loc, to, v).getResult();
  }

  /// LLVM intrinsics by name: the NVPTX back end gives them one
  /// instruction each (abs, sqrt.rn, cvt.rmi, ...), where the llvm.intr
  /// ops would go to libdevice in the GPU-to-NVVM conversion.
  Value intrinsic(StringRef name, ValueRange args) {
    Type type = args.front().getType();
    std::string full = (name + (type.isF64() ? ".f64" : ".f32")).str();
    return LLVM::CallIntrinsicOp::create(b, loc, type,
                                         b.getStringAttr(full), args)
        .getResult(0);
  }

  /// One PTX instruction on f32 operands, free of side effects (so LLVM
  /// may CSE and hoist it as any arithmetic).
  Value ptx(StringRef text, StringRef constraints, ValueRange operands) {
    return LLVM::InlineAsmOp::create(
               b, loc, ir.f32, operands, text, constraints,
               /*has_side_effects=*/false, /*is_align_stack=*/false,
               LLVM::tailcallkind::TailCallKind::None,
               LLVM::AsmDialectAttr::get(b.getContext(),
                                         LLVM::AsmDialect::AD_ATT),
               /*operand_attrs=*/ArrayAttr())
        .getResult(0);
  }

  void formProduct(Value v) {
    auto it = pending.find(v);
    if (it == pending.end())
      return;
    map.map(v, contracted(arith::MulFOp::create(b, loc, map.lookup(v),
                                                it->second)));
    pending.erase(it);
  }

  /// The constant factor c of `op` = x * c or x / c (f32; c finite and,
  /// dividing, nonzero): the operand x and the factor, else null.
  std::pair<Value, float> constantFactor(Operation &op) {
    auto byConstant = [&](Value v, double &c) {
      FloatAttr attr;
      if (!matchPattern(v, m_Constant(&attr)))
        return false;
      c = attr.getValueAsDouble();
      return true;
    };
    double c;
    if (auto mul = dyn_cast<arith::MulFOp>(op); mul && mul.getType().isF32()) {
      if (byConstant(mul.getRhs(), c) && std::isfinite(c))
        return {mul.getLhs(), static_cast<float>(c)};
      if (byConstant(mul.getLhs(), c) && std::isfinite(c))
        return {mul.getRhs(), static_cast<float>(c)};
    }
    if (auto div = dyn_cast<arith::DivFOp>(op); div && div.getType().isF32())
      if (byConstant(div.getRhs(), c) && c != 0.0 && std::isfinite(1.0 / c))
        return {div.getLhs(), static_cast<float>(1.0 / c)};
    return {Value(), 0.0f};
  }

  /// x * c or x / c whose x is pending or not an index sum's float form:
  /// the result is x with the factor pending. (An index sum's float form
  /// times a constant keeps distributeTileProduct's form: one fma.)
  bool foldConstantFactor(Operation &op) {
    auto [x, c] = constantFactor(op);
    if (!x || (!pending.count(x) && floatSums.count(x)))
      return false;
    map.map(op.getResult(0), map.lookup(x));
    auto it = pending.find(x);
    Value factor = it == pending.end()
                       ? ir.cF32(c)
                       : contracted(arith::MulFOp::create(b, loc, it->second,
                                                          ir.cF32(c)));
    pending[op.getResult(0)] = factor;
    return true;
  }

  /// An index sum converted to f32: its float form (floatOf).
  bool floatIndexSum(Operation &op) {
    auto toFloat = dyn_cast<arith::SIToFPOp>(op);
    if (!toFloat || !toFloat.getType().isF32() ||
        !sums.count(toFloat.getIn()) || sums[toFloat.getIn()].terms.empty())
      return false;
    FloatSum f = floatOf(sums[toFloat.getIn()]);
    floatSums[toFloat.getResult()] = f;
    map.map(toFloat.getResult(),
            f.constant == 0.0f
                ? f.tile
                : contracted(arith::AddFOp::create(b, loc, f.tile,
                                                   ir.cF32(f.constant))));
    return true;
  }

  /// (tile + c) * x: tile * x is per tile, so the score pays one fma,
  /// x * c + tile * x (ALiBi's slope times the distance).
  bool distributeTileProduct(Operation &op) {
    auto mul = dyn_cast<arith::MulFOp>(op);
    if (!mul || !mul.getType().isF32())
      return false;
    Value x = mul.getLhs(), y = mul.getRhs();
    if (!floatSums.count(x))
      std::swap(x, y);
    if (!floatSums.count(x) || floatSums[x].constant == 0.0f)
      return false;
    FloatSum f = floatSums[x];
    Value other = map.lookup(y);
    Value tile = contracted(arith::MulFOp::create(b, loc, f.tile, other));
    Value product = contracted(
        arith::MulFOp::create(b, loc, other, ir.cF32(f.constant)));
    map.map(mul.getResult(),
            contracted(arith::AddFOp::create(b, loc, product, tile)));
    return true;
  }

  /// tensor.extract of a captured tensor: the value read ahead, or a load.
  bool capturedRead(Operation &op) {
    auto extract = dyn_cast<tensor::ExtractOp>(op);
    if (!extract)
      return false;
    if (Value early =
            reads ? reads->lookup(&op, rowSlot, columnSlot) : Value()) {
      map.map(extract.getResult(), early);
      return true;
    }
    // A captured tensor: its argument's position past the fixed ones.
    auto arg = cast<BlockArgument>(extract.getTensor());
    const size_t capture = arg.getArgNumber() - fixedCount;
    const ForwardParams::Capture &c = p.captures[capture];
    // 32-bit offsets where the launch guarantees they fit (docs/rules.md
    // R13): one multiply-add per index, where 64-bit offsets take about
    // four instructions each (a document mask reads one per key column
    // of a partial tile).
    const bool narrow = ir.spec.captures[capture].hasNarrowOffsets();
    Type offsetType = narrow ? ir.i32 : ir.i64;
    Value offset = narrow ? ir.c32(0) : ir.c64(0);
    for (auto [index, stride] : llvm::zip(extract.getIndices(), c.strides))
      offset = ir.add(offset,
                      ir.mul(resize(map.lookup(index), offsetType, true),
                             resize(stride, offsetType, true)));
    if (narrow)
      offset = arith::ExtSIOp::create(b, loc, ir.i64, offset);
    Type type = extract.getType();
    Value address = ir.globalAddress(c.data, type, offset);
    // Invariant: the launch's captured tensors are read-only, so LLVM
    // may hoist a load that depends only on the tile (ALiBi's slope of
    // the head) out of the key loop, past the pipeline's barriers, and
    // reads the others through the non-coherent cache (ld.global.nc).
    map.map(extract.getResult(),
            LLVM::LoadOp::create(b, loc, type, address, /*alignment=*/4,
                                 /*isVolatile=*/false,
                                 /*isNonTemporal=*/false,
                                 /*isInvariant=*/true));
    return true;
  }

  /// The math dialect's one-operand ops on x (the operand's clone), as
  /// the NVVM forms the softmax uses; null for any other op.
  Value unaryMath(Operation &op, Value x) {
    if (isa<math::ExpOp>(op))
      return ir.exp2(arith::MulFOp::create(b, loc, x, ir.cF32(kLog2E)));
    if (isa<math::Exp2Op>(op))
      return ir.exp2(x);
    if (isa<math::LogOp>(op))
      return arith::MulFOp::create(b, loc, ir.log2(x), ir.cF32(kLn2));
    if (isa<math::Log2Op>(op))
      return ir.log2(x);
    // tanh.approx.f32 (sm_75+; relative error below 2^-10.9): one MUFU
    // operation, as the softmax's exp2. The exact form, (1 - t) / (1 + t)
    // with t = 2^(-2 |x| log2 e), takes two more (ex2 and rcp) and about
    // ten other instructions per score. FlashAttention-3's soft-cap uses
    // the same approximation.
    if (isa<math::TanhOp>(op))
      return ptx("tanh.approx.f32 $0, $1;", "=f,f", x);
    if (isa<math::RsqrtOp>(op))
      return arith::DivFOp::create(
          b, loc,
          arith::ConstantOp::create(b, loc, b.getFloatAttr(x.getType(), 1.0)),
          intrinsic("llvm.sqrt", x));
    // One LLVM intrinsic each.
    StringRef name = isa<math::SqrtOp>(op)    ? "llvm.sqrt"
                     : isa<math::AbsFOp>(op)  ? "llvm.fabs"
                     : isa<math::FloorOp>(op) ? "llvm.floor"
                     : isa<math::CeilOp>(op)  ? "llvm.ceil"
                                              : "";
    return name.empty() ? Value() : intrinsic(name, x);
  }

  /// The math dialect's ops (unaryMath, and fma as an intrinsic).
  bool mathOp(Operation &op) {
    if (auto fma = dyn_cast<math::FmaOp>(op)) {
      map.map(fma.getResult(),
              intrinsic("llvm.fma", ValueRange{map.lookup(fma.getA()),
                                               map.lookup(fma.getB()),
                                               map.lookup(fma.getC())}));
      return true;
    }
    if (op.getDialect()->getNamespace() != "math" ||
        op.getNumOperands() != 1)
      return false;
    Value y = unaryMath(op, map.lookup(op.getOperand(0)));
    if (!y)
      return false;
    map.map(op.getResult(0), y);
    return true;
  }

  /// An f32 division (one by a constant was folded as a factor where it
  /// could be).
  bool division(Operation &op) {
    auto div = dyn_cast<arith::DivFOp>(op);
    if (!div || !div.getType().isF32())
      return false;
    // By a constant (an index sum's float form / 8): a multiply by its
    // reciprocal (constantFactor), within 1.5 ulp (rounded reciprocal,
    // rounded product), tighter than div.full and no MUFU operation beside
    // the softmax's.
    if (auto [x, reciprocal] = constantFactor(op); x) {
      map.map(div.getResult(),
              contracted(arith::MulFOp::create(b, loc, map.lookup(x),
                                               ir.cF32(reciprocal))));
      return true;
    }
    // div.full.f32 (rcp and a multiply; within 2 ulp), as Triton divides
    // in FlexAttention's mods: an IEEE division is a dozen instructions
    // and a branch per score.
    map.map(div.getResult(),
            ptx("div.full.f32 $0, $1, $2;", "=f,f,f",
                {map.lookup(div.getLhs()), map.lookup(div.getRhs())}));
    return true;
  }

  /// index casts and constants, with index as i32.
  bool indexOp(Operation &op) {
    if (auto cast = dyn_cast<arith::IndexCastOp>(op)) {
      Type to = cast.getType().isIndex() ? ir.i32 : cast.getType();
      map.map(cast.getResult(), resize(map.lookup(cast.getIn()), to, true));
      return true;
    }
    if (auto cast = dyn_cast<arith::IndexCastUIOp>(op)) {
      Type to = cast.getType().isIndex() ? ir.i32 : cast.getType();
      map.map(cast.getResult(), resize(map.lookup(cast.getIn()), to, false));
      return true;
    }
    if (auto constant = dyn_cast<arith::ConstantIndexOp>(op)) {
      map.map(constant.getResult(),
              ir.c32(static_cast<int32_t>(constant.value())));
      return true;
    }
    return false;
  }
};
} // namespace

void ScoreMods::allowContraction(Operation *op) {
  if (auto fm = dyn_cast<arith::ArithFastMathInterface>(op))
    op->setAttr(fm.getFastMathAttrName(),
                arith::FastMathFlagsAttr::get(
                    op->getContext(),
                    fm.getFastMathFlagsAttr().getValue() |
                        arith::FastMathFlags::contract));
}

SmallVector<Value> ScoreMods::inlineRegion(Region &region,
                                          ArrayRef<ModIndex> fixed,
                                          ArrayRef<Value> want,
                                          const ModReads *reads,
                                          int64_t rowSlot,
                                          int64_t columnSlot, Value argScale,
                                          Value *resultScale) {
  return RegionInliner(ir, p, region, fixed, reads, rowSlot, columnSlot,
                       argScale)
      .run(want, resultScale);
}

} // namespace flashjit
