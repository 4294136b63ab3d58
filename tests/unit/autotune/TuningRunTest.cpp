//===- TuningRunTest.cpp - the decisions of the measuring loop ------------===//
// Why: on the GPU the loop's decisions cannot be checked config by config;
// here a fake measurement makes every outcome happen on purpose: winners
// and noise, failures, a fault that stops the run, a spent time budget, and
// the progress a user sees.
#include "AutotuneTestUtil.h"

#include "flashjit/Autotune/TuningRun.h"

#include <map>
#include <random>

using namespace flashjit;
using namespace flashjit::autotune;
using flashjit::autotune::testing::knownGPU;

namespace {

/// Plans of the default buckets on an H100, with `perBucket` candidates.
std::vector<BucketPlan> h100Plans(unsigned perBucket = 0) {
  PlanOptions options;
  options.maxCandidates = perBucket;
  auto plans = planTuning(defaultBuckets(), knownGPU("h100"), options);
  REQUIRE(static_cast<bool>(plans));
  return *plans;
}

/// A fake GPU: a time per config name (default 10 ms), failures by name,
/// and a clock that advances by the time of each measurement.
struct FakeGpu {
  std::map<std::string, double> ms;
  std::map<std::string, std::string> failures;
  std::string fatal;
  double clockSeconds = 0;
  /// Well under the default budget for every candidate of every bucket.
  double secondsPerMeasurement = 0.25;
  std::vector<std::string> measured;

  llvm::Expected<Measurement> measure(const BucketPlan &plan,
                                      const TileConfig &config) {
    std::string name = config.canonical();
    measured.push_back(plan.bucket.describe() + " " + name);
    clockSeconds += secondsPerMeasurement;
    if (name == fatal)
      return llvm::make_error<FatalMeasurementError>("illegal address");
    if (auto it = failures.find(name); it != failures.end())
      return llvm::createStringError(it->second);
    double t = ms.count(name) ? ms[name] : 10.0;
    return Measurement{t, plan.flops / (t * 1e-3) / 1e12};
  }
  TuningRunResult run(llvm::ArrayRef<BucketPlan> plans, RunOptions options = {},
                      std::vector<TuningProgress> *progress = nullptr) {
    options.clock = [this] { return clockSeconds; };
    return runTuning(
        plans,
        [this](const BucketPlan &p, const TileConfig &c) {
          return measure(p, c);
        },
        [progress](const TuningProgress &p) {
          if (progress)
            progress->push_back(p);
        },
        options);
  }
};

} // namespace

TEST_CASE("the fastest config wins, and never loses to the heuristic's") {
  std::vector<BucketPlan> plans = h100Plans();
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> time(1.0, 20.0);
  for (int round = 0; round < 20; ++round) {
    FakeGpu gpu;
    for (const BucketPlan &plan : plans)
      for (const TileConfig &config : plan.candidates)
        gpu.ms[config.canonical()] = time(rng);
    TuningRunResult run = gpu.run(plans);
    REQUIRE(run.buckets.size() == plans.size());
    for (const BucketResult &b : run.buckets) {
      CAPTURE(b.plan.bucket.describe());
      REQUIRE(b.bestResult());
      REQUIRE(b.heuristicResult());
      CHECK(b.heuristicResult()->config == b.plan.heuristic);
      CHECK(b.tried.size() == b.plan.candidates.size());
      auto entry = b.entry();
      REQUIRE(entry.has_value());
      REQUIRE(entry->heuristicTflops.has_value());
      CHECK(entry->tflops >= *entry->heuristicTflops);
      CHECK(entry->config == b.bestResult()->config);
      // Nothing measured is more than 2% faster than the winner.
      for (const CandidateResult &c : b.tried)
        CHECK(c.measurement->medianMs * 1.02 >=
              b.bestResult()->measurement->medianMs);
    }
    CHECK_FALSE(run.budgetSpent);
    CHECK(run.stoppedBy.empty());
  }
}

