//===- flashjit-opt.cpp - mlir-opt with the attn dialect and passes -------===//
// Why: lit tests drive every pass and the whole pipeline through this tool.
#include "flashjit/Compiler/Description.h"
#include "flashjit/Compiler/Passes.h"
#include "flashjit/Compiler/Pipeline.h"

#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  flashjit::registerCompilerPasses();
  flashjit::registerAttentionPipeline();
  mlir::DialectRegistry registry;
  flashjit::registerCompilerDialects(registry);
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "flashjit optimizer driver\n", registry));
}
