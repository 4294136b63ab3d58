//===- CApiDecode.cpp - the decode part of flashjit.h ---------------------===//
// Why: flashjit_decode_* over Context::decodeKernel and DecodeKernel
// (flashjit/Decode.h), in the C API's manner: C arguments checked, DLPack
// tensors translated, errors as a status and the last error.
#include "CApiSupport.h"
#include "DLPackTensors.h"

#include "flashjit/Decode.h"

#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstring>

struct flashjit_decode_kernel {
  std::shared_ptr<const flashjit::DecodeKernel> kernel;
  int device = 0;
};

namespace {

using flashjit::ErrorCode;
using namespace flashjit::capi;

llvm::Expected<flashjit::DecodeSpec>
readDecodeSpec(const flashjit_decode_spec_t *given) {
  auto invalid = [](const llvm::Twine &message) {
    return flashjit::makeError(ErrorCode::InvalidArgument, message);
  };
  // The first version of the struct is this one.
  if (auto err = checkStructSize(given, sizeof(flashjit_decode_spec_t),
                                 sizeof(flashjit_decode_spec_t),
                                 "flashjit_decode_spec_init"))
    return std::move(err);
  const flashjit_decode_spec_t &s = *given;
  flashjit::DecodeSpec spec;
  auto dtype = readDType(s.dtype);
  if (!dtype)
    return dtype.takeError();
  spec.dtype = *dtype;
  if (s.causal != 0 && s.causal != 1)
    return invalid(
        llvm::formatv("spec causal is {0}: expected 0 or 1", s.causal));
  spec.headDim = s.head_dim;
  spec.causal = s.causal == 1;
  spec.numHeads = s.num_heads;
  spec.numKVHeads = s.num_kv_heads;
  spec.qLen = s.q_len;
  spec.pageSize = s.page_size;
  spec.blockN = s.block_n;
  spec.stages = s.stages;
  spec.l2Prefetch = s.l2_prefetch;
  if (auto err = spec.validate())
    return flashjit::withCode(ErrorCode::InvalidArgument, std::move(err));
  return spec;
}

flashjit_status_t decodeStep(const char *fn, flashjit_decode_kernel_t kernel,
                             const DLTensor *q, const DLTensor *k,
                             const DLTensor *v, const DLTensor *kvLens,
                             const DLTensor *blockTable, DLTensor *o,
                             DLTensor *lse, int64_t maxKvLen, int64_t numSplits,
                             double scale, void *stream) {
  if (!kernel)
    return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                "kernel is a null handle");
  const int device = kernel->device;
  flashjit::DecodeArgs args;
  auto tensor = [&](const char *name, const DLTensor *t,
                    flashjit::TensorRef &out) -> llvm::Error {
    auto ref = flashjit::toTensorRef(name, t, device);
    if (!ref)
      return ref.takeError();
    out = *ref;
    return llvm::Error::success();
  };
  if (auto err = tensor("q", q, args.q))
    return fail(fn, std::move(err));
  if (auto err = tensor("k", k, args.k))
    return fail(fn, std::move(err));
  if (auto err = tensor("v", v, args.v))
    return fail(fn, std::move(err));
  if (auto err = tensor("o", o, args.o))
    return fail(fn, std::move(err));
  auto lseRef = flashjit::toLseRef("lse", lse, device);
  if (!lseRef)
    return fail(fn, lseRef.takeError());
  args.lse = *lseRef;
  auto lens = readIndexTensor("kv_lens", kvLens, 1, device);
  if (!lens)
    return fail(fn, lens.takeError());
  if (lens->shape[0] != args.q.shape[0])
    return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                llvm::formatv("kv_lens has {0} entries for a batch of {1}",
                              lens->shape[0], args.q.shape[0])
                    .str());
  args.kvLens = static_cast<const int32_t *>(lens->data);
  const bool paged = kernel->kernel->spec().paged();
  if (paged != (blockTable != nullptr))
    return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                paged ? "a paged decode kernel needs block_table"
                      : "block_table is given but the kernel's spec has no "
                        "page size");
  if (blockTable) {
    auto table = readIndexTensor("block_table", blockTable, 2, device);
    if (!table)
      return fail(fn, table.takeError());
    if (table->shape[0] != args.q.shape[0])
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  llvm::formatv("block_table has {0} rows for a batch of {1}",
                                table->shape[0], args.q.shape[0])
                      .str());
    args.blockTable = static_cast<const int32_t *>(table->data);
    args.maxPages = table->shape[1];
    args.blockTableStride = table->strides[0];
  }
  args.maxKvLen = maxKvLen;
  args.numSplits = numSplits;
  if (!std::isnan(scale))
    args.scale = scale;
  args.stream = static_cast<CUstream>(stream);
  if (auto err = kernel->kernel->decode(args))
    return fail(fn, std::move(err));
  return succeed();
}

} // namespace

extern "C" {

flashjit_status_t
flashjit_decode_kernel_compile(flashjit_context_t ctx,
                               const flashjit_decode_spec_t *spec,
                               flashjit_decode_kernel_t *out) {
  return guarded(__func__, [&](const char *fn) {
    if (!out)
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  "out is a null pointer");
    *out = nullptr;
    if (!ctx)
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT, "ctx is a null handle");
    auto parsed = readDecodeSpec(spec);
    if (!parsed)
      return fail(fn, parsed.takeError());
    auto kernel = ctx->context->decodeKernel(*parsed);
    if (!kernel)
      return fail(fn, kernel.takeError());
    *out = new flashjit_decode_kernel{*kernel, ctx->device};
    return succeed();
  });
}

flashjit_status_t
flashjit_decode_kernel_release(flashjit_decode_kernel_t kernel) {
  return guarded(__func__, [&](const char *) {
    delete kernel;
    return succeed();
  });
}

flashjit_status_t flashjit_decode(flashjit_decode_kernel_t kernel,
                                  const DLTensor *q, const DLTensor *k,
                                  const DLTensor *v, const DLTensor *kv_lens,
                                  const DLTensor *block_table, DLTensor *o,
                                  DLTensor *lse, int64_t max_kv_len,
                                  int64_t num_splits, double scale,
                                  void *stream) {
  return guarded(__func__, [&](const char *fn) {
    return decodeStep(fn, kernel, q, k, v, kv_lens, block_table, o, lse,
                      max_kv_len, num_splits, scale, stream);
  });
}

} // extern "C"
