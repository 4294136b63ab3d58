//===- VarlenDispatchTest.cpp - which kernel a varlen launch runs ---------===//
// Why: one varlen handle must serve batches of short and of long sequences
// with the config of max_seqlen_q's length class, as forward() serves each
// call with its lengths' class; the fake driver (FakeCudaDriver.cpp) shows
// which module's function each launch ran, without a GPU.
#include "FakeDriverUtil.h"

#include <cstring>

using namespace flashjit;
using namespace flashjit::test;

TEST_CASE("forwardVarlen launches the kernel of max_seqlen_q's length class") {
  // One varlen handle: a batch of short sequences goes to the short class's
  // kernel (the config without TMA boxes), a batch of long ones to the
  // handle's own, as forward() sends each call to its lengths' class.
  TempDir dir;
  AttentionSpec spec;
  spec.headDim = 128;
  spec.numHeads = 4;
  spec.numKVHeads = 2;
  spec.causal = true;
  spec.varlen = true;
  setCurrent(primary(0));
  auto ctx = contextOn(0, dir);
  KernelOptions options;
  options.seqlen = 4096;
  auto kernel = ctx->compile(spec, options);
  REQUIRE_MESSAGE(bool(kernel), llvm::toString(kernel.takeError()));
  auto shortClass = (*kernel)->kernelForLengths(34, 34);
  REQUIRE_MESSAGE(bool(shortClass), llvm::toString(shortClass.takeError()));
  REQUIRE((*shortClass != *kernel));
  CHECK((*shortClass)->info().config.family == "mma_sync");
  CHECK((*kernel)->info().config.family != "mma_sync");

  const int64_t batch = 4, tokens = 4 * 34;
  Problem p(spec, primary(0), 1, tokens); // the packed [1, heads, tokens, d]
  std::vector<int32_t> offsets = {0, 34, 68, 102, 136};
  CUdeviceptr cu = 0;
  REQUIRE_FALSE(bool(FLASHJIT_CU(drv(), cuMemAlloc, &cu, 4 * offsets.size())));
  std::memcpy(reinterpret_cast<void *>(cu), offsets.data(), 4 * offsets.size());
  VarlenForwardArgs args;
  args.packed = p.args;
  args.cuSeqlensQ = args.cuSeqlensK = reinterpret_cast<const int32_t *>(cu);
  args.batch = batch;
  auto launched = [&](const Kernel &k, int64_t maxSeqlenQ) {
    VarlenForwardArgs a = args;
    a.maxSeqlenQ = maxSeqlenQ;
    int before = fake().launchCount();
    llvm::Error err = k.forwardVarlen(a);
    REQUIRE_MESSAGE(!err, llvm::toString(std::move(err)));
    REQUIRE(fake().launchCount() == before + 1);
    return fake().launchFunction(before);
  };
  CUfunction viaHandle = launched(**kernel, 34);
  CHECK(viaHandle == launched(**shortClass, 34));
  CUfunction longOne = launched(**kernel, tokens);
  CHECK(longOne != viaHandle);
  CHECK(launched(**shortClass, tokens) == longOne);
  // A pinned handle runs its own config whatever the batch.
  options.perLengthConfig = false;
  auto pinned = ctx->compile(spec, options);
  REQUIRE_MESSAGE(bool(pinned), llvm::toString(pinned.takeError()));
  CHECK(launched(**pinned, 34) == launched(**pinned, tokens));
  (void)drv().cuMemFree(cu);
}
