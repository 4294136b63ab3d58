//===- RuntimeGpuTest.cpp - launch, cache and argument checks on a GPU ----===//
// Why: the runtime's promises that need a device: bad arguments launch
// nothing, launches are cheap, tensor maps encode for the layouts callers
// pass, and a kernel comes back from disk fast.
#include "GpuTestUtil.h"

#include "flashjit/Runtime/CudaDriver.h"
#include "flashjit/DevTools/HostFloat.h"
#include "flashjit/Runtime/KernelCache.h"
#include "flashjit/Runtime/Launch.h"
#include "flashjit/Runtime/ModuleLoader.h"
#include "flashjit/Runtime/TensorMaps.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <unistd.h>

using namespace flashjit;
using namespace flashjit::test;

namespace {
const CudaDriver &driver() { return llvm::cantFail(CudaDriver::get()); }

struct Buffers {
  CUdeviceptr q = 0, k = 0, v = 0, o = 0, lse = 0;
  size_t elems = 0, rows = 0;
  Buffers(int64_t b, int64_t h, int64_t s, int64_t d) {
    elems = b * h * s * d;
    rows = b * h * s;
    const CudaDriver &drv = driver();
    for (CUdeviceptr *p : {&q, &k, &v, &o})
      REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuMemAlloc, p, elems * 2)));
    REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuMemAlloc, &lse, rows * 4)));
    for (CUdeviceptr p : {q, k, v})
      REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuMemsetD8, p, 0x3C, elems * 2)));
  }
  ~Buffers() {
    for (CUdeviceptr p : {q, k, v, o, lse})
      (void)driver().cuMemFree(p);
  }
  /// Fills O and LSE with a byte pattern that a launch would overwrite.
  void poison() {
    REQUIRE_FALSE(bool(FLASHJIT_CU(driver(), cuMemsetD8, o, 0xA5, elems * 2)));
    REQUIRE_FALSE(bool(FLASHJIT_CU(driver(), cuMemsetD8, lse, 0xA5, rows * 4)));
  }
  /// True when O and LSE still hold the poison pattern.
  bool untouched() {
    REQUIRE_FALSE(bool(FLASHJIT_CU(driver(), cuCtxSynchronize)));
    std::vector<uint8_t> host(elems * 2 + rows * 4);
    REQUIRE_FALSE(bool(FLASHJIT_CU(driver(), cuMemcpyDtoH, host.data(), o, elems * 2)));
    REQUIRE_FALSE(bool(FLASHJIT_CU(driver(), cuMemcpyDtoH, host.data() + elems * 2,
                                   lse, rows * 4)));
    for (uint8_t x : host)
      if (x != 0xA5)
        return false;
    return true;
  }
  ForwardArgs args(const AttentionSpec &spec, int64_t b, int64_t s) {
    ForwardArgs a;
    auto p = [](CUdeviceptr x) { return reinterpret_cast<void *>(x); };
    a.q = TensorRef::bhsd(p(q), spec.dtype, b, spec.numHeads, s, spec.headDim);
    a.k = TensorRef::bhsd(p(k), spec.dtype, b, spec.numKVHeads, s, spec.headDim);
    a.v = TensorRef::bhsd(p(v), spec.dtype, b, spec.numKVHeads, s, spec.headDim);
    a.o = TensorRef::bhsd(p(o), spec.dtype, b, spec.numHeads, s, spec.headDim);
    a.lse = LseRef::contiguous(reinterpret_cast<float *>(lse), b,
                               spec.numHeads, s);
    return a;
  }
};

AttentionSpec smallSpec() {
  AttentionSpec spec;
  spec.headDim = 64;
  spec.numHeads = 2;
  spec.numKVHeads = 2;
  return spec;
}
} // namespace

