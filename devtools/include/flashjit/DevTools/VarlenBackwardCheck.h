//===- VarlenBackwardCheck.h - a varlen backward on fresh inputs -*- C++ -*-===//
// Why: `flashjit run --varlen --backward` and the GPU tests need the loop of
// BackwardCheck.h for packed batches: random packed Q, K, V, dO; the varlen
// forward for O and LSE; gradients (with poisoned rows past their ends,
// which must stay untouched) and workspace poisoned; the varlen backward;
// each sequence's dQ, dK, dV against the float64 reference of that
// sequence alone; and CUDA-event timing with medians.
#ifndef FLASHJIT_DEVTOOLS_VARLENBACKWARDCHECK_H
#define FLASHJIT_DEVTOOLS_VARLENBACKWARDCHECK_H

#include "flashjit/DevTools/BackwardCheck.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace flashjit {

struct VarlenBackwardCheckOptions {
  /// Query and key length of each sequence (0 allowed); lengthsK empty:
  /// the query lengths.
  std::vector<int64_t> lengthsQ, lengthsK;
  uint64_t seed = 1;
  std::optional<double> scale;
  /// (sequence, KV head) groups compared with the reference, as
  /// BackwardCheckOptions::checkedGroups (0: all). Every gradient is still
  /// scanned for NaN and for words written past its end.
  int64_t checkedGroups = 0;
  /// Timed backward calls after `warmup` untimed ones (0: correctness only).
  int warmup = 0, iterations = 0;
};

struct VarlenBackwardCheckReport {
  /// The errors over every sequence's gradients (BackwardCheckReport's
  /// fields; checkedGroups counts (sequence, KV head) pairs), and the
  /// backward's time and rate (2.5 x the varlen forward's FLOPs).
  BackwardCheckReport check;
  /// Poisoned words past the ends of dq, dk and dv that the call changed.
  int64_t writtenOutside = 0;
  int64_t sequences = 0, totalQ = 0, totalK = 0, maxSeqlenK = 0;
};

/// Runs the varlen `forward` (for O and LSE) and `backward` of one spec once
/// on fresh packed inputs and compares every sequence; then times the
/// backward when options.iterations > 0. Needs a GPU.
llvm::Expected<VarlenBackwardCheckReport>
runAndCheckVarlenBackward(const Kernel &forward, const BackwardKernel &backward,
                          const VarlenBackwardCheckOptions &options);

} // namespace flashjit

#endif
