//===- SpecOptions.cpp - options that describe an attention ---------------===//
// Why: compile, run and autotune describe the attention the same way.
#include "Commands.h"

#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/Runtime/DeviceInfo.h"

#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace flashjit::tools {

cl::OptionCategory category("flashjit options");
cl::SubCommand compileCommand("compile", "Compile an attention kernel to PTX");
cl::SubCommand infoCommand("info", "Print the toolchain and the GPU");
cl::SubCommand runCommand(
    "run", "Run a kernel on the GPU and check it against a float64 reference");
cl::SubCommand cacheCommand("cache", "Inspect the on-disk kernel cache");
cl::SubCommand autotuneCommand(
    "autotune",
    "Measure tile configs on this GPU and write the tuning database");

static cl::opt<int64_t> headDim("head-dim", cl::desc("Head dimension"),
                                cl::init(128), cl::sub(compileCommand),
                                cl::sub(runCommand), cl::cat(category));
static cl::opt<std::string> dtype("dtype", cl::desc("f16 or bf16"),
                                  cl::init("bf16"), cl::sub(compileCommand),
                                  cl::sub(runCommand), cl::cat(category));
static cl::opt<bool> causal("causal", cl::desc("Causal (top-left) masking"),
                            cl::sub(compileCommand), cl::sub(runCommand),
                            cl::cat(category));
static cl::opt<int64_t> heads("heads", cl::desc("Query heads"), cl::init(16),
                              cl::sub(compileCommand), cl::sub(runCommand),
                              cl::cat(category));
static cl::opt<int64_t> kvHeads("kv-heads",
                                cl::desc("Key/value heads (default: --heads)"),
                                cl::init(0), cl::sub(compileCommand),
                                cl::sub(runCommand), cl::cat(category));

llvm::Expected<AttentionSpec> specFromOptions() {
  AttentionSpec spec;
  spec.headDim = headDim;
  auto parsed = parseDType(dtype);
  if (!parsed)
    return parsed.takeError();
  spec.dtype = *parsed;
  spec.causal = causal;
  spec.numHeads = heads;
  spec.numKVHeads = kvHeads > 0 ? int64_t(kvHeads) : int64_t(heads);
  if (auto err = spec.validate())
    return std::move(err);
  return spec;
}

llvm::Expected<Target> targetFromOptions(llvm::StringRef arch) {
  if (!arch.empty())
    return Target::parse(arch);
  auto driver = CudaDriver::get();
  if (!driver) {
    llvm::consumeError(driver.takeError());
    return Target::parse("sm_90a");
  }
  auto device = queryDevice(0);
  if (!device) {
    llvm::consumeError(device.takeError());
    return Target::parse("sm_90a");
  }
  return Target::fromComputeCapability(device->computeMajor,
                                       device->computeMinor);
}

int reportError(llvm::StringRef command, llvm::Error err) {
  llvm::errs() << "flashjit " << command
               << ": error: " << llvm::toString(std::move(err)) << "\n";
  return 1;
}

} // namespace flashjit::tools
