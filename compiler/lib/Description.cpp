//===- Description.cpp - build the attn IR of a spec ----------------------===//
// Why: the pipeline's input is IR; programs give an AttentionSpec.
#include "flashjit/Compiler/Description.h"
#include "flashjit/Compiler/ConfigAttr.h"
#include "flashjit/Compiler/ParserGuard.h"
#include "flashjit/Dialect/AttnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FormatVariadic.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

using namespace mlir;

namespace flashjit {

namespace {
/// Parses `text` (one func.func) and moves its body into `region` as one
/// block taking `argTypes` and ending in attn.yield of one `result`.
llvm::Error parseModInto(MLIRContext &ctx, llvm::StringRef name,
                         llvm::StringRef text, ArrayRef<Type> argTypes,
                         Type result, Region &region) {
  if (auto err = checkParserSafe(text, name))
    return err;
  OwningOpRef<ModuleOp> parsed = parseSourceString<ModuleOp>(text, &ctx, name);
  if (!parsed)
    return llvm::createStringError(
        llvm::formatv("{0} is not valid MLIR (the diagnostics above say "
                      "where); it must be one func.func",
                      name)
            .str());
  auto funcs = llvm::to_vector(parsed->getOps<func::FuncOp>());
  if (funcs.size() != 1 ||
      llvm::range_size(parsed->getBody()->getOperations()) != 1)
    return llvm::createStringError(
        llvm::formatv("{0} must hold exactly one func.func and nothing else",
                      name)
            .str());
  func::FuncOp fn = funcs.front();
  auto expected = FunctionType::get(&ctx, argTypes, {result});
  if (fn.getFunctionType() != expected) {
    std::string want, got;
    llvm::raw_string_ostream(want) << expected;
    llvm::raw_string_ostream(got) << fn.getFunctionType();
    return llvm::createStringError(
        llvm::formatv("{0} @{1} has type {2}; it must have type {3} (the "
                      "fixed arguments, then one per captured tensor)",
                      name, fn.getSymName(), got, want)
            .str());
  }
  if (!fn.getBody().hasOneBlock())
    return llvm::createStringError(
        llvm::formatv("{0} must have one block (no branches: use "
                      "arith.select)",
                      name)
            .str());
  Block &from = fn.getBody().front();
  Block *to = new Block();
  region.push_back(to);
  IRMapping map;
  for (BlockArgument arg : from.getArguments())
    map.map(arg, to->addArgument(arg.getType(), arg.getLoc()));
  OpBuilder b(&ctx);
  b.setInsertionPointToEnd(to);
  for (Operation &op : from) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      attn::YieldOp::create(b, ret.getLoc(),
                            ValueRange{map.lookup(ret.getOperand(0))});
      continue;
    }
    b.clone(op, map);
  }
  return llvm::Error::success();
}
} // namespace

llvm::Expected<OwningOpRef<ModuleOp>>
buildDescription(MLIRContext &ctx, const AttentionSpec &spec,
                 const std::optional<TileConfig> &config) {
  ctx.loadDialect<attn::AttnDialect, func::FuncDialect, arith::ArithDialect,
                  math::MathDialect, tensor::TensorDialect>();
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
  SmallVector<Type> captureTypes;
  for (const CapturedTensor &c : spec.captures) {
    SmallVector<int64_t> shape;
    for (int64_t d : c.shape)
      shape.push_back(d < 0 ? dyn : d);
    captureTypes.push_back(RankedTensorType::get(
        shape, c.dtype == CaptureDType::F32 ? Type(b.getF32Type())
                                            : Type(b.getI32Type())));
  }
  SmallVector<Type> argTypes = {qType, kvType, kvType, b.getF32Type()};
  llvm::append_range(argTypes, captureTypes);
  auto funcType = b.getFunctionType(argTypes, {qType, lseType});
  auto func = func::FuncOp::create(b, loc, spec.kernelName(), funcType);
  Block *body = func.addEntryBlock();
  b.setInsertionPointToStart(body);
  auto optionalExtent = [&](int64_t extent) {
    return extent >= 0 ? b.getI64IntegerAttr(extent) : IntegerAttr();
  };
  auto op = attn::AttentionOp::create(
      b, loc, TypeRange{qType, lseType}, body->getArgument(0),
      body->getArgument(1), body->getArgument(2), body->getArgument(3),
      body->getArguments().drop_front(4),
      spec.causal ? b.getUnitAttr() : UnitAttr(),
      spec.causalAlign == CausalAlign::BottomRight &&
              (spec.hasRightBound() || spec.hasLeftBound())
          ? b.getUnitAttr()
          : UnitAttr(),
      optionalExtent(spec.windowLeft), optionalExtent(spec.windowRight),
      spec.isBlockSparse()
          ? b.getDenseI64ArrayAttr({spec.sparseBlockM, spec.sparseBlockN})
          : DenseI64ArrayAttr(),
      config ? toAttr(&ctx, *config) : attn::TileConfigAttr(),
      spec.varlen ? b.getUnitAttr() : UnitAttr(),
      spec.paged() ? b.getI64IntegerAttr(spec.pageSize) : IntegerAttr());
  Type idx = b.getIndexType(), f32 = b.getF32Type();
  if (!spec.scoreMod.empty()) {
    SmallVector<Type> types = {f32, idx, idx, idx, idx};
    llvm::append_range(types, captureTypes);
    if (auto err = parseModInto(ctx, "score_mod", spec.scoreMod, types, f32,
                                op.getScoreMod()))
      return std::move(err);
  }
  if (!spec.maskMod.empty()) {
    SmallVector<Type> types = {idx, idx, idx, idx};
    llvm::append_range(types, captureTypes);
    if (auto err = parseModInto(ctx, "mask_mod", spec.maskMod, types,
                                b.getI1Type(), op.getMaskMod()))
      return std::move(err);
  }
  func::ReturnOp::create(b, loc, op->getResults());
  // The op's own verifiers (signature and ops of the regions). Not
  // mlir::verify of the module: inside libflashjit.so, whose symbols are
  // hidden, the attn ops' trait ids differ from libMLIR's, and the generic
  // verifier would not see attn.yield as a terminator.
  if (failed(op.verify()) || failed(op.verifyRegions()))
    return llvm::createStringError(
        "the description of " + spec.kernelName() +
        " does not verify (the diagnostics above say why)");
  return std::move(module);
}

void registerCompilerDialects(DialectRegistry &registry) {
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerAllToLLVMIRTranslations(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  registry.insert<attn::AttnDialect>();
}

} // namespace flashjit
