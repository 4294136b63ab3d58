//===- Passes.td - flashjit's own passes --------------------*- tablegen -*-===//
// Why: passes are declared here with typed options and their dependent
// dialects; tablegen writes the boilerplate and the registration.
#ifndef FLASHJIT_COMPILER_PASSES
#define FLASHJIT_COMPILER_PASSES

include "mlir/Pass/PassBase.td"

def AttachTileConfig : Pass<"attn-attach-config", "mlir::ModuleOp"> {
  let summary = "Attach the autotuner's tile config to attn.attention ops";
  let description = [{
    Every `attn.attention` without a `config` gets the tile configuration
    the autotuner's heuristic picks for the target chip and device model.
    Ops that already carry one keep it. Fails with a diagnostic when no
    kernel template supports the attention on the chip.
  }];
  let options = [
    Option<"chip", "chip", "std::string", /*default=*/"\"sm_90a\"",
           "Target chip (sm_80, sm_86, sm_89, sm_90, sm_90a)">,
    Option<"device", "device", "std::string", /*default=*/"\"\"",
           "Known GPU whose SRAM and SM count drive the choice (e.g. h100, "
           "a100, t4); empty: the reference GPU of the chip">,
  ];
  let dependentDialects = ["::flashjit::attn::AttnDialect"];
}

def LowerAttentionToKernel
    : Pass<"attn-lower-to-kernel", "mlir::ModuleOp"> {
  let summary = "Lower attn.attention descriptions to tiled GPU kernels";
  let description = [{
    Replaces each `func.func` whose body is an `attn.attention` (with a
    `config`) by a `gpu.func` kernel of the same name inside the module's
    `gpu.module @flashjit_kernels`, built by the kernel template the config
    names: a loop over K/V tiles with online softmax (running max and sum,
    accumulator rescaled once per tile) that writes O and the log-sum-exp.
    The kernel's parameters follow templates/KernelABI.h.

    With `kernel=block-mask`, each function becomes instead the kernel that
    builds the block mask of its block-sparse attention on the GPU
    (templates/BlockMaskKernel.h), named `<function>_block_mask`; it needs
    no tile config.

    With `kernel=backward`, each function becomes the three kernels of its
    backward pass (templates/MmaSyncBackward.h), `<function>_bwd_pre`,
    `<function>_bwd` and `<function>_bwd_dq`, built from its
    `mma_sync_bwd` or `wgmma_bwd` tile config; a `score_mod` needs its
    `score_grad` region (attn-differentiate-score-mod).
  }];
  let options = [
    Option<"kernel", "kernel", "std::string", /*default=*/"\"forward\"",
           "Which kernels to build: forward, block-mask or backward">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::gpu::GPUDialect",
    "::mlir::LLVM::LLVMDialect", "::mlir::memref::MemRefDialect",
    "::mlir::NVVM::NVVMDialect", "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect"];
}

def DifferentiateScoreMod
    : Pass<"attn-differentiate-score-mod", "mlir::ModuleOp"> {
  let summary = "Derive the score_grad region of each score_mod";
  let description = [{
    The backward pass needs the derivative of each score_mod with respect
    to its score. For every `attn.attention` with a `score_mod` and no
    `score_grad`, this writes `score_grad`: the score_mod's ops, each
    followed by the ops of its derivative (forward mode), yielding the
    modified score and d(score_mod)/d(score). An op on the score's path
    that has no derivative rule (arith.remf, a bitcast) fails the pass
    with a diagnostic on that op. A score_grad region already present is
    kept.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def MarkGridConstantParams
    : Pass<"attn-mark-grid-constant-params", "mlir::LLVM::LLVMFuncOp"> {
  let summary = "Pass the tensor-map parameters of kernels by value";
  let description = [{
    A template that loads with TMA lists the positions of its tensor-map
    parameters in the kernel attribute `flashjit.tensor_map_args` (the
    lowering of gpu.func keeps function attributes but drops byval and
    nvvm.grid_constant from arguments, and nvvm.grid_constant may only be
    set on an llvm.func kernel). This pass, run after the lowering to the
    LLVM dialect, makes each listed `!llvm.ptr` argument a 128-byte byval,
    64-byte aligned grid constant: PTX then declares `.param .align 64 .b8
    [128]` and takes its address with `cvta.param`, as cp.async.bulk.tensor
    wants, and the runtime passes the CUtensorMap by value.
  }];
  let dependentDialects = ["::mlir::NVVM::NVVMDialect"];
}

def EmitPtx : Pass<"attn-emit-ptx", "mlir::ModuleOp"> {
  let summary = "Compile each gpu.module to PTX, held in a gpu.binary";
  let description = [{
    What `gpu-module-to-binary{format=isa}` does for an `#nvvm.target`
    module (translation to LLVM IR, libdevice linked where needed, the
    LLVM pipeline at the target's level, the NVPTX back end), with the SLP
    vectorizer left out of the pipeline: on the unrolled kernels it spent
    two thirds of LLVM's optimisation time and left the PTX unchanged (the
    NVPTX target has no vectors of f32 to build). The module is replaced
    by a `gpu.binary` of the same name holding one assembly object.
  }];
  let dependentDialects = ["::mlir::gpu::GPUDialect"];
}

#endif
