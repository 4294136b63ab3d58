//===- EventTimer.cpp - median kernel time between CUDA events ------------===//
// Why: see EventTimer.h. The events are owned by one guard so an early
// return on any failed call still destroys them.
#include "flashjit/DevTools/EventTimer.h"

#include "flashjit/Runtime/CudaDriver.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace flashjit {
namespace {

/// A start and a stop event, destroyed with the guard.
class EventPair {
public:
  explicit EventPair(const CudaDriver &drv) : Drv(drv) {}
  ~EventPair() {
    if (Start)
      (void)Drv.cuEventDestroy(Start);
    if (Stop)
      (void)Drv.cuEventDestroy(Stop);
  }
  llvm::Error create() {
    if (auto err = FLASHJIT_CU(Drv, cuEventCreate, &Start, CU_EVENT_DEFAULT))
      return err;
    return FLASHJIT_CU(Drv, cuEventCreate, &Stop, CU_EVENT_DEFAULT);
  }
  /// Runs `launch` `count` times between the two events; the elapsed
  /// milliseconds of all of them.
  llvm::Expected<float> time(llvm::function_ref<llvm::Error()> launch,
                             int count, CUstream stream) {
    if (auto err = FLASHJIT_CU(Drv, cuEventRecord, Start, stream))
      return std::move(err);
    for (int i = 0; i < count; ++i)
      if (auto err = launch())
        return std::move(err);
    if (auto err = FLASHJIT_CU(Drv, cuEventRecord, Stop, stream))
      return std::move(err);
    if (auto err = FLASHJIT_CU(Drv, cuEventSynchronize, Stop))
      return std::move(err);
    float ms = 0;
    if (auto err = FLASHJIT_CU(Drv, cuEventElapsedTime, &ms, Start, Stop))
      return std::move(err);
    return ms;
  }

private:
  const CudaDriver &Drv;
  CUevent Start = nullptr, Stop = nullptr;
};

} // namespace

llvm::Expected<LaunchTiming>
timeLaunches(const CudaDriver &drv, llvm::function_ref<llvm::Error()> launch,
             const TimingOptions &options) {
  if (options.iterations < 1 || options.warmup < 0)
    return llvm::createStringError(
        "timing needs at least 1 timed iteration and no negative warm-up");
  EventPair events(drv);
  if (auto err = events.create())
    return std::move(err);
  for (int i = 0; i < options.warmup; ++i)
    if (auto err = launch())
      return std::move(err);

  LaunchTiming timing;
  if (options.minSampleMs > 0) {
    auto once = events.time(launch, 1, options.stream);
    if (!once)
      return once.takeError();
    double perLaunch = std::max<double>(*once, 1e-3);
    timing.launchesPerSample = static_cast<int>(
        std::clamp(std::ceil(options.minSampleMs / perLaunch), 1.0, 1000.0));
  }
  std::vector<double> samples;
  for (int i = 0; i < options.iterations; ++i) {
    auto ms = events.time(launch, timing.launchesPerSample, options.stream);
    if (!ms)
      return ms.takeError();
    samples.push_back(*ms / timing.launchesPerSample);
  }
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2,
                   samples.end());
  timing.medianMs = samples[samples.size() / 2];
  timing.samples = static_cast<int>(samples.size());
  return timing;
}

llvm::Expected<TimedRate> timeRate(const CudaDriver &drv,
                                   llvm::function_ref<llvm::Error()> launch,
                                   int warmup, int iterations, double flops) {
  TimingOptions options;
  options.warmup = warmup;
  options.iterations = iterations;
  auto measured = timeLaunches(drv, launch, options);
  if (!measured)
    return measured.takeError();
  TimedRate rate;
  rate.medianMs = measured->medianMs;
  rate.tflops = flops / (rate.medianMs * 1e-3) / 1e12;
  return rate;
}

} // namespace flashjit
