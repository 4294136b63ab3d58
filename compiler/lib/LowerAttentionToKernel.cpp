//===- LowerAttentionToKernel.cpp - attn.attention -> tiled gpu.func ------===//
// Why: the step from "what to compute" to "how the GPU computes it": the
// config's kernel template emits the kernel; this pass finds the
// descriptions, checks they can be lowered, and swaps them for kernels.
#include "flashjit/Compiler/ConfigAttr.h"
#include "flashjit/Compiler/Passes.h"
#include "flashjit/Templates/KernelTemplate.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;

namespace flashjit {
#define GEN_PASS_DEF_LOWERATTENTIONTOKERNEL
#include "flashjit/Compiler/Passes.h.inc"

namespace {
constexpr llvm::StringLiteral kKernelModuleName = "flashjit_kernels";

/// The module's gpu.module for flashjit kernels, created on first use.
gpu::GPUModuleOp getOrCreateKernelModule(ModuleOp module) {
  if (auto existing = module.lookupSymbol<gpu::GPUModuleOp>(kKernelModuleName))
    return existing;
  OpBuilder b(module.getBodyRegion());
  b.setInsertionPointToEnd(module.getBody());
  module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                  b.getUnitAttr());
  return gpu::GPUModuleOp::create(b, module.getLoc(), kKernelModuleName);
}

LogicalResult lowerOne(attn::AttentionOp op, ModuleOp module) {
  auto func = dyn_cast<func::FuncOp>(op->getParentOp());
  if (!func)
    return op.emitOpError("must be directly inside a func.func whose name "
                          "becomes the kernel's name");
  if (!op.getScoreMod().empty() || !op.getMaskMod().empty())
    return op.emitOpError(
        "score_mod and mask_mod regions are not lowered yet; only causal "
        "masking is supported by the current kernel templates");
  attn::TileConfigAttr configAttr = op.getConfigAttr();
  if (!configAttr)
    return op.emitOpError(
        "has no tile config: run attn-attach-config first or write "
        "`config #attn.tile_config<...>`");
  TileConfig config = fromAttr(configAttr);
  AttentionSpec spec = op.getSpec();
  auto tmpl = findTemplate(config.family);
  if (!tmpl)
    return op.emitOpError(llvm::toString(tmpl.takeError()));
  std::string name = func.getSymName().str();

  gpu::GPUModuleOp kernels = getOrCreateKernelModule(module);
  if (kernels.lookupSymbol(name))
    return op.emitOpError("a kernel named '") << name << "' already exists";
  OpBuilder b(kernels.getBodyRegion());
  b.setInsertionPointToEnd(kernels.getBody());
  if (auto err = (*tmpl)->build(b, op.getLoc(), spec, config, name))
    return op.emitOpError(llvm::toString(std::move(err)));
  // A template bug must be an error here, not a crash in the LLVM
  // translation later (the pipeline runs without per-pass verification).
  if (auto kernel = kernels.lookupSymbol(name); !kernel || failed(verify(kernel)))
    return op.emitOpError("the ")
           << config.family << " template built an invalid kernel for "
           << config.canonical() << " (a flashjit bug: please report it)";
  func.erase();
  return success();
}

struct LowerAttentionToKernelPass
    : impl::LowerAttentionToKernelBase<LowerAttentionToKernelPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<attn::AttentionOp> ops;
    module.walk([&](attn::AttentionOp op) { ops.push_back(op); });
    for (attn::AttentionOp op : ops)
      if (failed(lowerOne(op, module)))
        return signalPassFailure();
  }
};
} // namespace
} // namespace flashjit