TEST_CASE("bad arguments: a clear error and nothing launched") {
  AttentionSpec spec = smallSpec();
  auto kernel = gpuContext().compile(spec);
  REQUIRE(bool(kernel));
  const int64_t b = 1, s = 64;
  Buffers buf(b, spec.numHeads, s, spec.headDim);

  // The good call writes O: the poison check below can tell.
  buf.poison();
  REQUIRE_FALSE(bool((*kernel)->forward(buf.args(spec, b, s))));
  CHECK_FALSE(buf.untouched());

  struct Bad {
    const char *what;
    std::function<void(ForwardArgs &)> mutate;
    const char *expected;
  };
  const Bad cases[] = {
      {"null q", [](ForwardArgs &a) { a.q.data = nullptr; }, "q is a null pointer"},
      {"misaligned k",
       [](ForwardArgs &a) { a.k.data = static_cast<char *>(a.k.data) + 2; },
       "k pointer"},
      {"dtype", [](ForwardArgs &a) { a.v.dtype = DType::F16; },
       "v is f16 but the kernel was compiled for bf16"},
      {"head dim", [](ForwardArgs &a) { a.q.shape[3] = 128; },
       "q head dim is 128 but the kernel was compiled for head dim 64"},
      {"shapes disagree", [](ForwardArgs &a) { a.v.shape[2] = 32; },
       "k has seqlen 64 but v has 32"},
      {"heads", [](ForwardArgs &a) { a.q.shape[1] = 4; a.o.shape[1] = 4; },
       "q has 4 heads but the kernel was compiled for 2"},
      {"overlapping output strides",
       [](ForwardArgs &a) { a.o.strides[2] = 8; },
       "o strides [8192, 4096, 8, 1] make distinct outputs share memory"},
      {"output aliases input", [](ForwardArgs &a) { a.o.data = a.q.data; },
       "the outputs overlap input q"},
      {"head-dim stride", [](ForwardArgs &a) { a.k.strides[3] = 2; },
       "k head-dim stride is 2"},
      {"lse shape", [](ForwardArgs &a) { a.lse.shape[2] = 1; },
       "lse shape [1, 2, 1] must be [batch, heads, seqlen]"},
  };
  for (const Bad &bad : cases) {
    INFO(bad.what);
    buf.poison();
    ForwardArgs args = buf.args(spec, b, s);
    bad.mutate(args);
    llvm::Error err = (*kernel)->forward(args);
    REQUIRE(bool(err));
    std::string message = llvm::toString(std::move(err));
    INFO(message);
    CHECK(message.find(bad.expected) != std::string::npos);
    CHECK(buf.untouched());
  }
}

