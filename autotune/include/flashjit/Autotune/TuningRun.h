//===- TuningRun.h - the measuring loop of `flashjit autotune` ----*- C++
//-*-===//
// Why: the loop's decisions (which candidates run within the time budget,
// what a failure means, which config wins, how much time is left) do not
// depend on how a config is measured. The measurement is passed in: the
// command line compiles and times on the GPU, the unit tests pass a fake,
// so every decision is tested without a GPU.
#ifndef FLASHJIT_AUTOTUNE_TUNINGRUN_H
#define FLASHJIT_AUTOTUNE_TUNINGRUN_H

#include "flashjit/Autotune/TuningDatabase.h"
#include "flashjit/Autotune/TuningPlan.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace flashjit::autotune {

/// The time of one config on a bucket's representative shape.
struct Measurement {
  double medianMs = 0;
  double tflops = 0;
};

/// A measurement failure after which nothing more can be measured in this
/// process (say a kernel fault left the CUDA context unusable). The run
/// stops; what was measured before is kept.
class FatalMeasurementError : public llvm::ErrorInfo<FatalMeasurementError> {
public:
  static char ID;
  explicit FatalMeasurementError(std::string message)
      : Message(std::move(message)) {}
  void log(llvm::raw_ostream &os) const override;
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }

private:
  std::string Message;
};

/// Compiles, runs and times one config on the plan's shape. An error
/// (compile, launch, wrong results) marks the config failed; a
/// FatalMeasurementError also stops the run.
using MeasureFn = llvm::function_ref<llvm::Expected<Measurement>(
    const BucketPlan &plan, const TileConfig &config)>;

struct CandidateResult {
  TileConfig config;
  /// None when it failed.
  std::optional<Measurement> measurement;
  std::string error;
};

struct BucketResult {
  BucketPlan plan;
  /// In the order measured (the heuristic's config first).
  std::vector<CandidateResult> tried;
  /// Index in `tried` of the winner, and of the heuristic's config when it
  /// was measured.
  std::optional<size_t> best;
  std::optional<size_t> heuristic;
  /// Candidates of the plan never started (time budget spent, run stopped).
  size_t notTried = 0;
  /// Why the bucket has no entry (plan error, every candidate failed, no
  /// time left, run stopped); empty when it has one.
  std::string error;

  const CandidateResult *bestResult() const {
    return best ? &tried[*best] : nullptr;
  }
  const CandidateResult *heuristicResult() const {
    return heuristic ? &tried[*heuristic] : nullptr;
  }
  size_t failedCount() const;
  /// The database entry: the winner, its TFLOP/s, the heuristic's, the
  /// failed configs. None when nothing was measured.
  std::optional<TuningEntry> entry() const;
};

/// What the loop is about to do, for a progress display.
struct TuningProgress {
  size_t bucket = 0, buckets = 0; ///< 0-based index, and the count
  const BucketPlan *plan = nullptr;
  size_t candidate = 0, candidates = 0; ///< 0-based index, and the count
  const TileConfig *config = nullptr;
  double elapsedSeconds = 0;
  /// Share of the estimated work done, in [0, 1].
  double fractionDone = 0;
  /// None until something was measured.
  std::optional<double> secondsLeft;
};
using ProgressFn = llvm::function_ref<void(const TuningProgress &)>;

struct RunOptions {
  /// Past this many seconds no candidate is started. A bucket gets the share
  /// of the time left that its estimated work is of the work left; its
  /// first candidate (the heuristic's config) runs while any time is left.
  double timeBudgetSeconds = 540;
  /// Another config replaces the heuristic's only when it is faster by this
  /// fraction (0.02: 2%), so noise never swaps in an equal config.
  double minGain = 0.02;
  /// Seconds from any fixed start; unset: a steady clock (tests pass a fake).
  std::function<double()> clock;
  /// Called with each bucket's result as soon as it is final (to save
  /// progress: an interrupted run keeps the buckets already measured).
  std::function<void(const BucketResult &)> onBucketDone;
};

struct TuningRunResult {
  std::vector<BucketResult> buckets;
  double seconds = 0;
  /// Some candidate or bucket was left out because the budget was spent.
  bool budgetSpent = false;
  /// The message of the FatalMeasurementError that stopped the run, if any.
  std::string stoppedBy;
};

/// The estimated cost of one candidate of a plan, in arbitrary units: a
/// fixed part (compile, load, check) plus one per TFLOP of the shape.
double candidateWork(const BucketPlan &plan);

/// Measures the plans' candidates in order and picks each bucket's winner:
/// the fastest measured config, unless the heuristic's is within minGain of
/// it. A winner is therefore never slower than the heuristic's config as
/// measured. `progress` is called before each candidate.
TuningRunResult runTuning(llvm::ArrayRef<BucketPlan> plans, MeasureFn measure,
                          ProgressFn progress, const RunOptions &options);

} // namespace flashjit::autotune

#endif
