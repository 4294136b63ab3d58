//===- ScoreMods.cpp - score_mod and mask_mod placed in a kernel ----------===//
// Why: see ScoreMods.h.
#include "ScoreMods.h"

#include "flashjit/Dialect/AttnDialect.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"

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

ScoreMods ScoreMods::onBase2Scores(KernelIR &ir, const ModRegions &mods,
                                   const ForwardParams &p) {
  return ScoreMods(ir, mods, p, ir.cF32(kLn2), ir.cF32(kLog2E));
}

Value ScoreMods::score(Value s, Value batch, Value head, Value row,
                       Value column) {
  if (!hasScoreMod())
    return s;
  OpBuilder &b = ir.b;
  Value natural = arith::MulFOp::create(b, ir.loc, s, toNatural);
  Value modded =
      inlineRegion(*mods.scoreMod, {natural, batch, head, row, column});
  return arith::MulFOp::create(b, ir.loc, modded, fromNatural);
}

Value ScoreMods::keep(Value batch, Value head, Value row, Value column,
                      Value appliesHere) {
  OpBuilder &b = ir.b;
  auto yes = [&] {
    return arith::ConstantOp::create(b, ir.loc, b.getBoolAttr(true));
  };
  if (!hasMaskMod())
    return yes();
  Value kept = inlineRegion(*mods.maskMod, {batch, head, row, column});
  if (!appliesHere)
    return kept;
  return arith::OrIOp::create(
      b, ir.loc, kept, arith::XOrIOp::create(b, ir.loc, appliesHere, yes()));
}

