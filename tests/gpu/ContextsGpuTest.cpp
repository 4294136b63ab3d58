//===- ContextsGpuTest.cpp - launches with another context current --------===//
// Why: a caller may have any CUDA context current (another device's, or
// one of its own) when it calls forward(); the kernel must still run in the
// context its module was loaded in, correctly, and leave the caller's
// context current. What that costs per launch is measured too.
#include "GpuProblem.h"

#include "flashjit/Runtime/Launch.h"

#include <chrono>

using namespace flashjit;
using namespace flashjit::test;

namespace {
CUcontext current() {
  CUcontext c = nullptr;
  REQUIRE_FALSE(bool(FLASHJIT_CU(gpuDriver(), cuCtxGetCurrent, &c)));
  return c;
}

std::vector<std::string> familiesHere() {
  std::vector<std::string> f = {"mma_sync", "cuda_core"};
  if (gpuContext().target().chip == "sm_90a")
    f.insert(f.end(), {"wgmma", "wgmma_persistent", "wgmma_cluster"});
  return f;
}
} // namespace

TEST_CASE("forward() with a context of the caller's own current runs in "
          "the device's primary context and leaves the caller's current") {
  const CUcontext primary = llvm::cantFail(gpuDriver().primaryContext(0));
  AttentionSpec spec;
  spec.headDim = 128;
  spec.numHeads = 4;
  spec.numKVHeads = 2;
  spec.causal = true;
  GpuProblem problem(spec, 2, 700, freshSeed());
  CUstream stream = nullptr;
  {
    auto scope = llvm::cantFail(ScopedContext::enter(gpuDriver(), primary));
    REQUIRE_FALSE(bool(FLASHJIT_CU(gpuDriver(), cuStreamCreate, &stream,
                                   CU_STREAM_NON_BLOCKING)));
  }
  for (const std::string &family : familiesHere()) {
    CAPTURE(family);
    auto kernel = compileFamily(spec, family);
    if (!kernel)
      continue;
    for (CUstream s : {CUstream(nullptr), stream}) {
      CAPTURE(s != nullptr);
      auto out = problem.outputs();
      {
        auto scope = llvm::cantFail(ScopedContext::enter(gpuDriver(), primary));
        out->poison(nullptr);
        REQUIRE_FALSE(bool(FLASHJIT_CU(gpuDriver(), cuCtxSynchronize)));
      }
      // A context of the caller's own on the same device: the kernel's
      // function does not belong to it.
      CUcontext own = nullptr;
      CU_OK(driverExtras().ctxCreate(&own, nullptr, 0, 0));
      REQUIRE(current() == own);
      llvm::Error err = kernel->forward(problem.args(*out, s));
      CHECK_MESSAGE(!err, llvm::toString(std::move(err)));
      CHECK(current() == own);
      CU_OK(driverExtras().ctxDestroy(own));
      auto scope = llvm::cantFail(ScopedContext::enter(gpuDriver(), primary));
      REQUIRE_FALSE(bool(FLASHJIT_CU(gpuDriver(), cuCtxSynchronize)));
      ProblemCheck c = problem.check(*out);
      INFO(kernel->info().config.canonical() << ": " << c.summary());
      CHECK(c.passed(spec.dtype));
    }
  }
  (void)gpuDriver().cuStreamDestroy(stream);
}

TEST_CASE("what keeping the context costs a launch") {
  const CudaDriver &drv = gpuDriver();
  const CUcontext primary = llvm::cantFail(drv.primaryContext(0));
  auto scope = llvm::cantFail(ScopedContext::enter(drv, primary));
  using Clock = std::chrono::steady_clock;
  auto usSince = [](Clock::time_point t0, int n) {
    return std::chrono::duration<double, std::micro>(Clock::now() - t0)
               .count() /
           n;
  };
  const int queries = 1000000;
  CUcontext c = nullptr;
  auto t0 = Clock::now();
  for (int i = 0; i < queries; ++i)
    (void)drv.cuCtxGetCurrent(&c);
  double getUs = usSince(t0, queries);

  AttentionSpec spec;
  spec.headDim = 64;
  spec.numHeads = spec.numKVHeads = 2;
  auto kernel = gpuContext().compile(spec, TileConfig{"mma_sync", 64, 32, 2, 4});
  REQUIRE(bool(kernel));
  GpuProblem problem(spec, 1, 1, freshSeed());
  auto out = problem.outputs();
  ForwardArgs args = problem.args(*out);
  // Host time of forward() in batches small enough not to fill the launch
  // queue: with the primary context current, then with another pushed.
  auto hostUs = [&]() {
    const int batches = 20, perBatch = 200;
    double total = 0;
    for (int b = 0; b < batches; ++b) {
      auto t = Clock::now();
      for (int i = 0; i < perBatch; ++i)
        REQUIRE_FALSE(bool((*kernel)->forward(args)));
      total += usSince(t, perBatch);
      auto sync = llvm::cantFail(ScopedContext::enter(drv, primary));
      REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuCtxSynchronize)));
    }
    return total / batches;
  };
  for (int i = 0; i < 100; ++i)
    REQUIRE_FALSE(bool((*kernel)->forward(args)));
  double sameUs = hostUs();
  CUcontext own = nullptr;
  CU_OK(driverExtras().ctxCreate(&own, nullptr, 0, 0));
  double otherUs = hostUs();
  CU_OK(driverExtras().ctxDestroy(own));
  MESSAGE("cuCtxGetCurrent " << getUs * 1000.0
                             << " ns; forward() host time with its context "
                                "current "
                             << sameUs << " us, with another context current "
                             << otherUs << " us (push and pop)");
  // The check on every launch is one thread-local read; switching
  // contexts around a launch stays well under a microsecond.
  CHECK(getUs < 0.1);
  CHECK(otherUs < sameUs + 1.0);
}
