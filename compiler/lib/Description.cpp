//===- Description.cpp - build the attn IR of a spec ----------------------===//
// Why: the pipeline's input is IR; programs give an AttentionSpec.
#include "flashjit/Compiler/Description.h"
#include "flashjit/Compiler/ConfigAttr.h"
#include "flashjit/Dialect/AttnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

using namespace mlir;

namespace flashjit {

OwningOpRef<ModuleOp> buildDescription(MLIRContext &ctx,
                                       const AttentionSpec &spec,
                                       const std::optional<TileConfig> &config) {
  ctx.loadDialect<attn::AttnDialect, func::FuncDialect, arith::ArithDialect>();
  OpBuilder b(&ctx);
  Location loc = NameLoc::get(b.getStringAttr(spec.kernelName()));
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());

  const int64_t dyn = ShapedType::kDynamic;
  Type elt = spec.dtype == DType::BF16 ? Type(b.getBF16Type())
                                       : Type(b.getF16Type());
  auto qType = RankedTensorType::get({dyn, spec.numHeads, dyn, spec.headDim}, elt);
  auto kvType =
      RankedTensorType::get({dyn, spec.numKVHeads, dyn, spec.headDim}, elt);
  auto lseType = RankedTensorType::get({dyn, spec.numHeads, dyn}, b.getF32Type());
  auto funcType = b.getFunctionType({qType, kvType, kvType, b.getF32Type()},
                                    {qType, lseType});
  auto func = func::FuncOp::create(b, loc, spec.kernelName(), funcType);
  Block *body = func.addEntryBlock();
  b.setInsertionPointToStart(body);
  auto op = attn::AttentionOp::create(
      b, loc, TypeRange{qType, lseType}, body->getArgument(0),
      body->getArgument(1), body->getArgument(2), body->getArgument(3),
      spec.causal ? b.getUnitAttr() : UnitAttr(),
      config ? toAttr(&ctx, *config) : attn::TileConfigAttr());
  func::ReturnOp::create(b, loc, op->getResults());
  return module;
}

void registerCompilerDialects(DialectRegistry &registry) {
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerAllToLLVMIRTranslations(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  registry.insert<attn::AttnDialect>();
}

} // namespace flashjit
