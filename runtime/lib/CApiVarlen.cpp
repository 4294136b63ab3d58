//===- CApiVarlen.cpp - the varlen part of flashjit.h ---------------------===//
// Why: flashjit_kernel_forward_varlen and _paged over Kernel::forwardVarlen,
// and flashjit_backward_run_varlen over BackwardKernel::backwardVarlen,
// in the C API's manner: the packed 3-D tensors (and paged K/V pools) become
// the batch-1 views the C++ call takes, the offsets, lengths and block
// table are checked as DLTensors (int32, on the device), errors are a
// status and the last error.
#include "CApiSupport.h"
#include "DLPackTensors.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <array>
#include <cmath>

namespace {

using flashjit::ErrorCode;
using namespace flashjit::capi;

llvm::Error invalid(const llvm::Twine &message) {
  return flashjit::makeError(ErrorCode::InvalidArgument, message);
}

/// a * b, or an error naming `name` where a dimension is negative or the
/// product leaves int64 (fuzzed or corrupt DLTensors).
llvm::Expected<int64_t> product(const char *name, int64_t a, int64_t b) {
  int64_t out = 0;
  if (a < 0 || llvm::MulOverflow(a, b, out))
    return invalid(llvm::formatv(
        "{0} has a negative dimension or a size past 2^63 elements", name));
  return out;
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
    auto next = product(name, t->shape[d], stride);
    if (!next)
      return next.takeError();
    stride = *next;
    given[d] = t->strides ? t->strides[d] : compact[d];
  }
  // The view's batch stride: the packed tensor's whole extent.
  auto extent = product(name, t->shape[0], given[0]);
  if (!extent)
    return extent.takeError();
  DLTensor view = *t;
  view.ndim = rank + 1;
  if (rank == 3) {
    shape = {1, t->shape[1], t->shape[0], t->shape[2]};
    strides = {*extent, given[1], given[0], given[2]};
  } else {
    shape = {1, t->shape[0], t->shape[1], 0};
    strides = {*extent, given[0], given[1], 0};
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

/// A paged pool [pages, page_size, kv_heads, head_dim] as the packed
/// [pages * page_size, kv_heads, head_dim] tensor it is when its pages are
/// evenly strided. `shape` and `strides` hold the view's arrays.
llvm::Expected<DLTensor> poolAsPacked(const char *name, const DLTensor *t,
                                      std::array<int64_t, 3> &shape,
                                      std::array<int64_t, 3> &strides) {
  if (!t)
    return invalid(llvm::formatv("{0} is a null pointer", name));
  if (t->ndim != 4 || !t->shape)
    return invalid(llvm::formatv(
        "{0} has {1} dimensions: a paged cache is [pages, page_size, "
        "kv_heads, head_dim]",
        name, t->ndim));
  std::array<int64_t, 4> given{};
  int64_t stride = 1;
  for (int d = 3; d >= 0; --d) {
    given[d] = t->strides ? t->strides[d] : stride;
    auto next = product(name, t->shape[d], stride);
    if (!next)
      return next.takeError();
    stride = *next;
  }
  auto pageSpan = product(name, t->shape[1], given[1]);
  if (!pageSpan)
    return pageSpan.takeError();
  if (given[0] != *pageSpan)
    return invalid(llvm::formatv(
        "{0}'s pages are {1} elements apart, but a page of {2} rows spans "
        "{3}: pass a pool whose pages follow one another",
        name, given[0], t->shape[1], *pageSpan));
  DLTensor view = *t;
  view.ndim = 3;
  auto rows = product(name, t->shape[0], t->shape[1]);
  if (!rows)
    return rows.takeError();
  shape = {*rows, t->shape[2], t->shape[3]};
  strides = {given[1], given[2], given[3]};
  view.shape = shape.data();
  view.strides = strides.data();
  return view;
}

/// A packed [tokens, heads, head_dim] tensor as the batch-1 TensorRef.
llvm::Expected<flashjit::TensorRef> packedRef(const char *name,
                                              const DLTensor *t, int device) {
  std::array<int64_t, 4> shape, strides;
  auto view = batchOneView(name, t, 3, shape, strides);
  if (!view)
    return view.takeError();
  return flashjit::toTensorRef(name, &*view, device);
}

/// A packed LSE [heads, tokens] as the batch-1 LseRef.
llvm::Expected<flashjit::LseRef> packedLse(const DLTensor *lse, int device) {
  std::array<int64_t, 4> shape, strides;
  auto view = batchOneView("lse", lse, 2, shape, strides);
  if (!view)
    return view.takeError();
  return flashjit::toLseRef("lse", &*view, device);
}

/// q, k, v and o (3-D packed, or k and v paged pools) and lse into
/// args.packed.
llvm::Error readPacked(const DLTensor *q, const DLTensor *k,
                       const DLTensor *v, const DLTensor *o,
                       const DLTensor *lse, int device, bool pools,
                       flashjit::VarlenForwardArgs &args) {
  const std::pair<const char *, const DLTensor *> tensors[] = {
      {"q", q}, {"k", k}, {"v", v}, {"o", o}};
  flashjit::TensorRef *refs[] = {&args.packed.q, &args.packed.k,
                                 &args.packed.v, &args.packed.o};
  for (size_t i = 0; i < 4; ++i) {
    auto [name, tensor] = tensors[i];
    std::array<int64_t, 3> poolShape, poolStrides;
    DLTensor pool;
    if (pools && (i == 1 || i == 2)) {
      auto packed = poolAsPacked(name, tensor, poolShape, poolStrides);
      if (!packed)
        return packed.takeError();
      pool = *packed;
      tensor = &pool;
    }
    auto ref = packedRef(name, tensor, device);
    if (!ref)
      return ref.takeError();
    *refs[i] = *ref;
  }
  auto lseRef = packedLse(lse, device);
  if (!lseRef)
    return lseRef.takeError();
  args.packed.lse = *lseRef;
  return llvm::Error::success();
}

/// cu_seqlens_q and cu_seqlens_k (batch + 1 entries each) into `q` and
/// `k`, and the batch.
llvm::Error readOffsetPair(const DLTensor *cuSeqlensQ,
                           const DLTensor *cuSeqlensK, int device,
                           const int32_t *&q, const int32_t *&k,
                           int64_t &batch) {
  int64_t entriesQ = 0, entriesK = 0;
  auto cuQ = readOffsets("cu_seqlens_q", cuSeqlensQ, device, entriesQ);
  if (!cuQ)
    return cuQ.takeError();
  auto cuK = readOffsets("cu_seqlens_k", cuSeqlensK, device, entriesK);
  if (!cuK)
    return cuK.takeError();
  if (entriesQ != entriesK)
    return invalid(llvm::formatv("cu_seqlens_q has {0} entries but "
                                 "cu_seqlens_k {1}: both are batch + 1",
                                 entriesQ, entriesK));
  q = *cuQ;
  k = *cuK;
  batch = entriesQ - 1;
  return llvm::Error::success();
}

/// The scale (NaN: the spec's default), the stream and the launch.
flashjit_status_t launch(const char *fn, flashjit_kernel_t kernel,
                         flashjit::VarlenForwardArgs &args,
                         int64_t maxSeqlenQ, double scale, void *stream) {
  args.maxSeqlenQ = maxSeqlenQ;
  if (!std::isnan(scale))
    args.packed.scale = scale;
  args.packed.stream = static_cast<CUstream>(stream);
  if (auto err = kernel->kernel->forwardVarlen(args))
    return fail(fn, std::move(err));
  return succeed();
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
    if (auto err = readPacked(q, k, v, o, lse, device, /*pools=*/false, args))
      return fail(fn, std::move(err));
    if (auto err = readOffsetPair(cu_seqlens_q, cu_seqlens_k, device,
                                  args.cuSeqlensQ, args.cuSeqlensK,
                                  args.batch))
      return fail(fn, std::move(err));
    return launch(fn, kernel, args, max_seqlen_q, scale, stream);
  });
}

