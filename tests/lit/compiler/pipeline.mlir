// The whole pipeline, stage by stage, through flashjit-opt.
// RUN: flashjit-opt %s --pass-pipeline="builtin.module(flashjit-pipeline{chip=sm_90a stop-after=attn})" | FileCheck %s --check-prefix=ATTN
// RUN: flashjit-opt %s --pass-pipeline="builtin.module(flashjit-pipeline{chip=sm_90a stop-after=kernel})" | FileCheck %s --check-prefix=KERNEL
// RUN: flashjit-opt %s --pass-pipeline="builtin.module(flashjit-pipeline{chip=sm_90a stop-after=llvm})" | FileCheck %s --check-prefix=LLVM
// RUN: flashjit-opt %s --pass-pipeline="builtin.module(flashjit-pipeline{chip=sm_90a})" | FileCheck %s --check-prefix=PTX
// RUN: flashjit-opt %s --pass-pipeline="builtin.module(flashjit-pipeline{chip=sm_80})" | FileCheck %s --check-prefix=PTX80
// RUN: flashjit-opt %s --pass-pipeline="builtin.module(flashjit-pipeline{chip=sm_90a})" | FileCheck %s --check-prefix=SMEM
// RUN: flashjit-opt %s --pass-pipeline="builtin.module(flashjit-pipeline{chip=sm_90a})" | FileCheck %s --check-prefix=LG2
// RUN: not flashjit-opt %s --pass-pipeline="builtin.module(flashjit-pipeline{chip=sm_75})" 2>&1 | FileCheck %s --check-prefix=BADCHIP
// RUN: not flashjit-opt %s --pass-pipeline="builtin.module(flashjit-pipeline{stop-after=cubin})" 2>&1 | FileCheck %s --check-prefix=BADSTAGE

// On sm_90a head dim 128 takes the wgmma template, causal its persistent
// grid.
// ATTN: attn.attention {{.+}} causal {config = #attn.tile_config<family = "wgmma_persistent"

// KERNEL: gpu.module @flashjit_kernels
// KERNEL: gpu.func @attn_causal
// KERNEL-SAME: flashjit.tensor_map_args
// KERNEL: scf.for
// KERNEL-NOT: attn.attention

// The tensor-map arguments became by-value grid constants.
// LLVM: gpu.module @flashjit_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx80">]
// LLVM: llvm.func @attn_causal
// LLVM-SAME: llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant
// LLVM-SAME: nvvm.kernel
// LLVM: nvvm.read.ptx.sreg.tid.x
// LLVM: nvvm.barrier
// LLVM: nvvm.shfl.sync bfly

// PTX: gpu.binary @flashjit_kernels
// PTX-SAME: .version 8.0
// PTX-SAME: .target sm_90a
// PTX-SAME: .entry attn_causal(
// PTX-SAME: .param .align 64 .b8 attn_causal_param_25[128]
// PTX-SAME: .maxntid 384, 1, 1
// PTX-SAME: .minnctapersm 1
// PTX-SAME: cvta.param.u64
// PTX-SAME: mbarrier.init.shared.b64
// PTX-SAME: fence.mbarrier_init
// PTX-SAME: bar.sync
// The rest in the back end's order.
// PTX-DAG: setmaxnreg.inc.sync.aligned.u32 \09232
// PTX-DAG: setmaxnreg.dec.sync.aligned.u32 \0940
// PTX-DAG: mbarrier.try_wait.parity
// S = Q K^T with both operands in shared memory (K-major), O += P V with P
// in registers and V transposed (MN-major).
// PTX-DAG: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// Every k step has its own descriptor registers.
// PTX-DAG: fj_da0, fj_db0, fj_zero, 1, 1, 0, 0;
// PTX-DAG: fj_da1, fj_db1, fj_one, 1, 1, 0, 0;
// PTX-DAG: fj_db0, fj_one, 1, 1, 1;
// PTX-DAG: fj_db1, fj_one, 1, 1, 1;
// The warpgroup index is broadcast, so ptxas sees it warp-uniform.
// PTX-DAG: shfl.sync.idx.b32
// PTX-DAG: wgmma.wait_group.sync.aligned 0;
// PTX-DAG: wgmma.wait_group.sync.aligned 1;
// PTX-DAG: shfl.sync.bfly.b32
// PTX-DAG: ex2.approx.ftz.f32
// PTX-DAG: vote.sync.any.pred
// Barriers and TMA destinations by 32-bit shared address.
// PTX-DAG: mbarrier.arrive.shared::cta.b64 _, [%r{{[0-9]+}}];
// PTX-DAG: mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r{{[0-9]+}}],
// The persistent grid: blocks take tiles from the launch's counter.
// PTX-DAG: atom.global.add.u32
// PTX-DAG: cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// O leaves through shared memory: a TMA store once the generic-proxy writes
// are fenced, waited on (read) before the block ends.
// PTX-DAG: fence.proxy.async.shared::cta
// PTX-DAG: cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group
// PTX-DAG: cp.async.bulk.wait_group.read \090;

// Dynamic shared memory is one external array per kernel, aligned for the
// 128-byte swizzle.
// SMEM: .extern .shared .align 1024 .b8 attn_causal_smem[]

// The LSE epilogue (its place in the PTX is the back end's choice).
// LG2: lg2.approx.f32

// sm_80 takes the mma_sync template.
// PTX80: .version 7.0
// PTX80-SAME: .target sm_80
// PTX80-SAME: .extern .shared .align 128 .b8 attn_causal_smem[]
// PTX80-DAG: cp.async.cg.shared.global
// PTX80-DAG: cp.async.wait_group
// PTX80-DAG: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// PTX80-DAG: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// PTX80-DAG: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PTX80-DAG: shfl.sync.bfly.b32
// PTX80-DAG: ex2.approx.ftz.f32
// PTX80-DAG: vote.sync.any.pred

// BADCHIP: unknown arch 'sm_75': expected one of sm_80, sm_86, sm_89, sm_90, sm_90a
// BADSTAGE: unknown stage 'cubin': expected attn, kernel, llvm or ptx

func.func @attn_causal(%q: tensor<?x16x?x128xbf16>, %k: tensor<?x16x?x128xbf16>,
                       %v: tensor<?x16x?x128xbf16>, %s: f32)
    -> (tensor<?x16x?x128xbf16>, tensor<?x16x?xf32>) {
  %o, %lse = attn.attention %q, %k, %v scale %s causal
      : tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16>, tensor<?x16x?x128xbf16>
      -> tensor<?x16x?x128xbf16>, tensor<?x16x?xf32>
  return %o, %lse : tensor<?x16x?x128xbf16>, tensor<?x16x?xf32>
}
