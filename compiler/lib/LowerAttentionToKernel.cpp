//===- LowerAttentionToKernel.cpp - attn.attention -> tiled gpu.func ------===//
// Why: the step from "what to compute" to "how the GPU computes it": the
// config's kernel template emits the kernel; this pass finds the
// descriptions, checks they can be lowered, and swaps them for kernels.
#include "flashjit/Compiler/ConfigAttr.h"
#include "flashjit/Compiler/Passes.h"
#include "flashjit/Templates/BlockMaskKernel.h"
#include "flashjit/Templates/KernelTemplate.h"
#include "flashjit/Templates/MmaSyncBackward.h"

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

/// A kernel is the whole function: its arguments are the launch's operands
/// (q, k, v, scale, then the captured tensors, in the op's order) and its
/// body is the attention and the return of its results. Anything else
/// would be lost when the function becomes the kernel.
LogicalResult checkKernelFunction(attn::AttentionOp op, func::FuncOp func) {
  for (Operation &other : func.getBody().front()) {
    if (&other == op.getOperation() || isa<func::ReturnOp>(other))
      continue;
    if (isa<attn::AttentionOp>(other))
      return other.emitOpError(
          "is the second attn.attention in @")
             << func.getSymName()
             << ": a function becomes one kernel, so it holds one "
                "attention; put each in a function of its own";
    return other.emitOpError("sits beside attn.attention in @")
           << func.getSymName()
           << ", which becomes a kernel whose operands come from the launch: "
              "pass the value as an argument of the function instead";
  }
  if (!func.getBody().hasOneBlock())
    return op.emitOpError("must be in a function of one block");
  for (Value operand : op->getOperands()) {
    auto arg = dyn_cast<BlockArgument>(operand);
    if (!arg || arg.getOwner() != &func.getBody().front())
      return op.emitOpError("takes its operands from the launch: each must "
                            "be an argument of @")
             << func.getSymName();
  }
  return success();
}

/// The op's score_mod, mask_mod and score_grad regions (null where
/// empty).
ModRegions modRegionsOf(attn::AttentionOp op) {
  ModRegions mods;
  if (!op.getScoreMod().empty())
    mods.scoreMod = &op.getScoreMod();
  if (!op.getMaskMod().empty())
    mods.maskMod = &op.getMaskMod();
  if (!op.getScoreGrad().empty())
    mods.scoreGrad = &op.getScoreGrad();
  return mods;
}

/// The kernel module's builder at its end, after checking that no kernel
/// is named `name` yet.
FailureOr<OpBuilder> kernelBuilder(attn::AttentionOp op, ModuleOp module,
                                   StringRef name) {
  gpu::GPUModuleOp kernels = getOrCreateKernelModule(module);
  if (kernels.lookupSymbol(name))
    return op.emitOpError("a kernel named '") << name << "' already exists";
  OpBuilder b(kernels.getBodyRegion());
  b.setInsertionPointToEnd(kernels.getBody());
  return b;
}

/// A template bug must be an error here, not a crash in the LLVM
/// translation later (the pipeline runs without per-pass verification).
LogicalResult verifyBuilt(attn::AttentionOp op, ModuleOp module,
                          StringRef name, const Twine &builder) {
  gpu::GPUModuleOp kernels = getOrCreateKernelModule(module);
  if (auto kernel = kernels.lookupSymbol(name); !kernel || failed(verify(kernel)))
    return op.emitOpError(builder)
           << " built an invalid kernel @" << name
           << " (a flashjit bug: please report it)";
  return success();
}

/// Builds the block-mask kernel of `op` (kernel=block-mask).
LogicalResult lowerToBlockMaskKernel(attn::AttentionOp op, ModuleOp module) {
  auto func = cast<func::FuncOp>(op->getParentOp());
  std::string name = (func.getSymName() + "_block_mask").str();
  FailureOr<OpBuilder> b = kernelBuilder(op, module, name);
  if (failed(b))
    return failure();
  if (auto err = buildBlockMaskKernel(*b, op.getLoc(), op.getSpec(), name,
                                      modRegionsOf(op)))
    return op.emitOpError(llvm::toString(std::move(err)));
  if (failed(verifyBuilt(op, module, name, "the block-mask builder")))
    return failure();
  func.erase();
  return success();
}