flashjit_status_t flashjit_kernel_forward_paged(
    flashjit_kernel_t kernel, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, DLTensor *o, DLTensor *lse,
    const DLTensor *cu_seqlens_q, const DLTensor *kv_lens,
    const DLTensor *block_table, int64_t max_seqlen_q, double scale,
    void *stream) {
  return guarded(__func__, [&](const char *fn) {
    if (!kernel)
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  "kernel is a null handle");
    const flashjit::AttentionSpec &spec = kernel->kernel->spec();
    if (!spec.paged())
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  "the kernel's spec has no page size: launch a varlen "
                  "kernel of packed K/V with flashjit_kernel_forward_varlen");
    const int device = kernel->device;
    flashjit::VarlenForwardArgs args;
    if (auto err = readPacked(q, k, v, o, lse, device, /*pools=*/true, args))
      return fail(fn, std::move(err));
    if (k->shape[1] != spec.pageSize || v->shape[1] != spec.pageSize)
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  llvm::formatv("k and v have pages of {0} and {1} tokens, "
                                "the kernel's spec {2}",
                                k->shape[1], v->shape[1], spec.pageSize)
                      .str());
    int64_t entriesQ = 0;
    auto cuQ = readOffsets("cu_seqlens_q", cu_seqlens_q, device, entriesQ);
    if (!cuQ)
      return fail(fn, cuQ.takeError());
    const int64_t batch = entriesQ - 1;
    auto lens = readIndexTensor("kv_lens", kv_lens, 1, device);
    if (!lens)
      return fail(fn, lens.takeError());
    auto table = readIndexTensor("block_table", block_table, 2, device);
    if (!table)
      return fail(fn, table.takeError());
    if (lens->shape[0] != batch || table->shape[0] != batch)
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  llvm::formatv("kv_lens has {0} entries and block_table "
                                "{1} rows for the {2} sequences of "
                                "cu_seqlens_q",
                                lens->shape[0], table->shape[0], batch)
                      .str());
    if (table->strides[0] != table->shape[1])
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  "block_table must be contiguous: [batch, max_pages], rows "
                  "max_pages entries apart");
    args.cuSeqlensQ = *cuQ;
    args.kvLens = static_cast<const int32_t *>(lens->data);
    args.blockTable = static_cast<const int32_t *>(table->data);
    args.maxPages = table->shape[1];
    args.batch = batch;
    return launch(fn, kernel, args, max_seqlen_q, scale, stream);
  });
}

