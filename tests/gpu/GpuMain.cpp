//===- GpuMain.cpp - GPU test driver: skip (77) without a GPU -------------===//
// Why: CI has no GPU; there the suite must say "skipped", never "passed".
#define DOCTEST_CONFIG_IMPLEMENT
#include "GpuTestUtil.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace flashjit::test {
static std::unique_ptr<Context> context;
Context &gpuContext() { return *context; }
} // namespace flashjit::test

int main(int argc, char **argv) {
  using namespace flashjit;
  // Kernels compiled by the tests go to a private cache.
  ContextOptions options;
  char dir[] = "/tmp/flashjit-gpu-tests-XXXXXX";
  if (!mkdtemp(dir)) {
    std::perror("mkdtemp");
    return 1;
  }
  options.cache.directory = dir;
  auto ctx = Context::create(options);
  if (!ctx) {
    std::fprintf(stderr, "flashjit-gpu-tests: %s\n",
                 llvm::toString(ctx.takeError()).c_str());
    return 1;
  }
  if (!(*ctx)->device()) {
    std::printf("SKIPPED: no GPU (%s)\n", (*ctx)->deviceError().c_str());
    return 77;
  }
  std::printf("GPU: %s (compute %d.%d, %d SMs), target %s\n",
              (*ctx)->device()->name.c_str(), (*ctx)->device()->computeMajor,
              (*ctx)->device()->computeMinor, (*ctx)->device()->smCount,
              (*ctx)->target().chip.c_str());
  test::context = std::move(*ctx);
  if (argc == 2 && std::string(argv[1]) == "--fault-child") {
    // The child runs outside any test case: a failed assertion there
    // prints and exits 2.
    std::setvbuf(stdout, nullptr, _IONBF, 0);
    doctest::Context child;
    child.setAsDefaultForAssertsOutOfTestCases();
    child.setAssertHandler([](const doctest::AssertData &data) {
      std::printf("assertion failed at %s:%d: %s\n", data.m_file, data.m_line,
                  data.m_expr);
      std::_Exit(2);
    });
    int rc = test::runFaultChild();
    std::fflush(stdout);
    // The CUDA context is broken by design: leave without tearing down.
    std::_Exit(rc);
  }
  doctest::Context runner(argc, argv);
  int rc = runner.run();
  test::context.reset();
  std::string cleanup = std::string("rm -rf ") + dir;
  (void)std::system(cleanup.c_str());
  return rc;
}
