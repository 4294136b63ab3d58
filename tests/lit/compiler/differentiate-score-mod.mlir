// RUN: flashjit-opt %s -split-input-file -attn-differentiate-score-mod -verify-diagnostics | FileCheck %s
// RUN: flashjit-opt %s -split-input-file -attn-differentiate-score-mod -verify-diagnostics | flashjit-opt -split-input-file | FileCheck %s --check-prefix=ROUND

// Soft-capping, cap * tanh(score / cap): score_grad repeats the ops and
// follows each with its derivative: d(s / c) = ds / c, d tanh(x) =
// (1 - tanh(x)^2) dx, d(c t) = c dt. It yields the score and the
// derivative.
// CHECK-LABEL: func.func @softcap
// CHECK: score_grad {
// CHECK-NEXT: ^bb0(%[[S:.+]]: f32, %{{.+}}: index, %{{.+}}: index, %{{.+}}: index, %{{.+}}: index):
// CHECK-DAG: %[[ONE:.+]] = arith.constant 1.000000e+00 : f32
// CHECK-DAG: %[[CAP:.+]] = arith.constant 3.000000e+01 : f32
// CHECK: %[[X:.+]] = arith.divf %[[S]], %[[CAP]] : f32
// CHECK: %[[DX:.+]] = arith.divf %[[ONE]], %[[CAP]] : f32
// CHECK: %[[T:.+]] = math.tanh %[[X]] : f32
// CHECK: %[[TT:.+]] = arith.mulf %[[T]], %[[T]] : f32
// CHECK: %[[F:.+]] = arith.subf %{{.+}}, %[[TT]] : f32
// CHECK: %[[DT:.+]] = arith.mulf %[[F]], %[[DX]] : f32
// CHECK: %[[Y:.+]] = arith.mulf %[[CAP]], %[[T]] : f32
// CHECK: %[[DY:.+]] = arith.mulf %[[CAP]], %[[DT]] : f32
// CHECK: attn.yield %[[Y]], %[[DY]] : f32, f32
// ROUND-LABEL: func.func @softcap
// ROUND: score_grad {
// ROUND: attn.yield %{{.+}}, %{{.+}} : f32, f32
func.func @softcap(%q: tensor<1x4x?x64xbf16>, %s: f32)
    -> (tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>) {
  %o, %lse = attn.attention %q, %q, %q scale %s score_mod {
  ^bb0(%score: f32, %b: index, %h: index, %qi: index, %kv: index):
    %cap = arith.constant 30.0 : f32
    %x = arith.divf %score, %cap : f32
    %t = math.tanh %x : f32
    %r = arith.mulf %cap, %t : f32
    attn.yield %r : f32
  } : tensor<1x4x?x64xbf16>, tensor<1x4x?x64xbf16>, tensor<1x4x?x64xbf16>
      -> tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>
  return %o, %lse : tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>
}

// -----

// ALiBi: the bias does not depend on the score, so the derivative of
// score + bias is the score's own, 1.
// CHECK-LABEL: func.func @alibi
// CHECK: score_grad {
// CHECK-NEXT: ^bb0(%[[S:[^:]+]]: f32, {{.+}}, %{{.+}}: tensor<4xf32>):
// CHECK: %[[ONE:.+]] = arith.constant 1.000000e+00 : f32
// CHECK: tensor.extract
// CHECK: %[[Y:.+]] = arith.addf %[[S]], %{{.+}} : f32
// CHECK: attn.yield %[[Y]], %[[ONE]] : f32, f32
func.func @alibi(%q: tensor<1x4x?x64xbf16>, %s: f32, %slopes: tensor<4xf32>)
    -> (tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>) {
  %o, %lse = attn.attention %q, %q, %q scale %s
      captures(%slopes : tensor<4xf32>) score_mod {
  ^bb0(%score: f32, %b: index, %h: index, %qi: index, %kv: index,
       %sl: tensor<4xf32>):
    %slope = tensor.extract %sl[%h] : tensor<4xf32>
    %d = arith.subi %kv, %qi : index
    %di = arith.index_cast %d : index to i64
    %df = arith.sitofp %di : i64 to f32
    %bias = arith.mulf %slope, %df : f32
    %r = arith.addf %score, %bias : f32
    attn.yield %r : f32
  } : tensor<1x4x?x64xbf16>, tensor<1x4x?x64xbf16>, tensor<1x4x?x64xbf16>
      -> tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>
  return %o, %lse : tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>
}

// -----

// A clamp through select and maximumf: the derivative of the branch taken.
// CHECK-LABEL: func.func @clamped
// CHECK: score_grad {
// CHECK: arith.cmpf oge
// CHECK: arith.select
// CHECK: arith.select
// CHECK: attn.yield %{{.+}}, %{{.+}} : f32, f32
func.func @clamped(%q: tensor<1x4x?x64xbf16>, %s: f32)
    -> (tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>) {
  %o, %lse = attn.attention %q, %q, %q scale %s score_mod {
  ^bb0(%score: f32, %b: index, %h: index, %qi: index, %kv: index):
    %lo = arith.constant -5.0 : f32
    %m = arith.maximumf %score, %lo : f32
    %zero = arith.constant 0.0 : f32
    %neg = arith.cmpf olt, %score, %zero : f32
    %half = arith.mulf %m, %m : f32
    %r = arith.select %neg, %m, %half : f32
    attn.yield %r : f32
  } : tensor<1x4x?x64xbf16>, tensor<1x4x?x64xbf16>, tensor<1x4x?x64xbf16>
      -> tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>
  return %o, %lse : tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>
}

// -----

// A score_grad written by hand is kept as it is.
// CHECK-LABEL: func.func @given
// CHECK: score_grad {
// CHECK: %[[TWO:.+]] = arith.constant 2.000000e+00 : f32
// CHECK-NEXT: attn.yield %{{.+}}, %[[TWO]] : f32, f32
// CHECK-NOT: score_grad
func.func @given(%q: tensor<1x4x?x64xbf16>, %s: f32)
    -> (tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>) {
  %o, %lse = attn.attention %q, %q, %q scale %s score_mod {
  ^bb0(%score: f32, %b: index, %h: index, %qi: index, %kv: index):
    %x = arith.remf %score, %score : f32
    attn.yield %x : f32
  } score_grad {
  ^bb0(%score: f32, %b: index, %h: index, %qi: index, %kv: index):
    %x = arith.remf %score, %score : f32
    %two = arith.constant 2.0 : f32
    attn.yield %x, %two : f32, f32
  } : tensor<1x4x?x64xbf16>, tensor<1x4x?x64xbf16>, tensor<1x4x?x64xbf16>
      -> tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>
  return %o, %lse : tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>
}

// -----

// An op on the score's path with no derivative rule is an error that
// names it; one off the path (on indices) is fine.
func.func @no_rule(%q: tensor<1x4x?x64xbf16>, %s: f32)
    -> (tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>) {
  %o, %lse = attn.attention %q, %q, %q scale %s score_mod {
  ^bb0(%score: f32, %b: index, %h: index, %qi: index, %kv: index):
    %c = arith.constant 7.0 : f32
    %i = arith.index_cast %kv : index to i64
    %f = arith.sitofp %i : i64 to f32
    %g = arith.remf %f, %c : f32
    // expected-error @+1 {{'arith.remf' op computes on the score with no derivative rule}}
    %x = arith.remf %score, %g : f32
    attn.yield %x : f32
  } : tensor<1x4x?x64xbf16>, tensor<1x4x?x64xbf16>, tensor<1x4x?x64xbf16>
      -> tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>
  return %o, %lse : tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>
}