TEST_CASE("launch overhead of forward() on a cached kernel") {
  AttentionSpec spec = smallSpec();
  // The lightest tile config, so the figure is the launch and not the
  // kernel's own work (the default config's figure is reported too).
  auto kernel =
      gpuContext().compile(spec, TileConfig{"mma_sync", 64, 32, 2, 4});
  REQUIRE(bool(kernel));
  Buffers buf(1, spec.numHeads, 1, spec.headDim);
  ForwardArgs args = buf.args(spec, 1, 1);
  const CudaDriver &drv = driver();
  for (int i = 0; i < 100; ++i)
    REQUIRE_FALSE(bool((*kernel)->forward(args)));
  CUevent start, stop;
  REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuEventCreate, &start, CU_EVENT_DEFAULT)));
  REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuEventCreate, &stop, CU_EVENT_DEFAULT)));
  const int launches = 5000;
  // Events around many back-to-back launches: per-call time on the GPU's
  // clock, which includes the tiny kernel's own run time.
  REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuEventRecord, start, nullptr)));
  for (int i = 0; i < launches; ++i)
    REQUIRE_FALSE(bool((*kernel)->forward(args)));
  REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuEventRecord, stop, nullptr)));
  REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuEventSynchronize, stop)));
  float ms = 0;
  REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuEventElapsedTime, &ms, start, stop)));
  double usPerCall = ms * 1000.0 / launches;
  // Host time of forward() alone (checks + cuLaunchKernel), in batches
  // small enough that the launch queue never blocks.
  const int batches = 20, perBatch = 200;
  double hostUs = 0;
  for (int b = 0; b < batches; ++b) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < perBatch; ++i)
      REQUIRE_FALSE(bool((*kernel)->forward(args)));
    auto t1 = std::chrono::steady_clock::now();
    hostUs += std::chrono::duration<double, std::micro>(t1 - t0).count();
    REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuCtxSynchronize)));
  }
  hostUs /= batches * perBatch;

  // For comparison, the same kernel launched bare (cuLaunchKernel alone,
  // no checks, tensor maps encoded once), and one launch by itself (the
  // kernel's own latency).
  auto bare = LoadedModule::load((*kernel)->info(), (*kernel)->ptx(), "", 0);
  REQUIRE_MESSAGE(bool(bare), llvm::toString(bare.takeError()));
  ForwardLaunchParams raw;
  REQUIRE_FALSE(bool((*kernel)->prepareLaunch(args, raw)));
  auto params = raw.pointers();
  LaunchGeometry g =
      forwardGeometry((*kernel)->info(), 1, 1,
                      (*kernel)->persistent() ? bare->residentBlocks() : 0);
  auto launchBare = [&] {
    return FLASHJIT_CU(drv, cuLaunchKernel, bare->function(), g.gridX, g.gridY,
                       g.gridZ, g.blockX, 1, 1, g.sharedMemoryBytes, nullptr,
                       params.data(), nullptr);
  };
  REQUIRE_FALSE(bool(launchBare()));
  REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuEventRecord, start, nullptr)));
  for (int i = 0; i < launches; ++i)
    REQUIRE_FALSE(bool(launchBare()));
  REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuEventRecord, stop, nullptr)));
  REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuEventSynchronize, stop)));
  float bareMs = 0;
  REQUIRE_FALSE(
      bool(FLASHJIT_CU(drv, cuEventElapsedTime, &bareMs, start, stop)));
  std::vector<float> single;
  for (int i = 0; i < 51; ++i) {
    REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuEventRecord, start, nullptr)));
    REQUIRE_FALSE(bool(launchBare()));
    REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuEventRecord, stop, nullptr)));
    REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuEventSynchronize, stop)));
    float one = 0;
    REQUIRE_FALSE(
        bool(FLASHJIT_CU(drv, cuEventElapsedTime, &one, start, stop)));
    single.push_back(one);
  }
  std::nth_element(single.begin(), single.begin() + 25, single.end());
  MESSAGE("forward() per call: " << usPerCall << " us between CUDA events ("
          << launches << " back-to-back launches of a 1-row problem, config "
          << (*kernel)->info().config.canonical() << "), " << hostUs
          << " us of host time; bare cuLaunchKernel of the same kernel "
          << bareMs * 1000.0 / launches << " us per call; one launch alone "
          << single[25] * 1000.0 << " us (median of 51)");
  // What forward() adds to a bare launch (its checks, the tensor maps):
  // at most 2 us. The launch itself costs what this host and driver take,
  // which varies between machines of one kind.
  const double bareUs = bareMs * 1000.0 / launches;
  CHECK(hostUs < bareUs + 2.0);
  CHECK(usPerCall < bareUs + 2.0);

  auto heuristic = gpuContext().compile(spec);
  REQUIRE(bool(heuristic));
  REQUIRE_FALSE(bool((*heuristic)->forward(args)));
  REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuEventRecord, start, nullptr)));
  for (int i = 0; i < launches; ++i)
    REQUIRE_FALSE(bool((*heuristic)->forward(args)));
  REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuEventRecord, stop, nullptr)));
  REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuEventSynchronize, stop)));
  float defaultMs = 0;
  REQUIRE_FALSE(
      bool(FLASHJIT_CU(drv, cuEventElapsedTime, &defaultMs, start, stop)));
  // The handle was built for the default length (2048): a 1-row call goes
  // to its length class's kernel, a choice that must stay within the
  // launch budget too.
  auto served = (*heuristic)->kernelForLengths(1, 1);
  REQUIRE(bool(served));
  // Host time through the choice and straight to the served kernel, in
  // alternating batches (the same clocks for both) of few calls: this
  // kernel runs about 10 us on the GPU, and in batches of hundreds the
  // launch queue fills, so that both loops time the GPU instead.
  const int rounds = 100, fewCalls = 16;
  double choiceUs = 0, servedUs = 0;
  auto hostTime = [&](const Kernel &k) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < fewCalls; ++i)
      REQUIRE_FALSE(bool(k.forward(args)));
    auto t1 = std::chrono::steady_clock::now();
    REQUIRE_FALSE(bool(FLASHJIT_CU(drv, cuCtxSynchronize)));
    return std::chrono::duration<double, std::micro>(t1 - t0).count();
  };
  for (int r = 0; r < rounds; ++r) {
    choiceUs += hostTime(**heuristic);
    servedUs += hostTime(**served);
  }
  choiceUs /= rounds * fewCalls;
  servedUs /= rounds * fewCalls;
  // The choice alone, no launch: what forward() adds to the served
  // kernel's own call.
  const int lookups = 100000;
  int failedLookups = 0;
  auto l0 = std::chrono::steady_clock::now();
  for (int i = 0; i < lookups; ++i) {
    auto k = (*heuristic)->kernelForLengths(1, 1);
    if (!k) {
      llvm::consumeError(k.takeError());
      ++failedLookups;
    }
  }
  REQUIRE(failedLookups == 0);
  double lookupUs = std::chrono::duration<double, std::micro>(
                        std::chrono::steady_clock::now() - l0)
                        .count() /
                    lookups;
  MESSAGE("the default handle (" << (*heuristic)->info().config.canonical()
          << ") on the same 1-row problem: " << defaultMs * 1000.0 / launches
          << " us per call on the GPU, served by "
          << (*served)->info().config.canonical() << "; host time " << choiceUs
          << " us through the handle's per-length choice, " << servedUs
          << " us calling the served kernel directly; the choice alone "
          << lookupUs << " us");
  CHECK(lookupUs < 1.0);
  CHECK(choiceUs < servedUs + 1.0);
  (void)drv.cuEventDestroy(start);
  (void)drv.cuEventDestroy(stop);
}

