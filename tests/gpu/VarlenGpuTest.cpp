//===- VarlenGpuTest.cpp - varlen kernels against the float64 reference ---===//
// Why: a packed batch must be exact for every mix of lengths it is used
// with (empty sequences, one token, lengths no tile divides, up to 9000 in
// one batch), chunked prefill (fewer queries than keys, causal from the
// bottom right), GQA and MHA, every head dim and both dtypes, in both
// families that build varlen kernels, with K and V packed or in a paged
// cache (shuffled pages, unused ones NaN): outputs poisoned with NaN first,
// poisoned rows past the ends of O and LSE left untouched, every sequence
// compared (runAndCheckVarlen), NaN never passes.
#include "GpuTestUtil.h"

#include "flashjit/DevTools/VarlenHarness.h"

#include "flashjit/Templates/KernelTemplate.h"

#include <algorithm>
#include <optional>
#include <string>

using namespace flashjit;
using namespace flashjit::test;

namespace {
AttentionSpec makeSpec(int64_t d, DType dtype, int64_t heads, int64_t kvHeads,
                       bool causal, bool bottomRight = false,
                       int64_t pageSize = 0) {
  AttentionSpec s;
  s.headDim = d;
  s.dtype = dtype;
  s.numHeads = heads;
  s.numKVHeads = kvHeads;
  s.causal = causal;
  s.causalAlign = bottomRight ? CausalAlign::BottomRight : CausalAlign::TopLeft;
  s.varlen = true;
  s.pageSize = pageSize;
  return s;
}

std::shared_ptr<const Kernel>
varlenKernel(const AttentionSpec &spec, const std::string &family,
             std::optional<TileConfig> config = std::nullopt) {
  KernelOptions options;
  options.family = family;
  options.config = config;
  options.perLengthConfig = false;
  auto kernel = gpuContext().compile(spec, options);
  REQUIRE_MESSAGE(bool(kernel), llvm::toString(kernel.takeError()));
  return *kernel;
}

/// Runs `kernel` on the batch `o` describes and checks every sequence.
void checkLaunch(const Kernel &kernel, const VarlenCheckOptions &o) {
  auto report = runAndCheckVarlen(kernel, o);
  REQUIRE_MESSAGE(bool(report), llvm::toString(report.takeError()));
  INFO(report->check.summary());
  CHECK(report->check.nonFinite == 0);
  CHECK(report->writtenOutside == 0);
  CHECK(report->check.relError <= report->check.tolerance);
  CHECK(report->check.lseRelError <= report->check.lseTolerance);
  CHECK(report->check.passed);
}

void checkVarlen(const AttentionSpec &spec, const std::string &family,
                 std::vector<int64_t> lengthsQ,
                 std::vector<int64_t> lengthsK = {}, int64_t rows = 16,
                 std::optional<TileConfig> config = std::nullopt) {
  VarlenCheckOptions o;
  o.lengthsQ = std::move(lengthsQ);
  o.lengthsK = std::move(lengthsK);
  o.seed = freshSeed();
  o.rowsPerSequence = rows;
  std::string lens;
  for (size_t i = 0; i < o.lengthsQ.size(); ++i)
    lens += std::to_string(o.lengthsQ[i]) +
            (o.lengthsK.empty() ? "" : "x" + std::to_string(o.lengthsK[i])) +
            " ";
  auto kernel = varlenKernel(spec, family, config);
  INFO(spec.canonical() << " " << kernel->info().config.canonical()
                        << " lengths " << lens << "seed " << o.seed);
  checkLaunch(*kernel, o);
}

const char *const kFamilies[] = {"wgmma", "wgmma_persistent", "mma_sync"};
} // namespace

TEST_CASE("varlen: mixed lengths with empty ones, up to 9000, GQA 32/8 bf16") {
  for (const char *family : kFamilies)
    for (bool causal : {false, true})
      checkVarlen(makeSpec(128, DType::BF16, 32, 8, causal), family,
                  {0, 1, 17, 1000, 4097, 0, 9000, 3});
}

TEST_CASE("varlen: chunked prefill, queries appended to a cached prefix") {
  for (const char *family : kFamilies)
    for (int64_t d : {64, 128})
      checkVarlen(makeSpec(d, DType::BF16, 32, 8, /*causal=*/true,
                           /*bottomRight=*/true),
                  family, {1, 17, 0, 1000, 300, 4097},
                  {1, 1000, 5, 1017, 4096, 4097});
}

TEST_CASE("varlen: MHA and GQA, f16 and bf16, head dims 64, 128, 256") {
  for (const char *family : kFamilies)
    for (int64_t d : {64, 128, 256})
      for (DType dtype : {DType::F16, DType::BF16})
        for (auto [heads, kvHeads] :
             {std::pair<int64_t, int64_t>{8, 8}, {32, 8}})
          checkVarlen(makeSpec(d, dtype, heads, kvHeads, /*causal=*/d != 64),
                      family, {17, 0, 1000, 1, 4097, 129});
}

TEST_CASE("varlen: many short sequences") {
  std::vector<int64_t> lengths(700, 34);
  for (size_t i = 0; i < lengths.size(); i += 7)
    lengths[i] = static_cast<int64_t>(i % 97);
  for (const char *family : kFamilies)
    checkVarlen(makeSpec(128, DType::BF16, 16, 4, /*causal=*/true), family,
                lengths, {}, 8);
}

