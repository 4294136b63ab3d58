//===- ShapeBuckets.cpp - problem-size classes for tuning -----------------===//
// Why: buckets are the keys of the tuning database; overlapping or empty
// ones would make a lookup ambiguous or a tuning run pointless, so they are
// checked wherever a list is built or loaded.
#include "flashjit/Autotune/ShapeBuckets.h"

#include "JsonFields.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/bit.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit::autotune {

using nlohmann::json;

bool ShapeBucket::contains(const AttentionSpec &spec, int64_t seqlen) const {
  return spec.headDim == headDim && spec.dtype == dtype &&
         spec.causal == causal && seqlen >= seqlenMin &&
         (!seqlenMax || seqlen < *seqlenMax);
}

bool ShapeBucket::overlaps(const ShapeBucket &o) const {
  if (headDim != o.headDim || dtype != o.dtype || causal != o.causal)
    return false;
  bool thisBeforeOther = seqlenMax && *seqlenMax <= o.seqlenMin;
  bool otherBeforeThis = o.seqlenMax && *o.seqlenMax <= seqlenMin;
  return !thisBeforeOther && !otherBeforeThis;
}

int64_t ShapeBucket::tuningSeqlen() const {
  if (!seqlenMax)
    return 2 * seqlenMin;
  int64_t middle = seqlenMin + (*seqlenMax - 1 - seqlenMin) / 2;
  int64_t power = static_cast<int64_t>(
      llvm::bit_floor(static_cast<uint64_t>(std::max<int64_t>(middle, 1))));
  return power >= seqlenMin ? power : seqlenMin;
}

std::string ShapeBucket::describe() const {
  std::string range =
      seqlenMax ? llvm::formatv("[{0}, {1})", seqlenMin, *seqlenMax).str()
                : llvm::formatv("[{0}, inf)", seqlenMin).str();
  return llvm::formatv("d{0} {1}{2} seqlen {3}", headDim, dtypeName(dtype),
                       causal ? " causal" : "", range)
      .str();
}

json bucketToJson(const ShapeBucket &bucket) {
  json out = {{"head_dim", bucket.headDim},
              {"dtype", dtypeName(bucket.dtype)},
              {"causal", bucket.causal},
              {"seqlen_min", bucket.seqlenMin},
              {"seqlen_max", nullptr}};
  if (bucket.seqlenMax)
    out["seqlen_max"] = *bucket.seqlenMax;
  return out;
}

llvm::Expected<ShapeBucket> bucketFromJson(const json &in, llvm::StringRef at) {
  using namespace detail;
  ShapeBucket bucket;
  auto headDim = readInt(in, at, "head_dim", 8, 256);
  if (!headDim)
    return headDim.takeError();
  bucket.headDim = *headDim;
  auto dtypeText = readString(in, at, "dtype");
  if (!dtypeText)
    return dtypeText.takeError();
  auto dtype = parseDType(*dtypeText);
  if (!dtype)
    return fieldError(fieldPath(at, "dtype"), toString(dtype.takeError()));
  bucket.dtype = *dtype;
  auto causal = readBool(in, at, "causal");
  if (!causal)
    return causal.takeError();
  bucket.causal = *causal;
  auto seqlenMin = readInt(in, at, "seqlen_min", 1, INT64_MAX);
  if (!seqlenMin)
    return seqlenMin.takeError();
  bucket.seqlenMin = *seqlenMin;
  auto maxField = requireField(in, at, "seqlen_max");
  if (!maxField)
    return maxField.takeError();
  if (!(*maxField)->is_null()) {
    auto seqlenMax =
        readInt(in, at, "seqlen_max", bucket.seqlenMin + 1, INT64_MAX);
    if (!seqlenMax)
      return seqlenMax.takeError();
    bucket.seqlenMax = *seqlenMax;
  }
  return bucket;
}

BucketAxes defaultBucketAxes() {
  return {{1, 384, 768, 1536, 3072, 8192}, {64, 128}, {false, true}, {DType::BF16}};
}

