//===- DecodeTuning.cpp - tuning buckets and configs of decode kernels ----===//
// Why: see DecodeTuning.h. Plain C++: the tuner, the database and the
// runtime's dispatch share these without a GPU.
#include "flashjit/Autotune/DecodeTuning.h"

#include "JsonFields.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <array>

namespace flashjit::autotune {

using nlohmann::json;

namespace {
bool inRange(int64_t x, int64_t min, const std::optional<int64_t> &max) {
  return x >= min && (!max || x < *max);
}
bool rangesOverlap(int64_t aMin, const std::optional<int64_t> &aMax,
                   int64_t bMin, const std::optional<int64_t> &bMax) {
  bool aBefore = aMax && *aMax <= bMin;
  bool bBefore = bMax && *bMax <= aMin;
  return !aBefore && !bBefore;
}
std::string rangeText(int64_t min, const std::optional<int64_t> &max) {
  return max ? llvm::formatv("[{0}, {1})", min, *max).str()
             : llvm::formatv("[{0}, inf)", min).str();
}
bool sameProblem(const DecodeBucket &a, const DecodeBucket &b) {
  return a.headDim == b.headDim && a.dtype == b.dtype &&
         a.numHeads == b.numHeads && a.numKVHeads == b.numKVHeads &&
         a.qLen == b.qLen && a.pageSize == b.pageSize;
}
} // namespace

bool DecodeBucket::contains(const DecodeSpec &s, int64_t batch,
                            int64_t kvLen) const {
  return s.headDim == headDim && s.dtype == dtype && s.numHeads == numHeads &&
         s.numKVHeads == numKVHeads && s.qLen == qLen &&
         s.pageSize == pageSize && s.causal &&
         inRange(batch, batchMin, batchMax) && inRange(kvLen, kvMin, kvMax);
}

bool DecodeBucket::overlaps(const DecodeBucket &o) const {
  return sameProblem(*this, o) &&
         rangesOverlap(batchMin, batchMax, o.batchMin, o.batchMax) &&
         rangesOverlap(kvMin, kvMax, o.kvMin, o.kvMax);
}

bool DecodeBucket::operator==(const DecodeBucket &o) const {
  return sameProblem(*this, o) && batchMin == o.batchMin &&
         batchMax == o.batchMax && kvMin == o.kvMin && kvMax == o.kvMax;
}

int64_t DecodeBucket::tuningBatch() const {
  return std::max<int64_t>(batchMin, 1);
}

int64_t DecodeBucket::tuningKvLen() const {
  int64_t l = std::min<int64_t>(std::max<int64_t>(kvMin, 512) * 4, 128 * 1024);
  // At most 2M tokens in all (8 GiB of K+V at 8 KV heads, d128, bf16).
  l = std::min<int64_t>(l, (int64_t(2) << 20) / tuningBatch());
  if (kvMax)
    l = std::min(l, *kvMax - 1);
  return std::max(l, std::max<int64_t>(kvMin, 1));
}

std::string DecodeBucket::describe() const {
  return llvm::formatv("decode d{0} {1} h{2}/{3} q{4} {5} batch {6} kv {7}",
                       headDim, dtypeName(dtype), numHeads, numKVHeads, qLen,
                       pageSize ? llvm::formatv("page{0}", pageSize).str()
                                : std::string("contiguous"),
                       rangeText(batchMin, batchMax), rangeText(kvMin, kvMax))
      .str();
}

DecodeSpec DecodeBucket::spec() const {
  DecodeSpec s;
  s.headDim = headDim;
  s.dtype = dtype;
  s.numHeads = numHeads;
  s.numKVHeads = numKVHeads;
  s.qLen = qLen;
  s.pageSize = pageSize;
  return s;
}

DecodeSpec DecodeTunedConfig::applied(DecodeSpec spec) const {
  spec.blockN = blockN;
  spec.stages = stages;
  spec.l2Prefetch = l2Prefetch;
  spec.copyMode = copyMode;
  spec.evictFirst = evictFirst;
  return spec;
}

std::string DecodeTunedConfig::describe() const {
  return llvm::formatv("n{0} s{1} l2 {2} copy {3} ef {4} waves {5}", blockN,
                       stages, l2Prefetch, copyMode, evictFirst, splitWaves)
      .str();
}

bool DecodeTunedConfig::operator==(const DecodeTunedConfig &o) const {
  return blockN == o.blockN && stages == o.stages &&
         l2Prefetch == o.l2Prefetch && copyMode == o.copyMode &&
         evictFirst == o.evictFirst && splitWaves == o.splitWaves;
}

json decodeEntryToJson(const DecodeTuningEntry &e) {
  const DecodeBucket &b = e.bucket;
  json bucket = {{"head_dim", b.headDim},   {"dtype", dtypeName(b.dtype)},
                 {"heads", b.numHeads},     {"kv_heads", b.numKVHeads},
                 {"q_len", b.qLen},         {"page_size", b.pageSize},
                 {"batch_min", b.batchMin}, {"batch_max", nullptr},
                 {"kv_min", b.kvMin},       {"kv_max", nullptr}};
  if (b.batchMax)
    bucket["batch_max"] = *b.batchMax;
  if (b.kvMax)
    bucket["kv_max"] = *b.kvMax;
  const DecodeTunedConfig &c = e.config;
  json config = {{"block_n", c.blockN},         {"stages", c.stages},
                 {"l2_prefetch", c.l2Prefetch}, {"copy_mode", c.copyMode},
                 {"evict_first", c.evictFirst}, {"split_waves", c.splitWaves}};
  json out = {{"bucket", bucket},
              {"config", config},
              {"gbps", e.gbps},
              {"default_gbps", nullptr}};
  if (e.defaultGbps)
    out["default_gbps"] = *e.defaultGbps;
  return out;
}

llvm::Expected<DecodeTuningEntry> decodeEntryFromJson(const json &in,
                                                      llvm::StringRef at) {
  using namespace detail;
  if (auto err = requireObject(in, at))
    return std::move(err);
  DecodeTuningEntry e;
  auto bucketField = requireField(in, at, "bucket");
  if (!bucketField)
    return bucketField.takeError();
  const json &bj = **bucketField;
  std::string bAt = fieldPath(at, "bucket");
  if (auto err = requireObject(bj, bAt))
    return std::move(err);
  struct IntField {
    const char *key;
    int64_t *to;
    int64_t min, max;
  };
  DecodeBucket &b = e.bucket;
  for (const IntField &f : {IntField{"head_dim", &b.headDim, 1, 1024},
                            IntField{"heads", &b.numHeads, 1, 1 << 16},
                            IntField{"kv_heads", &b.numKVHeads, 1, 1 << 16},
                            IntField{"q_len", &b.qLen, 1, 16},
                            IntField{"page_size", &b.pageSize, 0, 256},
                            IntField{"batch_min", &b.batchMin, 1, INT32_MAX},
                            IntField{"kv_min", &b.kvMin, 1, INT32_MAX}}) {
    auto v = readInt(bj, bAt, f.key, f.min, f.max);
    if (!v)
      return v.takeError();
    *f.to = *v;
  }
  for (auto [key, to] :
       {std::pair{"batch_max", &b.batchMax}, std::pair{"kv_max", &b.kvMax}}) {
    auto field = requireField(bj, bAt, key);
    if (!field)
      return field.takeError();
    if ((*field)->is_null())
      continue;
    auto v = readInt(bj, bAt, key, 2, INT32_MAX);
    if (!v)
      return v.takeError();
    *to = *v;
  }
  if ((b.batchMax && *b.batchMax <= b.batchMin) ||
      (b.kvMax && *b.kvMax <= b.kvMin))
    return fieldError(bAt, "an empty range (max not above min)");
  auto dtypeText = readString(bj, bAt, "dtype");
  if (!dtypeText)
    return dtypeText.takeError();
  auto dtype = parseDType(*dtypeText);
  if (!dtype)
    return fieldError(fieldPath(bAt, "dtype"), toString(dtype.takeError()));
  b.dtype = *dtype;

  auto configField = requireField(in, at, "config");
  if (!configField)
    return configField.takeError();
  std::string cAt = fieldPath(at, "config");
  DecodeTunedConfig &c = e.config;
  for (const IntField &f : {IntField{"block_n", &c.blockN, 0, 128},
                            IntField{"stages", &c.stages, 0, 8},
                            IntField{"l2_prefetch", &c.l2Prefetch, -1, 256},
                            IntField{"copy_mode", &c.copyMode, 0, 2},
                            IntField{"evict_first", &c.evictFirst, -1, 1},
                            IntField{"split_waves", &c.splitWaves, 1, 8}}) {
    auto v = readInt(**configField, cAt, f.key, f.min, f.max);
    if (!v)
      return v.takeError();
    *f.to = *v;
  }
  if (auto err = c.applied(b.spec()).validate())
    return fieldError(cAt, toString(std::move(err)));
  auto gbps = readNumber(in, at, "gbps");
  if (!gbps)
    return gbps.takeError();
  e.gbps = *gbps;
  auto defaultGbps = readOptionalNumber(in, at, "default_gbps");
  if (!defaultGbps)
    return defaultGbps.takeError();
  e.defaultGbps = *defaultGbps;
  return e;
}

llvm::Expected<std::vector<DecodeBucket>>
makeDecodeBuckets(const DecodeBucket &problem,
                  llvm::ArrayRef<int64_t> batchStarts,
                  llvm::ArrayRef<int64_t> kvStarts) {
  for (auto [name, starts] :
       {std::pair{"batch", batchStarts}, std::pair{"KV length", kvStarts}}) {
    if (starts.empty() || starts.front() < 1)
      return llvm::createStringError(
          llvm::formatv("the {0} starts of the decode buckets must be a "
                        "non-empty list starting at 1 or more",
                        name)
              .str());
    for (size_t i = 1; i < starts.size(); ++i)
      if (starts[i] <= starts[i - 1])
        return llvm::createStringError(
            llvm::formatv("the {0} starts of the decode buckets must "
                          "increase ({1} follows {2})",
                          name, starts[i], starts[i - 1])
                .str());
  }
  std::vector<DecodeBucket> buckets;
  for (size_t i = 0; i < batchStarts.size(); ++i)
    for (size_t j = 0; j < kvStarts.size(); ++j) {
      DecodeBucket b = problem;
      b.batchMin = batchStarts[i];
      b.batchMax = i + 1 < batchStarts.size()
                       ? std::optional<int64_t>(batchStarts[i + 1])
                       : std::nullopt;
      b.kvMin = kvStarts[j];
      b.kvMax = j + 1 < kvStarts.size()
                    ? std::optional<int64_t>(kvStarts[j + 1])
                    : std::nullopt;
      buckets.push_back(b);
    }
  return buckets;
}

std::vector<DecodeBucket> defaultDecodeBuckets(const DecodeBucket &problem) {
  return llvm::cantFail(
      makeDecodeBuckets(problem, {1, 4, 16, 64}, {1, 4096, 32768}));
}

std::vector<DecodeTunedConfig> decodeCandidates(const DecodeBucket &bucket,
                                                int computeCapability,
                                                int64_t sharedPerBlock) {
  std::vector<DecodeTunedConfig> out;
  // What a candidate builds: tile, stages, copy path, hint, waves. Two
  // candidates that build the same kernel are timed once.
  std::vector<std::array<int64_t, 5>> built;
  auto add = [&](DecodeTunedConfig c) {
    DecodeSpec spec = c.applied(bucket.spec());
    if (llvm::Error err = spec.validate()) {
      llvm::consumeError(std::move(err)); // a combination that does not fit
      return;
    }
    DecodeTiling t = decodeTiling(spec);
    if (t.sharedBytes(spec) > sharedPerBlock)
      return;
    if (c.copyMode == 2 && computeCapability < 90)
      return;
    std::array<int64_t, 5> key = {
        t.blockN, t.stages, decodeUsesBulkCopy(spec, computeCapability),
        decodeUsesEvictFirst(spec, computeCapability), c.splitWaves};
    if (std::find(built.begin(), built.end(), key) != built.end())
      return;
    built.push_back(key);
    out.push_back(c);
  };
  add({}); // the default, first
  for (auto [n, s] : {std::pair<int64_t, int64_t>{64, 2},
                      {64, 3},
                      {64, 4},
                      {128, 2},
                      {128, 3}})
    add({n, s, 0, 1, 0, 1});
  // Bulk copies (sm_90), with evict_first or not (DecodeSpec::validate).
  for (auto [n, s] : {std::pair<int64_t, int64_t>{64, 2}, {128, 2}})
    for (int64_t ef : {0, 1})
      add({n, s, 0, 2, ef, 1});
  // More splits where the batch leaves the GPU to the split rule.
  const int64_t blocks = bucket.tuningBatch() * bucket.numKVHeads;
  if (blocks < 128)
    add({0, 0, 0, 0, 0, 2});
  return out;
}

} // namespace flashjit::autotune
