//===- DecodeTuning.h - tuning buckets and configs of decode kernels -*- C++
//-*-===//
// Why: the best decode kernel (keys per tile, stages, how K/V are copied,
// the L2 hints) and the best split of the KV length depend on the batch
// and the cache length, which a decode kernel only learns at launch. So
// `flashjit autotune --decode` measures candidates per (batch range x KV
// length range) bucket of one decode problem, the tuning database keeps the
// winners beside the forward entries, and a decode kernel made without
// overrides dispatches each launch to its bucket's winner.
#ifndef FLASHJIT_AUTOTUNE_DECODETUNING_H
#define FLASHJIT_AUTOTUNE_DECODETUNING_H

#include "flashjit/Templates/DecodeKernel.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"
#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <vector>

namespace flashjit::autotune {

/// A class of decode launches: the problem (head dim, dtype, heads, KV
/// heads, query tokens, page size) and ranges of the batch and of the
/// longest KV length, [min, max) with no max unbounded.
struct DecodeBucket {
  int64_t headDim = 128;
  DType dtype = DType::BF16;
  int64_t numHeads = 32, numKVHeads = 8, qLen = 1, pageSize = 0;
  int64_t batchMin = 1;
  std::optional<int64_t> batchMax;
  int64_t kvMin = 1;
  std::optional<int64_t> kvMax;

  /// The spec's problem is this bucket's (tile knobs aside), and batch and
  /// kvLen fall in its ranges.
  bool contains(const DecodeSpec &spec, int64_t batch, int64_t kvLen) const;
  bool overlaps(const DecodeBucket &other) const;
  /// The shape measured for the bucket: the batch range's start, and a KV
  /// length inside its range (4x the start, at least 2048, at most 128k
  /// and 2M tokens over the batch).
  int64_t tuningBatch() const;
  int64_t tuningKvLen() const;
  /// "decode d128 bf16 h32/8 q1 contiguous batch [1, 4) kv [32768, inf)".
  std::string describe() const;
  /// The spec of the bucket's problem, no tile knobs.
  DecodeSpec spec() const;
  bool operator==(const DecodeBucket &o) const;
};

/// What a tuned decode bucket runs: the spec's tile knobs (0: the
/// default) and the number of waves the split rule fills (1: one wave of
/// resident blocks; 2: twice as many splits).
struct DecodeTunedConfig {
  int64_t blockN = 0, stages = 0, l2Prefetch = 0, copyMode = 0, evictFirst = 0;
  int64_t splitWaves = 1;

  /// `spec` with these knobs.
  DecodeSpec applied(DecodeSpec spec) const;
  /// "n64 s3 l2 0 copy 2 ef 0 waves 1".
  std::string describe() const;
  bool operator==(const DecodeTunedConfig &o) const;
};

struct DecodeTuningEntry {
  DecodeBucket bucket;
  DecodeTunedConfig config;
  /// GB/s of K+V read at the bucket's tuning shape, and the default
  /// config's at the same shape.
  double gbps = 0;
  std::optional<double> defaultGbps;
};

nlohmann::json decodeEntryToJson(const DecodeTuningEntry &entry);
/// `at` names the field in errors ("decode_entries[0]").
llvm::Expected<DecodeTuningEntry> decodeEntryFromJson(const nlohmann::json &j,
                                                      llvm::StringRef at);

/// The buckets of one decode problem (`problem`'s ranges are ignored):
/// batch starts {1, 4, 16, 64} x KV length starts {1, 4096, 32768}, each
/// last range unbounded.
std::vector<DecodeBucket> defaultDecodeBuckets(const DecodeBucket &problem);
/// Buckets as the cross product of increasing starts; an empty or
/// non-increasing list is an error naming it.
llvm::Expected<std::vector<DecodeBucket>>
makeDecodeBuckets(const DecodeBucket &problem,
                  llvm::ArrayRef<int64_t> batchStarts,
                  llvm::ArrayRef<int64_t> kvStarts);
/// The configs timed for a bucket on compute capability `cc`, the
/// default first: tiles of 32 to 128 keys, 2 to 6 stages within the
/// shared memory of `sharedPerBlock` bytes, cp.async or (sm_90) bulk
/// copies, evict_first with bulk copies, one or two waves of splits.
std::vector<DecodeTunedConfig> decodeCandidates(const DecodeBucket &bucket,
                                                int computeCapability,
                                                int64_t sharedPerBlock);

} // namespace flashjit::autotune

#endif
