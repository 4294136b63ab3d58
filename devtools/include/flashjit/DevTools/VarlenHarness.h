//===- VarlenHarness.h - check a varlen kernel on fresh inputs ----*- C++ -*-===//
// Why: `flashjit run --varlen`, the GPU tests and the varlen benchmark need
// the same loop as Harness.h for packed batches: random packed inputs,
// poisoned outputs (with poisoned rows past their ends, which must stay
// untouched), one launch, each sequence against the float64 reference, and
// CUDA-event timing with medians. A paged kernel's keys go to shuffled
// pages of a pool whose unused pages hold NaN (a read of one fails the
// check), with out-of-range ids in the table slots past each sequence.
#ifndef FLASHJIT_DEVTOOLS_VARLENHARNESS_H
#define FLASHJIT_DEVTOOLS_VARLENHARNESS_H

#include "flashjit/DevTools/Harness.h"

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

namespace flashjit {

struct VarlenCheckOptions {
  /// Query and key length of each sequence (0 allowed); lengthsK empty:
  /// the query lengths.
  std::vector<int64_t> lengthsQ, lengthsK;
  uint64_t seed = 1;
  /// Query rows per (sequence, head) compared with the reference: all of a
  /// shorter sequence, else the first and last few and a random sample.
  /// Every output row is still scanned for NaN.
  int64_t rowsPerSequence = 16;
  std::optional<double> scale;
  /// Timed launches after `warmup` untimed ones (0: correctness only).
  int warmup = 0, iterations = 0;
};

struct VarlenCheckReport {
  CheckReport check;
  /// Poisoned words past the ends of O and LSE that the launch changed.
  int64_t writtenOutside = 0;
  int64_t sequences = 0, totalQ = 0, totalK = 0, maxSeqlenQ = 0;
  /// A paged kernel's pool (pages, some unused) and block table row.
  int64_t poolPages = 0, maxPages = 0;
};

/// Random packed [tokens, heads, d] bits of `dtype` (normal values), and
/// the values they hold.
std::vector<uint16_t> randomPacked(std::vector<float> &values, DType dtype,
                                   int64_t tokens, int64_t heads, int64_t d,
                                   std::mt19937_64 &rng);
/// Rows [first, first + length) of packed [tokens, heads, d] values as
/// [1, heads, length, d].
std::vector<float> sequenceOf(const std::vector<float> &packed, int64_t first,
                              int64_t length, int64_t heads, int64_t d);
/// Cumulative offsets (batch + 1 entries from 0) of `lengths`.
std::vector<int32_t> cumulativeOffsets(llvm::ArrayRef<int64_t> lengths);
/// A packed batch's lengths (the keys': the query lengths where none are
/// given) and their offsets.
struct PackedBatch {
  std::vector<int64_t> lengthsQ, lengthsK;
  std::vector<int32_t> cuQ, cuK;
  int64_t sequences() const { return static_cast<int64_t>(lengthsQ.size()); }
  int64_t totalQ() const { return cuQ.back(); }
  int64_t totalK() const { return cuK.back(); }
};
/// The batch of `lengthsQ` and `lengthsK` (empty: the query lengths); an
/// error unless there is one of each per sequence, at least one sequence.
llvm::Expected<PackedBatch> packedBatch(llvm::ArrayRef<int64_t> lengthsQ,
                                        llvm::ArrayRef<int64_t> lengthsK);
/// "17,0,1000" as lengths; an error names a bad entry.
llvm::Expected<std::vector<int64_t>> parseVarlenLengths(llvm::StringRef text);

/// FLOPs of a varlen batch by the dense kernels' convention (Harness.h),
/// summed over its sequences.
double varlenFlops(const AttentionSpec &spec,
                   llvm::ArrayRef<int64_t> lengthsQ,
                   llvm::ArrayRef<int64_t> lengthsK);

/// Runs a varlen `kernel` once on fresh packed inputs and compares every
/// sequence; then times it when options.iterations > 0. Needs a GPU.
llvm::Expected<VarlenCheckReport>
runAndCheckVarlen(const Kernel &kernel, const VarlenCheckOptions &options);

} // namespace flashjit

#endif
