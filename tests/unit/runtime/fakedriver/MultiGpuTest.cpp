//===- MultiGpuTest.cpp - a Context bound to device N, on a fake driver ---===//
// Why: a server runs one thread per GPU, frameworks switch devices, and a
// caller may have any context current when it calls flashjit. A Context
// bound to device N must load, allocate and launch on device N all the
// same, and leave the caller's context current. Run against
// FakeCudaDriver.cpp (two fake GPUs), found first on LD_LIBRARY_PATH; the
// fake refuses a launch whose function belongs to another context, as the
// real driver does.
#include "FakeDriverUtil.h"

#include "flashjit/Runtime/Launch.h"
#include "flashjit/Runtime/StreamBuffers.h"

#include <set>
#include <thread>

using namespace flashjit;
using namespace flashjit::test;


TEST_CASE("the fake driver has two GPUs, each with its primary context") {
  (void)fake();
  CHECK(llvm::cantFail(drv().deviceCount(1)) == 2);
  CHECK(primary(0) != primary(1));
  CHECK(fake().contextDevice(primary(1)) == 1);
  CHECK(bool(drv().primaryContext(0)));
  std::string why = llvm::toString(drv().primaryContext(2).takeError());
  CHECK(why.find("CUDA device 2 does not exist") != std::string::npos);
}

TEST_CASE("a context scope pushes over another context and pops back") {
  (void)fake();
  setCurrent(primary(0));
  {
    auto scope = ScopedContext::enter(drv(), primary(1));
    REQUIRE(bool(scope));
    CHECK(scope->pushed());
    CHECK(currentContext() == primary(1));
  }
  CHECK(currentContext() == primary(0));
  {
    // Already current: one cuCtxGetCurrent, nothing to push or pop.
    long push = fake().calls("cuCtxPushCurrent"),
         set = fake().calls("cuCtxSetCurrent");
    auto scope = ScopedContext::enter(drv(), primary(0));
    REQUIRE(bool(scope));
    CHECK_FALSE(scope->pushed());
    CHECK(fake().calls("cuCtxPushCurrent") == push);
    CHECK(fake().calls("cuCtxSetCurrent") == set);
  }
  // A thread with no context gets the device's primary one, and keeps it.
  std::thread([] {
    CHECK(currentContext() == nullptr);
    {
      auto scope = ScopedContext::enterDevice(drv(), 1);
      REQUIRE(bool(scope));
      CHECK_FALSE(scope->pushed());
    }
    CHECK(currentContext() == primary(1));
  }).join();
}

TEST_CASE("a Context on device 1 loads and launches on device 1 whatever "
          "context the thread has, and leaves the caller's current") {
  TempDir dir;
  AttentionSpec spec = smallSpec();
  // The thread works on device 0 (as after cudaSetDevice(0)).
  setCurrent(primary(0));
  auto ctx = contextOn(1, dir);
  auto kernel = ctx->compile(spec, TileConfig{"mma_sync", 64, 32, 2, 4});
  REQUIRE_MESSAGE(bool(kernel), llvm::toString(kernel.takeError()));
  CHECK(currentContext() == primary(0));

  Problem onDevice1(spec, primary(1), 1, 100);
  int before = fake().launchCount();
  llvm::Error err = (*kernel)->forward(onDevice1.args);
  REQUIRE_MESSAGE(!err, llvm::toString(std::move(err)));
  REQUIRE(fake().launchCount() == before + 1);
  CHECK(fake().launchDevice(before) == 1);
  CHECK(fake().launchContext(before) == primary(1));
  CHECK(currentContext() == primary(0));

  // A context the caller created on device 1 (not the primary one) is
  // current: the kernel still runs in the primary context it was loaded in.
  CUcontext own = nullptr;
  REQUIRE(fake().ctxCreate(&own, nullptr, 0, 1) == CUDA_SUCCESS);
  CHECK(currentContext() == own);
  err = (*kernel)->forward(onDevice1.args);
  REQUIRE_MESSAGE(!err, llvm::toString(std::move(err)));
  CHECK(fake().launchContext(before + 1) == primary(1));
  CHECK(currentContext() == own);
  fake().ctxDestroy(own);

  // A thread with no context at all.
  std::thread([&] {
    llvm::Error e = (*kernel)->forward(onDevice1.args);
    CHECK_MESSAGE(!e, llvm::toString(std::move(e)));
    CHECK(currentContext() == primary(1));
  }).join();
  CHECK(fake().launchContext(before + 2) == primary(1));

  // Already current: a launch makes no context calls beyond one query.
  setCurrent(primary(1));
  long push = fake().calls("cuCtxPushCurrent"),
       set = fake().calls("cuCtxSetCurrent"),
       get = fake().calls("cuCtxGetCurrent");
  REQUIRE_FALSE(bool((*kernel)->forward(onDevice1.args)));
  CHECK(fake().calls("cuCtxPushCurrent") == push);
  CHECK(fake().calls("cuCtxSetCurrent") == set);
  CHECK(fake().calls("cuCtxGetCurrent") == get + 1);
  setCurrent(primary(0));
}

