// RUN: flashjit-opt %s | flashjit-opt | FileCheck %s
// RUN: flashjit-opt %s --mlir-print-op-generic | flashjit-opt | FileCheck %s

// CHECK-LABEL: func.func @plain
// CHECK: %[[O:.+]], %[[L:.+]] = attn.attention %{{.+}}, %{{.+}}, %{{.+}} scale %{{.+}} : tensor<2x8x128x64xf16>, tensor<2x8x128x64xf16>, tensor<2x8x128x64xf16> -> tensor<2x8x128x64xf16>, tensor<2x8x128xf32>
// CHECK-NOT: causal
func.func @plain(%q: tensor<2x8x128x64xf16>, %k: tensor<2x8x128x64xf16>,
                 %v: tensor<2x8x128x64xf16>, %s: f32)
    -> (tensor<2x8x128x64xf16>, tensor<2x8x128xf32>) {
  %o, %lse = attn.attention %q, %k, %v scale %s
      : tensor<2x8x128x64xf16>, tensor<2x8x128x64xf16>, tensor<2x8x128x64xf16>
      -> tensor<2x8x128x64xf16>, tensor<2x8x128xf32>
  return %o, %lse : tensor<2x8x128x64xf16>, tensor<2x8x128xf32>
}

// Dynamic batch and seqlens, GQA (32 query heads over 8 key/value heads),
// causal, and a tile config.
// CHECK-LABEL: func.func @gqa_causal_config
// CHECK: attn.attention {{.+}} causal {config = #attn.tile_config<family = "cuda_core", block_m = 64, block_n = 32, stages = 1, warps = 8>} : tensor<?x32x?x128xbf16>, tensor<?x8x?x128xbf16>
func.func @gqa_causal_config(%q: tensor<?x32x?x128xbf16>, %k: tensor<?x8x?x128xbf16>,
                             %v: tensor<?x8x?x128xbf16>, %s: f32)
    -> (tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v scale %s causal
      {config = #attn.tile_config<family = "cuda_core", block_m = 64, block_n = 32, stages = 1, warps = 8>}
      : tensor<?x32x?x128xbf16>, tensor<?x8x?x128xbf16>, tensor<?x8x?x128xbf16>
      -> tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
  return %o, %lse : tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
}

// score_mod (ALiBi-style bias) and mask_mod (sliding window) regions.
// CHECK-LABEL: func.func @mods
// CHECK: attn.attention
// CHECK-SAME: score_mod {
// CHECK-NEXT: ^bb0(%{{.+}}: f32, %{{.+}}: index, %{{.+}}: index, %{{.+}}: index, %{{.+}}: index):
// CHECK: attn.yield %{{.+}} : f32
// CHECK: } mask_mod {
// CHECK: attn.yield %{{.+}} : i1
func.func @mods(%q: tensor<1x4x?x64xbf16>, %k: tensor<1x4x?x64xbf16>,
                %v: tensor<1x4x?x64xbf16>, %s: f32)
    -> (tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v scale %s score_mod {
  ^bb0(%score: f32, %b: index, %h: index, %qi: index, %ki: index):
    %d = arith.subi %ki, %qi : index
    %di = arith.index_cast %d : index to i64
    %df = arith.sitofp %di : i64 to f32
    %r = arith.addf %score, %df : f32
    attn.yield %r : f32
  } mask_mod {
  ^bb0(%b: index, %h: index, %qi: index, %ki: index):
    %c128 = arith.constant 128 : index
    %lo = arith.subi %qi, %c128 : index
    %keep = arith.cmpi sge, %ki, %lo : index
    attn.yield %keep : i1
  } : tensor<1x4x?x64xbf16>, tensor<1x4x?x64xbf16>, tensor<1x4x?x64xbf16>
      -> tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>
  return %o, %lse : tensor<1x4x?x64xbf16>, tensor<1x4x?xf32>
}
