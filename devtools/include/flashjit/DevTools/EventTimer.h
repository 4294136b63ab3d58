//===- EventTimer.h - median kernel time between CUDA events ------*- C++
//-*-===//
// Why: `flashjit run`, the GPU tests and `flashjit autotune` time kernels
// the same way: untimed warm-up launches, then samples bracketed by CUDA
// events on the stream, and the median. Short kernels are launched several
// times per sample so the host's launch gap does not dominate the sample.
#ifndef FLASHJIT_DEVTOOLS_EVENTTIMER_H
#define FLASHJIT_DEVTOOLS_EVENTTIMER_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"
#include <cuda.h>

namespace flashjit {

class CudaDriver;

struct TimingOptions {
  /// Untimed launches first.
  int warmup = 2;
  /// Timed samples (at least 1); the result is their median.
  int iterations = 5;
  /// When above 0, one calibration launch is timed and each sample then
  /// holds enough launches to last about this long (at most 1000).
  double minSampleMs = 0;
  /// The stream the launches go to (null: the legacy default stream).
  CUstream stream = nullptr;
};

struct LaunchTiming {
  /// Median time of one launch, in milliseconds.
  double medianMs = 0;
  int launchesPerSample = 1;
  int samples = 0;
};

/// Times `launch` (which must enqueue exactly one kernel on
/// options.stream). Every driver call is checked; the first failure, of the
/// driver or of `launch`, is returned and the events are destroyed.
llvm::Expected<LaunchTiming>
timeLaunches(const CudaDriver &drv, llvm::function_ref<llvm::Error()> launch,
             const TimingOptions &options);

/// The median time of `launch` (timeLaunches with `warmup` untimed
/// launches and `iterations` timed samples on the legacy default stream)
/// and the rate of `flops` per launch.
struct TimedRate {
  double medianMs = 0, tflops = 0;
};
llvm::Expected<TimedRate> timeRate(const CudaDriver &drv,
                                   llvm::function_ref<llvm::Error()> launch,
                                   int warmup, int iterations, double flops);

} // namespace flashjit

#endif
