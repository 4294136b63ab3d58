//===- RunBackward.h - `flashjit run --backward` ------------------*- C++ -*-===//
// Why: `run` hands the backward check to its own file (RunBackward.cpp);
// this is what it passes.
#ifndef FLASHJIT_TOOLS_RUNBACKWARD_H
#define FLASHJIT_TOOLS_RUNBACKWARD_H

#include "flashjit/DevTools/BackwardCheck.h"

#include <string>

namespace flashjit::tools {

struct BackwardRunRequest {
  BackwardCheckOptions check;
  /// A "wgmma_bwd:..." or "mma_sync_bwd:..." tile config
  /// (--backward-config); empty: default.
  std::string config;
  bool deterministic = false;
  bool json = false;
};

/// The BackwardOptions of a `run --backward`: the --backward-config tile
/// config (empty: none), --deterministic, and the run's length, which
/// picks the tuned backward bucket where there is one.
llvm::Expected<BackwardOptions> backwardRunOptions(const std::string &config,
                                                   bool deterministic,
                                                   int64_t seqlen);
/// Prints the "time:" line of a backward run of `iterations` timed calls.
void printBackwardTime(double medianMs, int iterations, double tflops);

/// Builds the backward of `spec`, checks it against the float64 reference
/// with `forward` giving O and LSE, times it, prints the result; returns
/// the exit code (0: passed).
int runBackwardCheck(Context &ctx, const AttentionSpec &spec,
                     const Kernel &forward, const BackwardRunRequest &request);

} // namespace flashjit::tools

#endif
