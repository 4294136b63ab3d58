//===- Harness.h - run a kernel on fresh inputs and check it --------*- C++ -*-===//
// Why: `flashjit run`, the GPU tests and the autotuner all need the same
// loop: random inputs, poisoned outputs, launch, compare with the float64
// reference (NaN never passes), and CUDA-event timing with medians.
#ifndef FLASHJIT_DEVTOOLS_HARNESS_H
#define FLASHJIT_DEVTOOLS_HARNESS_H

#include "flashjit/Compiler/ModInterpreter.h"
#include "flashjit/FlashJIT.h"
#include "flashjit/DevTools/HostBlockMask.h"
#include "flashjit/DevTools/Reference.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace flashjit {

enum class Layout { BHSD, BSHD };

struct CheckOptions {
  int64_t batch = 1, seqlenQ = 128, seqlenK = 128;
  Layout layout = Layout::BHSD;
  /// Random seed of the inputs (vary it: every run should see new data).
  uint64_t seed = 1;
  /// Query rows per (batch, head) compared with the reference; all rows
  /// when the sequence is shorter (rowsWithinBudget picks it for a
  /// problem). Every output is still scanned for NaN. The reference runs
  /// on every core.
  int64_t rowsPerHead = 64;
  /// Softmax scale; none: 1/sqrt(head_dim).
  std::optional<double> scale;
  /// Timed launches after `warmup` untimed ones (0: correctness only).
  int warmup = 0, iterations = 0;
  /// The spec's captured tensors, row-major on the host; uploaded as f32
  /// or i32 as the spec says, and read by the reference's mods too.
  std::vector<HostCapture> captures;
  /// A block-sparse spec's block mask (uploaded as given); none for a
  /// block-sparse spec: a random one of `blockDensity`.
  std::optional<HostBlockMask> blockMask;
  double blockDensity = 0.25;
};

struct CheckReport {
  double relError = 0;    ///< ||o - ref|| / ||ref|| over checked rows
  double lseRelError = 0; ///< same for the log-sum-exp
  double maxAbsError = 0;
  /// NaN/inf anywhere in O or LSE (poison left); an LSE of -inf counts
  /// only where the spec cannot empty a row, or where the reference's
  /// row is not empty.
  int64_t nonFinite = 0;
  int64_t checkedRows = 0;
  double tolerance = 0;   ///< 1e-2 for bf16, 2e-3 for f16
  double lseTolerance = 0; ///< checkLseTolerance
  bool passed = false;
  double medianMs = 0, tflops = 0;
  std::string summary() const;
};

/// Relative error a kernel may have against the float64 reference: 1e-2 for
/// bf16, 2e-3 for f16.
double checkTolerance(DType dtype);
/// Relative error the log-sum-exp may have (an f32 result of f32 scores):
/// 1e-5, or 1e-3 for a spec with a score_mod (approximate math).
double checkLseTolerance(const AttentionSpec &spec);

/// Query rows per head that runAndCheck can compare for a problem within
/// `budget` multiply-adds of the float64 reference (rows x visible keys x
/// head_dim x 2): all of them (seqlenQ) when they fit, else as many as fit,
/// at least `minimum`.
int64_t rowsWithinBudget(const AttentionSpec &spec, int64_t batch,
                         int64_t seqlenQ, int64_t seqlenK, double budget,
                         int64_t minimum = 48);

/// Checked output rows against their float64 reference, summed: squared
/// errors and norms of O and of the LSE, the largest O error (NaN once one
/// is), LSEs that are -inf where the reference row has keys or not -inf
/// where it has none, and the rows.
struct RowErrors {
  double errSq = 0, refSq = 0, lseErrSq = 0, lseRefSq = 0, maxAbs = 0;
  int64_t nonFinite = 0, rows = 0;
  /// One row: its `d` output values (gotAt(c)) and its LSE.
  void addRow(const ReferenceRow &ref, llvm::function_ref<double(int64_t)> gotAt,
              int64_t d, float gotLse);
  void add(const RowErrors &other);
  /// The report's relative errors, largest error and checked rows from
  /// these sums (its non-finite count grows by theirs).
  void into(CheckReport &report) const;
};

/// Compares `count` rows on the cores (one worker per `rowsPerWorker` rows,
/// at most one per core): compareRow(i, errors) adds row i, or returns the
/// reference's error, which stops its worker and is returned.
llvm::Expected<RowErrors>
compareRows(size_t count, size_t rowsPerWorker,
            llvm::function_ref<std::string(size_t, RowErrors &)> compareRow);

/// Rows of one head of `seqlen` rows to compare: all when `wanted` or more,
/// else the first and last few and a random sample between.
std::vector<int64_t> rowsToCheck(int64_t seqlen, int64_t wanted,
                                 std::mt19937_64 &rng);

/// Fills `host` ([B,H,S,D] floats) with normal samples rounded to `dtype`
/// and returns the device image of the same values in `layout`. Draws on
/// every core; the values depend on `rng`'s state alone.
std::vector<uint16_t> makeRandomInput(std::vector<float> &host, DType dtype,
                                      Layout layout, int64_t B, int64_t H,
                                      int64_t S, int64_t D,
                                      std::mt19937_64 &rng);

/// Runs `kernel` once on fresh inputs and compares; then times it when
/// options.iterations > 0. Needs a GPU.
llvm::Expected<CheckReport> runAndCheck(const Kernel &kernel,
                                        const CheckOptions &options);

/// Builds the spec's block mask on the GPU with `builder` from host
/// captures (uploaded as runAndCheck does), as `batch` x `heads` lists (1 to
/// share one mask) of `seqlenQ` x `seqlenK`, with or without full lists,
/// and returns the lists as the GPU wrote them: entries past each count
/// hold the poison -1. Needs a GPU.
llvm::Expected<HostBlockMask>
buildBlockMaskOnGpu(const BlockMaskBuilder &builder,
                    llvm::ArrayRef<HostCapture> captures, int64_t batch,
                    int64_t heads, int64_t seqlenQ, int64_t seqlenK,
                    bool fullLists);

} // namespace flashjit

#endif
