//===- ShapeBuckets.h - problem-size classes for tuning ----------*- C++
//-*-===//
// Why: the best config depends on the sequence length, but tuning every
// length is impossible; `flashjit autotune` measures one representative per
// bucket (head dim x dtype x causal x seqlen range) and the database answers
// any length from its bucket.
#ifndef FLASHJIT_AUTOTUNE_SHAPEBUCKETS_H
#define FLASHJIT_AUTOTUNE_SHAPEBUCKETS_H

#include "flashjit/Dialect/AttentionSpec.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"
#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <vector>

namespace flashjit::autotune {

struct ShapeBucket {
  int64_t headDim = 128;
  DType dtype = DType::BF16;
  bool causal = false;
  /// Sequence lengths [seqlenMin, seqlenMax); no seqlenMax: unbounded.
  int64_t seqlenMin = 1;
  std::optional<int64_t> seqlenMax;

  bool contains(const AttentionSpec &spec, int64_t seqlen) const;
  /// Same head dim, dtype and causality, and the seqlen ranges intersect.
  bool overlaps(const ShapeBucket &other) const;
  /// The sequence length to measure for this bucket: a power of two near the
  /// middle of the range (512 for [1, 1024)), twice the start when unbounded.
  int64_t tuningSeqlen() const;
  /// "d128 bf16 causal seqlen [1024, 4096)".
  std::string describe() const;
  bool operator==(const ShapeBucket &o) const {
    return headDim == o.headDim && dtype == o.dtype && causal == o.causal &&
           seqlenMin == o.seqlenMin && seqlenMax == o.seqlenMax;
  }
};

/// {"head_dim", "dtype", "causal", "seqlen_min", "seqlen_max"}; an unbounded
/// range has "seqlen_max": null.
nlohmann::json bucketToJson(const ShapeBucket &bucket);
/// `at` names the field in errors ("entries[0].bucket").
llvm::Expected<ShapeBucket> bucketFromJson(const nlohmann::json &json,
                                           llvm::StringRef at);

/// The cross product a bucket list is made of.
struct BucketAxes {
  /// Increasing starts of consecutive ranges; the last is unbounded:
  /// {1, 1024, 4096} -> [1, 1024), [1024, 4096), [4096, inf).
  std::vector<int64_t> seqlenStarts;
  std::vector<int64_t> headDims;
  std::vector<bool> causal;
  std::vector<DType> dtypes;
};
/// seqlen {1, 384, 768, 1536, 3072, 8192} (measured at 128, 512, 1024,
/// 2048, 4096 and 16384: the runtime's length classes, LengthClasses.h) x
/// head dims {64, 128} x causal {no, yes} x bf16.
BucketAxes defaultBucketAxes();
/// The buckets of the axes; an empty axis or a bad value is an error that
/// names it.
llvm::Expected<std::vector<ShapeBucket>> makeBuckets(const BucketAxes &axes);
/// makeBuckets(defaultBucketAxes()): 24 buckets.
std::vector<ShapeBucket> defaultBuckets();
/// The buckets whose describe() contains one of `patterns` (all of them
/// when there is no pattern). When none is left, the error says the list
/// is empty, names the patterns and lists the buckets there were.
llvm::Expected<std::vector<ShapeBucket>>
filterBuckets(llvm::ArrayRef<ShapeBucket> buckets,
              llvm::ArrayRef<std::string> patterns);
/// Checks a list to tune or to load: not empty, valid head dims and ranges,
/// no two buckets overlapping.
llvm::Error checkBuckets(llvm::ArrayRef<ShapeBucket> buckets);

} // namespace flashjit::autotune

#endif
