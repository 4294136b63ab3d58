//===- AttentionSpec.cpp - validation and canonical text ------------------===//
// Why: the spec is checked before any MLIR is built, so bad input becomes a
// message a user can act on, never a verifier crash deep in the pipeline.
#include "flashjit/Dialect/AttentionSpec.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/xxhash.h"
#include <algorithm>
#include <cmath>

namespace flashjit {

const char *dtypeName(DType dtype) {
  return dtype == DType::F16 ? "f16" : "bf16";
}

llvm::Expected<DType> parseDType(llvm::StringRef text) {
  if (text == "f16" || text == "fp16" || text == "float16")
    return DType::F16;
  if (text == "bf16" || text == "bfloat16")
    return DType::BF16;
  return llvm::createStringError(
      llvm::formatv("unknown dtype '{0}': expected f16 or bf16", text).str());
}

const char *causalAlignName(CausalAlign align) {
  return align == CausalAlign::TopLeft ? "top-left" : "bottom-right";
}

llvm::Expected<CausalAlign> parseCausalAlign(llvm::StringRef text) {
  if (text == "top-left")
    return CausalAlign::TopLeft;
  if (text == "bottom-right")
    return CausalAlign::BottomRight;
  return llvm::createStringError(
      llvm::formatv("unknown causal alignment '{0}': expected top-left or "
                    "bottom-right",
                    text)
          .str());
}

const char *captureDTypeName(CaptureDType dtype) {
  return dtype == CaptureDType::F32 ? "f32" : "i32";
}

std::string CapturedTensor::typeText() const {
  std::string text = "tensor<";
  for (int64_t d : shape)
    text += (d < 0 ? std::string("?") : std::to_string(d)) + "x";
  return text + captureDTypeName(dtype) + ">";
}

bool CapturedTensor::hasNarrowOffsets() const {
  constexpr int64_t kNarrow = int64_t(1) << 31;
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 0 || d >= kNarrow)
      return false;
    elements *= d; // below 2^62: both factors are below 2^31
    if (elements >= kNarrow)
      return false;
  }
  return true;
}

int64_t AttentionSpec::rightExtent() const {
  if (!causal)
    return windowRight;
  return windowRight >= 0 ? std::min<int64_t>(windowRight, 0) : 0;
}

bool AttentionSpec::mayEmptyRows() const {
  return !maskMod.empty() || windowLeft >= 0 || windowRight >= 0 ||
         (causal && causalAlign == CausalAlign::BottomRight) ||
         isBlockSparse() || varlen;
}

bool AttentionSpec::isPlain() const {
  return causalAlign == CausalAlign::TopLeft && windowLeft < 0 &&
         windowRight < 0 && !hasMods() && captures.empty() &&
         !isBlockSparse() && !varlen;
}

llvm::Error AttentionSpec::validate() const {
  if (headDim < 8 || headDim > 256 || headDim % 8 != 0)
    return llvm::createStringError(
        llvm::formatv("unsupported head dim {0}: expected a multiple of 8 "
                      "between 8 and 256 (common: 64, 128, 256)",
                      headDim)
            .str());
  if (numHeads < 1 || numKVHeads < 1)
    return llvm::createStringError(
        llvm::formatv("heads ({0}) and kv heads ({1}) must be at least 1",
                      numHeads, numKVHeads)
            .str());
  if (numHeads % numKVHeads != 0)
    return llvm::createStringError(
        llvm::formatv("heads ({0}) must be a multiple of kv heads ({1}) for "
                      "grouped-query attention",
                      numHeads, numKVHeads)
            .str());
  if (windowLeft < -1 || windowRight < -1)
    return llvm::createStringError(
        llvm::formatv("window ({0}, {1}) has a negative extent: each side is "
                      "the keys it reaches past the diagonal (0 or more), or "
                      "-1 for no limit",
                      windowLeft, windowRight)
            .str());
  const bool sparseOff = sparseBlockM == 0 && sparseBlockN == 0;
  auto sparseSize = [](int64_t n) {
    return n >= 16 && n <= 4096 && n % 16 == 0;
  };
  if (!sparseOff && !(sparseSize(sparseBlockM) && sparseSize(sparseBlockN)))
    return llvm::createStringError(
        llvm::formatv("sparse block {0} x {1}: both sizes are multiples of "
                      "16 from 16 to 4096 (e.g. 128 x 128), or both 0 for "
                      "dense attention",
                      sparseBlockM, sparseBlockN)
            .str());
  if (captures.size() > kMaxCapturedTensors)
    return llvm::createStringError(
        llvm::formatv("{0} captured tensors: at most {1}", captures.size(),
                      kMaxCapturedTensors)
            .str());
  if (!captures.empty() && !hasMods())
    return llvm::createStringError(
        "captured tensors are given but no score_mod or mask_mod reads them");
  for (const CapturedTensor &c : captures) {
    if (c.shape.empty() || c.shape.size() > 4)
      return llvm::createStringError(
          llvm::formatv("captured tensor '{0}' has rank {1}: expected 1 to 4",
                        c.name, c.shape.size())
              .str());
    for (int64_t d : c.shape)
      if (d == 0 || d < -1)
        return llvm::createStringError(
            llvm::formatv("captured tensor '{0}' has a dimension of {1}: "
                          "expected a positive size, or -1 for any size",
                          c.name, d)
                .str());
  }
  if (varlen && (hasMods() || isBlockSparse()))
    return llvm::createStringError(
        "varlen attention takes no score_mod, mask_mod or block mask yet: "
        "use the dense (padded) form for those variants");
  if (pageSize != 0 && !validPageSize(pageSize))
    return llvm::createStringError(
        llvm::formatv("page size {0}: paged K/V takes a power of two from 16 "
                      "to 256 tokens per page, or 0 for packed K/V",
                      pageSize)
            .str());
  if (pageSize != 0 && !varlen)
    return llvm::createStringError(
        "a paged KV cache (page size set) is read by varlen kernels only: "
        "set varlen too, or use a decode kernel (DecodeSpec) for 1 to 16 "
        "query tokens per sequence");
  return llvm::Error::success();
}

