//===- TuningPlanTest.cpp - what `flashjit autotune` will measure ---------===//
// Why: the plan decides what the GPU run measures: the heuristic's config
// must be among the candidates (so the winner can never be slower), the
// candidates must be every fitting config of every registered template
// (so a new kernel family is tuned without a change), and a bucket no
// template can run must not stop the others.
#include "AutotuneTestUtil.h"

#include "flashjit/Autotune/Heuristic.h"
#include "flashjit/Autotune/TuningPlan.h"
#include "flashjit/Templates/MmaSyncBackward.h"

#include <nlohmann/json.hpp>

#include <set>

using namespace flashjit;
using namespace flashjit::autotune;
using flashjit::autotune::testing::knownGPU;

namespace {

/// Every fitting config of every template that runs the spec on the
/// device, computed template by template, apart from the plan's code path.
std::set<std::string> fittingConfigs(const AttentionSpec &spec,
                                     const DeviceModel &device,
                                     const ProblemShape &shape) {
  std::set<std::string> out;
  auto target = Target::fromComputeCapability(device.ccMajor, device.ccMinor);
  REQUIRE(static_cast<bool>(target));
  for (const KernelTemplate *tmpl : allTemplates()) {
    if (tmpl->measurementOnly())
      continue;
    if (auto err = tmpl->supports(spec, *target)) {
      llvm::consumeError(std::move(err));
      continue;
    }
    for (const TileConfig &config : tmpl->candidates(spec))
      if (evaluateConfig(*tmpl, spec, config, device, shape).fits())
        out.insert(config.canonical());
  }
  return out;
}

} // namespace

TEST_CASE("the representative problem follows the FlashAttention benchmark "
          "convention") {
  for (const ShapeBucket &bucket : defaultBuckets()) {
    CAPTURE(bucket.describe());
    BucketPlan p = representativeProblem(bucket);
    CHECK(p.seqlen == bucket.tuningSeqlen());
    CHECK(p.batch * p.seqlen == 16384);
    CHECK(p.spec.numHeads * p.spec.headDim == 2048);
    CHECK(p.spec.numKVHeads == p.spec.numHeads);
    CHECK(p.spec.causal == bucket.causal);
    CHECK(bucket.contains(p.spec, p.seqlen));
    double flops = 4.0 * p.batch * p.spec.numHeads * p.seqlen * p.seqlen *
                   p.spec.headDim * (bucket.causal ? 0.5 : 1.0);
    CHECK(p.flops == doctest::Approx(flops));
  }
  // An unbounded range far past the convention still gets one sequence.
  ShapeBucket huge{128, DType::BF16, false, 65536, std::nullopt};
  BucketPlan p = representativeProblem(huge);
  CHECK(p.seqlen == 131072);
  CHECK(p.batch == 1);
}

TEST_CASE("every default bucket on an H100: the heuristic's config first, "
          "then every other fitting candidate of every template") {
  DeviceModel h100 = knownGPU("h100");
  auto plans = planTuning(defaultBuckets(), h100);
  REQUIRE(static_cast<bool>(plans));
  REQUIRE(plans->size() == 24);
  for (const BucketPlan &plan : *plans) {
    CAPTURE(plan.bucket.describe());
    REQUIRE(plan.runnable());
    // The config the runtime would build without a database, at the
    // bucket's length.
    HeuristicOptions atLength;
    atLength.shape = shapeForSeqlen(plan.seqlen);
    auto runtimeChoice = chooseConfig(plan.spec, h100, atLength);
    REQUIRE(static_cast<bool>(runtimeChoice));
    CHECK(plan.heuristic == runtimeChoice->config);
    CHECK(plan.candidates.front() == plan.heuristic);

    std::set<std::string> planned;
    for (const TileConfig &config : plan.candidates)
      CHECK(planned.insert(config.canonical()).second); // no repeats
    CHECK(planned ==
          fittingConfigs(plan.spec, h100, {plan.batch, plan.seqlen}));
    CHECK(plan.fitting == plan.candidates.size());
    CHECK(plan.fitting >= 2);
  }
}

TEST_CASE("max candidates keeps the heuristic's config and the best-ranked "
          "others") {
  DeviceModel a100 = knownGPU("a100");
  ShapeBucket bucket{128, DType::F16, true, 1024, 4096};
  PlanOptions options;
  options.maxCandidates = 3;
  BucketPlan cut = planBucket(bucket, a100, options);
  BucketPlan all = planBucket(bucket, a100);
  REQUIRE(cut.runnable());
  REQUIRE(all.candidates.size() > 3);
  REQUIRE(cut.candidates.size() == 3);
  CHECK(cut.fitting == all.fitting);
  for (size_t i = 0; i < 3; ++i)
    CHECK(cut.candidates[i] == all.candidates[i]);
  // The others follow the heuristic's ranking for this bucket's shape.
  HeuristicOptions shape;
  shape.shape = {cut.batch, cut.seqlen};
  auto ranked = chooseConfig(cut.spec, a100, shape);
  REQUIRE(static_cast<bool>(ranked));
  std::vector<TileConfig> others;
  for (const CandidateReport &r : ranked->considered)
    if (r.fits() && r.config != cut.heuristic)
      others.push_back(r.config);
  CHECK(cut.candidates[1] == others[0]);
  CHECK(cut.candidates[2] == others[1]);

  options.maxCandidates = 1;
  BucketPlan one = planBucket(bucket, a100, options);
  REQUIRE(one.candidates.size() == 1);
  CHECK(one.candidates[0] == one.heuristic);
}