TEST_CASE("noise does not replace the heuristic's config; a real gain does") {
  std::vector<BucketPlan> plans = h100Plans(3);
  plans.resize(1);
  const BucketPlan &plan = plans[0];
  std::string heuristic = plan.heuristic.canonical();
  std::string other = plan.candidates[1].canonical();

  FakeGpu noise;
  noise.ms[heuristic] = 10.0;
  noise.ms[other] = 9.9; // 1% faster: within noise
  BucketResult kept = noise.run(plans).buckets[0];
  CHECK(kept.bestResult()->config == plan.heuristic);

  FakeGpu gain;
  gain.ms[heuristic] = 10.0;
  gain.ms[other] = 8.0;
  BucketResult replaced = gain.run(plans).buckets[0];
  CHECK(replaced.bestResult()->config.canonical() == other);
  auto entry = replaced.entry();
  REQUIRE(entry.has_value());
  CHECK(entry->tflops == doctest::Approx(*entry->heuristicTflops * 10.0 / 8.0));

  RunOptions strict;
  strict.minGain = 0;
  BucketResult anyGain = noise.run(plans, strict).buckets[0];
  CHECK(anyGain.bestResult()->config.canonical() == other);
}

TEST_CASE("failed candidates are recorded, not fatal") {
  std::vector<BucketPlan> plans = h100Plans(4);
  plans.resize(2);
  FakeGpu gpu;
  // The heuristic's config of the first bucket fails to compile; another
  // config fails in both buckets at launch.
  std::string heuristic = plans[0].heuristic.canonical();
  std::string launchFails = plans[0].candidates[2].canonical();
  gpu.failures[heuristic] = "does not build: ptxas error";
  gpu.failures[launchFails] =
      "cuLaunchKernel: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
  TuningRunResult run = gpu.run(plans);
  CHECK(run.stoppedBy.empty());
  for (const BucketResult &b : run.buckets) {
    CAPTURE(b.plan.bucket.describe());
    CHECK(b.tried.size() == b.plan.candidates.size());
    auto entry = b.entry();
    REQUIRE(entry.has_value());
    CHECK(b.error.empty());
    CHECK(entry->config.canonical() != launchFails);
    bool launchFailureRecorded = false;
    for (const FailedConfig &f : entry->failed)
      if (f.config.canonical() == launchFails)
        launchFailureRecorded =
            f.error.find("LAUNCH_OUT_OF_RESOURCES") != std::string::npos;
    CHECK(launchFailureRecorded ==
          llvm::is_contained(b.plan.candidates, plans[0].candidates[2]));
  }
  // Without the heuristic's measurement the entry says so.
  auto first = run.buckets[0].entry();
  CHECK_FALSE(first->heuristicTflops.has_value());
  CHECK(first->failed.front().error == "does not build: ptxas error");
  CHECK(run.buckets[0].failedCount() == 2);

  // Every candidate failing: no entry, and why.
  FakeGpu broken;
  for (const TileConfig &config : plans[1].candidates)
    broken.failures[config.canonical()] = "wrong results";
  BucketResult none = broken.run({plans[1]}).buckets[0];
  CHECK_FALSE(none.entry().has_value());
  CHECK(none.error.find("every candidate failed") == 0);
  CHECK(none.failedCount() == plans[1].candidates.size());
}

