//===- AutotuneGpuTest.cpp - empirical tuning on a real GPU ---------------===//
// Why: the autotuner's promises that need a device: every candidate is
// checked and timed with CUDA events, the winner, re-measured beside the
// heuristic's config, is not slower than it, and a database written from the results makes
// Context::compile build the winner, which still computes the right thing.
#include "GpuTestUtil.h"

#include "flashjit/Autotune/TuningPlan.h"
#include "flashjit/Autotune/TuningRun.h"
#include "flashjit/Compiler/ConfigChoice.h"
#include "flashjit/DevTools/BackwardCheck.h"
#include "flashjit/DevTools/Benchmark.h"

#include "llvm/Support/FileSystem.h"

#include <algorithm>

using namespace flashjit;
using namespace flashjit::test;

namespace {
/// A context reading `db`, saved in a folder of its own (removed with it),
/// its warnings collected.
struct TunedContext {
  llvm::SmallString<128> dir;
  std::vector<std::string> warnings;
  std::unique_ptr<Context> ctx;
  explicit TunedContext(const autotune::TuningDatabase &db) {
    REQUIRE(!llvm::sys::fs::createUniqueDirectory("flashjit-tuning", dir));
    std::string path = std::string(dir) + "/db.json";
    REQUIRE_FALSE(bool(db.save(path)));
    ContextOptions options;
    options.cache.directory = std::string(dir) + "/cache";
    options.tuning.database = path;
    options.onWarning = [this](llvm::StringRef m) {
      warnings.push_back(m.str());
    };
    auto made = Context::create(options);
    REQUIRE(bool(made));
    ctx = std::move(*made);
  }
  ~TunedContext() {
    ctx.reset();
    llvm::sys::fs::remove_directories(dir);
  }
};

/// runTuning on one plan: its bucket's result, every candidate's figure
/// or error as a message; the run not stopped and no candidate failed.
autotune::BucketResult tuneOne(const autotune::BucketPlan &plan,
                               autotune::MeasureFn measure) {
  autotune::TuningRunResult run = autotune::runTuning(
      {plan}, measure, [](const autotune::TuningProgress &) {}, {});
  REQUIRE(run.buckets.size() == 1);
  const autotune::BucketResult &result = run.buckets[0];
  for (const autotune::CandidateResult &c : result.tried)
    MESSAGE(c.config.canonical()
            << ": "
            << (c.measurement
                    ? std::to_string(c.measurement->tflops) + " TFLOP/s"
                    : c.error));
  CHECK(run.stoppedBy.empty());
  CHECK(result.failedCount() == 0);
  return result;
}
} // namespace

TEST_CASE("the benchmark checks and times a kernel, reusing its inputs") {
  AttentionSpec spec;
  spec.headDim = 64;
  spec.numHeads = spec.numKVHeads = 4;
  spec.causal = true;
  auto kernel = gpuContext().compile(spec);
  REQUIRE(bool(kernel));
  auto bench = Benchmark::create(freshSeed());
  REQUIRE(bool(bench));
  BenchmarkOptions options;
  options.timing.iterations = 3;
  for (int64_t seqlen : {1000, 257}) { // the second reuses the first's inputs
    CAPTURE(seqlen);
    auto result = (*bench)->run(**kernel, 2, seqlen, options);
    REQUIRE_MESSAGE(bool(result),
                    (result ? "" : llvm::toString(result.takeError())));
    MESSAGE("d64 causal b=2 s=" << seqlen << ": " << result->medianMs << " ms, "
                                << result->tflops << " TFLOP/s, rel "
                                << result->relError);
    CHECK(result->medianMs > 0);
    CHECK(result->tflops > 0);
    CHECK(result->relError <= checkTolerance(spec.dtype));
    CHECK(result->lseRelError <= checkTolerance(spec.dtype));
    CHECK(result->launchesPerSample >= 1);
  }
}

