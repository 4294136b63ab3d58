// RUN: flashjit-opt %s -attn-lower-to-kernel=kernel=backward | FileCheck %s
// RUN: flashjit-opt %s --flashjit-pipeline="chip=sm_80 kernel=backward" | FileCheck %s --check-prefix=PTX

// A config of family mma_sync_bwd_det builds the deterministic backward:
// the same three kernels, where the blocks adding into one query block of
// the dQ accumulator take turns (BackwardDqTurns.cpp).
// Preprocess takes the turn counters last and zeroes one per query block.
// CHECK: gpu.func @gqa_bwd_pre({{(%[^:]+: !llvm.ptr<1>, )+}}{{(%[^:]+: i64, )+}}%{{.+}}: i32, %[[TURNS:.+]]: !llvm.ptr<1>)
// CHECK: %[[COUNTER:.+]] = llvm.getelementptr %[[TURNS]][%{{.+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, i32
// CHECK: llvm.store %{{.+}}, %[[COUNTER]] {{.+}} : i32, !llvm.ptr<1>
// Main takes them last too, and walks the key blocks highest first along
// blockIdx.x.
// CHECK: gpu.func @gqa_bwd({{(%[^:]+: !llvm.ptr<1>, )+}}{{(%[^:]+: i64, )+}}%{{.+}}: i32, %{{.+}}: i32, %{{.+}}: f32, %{{.+}}: f32, %[[MAINTURNS:.+]]: !llvm.ptr<1>)
// CHECK: %[[X:.+]] = gpu.block_id x
// CHECK: %[[XI:.+]] = arith.index_cast{{.*}} %[[X]]
// CHECK: arith.subi %{{.+}}, %[[XI]] : i64
// Thread 0 spins on an acquire load of the counter, then a barrier; the
// f32 atomics add the block's dQ tile; a barrier, and thread 0 passes the
// turn with a fence and an increment.
// CHECK: %[[SLOT:.+]] = llvm.getelementptr %[[MAINTURNS]][%{{.+}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, i32
// CHECK: scf.while
// CHECK: llvm.inline_asm has_side_effects {{.+}}"ld.acquire.gpu.global.b32 $0, [$1];", "=r,l" %[[SLOT]]
// CHECK: scf.condition
// CHECK: gpu.barrier
// CHECK: llvm.atomicrmw fadd {{.+}} monotonic : !llvm.ptr<1>, f32
// CHECK: gpu.barrier
// CHECK: llvm.inline_asm has_side_effects {{.+}}"fence.acq_rel.gpu;\0A\09red.relaxed.gpu.global.add.s32 [$0], 1;", "l" %[[SLOT]]
// CHECK-LABEL: gpu.func @gqa_bwd_dq(
// PTX: .entry gqa_bwd_pre(
// PTX: .entry gqa_bwd(
// PTX-DAG: ld.acquire.gpu.global.b32
// PTX-DAG: atom.global.add.f32
// PTX-DAG: fence.acq_rel.gpu;\0A\09red.relaxed.gpu.global.add.s32
// PTX: .entry gqa_bwd_dq(
func.func @gqa(%q: tensor<?x8x?x64xbf16>, %k: tensor<?x2x?x64xbf16>,
               %v: tensor<?x2x?x64xbf16>, %s: f32)
    -> (tensor<?x8x?x64xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v scale %s causal {config = #attn.tile_config<family = "mma_sync_bwd_det", block_m = 64, block_n = 64, stages = 1, warps = 4>} : tensor<?x8x?x64xbf16>, tensor<?x2x?x64xbf16>, tensor<?x2x?x64xbf16> -> tensor<?x8x?x64xbf16>, tensor<?x8x?xf32>
  return %o, %lse : tensor<?x8x?x64xbf16>, tensor<?x8x?xf32>
}
