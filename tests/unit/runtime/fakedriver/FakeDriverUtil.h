//===- FakeDriverUtil.h - what the fake-driver tests share ---*- C++ -*-===//
// Why: the tests that run the runtime against FakeCudaDriver.cpp (found
// first on LD_LIBRARY_PATH) read what the fake saw through its fakecuda_*
// functions and set up contexts and device buffers the same way.
#ifndef FLASHJIT_TESTS_UNIT_RUNTIME_FAKEDRIVER_FAKEDRIVERUTIL_H
#define FLASHJIT_TESTS_UNIT_RUNTIME_FAKEDRIVER_FAKEDRIVERUTIL_H

#include "flashjit/FlashJIT.h"
#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/Runtime/ScopedContext.h"

#include "../RuntimeTestUtil.h"

#include <dlfcn.h>
#include <doctest/doctest.h>

#include <memory>
#include <vector>

namespace flashjit::test {

/// The fake's own functions, found in the driver flashjit loaded.
struct Fake {
  int (*launchCount)() = nullptr;
  int (*launchDevice)(int) = nullptr;
  CUcontext (*launchContext)(int) = nullptr;
  CUfunction (*launchFunction)(int) = nullptr;
  long (*calls)(const char *) = nullptr;
  int (*pointerDevice)(CUdeviceptr) = nullptr;
  int (*contextDevice)(CUcontext) = nullptr;
  int (*contextIsPrimary)(CUcontext) = nullptr;
  void (*setCapturing)(CUstream, int) = nullptr;
  void (*setBlocksPerSM)(int) = nullptr;
  CUresult (*ctxCreate)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice) =
      nullptr;
  CUresult (*ctxDestroy)(CUcontext) = nullptr;
};

inline const Fake &fake() {
  static Fake f = [] {
    Fake f;
    llvm::cantFail(CudaDriver::get().takeError());
    void *h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    REQUIRE_MESSAGE(h, "libcuda.so.1 is not loaded");
#define FAKE_SYM(field, name)                                                  \
  f.field = reinterpret_cast<decltype(f.field)>(::dlsym(h, name))
    FAKE_SYM(launchCount, "fakecuda_launch_count");
    FAKE_SYM(launchDevice, "fakecuda_launch_device");
    FAKE_SYM(launchContext, "fakecuda_launch_context");
    FAKE_SYM(launchFunction, "fakecuda_launch_function");
    FAKE_SYM(calls, "fakecuda_calls");
    FAKE_SYM(pointerDevice, "fakecuda_pointer_device");
    FAKE_SYM(contextDevice, "fakecuda_context_device");
    FAKE_SYM(contextIsPrimary, "fakecuda_context_is_primary");
    FAKE_SYM(setCapturing, "fakecuda_set_capturing");
    FAKE_SYM(setBlocksPerSM, "fakecuda_set_blocks_per_sm");
    FAKE_SYM(ctxCreate, "cuCtxCreate_v4");
    FAKE_SYM(ctxDestroy, "cuCtxDestroy_v2");
#undef FAKE_SYM
    REQUIRE_MESSAGE(bool(f.launchCount),
                    "the loaded libcuda.so.1 is not the fake driver: run "
                    "with LD_LIBRARY_PATH naming its folder (ctest does)");
    return f;
  }();
  return f;
}

inline const CudaDriver &drv() { return llvm::cantFail(CudaDriver::get()); }

inline CUcontext currentContext() {
  CUcontext c = nullptr;
  REQUIRE_FALSE(bool(FLASHJIT_CU(drv(), cuCtxGetCurrent, &c)));
  return c;
}

inline void setCurrent(CUcontext c) {
  REQUIRE_FALSE(bool(FLASHJIT_CU(drv(), cuCtxSetCurrent, c)));
}

inline CUcontext primary(int device) {
  return llvm::cantFail(drv().primaryContext(device));
}

/// Device buffers for one forward() of `spec`, allocated in `ctx`.
struct Problem {
  ForwardArgs args;
  std::vector<CUdeviceptr> owned;
  Problem(const AttentionSpec &spec, CUcontext ctx, int64_t b, int64_t s) {
    auto scope = llvm::cantFail(ScopedContext::enter(drv(), ctx));
    auto alloc = [&](size_t bytes) {
      CUdeviceptr p = 0;
      REQUIRE_FALSE(bool(FLASHJIT_CU(drv(), cuMemAlloc, &p, bytes)));
      owned.push_back(p);
      return reinterpret_cast<void *>(p);
    };
    const int64_t h = spec.numHeads, hk = spec.numKVHeads, d = spec.headDim;
    args.q = TensorRef::bhsd(alloc(b * h * s * d * 2), spec.dtype, b, h, s, d);
    args.k = TensorRef::bhsd(alloc(b * hk * s * d * 2), spec.dtype, b, hk, s, d);
    args.v = TensorRef::bhsd(alloc(b * hk * s * d * 2), spec.dtype, b, hk, s, d);
    args.o = TensorRef::bhsd(alloc(b * h * s * d * 2), spec.dtype, b, h, s, d);
    args.lse = LseRef::contiguous(
        static_cast<float *>(alloc(b * h * s * 4)), b, h, s);
  }
  ~Problem() {
    for (CUdeviceptr p : owned)
      (void)drv().cuMemFree(p);
  }
};

inline AttentionSpec smallSpec() {
  AttentionSpec spec;
  spec.headDim = 64;
  spec.numHeads = spec.numKVHeads = 2;
  return spec;
}

inline std::unique_ptr<Context> contextOn(int device, const TempDir &dir) {
  ContextOptions options;
  options.device = device;
  options.cache.directory = dir.path();
  options.tuning.enabled = false;
  auto ctx = Context::create(options);
  REQUIRE_MESSAGE(bool(ctx), llvm::toString(ctx.takeError()));
  REQUIRE_MESSAGE((*ctx)->device().has_value(), (*ctx)->deviceError());
  return std::move(*ctx);
}

} // namespace flashjit::test

#endif
