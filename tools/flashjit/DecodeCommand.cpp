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
static cl::opt<int64_t> pageSize(
    "page-size",
    cl::desc("Decode and varlen: tokens per page of a paged KV cache "
             "(decode 16-256, varlen a power of two 16-256; 0: contiguous)"),
    cl::init(0), cl::sub(compileCommand), cl::sub(runCommand),
    cl::cat(category));

int64_t pageSizeOption() { return pageSize; }
static cl::opt<int64_t> splits("splits",
                               cl::desc("Decode: splits of the KV length "
                                        "(0: the rule)"),
                               cl::init(0), cl::sub(runCommand),
                               cl::cat(category));

static cl::list<int64_t>
    decodeTile("decode-tile",
               cl::desc("Decode: tile overrides N,S[,P[,C[,E]]]: keys per "
                        "K/V tile (32, 64, 128), stages, L2 prefetch bytes "
                        "(-1 none, 64, 128, 256), copy mode (1 cp.async, 2 "
                        "bulk copies, sm_90) and L2 evict_first (-1 off, 1 "
                        "on); 0: the defaults"),
               cl::CommaSeparated, cl::sub(compileCommand), cl::sub(runCommand),
               cl::cat(category));
static cl::opt<std::string>
    kvLayout("kv-layout",
             cl::desc("Decode: contiguous cache layout, bshd ([batch, kv "
                      "len, kv heads, head dim], the default) or bhsd"),
             cl::init("bshd"), cl::sub(runCommand), cl::cat(category));

static cl::opt<std::string> decodeVariants(
    "decode-variants",
    cl::desc("Decode: run and time several kernels on the same inputs, "
             "';'-separated N,S,P,C,E,SPLITS (the --decode-tile fields, then "
             "the splits; missing fields 0), e.g. '0;0,0,0,2;0,0,0,1,1,64'"),
    cl::sub(runCommand), cl::cat(category));

bool decodeRequested() { return decode; }

namespace {
/// Applies the N,S,P,C,E tile fields (as many as given) to `spec`.
void applyDecodeTile(DecodeSpec &spec, llvm::ArrayRef<int64_t> fields) {
  int64_t *targets[] = {&spec.blockN, &spec.stages, &spec.l2Prefetch,
                        &spec.copyMode, &spec.evictFirst};
  for (size_t i = 0; i < fields.size() && i < 5; ++i)
    *targets[i] = fields[i];
}

/// --decode-variants' items as (tile fields, splits).
llvm::Expected<std::vector<std::pair<std::vector<int64_t>, int64_t>>>
parseDecodeVariants(llvm::StringRef text) {
  std::vector<std::pair<std::vector<int64_t>, int64_t>> variants;
  llvm::SmallVector<llvm::StringRef> items;
  text.split(items, ';', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef item : items) {
    llvm::SmallVector<llvm::StringRef> fields;
    item.split(fields, ',');
    if (fields.size() > 6)
      return llvm::createStringError(
          "a --decode-variants item has at most 6 fields (N,S,P,C,E,SPLITS): '" +
          item.str() + "'");
    std::vector<int64_t> values;
    for (llvm::StringRef f : fields) {
      int64_t v = 0;
      if (f.trim().getAsInteger(10, v))
        return llvm::createStringError("'" + f.str() +
                                       "' in --decode-variants is not an "
                                       "integer");
      values.push_back(v);
    }
    int64_t splitCount = values.size() == 6 ? values[5] : 0;
    values.resize(std::min<size_t>(values.size(), 5));
    variants.push_back({values, splitCount});
  }
  if (variants.empty())
    return llvm::createStringError("--decode-variants lists no kernel");
  return variants;
}
} // namespace

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
    if (decodeTile.size() < 2 || decodeTile.size() > 5)
      return llvm::createStringError(
          "--decode-tile takes keys per tile, stages and optionally the L2 "
          "prefetch, copy mode and evict_first (e.g. 64,3 or 0,0,128,2,1)");
    std::vector<int64_t> fields(decodeTile.begin(), decodeTile.end());
    applyDecodeTile(spec, fields);
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

namespace {
/// `run --decode --decode-variants`: every variant on the same inputs.
int runDecodeVariantsCommand(Context &ctx, const DecodeSpec &base,
                             const DecodeCheckOptions &options, bool json) {
  auto variants = parseDecodeVariants(decodeVariants);
  if (!variants)
    return reportError("run", variants.takeError());
  std::vector<std::shared_ptr<const DecodeKernel>> kernels;
  std::vector<const DecodeKernel *> pointers;
  std::vector<int64_t> splitCounts;
  for (auto &[fields, splitCount] : *variants) {
    DecodeSpec spec = base;
    spec.blockN = spec.stages = spec.l2Prefetch = spec.copyMode =
        spec.evictFirst = 0;
    applyDecodeTile(spec, fields);
    if (auto err = spec.validate())
      return reportError("run", std::move(err));
    auto kernel = ctx.decodeKernel(spec);
    if (!kernel)
      return reportError("run", kernel.takeError());
    kernels.push_back(*kernel);
    pointers.push_back(kernels.back().get());
    splitCounts.push_back(splitCount);
  }
  auto reports = runDecodeVariants(pointers, options, splitCounts);
  if (!reports)
    return reportError("run", reports.takeError());
  bool passed = true;
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < reports->size(); ++i) {
    const DecodeCheckReport &r = (*reports)[i];
    passed = passed && r.passed;
    rows.push_back({{"kernel", kernels[i]->info().name},
                    {"spec", kernels[i]->spec().canonical()},
                    {"splits", r.numSplits},
                    {"rel_error", r.relError},
                    {"passed", r.passed},
                    {"median_ms", r.medianMs},
                    {"gb_per_s", r.gbPerSecond}});
    if (!json)
      llvm::outs() << kernels[i]->info().name << "\n  " << r.summary()
                   << llvm::formatv("\n  {0:f4} ms, {1:f1} GB/s\n",
                                    r.medianMs, r.gbPerSecond);
  }
  if (json)
    llvm::outs() << nlohmann::json({{"batch", options.batch},
                                    {"kv_lens", options.kvLens},
                                    {"device", ctx.device()->name},
                                    {"variants", rows}})
                        .dump(1)
                 << "\n";
  return passed ? 0 : 2;
}
} // namespace

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
  auto ctx = gpuContext();
  if (!ctx)
    return reportError("run", ctx.takeError());
  if (!decodeVariants.empty())
    return runDecodeVariantsCommand(**ctx, *spec, options, settings.json);
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
        {"tuned_variants", (*kernel)->tunedVariants().size()},
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
    j.update(buildFields());
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