TEST_CASE("two Contexts on two devices, one thread each, and one thread "
          "alternating between them") {
  TempDir dir;
  AttentionSpec spec = smallSpec();
  auto ctx0 = contextOn(0, dir);
  auto ctx1 = contextOn(1, dir);
  TileConfig config{"mma_sync", 64, 32, 2, 4};
  auto k0 = ctx0->compile(spec, config);
  auto k1 = ctx1->compile(spec, config);
  REQUIRE(bool(k0));
  REQUIRE(bool(k1));
  Problem p0(spec, primary(0), 1, 64), p1(spec, primary(1), 1, 64);
  int before = fake().launchCount();
  std::thread t0([&] {
    for (int i = 0; i < 50; ++i)
      CHECK_FALSE(bool((*k0)->forward(p0.args)));
  });
  std::thread t1([&] {
    for (int i = 0; i < 50; ++i)
      CHECK_FALSE(bool((*k1)->forward(p1.args)));
  });
  t0.join();
  t1.join();
  for (int i = 0; i < 10; ++i) {
    CHECK_FALSE(bool((*k0)->forward(p0.args)));
    CHECK_FALSE(bool((*k1)->forward(p1.args)));
  }
  REQUIRE(fake().launchCount() == before + 120);
  int onDevice[2] = {0, 0};
  for (int i = before; i < before + 120; ++i) {
    int d = fake().launchDevice(i);
    REQUIRE((d == 0 || d == 1));
    CHECK(fake().launchContext(i) == primary(d));
    ++onDevice[d];
  }
  CHECK(onDevice[0] == 60);
  CHECK(onDevice[1] == 60);
}