TEST_CASE("a fatal failure stops the run and keeps what was measured") {
  std::vector<BucketPlan> plans = h100Plans(3);
  plans.resize(3);
  FakeGpu gpu;
  // Distinct configs per bucket are not guaranteed: stop at the second
  // candidate of the second bucket by counting measurements.
  int count = 0;
  TuningRunResult run = runTuning(
      plans,
      [&](const BucketPlan &plan,
          const TileConfig &config) -> llvm::Expected<Measurement> {
        if (++count == 5)
          return llvm::make_error<FatalMeasurementError>(
              "CUDA_ERROR_ILLEGAL_ADDRESS");
        return gpu.measure(plan, config);
      },
      [](const TuningProgress &) {}, {});
  CHECK(run.stoppedBy.find("CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos);
  REQUIRE(run.buckets.size() == 3);
  CHECK(run.buckets[0].entry().has_value());
  // The second bucket: its heuristic's config was measured before the fault.
  const BucketResult &second = run.buckets[1];
  CHECK(second.tried.size() == 2);
  CHECK(second.notTried == 1);
  REQUIRE(second.entry().has_value());
  CHECK(second.entry()->failed.size() == 1);
  const BucketResult &third = run.buckets[2];
  CHECK(third.tried.empty());
  CHECK_FALSE(third.entry().has_value());
  CHECK(third.error.find("the run stopped") != std::string::npos);
  CHECK(count == 5);
}

TEST_CASE("the time budget: shares by work, the heuristic's config first") {
  std::vector<BucketPlan> plans = h100Plans();
  FakeGpu gpu;
  gpu.secondsPerMeasurement = 10;
  RunOptions options;
  options.timeBudgetSeconds = 200; // far less than 96 x 10 s
  TuningRunResult run = gpu.run(plans, options);
  CHECK(run.budgetSpent);
  // Never past the budget by more than one measurement.
  CHECK(run.seconds <= options.timeBudgetSeconds + gpu.secondsPerMeasurement);
  size_t tuned = 0;
  for (const BucketResult &b : run.buckets) {
    CAPTURE(b.plan.bucket.describe());
    CHECK(b.tried.size() + b.notTried == b.plan.candidates.size());
    if (b.tried.empty()) {
      CHECK(b.error.find("time budget") != std::string::npos);
      continue;
    }
    ++tuned;
    CHECK(b.tried.front().config == b.plan.heuristic);
    CHECK(b.entry().has_value());
  }
  CHECK(tuned >= 1);
  CHECK(tuned < plans.size());

  // A generous budget measures everything.
  FakeGpu relaxed;
  relaxed.secondsPerMeasurement = 0.25;
  TuningRunResult all = relaxed.run(plans);
  CHECK_FALSE(all.budgetSpent);
  size_t candidates = 0;
  for (const BucketPlan &p : plans)
    candidates += p.candidates.size();
  CHECK(relaxed.measured.size() == candidates);
}

TEST_CASE("progress: every candidate announced, time left estimated") {
  std::vector<BucketPlan> plans = h100Plans(2);
  plans.resize(4);
  FakeGpu gpu;
  gpu.secondsPerMeasurement = 1;
  std::vector<TuningProgress> progress;
  TuningRunResult run = gpu.run(plans, {}, &progress);
  REQUIRE(progress.size() == 8);
  CHECK_FALSE(progress[0].secondsLeft.has_value());
  CHECK(progress[0].fractionDone == 0);
  double lastFraction = 0;
  for (size_t i = 0; i < progress.size(); ++i) {
    const TuningProgress &p = progress[i];
    CAPTURE(i);
    CHECK(p.buckets == 4);
    CHECK(p.bucket == i / 2);
    CHECK(p.candidate == i % 2);
    CHECK(p.candidates == 2);
    REQUIRE(p.config);
    CHECK(*p.config == plans[i / 2].candidates[i % 2]);
    CHECK(p.elapsedSeconds == doctest::Approx(double(i)));
    CHECK(p.fractionDone >= lastFraction);
    lastFraction = p.fractionDone;
    if (i > 0) {
      REQUIRE(p.secondsLeft.has_value());
      CHECK(*p.secondsLeft >= 0);
    }
  }
  // Work is weighted by FLOPs: the long-sequence bucket (index 2) counts
  // more than the short one (index 0).
  double firstBucket = progress[2].fractionDone;
  double thirdBucket = progress[6].fractionDone - progress[4].fractionDone;
  CHECK(thirdBucket > firstBucket);
  // Right before the last candidate, the estimate is the elapsed time scaled
  // by the work left.
  const TuningProgress &last = progress.back();
  double done = last.fractionDone;
  CHECK(*last.secondsLeft ==
        doctest::Approx(last.elapsedSeconds * (1 - done) / done));
  CHECK(run.seconds == doctest::Approx(8));
}

TEST_CASE("an unrunnable plan passes its reason through") {
  auto plans = planTuning(defaultBuckets(), knownGPU("t4"));
  REQUIRE(static_cast<bool>(plans));
  FakeGpu gpu;
  TuningRunResult run = gpu.run(*plans);
  CHECK(gpu.measured.empty());
  for (const BucketResult &b : run.buckets) {
    CHECK(b.error.find("no tile config runs") == 0);
    CHECK_FALSE(b.entry().has_value());
  }
}

TEST_CASE("each bucket is handed over as soon as it is final") {
  std::vector<BucketPlan> plans = h100Plans(2);
  plans.resize(3);
  FakeGpu gpu;
  std::vector<std::string> done;
  size_t measuredWhenSecondDone = 0;
  RunOptions options;
  options.onBucketDone = [&](const BucketResult &b) {
    done.push_back(b.plan.bucket.describe());
    CHECK(b.entry().has_value());
    if (done.size() == 2)
      measuredWhenSecondDone = gpu.measured.size();
  };
  TuningRunResult run = gpu.run(plans, options);
  REQUIRE(done.size() == 3);
  for (size_t i = 0; i < 3; ++i)
    CHECK(done[i] == plans[i].bucket.describe());
  // Before the third bucket's first measurement.
  CHECK(measuredWhenSecondDone == 4);
  CHECK(run.buckets.size() == 3);
}
