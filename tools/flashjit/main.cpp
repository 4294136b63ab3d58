//===- main.cpp - the `flashjit` command line -----------------------------===//
// Why: one binary with subcommands (compile, info, run, cache, autotune);
// this file parses the command line and dispatches.
#include "Commands.h"

#include "flashjit/DevTools/MeasurementTemplates.h"

#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

using namespace flashjit::tools;

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  // The tool builds what a config names, measurement-only families too
  // (mma_sync_nosoftmax, for tools/scripts/device-softmax-share.sh).
  flashjit::registerMeasurementTemplates();
  llvm::cl::HideUnrelatedOptions(category);
  llvm::cl::ParseCommandLineOptions(
      argc, argv,
      "flashjit: FlashAttention kernels generated just in time\n\n"
      "  flashjit compile   describe an attention, get PTX (or any stage)\n"
      "  flashjit run       run it on the GPU against a float64 reference\n"
      "  flashjit info      toolchain versions and the GPU\n"
      "  flashjit cache     list | prune | clear | path of the kernel cache\n"
      "  flashjit autotune  measure tile configs, write the tuning database\n");
  if (compileCommand)
    return runCompile();
  if (infoCommand)
    return runInfo();
  if (runCommand)
    return runRun();
  if (cacheCommand)
    return runCache();
  if (autotuneCommand)
    return runAutotune();
  llvm::errs() << "flashjit: give a subcommand (compile, run, info, cache, "
                  "autotune); see flashjit --help\n";
  return 1;
}
