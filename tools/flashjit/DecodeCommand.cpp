//===- DecodeCommand.cpp - `flashjit compile|run --decode` ----------------===//
// Why: the decode kernels (flashjit/Decode.h) from the command line:
// `compile --decode` prints their PTX, `run --decode` checks a decode step
// against the float64 reference and times it in GB/s of K+V read.
#include "Commands.h"

#include "flashjit/Compiler/Compiler.h"
#include "flashjit/Decode.h"
#include "flashjit/DevTools/DecodeHarness.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include <nlohmann/json.hpp>

#include <chrono>

namespace cl = llvm::cl;

namespace flashjit::tools {

static cl::opt<bool> decode("decode",
                            cl::desc("Decode step (Flash-Decoding): --q-len "
                                     "query tokens per sequence against a KV "
                                     "cache of --kv-len keys"),
                            cl::sub(compileCommand), cl::sub(runCommand),
                            cl::cat(category));
static cl::opt<int64_t> qLen("q-len",
                             cl::desc("Decode: query tokens per sequence "
                                      "(1-16), causal from the bottom right"),
                             cl::init(1), cl::sub(compileCommand),
                             cl::sub(runCommand), cl::cat(category));
static cl::list<int64_t>
    kvLen("kv-len",
          cl::desc("Decode: KV length of every sequence, or one per "
                   "sequence (comma-separated, as many as --batch)"),
          cl::CommaSeparated, cl::sub(runCommand), cl::cat(category));
static cl::opt<int64_t> pageSize("page-size",
                                 cl::desc("Decode: tokens per page of a paged "
                                          "KV cache (16-256; 0: contiguous)"),
                                 cl::init(0), cl::sub(compileCommand),
                                 cl::sub(runCommand), cl::cat(category));
static cl::opt<int64_t> splits("splits",
                               cl::desc("Decode: splits of the KV length "
                                        "(0: the rule)"),
                               cl::init(0), cl::sub(runCommand),
                               cl::cat(category));

static cl::list<int64_t>
    decodeTile("decode-tile",
               cl::desc("Decode: tile overrides N,S[,P]: keys per K/V tile "
                        "(32, 64, 128), cp.async stages and L2 prefetch "
                        "bytes (-1 none, 64, 128, 256; 0: the defaults)"),
               cl::CommaSeparated, cl::sub(compileCommand), cl::sub(runCommand),
               cl::cat(category));
static cl::opt<std::string>
    kvLayout("kv-layout",
             cl::desc("Decode: contiguous cache layout, bshd ([batch, kv "
                      "len, kv heads, head dim], the default) or bhsd"),
             cl::init("bshd"), cl::sub(runCommand), cl::cat(category));

bool decodeRequested() { return decode; }

llvm::Expected<DecodeSpec> decodeSpecFromOptions() {
  auto attention = specFromOptions();
  if (!attention)
    return attention.takeError();
  if (!attention->isPlain() || attention->causal)
    return llvm::createStringError(
        "--decode takes --head-dim, --dtype, --heads and --kv-heads; it is "
        "causal from the bottom right (no --causal or variant options)");
  DecodeSpec spec;
  spec.headDim = attention->headDim;
  spec.dtype = attention->dtype;
  spec.numHeads = attention->numHeads;
  spec.numKVHeads = attention->numKVHeads;
  spec.qLen = qLen;
  spec.pageSize = pageSize;
  if (!decodeTile.empty()) {
    if (decodeTile.size() != 2 && decodeTile.size() != 3)
      return llvm::createStringError(
          "--decode-tile takes keys per tile, stages and optionally the L2 "
          "prefetch (e.g. 64,3 or 0,0,128)");
    spec.blockN = decodeTile[0];
    spec.stages = decodeTile[1];
    if (decodeTile.size() == 3)
      spec.l2Prefetch = decodeTile[2];
  }
  if (auto err = spec.validate())
    return std::move(err);
  return spec;
}

llvm::Expected<CompiledKernel>
compileDecodeFromOptions(const CompileOptions &options) {
  auto spec = decodeSpecFromOptions();
  if (!spec)
    return spec.takeError();
  return compileDecodeKernel(*spec, options);
}

int runDecode(const DecodeRunSettings &settings) {
  auto spec = decodeSpecFromOptions();
  if (!spec)
    return reportError("run", spec.takeError());
  DecodeCheckOptions options;
  options.batch = settings.batch;
  options.kvLens.assign(kvLen.begin(), kvLen.end());
  if (options.kvLens.empty())
    options.kvLens = {4096};
  options.seed = settings.seed;
  options.numSplits = splits;
  options.scale = settings.scale;
  options.warmup = settings.warmup;
  options.iterations = settings.iterations;
  options.maxCheckedRows = settings.checkRows;
  if (kvLayout != "bshd" && kvLayout != "bhsd")
    return reportError(
        "run", llvm::createStringError("--kv-layout is bshd or bhsd, not '" +
                                       kvLayout + "'"));
  options.kvHeadMajor = kvLayout == "bhsd";
  auto ctx = Context::create();
  if (!ctx)
    return reportError("run", ctx.takeError());
  if (!(*ctx)->device())
    return reportError(
        "run", llvm::createStringError("no GPU: " + (*ctx)->deviceError()));
  auto start = std::chrono::steady_clock::now();
  auto kernel = (*ctx)->decodeKernel(*spec);
  if (!kernel)
    return reportError("run", kernel.takeError());
  double compileMs = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - start)
                         .count();
  auto report = runDecodeAndCheck(**kernel, options);
  if (!report)
    return reportError("run", report.takeError());
  if (settings.json) {
    nlohmann::json j = {
        {"kernel", (*kernel)->info().name},
        {"spec", spec->canonical()},
        {"config", (*kernel)->info().config.canonical()},
        {"device", (*ctx)->device()->name},
        {"batch", options.batch},
        {"kv_lens", options.kvLens},
        {"q_len", spec->qLen},
        {"page_size", spec->pageSize},
        {"kv_layout", spec->paged() ? "paged" : std::string(kvLayout)},
        {"splits", report->numSplits},
        {"seed", options.seed},
        {"rel_error", report->relError},
        {"lse_rel_error", report->lseRelError},
        {"max_abs_error", report->maxAbsError},
        {"non_finite", report->nonFinite},
        {"tolerance", report->tolerance},
        {"passed", report->passed},
        {"compile_ms", compileMs},
        {"median_ms", report->medianMs},
        {"kv_bytes", report->kvBytes},
        {"gb_per_s", report->gbPerSecond}};
    llvm::outs() << j.dump(2) << "\n";
  } else {
    llvm::outs() << (*kernel)->info().name << " ("
                 << (*kernel)->info().config.canonical() << "), batch "
                 << options.batch << ", seed " << options.seed << "\n  "
                 << report->summary() << "\n";
    if (options.iterations > 0)
      llvm::outs() << llvm::formatv("  {0:f4} ms, {1:f1} GB/s of K+V "
                                    "({2:f1} MB)\n",
                                    report->medianMs, report->gbPerSecond,
                                    report->kvBytes / 1e6);
  }
  return report->passed ? 0 : 2;
}

} // namespace flashjit::tools
