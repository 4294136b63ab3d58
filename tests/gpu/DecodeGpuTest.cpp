//===- DecodeGpuTest.cpp - decode kernels against the float64 reference ---===//
// Why: a decode step must be exact for every query length, KV length,
// group shape, cache layout and split count it is used with: outputs,
// LSE and workspace poisoned with NaN first, cache rows past each length
// and unused pages NaN too (a kernel that reads them fails), every row
// compared (runDecodeAndCheck), NaN never passes.
#include "GpuTestUtil.h"

#include "flashjit/Decode.h"
#include "flashjit/DevTools/DecodeHarness.h"

#include <tuple>

using namespace flashjit;
using namespace flashjit::test;

namespace {
DecodeSpec makeSpec(int64_t d, DType dtype, int64_t heads, int64_t kvHeads,
                    int64_t qLen, int64_t pageSize = 0, bool causal = true) {
  DecodeSpec s;
  s.headDim = d;
  s.dtype = dtype;
  s.numHeads = heads;
  s.numKVHeads = kvHeads;
  s.qLen = qLen;
  s.pageSize = pageSize;
  s.causal = causal;
  return s;
}

void checkDecode(const DecodeSpec &spec, int64_t batch,
                 std::vector<int64_t> kvLens, int64_t splits = 0,
                 bool callerWorkspace = true,
                 std::optional<double> scale = std::nullopt) {
  DecodeCheckOptions o;
  o.batch = batch;
  o.kvLens = std::move(kvLens);
  o.seed = freshSeed();
  o.numSplits = splits;
  o.callerWorkspace = callerWorkspace;
  o.scale = scale;
  std::string lens;
  for (int64_t l : o.kvLens)
    lens += std::to_string(l) + " ";
  INFO(spec.canonical() << " batch " << batch << " kv lens " << lens
                        << "splits " << splits << " seed " << o.seed);
  auto kernel = gpuContext().decodeKernel(spec);
  REQUIRE_MESSAGE(bool(kernel), llvm::toString(kernel.takeError()));
  auto report = runDecodeAndCheck(**kernel, o);
  REQUIRE_MESSAGE(bool(report), llvm::toString(report.takeError()));
  INFO(report->summary());
  CHECK(report->nonFinite == 0);
  CHECK(report->relError <= report->tolerance);
  CHECK(report->lseRelError <= report->tolerance);
  CHECK(report->passed);
}
} // namespace

TEST_CASE("decode: q_len x KV length, GQA 32/8, bf16 head dim 128") {
  for (int64_t qLen : {1, 2, 7, 16})
    for (int64_t kv : {1, 17, 1000, 4097})
      checkDecode(makeSpec(128, DType::BF16, 32, 8, qLen), 2, {kv});
}

TEST_CASE("decode: MQA 8/1 and MHA, f16 and bf16, head dims 64 and 128") {
  for (int64_t d : {64, 128})
    for (DType dtype : {DType::F16, DType::BF16})
      for (auto [heads, kvHeads] :
           {std::pair<int64_t, int64_t>{8, 1}, {4, 4}, {32, 8}})
        for (int64_t qLen : {1, 7, 16})
          checkDecode(makeSpec(d, dtype, heads, kvHeads, qLen), 3,
                      {17, 1000, 4097});
}

TEST_CASE("decode: mixed lengths in one batch, empty sequences included") {
  for (int64_t qLen : {1, 2, 16})
    checkDecode(makeSpec(128, DType::BF16, 32, 8, qLen), 7,
                {0, 1, 17, 1000, 4097, 9000, 3});
}

TEST_CASE("decode: split counts, the combine and empty splits") {
  DecodeSpec spec = makeSpec(128, DType::BF16, 32, 8, 2);
  for (int64_t splits : {1, 2, 3, 7, 64, 256})
    checkDecode(spec, 3, {100, 4097, 0}, splits);
  // The kernel's own workspace (per stream), grown between launches.
  checkDecode(spec, 2, {5000}, 4, /*callerWorkspace=*/false);
  checkDecode(spec, 5, {5000}, 16, /*callerWorkspace=*/false);
}

TEST_CASE("decode: wide scores (scale 1) stress the LSE merge") {
  checkDecode(makeSpec(128, DType::F16, 32, 8, 7), 2, {4097, 300}, 0, true,
              1.0);
  checkDecode(makeSpec(64, DType::BF16, 8, 1, 1), 2, {4097, 300}, 9, true, 1.0);
}

