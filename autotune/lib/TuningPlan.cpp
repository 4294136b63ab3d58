//===- TuningPlan.cpp - what `flashjit autotune` will measure -------------===//
// Why: the candidates come from the heuristic's own enumeration over
// allTemplates(), so a kernel family registered later is tuned without a
// change here, and the heuristic's config is always among those timed: the
// fastest measured config can never be slower than the heuristic's.
#include "flashjit/Autotune/TuningPlan.h"

#include "flashjit/Autotune/ConfigJson.h"
#include "flashjit/Autotune/Heuristic.h"
#include "flashjit/Templates/MmaSyncBackward.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace flashjit::autotune {

using nlohmann::json;

BucketPlan representativeProblem(const ShapeBucket &bucket,
                                 const PlanOptions &options) {
  BucketPlan plan;
  plan.bucket = bucket;
  plan.spec.headDim = bucket.headDim;
  plan.spec.dtype = bucket.dtype;
  plan.spec.causal = bucket.causal;
  plan.spec.numHeads = std::max<int64_t>(1, options.hidden / bucket.headDim);
  plan.spec.numKVHeads = plan.spec.numHeads;
  plan.seqlen = bucket.tuningSeqlen();
  plan.batch = std::max<int64_t>(1, options.tokens / plan.seqlen);
  plan.flops = forwardFlops(plan.spec, plan.batch, plan.seqlen, plan.seqlen);
  return plan;
}

BucketPlan planBucket(const ShapeBucket &bucket, const DeviceModel &device,
                      const PlanOptions &options) {
  BucketPlan plan = representativeProblem(bucket, options);
  // The runtime's fallback for this bucket's lengths: the heuristic at its
  // length (shapeForSeqlen); the order of the other candidates uses the
  // bucket's own shape, a better prior for it.
  HeuristicOptions atLength;
  atLength.shape = shapeForSeqlen(plan.seqlen);
  auto heuristic = chooseConfig(plan.spec, device, atLength);
  if (!heuristic) {
    plan.error = llvm::toString(heuristic.takeError());
    return plan;
  }
  plan.heuristic = heuristic->config;
  plan.skippedTemplates = heuristic->skippedTemplates;

  HeuristicOptions bucketShape;
  bucketShape.shape = {plan.batch, plan.seqlen};
  auto ranked = chooseConfig(plan.spec, device, bucketShape);
  if (!ranked) {
    plan.error = llvm::toString(ranked.takeError());
    return plan;
  }
  plan.candidates.push_back(plan.heuristic);
  for (const CandidateReport &report : ranked->considered) {
    if (!report.fits())
      continue;
    ++plan.fitting;
    if (report.config != plan.heuristic)
      plan.candidates.push_back(report.config);
  }
  if (options.maxCandidates > 0 &&
      plan.candidates.size() > options.maxCandidates)
    plan.candidates.resize(options.maxCandidates);
  return plan;
}

BucketPlan planBackwardBucket(const ShapeBucket &bucket,
                              const DeviceModel &device,
                              const PlanOptions &options) {
  BucketPlan plan = representativeProblem(bucket, options);
  plan.flops *= kBackwardFlopsPerForward;
  auto target = Target::fromComputeCapability(device.ccMajor, device.ccMinor);
  if (!target) {
    plan.error = llvm::toString(target.takeError());
    return plan;
  }
  if (llvm::Error err = MmaSyncBackward::supports(plan.spec, *target)) {
    plan.error = llvm::toString(std::move(err));
    return plan;
  }
  // The default's template only: where wgmma_bwd builds the spec, the
  // mma_sync kernels are several times slower and not worth the time.
  plan.heuristic = MmaSyncBackward::defaultConfig(plan.spec, *target);
  for (const TileConfig &config :
       MmaSyncBackward::candidates(plan.spec, *target)) {
    if (config.family != plan.heuristic.family)
      continue;
    TemplateResources r = MmaSyncBackward::resources(plan.spec, config);
    if (r.sharedMemoryBytes > device.sharedMemoryPerBlockOptin)
      continue;
    ++plan.fitting;
    plan.candidates.push_back(config);
  }
  // The default first, then the others in the template's order.
  auto it = llvm::find(plan.candidates, plan.heuristic);
  if (it == plan.candidates.end())
    plan.candidates.insert(plan.candidates.begin(), plan.heuristic);
  else
    std::rotate(plan.candidates.begin(), it, it + 1);
  if (options.maxCandidates > 0 &&
      plan.candidates.size() > options.maxCandidates)
    plan.candidates.resize(options.maxCandidates);
  return plan;
}

llvm::Expected<std::vector<BucketPlan>>
planTuning(llvm::ArrayRef<ShapeBucket> buckets, const DeviceModel &device,
           const PlanOptions &options, Pass pass) {
  if (auto err = checkBuckets(buckets))
    return err;
  if (auto err = device.validate())
    return err;
  std::vector<BucketPlan> plans;
  for (const ShapeBucket &bucket : buckets)
    plans.push_back(pass == Pass::Backward
                        ? planBackwardBucket(bucket, device, options)
                        : planBucket(bucket, device, options));
  return plans;
}

json bucketPlanToJson(const BucketPlan &plan) {
  json candidates = json::array();
  for (const TileConfig &config : plan.candidates)
    candidates.push_back(config.canonical());
  json out = {{"bucket", bucketToJson(plan.bucket)},
              {"description", plan.bucket.describe()},
              {"spec", specToJson(plan.spec)},
              {"batch", plan.batch},
              {"seqlen", plan.seqlen},
              {"flops", plan.flops},
              {"heuristic", nullptr},
              {"candidates", candidates},
              {"fitting", plan.fitting},
              {"skipped_templates", plan.skippedTemplates},
              {"error", nullptr}};
  if (plan.error.empty())
    out["heuristic"] = tileConfigToJson(plan.heuristic);
  else
    out["error"] = plan.error;
  return out;
}

} // namespace flashjit::autotune
