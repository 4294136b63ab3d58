//===- TuningPlan.cpp - what `flashjit autotune` will measure -------------===//
// Why: the candidates come from the heuristic's own enumeration over
// allTemplates(), so a kernel family registered later is tuned without a
// change here, and the heuristic's config is always among those timed: the
// fastest measured config can never be slower than the heuristic's.
#include "flashjit/Autotune/TuningPlan.h"

#include "flashjit/Autotune/ConfigJson.h"
#include "flashjit/Autotune/Heuristic.h"

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

llvm::Expected<std::vector<BucketPlan>>
planTuning(llvm::ArrayRef<ShapeBucket> buckets, const DeviceModel &device,
           const PlanOptions &options) {
  if (auto err = checkBuckets(buckets))
    return err;
  if (auto err = device.validate())
    return err;
  std::vector<BucketPlan> plans;
  for (const ShapeBucket &bucket : buckets)
    plans.push_back(planBucket(bucket, device, options));
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
