//===- CudaCoreForward.cpp - IR builder of the CUDA-core template ---------===//
#include "flashjit/Templates/CudaCoreForward.h"
#include "mlir/IR/Builders.h"

namespace flashjit {
llvm::Error CudaCoreForward::build(mlir::OpBuilder &, mlir::Location,
                                   const AttentionSpec &, const TileConfig &,
                                   llvm::StringRef) const {
  return llvm::createStringError("cuda_core builder: work in progress");
}
} // namespace flashjit