namespace {
/// The variant part of canonical(): empty for plain attention, so plain
/// kernels keep their keys and names.
std::string variantText(const AttentionSpec &s) {
  if (s.isPlain())
    return "";
  std::string text = llvm::formatv(";align={0};window={1},{2}",
                                   causalAlignName(s.causalAlign),
                                   s.windowLeft, s.windowRight)
                         .str();
  if (s.isBlockSparse())
    text += llvm::formatv(";sparse={0}x{1}", s.sparseBlockM, s.sparseBlockN)
                .str();
  for (const CapturedTensor &c : s.captures)
    text += ";capture=" + c.name + ":" + c.typeText();
  if (!s.scoreMod.empty())
    text += ";score_mod=" + s.scoreMod;
  if (!s.maskMod.empty())
    text += ";mask_mod=" + s.maskMod;
  if (s.varlen)
    text += ";varlen";
  if (s.paged())
    text += llvm::formatv(";page={0}", s.pageSize).str();
  return text;
}
} // namespace

std::string AttentionSpec::canonical() const {
  return llvm::formatv("fwd;d={0};dtype={1};causal={2};hq={3};hkv={4}{5}",
                       headDim, dtypeName(dtype), causal ? 1 : 0, numHeads,
                       numKVHeads, variantText(*this))
      .str();
}

std::string AttentionSpec::kernelName() const {
  std::string variant = variantText(*this);
  std::string suffix =
      variant.empty()
          ? ""
          : "_v" + llvm::utohexstr(llvm::xxh3_64bits(variant), /*LowerCase=*/true);
  return llvm::formatv("flashjit_fwd_d{0}_{1}{2}_h{3}_kv{4}{5}{6}", headDim,
                       dtypeName(dtype), causal ? "_causal" : "", numHeads,
                       numKVHeads,
                       varlen ? (paged() ? "_varlen_paged" : "_varlen") : "",
                       suffix)
      .str();
}

double AttentionSpec::defaultScale() const {
  return 1.0 / std::sqrt(static_cast<double>(headDim));
}

double forwardFlops(const AttentionSpec &spec, int64_t batch, int64_t seqlenQ,
                    int64_t seqlenK) {
  double flops = 4.0 * batch * spec.numHeads * double(seqlenQ) *
                 double(seqlenK) * spec.headDim;
  return spec.causal ? flops / 2 : flops;
}

double visiblePairs(const AttentionSpec &spec, int64_t seqlenQ,
                    int64_t seqlenK) {
  const int64_t offset =
      spec.causalAlign == CausalAlign::BottomRight ? seqlenK - seqlenQ : 0;
  double pairs = 0;
  for (int64_t i = 0; i < seqlenQ; ++i) {
    int64_t lo = 0, hi = seqlenK - 1;
    if (spec.hasLeftBound())
      lo = std::max<int64_t>(lo, i + offset - spec.windowLeft);
    if (spec.hasRightBound())
      hi = std::min<int64_t>(hi, i + offset + spec.rightExtent());
    if (hi >= lo)
      pairs += double(hi - lo + 1);
  }
  return pairs;
}

double computedFlops(const AttentionSpec &spec, int64_t batch,
                     int64_t seqlenQ, int64_t seqlenK) {
  if (spec.isPlain())
    return forwardFlops(spec, batch, seqlenQ, seqlenK);
  return 4.0 * batch * spec.numHeads * spec.headDim *
         visiblePairs(spec, seqlenQ, seqlenK);
}

} // namespace flashjit