flashjit_status_t flashjit_backward_run_varlen(
    flashjit_backward_t backward, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, const DLTensor *o, const DLTensor *lse,
    const DLTensor *dout, DLTensor *dq, DLTensor *dk, DLTensor *dv,
    const DLTensor *cu_seqlens_q, const DLTensor *cu_seqlens_k,
    int64_t max_seqlen_k, void *workspace, uint64_t workspace_bytes,
    double scale, void *stream) {
  return guarded(__func__, [&](const char *fn) {
    if (!backward)
      return fail(fn, FLASHJIT_STATUS_INVALID_ARGUMENT,
                  "backward is a null handle");
    const int device = backward->device;
    flashjit::VarlenBackwardArgs args;
    flashjit::BackwardArgs &a = args.packed;
    const std::pair<const char *, const DLTensor *> tensors[] = {
        {"q", q},   {"k", k},   {"v", v},   {"o", o},
        {"dout", dout}, {"dq", dq}, {"dk", dk}, {"dv", dv}};
    flashjit::TensorRef *refs[] = {&a.q,  &a.k,  &a.v,  &a.o,
                                   &a.dO, &a.dq, &a.dk, &a.dv};
    for (size_t i = 0; i < 8; ++i) {
      auto ref = packedRef(tensors[i].first, tensors[i].second, device);
      if (!ref)
        return fail(fn, ref.takeError());
      *refs[i] = *ref;
    }
    auto lseRef = packedLse(lse, device);
    if (!lseRef)
      return fail(fn, lseRef.takeError());
    a.lse = *lseRef;
    if (auto err = readOffsetPair(cu_seqlens_q, cu_seqlens_k, device,
                                  args.cuSeqlensQ, args.cuSeqlensK,
                                  args.batch))
      return fail(fn, std::move(err));
    args.maxSeqlenK = max_seqlen_k;
    a.workspace = workspace;
    a.workspaceBytes = static_cast<size_t>(workspace_bytes);
    if (!std::isnan(scale))
      a.scale = scale;
    a.stream = static_cast<CUstream>(stream);
    if (auto err = backward->kernel->backwardVarlen(args))
      return fail(fn, std::move(err));
    return succeed();
  });
}

} // extern "C"