Value ScoreMods::inlineRegion(Region &region, ArrayRef<Value> fixed) {
  OpBuilder &b = ir.b;
  Location loc = ir.loc;
  Block &block = region.front();
  // `index` values are 32-bit here, as FlexAttention's int32 indices: the
  // mods' integer work (a distance, a document id compare) then takes one
  // instruction per score, and int-to-float conversions are 32-bit. The
  // fixed arguments are below 2^31; a mod whose index arithmetic could
  // exceed it (q_idx * seqlen) casts to i64 first.
  IRMapping map;
  for (auto [arg, value] : llvm::zip(block.getArguments(), fixed))
    map.map(arg, arg.getType().isIndex() ? ir.toI32(value) : value);
  // An integer of `width` bits from a 32-bit index, or back.
  auto resize = [&](Value v, Type to, bool isSigned) -> Value {
    unsigned from = v.getType().getIntOrFloatBitWidth(),
             width = to.getIntOrFloatBitWidth();
    if (from == width)
      return v;
    if (from > width)
      return arith::TruncIOp::create(b, loc, to, v);
    return isSigned ? arith::ExtSIOp::create(b, loc, to, v).getResult()
                    : arith::ExtUIOp::create(b, loc, to, v).getResult();
  };
  // LLVM intrinsics by name: the NVPTX back end gives them one instruction
  // each (abs, sqrt.rn, cvt.rmi, ...), where the llvm.intr ops would go to
  // libdevice in the GPU-to-NVVM conversion.
  auto intrinsic = [&](StringRef name, ValueRange args) -> Value {
    Type type = args.front().getType();
    std::string full = (name + (type.isF64() ? ".f64" : ".f32")).str();
    return LLVM::CallIntrinsicOp::create(b, loc, type,
                                         b.getStringAttr(full), args)
        .getResult(0);
  };
  // One PTX instruction on f32 operands, free of side effects (so LLVM may
  // CSE and hoist it as any arithmetic).
  auto ptx = [&](StringRef text, StringRef constraints,
                 ValueRange operands) -> Value {
    return LLVM::InlineAsmOp::create(
               b, loc, ir.f32, operands, text, constraints,
               /*has_side_effects=*/false, /*is_align_stack=*/false,
               LLVM::tailcallkind::TailCallKind::None,
               LLVM::AsmDialectAttr::get(b.getContext(),
                                         LLVM::AsmDialect::AD_ATT),
               /*operand_attrs=*/ArrayAttr())
        .getResult(0);
  };
  auto f32Unary = [&](Operation &op, function_ref<Value(Value)> f) {
    map.map(op.getResult(0), f(map.lookup(op.getOperand(0))));
  };
  for (Operation &op : block) {
    if (auto yield = dyn_cast<attn::YieldOp>(op))
      return map.lookup(yield.getValues()[0]);
    if (auto extract = dyn_cast<tensor::ExtractOp>(op)) {
      // A captured tensor: its argument's position past the fixed ones.
      auto arg = cast<BlockArgument>(extract.getTensor());
      const ForwardParams::Capture &c =
          p.captures[arg.getArgNumber() - fixed.size()];
      Value offset = ir.c64(0);
      for (auto [index, stride] : llvm::zip(extract.getIndices(), c.strides))
        offset = ir.add(
            offset, ir.mul(resize(map.lookup(index), ir.i64, true), stride));
      Type type = extract.getType();
      Value address = ir.globalAddress(c.data, type, offset);
      map.map(extract.getResult(),
              LLVM::LoadOp::create(b, loc, type, address, /*alignment=*/4));
      continue;
    }
    if (isa<math::ExpOp>(op)) {
      f32Unary(op, [&](Value x) {
        return ir.exp2(arith::MulFOp::create(b, loc, x, ir.cF32(kLog2E)));
      });
      continue;
    }
    if (isa<math::Exp2Op>(op)) {
      f32Unary(op, [&](Value x) { return ir.exp2(x); });
      continue;
    }
    if (isa<math::LogOp>(op)) {
      f32Unary(op, [&](Value x) {
        return arith::MulFOp::create(b, loc, ir.log2(x), ir.cF32(kLn2));
      });
      continue;
    }
    if (isa<math::Log2Op>(op)) {
      f32Unary(op, [&](Value x) { return ir.log2(x); });
      continue;
    }
    if (isa<math::TanhOp>(op)) {
      // tanh.approx.f32 (sm_75+; relative error below 2^-10.9): one MUFU
      // operation, as the softmax's exp2. The exact form, (1 - t) / (1 + t)
      // with t = 2^(-2 |x| log2 e), takes two more (ex2 and rcp) and about
      // ten other instructions per score. FlashAttention-3's soft-cap uses
      // the same approximation.
      f32Unary(op, [&](Value x) {
        return ptx("tanh.approx.f32 $0, $1;", "=f,f", x);
      });
      continue;
    }
    if (auto div = dyn_cast<arith::DivFOp>(op); div && div.getType().isF32()) {
      // div.full.f32 (rcp and a multiply; within 2 ulp), as Triton divides
      // in FlexAttention's mods: an IEEE division is a dozen instructions
      // and a branch per score.
      map.map(div.getResult(),
              ptx("div.full.f32 $0, $1, $2;", "=f,f,f",
                  {map.lookup(div.getLhs()), map.lookup(div.getRhs())}));
      continue;
    }
    if (isa<math::SqrtOp>(op)) {
      f32Unary(op, [&](Value x) { return intrinsic("llvm.sqrt", x); });
      continue;
    }
    if (isa<math::RsqrtOp>(op)) {
      f32Unary(op, [&](Value x) {
        return arith::DivFOp::create(
            b, loc, arith::ConstantOp::create(
                        b, loc, b.getFloatAttr(x.getType(), 1.0)),
            intrinsic("llvm.sqrt", x));
      });
      continue;
    }
    if (isa<math::AbsFOp>(op)) {
      f32Unary(op, [&](Value x) { return intrinsic("llvm.fabs", x); });
      continue;
    }
    if (isa<math::FloorOp>(op)) {
      f32Unary(op, [&](Value x) { return intrinsic("llvm.floor", x); });
      continue;
    }
    if (isa<math::CeilOp>(op)) {
      f32Unary(op, [&](Value x) { return intrinsic("llvm.ceil", x); });
      continue;
    }
    if (auto fma = dyn_cast<math::FmaOp>(op)) {
      map.map(fma.getResult(),
              intrinsic("llvm.fma", ValueRange{map.lookup(fma.getA()),
                                               map.lookup(fma.getB()),
                                               map.lookup(fma.getC())}));
      continue;
    }
    // arith ops (the verifier admits nothing else), with index as i32.
    if (auto cast = dyn_cast<arith::IndexCastOp>(op)) {
      Type to = cast.getType().isIndex() ? ir.i32 : cast.getType();
      map.map(cast.getResult(), resize(map.lookup(cast.getIn()), to, true));
      continue;
    }
    if (auto cast = dyn_cast<arith::IndexCastUIOp>(op)) {
      Type to = cast.getType().isIndex() ? ir.i32 : cast.getType();
      map.map(cast.getResult(), resize(map.lookup(cast.getIn()), to, false));
      continue;
    }
    if (auto constant = dyn_cast<arith::ConstantIndexOp>(op)) {
      map.map(constant.getResult(),
              ir.c32(static_cast<int32_t>(constant.value())));
      continue;
    }
    Operation *clone = b.clone(op, map);
    for (Value result : clone->getResults())
      if (result.getType().isIndex())
        result.setType(ir.i32);
  }
  llvm_unreachable("a verified mod region ends in attn.yield");
}

} // namespace flashjit
