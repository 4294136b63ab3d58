//===- VariantsGpuTest.cpp - windows, alignment and mods on the GPU -------===//
// Why: every variant must be exact in every family that offers it: the
// structural masks (window, bottom-right diagonal) as loop bounds, and the
// score_mod / mask_mod presets with their captured tensors, against the
// float64 reference that interprets the same mods. Odd lengths, Sq != Sk,
// GQA; outputs poisoned and NaN never passes (runAndCheck).
#include "GpuTestUtil.h"

#include "flashjit/Compiler/Variants.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <tuple>

using namespace flashjit;
using namespace flashjit::test;

namespace {
void checkVariant(const AttentionSpec &spec, const std::string &family,
                  int64_t batch, int64_t seqlenQ, int64_t seqlenK,
                  std::optional<HostBlockMask> blockMask = std::nullopt,
                  double blockDensity = 0.25,
                  const std::vector<HostCapture> *givenCaptures = nullptr,
                  std::optional<double> scale = std::nullopt) {
  CheckOptions o;
  o.scale = scale;
  o.blockMask = std::move(blockMask);
  o.blockDensity = blockDensity;
  o.batch = batch;
  o.seqlenQ = seqlenQ;
  o.seqlenK = seqlenK;
  o.seed = freshSeed();
  o.rowsPerHead = 40;
  // Four documents per sequence for the document mask.
  if (givenCaptures) {
    o.captures = *givenCaptures;
  } else {
    auto captures = presets::sampleCaptures(spec, batch, seqlenQ, seqlenK,
                                            /*documents=*/4, o.seed);
    REQUIRE_MESSAGE(bool(captures), llvm::toString(captures.takeError()));
    o.captures = std::move(*captures);
  }
  INFO(describe(spec, o) << " family " << family
                         << (spec.isBlockSparse()
                                 ? " sparse " + std::to_string(spec.sparseBlockM) +
                                       "x" + std::to_string(spec.sparseBlockN) +
                                       " density " + std::to_string(blockDensity)
                                 : std::string()));
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

TEST_CASE("score_mods that bound the scores: P against a fixed reference") {
  // Such a mod's P is taken against the middle of its scores' interval
  // (FragmentSoftmax::fixReference), not a running max: P spans 2^(+-43)
  // at soft-cap 30 (bf16), 2^(+-63.5) at a clamp to [-44, 44], 2^(+-11.5)
  // at soft-cap 8 (f16). Large scales drive the scores to both ends of the
  // interval; bottom-right causal rows with no key (Sq > Sk) stay empty.
  auto clamp = [](mlir::OpBuilder &b, mlir::Location loc,
                  const ScoreModArgs &a) -> mlir::Value {
    auto constant = [&](float v) {
      return mlir::arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
    };
    mlir::Value low =
        mlir::arith::MaximumFOp::create(b, loc, a.score, constant(-44.0f));
    return mlir::arith::MinimumFOp::create(b, loc, low, constant(44.0f));
  };
  struct Case {
    const char *what;
    DType dtype;
    double softcap; // 0: the clamp
    bool causal;
    double scale;
  };
  const Case cases[] = {
      {"soft-cap 30, bf16", DType::BF16, 30, false, 4.0},
      {"soft-cap 8, f16, bottom-right causal", DType::F16, 8, true, 1.0},
      {"clamp to [-44, 44], bf16", DType::BF16, 0, false, 8.0},
  };
  const std::pair<int64_t, int64_t> lengths[] = {
      {17, 17}, {1000, 300}, {300, 1000}};
  for (const Case &c : cases) {
    AttentionSpec spec = baseSpec(128, c.causal);
    spec.dtype = c.dtype;
    if (c.causal)
      spec.causalAlign = CausalAlign::BottomRight;
    if (c.softcap > 0) {
      REQUIRE(!presets::softcap(spec, c.softcap));
    } else {
      auto text = buildScoreMod(spec.captures, clamp);
      REQUIRE_MESSAGE(bool(text), llvm::toString(text.takeError()));
      spec.scoreMod = *text;
    }
    INFO(c.what << ", scale " << c.scale);
    for (const char *family : kFamilies)
      for (auto [sq, sk] : lengths)
        checkVariant(spec, family, 2, sq, sk, std::nullopt, 0.25, nullptr,
                     c.scale);
  }
}

TEST_CASE("score_mods of constant factors and exp") {
  // A constant factor stays pending through the region's lowering and is
  // formed at its end: a positive one (3 score), a negative one (-0.75
  // score: the row max is then taken on flipped scores), and a value with
  // none pending (exp of a quarter of the score).
  const double factors[] = {3.0, -0.75, 0.0};
  for (double factor : factors) {
    AttentionSpec spec = baseSpec(64, true);
    auto text = buildScoreMod(
        spec.captures, [factor](mlir::OpBuilder &b, mlir::Location loc,
                                const ScoreModArgs &a) -> mlir::Value {
          if (factor == 0.0)
            return mlir::math::ExpOp::create(
                b, loc,
                mlir::arith::MulFOp::create(
                    b, loc, a.score,
                    mlir::arith::ConstantOp::create(b, loc,
                                                    b.getF32FloatAttr(0.25f))));
          return mlir::arith::MulFOp::create(
              b, loc,
              mlir::arith::ConstantOp::create(
                  b, loc, b.getF32FloatAttr(static_cast<float>(factor))),
              a.score);
        });
    REQUIRE_MESSAGE(bool(text), llvm::toString(text.takeError()));
    spec.scoreMod = *text;
    INFO("factor " << factor);
    for (const char *family : kFamilies)
      checkVariant(spec, family, 2, 1000, 1000);
  }
}

TEST_CASE("block-sparse: listed key blocks only, the mask_mod on partial ones") {
  // Random lists (partial and full blocks in a shuffled order) of several
  // densities, 0 included (every row empty), with and without a mask_mod
  // and a causal mask; every family that offers it; odd lengths.
  for (const char *family : kFamilies)
    for (double density : {0.0, 0.3, 1.0})
      for (int variant = 0; variant < 3; ++variant) {
        AttentionSpec spec = baseSpec(128, variant == 1);
        spec.sparseBlockM = spec.sparseBlockN = 128;
        if (variant == 2)
          REQUIRE(!presets::documentMask(spec));
        for (auto [sq, sk] : kLengths) {
          if (variant == 2 && sq != sk)
            continue;
          checkVariant(spec, family, 2, sq, sk, std::nullopt, density);
        }
      }
}

TEST_CASE("block-sparse: coarser mask blocks, shared lists, head dim 64, f16") {
  std::mt19937_64 rng(freshSeed());
  for (const char *family : kFamilies) {
    // Mask blocks of 256 x 256: several kernel tiles per block each way.
    AttentionSpec coarse = baseSpec(128, false);
    coarse.sparseBlockM = coarse.sparseBlockN = 256;
    checkVariant(coarse, family, 2, 1000, 4097, std::nullopt, 0.4);
    // One list for every sequence and head (batch and head dims of 1).
    AttentionSpec shared = baseSpec(64, true);
    shared.dtype = DType::F16;
    shared.sparseBlockM = shared.sparseBlockN = 128;
    REQUIRE(!presets::prefixLM(shared));
    checkVariant(shared, family, 2, 1000, 1000,
                 HostBlockMask::random(shared, 2, 1000, 1000, 0.5,
                                       /*fullLists=*/true, /*shareBatch=*/true,
                                       /*shareHeads=*/true, rng));
    // Partial lists only (no full lists), with a window.
    AttentionSpec windowed = baseSpec(128, true);
    windowed.windowLeft = 300;
    windowed.sparseBlockM = windowed.sparseBlockN = 128;
    checkVariant(windowed, family, 1, 4097, 4097,
                 HostBlockMask::random(windowed, 1, 4097, 4097, 0.6,
                                       /*fullLists=*/false,
                                       /*shareBatch=*/false,
                                       /*shareHeads=*/false, rng));
  }
}

TEST_CASE("block masks built on the GPU from the mask_mod, causal mask and "
          "window") {
  // The block-mask kernel's lists must equal the host's pair-by-pair
  // classification exactly (counts and sorted indices), and the forward
  // kernels must be exact with those very lists (poison -1 past each
  // count included).
  struct Case {
    const char *what;
    int preset; // 0 none, 1 documents, 2 prefix-LM
    bool causal;
    CausalAlign align;
    int64_t windowLeft, blockM, blockN, batch, listBatch, listHeads, sq, sk;
    bool fullLists;
  };
  const Case cases[] = {
      {"documents", 1, false, CausalAlign::TopLeft, -1, 128, 128, 2, 2, 1,
       1000, 1000, true},
      {"documents, causal, 256x128 blocks", 1, true, CausalAlign::TopLeft,
       -1, 256, 128, 1, 1, 1, 4097, 4097, true},
      {"documents, one mask for the batch", 1, true, CausalAlign::TopLeft, -1,
       128, 128, 2, 1, 1, 17, 17, true},
      {"prefix-LM, Sq != Sk", 2, false, CausalAlign::TopLeft, -1, 128, 128, 2,
       2, 4, 300, 1000, true},
      {"causal window, bottom-right, no mask_mod, no full lists", 0, true,
       CausalAlign::BottomRight, 300, 128, 128, 1, 1, 1, 1000, 4097, false},
  };
  for (const Case &c : cases) {
    AttentionSpec spec = baseSpec(128, c.causal);
    spec.causalAlign = c.align;
    spec.windowLeft = c.windowLeft;
    spec.sparseBlockM = c.blockM;
    spec.sparseBlockN = c.blockN;
    if (c.preset == 1)
      REQUIRE(!presets::documentMask(spec));
    if (c.preset == 2)
      REQUIRE(!presets::prefixLM(spec));
    const uint64_t seed = freshSeed();
    INFO(c.what << ": " << spec.canonical() << " sq=" << c.sq << " sk="
                << c.sk << " seed=" << seed);
    auto captures = presets::sampleCaptures(spec, c.batch, c.sq, c.sk,
                                            /*documents=*/4, seed);
    REQUIRE_MESSAGE(bool(captures), llvm::toString(captures.takeError()));

    auto builder = gpuContext().blockMaskBuilder(spec);
    REQUIRE_MESSAGE(bool(builder), llvm::toString(builder.takeError()));
    auto onGpu = buildBlockMaskOnGpu(**builder, *captures, c.listBatch,
                                     c.listHeads, c.sq, c.sk, c.fullLists);
    REQUIRE_MESSAGE(bool(onGpu), llvm::toString(onGpu.takeError()));
    auto onHost = HostBlockMask::fromMask(spec, *captures, c.listBatch,
                                          c.listHeads, c.sq, c.sk,
                                          c.fullLists);
    REQUIRE_MESSAGE(bool(onHost), llvm::toString(onHost.takeError()));

    REQUIRE(onGpu->kvNumBlocks == onHost->kvNumBlocks);
    REQUIRE(onGpu->fullKvNumBlocks == onHost->fullKvNumBlocks);
    const int64_t rows = c.listBatch * c.listHeads * onHost->queryBlocks;
    int64_t listed = 0;
    for (int64_t row = 0; row < rows; ++row) {
      for (auto [counts, gpu, host] :
           {std::tuple{&onHost->kvNumBlocks, &onGpu->kvIndices,
                       &onHost->kvIndices},
            std::tuple{&onHost->fullKvNumBlocks, &onGpu->fullKvIndices,
                       &onHost->fullKvIndices}}) {
        if (counts->empty())
          continue;
        const int64_t n = (*counts)[row], at = row * onHost->indexColumns;
        listed += n;
        CHECK(std::equal(gpu->begin() + at, gpu->begin() + at + n,
                         host->begin() + at));
        // Nothing written past the count.
        if (n < onHost->indexColumns)
          CHECK((*gpu)[at + n] == -1);
      }
    }
    CHECK(listed > 0);
    for (const char *family : {"wgmma", "wgmma_persistent", "mma_sync",
                               "cuda_core"})
      checkVariant(spec, family, c.batch, c.sq, c.sk, *onGpu, 0.0,
                   &*captures);
  }
}
