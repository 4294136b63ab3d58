//===- VarlenBackwardGpuTest.cpp - the varlen backward against float64 ----===//
// Why: training on packed sequences must be as exact as on padded ones:
// dQ, dK and dV of every sequence of a packed batch (empty sequences, one
// token, lengths no tile divides, fewer queries than keys and the reverse,
// keys and no queries, queries and no keys) against the float64 gradients
// of that sequence alone, with GQA, MQA and MHA, both causal alignments,
// sliding windows, head dims 64 and 128, f16 and bf16 and every candidate
// config; gradients and workspace poisoned with NaN first, poisoned rows
// past the gradients' ends left untouched (runAndCheckVarlenBackward), NaN
// never passes.
#include "GpuTestUtil.h"

#include "flashjit/Backward.h"
#include "flashjit/DevTools/VarlenBackwardCheck.h"
#include "flashjit/Templates/WgmmaBackward.h"

#include <optional>
#include <string>

using namespace flashjit;
using namespace flashjit::test;

namespace {
AttentionSpec makeSpec(int64_t d, DType dtype, int64_t heads, int64_t kvHeads,
                       bool causal, bool bottomRight = false) {
  AttentionSpec s;
  s.headDim = d;
  s.dtype = dtype;
  s.numHeads = heads;
  s.numKVHeads = kvHeads;
  s.causal = causal;
  s.causalAlign = bottomRight ? CausalAlign::BottomRight : CausalAlign::TopLeft;
  s.varlen = true;
  return s;
}

void checkVarlenBackward(const AttentionSpec &spec,
                         std::vector<int64_t> lengthsQ,
                         std::vector<int64_t> lengthsK = {},
                         std::optional<TileConfig> config = std::nullopt) {
  VarlenBackwardCheckOptions o;
  o.lengthsQ = std::move(lengthsQ);
  o.lengthsK = std::move(lengthsK);
  o.seed = freshSeed();
  std::string lens;
  for (size_t i = 0; i < o.lengthsQ.size(); ++i)
    lens += std::to_string(o.lengthsQ[i]) +
            (o.lengthsK.empty() ? "" : "x" + std::to_string(o.lengthsK[i])) +
            " ";
  auto forward = gpuContext().compile(spec);
  REQUIRE_MESSAGE(bool(forward), llvm::toString(forward.takeError()));
  BackwardOptions options;
  options.config = config;
  auto backward = gpuContext().compileBackward(spec, options);
  REQUIRE_MESSAGE(bool(backward), llvm::toString(backward.takeError()));
  INFO(spec.canonical() << " " << (*backward)->info().config.canonical()
                        << " lengths " << lens << "seed " << o.seed);
  auto report = runAndCheckVarlenBackward(**forward, **backward, o);
  REQUIRE_MESSAGE(bool(report), llvm::toString(report.takeError()));
  INFO(report->check.summary());
  MESSAGE(spec.canonical() << " " << (*backward)->info().config.canonical()
                           << " lengths " << lens << ": "
                           << report->check.summary() << ", written outside "
                           << report->writtenOutside);
  CHECK(report->check.nonFinite == 0);
  CHECK(report->writtenOutside == 0);
  CHECK(report->check.dqError <= report->check.tolerance);
  CHECK(report->check.dkError <= report->check.tolerance);
  CHECK(report->check.dvError <= report->check.tolerance);
  CHECK(report->check.checkedGroups > 0);
  CHECK(report->check.passed);
}

bool hopper() { return gpuContext().target().archSpecific; }
} // namespace

TEST_CASE("varlen backward: mixed lengths with empty ones, GQA 32/8, head "
          "dims 64 and 128, causal both alignments and not") {
  if (!hopper())
    return; // the varlen backward runs on wgmma_bwd (sm_90a)
  for (int64_t d : {64, 128})
    for (DType dtype : {DType::BF16, DType::F16})
      for (auto [causal, bottomRight] :
           {std::pair{false, false}, std::pair{true, false},
            std::pair{true, true}})
        checkVarlenBackward(makeSpec(d, dtype, 32, 8, causal, bottomRight),
                            {0, 1, 17, 129, 1000, 3, 257});
}

TEST_CASE("varlen backward: chunked (fewer queries than keys), more queries "
          "than keys, keys without queries and queries without keys; MQA "
          "and MHA") {
  if (!hopper())
    return;
  const std::vector<int64_t> q = {5, 300, 1, 64, 0, 200, 1000};
  const std::vector<int64_t> k = {1000, 300, 77, 0, 130, 65, 1500};
  for (int64_t d : {64, 128}) {
    checkVarlenBackward(makeSpec(d, DType::BF16, 8, 1, true, true), q, k);
    checkVarlenBackward(makeSpec(d, DType::F16, 4, 4, true, false), q, k);
    checkVarlenBackward(makeSpec(d, DType::BF16, 8, 2, false), q, k);
  }
}

TEST_CASE("varlen backward: sliding windows and a long sequence") {
  if (!hopper())
    return;
  for (int64_t d : {64, 128}) {
    AttentionSpec window = makeSpec(d, DType::BF16, 8, 2, true, true);
    window.windowLeft = 256;
    checkVarlenBackward(window, {4097, 1000, 33}, {4097, 1200, 33});
    AttentionSpec twoSided = makeSpec(d, DType::BF16, 8, 2, false);
    twoSided.windowLeft = 100;
    twoSided.windowRight = 60;
    checkVarlenBackward(twoSided, {700, 1, 130});
  }
}

TEST_CASE("varlen backward: every candidate config") {
  if (!hopper())
    return;
  for (int64_t d : {64, 128})
    for (bool causal : {false, true}) {
      AttentionSpec spec = makeSpec(d, DType::BF16, 8, 2, causal, true);
      for (const TileConfig &config : WgmmaBackward::candidates(spec))
        checkVarlenBackward(spec, {1, 300, 17, 640}, {1, 333, 17, 700},
                            config);
    }
}
