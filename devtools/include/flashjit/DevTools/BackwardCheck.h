//===- BackwardCheck.h - run the backward on fresh inputs, check it -*- C++ -*-===//
// Why: `flashjit run --backward` and the GPU tests need the same loop:
// random Q, K, V, dO; the forward for O and LSE; gradients and workspace
// poisoned with NaN; the backward; dQ, dK, dV against the float64
// reference (NaN never passes); and CUDA-event timing with medians.
#ifndef FLASHJIT_DEVTOOLS_BACKWARDCHECK_H
#define FLASHJIT_DEVTOOLS_BACKWARDCHECK_H

#include "flashjit/Backward.h"
#include "flashjit/DevTools/Harness.h"

#include <random>
#include <string>
#include <utility>
#include <vector>

namespace flashjit {

class CudaDriver;

struct BackwardCheckOptions {
  int64_t batch = 1, seqlenQ = 128, seqlenK = 128;
  Layout layout = Layout::BHSD;
  /// Random seed of the inputs.
  uint64_t seed = 1;
  /// KV heads whose gradients (dk, dv and the dq of their query heads) are
  /// compared with the reference: 0 all, negative none, else the first and
  /// last (batch, KV head) and random ones up to this count. Every output
  /// is still scanned for NaN.
  int64_t checkedGroups = 0;
  /// Backward calls after the first, each on gradients and workspace
  /// poisoned again, whose dq, dk and dv must equal the first call's bit
  /// for bit (the deterministic mode's promise).
  int repeats = 0;
  std::optional<double> scale;
  /// The spec's captured tensors (as CheckOptions::captures): read by the
  /// forward, the backward and the reference's mods.
  std::vector<HostCapture> captures;
  /// A block-sparse spec's block mask in the forward's form (the backward
  /// gets its transpose, HostBlockMask::transposed); none: a random one of
  /// `blockDensity`, with full lists.
  std::optional<HostBlockMask> blockMask;
  double blockDensity = 0.25;
  /// Timed backward calls after `warmup` untimed ones (0: correctness only).
  int warmup = 0, iterations = 0;
};

struct BackwardCheckReport {
  /// ||x - ref|| / ||ref|| over the checked groups, per gradient; for a
  /// gradient that is zero (every row sees one key: P = 1, dS = 0), the
  /// error relative to the magnitude of its terms instead
  /// (ReferenceGradients).
  double dqError = 0, dkError = 0, dvError = 0;
  double maxAbsError = 0;
  /// NaN or inf anywhere in dq, dk, dv (poison left or computed).
  int64_t nonFinite = 0;
  int64_t checkedGroups = 0;
  /// Repeated calls compared (options.repeats) and those whose gradients
  /// differed from the first call's in any bit.
  int repeatsCompared = 0, repeatsDiffering = 0;
  double tolerance = 0;
  bool passed = false;
  /// Median time of one backward call (preprocess, main, convert) and its
  /// rate by the FlashAttention convention (2.5 x the forward's FLOPs).
  double medianMs = 0, tflops = 0;
  std::string summary() const;
};

/// The (batch, KV head) groups of `batch` x `kvHeads` to compare, as
/// BackwardCheckOptions::checkedGroups says: `count` 0 all, negative none,
/// else the first and last and random ones up to `count`.
std::vector<std::pair<int64_t, int64_t>>
groupsToCheck(int64_t batch, int64_t kvHeads, int64_t count,
              std::mt19937_64 &rng);

/// Squared error, squared reference and squared magnitude (the
/// reference's sums of absolute terms, ReferenceGradients) of one
/// gradient's checked values.
struct GradientErrorSums {
  double errSq = 0, refSq = 0, magSq = 0;
  /// `columns` values of the kernel (`bits` of `dtype`) against the
  /// reference's; maxAbsError grows to the largest difference (NaN stays).
  void addRow(DType dtype, const uint16_t *bits, const double *ref,
              const double *magnitude, int64_t columns, double &maxAbsError);
  /// ||x - ref|| / ||ref||; where the gradient is zero (||ref|| at the
  /// float64 rounding of its terms), relative to its terms' magnitude.
  double relative() const;
};

/// Relative error the gradients may have against the float64 reference:
/// twice the forward's (checkTolerance), 2e-2 for bf16 and 4e-3 for f16.
/// The backward rounds P and dS to the element type before its products
/// (dV = P^T dO, dK = dS^T Q, dQ = dS K) as the forward rounds P before
/// P V, and its inputs O and LSE carry the forward's own rounding; the
/// f32 accumulations add about 2^-24 sqrt(seqlen), far below either.
double backwardTolerance(DType dtype);

/// The driver, its context current, for a check of `backward` with
/// `forward`; an error when their specs differ or there is no GPU.
llvm::Expected<const CudaDriver *>
backwardCheckDriver(const Kernel &forward, const BackwardKernel &backward);

/// Runs `forward` (for O and LSE) and `backward` of the same spec once on
/// fresh inputs and compares; then times the backward when
/// options.iterations > 0. Needs a GPU.
llvm::Expected<BackwardCheckReport>
runAndCheckBackward(const Kernel &forward, const BackwardKernel &backward,
                    const BackwardCheckOptions &options);

} // namespace flashjit

#endif
