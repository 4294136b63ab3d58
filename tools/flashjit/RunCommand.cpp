//===- RunCommand.cpp - `flashjit run` ------------------------------------===//
// Why: one command proves a kernel on this GPU: fresh random inputs, the
// float64 reference, poisoned outputs, then CUDA-event timing.
#include "Commands.h"
#include "RunBackward.h"

#include "flashjit/FlashJIT.h"
#include "flashjit/DevTools/Harness.h"
#include "flashjit/Runtime/KernelCache.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <optional>
#include <random>

namespace cl = llvm::cl;

namespace flashjit::tools {

static cl::opt<int64_t> batch("batch", cl::desc("Batch size"), cl::init(2),
                              cl::sub(runCommand), cl::cat(category));
static cl::opt<int64_t> seqlen("seqlen", cl::desc("Query sequence length"),
                               cl::init(2048), cl::sub(runCommand),
                               cl::cat(category));
static cl::opt<int64_t> seqlenK("seqlen-k",
                                cl::desc("Key/value length (default: --seqlen)"),
                                cl::init(0), cl::sub(runCommand),
                                cl::cat(category));
static cl::opt<std::string> layout("layout", cl::desc("bhsd or bshd"),
                                   cl::init("bhsd"), cl::sub(runCommand),
                                   cl::cat(category));
static cl::opt<int> iterations("iters",
                               cl::desc("Timed launches (decode: timed "
                                        "samples of back-to-back launches, "
                                        "10 ms or more each)"),
                               cl::init(20), cl::sub(runCommand),
                               cl::cat(category));
static cl::opt<int> warmup("warmup", cl::desc("Untimed launches first"),
                           cl::init(5), cl::sub(runCommand), cl::cat(category));
static cl::opt<int64_t> rows("check-rows",
                             cl::desc("Query rows per head checked against "
                                      "the float64 reference"),
                             cl::init(64), cl::sub(runCommand),
                             cl::cat(category));
static cl::opt<uint64_t> seed("seed", cl::desc("Input seed (default: random)"),
                              cl::init(0), cl::sub(runCommand),
                              cl::cat(category));
static cl::opt<double> scale("scale",
                            cl::desc("Softmax scale (default: 1/sqrt(head "
                                     "dim)); a large one spreads the scores"),
                            cl::init(0), cl::sub(runCommand),
                            cl::cat(category));
static cl::opt<bool> json("json", cl::desc("Print JSON"), cl::sub(runCommand),
                          cl::cat(category));
static cl::opt<std::string>
    configText("config",
               cl::desc("Build this tile config (e.g. mma_sync:m128:n64:s2:w4), "
                        "or the heuristic's choice within this kernel family "
                        "(e.g. mma_sync), instead of the tuned or heuristic "
                        "one"),
               cl::sub(runCommand), cl::cat(category));

static cl::opt<bool> backward(
    "backward",
    cl::desc("The backward pass: run checks and times dQ, dK, dV against "
             "the float64 reference instead of the forward; compile prints "
             "the backward's three kernels"),
    cl::sub(runCommand), cl::sub(compileCommand), cl::cat(category));
static cl::opt<std::string> backwardConfig(
    "backward-config",
    cl::desc("With --backward: build this tile config (e.g. "
             "wgmma_bwd:m64:n128:s2:w8 on sm_90a, or "
             "mma_sync_bwd:m32:n64:s1:w4) instead of the default"),
    cl::sub(runCommand), cl::sub(compileCommand), cl::cat(category));

bool backwardRequested() { return backward; }
const std::string &backwardConfigOption() { return backwardConfig; }
static cl::opt<bool> deterministic(
    "deterministic",
    cl::desc("With --backward: build the deterministic backward (dQ, dK, "
             "dV bitwise reproducible) and check that a second call gives "
             "the same bits"),
    cl::sub(runCommand), cl::cat(category));
static cl::opt<int64_t> checkGroups(
    "check-kv-groups",
    cl::desc("With --backward: (batch, KV head) groups whose gradients are "
             "checked against the float64 reference (0: all, -1: none)"),
    cl::init(2), cl::sub(runCommand), cl::cat(category));

namespace {
/// Pairs up to which `run` checks a GPU-built block mask against the
/// host's pair-by-pair evaluation (an interpreter: about a second).
constexpr double kHostMaskCheckPairs = 64.0 * 1024 * 1024;

struct BuiltMask {
  nlohmann::json json;
  std::string line;
  bool matchesHost = true;
};

/// Builds the spec's block mask on the GPU into options.blockMask, timed,
/// and compares it with the host's classification when small enough.
llvm::Expected<BuiltMask> buildMask(Context &ctx, const AttentionSpec &spec,
                                    CheckOptions &options) {
  auto builder = ctx.blockMaskBuilder(spec);
  if (!builder)
    return builder.takeError();
  const int64_t heads = spec.numHeads;
  auto start = std::chrono::steady_clock::now();
  auto onGpu = buildBlockMaskOnGpu(**builder, options.captures, options.batch,
                                   heads, options.seqlenQ, options.seqlenK,
                                   /*fullLists=*/true);
  if (!onGpu)
    return onGpu.takeError();
  double ms = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - start)
                  .count();
  BuiltMask out;
  int64_t listed = 0, full = 0;
  for (int32_t n : onGpu->kvNumBlocks)
    listed += n;
  for (int32_t n : onGpu->fullKvNumBlocks)
    full += n;
  const double blocks = double(onGpu->kvNumBlocks.size()) *
                        double(onGpu->indexColumns);
  const double pairs = double(options.batch) * heads * options.seqlenQ *
                       options.seqlenK;
  std::string hostCheck = "not checked on the host (above 2^26 pairs)";
  if (pairs <= kHostMaskCheckPairs) {
    auto onHost = HostBlockMask::fromMask(
        spec, options.captures, options.batch, heads,
        options.seqlenQ, options.seqlenK, /*fullLists=*/true);
    if (!onHost)
      return onHost.takeError();
    // Equal counts and equal lists up to each count.
    auto same = [&](const std::vector<int32_t> &counts,
                    const std::vector<int32_t> &a,
                    const std::vector<int32_t> &b) {
      for (size_t row = 0; row < counts.size(); ++row)
        for (int32_t i = 0; i < counts[row]; ++i)
          if (a[row * onHost->indexColumns + i] !=
              b[row * onHost->indexColumns + i])
            return false;
      return true;
    };
    out.matchesHost =
        onGpu->kvNumBlocks == onHost->kvNumBlocks &&
        onGpu->fullKvNumBlocks == onHost->fullKvNumBlocks &&
        same(onHost->kvNumBlocks, onGpu->kvIndices, onHost->kvIndices) &&
        same(onHost->fullKvNumBlocks, onGpu->fullKvIndices,
             onHost->fullKvIndices);
    hostCheck = out.matchesHost ? "equal to the host's evaluation"
                                : "DIFFERS from the host's evaluation";
  }
  out.json = {{"source", "gpu"},
              {"build_ms", ms},
              {"partial_blocks", listed},
              {"full_blocks", full},
              {"listed_fraction", blocks > 0 ? (listed + full) / blocks : 0.0},
              {"host_checked", pairs <= kHostMaskCheckPairs},
              {"matches_host", out.matchesHost}};
  out.line = llvm::formatv("built on the GPU in {0:F2} ms (transfers "
                           "included): {1} partial and {2} full of {3} "
                           "blocks; {4}",
                           ms, listed, full, int64_t(blocks), hostCheck)
                 .str();
  options.blockMask = std::move(*onGpu);
  return out;
}
} // namespace

