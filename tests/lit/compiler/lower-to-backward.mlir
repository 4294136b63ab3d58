// RUN: flashjit-opt %s -split-input-file -attn-lower-to-kernel=kernel=backward -verify-diagnostics | FileCheck %s
// RUN: flashjit-opt %s -split-input-file --flashjit-pipeline="chip=sm_80 kernel=backward" -verify-diagnostics | FileCheck %s --check-prefix=PTX

// A causal GQA description (8 query heads over 2 KV heads) with a
// mma_sync_bwd config becomes the three kernels of its backward pass.
// Preprocess: O, dO, D, the dQ accumulator, 6 strides, seqlen_q; the lanes
// of a row sum their dO * O with xor shuffles.
// CHECK-LABEL: gpu.func @gqa_bwd_pre(%{{.+}}: !llvm.ptr<1>, %{{.+}}: !llvm.ptr<1>, %{{.+}}: !llvm.ptr<1>, %{{.+}}: !llvm.ptr<1>, {{(%[^:]+: i64, )+}}%{{.+}}: i32) kernel attributes {known_block_size = array<i32: 128, 1, 1>}
// CHECK: arith.mulf {{.+}} : vector<8xf32>
// CHECK: llvm.store {{.+}} : vector<8xf32>, !llvm.ptr<1>
// CHECK: gpu.shuffle xor
// Main: 9 pointers, 21 strides, two seqlens, scale * log2(e) and scale;
// four warps own 16 key rows each.
// CHECK-LABEL: gpu.func @gqa_bwd(%{{.+}}: !llvm.ptr<1>, {{(%[^:]+: !llvm.ptr<1>, )+}}{{(%[^:]+: i64, )+}}%{{.+}}: i32, %{{.+}}: i32, %{{.+}}: f32, %{{.+}}: f32) kernel attributes {known_block_size = array<i32: 128, 1, 1>}
// K and V load once, by cp.async.
// CHECK: nvvm.cp.async.shared.global
// One loop over the steps (the 4 query heads of the group x the visible
// query blocks) carries the dK and dV accumulators (2 x 16 f32 per thread
// at head dim 64).
// CHECK: scf.for %{{.+}} = %{{.+}} to %{{.+}} step %{{.+}} iter_args({{.+}}) -> ({{(f32, )+}}f32)
// CHECK: gpu.barrier
// Q and dO tiles by 16-byte cp.async, LSE and D rows by 4-byte ones.
// CHECK: nvvm.cp.async.shared.global {{.+}}, 16, cache =  cg
// CHECK: nvvm.cp.async.shared.global {{.+}}, 4, cache =  ca
// S^T = K Q^T by ldmatrix and mma.sync.
// CHECK: nvvm.ldmatrix
// CHECK: nvvm.mma.sync
// Causal and tail mask only where the tile needs it.
// CHECK: scf.if %{{.+}} -> ({{.+}})
// CHECK: arith.select
// P^T = 2^(S^T c - LSE log2 e).
// CHECK: llvm.intr.fma
// CHECK: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f"
// dS^T = P^T (dP^T - D).
// CHECK: arith.subf
// dS^T goes to shared memory, then dQ = dS K is added with f32 atomics.
// CHECK: gpu.barrier
// CHECK: llvm.atomicrmw fadd {{.+}} monotonic : !llvm.ptr<1>, f32
// The epilogue stages dK (scaled) and dV in shared memory, then stores
// 16-byte chunks.
// CHECK: llvm.store {{.+}} : i32, !llvm.ptr<3>
// CHECK: gpu.barrier
// CHECK: llvm.store {{.+}} : vector<4xi32>, !llvm.ptr<1>
// Convert: dQ = scale * accumulator, rounded, 16-byte stores.
// CHECK-LABEL: gpu.func @gqa_bwd_dq(%{{.+}}: !llvm.ptr<1>, %{{.+}}: !llvm.ptr<1>, {{(%[^:]+: i64, )+}}%{{.+}}: i32, %{{.+}}: f32) kernel attributes {known_block_size = array<i32: 128, 1, 1>}
// CHECK: arith.truncf {{.+}} : vector<8xf32> to vector<8xbf16>
// CHECK-NOT: attn.attention
// PTX: .entry gqa_bwd_pre(
// PTX: .entry gqa_bwd(
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PTX: ex2.approx.ftz.f32
// PTX: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// PTX: atom.global.add.f32
// PTX: .entry gqa_bwd_dq(
func.func @gqa(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>,
               %v: tensor<?x2x?x64xbf16>, %s: f32)
    -> (tensor<?x8x?x64xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v scale %s causal {config = #attn.tile_config<family = "mma_sync_bwd", block_m = 64, block_n = 64, stages = 1, warps = 4>} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>, tensor<?x8x?xf32>
  return %o, %lse : tensor<?x8x?x64xbf16>, tensor<?x8x?xf32>
}

// -----

// The backward kernels need their own config family.
func.func @forward_config(%q: tensor<?x2x?x64xf16>, %s: f32)
    -> (tensor<?x2x?x64xf16>, tensor<?x2x?xf32>) {
  // expected-error @+1 {{mma_sync_bwd: config family 'mma_sync' given to it}}
  %o, %lse = attn.attention %q, %q, %q scale %s {config = #attn.tile_config<family = "mma_sync", block_m = 64, block_n = 64, stages = 2, warps = 4>} : tensor<?x2x?x64xf16>, tensor<?x2x?x64xf16>, tensor<?x2x?x64xf16> -> tensor<?x2x?x64xf16>, tensor<?x2x?xf32>
  return %o, %lse : tensor<?x2x?x64xf16>, tensor<?x2x?xf32>
}

// -----

// Without a config there is nothing to build from.
func.func @no_config(%q: tensor<?x2x?x64xf16>, %s: f32)
    -> (tensor<?x2x?x64xf16>, tensor<?x2x?xf32>) {
  // expected-error @+1 {{has no tile config}}
  %o, %lse = attn.attention %q, %q, %q scale %s : tensor<?x2x?x64xf16>, tensor<?x2x?x64xf16>, tensor<?x2x?x64xf16> -> tensor<?x2x?x64xf16>, tensor<?x2x?xf32>
  return %o, %lse : tensor<?x2x?x64xf16>, tensor<?x2x?xf32>
}
