//===- EmitPtx.cpp - gpu.module to PTX with flashjit's LLVM pipeline ------===//
// Why: the whole-process compile of a kernel is mostly LLVM, and MLIR's
// NVVM serializer runs LLVM's -O3 with the SLP vectorizer, which took two
// thirds of the optimisation time on the unrolled kernels and changed no
// PTX. This pass is that serializer (MLIR's SerializeGPUModuleBase: the
// translation, libdevice, the target machine) with its own -O3 pipeline
// (Passes.td).
#include "flashjit/Compiler/Passes.h"

#include "mlir/Dialect/GPU/IR/CompilationInterfaces.h"
#include "mlir/Target/LLVM/NVVM/Utils.h"
#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Target/TargetMachine.h"

using namespace mlir;

namespace flashjit {
#define GEN_PASS_DEF_EMITPTX
#include "flashjit/Compiler/Passes.h.inc"

namespace {
/// MLIR's NVVM serialization to PTX text, LLVM's default per-module
/// pipeline at the target's level with loop unrolling, interleaving and
/// vectorization as MLIR sets them, and no SLP vectorizer.
class PtxSerializer : public NVVM::SerializeGPUModuleBase {
public:
  using SerializeGPUModuleBase::SerializeGPUModuleBase;

protected:
  LogicalResult optimizeModule(llvm::Module &llvmModule,
                               int level) override {
    const llvm::OptimizationLevel levels[] = {
        llvm::OptimizationLevel::O0, llvm::OptimizationLevel::O1,
        llvm::OptimizationLevel::O2, llvm::OptimizationLevel::O3};
    if (level < 0 || level > 3)
      return getOperation().emitError()
             << "LLVM optimisation level " << level << " is not 0-3";
    FailureOr<llvm::TargetMachine *> machine = targetMachine();
    if (failed(machine))
      return failure();
    (*machine)->setOptLevel(static_cast<llvm::CodeGenOptLevel>(level));

    llvm::LoopAnalysisManager loops;
    llvm::FunctionAnalysisManager functions;
    llvm::CGSCCAnalysisManager sccs;
    llvm::ModuleAnalysisManager modules;
    llvm::PipelineTuningOptions tuning;
    tuning.LoopUnrolling = true;
    tuning.LoopInterleaving = true;
    tuning.LoopVectorization = true;
    tuning.SLPVectorization = false;
    llvm::PassBuilder builder(*machine, tuning);
    builder.registerModuleAnalyses(modules);
    builder.registerCGSCCAnalyses(sccs);
    builder.registerFunctionAnalyses(functions);
    builder.registerLoopAnalyses(loops);
    builder.crossRegisterProxies(loops, functions, sccs, modules);
    llvm::ModulePassManager pipeline =
        builder.buildPerModuleDefaultPipeline(levels[level]);
    pipeline.run(llvmModule, modules);
    return success();
  }

  FailureOr<SmallVector<char, 0>>
  moduleToObject(llvm::Module &llvmModule) override {
    FailureOr<llvm::TargetMachine *> machine = targetMachine();
    if (failed(machine))
      return failure();
    FailureOr<SmallString<0>> ptx = translateModuleToISA(
        llvmModule, **machine, [&] { return getOperation().emitError(); });
    if (failed(ptx))
      return failure();
    return SmallVector<char, 0>(ptx->begin(), ptx->end());
  }

private:
  /// The serializer's target machine (made once), or an error that names
  /// the chip.
  FailureOr<llvm::TargetMachine *> targetMachine() {
    FailureOr<llvm::TargetMachine *> machine = getOrCreateTargetMachine();
    if (failed(machine))
      getOperation().emitError() << "no NVPTX target machine for " << chip;
    return machine;
  }
};

struct EmitPtx : impl::EmitPtxBase<EmitPtx> {
  void runOnOperation() override {
    NVVM::SerializeGPUModuleBase::init();
    SmallVector<gpu::GPUModuleOp> kernels(
        getOperation().getOps<gpu::GPUModuleOp>());
    for (gpu::GPUModuleOp kernelModule : kernels) {
      ArrayAttr targets = kernelModule.getTargetsAttr();
      auto target = targets && targets.size() == 1
                        ? dyn_cast<NVVM::NVVMTargetAttr>(targets[0])
                        : NVVM::NVVMTargetAttr();
      if (!target) {
        kernelModule.emitError("expected one #nvvm.target on the module");
        return signalPassFailure();
      }
      PtxSerializer serializer(*kernelModule, target);
      std::optional<SmallVector<char, 0>> ptx = serializer.run();
      if (!ptx) {
        kernelModule.emitError("compiling the module to PTX failed");
        return signalPassFailure();
      }
      OpBuilder b(kernelModule);
      Attribute object = gpu::ObjectAttr::get(
          target, gpu::CompilationTarget::Assembly,
          b.getStringAttr(StringRef(ptx->data(), ptx->size())));
      gpu::BinaryOp::create(b, kernelModule.getLoc(), kernelModule.getName(),
                            /*offloadingHandler=*/nullptr,
                            b.getArrayAttr({object}));
      kernelModule.erase();
    }
  }
};
} // namespace

} // namespace flashjit
