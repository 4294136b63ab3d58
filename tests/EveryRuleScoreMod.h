//===- EveryRuleScoreMod.h - every derivative rule in one ---*- C++ -*-===//
// Why: the derived score_grad is checked on the host (ScoreGradTest) and
// in the backward kernels on the GPU (BackwardGpuTest) with the same
// function: softplus, exp2/log2, a clamp, sqrt, rsqrt, |x|, fma, a select
// on the score's sign, tanh, a division and negation. (No floor: its
// jumps would make the GPU reference's difference quotients explode.)
#ifndef FLASHJIT_TESTS_EVERYRULESCOREMOD_H
#define FLASHJIT_TESTS_EVERYRULESCOREMOD_H

namespace flashjit::test {

inline const char *everyRuleScoreMod() {
  return R"mlir(
func.func @score_mod(%s: f32, %b: index, %h: index, %q: index, %kv: index)
    -> f32 {
  %quarter = arith.constant 0.25 : f32
  %one = arith.constant 1.0 : f32
  %lo = arith.constant -3.0 : f32
  %zero = arith.constant 0.0 : f32
  %x = arith.mulf %s, %quarter : f32
  %e = math.exp %x : f32
  %sp = arith.addf %one, %e : f32
  %l = math.log %sp : f32
  %e2 = math.exp2 %x : f32
  %l2 = math.log2 %sp : f32
  %a = math.absf %s : f32
  %a1 = arith.addf %a, %one : f32
  %r = math.sqrt %a1 : f32
  %rr = math.rsqrt %a1 : f32
  %m = arith.maximumf %s, %lo : f32
  %mn = arith.minimumf %m, %one : f32
  %neg = arith.cmpf olt, %s, %zero : f32
  %pick = arith.select %neg, %r, %rr : f32
  %f = math.fma %l, %pick, %mn : f32
  %t = math.tanh %x : f32
  %u = arith.divf %e2, %sp : f32
  %v = arith.subf %f, %l2 : f32
  %w = arith.addf %v, %u : f32
  %n = arith.negf %t : f32
  %y = arith.subf %w, %n : f32
  return %y : f32
}
)mlir";
}

} // namespace flashjit::test

#endif
