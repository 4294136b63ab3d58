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

// ATTN: attn.attention {{.+}} causal {config = #attn.tile_config<family = "mma_sync"

// KERNEL: gpu.module @flashjit_kernels
// KERNEL: gpu.func @attn_causal
// KERNEL: scf.for
// KERNEL-NOT: attn.attention

// LLVM: gpu.module @flashjit_kernels [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx80">]
// LLVM: llvm.func @attn_causal
// LLVM-SAME: nvvm.kernel
// LLVM: nvvm.read.ptx.sreg.tid.x
// LLVM: nvvm.barrier
// LLVM: nvvm.shfl.sync bfly

// PTX: gpu.binary @flashjit_kernels
// PTX-SAME: .version 8.0
// PTX-SAME: .target sm_90a
// PTX-SAME: .entry attn_causal(
// PTX-SAME: .maxntid {{[0-9]+}}, 1, 1
// PTX-SAME: cp.async.cg.shared.global
// PTX-SAME: cp.async.wait_group
// PTX-SAME: bar.sync
// PTX-SAME: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// PTX-SAME: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PTX-SAME: shfl.sync.bfly.b32
// PTX-SAME: ex2.approx.ftz.f32
// PTX-SAME: vote.sync.any.pred

// Dynamic shared memory is one external array per kernel.
// SMEM: .extern .shared .align 128 .b8 attn_causal_smem[]
// SMEM-SAME: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16

// The LSE epilogue (its place in the PTX is the back end's choice).
// LG2: lg2.approx.f32

// PTX80: .version 7.0
// PTX80-SAME: .target sm_80
// PTX80-SAME: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32

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
