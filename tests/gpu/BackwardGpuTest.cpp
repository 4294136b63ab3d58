//===- BackwardGpuTest.cpp - backward kernels against float64 gradients ---===//
// Why: the backward pass is exact like the forward; dQ, dK and dV of every
// supported shape class (odd lengths, Sq != Sk, GQA and MQA, both causal
// alignments, f16 and bf16, every candidate config) are compared with the
// float64 reference on fresh random inputs, gradients and workspace
// poisoned with NaN first (the check counts any NaN left as a failure).
#include "GpuTestUtil.h"

#include "flashjit/Backward.h"
#include "flashjit/DevTools/BackwardCheck.h"
#include "flashjit/Templates/MmaSyncBackward.h"

using namespace flashjit;
using namespace flashjit::test;

namespace {
AttentionSpec makeSpec(int64_t d, DType dtype, bool causal, int64_t heads,
                       int64_t kvHeads,
                       CausalAlign align = CausalAlign::TopLeft) {
  AttentionSpec spec;
  spec.headDim = d;
  spec.dtype = dtype;
  spec.causal = causal;
  spec.numHeads = heads;
  spec.numKVHeads = kvHeads;
  spec.causalAlign = align;
  return spec;
}

void checkBackward(const AttentionSpec &spec, int64_t batch, int64_t seqlenQ,
                   int64_t seqlenK, Layout layout = Layout::BHSD,
                   std::optional<TileConfig> config = std::nullopt,
                   int64_t checkedGroups = 0) {
  BackwardCheckOptions o;
  o.batch = batch;
  o.seqlenQ = seqlenQ;
  o.seqlenK = seqlenK;
  o.layout = layout;
  o.seed = freshSeed();
  o.checkedGroups = checkedGroups;
  INFO(spec.canonical() << " b=" << batch << " sq=" << seqlenQ
                        << " sk=" << seqlenK
                        << (layout == Layout::BSHD ? " bshd" : " bhsd")
                        << " seed=" << o.seed
                        << (config ? " config=" + config->canonical() : ""));
  auto forward = gpuContext().compile(spec);
  REQUIRE_MESSAGE(bool(forward), llvm::toString(forward.takeError()));
  BackwardOptions options;
  options.config = config;
  auto backward = gpuContext().compileBackward(spec, options);
  REQUIRE_MESSAGE(bool(backward), llvm::toString(backward.takeError()));
  auto report = runAndCheckBackward(**forward, **backward, o);
  REQUIRE_MESSAGE(bool(report), llvm::toString(report.takeError()));
  INFO(report->summary());
  MESSAGE(spec.canonical() << " sq=" << seqlenQ << " sk=" << seqlenK << ": "
                           << report->summary());
  CHECK(report->nonFinite == 0);
  CHECK(report->dqError <= report->tolerance);
  CHECK(report->dkError <= report->tolerance);
  CHECK(report->dvError <= report->tolerance);
  CHECK(report->passed);
}
} // namespace

TEST_CASE("backward: head dim x dtype x causal x seqlen") {
  for (int64_t d : {64, 128})
    for (DType dtype : {DType::F16, DType::BF16})
      for (bool causal : {false, true})
        for (int64_t s : {1, 17, 1000})
          checkBackward(makeSpec(d, dtype, causal, 2, 2), /*batch=*/2, s, s);
}

TEST_CASE("backward: head dim 96") {
  for (bool causal : {false, true})
    checkBackward(makeSpec(96, DType::BF16, causal, 2, 1), 1, 333, 333);
}

TEST_CASE("backward: GQA 8/2 and MQA") {
  for (bool causal : {false, true}) {
    checkBackward(makeSpec(128, DType::BF16, causal, 8, 2), 2, 257, 257);
    checkBackward(makeSpec(64, DType::F16, causal, 4, 1), 1, 1000, 1000);
  }
}

TEST_CASE("backward: seqlen_q != seqlen_k, both causal alignments") {
  for (CausalAlign align : {CausalAlign::TopLeft, CausalAlign::BottomRight})
    for (auto [sq, sk] : {std::pair<int64_t, int64_t>{300, 1000},
                          std::pair<int64_t, int64_t>{1000, 300},
                          std::pair<int64_t, int64_t>{17, 129}}) {
      checkBackward(makeSpec(64, DType::F16, true, 2, 2, align), 1, sq, sk);
      checkBackward(makeSpec(128, DType::BF16, true, 4, 2, align), 1, sq, sk);
    }
  checkBackward(makeSpec(128, DType::BF16, false, 2, 1), 2, 17, 1000);
}

TEST_CASE("backward: BSHD layout through strides") {
  for (bool causal : {false, true})
    checkBackward(makeSpec(64, DType::BF16, causal, 4, 2), 3, 333, 333,
                  Layout::BSHD);
}

TEST_CASE("backward: every candidate config") {
  for (int64_t d : {64, 128})
    for (bool causal : {false, true}) {
      AttentionSpec spec = makeSpec(d, DType::BF16, causal, 4, 2);
      for (const TileConfig &config : MmaSyncBackward::candidates(spec))
        checkBackward(spec, 1, 301, 301, Layout::BHSD, config);
    }
}

TEST_CASE("backward: a longer sequence (4097), GQA, causal") {
  checkBackward(makeSpec(128, DType::BF16, true, 4, 2), 1, 4097, 4097,
                Layout::BHSD, std::nullopt, /*checkedGroups=*/1);
  checkBackward(makeSpec(64, DType::F16, false, 2, 2), 1, 4097, 4097,
                Layout::BHSD, std::nullopt, /*checkedGroups=*/1);
}

TEST_CASE("backward: the deterministic mode is an error, not a silent "
          "fallback") {
  BackwardOptions options;
  options.deterministic = true;
  auto backward = gpuContext().compileBackward(
      makeSpec(64, DType::BF16, false, 1, 1), options);
  REQUIRE_FALSE(bool(backward));
  std::string message = llvm::toString(backward.takeError());
  CHECK(message.find("deterministic") != std::string::npos);
}
