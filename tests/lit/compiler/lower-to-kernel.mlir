// RUN: flashjit-opt %s -split-input-file -attn-lower-to-kernel -verify-diagnostics | FileCheck %s

// The description becomes a kernel of the same name with the parameters of
// KernelABI.h: 5 pointers, 15 strides, two seqlens, scale * log2(e).
// CHECK: module attributes {gpu.container_module}
// CHECK: gpu.module @flashjit_kernels
// CHECK: gpu.func @causal_gqa(%{{.+}}: !llvm.ptr<1>, %{{.+}}: !llvm.ptr<1>, %{{.+}}: !llvm.ptr<1>, %{{.+}}: !llvm.ptr<1>, %{{.+}}: !llvm.ptr<1>, {{(%[^:]+: i64, )+}}%{{.+}}: i32, %{{.+}}: i32, %[[SCALE:.+]]: f32, %{{.+}}: i32, %{{.+}}: !llvm.ptr<1>) kernel attributes {known_block_size = array<i32: 256, 1, 1>}
// Causal: the heaviest query blocks are scheduled first.
// CHECK: gpu.grid_dim x
// GQA: 4 query heads share a key/value head.
// CHECK: arith.divui %{{.+}}, %c4_i64
// Q is pre-scaled into base 2 once.
// CHECK: arith.mulf %{{.+}}, %{{.+}} : vector<8xf32>
// K and V tiles in dynamic shared memory.
// CHECK: gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
// CHECK: memref.view {{.+}} to memref<32x160xbf16, #gpu.address_space<workgroup>>
// One loop over K/V tiles carrying the running max, the running sum and the
// accumulator: no N x N buffer anywhere.
// CHECK: scf.for {{.+}} iter_args(%{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) -> (f32, f32, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
// CHECK: gpu.barrier
// CHECK: vector.store {{.+}} {alignment = 16 : i64}
// CHECK: gpu.barrier
// Partial dot products are summed across the 4 slices of a row.
// CHECK: gpu.shuffle xor %{{.+}}, %c2_i32{{[_0-9]*}}, %c32_i32{{[_0-9]*}} : f32
// CHECK: gpu.shuffle xor %{{.+}}, %c1_i32{{[_0-9]*}}, %c32_i32{{[_0-9]*}} : f32
// Masking: tail (column < seqlen_k) and causal (column <= row).
// CHECK: arith.cmpi slt
// CHECK: arith.cmpi sle
// CHECK: arith.select
// CHECK: arith.maxnumf
// Online softmax in base 2: one rescale of the accumulator per tile.
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"
// CHECK: arith.mulf %{{.+}}, %{{.+}} : vector<8xf32>
// CHECK: vector.fma
// CHECK: scf.yield
// Epilogue: O = acc / l for rows inside the sequence, and the LSE.
// CHECK: arith.divf
// CHECK: scf.if
// CHECK: arith.truncf %{{.+}} : vector<8xf32> to vector<8xbf16>
// CHECK: llvm.store %{{.+}}, %{{.+}} {alignment = 16 : i64} : vector<8xbf16>, !llvm.ptr<1>
// CHECK: llvm.call_intrinsic "llvm.nvvm.lg2.approx.f"
// CHECK: llvm.store %{{.+}}, %{{.+}} {alignment = 4 : i64} : f32, !llvm.ptr<1>
// CHECK: gpu.return
// CHECK-NOT: func.func @causal_gqa
func.func @causal_gqa(%q: tensor<?x8x?x128xbf16>, %k: tensor<?x2x?x128xbf16>,
                      %v: tensor<?x2x?x128xbf16>, %s: f32)
    -> (tensor<?x8x?x128xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v scale %s causal {config = #attn.tile_config<family = "cuda_core", block_m = 64, block_n = 32, stages = 1, warps = 8>}
      : tensor<?x8x?x128xbf16>, tensor<?x2x?x128xbf16>, tensor<?x2x?x128xbf16>
      -> tensor<?x8x?x128xbf16>, tensor<?x8x?xf32>
  return %o, %lse : tensor<?x8x?x128xbf16>, tensor<?x8x?xf32>
}

// -----

// Not causal: no grid reversal, no causal compare; head dim 64 = 2 slices.
// CHECK-LABEL: gpu.func @plain
// CHECK-SAME: known_block_size = array<i32: 64, 1, 1>
// CHECK-NOT: gpu.grid_dim
// CHECK-NOT: arith.cmpi sle
// CHECK-NOT: gpu.shuffle xor %{{.+}}, %c2_i32
// CHECK: gpu.shuffle xor %{{.+}}, %c1_i32{{[_0-9]*}}, %c32_i32{{[_0-9]*}} : f32
// CHECK-NOT: gpu.shuffle xor %{{.+}}, %c2_i32
// CHECK: gpu.return
func.func @plain(%q: tensor<?x4x?x64xf16>, %s: f32) -> tensor<?x4x?x64xf16> {
  %o, %lse = attn.attention %q, %q, %q scale %s {config = #attn.tile_config<family = "cuda_core", block_m = 32, block_n = 16, stages = 1, warps = 2>}
      : tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>
      -> tensor<?x4x?x64xf16>, tensor<?x4x?xf32>
  return %o : tensor<?x4x?x64xf16>
}

// -----

func.func @no_config(%q: tensor<?x4x?x64xf16>, %s: f32) -> tensor<?x4x?x64xf16> {
  // expected-error @+1 {{has no tile config: run attn-attach-config first}}
  %o, %lse = attn.attention %q, %q, %q scale %s
      : tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>
      -> tensor<?x4x?x64xf16>, tensor<?x4x?xf32>
  return %o : tensor<?x4x?x64xf16>
}

// -----

func.func @bad_warps(%q: tensor<?x4x?x64xf16>, %s: f32) -> tensor<?x4x?x64xf16> {
  // expected-error @+1 {{cuda_core with block_m 64 and head dim 64 runs 4 warps, not 8}}
  %o, %lse = attn.attention %q, %q, %q scale %s {config = #attn.tile_config<family = "cuda_core", block_m = 64, block_n = 32, stages = 1, warps = 8>}
      : tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>
      -> tensor<?x4x?x64xf16>, tensor<?x4x?xf32>
  return %o : tensor<?x4x?x64xf16>
}

// -----

func.func @unknown_family(%q: tensor<?x4x?x64xf16>, %s: f32) -> tensor<?x4x?x64xf16> {
  // expected-error @+1 {{unknown kernel family 'tpu': expected one of wgmma_cluster, wgmma_persistent, wgmma, mma_sync, cuda_core}}
  %o, %lse = attn.attention %q, %q, %q scale %s {config = #attn.tile_config<family = "tpu", block_m = 64, block_n = 32, stages = 1, warps = 8>}
      : tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>
      -> tensor<?x4x?x64xf16>, tensor<?x4x?xf32>
  return %o : tensor<?x4x?x64xf16>
}

// -----

// A mask_mod is cloned into the kernel: its compare keeps each score.
// CHECK-LABEL: gpu.func @mods
// CHECK: arith.cmpi ne
// CHECK: gpu.return
func.func @mods(%q: tensor<?x4x?x64xf16>, %s: f32) -> tensor<?x4x?x64xf16> {
  %o, %lse = attn.attention %q, %q, %q scale %s {config = #attn.tile_config<family = "cuda_core", block_m = 32, block_n = 16, stages = 1, warps = 2>} mask_mod {
  ^bb0(%b: index, %h: index, %i: index, %j: index):
    %t = arith.cmpi ne, %i, %j : index
    attn.yield %t : i1
  } : tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>
      -> tensor<?x4x?x64xf16>, tensor<?x4x?xf32>
  return %o : tensor<?x4x?x64xf16>
}

// -----

// A function becomes one kernel: a second attention is refused before
// anything is erased (it used to crash the pass).
func.func @two(%q: tensor<?x4x?x64xf16>, %s: f32) -> tensor<?x4x?x64xf16> {
  %o, %lse = attn.attention %q, %q, %q scale %s {config = #attn.tile_config<family = "cuda_core", block_m = 32, block_n = 16, stages = 1, warps = 2>}
      : tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>
      -> tensor<?x4x?x64xf16>, tensor<?x4x?xf32>
  // expected-error @+1 {{is the second attn.attention in @two: a function becomes one kernel}}
  %o2, %lse2 = attn.attention %o, %q, %q scale %s {config = #attn.tile_config<family = "cuda_core", block_m = 32, block_n = 16, stages = 1, warps = 2>}
      : tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>
      -> tensor<?x4x?x64xf16>, tensor<?x4x?xf32>
  return %o2 : tensor<?x4x?x64xf16>
}

// -----

// Ops beside the attention would be lost in the kernel: refused by name.
func.func @beside(%q: tensor<?x4x?x64xf16>) -> tensor<?x4x?x64xf16> {
  // expected-error @+1 {{'arith.constant' op sits beside attn.attention in @beside}}
  %s = arith.constant 0.125 : f32
  %o, %lse = attn.attention %q, %q, %q scale %s {config = #attn.tile_config<family = "cuda_core", block_m = 32, block_n = 16, stages = 1, warps = 2>}
      : tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>
      -> tensor<?x4x?x64xf16>, tensor<?x4x?xf32>
  return %o : tensor<?x4x?x64xf16>
}

// -----

// Block-sparse: the block mask's four lists follow the ABI's parameters
// (a pointer and 3 or 4 strides each), and each tile's keys come from a
// list entry.
// CHECK-LABEL: gpu.func @block_sparse(
// CHECK-SAME: %{{.+}}: !llvm.ptr<1>, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: !llvm.ptr<1>, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: !llvm.ptr<1>, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: !llvm.ptr<1>, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64, %{{.+}}: i64)
// CHECK: llvm.load %{{.+}} {alignment = 4 : i64} : !llvm.ptr<1> -> i32
func.func @block_sparse(%q: tensor<?x4x?x64xf16>, %s: f32) -> tensor<?x4x?x64xf16> {
  %o, %lse = attn.attention %q, %q, %q scale %s {sparse_block = array<i64: 64, 64>, config = #attn.tile_config<family = "cuda_core", block_m = 32, block_n = 16, stages = 1, warps = 2>}
      : tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16> -> tensor<?x4x?x64xf16>, tensor<?x4x?xf32>
  return %o : tensor<?x4x?x64xf16>
}

// -----

// A tile that does not divide the mask's block is refused.
func.func @sparse_tile(%q: tensor<?x4x?x64xf16>, %s: f32) -> tensor<?x4x?x64xf16> {
  // expected-error @+1 {{tile 32 x 16 does not divide the sparse block 48 x 64}}
  %o, %lse = attn.attention %q, %q, %q scale %s {sparse_block = array<i64: 48, 64>, config = #attn.tile_config<family = "cuda_core", block_m = 32, block_n = 16, stages = 1, warps = 2>}
      : tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16>, tensor<?x4x?x64xf16> -> tensor<?x4x?x64xf16>, tensor<?x4x?xf32>
  return %o : tensor<?x4x?x64xf16>
}