TEST_CASE("decode: head dim 256") {
  for (DType dtype : {DType::F16, DType::BF16})
    for (auto [heads, kvHeads, qLen] :
         {std::tuple<int64_t, int64_t, int64_t>{32, 8, 1},
          {32, 8, 7},
          {16, 1, 4},
          {8, 1, 16}})
      checkDecode(makeSpec(256, dtype, heads, kvHeads, qLen), 3,
                  {17, 1000, 4097});
  checkDecode(makeSpec(256, DType::BF16, 32, 8, 2, 64), 3, {1, 1000, 4097});
}

TEST_CASE("decode: MQA 32/1 with 16 tokens (head chunks)") {
  checkDecode(makeSpec(128, DType::BF16, 32, 1, 16), 2, {1000, 33});
  checkDecode(makeSpec(64, DType::F16, 32, 1, 16), 2, {1000, 33});
}

TEST_CASE("decode: without the causal mask") {
  checkDecode(makeSpec(128, DType::BF16, 32, 8, 7, 0, /*causal=*/false), 2,
              {1000, 5});
}

TEST_CASE("decode: paged caches, shuffled pages") {
  for (int64_t page : {16, 64, 256})
    for (int64_t qLen : {1, 7})
      checkDecode(makeSpec(128, DType::BF16, 32, 8, qLen, page), 5,
                  {1, 17, 1000, 4097, 0});
  checkDecode(makeSpec(64, DType::F16, 8, 1, 16, 16), 3, {2000, 31, 16});
  checkDecode(makeSpec(128, DType::F16, 32, 1, 16, 48), 2, {333, 1000});
}

TEST_CASE("decode: a long cache, 100k keys") {
  checkDecode(makeSpec(128, DType::BF16, 8, 1, 1), 1, {100000});
  checkDecode(makeSpec(128, DType::BF16, 32, 8, 2, 64), 1, {100003});
}

TEST_CASE("decode: each copy path and L2 hint (tile knobs) is exact") {
  // copyMode 1: per-thread cp.async; 2: bulk copies on mbarriers (sm_90),
  // with evict_first or not; tiles of 32 to 128 keys, 2 to 6 stages (the
  // former default, 64 keys in 3 stages, among them).
  const bool hopper = gpuContext().target().computeCapability >= 90;
  struct Knobs {
    int64_t blockN, stages, copyMode, evictFirst;
  };
  for (Knobs k : {Knobs{0, 0, 1, -1}, Knobs{64, 3, 1, 0}, Knobs{0, 0, 2, -1},
                  Knobs{0, 0, 2, 1},
                  Knobs{64, 2, 2, 0}, Knobs{32, 6, 2, 0},
                  Knobs{128, 2, 2, 1}}) {
    if (k.copyMode == 2 && !hopper)
      continue;
    // A tile the spec's warps cannot split (32 keys over 4 warps) is
    // skipped: validate() refuses it, as the unit tests check.
    auto check = [&](DecodeSpec s, int64_t batch, std::vector<int64_t> lens,
                     int64_t splits = 0) {
      s.blockN = k.blockN;
      s.stages = k.stages;
      s.copyMode = k.copyMode;
      s.evictFirst = k.evictFirst;
      if (llvm::Error err = s.validate()) {
        llvm::consumeError(std::move(err));
        return;
      }
      checkDecode(s, batch, std::move(lens), splits);
    };
    check(makeSpec(128, DType::BF16, 32, 8, 1), 3, {1, 1000, 4097});
    check(makeSpec(128, DType::BF16, 32, 8, 7), 7,
          {0, 1, 17, 1000, 4097, 9000, 3}, 5);
    check(makeSpec(128, DType::F16, 8, 1, 16, 16), 3, {2000, 31, 16});
    check(makeSpec(128, DType::BF16, 32, 8, 2, 64), 2, {100003, 65});
    check(makeSpec(64, DType::BF16, 32, 8, 1, 256), 5, {1, 17, 1000, 4097, 0});
  }
  if (hopper)
    for (int64_t d : {64, 256}) {
      DecodeSpec s = makeSpec(d, DType::BF16, 32, 8, 2);
      s.copyMode = 2;
      checkDecode(s, 3, {17, 1000, 4097});
    }
}

TEST_CASE("decode: bad arguments launch nothing") {
  auto kernel = gpuContext().decodeKernel(makeSpec(128, DType::BF16, 8, 2, 1));
  REQUIRE(bool(kernel));
  DecodeArgs args; // all null
  llvm::Error err = (*kernel)->decode(args);
  REQUIRE(bool(err));
  CHECK(llvm::toString(std::move(err)).find("batch") != std::string::npos);
}
