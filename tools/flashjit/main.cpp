//===- main.cpp - the `flashjit` command line -----------------------------===//
// Why: one binary with subcommands (compile, info, run, cache); this file
// parses the command line and dispatches.
#include "Commands.h"

#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

using namespace flashjit::tools;

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  llvm::cl::HideUnrelatedOptions(category);
  llvm::cl::ParseCommandLineOptions(
      argc, argv,
      "flashjit: FlashAttention kernels generated just in time\n\n"
      "  flashjit compile   describe an attention, get PTX (or any stage)\n"
      "  flashjit run       run it on the GPU against a float64 reference\n"
      "  flashjit info      toolchain versions and the GPU\n"
      "  flashjit cache     list | clear | path of the kernel cache\n");
  if (compileCommand)
    return runCompile();
  if (infoCommand)
    return runInfo();
  if (runCommand)
    return runRun();
  if (cacheCommand)
    return runCache();
  llvm::errs() << "flashjit: give a subcommand (compile, run, info, cache); "
                  "see flashjit --help\n";
  return 1;
}
