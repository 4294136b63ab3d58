//===- DecodeHarness.h - run a decode kernel on fresh inputs and check it -*-
//C++ -*-===//
// Why: `flashjit run --decode`, the GPU tests and the decode benchmark need
// the same loop as the forward harness: random inputs (cache rows past
// each length and unused pages poisoned with NaN, pages shuffled),
// poisoned outputs and workspace, one launch compared with the float64
// reference (NaN never passes), then CUDA-event timing.
#ifndef FLASHJIT_DEVTOOLS_DECODEHARNESS_H
#define FLASHJIT_DEVTOOLS_DECODEHARNESS_H

#include "flashjit/Decode.h"

#include <cstdint>
#include <string>
#include <vector>

namespace flashjit {

struct DecodeCheckOptions {
  int64_t batch = 1;
  /// KV length of each sequence (one value: every sequence); each at least
  /// 0. The cache's capacity is the longest, rounded up to 64 tokens
  /// (paged: to whole pages, the block table that many columns).
  std::vector<int64_t> kvLens = {1024};
  uint64_t seed = 1;
  /// A contiguous cache laid out [batch, kvHeads, capacity, headDim] (each
  /// head's keys together, as PyTorch's [B, H, S, D]) instead of [batch,
  /// capacity, kvHeads, headDim]; the kernel sees it through strides.
  bool kvHeadMajor = false;
  /// Splits; 0: the rule.
  int64_t numSplits = 0;
  /// Pass the longest length as DecodeArgs::maxKvLen (else the capacity).
  bool maxKvLenHint = true;
  /// Use a NaN-poisoned caller workspace (else the kernel's own).
  bool callerWorkspace = true;
  std::optional<double> scale;
  /// Timed launches after `warmup` untimed ones (0: correctness only).
  int warmup = 0, iterations = 0;
  /// Rows (batch, head, token) compared with the reference: all when 0,
  /// else a random sample of this many (every output is still scanned for
  /// NaN).
  int64_t maxCheckedRows = 0;
  /// Threads of the float64 reference.
  unsigned referenceThreads = 0; ///< 0: the machine's
};

struct DecodeCheckReport {
  double relError = 0, lseRelError = 0, maxAbsError = 0;
  /// NaN or inf in O, NaN or +inf in LSE, -inf where the reference's row
  /// has keys, or a finite LSE where it has none.
  int64_t nonFinite = 0;
  int64_t checkedRows = 0;
  double tolerance = 0;
  int64_t numSplits = 0;
  bool passed = false;
  double medianMs = 0;
  /// Bytes of K and V the step reads (each sequence's keys, once per KV
  /// head), and their rate.
  double kvBytes = 0, gbPerSecond = 0;
  std::string summary() const;
};

/// Runs `kernel` once on fresh inputs and compares every row; then times
/// it when options.iterations > 0. Needs a GPU.
llvm::Expected<DecodeCheckReport>
runDecodeAndCheck(const DecodeKernel &kernel,
                  const DecodeCheckOptions &options);

/// runDecodeAndCheck for several kernels of one problem (the same spec
/// but for its tile knobs) on the same inputs, built and checked against
/// the reference once: each kernel runs on freshly poisoned outputs, is
/// compared and timed. `splitsPerKernel`: one split count per kernel (0:
/// the rule), or empty for options.numSplits.
llvm::Expected<std::vector<DecodeCheckReport>>
runDecodeVariants(llvm::ArrayRef<const DecodeKernel *> kernels,
                  const DecodeCheckOptions &options,
                  llvm::ArrayRef<int64_t> splitsPerKernel = {});

} // namespace flashjit

#endif
