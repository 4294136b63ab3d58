//===- MarkGridConstantParams.cpp - tensor maps as by-value parameters ----===//
// Why: TMA reads its tensor map from a kernel parameter passed by value;
// the gpu.func lowering cannot carry that argument attribute, so templates
// name the parameters in a function attribute and this pass applies it on
// the lowered llvm.func (see Passes.td).
#include "flashjit/Compiler/Passes.h"
#include "flashjit/Templates/KernelABI.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

using namespace mlir;

namespace flashjit {
#define GEN_PASS_DEF_MARKGRIDCONSTANTPARAMS
#include "flashjit/Compiler/Passes.h.inc"

namespace {
constexpr llvm::StringLiteral kTensorMapArgs = "flashjit.tensor_map_args";

struct MarkGridConstantParams
    : impl::MarkGridConstantParamsBase<MarkGridConstantParams> {
  void runOnOperation() override {
    LLVM::LLVMFuncOp func = getOperation();
    auto positions = func->getAttrOfType<DenseI32ArrayAttr>(kTensorMapArgs);
    if (!positions)
      return;
    MLIRContext *ctx = &getContext();
    Builder b(ctx);
    Type bytes = LLVM::LLVMArrayType::get(IntegerType::get(ctx, 8),
                                          kTensorMapBytes);
    for (int32_t i : positions.asArrayRef()) {
      if (i < 0 || i >= static_cast<int32_t>(func.getNumArguments()) ||
          !isa<LLVM::LLVMPointerType>(func.getArgument(i).getType())) {
        func.emitError() << kTensorMapArgs << " names argument " << i
                         << ", which is not a pointer argument";
        return signalPassFailure();
      }
      func.setArgAttr(i, LLVM::LLVMDialect::getByValAttrName(),
                      TypeAttr::get(bytes));
      func.setArgAttr(i, LLVM::LLVMDialect::getAlignAttrName(),
                      b.getI64IntegerAttr(64));
      func.setArgAttr(i, NVVM::NVVMDialect::getGridConstantAttrName(),
                      b.getUnitAttr());
    }
    func->removeAttr(kTensorMapArgs);
  }
};
} // namespace

} // namespace flashjit
