//===- TuningPlan.h - what `flashjit autotune` will measure -------*- C++
//-*-===//
// Why: before a GPU is touched, each bucket becomes a concrete problem (a
// spec and a representative shape), the heuristic's config for it, and the
// candidates to time, drawn from every registered template. `--dry-run`
// prints this plan, and the measuring loop runs it, so what is listed is
// exactly what is measured. Needs no GPU.
#ifndef FLASHJIT_AUTOTUNE_TUNINGPLAN_H
#define FLASHJIT_AUTOTUNE_TUNINGPLAN_H

#include "flashjit/Autotune/DeviceModel.h"
#include "flashjit/Autotune/ShapeBuckets.h"
#include "flashjit/Templates/TileConfig.h"

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace flashjit::autotune {

struct PlanOptions {
  /// Candidates timed per bucket, the heuristic's config included; 0: all
  /// that fit the device.
  unsigned maxCandidates = 0;
  /// The FlashAttention benchmark convention: batch * seqlen = 16k tokens
  /// and hidden = heads * head dim = 2048.
  int64_t tokens = 16384;
  int64_t hidden = 2048;
};

/// One bucket made concrete.
struct BucketPlan {
  ShapeBucket bucket;
  /// head dim, dtype and causality of the bucket; heads = hidden / head dim
  /// (at least 1), as many KV heads.
  AttentionSpec spec;
  /// The representative shape: seqlen = bucket.tuningSeqlen(), batch =
  /// tokens / seqlen (at least 1).
  int64_t batch = 1;
  int64_t seqlen = 1;
  /// Forward FLOPs of that shape (FlashAttention convention, halved when
  /// causal).
  double flops = 0;
  /// The heuristic's config for the spec on the device: what the runtime
  /// builds without a tuning database.
  TileConfig heuristic;
  /// What will be timed: the heuristic's config first, then the other
  /// fitting candidates best-ranked first for this bucket's shape, cut to
  /// PlanOptions::maxCandidates.
  std::vector<TileConfig> candidates;
  /// Candidates that fit the device before the cut.
  unsigned fitting = 0;
  /// Templates the device cannot run the spec with, and why.
  std::vector<std::string> skippedTemplates;
  /// Why nothing can be measured for this bucket (no fitting candidate);
  /// empty otherwise. A bucket that cannot be planned does not stop the
  /// others.
  std::string error;

  bool runnable() const { return error.empty() && !candidates.empty(); }
};

/// The representative problem of a bucket (spec, batch, seqlen, flops);
/// candidates are left empty.
BucketPlan representativeProblem(const ShapeBucket &bucket,
                                 const PlanOptions &options = {});

/// The plan of one bucket on the device.
BucketPlan planBucket(const ShapeBucket &bucket, const DeviceModel &device,
                      const PlanOptions &options = {});

/// The backward's rate convention (FlashAttention): 2.5 x the forward's
/// FLOPs.
constexpr double kBackwardFlopsPerForward = 2.5;
/// The plan of one bucket's backward pass on the device: the backward's
/// default config for the spec on the device's target first, then the
/// other candidates of the same template (MmaSyncBackward::candidates)
/// that fit its shared memory; `flops` by the backward's convention.
BucketPlan planBackwardBucket(const ShapeBucket &bucket,
                              const DeviceModel &device,
                              const PlanOptions &options = {});
/// Which kernels a plan tunes.
enum class Pass { Forward, Backward };
/// The plans of a bucket list (checked with checkBuckets first: an empty or
/// overlapping list is an error), in the list's order.
llvm::Expected<std::vector<BucketPlan>>
planTuning(llvm::ArrayRef<ShapeBucket> buckets, const DeviceModel &device,
           const PlanOptions &options = {}, Pass pass = Pass::Forward);

/// {"bucket", "spec", "batch", "seqlen", "flops", "heuristic",
///  "candidates": [...], "fitting", "skipped_templates", "error"}.
nlohmann::json bucketPlanToJson(const BucketPlan &plan);

} // namespace flashjit::autotune

#endif