TEST_CASE("one bucket tuned on this GPU: the winner is at least as fast as "
          "the heuristic's config, and compile() builds it") {
  Context &ctx = gpuContext();
  auto model = heuristicDeviceModel(ctx.target(), ctx.heuristicDevice());
  REQUIRE(bool(model));
  autotune::ShapeBucket bucket{64, DType::BF16, false, 1, 1024};
  autotune::PlanOptions planOptions;
  planOptions.maxCandidates = 3;
  autotune::BucketPlan plan = autotune::planBucket(bucket, *model, planOptions);
  REQUIRE_MESSAGE(plan.runnable(), plan.error);
  auto bench = Benchmark::create(freshSeed());
  REQUIRE(bool(bench));
  BenchmarkOptions benchOptions;
  benchOptions.timing.iterations = 3;
  autotune::BucketResult result =
      tuneOne(plan, [&](const autotune::BucketPlan &p, const TileConfig &c) {
        return measureCandidate(ctx, **bench, p, c, benchOptions);
      });
  auto entry = result.entry();
  REQUIRE(entry.has_value());
  REQUIRE(entry->heuristicTflops.has_value());

  // The winner re-measured against the heuristic's config, in the same
  // run, alternating so that clocks and temperature drift hit both: its
  // median must not be slower by more than the noise of such medians.
  // (The tuning run's own figures cannot disagree with its choice.)
  auto tunedKernel = ctx.compile(plan.spec, entry->config);
  auto heuristicKernel = ctx.compile(plan.spec, plan.heuristic);
  REQUIRE(bool(tunedKernel));
  REQUIRE(bool(heuristicKernel));
  BenchmarkOptions again;
  again.timing.iterations = 10;
  std::vector<double> tunedMs, heuristicMs;
  for (int round = 0; round < 7; ++round)
    for (auto [kernel, times] : {std::pair{&*tunedKernel, &tunedMs},
                                 std::pair{&*heuristicKernel, &heuristicMs}}) {
      auto r = (*bench)->run(**kernel, plan.batch, plan.seqlen, again);
      REQUIRE_MESSAGE(bool(r), (r ? "" : llvm::toString(r.takeError())));
      times->push_back(r->medianMs);
    }
  auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  const double tunedMedian = median(tunedMs),
               heuristicMedian = median(heuristicMs);
  // The noise allowed between medians of alternating rounds.
  constexpr double kNoise = 0.03;
  MESSAGE("re-measured: tuned " << entry->config.canonical() << " "
                                << tunedMedian << " ms, heuristic "
                                << plan.heuristic.canonical() << " "
                                << heuristicMedian << " ms");
  CHECK(tunedMedian <= heuristicMedian * (1 + kNoise));

  // A database with the entry, for this GPU, read by a new context.
  autotune::TuningDatabase db(gpuIdentity(*ctx.device()),
                              autotune::builtFlashjitVersion().str());
  db.entries.push_back(*entry);
  TunedContext tuned(db);
  KernelOptions inBucket;
  inBucket.seqlen = 512;
  auto kernel = tuned.ctx->compile(plan.spec, inBucket);
  REQUIRE(bool(kernel));
  CHECK(tuned.warnings.empty());
  CHECK((*kernel)->configOrigin().source == ConfigSource::Tuned);
  CHECK((*kernel)->info().config == entry->config);
  CheckOptions check;
  check.batch = 2;
  check.seqlenQ = check.seqlenK = 300;
  check.seed = freshSeed();
  auto report = runAndCheck(**kernel, check);
  REQUIRE(bool(report));
  CHECK_MESSAGE(report->passed, report->summary());
}

TEST_CASE("one backward bucket tuned on this GPU: every candidate checked "
          "and timed, and compileBackward builds the winner") {
  Context &ctx = gpuContext();
  auto model = heuristicDeviceModel(ctx.target(), ctx.heuristicDevice());
  REQUIRE(bool(model));
  autotune::ShapeBucket bucket{64, DType::BF16, true, 1, 1024};
  autotune::PlanOptions planOptions;
  planOptions.maxCandidates = 3;
  planOptions.tokens = 4096; // a short run: batch 8 x 512
  autotune::BucketPlan plan =
      autotune::planBackwardBucket(bucket, *model, planOptions);
  REQUIRE_MESSAGE(plan.runnable(), plan.error);
  CHECK(plan.candidates.front() == plan.heuristic);
  BenchmarkOptions benchOptions;
  benchOptions.timing.iterations = 3;
  const uint64_t seed = freshSeed();
  autotune::BucketResult result =
      tuneOne(plan, [&](const autotune::BucketPlan &p, const TileConfig &c) {
        return measureBackwardCandidate(ctx, p, c, benchOptions, seed);
      });
  CHECK(result.tried.size() == plan.candidates.size());
  auto entry = result.entry();
  REQUIRE(entry.has_value());
  REQUIRE(entry->heuristicTflops.has_value());
  CHECK(entry->tflops >= *entry->heuristicTflops);

  // A database with the entry, read by a new context: compileBackward
  // builds the winner for a length in the bucket, and it is exact.
  autotune::TuningDatabase db(gpuIdentity(*ctx.device()),
                              autotune::builtFlashjitVersion().str());
  db.replaceBackward(*entry);
  TunedContext tuned(db);
  BackwardOptions inBucket;
  inBucket.seqlen = 300;
  auto resolved = tuned.ctx->resolveBackwardConfig(plan.spec, inBucket);
  REQUIRE(bool(resolved));
  CHECK(resolved->origin.source == ConfigSource::Tuned);
  auto backward = tuned.ctx->compileBackward(plan.spec, inBucket);
  REQUIRE(bool(backward));
  CHECK(tuned.warnings.empty());
  CHECK((*backward)->info().config == entry->config);
  auto forward = tuned.ctx->compile(plan.spec);
  REQUIRE(bool(forward));
  BackwardCheckOptions check;
  check.batch = 2;
  check.seqlenQ = check.seqlenK = 300;
  check.seed = freshSeed();
  auto report = runAndCheckBackward(**forward, **backward, check);
  REQUIRE(bool(report));
  CHECK_MESSAGE(report->passed, report->summary());
}
