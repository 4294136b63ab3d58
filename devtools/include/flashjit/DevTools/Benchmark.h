//===- Benchmark.h - check and time kernels, inputs reused -----*- C++
//-*-===//
// Why: `flashjit autotune` times many configs of the same problem. Making
// random inputs and a float64 reference for each config would cost more
// than timing it, so inputs are made once per dtype and size and the
// reference once per shape. Every config is still checked before it is
// timed (sampled rows against the reference, the whole output scanned for
// NaN after poisoning it), so a fast but wrong kernel never wins.
#ifndef FLASHJIT_DEVTOOLS_BENCHMARK_H
#define FLASHJIT_DEVTOOLS_BENCHMARK_H

#include "flashjit/Autotune/TuningRun.h"
#include "flashjit/FlashJIT.h"
#include "flashjit/DevTools/EventTimer.h"
#include "flashjit/DevTools/Reference.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace flashjit {

class CudaDriver;
class DeviceBuffer;

struct BenchmarkOptions {
  /// Warm-up, samples, and at least 1 ms per sample so the host's launch
  /// gap does not count for short kernels.
  TimingOptions timing{/*warmup=*/2, /*iterations=*/5, /*minSampleMs=*/1.0,
                       /*stream=*/nullptr};
  /// Query rows compared with the float64 reference (first, last, and
  /// random ones between).
  int checkedRows = 16;
};

struct BenchmarkResult {
  double medianMs = 0;
  double tflops = 0;
  double relError = 0;
  double lseRelError = 0;
  int launchesPerSample = 1;
};

class Benchmark {
public:
  /// Needs the CUDA driver and a device (the error says why not); inputs
  /// are made on first use. `seed` seeds the inputs and the sampled rows.
  static llvm::Expected<std::unique_ptr<Benchmark>> create(uint64_t seed);
  ~Benchmark();

  /// Runs `kernel` once on [batch, heads, seqlen, head_dim] BHSD inputs and
  /// checks it; then times it. Errors: a failed driver call or launch, or
  /// wrong results ("wrong results: ..."), each naming what went wrong.
  llvm::Expected<BenchmarkResult> run(const Kernel &kernel, int64_t batch,
                                      int64_t seqlen,
                                      const BenchmarkOptions &options);

private:
  explicit Benchmark(const CudaDriver &drv, uint64_t seed);
  /// Inputs big enough for the shape in its dtype, and the reference rows
  /// of the shape.
  llvm::Error prepare(const AttentionSpec &spec, int64_t batch, int64_t seqlen,
                      int checkedRows);

  struct SampledRow {
    int64_t batch, head, row;
    ReferenceRow reference;
  };

  const CudaDriver &Drv;
  uint64_t Seed;
  std::unique_ptr<DeviceBuffer> Q, K, V, O, Lse;
  /// Host copies of the inputs (flat, `Capacity` elements each) and the
  /// shape the reference rows belong to.
  HostProblem Host;
  DType InputDType = DType::BF16;
  int64_t Capacity = 0;
  std::string ReferenceKey;
  std::vector<SampledRow> Rows;
  std::vector<uint16_t> OutBits;
  std::vector<float> OutLse;
};

/// The measurement of `flashjit autotune` (an autotune::MeasureFn): builds
/// `config` for the plan's spec with `ctx` and runs it on the plan's shape.
/// A build, launch or check failure is an error naming it; one after which
/// the CUDA context no longer works is a FatalMeasurementError.
llvm::Expected<autotune::Measurement>
measureCandidate(Context &ctx, Benchmark &bench,
                 const autotune::BucketPlan &plan, const TileConfig &config,
                 const BenchmarkOptions &options);
/// The measurement of `flashjit autotune --backward`: builds the backward
/// of the plan's spec with `config` (and the default forward), checks dQ,
/// dK and dV against float64 at an odd length up to 385 (inputs from
/// `seed`), then times it on the plan's shape (outputs scanned for NaN);
/// TFLOP/s by the backward's convention. Errors as measureCandidate's.
llvm::Expected<autotune::Measurement>
measureBackwardCandidate(Context &ctx, const autotune::BucketPlan &plan,
                         const TileConfig &config,
                         const BenchmarkOptions &options, uint64_t seed);

} // namespace flashjit

#endif