/// Builds the three backward kernels of `op` (kernel=backward) from its
/// "mma_sync_bwd" config, named after its function (MmaSyncBackward.h).
LogicalResult lowerToBackwardKernels(attn::AttentionOp op, ModuleOp module) {
  auto func = cast<func::FuncOp>(op->getParentOp());
  attn::TileConfigAttr configAttr = op.getConfigAttr();
  if (!configAttr)
    return op.emitOpError("has no tile config: the backward kernels need "
                          "`config #attn.tile_config<\"")
           << MmaSyncBackward::family() << "\", ...>`";
  TileConfig config = fromAttr(configAttr);
  AttentionSpec spec = op.getSpec();
  BackwardKernelNames names = BackwardKernelNames::of(func.getSymName());
  FailureOr<OpBuilder> b = kernelBuilder(op, module, names.main);
  if (failed(b))
    return failure();
  gpu::GPUModuleOp kernels = getOrCreateKernelModule(module);
  for (StringRef name : {StringRef(names.preprocess), StringRef(names.convert)})
    if (kernels.lookupSymbol(name))
      return op.emitOpError("a kernel named '") << name << "' already exists";
  ModRegions mods = modRegionsOf(op);
  if (mods.scoreMod && !mods.scoreGrad)
    return op.emitOpError("has a score_mod but no score_grad region: the "
                          "backward kernels need its derivative (run "
                          "attn-differentiate-score-mod first)");
  if (auto err = MmaSyncBackward::build(*b, op.getLoc(), spec, config,
                                        func.getSymName(), mods))
    return op.emitOpError(llvm::toString(std::move(err)));
  for (StringRef name : {StringRef(names.preprocess), StringRef(names.main),
                         StringRef(names.convert)})
    if (failed(verifyBuilt(op, module, name,
                           "the backward template (config " +
                               config.canonical() + ")")))
      return failure();
  func.erase();
  return success();
}

/// Lowers `op`, whose function has passed checkKernelFunction.
LogicalResult lowerOne(attn::AttentionOp op, ModuleOp module) {
  auto func = cast<func::FuncOp>(op->getParentOp());
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

  FailureOr<OpBuilder> b = kernelBuilder(op, module, name);
  if (failed(b))
    return failure();
  if (auto err =
          (*tmpl)->build(*b, op.getLoc(), spec, config, name, modRegionsOf(op)))
    return op.emitOpError(llvm::toString(std::move(err)));
  if (failed(verifyBuilt(op, module, name,
                         "the " + config.family + " template (config " +
                             config.canonical() + ")")))
    return failure();
  func.erase();
  return success();
}

struct LowerAttentionToKernelPass
    : impl::LowerAttentionToKernelBase<LowerAttentionToKernelPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    const bool blockMask = kernel == "block-mask";
    const bool backward = kernel == "backward";
    if (!blockMask && !backward && kernel != "forward") {
      module.emitError("attn-lower-to-kernel: unknown kernel '")
          << kernel << "': expected forward, block-mask or backward";
      return signalPassFailure();
    }
    // Collected first: lowering erases the op's function.
    SmallVector<attn::AttentionOp> ops;
    module.walk([&](attn::AttentionOp op) { ops.push_back(op); });
    // Every function is checked before any is erased, so a second
    // attention in a function is reported rather than freed under the walk.
    for (attn::AttentionOp op : ops) {
      auto func = dyn_cast<func::FuncOp>(op->getParentOp());
      if (!func) {
        op.emitOpError("must be directly inside a func.func whose name "
                       "becomes the kernel's name");
        return signalPassFailure();
      }
      if (failed(checkKernelFunction(op, func)))
        return signalPassFailure();
    }
    for (attn::AttentionOp op : ops)
      if (failed(blockMask  ? lowerToBlockMaskKernel(op, module)
                 : backward ? lowerToBackwardKernels(op, module)
                            : lowerOne(op, module)))
        return signalPassFailure();
  }
};
} // namespace
} // namespace flashjit
