//===- VariantsGpuTest.cpp - windows, alignment and mods on the GPU -------===//
// Why: every variant must be exact in every family that offers it: the
// structural masks (window, bottom-right diagonal) as loop bounds, and the
// score_mod / mask_mod presets with their captured tensors, against the
// float64 reference that interprets the same mods. Odd lengths, Sq != Sk,
// GQA; outputs poisoned and NaN never passes (runAndCheck).
#include "GpuTestUtil.h"

#include "flashjit/Compiler/Variants.h"

using namespace flashjit;
using namespace flashjit::test;

namespace {
void checkVariant(const AttentionSpec &spec, const std::string &family,
                  int64_t batch, int64_t seqlenQ, int64_t seqlenK) {
  CheckOptions o;
  o.batch = batch;
  o.seqlenQ = seqlenQ;
  o.seqlenK = seqlenK;
  o.seed = freshSeed();
  o.rowsPerHead = 40;
  // Four documents per sequence for the document mask.
  auto captures = presets::sampleCaptures(spec, batch, seqlenQ, seqlenK,
                                          /*documents=*/4, o.seed);
  REQUIRE_MESSAGE(bool(captures), llvm::toString(captures.takeError()));
  o.captures = std::move(*captures);
  INFO(describe(spec, o) << " family " << family);
  KernelOptions options;
  options.family = family;
  auto kernel = gpuContext().compile(spec, options);
  if (!kernel) {
    // A family that does not offer this variant says so; that is not a
    // failure of the variant (wgmma_cluster has no structural masks).
    std::string message = llvm::toString(kernel.takeError());
    bool notOffered = message.find("no tile config") != std::string::npos ||
                      message.find("no template offers") != std::string::npos;
    if (notOffered)
      return;
    FAIL(message);
    return;
  }
  auto report = runAndCheck(**kernel, o);
  REQUIRE_MESSAGE(bool(report), llvm::toString(report.takeError()));
  INFO((*kernel)->info().config.canonical() << ": " << report->summary());
  CHECK(report->nonFinite == 0);
  CHECK(report->relError <= report->tolerance);
  CHECK(report->lseRelError <= 1e-3);
  CHECK(report->passed);
}

const char *const kFamilies[] = {"wgmma", "wgmma_persistent",
                                 "wgmma_cluster", "mma_sync", "cuda_core"};

/// Sequence-length pairs: odd, square and not.
const std::pair<int64_t, int64_t> kLengths[] = {
    {1, 1}, {17, 17}, {1000, 1000}, {4097, 4097}, {300, 1000}, {1000, 300}};

AttentionSpec baseSpec(int64_t headDim, bool causal) {
  AttentionSpec spec;
  spec.headDim = headDim;
  spec.causal = causal;
  spec.numHeads = 4;
  spec.numKVHeads = 2;
  return spec;
}
} // namespace

TEST_CASE("structural masks: windows and bottom-right causal") {
  struct Case {
    bool causal;
    CausalAlign align;
    int64_t left, right;
  };
  const Case cases[] = {
      {true, CausalAlign::BottomRight, -1, -1}, // KV-cache prefill
      {true, CausalAlign::TopLeft, 100, -1},    // causal sliding window
      {false, CausalAlign::TopLeft, 37, 50},    // two-sided window
      {true, CausalAlign::BottomRight, 129, -1}, // both
  };
  for (const Case &c : cases)
    for (const char *family : kFamilies)
      for (auto [sq, sk] : kLengths) {
        AttentionSpec spec = baseSpec(128, c.causal);
        spec.causalAlign = c.align;
        spec.windowLeft = c.left;
        spec.windowRight = c.right;
        checkVariant(spec, family, 2, sq, sk);
      }
}

TEST_CASE("score and mask mods: ALiBi, soft-cap, documents, prefix-LM") {
  for (int64_t headDim : {64, 128})
    for (const char *family : kFamilies)
      for (int preset = 0; preset < 4; ++preset) {
        AttentionSpec spec = baseSpec(headDim, preset == 0);
        llvm::Error err = preset == 0   ? presets::alibi(spec)
                          : preset == 1 ? presets::softcap(spec, 30.0)
                          : preset == 2 ? presets::documentMask(spec)
                                        : presets::prefixLM(spec);
        REQUIRE_MESSAGE(!err, llvm::toString(std::move(err)));
        for (auto [sq, sk] : kLengths) {
          if (preset == 2 && sq != sk)
            continue; // documents pack one sequence for q and k
          checkVariant(spec, family, 2, sq, sk);
        }
      }
}

TEST_CASE("soft-cap at spread scores, f16, window with a mod") {
  AttentionSpec spec = baseSpec(128, true);
  spec.dtype = DType::F16;
  spec.windowLeft = 200;
  REQUIRE(!presets::softcap(spec, 20.0));
  for (const char *family : kFamilies)
    checkVariant(spec, family, 1, 1000, 1000);
}
