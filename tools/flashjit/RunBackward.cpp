//===- RunBackward.cpp - `flashjit run --backward` ------------------------===//
// Why: proves the backward pass of a spec on this GPU as `run` proves the
// forward: fresh inputs, the forward for O and LSE, NaN-poisoned
// gradients, dQ, dK and dV against the float64 reference, then CUDA-event
// timing of the backward alone.
#include "RunBackward.h"
#include "Commands.h"

#include "flashjit/Backward.h"
#include "flashjit/DevTools/BackwardCheck.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"
#include <nlohmann/json.hpp>

#include <chrono>

namespace flashjit::tools {

llvm::Expected<BackwardOptions> backwardRunOptions(const std::string &config,
                                                   bool deterministic,
                                                   int64_t seqlen) {
  BackwardOptions options;
  if (!config.empty()) {
    auto tile = TileConfig::parse(config);
    if (!tile)
      return tile.takeError();
    options.config = *tile;
  }
  options.deterministic = deterministic;
  options.seqlen = seqlen;
  return options;
}

void printBackwardTime(double medianMs, int iterations, double tflops) {
  llvm::outs() << "  time: " << llvm::format("%.3f", medianMs)
               << " ms median of " << iterations << " backward calls, "
               << llvm::format("%.1f", tflops)
               << " TFLOP/s (2.5 x the forward's FLOPs)\n";
}

int runBackwardCheck(Context &ctx, const AttentionSpec &spec,
                     const Kernel &forward, const BackwardRunRequest &request) {
  auto parsed = backwardRunOptions(request.config, request.deterministic,
                                   request.check.seqlenQ);
  if (!parsed)
    return reportError("run", parsed.takeError());
  const BackwardOptions &options = *parsed;
  auto resolved = ctx.resolveBackwardConfig(spec, options);
  if (!resolved)
    return reportError("run", resolved.takeError());
  auto start = std::chrono::steady_clock::now();
  auto backward = ctx.compileBackward(spec, options);
  if (!backward)
    return reportError("run", backward.takeError());
  double compileMs = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - start)
                         .count();
  auto report = runAndCheckBackward(forward, **backward, request.check);
  if (!report)
    return reportError("run", report.takeError());
  const KernelInfo &info = (*backward)->info();
  const BackwardCheckOptions &o = request.check;
  if (request.json) {
    nlohmann::json j = {{"kernel", info.name},
                        {"pass", "backward"},
                        {"device", ctx.device()->name},
                        {"arch", ctx.target().chip},
                        {"config", info.config.canonical()},
                        {"config_source",
                         configSourceName(resolved->origin.source)},
                        {"config_detail", resolved->origin.detail},
                        {"deterministic", (*backward)->deterministic()},
                        {"forward_config", forward.info().config.canonical()},
                        {"batch", o.batch},
                        {"seqlen_q", o.seqlenQ},
                        {"seqlen_k", o.seqlenK},
                        {"seed", o.seed},
                        {"compile_ms", compileMs},
                        {"dq_rel_error", report->dqError},
                        {"dk_rel_error", report->dkError},
                        {"dv_rel_error", report->dvError},
                        {"max_abs_error", report->maxAbsError},
                        {"non_finite", report->nonFinite},
                        {"checked_kv_groups", report->checkedGroups},
                        {"tolerance", report->tolerance},
                        {"repeats_compared", report->repeatsCompared},
                        {"repeats_differing", report->repeatsDiffering},
                        {"passed", report->passed},
                        {"median_ms", report->medianMs},
                        {"tflops", report->tflops}};
    j.update(specFields(spec));
    j.update(buildFields());
    llvm::outs() << j.dump(2) << "\n";
  } else {
    llvm::outs() << info.name << " on " << ctx.device()->name << " ("
                 << ctx.target().chip << ", " << info.config.canonical()
                 << ", " << configSourceName(resolved->origin.source)
                 << "; forward " << forward.info().config.canonical() << ")\n"
                 << "  shape: batch " << o.batch << ", heads "
                 << spec.numHeads << "/" << spec.numKVHeads << ", seqlen "
                 << o.seqlenQ << "x" << o.seqlenK << "\n"
                 << "  backward kernels ready in "
                 << llvm::format("%.2f", compileMs) << " ms\n"
                 << "  check: " << report->summary() << "\n";
    if (o.iterations > 0)
      printBackwardTime(report->medianMs, o.iterations, report->tflops);
  }
  return report->passed ? 0 : 1;
}

} // namespace flashjit::tools
