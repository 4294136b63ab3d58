// RUN: flashjit-opt %s -split-input-file -attn-attach-config="chip=sm_80" -verify-diagnostics | FileCheck %s

// An attention without a config gets the heuristic's choice.
// CHECK-LABEL: func.func @no_config
// CHECK: attn.attention {{.+}} {config = #attn.tile_config<family = "mma_sync", block_m = {{[0-9]+}}, block_n = {{[0-9]+}}, stages = {{[12]}}, warps = {{[0-9]+}}>}
func.func @no_config(%q: tensor<?x8x?x128xbf16>, %s: f32) -> tensor<?x8x?x128xbf16> {
  %o, %lse = attn.attention %q, %q, %q scale %s
      : tensor<?x8x?x128xbf16>, tensor<?x8x?x128xbf16>, tensor<?x8x?x128xbf16>
      -> tensor<?x8x?x128xbf16>, tensor<?x8x?xf32>
  return %o : tensor<?x8x?x128xbf16>
}

// -----

// A config already there is kept as written.
// CHECK-LABEL: func.func @kept
// CHECK: {config = #attn.tile_config<family = "cuda_core", block_m = 32, block_n = 16, stages = 1, warps = 2>}
func.func @kept(%q: tensor<?x8x?x64xf16>, %s: f32) -> tensor<?x8x?x64xf16> {
  %o, %lse = attn.attention %q, %q, %q scale %s {config = #attn.tile_config<family = "cuda_core", block_m = 32, block_n = 16, stages = 1, warps = 2>}
      : tensor<?x8x?x64xf16>, tensor<?x8x?x64xf16>, tensor<?x8x?x64xf16>
      -> tensor<?x8x?x64xf16>, tensor<?x8x?xf32>
  return %o : tensor<?x8x?x64xf16>
}

// -----

// No template supports head dim 72.
func.func @unsupported(%q: tensor<?x8x?x72xbf16>, %s: f32) -> tensor<?x8x?x72xbf16> {
  // expected-error-re @+1 {{no tile config runs {{.*}}head dim 72 is not supported by the mma_sync template{{.*}}head dim 72 is not supported by the cuda_core template}}
  %o, %lse = attn.attention %q, %q, %q scale %s
      : tensor<?x8x?x72xbf16>, tensor<?x8x?x72xbf16>, tensor<?x8x?x72xbf16>
      -> tensor<?x8x?x72xbf16>, tensor<?x8x?xf32>
  return %o : tensor<?x8x?x72xbf16>
}
