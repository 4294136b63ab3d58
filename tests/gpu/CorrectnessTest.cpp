//===- CorrectnessTest.cpp - kernels against the float64 reference --------===//
// Why: FlashAttention is exact; every supported shape class is compared
// with the reference on fresh random inputs, outputs poisoned first (the
// harness counts any NaN left as a failure): O within the dtype's rounding,
// the f32 log-sum-exp within 1e-5 (checkLseTolerance), every row of each
// problem whose reference fits kReferenceBudget.
#include "GpuTestUtil.h"

using namespace flashjit;
using namespace flashjit::test;

namespace {
/// Multiply-adds of the float64 reference one case may cost (about two
/// seconds on the 16 cores of the GPU machines): every row is checked on
/// problems that fit, as many rows as fit (at least 48 per head) beyond.
constexpr double kReferenceBudget = 4e10;

/// Runs `kernel` on fresh inputs of `o` and expects it exact; returns the
/// rows the reference checked.
int64_t expectExact(const Kernel &kernel, const CheckOptions &o) {
  INFO(kernel.info().config.canonical());
  auto report = runAndCheck(kernel, o);
  REQUIRE_MESSAGE(bool(report), llvm::toString(report.takeError()));
  INFO(report->summary());
  CHECK(report->nonFinite == 0);
  CHECK(report->relError <= report->tolerance);
  CHECK(report->lseRelError <= report->lseTolerance);
  CHECK(report->passed);
  return report->checkedRows;
}

void checkCase(AttentionSpec spec, int64_t batch, int64_t seqlenQ,
               int64_t seqlenK, Layout layout = Layout::BHSD,
               std::optional<double> scale = std::nullopt) {
  CheckOptions o;
  o.batch = batch;
  o.seqlenQ = seqlenQ;
  o.seqlenK = seqlenK;
  o.layout = layout;
  o.seed = freshSeed();
  o.rowsPerHead =
      rowsWithinBudget(spec, batch, seqlenQ, seqlenK, kReferenceBudget);
  o.scale = scale;
  INFO(describe(spec, o));
  auto kernel = gpuContext().compile(spec);
  REQUIRE_MESSAGE(bool(kernel), llvm::toString(kernel.takeError()));
  CHECK(expectExact(**kernel, o) ==
        batch * spec.numHeads * std::min(seqlenQ, o.rowsPerHead));
}
} // namespace

TEST_CASE("matrix: head dim x dtype x causal x seqlen") {
  for (int64_t d : {64, 128})
    for (DType dtype : {DType::F16, DType::BF16})
      for (bool causal : {false, true})
        for (int64_t s : {1, 17, 128, 1000, 4097}) {
          AttentionSpec spec;
          spec.headDim = d;
          spec.dtype = dtype;
          spec.causal = causal;
          spec.numHeads = 3;
          spec.numKVHeads = 3;
          checkCase(spec, /*batch=*/2, s, s);
        }
}

TEST_CASE("GQA: 8 query heads over 2 key/value heads") {
  for (bool causal : {false, true})
    for (int64_t s : {17, 1000}) {
      AttentionSpec spec;
      spec.headDim = 128;
      spec.causal = causal;
      spec.numHeads = 8;
      spec.numKVHeads = 2;
      checkCase(spec, 2, s, s);
    }
}

TEST_CASE("BSHD layout through strides") {
  for (bool causal : {false, true}) {
    AttentionSpec spec;
    spec.headDim = 64;
    spec.dtype = DType::F16;
    spec.causal = causal;
    spec.numHeads = 4;
    spec.numKVHeads = 2;
    checkCase(spec, 3, 333, 333, Layout::BSHD);
  }
}

TEST_CASE("different query and key/value lengths") {
  for (bool causal : {false, true}) {
    AttentionSpec spec;
    spec.headDim = 128;
    spec.causal = causal;
    spec.numHeads = 2;
    spec.numKVHeads = 2;
    checkCase(spec, 1, 100, 1037);
    checkCase(spec, 1, 1037, 100);
  }
}

TEST_CASE("other head dims: 32, 96 and 256") {
  for (int64_t d : {32, 96, 256})
    for (bool causal : {false, true}) {
      AttentionSpec spec;
      spec.headDim = d;
      spec.causal = causal;
      spec.numHeads = 2;
      spec.numKVHeads = 2;
      checkCase(spec, 2, 1000, 1000);
    }
}

// A row's later tiles outgrow the max of its first ones: the kernels that
// take P against the max as it stands must keep P above 1 exact, and go
// back to the max for a tile with a P past their bound (2^15 for f16, 2^64
// for bf16). Scale 0.5 spreads the scores about 8 in log2 (head dim 128),
// scale 4 about 65: nearly every row one-hot, and new maxima far above the
// old, past either bound.
TEST_CASE("scores far apart: softmax scales 0.5 and 4") {
  for (double scale : {0.5, 4.0})
    for (int64_t d : {64, 128, 256})
      for (bool causal : {false, true})
        for (int64_t s : {1000, 4097}) {
          AttentionSpec spec;
          spec.headDim = d;
          spec.causal = causal;
          spec.numHeads = 2;
          spec.numKVHeads = 2;
          checkCase(spec, 2, s, s, Layout::BHSD, scale);
        }
}

TEST_CASE("long context: one head of seqlen 131072 in O(N) memory") {
  AttentionSpec spec;
  spec.headDim = 128;
  spec.causal = true;
  spec.numHeads = 1;
  spec.numKVHeads = 1;
  checkCase(spec, 1, 131072, 131072);
}

// Every one of two million query rows (32 heads of 16 sequences of 4096)
// against the reference: the tile indexing over many blocks, heads and
// sequences, where a sample of rows could miss a wrong block.
TEST_CASE("two million rows, every one checked") {
  for (bool causal : {false, true}) {
    AttentionSpec spec;
    spec.headDim = 64;
    spec.causal = causal;
    spec.numHeads = 32;
    spec.numKVHeads = 8;
    REQUIRE(rowsWithinBudget(spec, 16, 4096, 128, kReferenceBudget) == 4096);
    checkCase(spec, 16, 4096, 128, Layout::BSHD);
  }
}

// One handle, compiled once, serves every length with its length class's
// config (KernelOptions::perLengthConfig): each call exact, and the
// classes' kernels the ones compile() gives for those lengths.
TEST_CASE("one kernel handle through lengths 1, 100, 1000, 5000, 20000") {
  for (int64_t d : {64, 128})
    for (bool causal : {false, true}) {
      AttentionSpec spec;
      spec.headDim = d;
      spec.causal = causal;
      spec.numHeads = 4;
      spec.numKVHeads = 2;
      auto kernel = gpuContext().compile(spec);
      REQUIRE_MESSAGE(bool(kernel), llvm::toString(kernel.takeError()));
      for (int64_t s : {1, 100, 1000, 5000, 20000}) {
        CheckOptions o;
        o.batch = 1;
        o.seqlenQ = s;
        o.seqlenK = s;
        o.seed = freshSeed();
        o.rowsPerHead = 64;
        auto served = (*kernel)->kernelForLengths(s, s);
        REQUIRE_MESSAGE(bool(served), llvm::toString(served.takeError()));
        KernelOptions hint;
        hint.seqlen = s;
        auto direct = gpuContext().compile(spec, hint);
        REQUIRE_MESSAGE(bool(direct), llvm::toString(direct.takeError()));
        CHECK((*served == *direct));
        INFO(describe(spec, o) << " served by "
                               << (*served)->info().config.canonical());
        expectExact(**kernel, o);
      }
    }
}
