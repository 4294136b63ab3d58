//===- TuningRun.cpp - the measuring loop of `flashjit autotune` ----------===//
// Why: see TuningRun.h. The budget is shared out by estimated work, not
// evenly, because a long-sequence bucket costs far more per candidate than
// a short one; the time left is the elapsed time scaled by the work left.
#include "flashjit/Autotune/TuningRun.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>

namespace flashjit::autotune {

char FatalMeasurementError::ID = 0;

void FatalMeasurementError::log(llvm::raw_ostream &os) const { os << Message; }

size_t BucketResult::failedCount() const {
  return std::count_if(
      tried.begin(), tried.end(),
      [](const CandidateResult &c) { return !c.measurement.has_value(); });
}

std::optional<TuningEntry> BucketResult::entry() const {
  const CandidateResult *winner = bestResult();
  if (!winner)
    return std::nullopt;
  TuningEntry entry;
  entry.bucket = plan.bucket;
  entry.config = winner->config;
  entry.tflops = winner->measurement->tflops;
  if (const CandidateResult *h = heuristicResult())
    entry.heuristicTflops = h->measurement->tflops;
  for (const CandidateResult &c : tried)
    if (!c.measurement)
      entry.failed.push_back({c.config, c.error});
  return entry;
}

double candidateWork(const BucketPlan &plan) { return 1.0 + plan.flops / 1e12; }

namespace {

/// The winner among the measured candidates (see RunOptions::minGain).
void pickWinner(BucketResult &result, double minGain) {
  for (size_t i = 0; i < result.tried.size(); ++i) {
    const CandidateResult &c = result.tried[i];
    if (!c.measurement)
      continue;
    if (c.config == result.plan.heuristic && !result.heuristic)
      result.heuristic = i;
    if (!result.best || c.measurement->medianMs <
                            result.tried[*result.best].measurement->medianMs)
      result.best = i;
  }
  if (!result.best) {
    result.error = result.tried.empty() ? "no candidate was measured"
                                        : "every candidate failed (see failed)";
    return;
  }
  if (result.heuristic && *result.best != *result.heuristic) {
    double heuristicMs = result.tried[*result.heuristic].measurement->medianMs;
    double bestMs = result.tried[*result.best].measurement->medianMs;
    if (heuristicMs < bestMs * (1.0 + minGain))
      result.best = result.heuristic;
  }
}

} // namespace

TuningRunResult runTuning(llvm::ArrayRef<BucketPlan> plans, MeasureFn measure,
                          ProgressFn progress, const RunOptions &options) {
  std::function<double()> clock = options.clock;
  if (!clock) {
    auto origin = std::chrono::steady_clock::now();
    clock = [origin] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                           origin)
          .count();
    };
  }
  const double start = clock();
  auto elapsed = [&] { return clock() - start; };

  double totalWork = 0, doneWork = 0;
  for (const BucketPlan &plan : plans)
    if (plan.runnable())
      totalWork += candidateWork(plan) * plan.candidates.size();
  auto workLeft = [&] { return std::max(totalWork - doneWork, 0.0); };

  TuningRunResult run;
  auto finishBucket = [&](BucketResult result) {
    if (options.onBucketDone)
      options.onBucketDone(result);
    run.buckets.push_back(std::move(result));
  };
  for (size_t b = 0; b < plans.size(); ++b) {
    const BucketPlan &plan = plans[b];
    BucketResult result;
    result.plan = plan;
    if (!plan.runnable()) {
      result.error =
          plan.error.empty() ? "no candidate fits the device" : plan.error;
      finishBucket(std::move(result));
      continue;
    }
    const double work = candidateWork(plan);
    const double bucketWork = work * plan.candidates.size();
    auto leaveOut = [&](size_t from, const std::string &why) {
      result.notTried = plan.candidates.size() - from;
      totalWork -= work * result.notTried;
      if (from == 0)
        result.error = why;
    };
    if (!run.stoppedBy.empty()) {
      leaveOut(0, "not measured: the run stopped: " + run.stoppedBy);
      finishBucket(std::move(result));
      continue;
    }
    double now = elapsed();
    if (now >= options.timeBudgetSeconds) {
      run.budgetSpent = true;
      leaveOut(0, llvm::formatv("not measured: the time budget of {0} s was "
                                "spent",
                                options.timeBudgetSeconds)
                      .str());
      finishBucket(std::move(result));
      continue;
    }
    double share =
        (options.timeBudgetSeconds - now) *
        (workLeft() > 0 ? std::min(1.0, bucketWork / workLeft()) : 1);
    double deadline = now + share;

    for (size_t c = 0; c < plan.candidates.size(); ++c) {
      now = elapsed();
      if (c > 0 && now >= deadline) {
        run.budgetSpent = true;
        leaveOut(c, "");
        break;
      }
      TuningProgress p;
      p.bucket = b;
      p.buckets = plans.size();
      p.plan = &plan;
      p.candidate = c;
      p.candidates = plan.candidates.size();
      p.config = &plan.candidates[c];
      p.elapsedSeconds = now;
      p.fractionDone = totalWork > 0 ? std::min(1.0, doneWork / totalWork) : 1;
      if (doneWork > 0)
        p.secondsLeft =
            std::min(now * workLeft() / doneWork,
                     std::max(options.timeBudgetSeconds - now, 0.0));
      progress(p);

      CandidateResult candidate;
      candidate.config = plan.candidates[c];
      auto measured = measure(plan, candidate.config);
      doneWork += work;
      if (measured) {
        candidate.measurement = *measured;
        result.tried.push_back(std::move(candidate));
        continue;
      }
      bool fatal = measured.errorIsA<FatalMeasurementError>();
      candidate.error = llvm::toString(measured.takeError());
      result.tried.push_back(candidate);
      if (fatal) {
        run.stoppedBy = candidate.config.canonical() + ": " + candidate.error;
        leaveOut(c + 1, "");
        break;
      }
    }
    pickWinner(result, options.minGain);
    finishBucket(std::move(result));
  }
  run.seconds = elapsed();
  return run;
}

} // namespace flashjit::autotune
