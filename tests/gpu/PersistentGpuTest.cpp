//===- PersistentGpuTest.cpp - persistent kernels under streams and graphs ===//
// Why: a persistent kernel's blocks take tiles from counters that must be
// zero when a launch starts and that no concurrent launch may share. These
// tests launch one on many streams from several threads at once, capture it
// into CUDA graphs replayed on other streams beside direct launches on the
// capture stream, and launch after a launch that faulted (in a child
// process: a fault makes the whole CUDA context unusable).
#include "GpuProblem.h"

#include <fstream>
#include <spawn.h>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

using namespace flashjit;
using namespace flashjit::test;

namespace {
AttentionSpec persistentSpec() {
  AttentionSpec spec;
  spec.headDim = 128;
  spec.numHeads = 8;
  spec.numKVHeads = 2;
  spec.causal = true; // tiles of unequal work: the counter's order matters
  return spec;
}

CUstream newStream() {
  auto scope = llvm::cantFail(ScopedContext::enterDevice(gpuDriver(), 0));
  CUstream s = nullptr;
  REQUIRE_FALSE(bool(FLASHJIT_CU(gpuDriver(), cuStreamCreate, &s,
                                 CU_STREAM_NON_BLOCKING)));
  return s;
}

void synchronize() {
  auto scope = llvm::cantFail(ScopedContext::enterDevice(gpuDriver(), 0));
  REQUIRE_FALSE(bool(FLASHJIT_CU(gpuDriver(), cuCtxSynchronize)));
}
} // namespace

TEST_CASE("a persistent kernel on 16 streams at once from 4 threads") {
  if (!hasPersistentFamily())
    return;
  AttentionSpec spec = persistentSpec();
  auto kernel = compileFamily(spec, "wgmma_persistent");
  REQUIRE(kernel);
  REQUIRE(kernel->persistent());
  // Two problems of different tile counts, alternating over the streams.
  GpuProblem big(spec, 2, 2000, freshSeed()), small(spec, 3, 517, freshSeed());
  constexpr int kThreads = 4, kStreamsPerThread = 4, kLaunches = 2;
  constexpr int kStreams = kThreads * kStreamsPerThread;
  std::vector<CUstream> streams;
  // outs[stream * kLaunches + launch]: every launch writes its own output.
  std::vector<std::unique_ptr<GpuOutputs>> outs;
  for (int s = 0; s < kStreams; ++s) {
    streams.push_back(newStream());
    for (int l = 0; l < kLaunches; ++l)
      outs.push_back((s % 2 ? small : big).outputs());
  }
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    std::vector<std::string> errors(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        // The poisoning memsets need a context; forward() would set it.
        auto scope = ScopedContext::enterDevice(gpuDriver(), 0);
        if (!scope) {
          errors[t] = llvm::toString(scope.takeError());
          return;
        }
        for (int l = 0; l < kLaunches; ++l)
          for (int i = 0; i < kStreamsPerThread; ++i) {
            int s = t * kStreamsPerThread + i;
            GpuOutputs &out = *outs[s * kLaunches + l];
            GpuProblem &p = s % 2 ? small : big;
            if (driverExtras().memsetAsync(out.o.ptr(), 0xFF, out.o.bytes(),
                                           streams[s]) != CUDA_SUCCESS ||
                driverExtras().memsetAsync(out.lse.ptr(), 0xFF,
                                           out.lse.bytes(),
                                           streams[s]) != CUDA_SUCCESS) {
              errors[t] = "poisoning failed";
              return;
            }
            if (llvm::Error err = kernel->forward(p.args(out, streams[s]))) {
              errors[t] = llvm::toString(std::move(err));
              return;
            }
          }
      });
    for (std::thread &t : threads)
      t.join();
    for (const std::string &e : errors)
      CHECK_MESSAGE(e.empty(), e);
    synchronize();
    for (int s = 0; s < kStreams; ++s)
      for (int l = 0; l < kLaunches; ++l) {
        ProblemCheck c = (s % 2 ? small : big).check(*outs[s * kLaunches + l]);
        INFO("stream " << s << " launch " << l << ": " << c.summary());
        CHECK(c.passed(spec.dtype));
      }
  }
  for (CUstream s : streams)
    (void)gpuDriver().cuStreamDestroy(s);
}

