//===- Pipeline.cpp - the pass pipeline from attn to PTX ------------------===//
// Why: the order of passes is decided here, once; every user (flashjit-opt,
// the runtime, the CLI) gets it from buildAttentionPipeline.
#include "flashjit/Compiler/Pipeline.h"
#include "flashjit/Compiler/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace flashjit {

/// The canonicalizer for the unrolled kernels: bottom-up, and one sweep
/// of the worklist (ops a pattern creates are still visited in it) instead
/// of a second sweep that only confirms nothing changes: the PTX of every
/// kernel family is the same, the pass takes about half the time.
static GreedyRewriteConfig bottomUpCanonicalization() {
  GreedyRewriteConfig config;
  config.setUseTopDownTraversal(false);
  config.setMaxIterations(1);
  return config;
}

void buildAttentionPipeline(OpPassManager &pm, const Target &target,
                            llvm::StringRef device, Stage stopAfter,
                            KernelKind kind) {
  // 1. Description: attach the tile config chosen for the target (the
  //    block-mask kernel has no tile config; the backward's comes with its
  //    description).
  if (kind == KernelKind::Forward) {
    AttachTileConfigOptions configOptions;
    configOptions.chip = target.chip;
    configOptions.device = device.str();
    pm.addPass(createAttachTileConfig(configOptions));
  }
  // The backward of a score_mod needs its derivative.
  if (kind == KernelKind::Backward)
    pm.addPass(createDifferentiateScoreMod());
  if (stopAfter == Stage::Description)
    return;

  // 2. Kernel: the template emits a tiled gpu.func per description. The
  //    kernels are unrolled straight-line code of many thousand ops; the
  //    canonicalizer walks them bottom-up, because its default top-down
  //    walk takes many times as long here for the same result.
  //    Decode kernels arrive already built (compileDecodeKernel).
  if (kind != KernelKind::Decode) {
    LowerAttentionToKernelOptions lowerOptions;
    lowerOptions.kernel = kind == KernelKind::BlockMask  ? "block-mask"
                          : kind == KernelKind::Backward ? "backward"
                                                         : "forward";
    pm.addPass(createLowerAttentionToKernel(lowerOptions));
  }
  pm.addPass(createCanonicalizerPass(bottomUpCanonicalization()));
  pm.addPass(createCSEPass());
  if (stopAfter == Stage::Kernel)
    return;

  // 3. Structured control flow to branches; the NVVM target (chip, PTX ISA
  //    version, LLVM -O3) attached to the gpu.module.
  pm.addPass(createSCFToControlFlowPass());
  GpuNVVMAttachTargetOptions targetOptions;
  targetOptions.chip = target.chip;
  targetOptions.features = target.ptxFeatures();
  targetOptions.optLevel = 3;
  pm.addPass(createGpuNVVMAttachTarget(targetOptions));

  // 4. Inside the gpu.module: everything to the LLVM and NVVM dialects.
  ConvertGpuOpsToNVVMOpsOptions nvvmOptions;
  nvvmOptions.indexBitwidth = 64;
  OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
  kernels.addPass(createConvertGpuOpsToNVVMOps(nvvmOptions));
  // NVVM ops without an LLVM intrinsic (mbarrier.try_wait.parity) become
  // inline PTX. No canonicalizer or CSE after them: LLVM's -O3 does that
  // work, and the PTX of every kernel family came out the same without.
  kernels.addPass(createConvertNVVMToLLVMPass());
  kernels.addPass(createReconcileUnrealizedCastsPass());
  kernels.addNestedPass<LLVM::LLVMFuncOp>(createMarkGridConstantParams());
  if (stopAfter == Stage::LLVM)
    return;

  // 5. PTX through the NVPTX back end, held in a gpu.binary (EmitPtx:
  //    MLIR's serializer without the SLP vectorizer).
  pm.addPass(createEmitPtx());
}

void registerAttentionPipeline() {
  // Registered by hand (not PassPipelineRegistration) so that a bad chip or
  // stage is reported as an error instead of reaching LLVM.
  registerPassPipeline(
      "flashjit-pipeline",
      "Lower attn.attention to PTX (chip=..., device=..., "
      "stop-after=attn|kernel|llvm|ptx, kernel=forward|block-mask|backward)",
      [](OpPassManager &pm, StringRef optionText,
         function_ref<LogicalResult(const Twine &)> errorHandler) {
        auto options = PipelineOptions::createFromString(optionText);
        if (!options)
          return errorHandler("bad flashjit-pipeline options '" + optionText +
                              "'");
        auto target = Target::parse(options->chip);
        if (!target)
          return errorHandler(llvm::toString(target.takeError()));
        auto stage = parseStage(options->stopAfter);
        if (!stage)
          return errorHandler(llvm::toString(stage.takeError()));
        KernelKind kind = KernelKind::Forward;
        if (options->kernel == "block-mask")
          kind = KernelKind::BlockMask;
        else if (options->kernel == "backward")
          kind = KernelKind::Backward;
        else if (options->kernel != "forward")
          return errorHandler("unknown kernel '" + options->kernel +
                              "': expected forward, block-mask or backward");
        buildAttentionPipeline(pm, *target, options->device, *stage, kind);
        return success();
      },
      [](function_ref<void(const detail::PassOptions &)> optHandler) {
        optHandler(PipelineOptions());
      });
}

} // namespace flashjit
