//===- AutotuneOutput.cpp - what `flashjit autotune` prints ---------------===//
// Why: see AutotuneOutput.h. The text forms are for people (aligned
// columns, one line per failure); the JSON forms carry every number.
#include "AutotuneOutput.h"

#include "flashjit/Autotune/ConfigJson.h"

#include "llvm/Support/FormatVariadic.h"
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>

namespace flashjit::tools {

using autotune::BucketPlan;
using autotune::BucketResult;
using autotune::CandidateResult;
using autotune::TuningRunResult;
using nlohmann::json;

std::string formatDuration(double seconds) {
  long total = std::lround(std::max(seconds, 0.0));
  long h = total / 3600, m = (total % 3600) / 60, s = total % 60;
  char text[32];
  if (h > 0)
    std::snprintf(text, sizeof(text), "%ld:%02ld:%02ld", h, m, s);
  else
    std::snprintf(text, sizeof(text), "%ld:%02ld", m, s);
  return text;
}

ProgressBar::ProgressBar(llvm::raw_ostream &os)
    : OS(os), Interactive(os.is_displayed()) {}

void ProgressBar::update(const autotune::TuningProgress &p) {
  constexpr int kWidth = 20;
  int filled = static_cast<int>(p.fractionDone * kWidth);
  std::string bar(filled, '#');
  bar.resize(kWidth, '.');
  std::string left = p.secondsLeft
                         ? "~" + formatDuration(*p.secondsLeft) + " left"
                         : std::string("estimating time left");
  std::string line = llvm::formatv(
      "[{0}] {1,3}% bucket {2}/{3} {4} | candidate {5}/{6} {7} | {8} "
      "elapsed, {9}",
      bar, static_cast<int>(p.fractionDone * 100), p.bucket + 1, p.buckets,
      p.plan ? p.plan->bucket.describe() : std::string(), p.candidate + 1,
      p.candidates, p.config ? p.config->canonical() : std::string(),
      formatDuration(p.elapsedSeconds), left);
  if (Interactive)
    OS << "\r" << line << "\x1b[K";
  else
    OS << line << "\n";
  OS.flush();
  Drawn = true;
}

void ProgressBar::finish() {
  if (Interactive && Drawn)
    OS << "\n";
  OS.flush();
}

namespace {

json gpuToJson(const autotune::GpuIdentity &gpu) {
  return {{"name", gpu.name},
          {"cc", llvm::formatv("{0}.{1}", gpu.ccMajor, gpu.ccMinor).str()},
          {"driver", gpu.driver}};
}

std::string shapeText(const BucketPlan &plan) {
  return llvm::formatv("batch {0}, heads {1}, seqlen {2}", plan.batch,
                       plan.spec.numHeads, plan.seqlen)
      .str();
}

/// The first line of an error, for one-line listings.
std::string firstLine(llvm::StringRef text) {
  return text.split('\n').first.str();
}

json measuredJson(const CandidateResult *c) {
  if (!c || !c->measurement)
    return nullptr;
  return {{"config", c->config.canonical()},
          {"config_fields", autotune::tileConfigToJson(c->config)},
          {"tflops", c->measurement->tflops},
          {"median_ms", c->measurement->medianMs}};
}

} // namespace

void printPlanText(llvm::raw_ostream &os, const AutotuneContext &context,
                   const std::vector<BucketPlan> &plans) {
  size_t total = 0;
  for (const BucketPlan &plan : plans)
    total += plan.candidates.size();
  os << "would tune the " << context.pass << " pass of " << plans.size()
     << " bucket(s), " << total << " candidate(s), on the "
     << context.gpu.name << " (compute capability " << context.gpu.ccMajor
     << "." << context.gpu.ccMinor << ", " << context.modelSource << ")\n"
     << "database: " << context.databasePath;
  if (context.existingEntries)
    os << " (" << *context.existingEntries << " entries, results merge in)\n";
  else
    os << " (new)\n";
  for (size_t i = 0; i < plans.size(); ++i) {
    const BucketPlan &plan = plans[i];
    os << llvm::formatv("[{0}/{1}] {2}: {3}, {4:f1} GFLOP\n", i + 1,
                        plans.size(), plan.bucket.describe(), shapeText(plan),
                        plan.flops / 1e9);
    if (!plan.error.empty()) {
      os << "  not tunable: " << plan.error << "\n";
      continue;
    }
    os << "  heuristic: " << plan.heuristic.canonical() << "\n";
    os << "  candidates (" << plan.candidates.size() << " of " << plan.fitting
       << " that fit):";
    for (const TileConfig &config : plan.candidates)
      os << " " << config.canonical();
    os << "\n";
    for (const std::string &skipped : plan.skippedTemplates)
      os << "  skipped template " << skipped << "\n";
  }
}

json planToJson(const AutotuneContext &context,
                const std::vector<BucketPlan> &plans) {
  json buckets = json::array();
  size_t total = 0;
  for (const BucketPlan &plan : plans) {
    buckets.push_back(autotune::bucketPlanToJson(plan));
    total += plan.candidates.size();
  }
  return {{"dry_run", true},
          {"pass", context.pass},
          {"gpu", gpuToJson(context.gpu)},
          {"model_source", context.modelSource},
          {"database", context.databasePath},
          {"existing_entries", context.existingEntries
                                   ? json(*context.existingEntries)
                                   : json(nullptr)},
          {"candidates", total},
          {"buckets", buckets}};
}

void printSummaryText(llvm::raw_ostream &os, const AutotuneContext &context,
                      const TuningRunResult &run, size_t entriesInDatabase) {
  size_t tuned = 0;
  for (const BucketResult &b : run.buckets)
    tuned += b.best.has_value();
  os << "tuned the " << context.pass << " pass of " << tuned << " of "
     << run.buckets.size() << " bucket(s) on the " << context.gpu.name << " (driver "
     << context.gpu.driver << ") in " << formatDuration(run.seconds)
     << "; database " << context.databasePath << " now holds "
     << entriesInDatabase << " entries\n";
  os << llvm::formatv("{0,-36} {1,-26} {2,8}  {3,-26} {4,8} {5,6} {6,5} "
                      "{7,6}\n",
                      "bucket", "heuristic", "TFLOP/s", "tuned", "TFLOP/s",
                      "gain", "tried", "failed");
  for (const BucketResult &b : run.buckets) {
    const CandidateResult *h = b.heuristicResult();
    const CandidateResult *t = b.bestResult();
    auto tflops = [](const CandidateResult *c) {
      return c && c->measurement
                 ? llvm::formatv("{0:f1}", c->measurement->tflops).str()
                 : std::string("-");
    };
    std::string gain =
        h && t ? llvm::formatv("{0:f2}x",
                               t->measurement->tflops / h->measurement->tflops)
                     .str()
               : std::string("-");
    os << llvm::formatv("{0,-36} {1,-26} {2,8}  {3,-26} {4,8} {5,6} {6,5} "
                        "{7,6}\n",
                        b.plan.bucket.describe(),
                        b.plan.error.empty() ? b.plan.heuristic.canonical()
                                             : std::string("-"),
                        tflops(h), t ? t->config.canonical() : std::string("-"),
                        tflops(t), gain, b.tried.size(), b.failedCount());
  }
  for (const BucketResult &b : run.buckets) {
    if (!b.error.empty())
      os << "  " << b.plan.bucket.describe() << ": " << firstLine(b.error)
         << "\n";
    for (const CandidateResult &c : b.tried)
      if (!c.measurement)
        os << "  " << b.plan.bucket.describe() << ": " << c.config.canonical()
           << " failed: " << firstLine(c.error) << "\n";
    if (b.notTried > 0 && b.error.empty())
      os << "  " << b.plan.bucket.describe() << ": " << b.notTried
         << " candidate(s) not tried (time budget)\n";
  }
  if (!run.stoppedBy.empty())
    os << "stopped early: " << run.stoppedBy << "\n";
}

json summaryToJson(const AutotuneContext &context, const TuningRunResult &run,
                   double timeBudgetSeconds, size_t entriesInDatabase) {
  json buckets = json::array();
  for (const BucketResult &b : run.buckets) {
    json failed = json::array();
    for (const CandidateResult &c : b.tried)
      if (!c.measurement)
        failed.push_back(
            {{"config", c.config.canonical()}, {"error", c.error}});
    const CandidateResult *h = b.heuristicResult();
    const CandidateResult *t = b.bestResult();
    json item = {{"bucket", autotune::bucketToJson(b.plan.bucket)},
                 {"description", b.plan.bucket.describe()},
                 {"batch", b.plan.batch},
                 {"heads", b.plan.spec.numHeads},
                 {"seqlen", b.plan.seqlen},
                 {"heuristic_config", b.plan.error.empty()
                                          ? json(b.plan.heuristic.canonical())
                                          : json(nullptr)},
                 {"heuristic", measuredJson(h)},
                 {"tuned", measuredJson(t)},
                 {"speedup",
                  h && t ? json(t->measurement->tflops / h->measurement->tflops)
                         : json(nullptr)},
                 {"tried", b.tried.size()},
                 {"failed", failed},
                 {"not_tried", b.notTried},
                 {"error", b.error.empty() ? json(nullptr) : json(b.error)}};
    buckets.push_back(std::move(item));
  }
  return {{"pass", context.pass},
          {"gpu", gpuToJson(context.gpu)},
          {"flashjit_version", autotune::builtFlashjitVersion().str()},
          {"database", context.databasePath},
          {"database_entries", entriesInDatabase},
          {"seconds", run.seconds},
          {"time_budget_seconds", timeBudgetSeconds},
          {"budget_spent", run.budgetSpent},
          {"stopped_by",
           run.stoppedBy.empty() ? json(nullptr) : json(run.stoppedBy)},
          {"buckets", buckets}};
}

} // namespace flashjit::tools
