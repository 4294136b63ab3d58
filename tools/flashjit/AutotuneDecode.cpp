//===- AutotuneDecode.cpp - `flashjit autotune --decode` ------------------===//
// Why: a decode kernel's best tile, copy path, L2 hint and split count
// depend on the batch and the cache length (DecodeTuning.h). This times
// every candidate of each (batch x KV length) bucket of one decode problem
// on the same inputs (checked against the float64 reference, outputs
// poisoned), keeps the fastest that beats the default by --min-gain
// percent (else the default), and merges the winners into the tuning
// database's decode entries, saving after each bucket.
#include "AutotuneDecode.h"

#include "flashjit/Autotune/DecodeTuning.h"
#include "flashjit/Decode.h"
#include "flashjit/DevTools/DecodeHarness.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include <nlohmann/json.hpp>

#include <chrono>

namespace cl = llvm::cl;

namespace flashjit::tools {

static cl::opt<bool> decodeTuning(
    "decode",
    cl::desc("Tune decode kernels (per batch x KV length bucket of one "
             "problem: --heads, --kv-heads, --q-len, --page-size, the first "
             "--head-dims and --dtype) instead of the forward kernels"),
    cl::sub(autotuneCommand), cl::cat(category));
static cl::opt<int64_t> tuneHeads("heads", cl::desc("Decode: query heads"),
                                  cl::init(32), cl::sub(autotuneCommand),
                                  cl::cat(category));
static cl::opt<int64_t> tuneKvHeads("kv-heads", cl::desc("Decode: KV heads"),
                                    cl::init(8), cl::sub(autotuneCommand),
                                    cl::cat(category));
static cl::opt<int64_t> tuneQLen("q-len",
                                 cl::desc("Decode: query tokens per sequence"),
                                 cl::init(1), cl::sub(autotuneCommand),
                                 cl::cat(category));
static cl::opt<int64_t>
    tunePageSize("page-size",
                 cl::desc("Decode: page size of the cache (0: contiguous)"),
                 cl::init(0), cl::sub(autotuneCommand), cl::cat(category));
static cl::list<int64_t> batchStarts(
    "decode-batch-starts",
    cl::desc("Decode: increasing starts of the batch ranges (default "
             "1,4,16,64)"),
    cl::CommaSeparated, cl::sub(autotuneCommand), cl::cat(category));
static cl::list<int64_t> kvStarts(
    "decode-kv-starts",
    cl::desc("Decode: increasing starts of the KV length ranges (default "
             "1,4096,32768)"),
    cl::CommaSeparated, cl::sub(autotuneCommand), cl::cat(category));

bool decodeAutotuneRequested() { return decodeTuning; }

namespace {
llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(message.str());
}

llvm::Expected<std::vector<autotune::DecodeBucket>>
decodeBuckets(const DecodeAutotuneSettings &s) {
  autotune::DecodeBucket problem;
  problem.headDim = s.headDims.empty() ? 128 : s.headDims.front();
  if (!s.dtypes.empty()) {
    auto dtype = parseDType(s.dtypes.front());
    if (!dtype)
      return dtype.takeError();
    problem.dtype = *dtype;
  }
  problem.numHeads = tuneHeads;
  problem.numKVHeads = tuneKvHeads;
  problem.qLen = tuneQLen;
  problem.pageSize = tunePageSize;
  if (auto err = problem.spec().validate())
    return std::move(err);
  std::vector<int64_t> b(batchStarts.begin(), batchStarts.end());
  std::vector<int64_t> k(kvStarts.begin(), kvStarts.end());
  auto all = autotune::makeDecodeBuckets(
      problem, b.empty() ? std::vector<int64_t>{1, 4, 16, 64} : b,
      k.empty() ? std::vector<int64_t>{1, 4096, 32768} : k);
  if (!all)
    return all.takeError();
  std::vector<autotune::DecodeBucket> kept;
  for (const autotune::DecodeBucket &bucket : *all) {
    bool match = s.bucketFilter.empty();
    for (const std::string &pattern : s.bucketFilter)
      match = match || bucket.describe().find(pattern) != std::string::npos;
    if (match)
      kept.push_back(bucket);
  }
  if (kept.empty()) {
    std::string names;
    for (const autotune::DecodeBucket &bucket : *all)
      names += "\n  " + bucket.describe();
    return fail("no decode bucket matches --buckets; the buckets are:" + names);
  }
  return kept;
}
} // namespace