TEST_CASE("a bucket no template runs is reported, the others still planned") {
  // No template runs on a T4 (compute capability 7.5).
  DeviceModel t4 = knownGPU("t4");
  auto plans = planTuning(defaultBuckets(), t4);
  REQUIRE(static_cast<bool>(plans));
  for (const BucketPlan &plan : *plans) {
    CHECK_FALSE(plan.runnable());
    CHECK(plan.candidates.empty());
    CHECK(plan.error.find("no tile config runs") == 0);
  }
  // A head dim no template has, next to one they have.
  BucketAxes axes = defaultBucketAxes();
  axes.headDims = {72, 128};
  auto buckets = makeBuckets(axes);
  REQUIRE(static_cast<bool>(buckets));
  auto mixed = planTuning(*buckets, knownGPU("h100"));
  REQUIRE(static_cast<bool>(mixed));
  size_t runnable = 0;
  for (const BucketPlan &plan : *mixed) {
    CAPTURE(plan.bucket.describe());
    CHECK(plan.runnable() == (plan.bucket.headDim == 128));
    runnable += plan.runnable();
  }
  CHECK(runnable == 12);
  nlohmann::json j = bucketPlanToJson(mixed->front());
  CHECK(j["heuristic"].is_null());
  CHECK(j["error"].get<std::string>().find("head dim 72") != std::string::npos);
}

TEST_CASE("bad plan inputs: an empty bucket list, an invalid device") {
  std::string message =
      llvm::toString(planTuning({}, knownGPU("h100")).takeError());
  CHECK(message.find("the bucket list is empty") == 0);
  DeviceModel broken = knownGPU("h100");
  broken.smCount = 0;
  auto plans = planTuning(defaultBuckets(), broken);
  REQUIRE_FALSE(static_cast<bool>(plans));
  CHECK(llvm::toString(plans.takeError()).find("sm_count") !=
        std::string::npos);
}

TEST_CASE("the plan as JSON") {
  BucketPlan plan = planBucket(defaultBuckets()[15], knownGPU("h100"));
  nlohmann::json j = bucketPlanToJson(plan);
  CHECK(j["description"] == "d128 bf16 seqlen [1536, 3072)");
  CHECK(j["batch"] == 8);
  CHECK(j["seqlen"] == 2048);
  CHECK(j["spec"]["heads"] == 16);
  CHECK(j["heuristic"]["family"] == plan.heuristic.family);
  REQUIRE(j["candidates"].size() == plan.candidates.size());
  CHECK(j["candidates"][0] == plan.heuristic.canonical());
  CHECK(j["error"].is_null());
}

TEST_CASE("backward plans: the default's template, the default first") {
  BucketAxes axes = defaultBucketAxes();
  axes.headDims = {64, 128, 256};
  auto buckets = makeBuckets(axes);
  REQUIRE(static_cast<bool>(buckets));
  for (const char *gpu : {"h100", "a100"}) {
    CAPTURE(gpu);
    DeviceModel device = knownGPU(gpu);
    auto plans = planTuning(*buckets, device, {}, Pass::Backward);
    REQUIRE(static_cast<bool>(plans));
    auto target = Target::fromComputeCapability(device.ccMajor, device.ccMinor);
    REQUIRE(static_cast<bool>(target));
    for (const BucketPlan &plan : *plans) {
      CAPTURE(plan.bucket.describe());
      REQUIRE(plan.runnable());
      CHECK(plan.heuristic ==
            MmaSyncBackward::defaultConfig(plan.spec, *target));
      CHECK(plan.candidates.front() == plan.heuristic);
      // wgmma_bwd builds head dims 64 and 128; mma_sync_bwd the rest.
      CHECK(plan.heuristic.family ==
            (std::string(gpu) == "h100" && plan.bucket.headDim != 256
                 ? "wgmma_bwd"
                 : "mma_sync_bwd"));
      std::set<std::string> seen;
      for (const TileConfig &c : plan.candidates) {
        CHECK(c.family == plan.heuristic.family);
        CHECK(seen.insert(c.canonical()).second); // no config twice
        CHECK_FALSE(
            static_cast<bool>(MmaSyncBackward::checkConfig(plan.spec, c,
                                                           *target)));
        CHECK(MmaSyncBackward::resources(plan.spec, c).sharedMemoryBytes <=
              device.sharedMemoryPerBlockOptin);
      }
      CHECK(plan.candidates.size() == plan.fitting);
      CHECK(plan.candidates.size() > 1);
      // FLOPs by the backward's convention.
      CHECK(plan.flops == doctest::Approx(kBackwardFlopsPerForward *
                                          representativeProblem(plan.bucket)
                                              .flops));
    }
  }
}