TEST_CASE("varlen: one handle serves short and long batches, each with its "
          "length class's config") {
  // forwardVarlen takes the class of max_seqlen_q, as forward() takes its
  // call's: a handle built for 4096 runs 34-token batches on the short
  // class's kernel (mma_sync), one built for 34 runs long batches on a
  // wgmma kernel; each must be exact.
  AttentionSpec spec = makeSpec(128, DType::BF16, 16, 4, /*causal=*/true);
  for (int64_t hint : {4096, 34}) {
    KernelOptions options;
    options.seqlen = hint;
    auto kernel = gpuContext().compile(spec, options);
    REQUIRE_MESSAGE(bool(kernel), llvm::toString(kernel.takeError()));
    auto shortClass = (*kernel)->kernelForLengths(34, 34);
    REQUIRE_MESSAGE(bool(shortClass), llvm::toString(shortClass.takeError()));
    CHECK((*shortClass)->info().config.family == "mma_sync");
    auto longClass = (*kernel)->kernelForLengths(3000, 3000);
    REQUIRE_MESSAGE(bool(longClass), llvm::toString(longClass.takeError()));
    CHECK((*longClass)->info().config.family != "mma_sync");
    for (std::vector<int64_t> lengths :
         {std::vector<int64_t>(300, 34), {17, 0, 3000, 34, 1000}}) {
      VarlenCheckOptions o;
      o.lengthsQ = lengths;
      o.seed = freshSeed();
      o.rowsPerSequence = 8;
      INFO("hint " << hint << " longest " << *std::max_element(
                                                 lengths.begin(), lengths.end())
                   << " seed " << o.seed);
      checkLaunch(**kernel, o);
    }
  }
}

TEST_CASE("varlen paged: chunked prefill from pages of 16, 64 and 256") {
  for (const char *family : kFamilies)
    for (int64_t page : {16, 64, 256})
      checkVarlen(makeSpec(128, DType::BF16, 32, 8, /*causal=*/true,
                           /*bottomRight=*/true, page),
                  family, {1, 17, 0, 1000, 300, 4097, 2, 7},
                  {1, 1000, 5, 1017, 4096, 4097, 9000, 0});
}

TEST_CASE("varlen paged: head dims 64 and 256, MHA and MQA, f16, unmasked") {
  for (const char *family : kFamilies)
    for (int64_t d : {64, 256})
      for (auto [heads, kvHeads] :
           {std::pair<int64_t, int64_t>{8, 8}, {8, 1}})
        checkVarlen(makeSpec(d, DType::F16, heads, kvHeads, /*causal=*/false,
                             /*bottomRight=*/false, d == 64 ? 32 : 16),
                    family, {17, 0, 1000, 1, 129}, {17, 3, 1000, 4097, 129});
}

TEST_CASE("varlen paged: every wgmma candidate that pages of 16 and 256 "
          "allow") {
  for (const char *family : {"wgmma", "wgmma_persistent"}) {
    const KernelTemplate *tmpl = lookupTemplate(family);
    REQUIRE(tmpl);
    for (int64_t page : {16, 256})
      for (bool causal : {false, true}) {
        AttentionSpec spec = makeSpec(128, DType::BF16, 8, 2, causal,
                                      /*bottomRight=*/true, page);
        for (const TileConfig &config : tmpl->candidates(spec)) {
          if (llvm::Error err = tmpl->checkConfig(spec, config)) {
            llvm::consumeError(std::move(err));
            continue;
          }
          checkVarlen(spec, family, {300, 0, 1000}, {333, 17, 1000}, 8,
                      config);
        }
      }
  }
}

TEST_CASE("varlen paged: a 100k-key cache") {
  for (const char *family : kFamilies)
    checkVarlen(makeSpec(128, DType::BF16, 32, 8, /*causal=*/true,
                         /*bottomRight=*/true, 64),
                family, {16, 1}, {100000, 1000}, 8);
}

TEST_CASE("varlen: launches that mix up dense and varlen kernels are refused") {
  AttentionSpec dense = makeSpec(128, DType::BF16, 8, 8, true);
  dense.varlen = false;
  auto denseKernel = gpuContext().compile(dense);
  REQUIRE(bool(denseKernel));
  auto varlen = varlenKernel(makeSpec(128, DType::BF16, 8, 8, true), "wgmma");
  VarlenForwardArgs args;
  args.batch = 1;
  args.maxSeqlenQ = 1;
  llvm::Error onDense = (*denseKernel)->forwardVarlen(args);
  CHECK(llvm::toString(std::move(onDense)).find("not a varlen kernel") !=
        std::string::npos);
  ForwardArgs plain;
  llvm::Error onVarlen = varlen->forward(plain);
  CHECK(llvm::toString(std::move(onVarlen)).find("forwardVarlen") !=
        std::string::npos);
  llvm::Error noOffsets = varlen->forwardVarlen(args);
  CHECK(llvm::toString(std::move(noOffsets)).find("cu_seqlens_q") !=
        std::string::npos);
  KernelOptions cluster;
  cluster.family = "wgmma_cluster";
  auto refused =
      gpuContext().compile(makeSpec(128, DType::BF16, 8, 8, false), cluster);
  REQUIRE_FALSE(bool(refused));
  CHECK(llvm::toString(refused.takeError()).find("varlen") !=
        std::string::npos);
}
