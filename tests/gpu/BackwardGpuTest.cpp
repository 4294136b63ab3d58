//===- BackwardGpuTest.cpp - backward kernels against float64 gradients ---===//
// Why: the backward pass is exact like the forward; dQ, dK and dV of every
// supported shape class (odd lengths, Sq != Sk, GQA and MQA, both causal
// alignments, f16 and bf16, every candidate config) are compared with the
// float64 reference on fresh random inputs, gradients and workspace
// poisoned with NaN first (the check counts any NaN left as a failure).
// The deterministic kernels pass the same checks and must give the same
// bits on every call (each call on gradients and workspace poisoned
// again). score_mod and mask_mod presets are checked against the
// reference's own evaluation of the same functions (the score_mod's
// derivative by central differences, not the kernels' derived one).
#include "GpuTestUtil.h"

#include "../EveryRuleScoreMod.h"

#include "flashjit/Backward.h"
#include "flashjit/Compiler/Variants.h"
#include "flashjit/DevTools/BackwardCheck.h"
#include "flashjit/Templates/MmaSyncBackward.h"
#include "flashjit/Templates/WgmmaBackward.h"

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

/// How a case runs beyond its shape: the default kernels once, or the
/// deterministic ones `repeats` more times, every repeat bit for bit
/// equal to the first call.
struct Mode {
  bool deterministic = false;
  int repeats = 0;
};
constexpr Mode kDeterministic{true, 1};

