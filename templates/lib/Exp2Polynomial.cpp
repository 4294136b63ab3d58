//===- Exp2Polynomial.cpp - 2^x on the FMA units ------------------------===//
// Why: on Hopper the special-function unit retires 16 results per clock and
// SM, the head dim 128 products of 8 scores; a score_mod that spends it
// too (soft-capping's tanh) leaves the softmax's ex2 as the kernel's
// bound (ScoreModCost.cpp). The FP32 units, 8 times wider, can take part
// of the exp2: 2^x = 2^j 2^f, j the nearest integer to x, f = x - j in
// [-1/2, 1/2], 2^f a polynomial in f, 2^j added to its exponent bits.
//
// The polynomial is the degree-4 fit of 2^f on [-1/2, 1/2] that minimizes
// the largest relative error with its constant term held at 1 (f = 0 then
// gives 1 exactly); its error, f32 rounding included, is below 2^-18, 2^9
// times under the rounding of P to bf16 and 2^7 under f16's. x is clamped
// at -127 first: -inf (a masked score) then gives j = -127, f = 0, the
// bits of 1.0 plus -127 in the exponent field, which is +0.0 exactly, and
// no x at or above it can carry the exponent field below zero. x must stay
// below 128 (the exponent field would pass 254); the fixed reference keeps
// it within +-64 (FragmentSoftmax::fixReference). NaN stays NaN.
//
// On Hopper this pays only where the unit is the tighter bound: soft-cap
// at head dim 64, 2 of every 8 exp2 (docs/performance.md has the A/B, and
// the losses at head dim 128 and for dense kernels).
#include "KernelIR.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;

namespace flashjit {

namespace {
/// 2^f ~ 1 + c1 f + c2 f^2 + c3 f^3 + c4 f^4 on [-1/2, 1/2].
constexpr float kExp2Coefficients[] = {0x1.62e12cp-1f, 0x1.ec0378p-3f,
                                       0x1.c9fc46p-5f, 0x1.3a02ccp-7f};
/// 1.5 * 2^23: x + this, rounded to nearest, holds round(x) in the low
/// mantissa bits; the same constant subtracted gives round(x) as a float.
constexpr float kRoundingShift = 0x1.8p23f;
} // namespace

Value KernelIR::exp2OnFmaUnits(Value x) {
  Value clamped = maxF(x, cF32(-127.0f));
  Value shifted = arith::AddFOp::create(b, loc, clamped, cF32(kRoundingShift));
  Value whole = arith::SubFOp::create(b, loc, shifted, cF32(kRoundingShift));
  Value fraction = arith::SubFOp::create(b, loc, clamped, whole);
  const size_t degree = std::size(kExp2Coefficients);
  Value poly = cF32(kExp2Coefficients[degree - 1]);
  for (size_t k = degree - 1; k-- > 0;)
    poly = LLVM::FMAOp::create(b, loc, poly, fraction,
                               cF32(kExp2Coefficients[k]));
  poly = LLVM::FMAOp::create(b, loc, poly, fraction, cF32(1.0f));
  // round(x) sits in the low bits of `shifted`'s mantissa; shifted by 23
  // it becomes round(x) in the exponent field (the higher bits fall off).
  Value exponent = arith::ShLIOp::create(
      b, loc, arith::BitcastOp::create(b, loc, i32, shifted), c32(23));
  Value bits = arith::AddIOp::create(
      b, loc, arith::BitcastOp::create(b, loc, i32, poly), exponent);
  return arith::BitcastOp::create(b, loc, f32, bits);
}

} // namespace flashjit
