//===- SpecOptions.cpp - options that describe an attention ---------------===//
// Why: compile, run and autotune describe the attention the same way.
#include "Commands.h"

#include <nlohmann/json.hpp>

#include "flashjit/FlashJIT.h"
#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/Runtime/DeviceInfo.h"

#include "flashjit/Compiler/Variants.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
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

static cl::list<int64_t> window(
    "window", cl::desc("Sliding window: keys left,right of the diagonal "
                       "(-1: no limit), e.g. --window 1024,0"),
    cl::CommaSeparated, cl::sub(compileCommand), cl::sub(runCommand),
    cl::cat(category));
static cl::opt<std::string> causalAlign(
    "causal-align",
    cl::desc("Diagonal of --causal and --window: top-left or bottom-right"),
    cl::init("top-left"), cl::sub(compileCommand), cl::sub(runCommand),
    cl::cat(category));
static cl::opt<bool> alibi("alibi",
                           cl::desc("ALiBi score_mod (slopes of the paper)"),
                           cl::sub(compileCommand), cl::sub(runCommand),
                           cl::cat(category));
static cl::opt<double> softcapValue(
    "softcap", cl::desc("Logit soft-capping score_mod: cap * tanh(s / cap)"),
    cl::init(0), cl::sub(compileCommand), cl::sub(runCommand),
    cl::cat(category));
static cl::opt<int64_t> documents(
    "documents",
    cl::desc("Document mask_mod over this many packed documents of random "
             "lengths per sequence"),
    cl::init(0), cl::sub(compileCommand), cl::sub(runCommand),
    cl::cat(category));
static cl::opt<bool> prefixLM(
    "prefix-lm",
    cl::desc("Prefix-LM mask_mod (random prefix length per sequence)"),
    cl::sub(compileCommand), cl::sub(runCommand), cl::cat(category));
static cl::opt<std::string> scoreModFile(
    "score-mod", cl::desc("File holding a score_mod func.func (no captures)"),
    cl::sub(compileCommand), cl::sub(runCommand), cl::cat(category));
static cl::opt<std::string> maskModFile(
    "mask-mod", cl::desc("File holding a mask_mod func.func (no captures)"),
    cl::sub(compileCommand), cl::sub(runCommand), cl::cat(category));

static cl::list<int64_t> sparseBlock(
    "sparse-block",
    cl::desc("Block-sparse attention with this block mask block, "
             "block_m,block_n (e.g. 128,128); `run` builds the block mask on "
             "the GPU from the mask_mod, causal mask and window unless "
             "--block-sparse asks for a random one"),
    cl::CommaSeparated, cl::sub(compileCommand), cl::sub(runCommand),
    cl::cat(category));
static cl::opt<double> blockSparse(
    "block-sparse",
    cl::desc("Block-sparse attention: a random block mask listing this "
             "fraction of the key blocks (e.g. 0.25; block 128,128 unless "
             "--sparse-block says)"),
    cl::init(0), cl::sub(compileCommand), cl::sub(runCommand),
    cl::cat(category));

static llvm::Expected<std::string> readText(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return llvm::createStringError("cannot read '" + path.str() +
                                   "': " + buffer.getError().message());
  return (*buffer)->getBuffer().str();
}

/// The variant options applied to `spec`.
static llvm::Error applyVariantOptions(AttentionSpec &spec) {
  auto align = parseCausalAlign(causalAlign);
  if (!align)
    return align.takeError();
  spec.causalAlign = *align;
  if (!window.empty()) {
    if (window.size() != 2)
      return llvm::createStringError(
          "--window takes two extents, left,right (-1: no limit)");
    if (auto err = presets::slidingWindow(spec, window[0], window[1]))
      return err;
  }
  if (blockSparse != 0 && !(blockSparse > 0 && blockSparse <= 1))
    return llvm::createStringError(
        llvm::formatv("--block-sparse is the fraction of key blocks listed, "
                      "in (0, 1]; got {0}",
                      double(blockSparse))
            .str());
  if (!sparseBlock.empty() && sparseBlock.size() != 2)
    return llvm::createStringError(
        "--sparse-block takes two sizes, block_m,block_n (e.g. 128,128)");
  if (!sparseBlock.empty()) {
    spec.sparseBlockM = sparseBlock[0];
    spec.sparseBlockN = sparseBlock[1];
  } else if (blockSparse > 0) {
    spec.sparseBlockM = spec.sparseBlockN = 128;
  }
  // --softcap joins one mask preset (it reads no captured tensor); the
  // others stand alone.
  const int maskPresets = int(documents > 0) + int(prefixLM);
  const int presetsGiven = int(alibi) + int(softcapValue != 0) + maskPresets;
  const bool softcapWithMask =
      softcapValue != 0 && maskPresets == 1 && presetsGiven == 2;
  if ((presetsGiven > 1 && !softcapWithMask) ||
      (presetsGiven && (!scoreModFile.empty() || !maskModFile.empty())))
    return llvm::createStringError(
        "give one of --alibi, --softcap, --documents, --prefix-lm (or "
        "--softcap with --documents or --prefix-lm), or --score-mod/"
        "--mask-mod files");
  if (documents < 0)
    return llvm::createStringError("--documents must be at least 1");
  if (alibi)
    return presets::alibi(spec);
  if (documents > 0)
    if (auto err = presets::documentMask(spec))
      return err;
  if (prefixLM)
    if (auto err = presets::prefixLM(spec))
      return err;
  if (softcapValue != 0)
    return presets::softcap(spec, softcapValue);
  if (presetsGiven)
    return llvm::Error::success();
  if (!scoreModFile.empty()) {
    auto text = readText(scoreModFile);
    if (!text)
      return text.takeError();
    spec.scoreMod = *text;
  }
  if (!maskModFile.empty()) {
    auto text = readText(maskModFile);
    if (!text)
      return text.takeError();
    spec.maskMod = *text;
  }
  return llvm::Error::success();
}

llvm::Expected<std::vector<HostCapture>>
capturesFromOptions(const AttentionSpec &spec, int64_t batch, int64_t seqlenQ,
                    int64_t seqlenK, uint64_t seed) {
  return presets::sampleCaptures(spec, batch, seqlenQ, seqlenK, documents,
                                 seed ^ 0x5eed);
}

std::optional<double> randomBlockDensity() {
  if (blockSparse > 0)
    return double(blockSparse);
  return std::nullopt;
}

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
  if (auto err = applyVariantOptions(spec))
    return std::move(err);
  spec.varlen = varlenRequested();
  // --page-size is the decode cache's with --decode (DecodeCommand.cpp).
  if (!decodeRequested())
    spec.pageSize = pageSizeOption();
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

nlohmann::json specFields(const AttentionSpec &spec) {
  return {{"heads", spec.numHeads},
          {"kv_heads", spec.numKVHeads},
          {"head_dim", spec.headDim},
          {"dtype", dtypeName(spec.dtype)},
          {"causal", spec.causal},
          {"causal_align", causalAlignName(spec.causalAlign)}};
}

nlohmann::json buildFields() {
  ToolchainVersions v = toolchainVersions();
  return {{"flashjit", v.flashjit}, {"generator", v.generator}};
}

llvm::Expected<std::unique_ptr<Context>> gpuContext() {
  auto ctx = Context::create();
  if (!ctx)
    return ctx.takeError();
  if (!(*ctx)->device())
    return llvm::createStringError("no GPU: " + (*ctx)->deviceError());
  return ctx;
}

} // namespace flashjit::tools
