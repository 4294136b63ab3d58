//===- AttentionSpec.cpp - validation and canonical text ------------------===//
// Why: the spec is checked before any MLIR is built, so bad input becomes a
// message a user can act on, never a verifier crash deep in the pipeline.
#include "flashjit/Dialect/AttentionSpec.h"

#include "llvm/Support/FormatVariadic.h"
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
  return llvm::Error::success();
}

std::string AttentionSpec::canonical() const {
  return llvm::formatv("fwd;d={0};dtype={1};causal={2};hq={3};hkv={4}",
                       headDim, dtypeName(dtype), causal ? 1 : 0, numHeads,
                       numKVHeads)
      .str();
}

std::string AttentionSpec::kernelName() const {
  return llvm::formatv("flashjit_fwd_d{0}_{1}{2}_h{3}_kv{4}", headDim,
                       dtypeName(dtype), causal ? "_causal" : "", numHeads,
                       numKVHeads)
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

} // namespace flashjit