TEST_CASE("a persistent kernel captured into CUDA graphs, replayed on other "
          "streams at once and beside direct launches on the capture "
          "stream") {
  if (!hasPersistentFamily())
    return;
  AttentionSpec spec = persistentSpec();
  auto kernel = compileFamily(spec, "wgmma_persistent");
  REQUIRE(kernel);
  GpuProblem p(spec, 2, 1500, freshSeed());
  const DriverExtras &x = driverExtras();
  CUstream capture = newStream();
  constexpr int kGraphs = 3;
  std::vector<CUstream> replay;
  std::vector<std::unique_ptr<GpuOutputs>> graphOut;
  std::vector<CUgraph> graphs(kGraphs);
  std::vector<CUgraphExec> execs(kGraphs);
  // The capture stream is used directly before the captures too: its own
  // tile counters exist before any graph holds a launch.
  auto direct = p.outputs();
  direct->poison(capture);
  REQUIRE_FALSE(bool(kernel->forward(p.args(*direct, capture))));
  synchronize();
  for (int g = 0; g < kGraphs; ++g) {
    replay.push_back(newStream());
    graphOut.push_back(p.outputs());
    auto scope = llvm::cantFail(ScopedContext::enterDevice(gpuDriver(), 0));
    CU_OK(x.beginCapture(capture, CU_STREAM_CAPTURE_MODE_GLOBAL));
    graphOut[g]->poison(capture);
    llvm::Error err = kernel->forward(p.args(*graphOut[g], capture));
    CUresult ended = x.endCapture(capture, &graphs[g]);
    REQUIRE_MESSAGE(!err, llvm::toString(std::move(err)));
    CU_OK(ended);
    CU_OK(x.instantiate(&execs[g], graphs[g], 0));
  }
  for (int round = 0; round < 4; ++round) {
    CAPTURE(round);
    // Every graph on its own stream, the first one again on a second
    // stream (the driver orders replays of one executable), and a direct
    // launch on the capture stream, all at once.
    for (int g = 0; g < kGraphs; ++g)
      CU_OK(x.graphLaunch(execs[g], replay[g]));
    direct->poison(capture);
    REQUIRE_FALSE(bool(kernel->forward(p.args(*direct, capture))));
    CU_OK(x.graphLaunch(execs[0], replay[1]));
    synchronize();
    for (int g = 0; g < kGraphs; ++g) {
      ProblemCheck c = p.check(*graphOut[g]);
      INFO("graph " << g << ": " << c.summary());
      CHECK(c.passed(spec.dtype));
    }
    ProblemCheck c = p.check(*direct);
    INFO("direct launch: " << c.summary());
    CHECK(c.passed(spec.dtype));
  }
  for (int g = 0; g < kGraphs; ++g) {
    (void)x.graphExecDestroy(execs[g]);
    (void)x.graphDestroy(graphs[g]);
    (void)gpuDriver().cuStreamDestroy(replay[g]);
  }
  (void)gpuDriver().cuStreamDestroy(capture);
}

namespace flashjit::test {
/// The child of the fault test (GpuMain runs it for --fault-child): a good
/// launch, a launch that faults, then launches again. Prints what happened;
/// exits 0 when the fault and every later launch report an error (none
/// hangs, none crashes), 1 otherwise.
int runFaultChild() {
  if (gpuContext().target().chip != "sm_90a")
    return 0;
  AttentionSpec spec = persistentSpec();
  KernelOptions options;
  options.family = "wgmma_persistent";
  auto kernel = gpuContext().compile(spec, options);
  if (!kernel) {
    std::printf("compile: %s\n", llvm::toString(kernel.takeError()).c_str());
    return 1;
  }
  const CudaDriver &drv = gpuDriver();
  GpuProblem p(spec, 1, 300, 7);
  auto out = p.outputs();
  if (llvm::Error err = (*kernel)->forward(p.args(*out))) {
    std::printf("good launch: %s\n", llvm::toString(std::move(err)).c_str());
    return 1;
  }
  std::printf("good launch synchronized: %d\n",
              static_cast<int>(drv.cuCtxSynchronize()));
  // K at an address nothing is mapped at (1 MiB: aligned, so the checks
  // pass; the first pages of the address space are never mapped).
  ForwardArgs bad = p.args(*out);
  bad.k.data = reinterpret_cast<void *>(uintptr_t(0x100000));
  llvm::Error launched = (*kernel)->forward(bad);
  std::printf("faulting launch: %s\n",
              launched ? llvm::toString(std::move(launched)).c_str() : "queued");
  CUresult faulted = drv.cuCtxSynchronize();
  std::printf("its synchronize: %d\n", static_cast<int>(faulted));
  int later = 0;
  for (int i = 0; i < 3; ++i) {
    llvm::Error err = (*kernel)->forward(p.args(*out));
    CUresult sync = drv.cuCtxSynchronize();
    if (err) {
      auto [code, message] = takeErrorParts(std::move(err));
      std::printf("later launch %d: %s (%s), synchronize %d\n", i,
                  errorCodeName(code), message.c_str(), static_cast<int>(sync));
      later += code == ErrorCode::LaunchError;
    } else {
      std::printf("later launch %d queued, synchronize %d\n", i,
                  static_cast<int>(sync));
      later += sync != CUDA_SUCCESS;
    }
  }
  return faulted != CUDA_SUCCESS && later == 3 ? 0 : 1;
}
} // namespace flashjit::test

TEST_CASE("after a launch of a persistent kernel faults, later launches "
          "report the error (a child process)") {
  if (!hasPersistentFamily())
    return;
  char log[] = "/tmp/flashjit-fault-child-XXXXXX";
  int fd = ::mkstemp(log);
  REQUIRE(fd >= 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, 1);
  posix_spawn_file_actions_adddup2(&actions, fd, 2);
  char self[] = "/proc/self/exe", flag[] = "--fault-child";
  char *argv[] = {self, flag, nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, self, &actions, nullptr, argv, environ) == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fd);
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(log);
  MESSAGE("child: " << text.str());
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