int runRun() {
  if (decodeRequested())
    return runDecode({batch, seed ? uint64_t(seed) : std::random_device()(),
                      scale.getNumOccurrences() ? std::optional<double>(scale)
                                                : std::nullopt,
                      warmup, iterations, json, rows});
  auto spec = specFromOptions();
  if (!spec)
    return reportError("run", spec.takeError());
  if (layout != "bhsd" && layout != "bshd")
    return reportError("run", llvm::createStringError(
                                  "unknown layout '" + layout +
                                  "': expected bhsd or bshd"));
  if (batch < 1 || seqlen < 1 || seqlenK < 0 || iterations < 0 || warmup < 0)
    return reportError("run", llvm::createStringError(
                                  "batch and seqlen must be at least 1, "
                                  "iters and warmup at least 0"));
  if (scale.getNumOccurrences() && !(std::isfinite(scale) && scale > 0))
    return reportError("run", llvm::createStringError(
                                  "--scale must be a positive finite number"));
  if (spec->varlen)
    return runVarlen(*spec, {seed ? uint64_t(seed) : std::random_device()(),
                             scale.getNumOccurrences()
                                 ? std::optional<double>(scale)
                                 : std::nullopt,
                             warmup, iterations, json, rows, configText,
                             backward, backwardConfig, deterministic,
                             checkGroups});
  auto request = ConfigRequest::parse(configText);
  if (!request)
    return reportError("run", request.takeError());
  auto ctx = gpuContext();
  if (!ctx)
    return reportError("run", ctx.takeError());
  auto start = std::chrono::steady_clock::now();
  // The run's length picks the tuning database's bucket.
  KernelOptions kernelOptions;
  kernelOptions.seqlen = seqlen;
  kernelOptions.config = request->config;
  kernelOptions.family = request->family;
  auto kernel = (*ctx)->compile(*spec, kernelOptions);
  if (!kernel)
    return reportError("run", kernel.takeError());
  double compileMs = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - start)
                         .count();
  CacheStats stats = (*ctx)->cache().stats();

  if (backward) {
    BackwardRunRequest request;
    BackwardCheckOptions &check = request.check;
    check.batch = batch;
    check.seqlenQ = seqlen;
    check.seqlenK = seqlenK > 0 ? int64_t(seqlenK) : int64_t(seqlen);
    check.layout = layout == "bshd" ? Layout::BSHD : Layout::BHSD;
    check.seed = seed ? uint64_t(seed) : std::random_device()();
    check.checkedGroups = checkGroups;
    if (scale.getNumOccurrences())
      check.scale = double(scale);
    check.warmup = warmup;
    check.iterations = iterations;
    auto captures = capturesFromOptions(*spec, check.batch, check.seqlenQ,
                                        check.seqlenK, check.seed);
    if (!captures)
      return reportError("run", captures.takeError());
    check.captures = std::move(*captures);
    // Block-sparse: a random mask of the density asked, or the mask built
    // on the GPU from the spec's mask (checked against the host's where
    // affordable), as for the forward.
    if (spec->isBlockSparse()) {
      if (auto density = randomBlockDensity()) {
        check.blockDensity = *density;
      } else {
        CheckOptions maskOptions;
        maskOptions.batch = check.batch;
        maskOptions.seqlenQ = check.seqlenQ;
        maskOptions.seqlenK = check.seqlenK;
        maskOptions.captures = check.captures;
        auto built = buildMask(**ctx, *spec, maskOptions);
        if (!built)
          return reportError("run", built.takeError());
        if (!built->matchesHost)
          return 1;
        check.blockMask = std::move(maskOptions.blockMask);
      }
    }
    request.config = backwardConfig;
    request.deterministic = deterministic;
    if (deterministic)
      check.repeats = 1;
    request.json = json;
    return runBackwardCheck(**ctx, *spec, **kernel, request);
  }

  CheckOptions options;
  options.batch = batch;
  options.seqlenQ = seqlen;
  options.seqlenK = seqlenK > 0 ? int64_t(seqlenK) : int64_t(seqlen);
  options.layout = layout == "bshd" ? Layout::BSHD : Layout::BHSD;
  options.seed = seed ? uint64_t(seed) : std::random_device()();
  options.rowsPerHead = rows;
  if (scale.getNumOccurrences())
    options.scale = double(scale);
  options.warmup = warmup;
  options.iterations = iterations;
  auto captures = capturesFromOptions(*spec, options.batch, options.seqlenQ,
                                      options.seqlenK, options.seed);
  if (!captures)
    return reportError("run", captures.takeError());
  options.captures = std::move(*captures);
  // Block-sparse: a random mask of the density asked, or the mask built on
  // the GPU from the spec's mask, checked against the host's evaluation
  // where that is affordable.
  nlohmann::json maskJson;
  std::string maskLine;
  if (spec->isBlockSparse()) {
    if (auto density = randomBlockDensity()) {
      options.blockDensity = *density;
      maskJson = {{"source", "random"}, {"density", *density}};
      maskLine =
          llvm::formatv("random, {0:P0} of the key blocks", *density).str();
    } else {
      auto built = buildMask(**ctx, *spec, options);
      if (!built)
        return reportError("run", built.takeError());
      maskJson = built->json;
      maskLine = built->line;
      if (!built->matchesHost)
        return 1;
    }
  }
  auto report = runAndCheck(**kernel, options);
  if (!report)
    return reportError("run", report.takeError());

  const KernelInfo &info = (*kernel)->info();
  if (json) {
    nlohmann::json j = {
        {"kernel", info.name},
        {"device", (*ctx)->device()->name},
        {"arch", (*ctx)->target().chip},
        {"config", info.config.canonical()},
        {"config_source", configSourceName((*kernel)->configOrigin().source)},
        {"config_detail", (*kernel)->configOrigin().detail},
        {"batch", options.batch},
        {"seqlen_q", options.seqlenQ},
        {"seqlen_k", options.seqlenK},
        {"layout", std::string(layout)},
        {"seed", options.seed},
        {"scale", options.scale.value_or(spec->defaultScale())},
        {"compile_ms", compileMs},
        {"cache", toJson(stats)},
        {"rel_error", report->relError},
        {"lse_rel_error", report->lseRelError},
        {"max_abs_error", report->maxAbsError},
        {"non_finite", report->nonFinite},
        {"checked_rows", report->checkedRows},
        {"tolerance", report->tolerance},
        {"passed", report->passed},
        {"median_ms", report->medianMs},
        {"tflops", report->tflops}};
    if (!maskJson.is_null())
      j["block_mask"] = maskJson;
    j.update(specFields(*spec));
    j.update(buildFields());
    llvm::outs() << j.dump(2) << "\n";
  } else {
    llvm::outs() << info.name << " on " << (*ctx)->device()->name << " ("
                 << (*ctx)->target().chip << ", " << info.config.canonical()
                 << ", " << configSourceName((*kernel)->configOrigin().source)
                 << ")\n"
                 << "  shape: batch " << options.batch << ", heads "
                 << spec->numHeads << "/" << spec->numKVHeads << ", seqlen "
                 << options.seqlenQ << "x" << options.seqlenK << ", " << layout
                 << "\n"
                 << "  kernel ready in " << llvm::format("%.2f", compileMs)
                 << " ms (memory hits " << stats.memoryHits << ", disk hits "
                 << stats.diskHits << ", builds " << stats.builds << ")\n"
                 << (maskLine.empty() ? "" : "  block mask: " + maskLine + "\n")
                 << "  check: " << report->summary() << "\n";
    if (options.iterations > 0)
      llvm::outs() << "  time: " << llvm::format("%.3f", report->medianMs)
                   << " ms median of " << options.iterations << ", "
                   << llvm::format("%.1f", report->tflops) << " TFLOP/s\n";
  }
  return report->passed ? 0 : 1;
}

} // namespace flashjit::tools
