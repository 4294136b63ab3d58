//===- AutotuneOutput.h - what `flashjit autotune` prints ---------*- C++
//-*-===//
// Why: the command's logic (options, device, database, measuring) and its
// presentation (progress bar, plan listing, summary table, JSON) change for
// different reasons; this header is the presentation.
#ifndef FLASHJIT_TOOLS_AUTOTUNEOUTPUT_H
#define FLASHJIT_TOOLS_AUTOTUNEOUTPUT_H

#include "flashjit/Autotune/DeviceModel.h"
#include "flashjit/Autotune/TuningDatabase.h"
#include "flashjit/Autotune/TuningPlan.h"
#include "flashjit/Autotune/TuningRun.h"

#include "llvm/Support/raw_ostream.h"
#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <vector>

namespace flashjit::tools {

/// "0:42", "12:05", "1:02:03".
std::string formatDuration(double seconds);

/// One line on a terminal, redrawn in place; one line per step elsewhere
/// (logs), so a run under `time` or in CI still shows its progress.
class ProgressBar {
public:
  explicit ProgressBar(llvm::raw_ostream &os);
  void update(const autotune::TuningProgress &progress);
  /// Ends the redrawn line (nothing when not on a terminal).
  void finish();

private:
  llvm::raw_ostream &OS;
  bool Interactive;
  bool Drawn = false;
};

/// What the plan and the summary say about the GPU and the database.
struct AutotuneContext {
  autotune::GpuIdentity gpu;
  /// Where the device model came from, e.g. "the known-GPU table".
  std::string modelSource;
  std::string databasePath;
  /// Entries of the database the results merge into (none: a new one).
  std::optional<size_t> existingEntries;
  /// The kernels tuned: "forward", or "backward" (--backward).
  std::string pass = "forward";
};

void printPlanText(llvm::raw_ostream &os, const AutotuneContext &context,
                   const std::vector<autotune::BucketPlan> &plans);
nlohmann::json planToJson(const AutotuneContext &context,
                          const std::vector<autotune::BucketPlan> &plans);

void printSummaryText(llvm::raw_ostream &os, const AutotuneContext &context,
                      const autotune::TuningRunResult &run,
                      size_t entriesInDatabase);
nlohmann::json summaryToJson(const AutotuneContext &context,
                             const autotune::TuningRunResult &run,
                             double timeBudgetSeconds,
                             size_t entriesInDatabase);

} // namespace flashjit::tools

#endif
