//===- CApiVarlen.cpp - the varlen part of flashjit.h ---------------------===//
// Why: flashjit_kernel_forward_varlen over Kernel::forwardVarlen, in the C
// API's manner: the packed 3-D tensors become the batch-1 views the C++
// call takes, the offsets are checked as DLTensors (int32, [batch + 1], on
// the device), errors are a status and the last error.
#include "CApiSupport.h"
#include "DLPackTensors.h"

#include "llvm/Support/FormatVariadic.h"

#include <array>
#include <cmath>

namespace {

using flashjit::ErrorCode;
using namespace flashjit::capi;

llvm::Error invalid(const llvm::Twine &message) {
  return flashjit::makeError(ErrorCode::InvalidArgument, message);
}

/// A packed [tokens, heads, head_dim] tensor (rank `rank`: 3, or 2 for the
/// LSE [heads, tokens]) viewed as batch 1: [1, heads, tokens, head_dim] or
/// [1, heads, tokens]. `shape` and `strides` hold the view's arrays.
llvm::Expected<DLTensor> batchOneView(const char *name, const DLTensor *t,
                                      int rank, std::array<int64_t, 4> &shape,
                                      std::array<int64_t, 4> &strides) {
  if (!t)
    return invalid(llvm::formatv("{0} is a null pointer", name));
  if (t->ndim != rank || !t->shape)
    return invalid(llvm::formatv(
        "{0} has {1} dimensions: a varlen launch takes {2}", name, t->ndim,
        rank == 3 ? "[total_tokens, heads, head_dim]" : "[heads, total_tokens]"));
  std::array<int64_t, 3> given{}, compact{};
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    compact[d] = stride;
    stride *= t->shape[d];
    given[d] = t->strides ? t->strides[d] : compact[d];
  }
  DLTensor view = *t;
  view.ndim = rank + 1;
  if (rank == 3) {
    shape = {1, t->shape[1], t->shape[0], t->shape[2]};
    strides = {t->shape[0] * given[0], given[1], given[0], given[2]};
  } else {
    shape = {1, t->shape[0], t->shape[1], 0};
    strides = {t->shape[0] * given[0], given[0], given[1], 0};
  }
  view.shape = shape.data();
  view.strides = strides.data();
  return view;
}

/// cu_seqlens: int32 [batch + 1], contiguous, on the context's device.
llvm::Expected<const int32_t *> readOffsets(const char *name,
                                            const DLTensor *t, int device,
                                            int64_t &entries) {
  auto ref = flashjit::toCapturedRef(name, t, device);
  if (!ref)
    return ref.takeError();
  if (ref->dtype != flashjit::CaptureDType::I32 || ref->rank != 1 ||
      ref->strides[0] != 1 || ref->shape[0] < 1)
    return invalid(llvm::formatv("{0} must be a contiguous 1-D int32 tensor "
                                 "of batch + 1 offsets",
                                 name));
  entries = ref->shape[0];
  return static_cast<const int32_t *>(ref->data);
}

} // namespace

extern "C" {

flashjit_status_t flashjit_kernel_forward_varlen(
    flashjit_kernel_t kernel, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, DLTensor *o, DLTensor *lse,
    const DLTensor *cu_seqlens_q, const DLTensor *cu_seqlens_k,
    int64_t max_seqlen_q, double scale, void *stream) {
  return guarded(__func__, [&](const char *fn) {
    if (!kernel)
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  "kernel is a null handle");
    const int device = kernel->device;
    flashjit::VarlenForwardArgs args;
    const std::pair<const char *, const DLTensor *> tensors[] = {
        {"q", q}, {"k", k}, {"v", v}, {"o", o}};
    flashjit::TensorRef *refs[] = {&args.packed.q, &args.packed.k,
                                   &args.packed.v, &args.packed.o};
    for (size_t i = 0; i < 4; ++i) {
      std::array<int64_t, 4> shape, strides;
      auto view =
          batchOneView(tensors[i].first, tensors[i].second, 3, shape, strides);
      if (!view)
        return fail(fn, view.takeError());
      auto ref = flashjit::toTensorRef(tensors[i].first, &*view, device);
      if (!ref)
        return fail(fn, ref.takeError());
      *refs[i] = *ref;
    }
    std::array<int64_t, 4> lseShape, lseStrides;
    auto lseView = batchOneView("lse", lse, 2, lseShape, lseStrides);
    if (!lseView)
      return fail(fn, lseView.takeError());
    auto lseRef = flashjit::toLseRef("lse", &*lseView, device);
    if (!lseRef)
      return fail(fn, lseRef.takeError());
    args.packed.lse = *lseRef;
    int64_t entriesQ = 0, entriesK = 0;
    auto cuQ = readOffsets("cu_seqlens_q", cu_seqlens_q, device, entriesQ);
    if (!cuQ)
      return fail(fn, cuQ.takeError());
    auto cuK = readOffsets("cu_seqlens_k", cu_seqlens_k, device, entriesK);
    if (!cuK)
      return fail(fn, cuK.takeError());
    if (entriesQ != entriesK)
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  llvm::formatv("cu_seqlens_q has {0} entries but "
                                "cu_seqlens_k {1}: both are batch + 1",
                                entriesQ, entriesK)
                      .str());
    args.cuSeqlensQ = *cuQ;
    args.cuSeqlensK = *cuK;
    args.batch = entriesQ - 1;
    args.maxSeqlenQ = max_seqlen_q;
    if (!std::isnan(scale))
      args.packed.scale = scale;
    args.packed.stream = static_cast<CUstream>(stream);
    if (auto err = kernel->kernel->forwardVarlen(args))
      return fail(fn, std::move(err));
    return succeed();
  });
}

} // extern "C"