llvm::Expected<std::vector<ShapeBucket>> makeBuckets(const BucketAxes &axes) {
  auto emptyAxis = [](const char *axis) {
    return llvm::createStringError(
        llvm::formatv("no {0} to tune: give at least one", axis).str());
  };
  if (axes.seqlenStarts.empty())
    return emptyAxis("sequence-length range");
  if (axes.headDims.empty())
    return emptyAxis("head dim");
  if (axes.causal.empty())
    return emptyAxis("causal setting");
  if (axes.dtypes.empty())
    return emptyAxis("dtype");
  for (size_t i = 0; i < axes.seqlenStarts.size(); ++i)
    if (axes.seqlenStarts[i] < 1 ||
        (i > 0 && axes.seqlenStarts[i] <= axes.seqlenStarts[i - 1]))
      return llvm::createStringError(
          "sequence-length range starts must be increasing and at least 1");
  std::vector<ShapeBucket> buckets;
  for (DType dtype : axes.dtypes)
    for (int64_t headDim : axes.headDims)
      for (bool causal : axes.causal)
        for (size_t i = 0; i < axes.seqlenStarts.size(); ++i) {
          ShapeBucket bucket{headDim, dtype, causal, axes.seqlenStarts[i],
                             std::nullopt};
          if (i + 1 < axes.seqlenStarts.size())
            bucket.seqlenMax = axes.seqlenStarts[i + 1];
          buckets.push_back(bucket);
        }
  if (auto err = checkBuckets(buckets))
    return err;
  return buckets;
}

std::vector<ShapeBucket> defaultBuckets() {
  auto buckets = makeBuckets(defaultBucketAxes());
  if (!buckets) {
    llvm::consumeError(buckets.takeError());
    return {};
  }
  return *buckets;
}

llvm::Expected<std::vector<ShapeBucket>>
filterBuckets(llvm::ArrayRef<ShapeBucket> buckets,
              llvm::ArrayRef<std::string> patterns) {
  if (patterns.empty())
    return buckets.vec();
  std::vector<ShapeBucket> kept;
  for (const ShapeBucket &bucket : buckets) {
    std::string text = bucket.describe();
    if (llvm::any_of(patterns, [&](const std::string &pattern) {
          return text.find(pattern) != std::string::npos;
        }))
      kept.push_back(bucket);
  }
  if (!kept.empty())
    return kept;
  std::vector<std::string> quoted, names;
  for (const std::string &pattern : patterns)
    quoted.push_back("'" + pattern + "'");
  for (const ShapeBucket &bucket : buckets)
    names.push_back(bucket.describe());
  return llvm::createStringError(
      llvm::formatv("the bucket list is empty: no bucket matches {0} (the "
                    "buckets are: {1})",
                    llvm::join(quoted, ", "),
                    names.empty() ? std::string("none")
                                  : llvm::join(names, "; "))
          .str());
}

llvm::Error checkBuckets(llvm::ArrayRef<ShapeBucket> buckets) {
  if (buckets.empty())
    return llvm::createStringError(
        "the bucket list is empty: give at least one (head dim, dtype, "
        "causal, sequence-length range) to tune");
  for (size_t i = 0; i < buckets.size(); ++i) {
    const ShapeBucket &b = buckets[i];
    AttentionSpec probe;
    probe.headDim = b.headDim;
    if (auto err = probe.validate())
      return llvm::createStringError(llvm::formatv("bucket {0} ({1}): {2}", i,
                                                   b.describe(),
                                                   toString(std::move(err)))
                                         .str());
    if (b.seqlenMin < 1 || (b.seqlenMax && *b.seqlenMax <= b.seqlenMin))
      return llvm::createStringError(
          llvm::formatv("bucket {0} ({1}): the sequence-length range is "
                        "empty; it needs 1 <= seqlen_min < seqlen_max",
                        i, b.describe())
              .str());
    for (size_t j = 0; j < i; ++j)
      if (b.overlaps(buckets[j]))
        return llvm::createStringError(
            llvm::formatv("bucket {0} ({1}) overlaps bucket {2} ({3}): a "
                          "sequence length must fall in one bucket",
                          i, b.describe(), j, buckets[j].describe())
                .str());
  }
  return llvm::Error::success();
}

} // namespace flashjit::autotune