TEST_CASE("a persistent kernel on device 1: its tile counters live on "
          "device 1, one pair per stream, a fresh pair per captured launch") {
  TempDir dir;
  AttentionSpec spec;
  spec.headDim = 128;
  spec.numHeads = spec.numKVHeads = 4;
  setCurrent(primary(0));
  auto ctx = contextOn(1, dir);
  KernelOptions options;
  options.family = "wgmma_persistent";
  auto kernel = ctx->compile(spec, options);
  REQUIRE_MESSAGE(bool(kernel), llvm::toString(kernel.takeError()));
  REQUIRE((*kernel)->persistent());
  Problem p(spec, primary(1), 2, 300);

  CUstream s1 = nullptr, s2 = nullptr;
  {
    auto scope = llvm::cantFail(ScopedContext::enter(drv(), primary(1)));
    REQUIRE_FALSE(bool(FLASHJIT_CU(drv(), cuStreamCreate, &s1, 0)));
    REQUIRE_FALSE(bool(FLASHJIT_CU(drv(), cuStreamCreate, &s2, 0)));
  }
  auto counterOf = [&](CUstream s) {
    ForwardArgs args = p.args;
    args.stream = s;
    ForwardLaunchParams params;
    llvm::Error err = (*kernel)->prepareLaunch(args, params);
    REQUIRE_MESSAGE(!err, llvm::toString(std::move(err)));
    return params.args.tileCounter;
  };
  uint32_t *a = counterOf(s1), *b = counterOf(s2);
  CHECK(a != b);
  CHECK(counterOf(s1) == a);
  CHECK(fake().pointerDevice(reinterpret_cast<CUdeviceptr>(a)) == 1);
  CHECK(currentContext() == primary(0));
  // Zeroed on first use (in the stream, ahead of the launch).
  CHECK(a[0] == 0);
  CHECK(a[1] == 0);

  // Each thread's per-thread default stream is its own stream.
  uint32_t *mine = counterOf(CU_STREAM_PER_THREAD), *theirs = nullptr;
  std::thread([&] { theirs = counterOf(CU_STREAM_PER_THREAD); }).join();
  CHECK(mine != theirs);
  CHECK(counterOf(CU_STREAM_PER_THREAD) == mine);

  // Launches captured into a graph get a pair each, never the stream's,
  // and a memset that zeroes it ahead of each replay.
  fake().setCapturing(s1, 1);
  long memsets = fake().calls("cuMemsetD32Async");
  uint32_t *c1 = counterOf(s1), *c2 = counterOf(s1);
  CHECK(c1 != a);
  CHECK(c2 != a);
  CHECK(c1 != c2);
  CHECK(fake().calls("cuMemsetD32Async") == memsets + 2);
  fake().setCapturing(s1, 0);
  CHECK(counterOf(s1) == a);

  // Many streams: pairs come from slabs, all distinct.
  std::set<uint32_t *> seen;
  std::vector<CUstream> streams(600);
  {
    auto scope = llvm::cantFail(ScopedContext::enter(drv(), primary(1)));
    for (CUstream &s : streams)
      REQUIRE_FALSE(bool(FLASHJIT_CU(drv(), cuStreamCreate, &s, 0)));
  }
  for (CUstream s : streams)
    seen.insert(counterOf(s));
  CHECK(seen.size() == streams.size());

  int before = fake().launchCount();
  ForwardArgs args = p.args;
  args.stream = s2;
  REQUIRE_FALSE(bool((*kernel)->forward(args)));
  CHECK(fake().launchDevice(before) == 1);
  CHECK(currentContext() == primary(0));
  for (CUstream s : streams)
    (void)drv().cuStreamDestroy(s);
  (void)drv().cuStreamDestroy(s1);
  (void)drv().cuStreamDestroy(s2);
}

TEST_CASE("StreamBuffers: one buffer per stream on its device, grown on "
          "demand; a new stream on a destroyed stream's handle gets its own") {
  setCurrent(primary(0));
  CUstream s1 = nullptr, s2 = nullptr, s3 = nullptr;
  auto create = [&](CUstream &s) {
    auto scope = llvm::cantFail(ScopedContext::enter(drv(), primary(1)));
    REQUIRE_FALSE(bool(FLASHJIT_CU(drv(), cuStreamCreate, &s, 0)));
  };
  create(s1);
  create(s2);
  StreamBuffers buffers(/*deviceOrdinal=*/1, /*ownWhileCapturing=*/true);
  auto bufferOf = [&](CUstream s, size_t bytes) {
    auto buffer = buffers.forStream(s, bytes, /*zeroed=*/true);
    REQUIRE_MESSAGE(bool(buffer), llvm::toString(buffer.takeError()));
    return *buffer;
  };
  CUdeviceptr a = bufferOf(s1, 256);
  CHECK(bufferOf(s1, 256) == a);
  CHECK(fake().pointerDevice(a) == 1);
  CHECK(currentContext() == primary(0));
  // A launch that needs more gets a larger buffer, kept for smaller ones.
  CUdeviceptr big = bufferOf(s1, 4096);
  CHECK(bufferOf(s1, 100) == big);
  CHECK(bufferOf(s2, 256) != big);
  // A captured launch gets a buffer of its own, never the stream's.
  fake().setCapturing(s2, 1);
  CUdeviceptr s2Buffer = bufferOf(s2, 256);
  fake().setCapturing(s2, 0);
  CHECK(bufferOf(s2, 256) != s2Buffer);

  // The driver may hand a destroyed stream's handle to the next stream
  // (the fake does, through its allocator, unless a sanitizer holds freed
  // memory back); the buffers go by stream id, so the new stream never
  // shares the old one's buffer, which its last launch may still use.
  const CUstream old = s1;
  (void)drv().cuStreamDestroy(s1);
  create(s3);
  const std::string reuse = s3 == old ? "reuses" : "does not reuse";
  MESSAGE("the new stream " << reuse << " the destroyed stream's handle");
  CHECK(bufferOf(s3, 256) != big);
  (void)drv().cuStreamDestroy(s2);
  (void)drv().cuStreamDestroy(s3);
}