void checkBackward(const AttentionSpec &spec, int64_t batch, int64_t seqlenQ,
                   int64_t seqlenK, Layout layout = Layout::BHSD,
                   std::optional<TileConfig> config = std::nullopt,
                   int64_t checkedGroups = 0, Mode mode = Mode(),
                   double blockDensity = 0.25) {
  BackwardCheckOptions o;
  o.blockDensity = blockDensity;
  o.batch = batch;
  o.seqlenQ = seqlenQ;
  o.seqlenK = seqlenK;
  o.layout = layout;
  o.seed = freshSeed();
  o.checkedGroups = checkedGroups;
  o.repeats = mode.repeats;
  // The presets' captured tensors (four documents per sequence).
  if (!spec.captures.empty()) {
    auto captures = presets::sampleCaptures(spec, batch, seqlenQ, seqlenK,
                                            /*documents=*/4, o.seed);
    REQUIRE_MESSAGE(bool(captures), llvm::toString(captures.takeError()));
    o.captures = std::move(*captures);
  }
  INFO(spec.canonical()
       << " b=" << batch << " sq=" << seqlenQ << " sk=" << seqlenK
       << (layout == Layout::BSHD ? " bshd" : " bhsd") << " seed=" << o.seed
       << (config ? " config=" + config->canonical() : "")
       << (spec.isBlockSparse()
               ? " density=" + std::to_string(blockDensity)
               : std::string())
       << std::string(mode.deterministic ? " deterministic" : ""));
  auto forward = gpuContext().compile(spec);
  REQUIRE_MESSAGE(bool(forward), llvm::toString(forward.takeError()));
  BackwardOptions options;
  options.config = config;
  options.deterministic = mode.deterministic;
  auto backward = gpuContext().compileBackward(spec, options);
  REQUIRE_MESSAGE(bool(backward), llvm::toString(backward.takeError()));
  CHECK((*backward)->deterministic() == mode.deterministic);
  auto report = runAndCheckBackward(**forward, **backward, o);
  REQUIRE_MESSAGE(bool(report), llvm::toString(report.takeError()));
  INFO(report->summary());
  MESSAGE(spec.canonical() << " sq=" << seqlenQ << " sk=" << seqlenK
                           << std::string(mode.deterministic ? " deterministic"
                                                             : "")
                           << ": " << report->summary());
  CHECK(report->nonFinite == 0);
  CHECK(report->dqError <= report->tolerance);
  CHECK(report->dkError <= report->tolerance);
  CHECK(report->dvError <= report->tolerance);
  CHECK(report->repeatsCompared == mode.repeats);
  CHECK(report->repeatsDiffering == 0);
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

TEST_CASE("backward: head dim 256 (mma_sync, dK and dV columns split in "
          "two), odd shapes, GQA and MQA, both alignments, deterministic") {
  for (DType dtype : {DType::F16, DType::BF16})
    for (bool causal : {false, true})
      for (int64_t s : {1, 17, 1000})
        checkBackward(makeSpec(256, dtype, causal, 2, 2), /*batch=*/2, s, s);
  for (bool causal : {false, true}) {
    checkBackward(makeSpec(256, DType::BF16, causal, 8, 2), 1, 257, 257);
    checkBackward(makeSpec(256, DType::F16, causal, 4, 1), 1, 333, 333,
                  Layout::BSHD);
  }
  for (CausalAlign align : {CausalAlign::TopLeft, CausalAlign::BottomRight})
    for (auto [sq, sk] : {std::pair<int64_t, int64_t>{300, 1000},
                          std::pair<int64_t, int64_t>{1000, 300}})
      checkBackward(makeSpec(256, DType::BF16, true, 4, 2, align), 1, sq, sk);
  checkBackward(makeSpec(256, DType::BF16, true, 4, 2), 1, 4097, 4097,
                Layout::BHSD, std::nullopt, /*checkedGroups=*/1);
  for (bool causal : {false, true}) {
    AttentionSpec spec = makeSpec(256, DType::BF16, causal, 4, 2);
    for (const TileConfig &config :
         MmaSyncBackward::candidates(spec, gpuContext().target()))
      checkBackward(spec, 1, 301, 301, Layout::BHSD, config);
    checkBackward(spec, 2, 1000, 1000, Layout::BHSD, std::nullopt, 0,
                  kDeterministic);
  }
}

TEST_CASE("backward: sliding windows, both alignments, Sq != Sk, every "
          "candidate config") {
  auto windowed = [](int64_t d, DType dtype, bool causal, int64_t left,
                     int64_t right, CausalAlign align) {
    AttentionSpec spec = makeSpec(d, dtype, causal, 4, 2, align);
    spec.windowLeft = left;
    spec.windowRight = right;
    return spec;
  };
  for (CausalAlign align : {CausalAlign::TopLeft, CausalAlign::BottomRight})
    for (auto [sq, sk] : {std::pair<int64_t, int64_t>{1000, 1000},
                          std::pair<int64_t, int64_t>{300, 1000},
                          std::pair<int64_t, int64_t>{1000, 300},
                          std::pair<int64_t, int64_t>{17, 129}}) {
      checkBackward(windowed(128, DType::BF16, true, 100, 0, align), 1, sq,
                    sk);
      checkBackward(windowed(64, DType::F16, false, 50, 20, align), 1, sq,
                    sk);
    }
  // Windows narrower and wider than a tile, one side open.
  checkBackward(windowed(128, DType::BF16, true, 7, 0, CausalAlign::TopLeft),
                2, 1000, 1000);
  checkBackward(windowed(64, DType::BF16, false, 300, -1,
                         CausalAlign::TopLeft),
                1, 1000, 1000);
  checkBackward(windowed(128, DType::BF16, false, -1, 33,
                         CausalAlign::TopLeft),
                1, 1000, 1000);
  checkBackward(windowed(256, DType::BF16, true, 200, 0,
                         CausalAlign::BottomRight),
                1, 333, 1000);
  for (int64_t d : {64, 128}) {
    AttentionSpec spec =
        windowed(d, DType::BF16, true, 100, 0, CausalAlign::BottomRight);
    for (const TileConfig &config :
         MmaSyncBackward::candidates(spec, gpuContext().target()))
      checkBackward(spec, 1, 301, 517, Layout::BHSD, config);
  }
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
  // On an H100 the wgmma_bwd configs come first (candidates(spec, target)).
  for (int64_t d : {64, 96, 128})
    for (bool causal : {false, true}) {
      AttentionSpec spec = makeSpec(d, DType::BF16, causal, 4, 2);
      for (const TileConfig &config :
           MmaSyncBackward::candidates(spec, gpuContext().target()))
        checkBackward(spec, 1, 301, 301, Layout::BHSD, config);
    }
}

TEST_CASE("backward wgmma_bwd: odd shapes, GQA and MQA, both alignments, "
          "every config") {
  if (!gpuContext().target().archSpecific)
    return; // sm_90a only
  for (int64_t d : {64, 128})
    for (const TileConfig &config :
         WgmmaBackward::candidates(makeSpec(d, DType::BF16, false, 8, 2))) {
      for (bool causal : {false, true})
        for (auto [sq, sk] : {std::pair<int64_t, int64_t>{1, 1},
                              std::pair<int64_t, int64_t>{17, 17},
                              std::pair<int64_t, int64_t>{1000, 1000},
                              std::pair<int64_t, int64_t>{300, 1000},
                              std::pair<int64_t, int64_t>{1000, 300}}) {
          checkBackward(makeSpec(d, DType::BF16, causal, 8, 2), 1, sq, sk,
                        Layout::BHSD, config);
          checkBackward(makeSpec(d, DType::F16, causal, 4, 1,
                                 CausalAlign::BottomRight),
                        2, sq, sk, Layout::BSHD, config);
        }
      checkBackward(makeSpec(d, DType::BF16, true, 4, 4), 1, 4097, 4097,
                    Layout::BHSD, config, /*checkedGroups=*/1);
    }
}

TEST_CASE("backward: a longer sequence (4097), GQA, causal") {
  checkBackward(makeSpec(128, DType::BF16, true, 4, 2), 1, 4097, 4097,
                Layout::BHSD, std::nullopt, /*checkedGroups=*/1);
  checkBackward(makeSpec(64, DType::F16, false, 2, 2), 1, 4097, 4097,
                Layout::BHSD, std::nullopt, /*checkedGroups=*/1);
}

TEST_CASE("backward deterministic: exact, and bitwise equal run to run, on "
          "odd shapes") {
  for (int64_t d : {64, 128})
    for (bool causal : {false, true})
      for (int64_t sq : {1, 17, 1000})
        checkBackward(
            makeSpec(d, d == 64 ? DType::F16 : DType::BF16, causal, 4, 2),
            /*batch=*/2, sq, sq, Layout::BHSD, std::nullopt, 0, kDeterministic);
  checkBackward(makeSpec(96, DType::BF16, true, 2, 1), 1, 333, 333,
                Layout::BHSD, std::nullopt, 0, kDeterministic);
  // MQA, and BSHD strides.
  checkBackward(makeSpec(64, DType::BF16, true, 4, 1), 1, 1000, 1000,
                Layout::BSHD, std::nullopt, 0, kDeterministic);
  checkBackward(makeSpec(128, DType::F16, false, 8, 1), 1, 333, 333,
                Layout::BHSD, std::nullopt, 0, kDeterministic);
}

TEST_CASE("backward deterministic: seqlen_q != seqlen_k, both causal "
          "alignments (key blocks that see no row of a query block still "
          "take their turn)") {
  for (CausalAlign align : {CausalAlign::TopLeft, CausalAlign::BottomRight})
    for (auto [sq, sk] : {std::pair<int64_t, int64_t>{300, 1000},
                          std::pair<int64_t, int64_t>{1000, 300},
                          std::pair<int64_t, int64_t>{17, 129},
                          std::pair<int64_t, int64_t>{1, 1000},
                          std::pair<int64_t, int64_t>{1000, 1}}) {
      checkBackward(makeSpec(64, DType::F16, true, 2, 2, align), 1, sq, sk,
                    Layout::BHSD, std::nullopt, 0, kDeterministic);
      checkBackward(makeSpec(128, DType::BF16, true, 8, 2, align), 1, sq, sk,
                    Layout::BHSD, std::nullopt, 0, kDeterministic);
    }
  checkBackward(makeSpec(128, DType::BF16, false, 2, 1), 2, 17, 1000,
                Layout::BHSD, std::nullopt, 0, kDeterministic);
  checkBackward(makeSpec(64, DType::BF16, false, 2, 1), 2, 1000, 17,
                Layout::BHSD, std::nullopt, 0, kDeterministic);
}

TEST_CASE("backward deterministic: every candidate config") {
  for (int64_t d : {64, 128})
    for (bool causal : {false, true}) {
      AttentionSpec spec = makeSpec(d, DType::BF16, causal, 4, 2);
      for (const TileConfig &config :
           MmaSyncBackward::candidates(spec, gpuContext().target()))
        checkBackward(spec, 1, 301, 301, Layout::BHSD, config, 0,
                      kDeterministic);
    }
}

TEST_CASE("backward deterministic: 16k causal GQA 32/8, head dim 128, three "
          "calls bitwise equal") {
  // The float64 reference of 16k rows would take minutes on the host: the
  // 4097 case checks the values; this one the bits (and NaN) at scale.
  AttentionSpec spec = makeSpec(128, DType::BF16, true, 32, 8);
  checkBackward(spec, 1, 16384, 16384, Layout::BHSD, std::nullopt,
                /*checkedGroups=*/-1, Mode{true, 2});
  checkBackward(makeSpec(128, DType::BF16, true, 4, 2), 1, 4097, 4097,
                Layout::BHSD, std::nullopt, /*checkedGroups=*/1,
                kDeterministic);
  // The default kernels on the same shape: whether their atomics gave the
  // same bits is reported, not checked (they may by chance).
  BackwardCheckOptions o;
  o.seqlenQ = o.seqlenK = 16384;
  o.seed = freshSeed();
  o.checkedGroups = -1;
  o.repeats = 2;
  auto forward = gpuContext().compile(spec);
  REQUIRE(bool(forward));
  auto backward = gpuContext().compileBackward(spec, BackwardOptions());
  REQUIRE(bool(backward));
  auto report = runAndCheckBackward(**forward, **backward, o);
  REQUIRE_MESSAGE(bool(report), llvm::toString(report.takeError()));
  // Not report->summary(): its verdict counts differing repeats as a
  // failure, which the default kernels are allowed.
  MESSAGE("default kernels, 16k causal GQA: bitwise equal in "
          << report->repeatsCompared - report->repeatsDiffering << " of "
          << report->repeatsCompared
          << " repeated runs (not required), non-finite "
          << report->nonFinite);
  CHECK(report->nonFinite == 0);
}

namespace {
/// One of the presets on a spec: 0 ALiBi, 1 soft-cap 30, 2 documents, 3
/// prefix-LM.
AttentionSpec withPreset(AttentionSpec spec, int preset) {
  llvm::Error err = preset == 0   ? presets::alibi(spec)
                    : preset == 1 ? presets::softcap(spec, 30.0)
                    : preset == 2 ? presets::documentMask(spec)
                                  : presets::prefixLM(spec);
  REQUIRE_MESSAGE(!err, llvm::toString(std::move(err)));
  return spec;
}
} // namespace

TEST_CASE("backward mods: ALiBi, soft-cap, documents, prefix-LM; odd "
          "shapes, both families, GQA") {
  for (int64_t d : {64, 128, 256})
    for (int preset = 0; preset < 4; ++preset)
      for (bool causal : {false, true}) {
        if (preset == 3 && causal)
          continue; // prefix-LM is its own causal part
        DType dtype = preset % 2 ? DType::F16 : DType::BF16;
        AttentionSpec spec =
            withPreset(makeSpec(d, dtype, causal, 4, 2), preset);
        for (int64_t s : {1, 17, 1000})
          checkBackward(spec, 2, s, s);
        // Sq != Sk, bottom-right (the documents index one sequence).
        if (preset != 2) {
          AttentionSpec right = withPreset(
              makeSpec(d, dtype, causal, 4, 2, CausalAlign::BottomRight),
              preset);
          checkBackward(right, 1, 300, 1000);
          checkBackward(right, 1, 1000, 300);
        }
      }
  // MQA, a window with a mod, BSHD.
  checkBackward(withPreset(makeSpec(128, DType::BF16, true, 8, 1), 1), 1,
                517, 517, Layout::BSHD);
  AttentionSpec windowed = withPreset(makeSpec(64, DType::BF16, true, 4, 2), 0);
  windowed.windowLeft = 100;
  checkBackward(windowed, 1, 1000, 1000);
}

TEST_CASE("backward mods: soft-cap and documents together, every candidate "
          "config, deterministic, 4097") {
  for (int64_t d : {64, 128, 256}) {
    AttentionSpec spec =
        withPreset(withPreset(makeSpec(d, DType::BF16, true, 4, 2), 2), 1);
    for (const TileConfig &config :
         MmaSyncBackward::candidates(spec, gpuContext().target()))
      checkBackward(spec, 1, 301, 301, Layout::BHSD, config);
    checkBackward(spec, 2, 1000, 1000, Layout::BHSD, std::nullopt, 0,
                  kDeterministic);
  }
  checkBackward(withPreset(makeSpec(128, DType::BF16, true, 8, 2), 1), 1,
                4097, 4097, Layout::BHSD, std::nullopt, /*checkedGroups=*/1);
}

TEST_CASE("backward mods: a score_mod through every derivative rule") {
  // Over scores of either sign (the reference differentiates by central
  // differences; EveryRuleScoreMod.h lists the ops).
  AttentionSpec spec = makeSpec(64, DType::BF16, false, 2, 2);
  spec.scoreMod = everyRuleScoreMod();
  for (int64_t d : {64, 128, 256}) {
    spec.headDim = d;
    for (bool causal : {false, true}) {
      spec.causal = causal;
      checkBackward(spec, 1, 333, 333);
      checkBackward(spec, 1, 333, 333, Layout::BHSD,
                    MmaSyncBackward::defaultConfig(spec));
    }
  }
}

TEST_CASE("backward block-sparse: listed query blocks only, the mask_mod on "
          "partial ones; both families, densities, odd shapes") {
  // Random lists (partial and full blocks, shuffled), each key block's
  // query blocks given to the backward as their transpose.
  auto sparse = [](AttentionSpec spec, int64_t m, int64_t n) {
    spec.sparseBlockM = m;
    spec.sparseBlockN = n;
    return spec;
  };
  for (int64_t d : {64, 128, 256})
    for (bool causal : {false, true})
      for (double density : {0.0, 0.3, 1.0})
        checkBackward(sparse(makeSpec(d, DType::BF16, causal, 4, 2), 128, 128),
                      2, 1000, 1000, Layout::BHSD, std::nullopt, 0, Mode(),
                      density);
  // A document mask_mod on the partial blocks, soft-capped; odd lengths.
  AttentionSpec documents = sparse(
      withPreset(withPreset(makeSpec(128, DType::F16, true, 4, 2), 2), 1), 128,
      128);
  for (int64_t s : {17, 1000, 4097})
    checkBackward(documents, 1, s, s, Layout::BHSD, std::nullopt,
                  /*checkedGroups=*/s > 2000 ? 1 : 0, Mode(), 0.5);
  // Sq != Sk, mask blocks of 256 x 128, bottom-right, every candidate.
  AttentionSpec wide = sparse(
      makeSpec(128, DType::BF16, true, 8, 2, CausalAlign::BottomRight), 256,
      128);
  for (const TileConfig &config :
       MmaSyncBackward::candidates(wide, gpuContext().target()))
    checkBackward(wide, 1, 300, 1000, Layout::BHSD, config, 0, Mode(), 0.5);
  checkBackward(wide, 1, 1000, 300, Layout::BHSD, std::nullopt, 0, Mode(),
                0.5);
}

TEST_CASE("backward deterministic: sliding windows, both alignments, Sq != "
          "Sk, bitwise equal run to run") {
  // The key blocks adding into a query block are a contiguous range;
  // the highest takes the first turn (BackwardDqTurns.cpp).
  auto windowed = [](int64_t d, bool causal, int64_t left, int64_t right,
                     CausalAlign align) {
    AttentionSpec spec = makeSpec(d, DType::BF16, causal, 4, 2, align);
    spec.windowLeft = left;
    spec.windowRight = right;
    return spec;
  };
  for (int64_t d : {64, 128, 256})
    for (CausalAlign align : {CausalAlign::TopLeft, CausalAlign::BottomRight})
      for (auto [sq, sk] : {std::pair<int64_t, int64_t>{1000, 1000},
                            std::pair<int64_t, int64_t>{300, 1000},
                            std::pair<int64_t, int64_t>{1000, 300}}) {
        checkBackward(windowed(d, true, 100, 0, align), 1, sq, sk,
                      Layout::BHSD, std::nullopt, 0, kDeterministic);
        checkBackward(windowed(d, false, 50, 20, align), 1, sq, sk,
                      Layout::BHSD, std::nullopt, 0, kDeterministic);
      }
  checkBackward(windowed(128, false, 300, -1, CausalAlign::TopLeft), 2, 1000,
                1000, Layout::BHSD, std::nullopt, 0, kDeterministic);
  checkBackward(windowed(64, false, -1, 33, CausalAlign::TopLeft), 2, 1000,
                1000, Layout::BHSD, std::nullopt, 0, kDeterministic);
  AttentionSpec spec = windowed(128, true, 200, 0, CausalAlign::BottomRight);
  for (const TileConfig &config :
       MmaSyncBackward::candidates(spec, gpuContext().target()))
    checkBackward(spec, 1, 517, 1000, Layout::BHSD,
                  MmaSyncBackward::withVariant(config, true), 0,
                  kDeterministic);
}