TEST_CASE("tensor maps of BHSD, BSHD and GQA tensors encode, cheaply") {
  if (gpuContext().device()->computeMajor < 9) {
    MESSAGE("tensor maps need sm_90 or newer: skipped");
    return;
  }
  AttentionSpec spec;
  spec.headDim = 128;
  spec.numHeads = 8;
  spec.numKVHeads = 2;
  const int64_t b = 2, s = 300;
  Buffers buf(b, spec.numHeads, s, spec.headDim);
  TensorMapBoxes boxes;
  boxes.qRows = 128;
  boxes.kvRows = 176;
  boxes.oRows = 64;
  auto bshd = [&](const TensorRef &t) {
    return TensorRef::bshd(t.data, t.dtype, t.shape[0], t.shape[1], t.shape[2],
                           t.shape[3]);
  };
  // Boxes longer than the sequence (seqlen 1) read zeros past its end.
  for (int64_t seqlen : {s, int64_t(1)})
    for (bool bshdLayout : {false, true}) {
      INFO("seqlen " << seqlen << (bshdLayout ? ", BSHD" : ", BHSD"));
      ForwardArgs args = buf.args(spec, b, seqlen);
      if (bshdLayout)
        for (TensorRef *t : {&args.q, &args.k, &args.v, &args.o})
          *t = bshd(*t);
      auto layouts = forwardTensorMapLayouts(args, boxes, "wgmma");
      REQUIRE_MESSAGE(bool(layouts), llvm::toString(layouts.takeError()));
      ForwardLaunchParams params;
      llvm::Error err = prepareForwardLaunch(args, 0.125, &*layouts, params, 0);
      REQUIRE_MESSAGE(!err, llvm::toString(std::move(err)));
      CHECK(params.hasTensorMaps);
    }

  // What a launch of a TMA kernel adds to forward(): four encodes.
  ForwardArgs args = buf.args(spec, b, s);
  auto layouts = forwardTensorMapLayouts(args, boxes, "wgmma");
  REQUIRE(bool(layouts));
  ForwardTensorMaps maps;
  const int rounds = 10000;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i)
    REQUIRE_FALSE(bool(encodeTensorMaps(driver(), *layouts, maps)));
  auto t1 = std::chrono::steady_clock::now();
  double us =
      std::chrono::duration<double, std::micro>(t1 - t0).count() / rounds;
  MESSAGE("encoding the tensor maps of Q, K, V and O: " << us
                                                     << " us of host time");
  CHECK(us < 2.0);
}

TEST_CASE("kernel cache: cold compile, warm disk load, hot memory hit") {
  char dir[] = "/tmp/flashjit-cache-timing-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  AttentionSpec spec;
  spec.headDim = 128;
  spec.causal = true;
  spec.numHeads = 16;
  spec.numKVHeads = 16;
  ContextOptions options;
  options.cache.directory = dir;
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };

  auto cold = Context::create(options);
  REQUIRE(bool(cold));
  auto t0 = Clock::now();
  auto k1 = (*cold)->compile(spec);
  auto t1 = Clock::now();
  REQUIRE(bool(k1));
  CHECK((*cold)->cache().stats().builds == 1);

  auto warm = Context::create(options);
  REQUIRE(bool(warm));
  auto t2 = Clock::now();
  auto k2 = (*warm)->compile(spec);
  auto t3 = Clock::now();
  REQUIRE(bool(k2));
  CHECK((*warm)->cache().stats().diskHits == 1);
  CHECK((*warm)->cache().stats().builds == 0);

  const int hits = 100000;
  auto t4 = Clock::now();
  for (int i = 0; i < hits; ++i)
    REQUIRE(bool((*warm)->compile(spec)));
  auto t5 = Clock::now();
  double hotUs = ms(t4, t5) * 1000.0 / hits;
  MESSAGE("cold compile+load " << ms(t0, t1) << " ms, warm (disk + PTX load, driver JIT cache) "
                               << ms(t2, t3) << " ms, hot (memory) " << hotUs
                               << " us");
  CHECK(ms(t2, t3) < 5.0);
  CHECK(hotUs < 2.0);
  std::string cleanup = std::string("rm -rf ") + dir;
  (void)std::system(cleanup.c_str());
}