int runDecodeAutotune(Context &ctx, const std::string &dbPath,
                      std::optional<autotune::TuningDatabase> existing,
                      const autotune::GpuIdentity &gpu,
                      const DecodeAutotuneSettings &s) {
  auto buckets = decodeBuckets(s);
  if (!buckets)
    return reportError("autotune", buckets.takeError());
  const int cc = ctx.target().computeCapability;
  const int64_t shared =
      ctx.device() ? ctx.device()->sharedMemoryPerBlockOptin : 227 * 1024;
  if (s.dryRun) {
    nlohmann::json plan = nlohmann::json::array();
    for (const autotune::DecodeBucket &bucket : *buckets) {
      nlohmann::json candidates = nlohmann::json::array();
      for (const auto &c : autotune::decodeCandidates(bucket, cc, shared))
        candidates.push_back(c.describe());
      plan.push_back({{"bucket", bucket.describe()},
                      {"batch", bucket.tuningBatch()},
                      {"kv_len", bucket.tuningKvLen()},
                      {"candidates", candidates}});
      if (!s.json) {
        llvm::outs() << bucket.describe() << ": batch " << bucket.tuningBatch()
                     << " x " << bucket.tuningKvLen() << " keys\n";
        for (const auto &c : autotune::decodeCandidates(bucket, cc, shared))
          llvm::outs() << "  " << c.describe() << "\n";
      }
    }
    if (s.json)
      llvm::outs()
          << nlohmann::json({{"database", dbPath}, {"decode", plan}}).dump(2)
          << "\n";
    return 0;
  }

  autotune::TuningDatabase db =
      existing ? std::move(*existing) : autotune::TuningDatabase(gpu, "");
  db.gpu = gpu;
  db.flashjitVersion = autotune::builtFlashjitVersion().str();
  auto start = std::chrono::steady_clock::now();
  nlohmann::json results = nlohmann::json::array();
  size_t written = 0;
  std::string stoppedBy;
  for (const autotune::DecodeBucket &bucket : *buckets) {
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (elapsed > s.timeBudget) {
      stoppedBy = llvm::formatv("the time budget of {0} s", s.timeBudget).str();
      break;
    }
    std::vector<autotune::DecodeTunedConfig> candidates =
        autotune::decodeCandidates(bucket, cc, shared);
    std::vector<std::shared_ptr<const DecodeKernel>> kernels;
    std::vector<const DecodeKernel *> pointers;
    std::vector<autotune::DecodeTunedConfig> built;
    std::vector<int64_t> splits;
    nlohmann::json failed = nlohmann::json::array();
    const int64_t batch = bucket.tuningBatch(), kvLen = bucket.tuningKvLen();
    for (const autotune::DecodeTunedConfig &c : candidates) {
      auto kernel = ctx.decodeKernel(c.applied(bucket.spec()));
      if (!kernel) {
        failed.push_back({{"config", c.describe()},
                          {"error", llvm::toString(kernel.takeError())}});
        continue;
      }
      kernels.push_back(*kernel);
      pointers.push_back(kernels.back().get());
      built.push_back(c);
      splits.push_back((*kernel)->ruleSplits(batch, kvLen, c.splitWaves));
    }
    if (pointers.empty())
      continue;
    DecodeCheckOptions options;
    options.batch = batch;
    options.kvLens = {kvLen};
    options.seed = s.seed + written;
    options.warmup = s.warmup;
    options.iterations = s.iterations;
    options.maxCheckedRows = 16;
    auto reports = runDecodeVariants(pointers, options, splits);
    if (!reports) {
      results.push_back({{"bucket", bucket.describe()},
                         {"error", llvm::toString(reports.takeError())}});
      continue;
    }
    // The default is candidate 0 when it built.
    std::optional<double> defaultGbps;
    if (built.front() == autotune::DecodeTunedConfig{} && (*reports)[0].passed)
      defaultGbps = (*reports)[0].gbPerSecond;
    size_t best = reports->size();
    nlohmann::json timed = nlohmann::json::array();
    for (size_t i = 0; i < reports->size(); ++i) {
      const DecodeCheckReport &r = (*reports)[i];
      timed.push_back({{"config", built[i].describe()},
                       {"splits", r.numSplits},
                       {"passed", r.passed},
                       {"gbps", r.gbPerSecond}});
      if (r.passed && (best == reports->size() ||
                       r.gbPerSecond > (*reports)[best].gbPerSecond))
        best = i;
    }
    if (best == reports->size())
      continue;
    // A config must beat the default by --min-gain to replace it.
    if (defaultGbps &&
        (*reports)[best].gbPerSecond < *defaultGbps * (1 + s.minGain / 100))
      best = 0;
    autotune::DecodeTuningEntry entry;
    entry.bucket = bucket;
    entry.config = built[best];
    entry.gbps = (*reports)[best].gbPerSecond;
    entry.defaultGbps = defaultGbps;
    db.replaceDecode(entry);
    ++written;
    if (auto err = db.save(dbPath))
      return reportError("autotune", std::move(err));
    results.push_back(
        {{"bucket", bucket.describe()},
         {"batch", batch},
         {"kv_len", kvLen},
         {"chosen", entry.config.describe()},
         {"gbps", entry.gbps},
         {"default_gbps",
          defaultGbps ? nlohmann::json(*defaultGbps) : nlohmann::json(nullptr)},
         {"timed", timed},
         {"failed", failed}});
    if (!s.json)
      llvm::outs() << llvm::formatv(
          "{0}: {1} ({2:f0} GB/s; default {3})\n", bucket.describe(),
          entry.config.describe(), entry.gbps,
          defaultGbps ? llvm::formatv("{0:f0} GB/s", *defaultGbps).str()
                      : std::string("n/a"));
  }
  if (s.json)
    llvm::outs() << nlohmann::json({{"database", dbPath},
                                    {"decode_entries", db.decodeEntries.size()},
                                    {"buckets", results}})
                        .dump(2)
                 << "\n";
  else
    llvm::outs() << "saved " << written << " decode bucket(s) to " << dbPath
                 << "\n";
  if (written == 0)
    return reportError("autotune",
                       fail("no decode bucket could be measured; nothing was "
                            "written"));
  if (!stoppedBy.empty())
    return reportError("autotune",
                       fail("stopped early: " + stoppedBy +
                            "; the buckets measured before were saved"));
  return 0;
}

} // namespace flashjit::tools
