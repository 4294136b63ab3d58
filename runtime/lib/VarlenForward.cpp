//===- VarlenForward.cpp - launches of varlen kernels ---------------------===//
// Why: a variable-length batch is a dense launch of batch 1 over the packed
// tensors (every check of forward() applies to those views, and the tensor
// maps span them) plus the cumulative offsets and a grid of one z per
// sequence; this file adds what differs and checks it on the host where
// that is cheap. The kernels' side is KernelIR::beginVarlenSequence.
#include "flashjit/FlashJIT.h"
#include "flashjit/Runtime/ErrorCode.h"
#include "flashjit/Runtime/ForwardChecks.h"

#include "llvm/Support/FormatVariadic.h"

#include <cstdint>

namespace flashjit {

TensorRef TensorRef::packed(void *data, DType dtype, int64_t tokens,
                            int64_t heads, int64_t d) {
  return bshd(data, dtype, 1, heads, tokens, d);
}

LseRef LseRef::packed(float *data, int64_t heads, int64_t tokens) {
  return contiguous(data, 1, heads, tokens);
}

llvm::Error Kernel::varlenNeedsOffsets() const {
  return makeError(ErrorCode::InvalidArgument,
                   Info.name +
                       " is a varlen kernel (AttentionSpec::varlen): launch "
                       "it with forwardVarlen and the sequences' offsets, "
                       "or compile the spec without varlen for dense "
                       "[batch, heads, seqlen, head_dim] tensors");
}

llvm::Error Kernel::checkVarlen(const VarlenForwardArgs &args) const {
  auto invalid = [](const llvm::Twine &message) {
    return makeError(ErrorCode::InvalidArgument, message);
  };
  if (!Spec.varlen)
    return invalid(Info.name +
                   " is not a varlen kernel: compile the spec with "
                   "AttentionSpec::varlen set to launch it on packed "
                   "sequences");
  if (args.maxSeqlenQ < 1)
    return invalid(llvm::formatv("max_seqlen_q must be at least 1, got {0}",
                                 args.maxSeqlenQ));
  if (auto err = checkPagedArgs(args))
    return err;
  llvm::SmallVector<std::pair<const char *, const int32_t *>, 3> pointers = {
      {"cu_seqlens_q", args.cuSeqlensQ}};
  if (Spec.paged())
    pointers.append({{"kv_lens", args.kvLens},
                     {"block_table", args.blockTable}});
  else
    pointers.push_back({"cu_seqlens_k", args.cuSeqlensK});
  if (auto err = checkVarlenBatch(args.batch, pointers))
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  const ForwardArgs &p = args.packed;
  if (auto err = checkPackedViews(p.q, p.k, p.captures, p.blockMask))
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  if (args.maxSeqlenQ > p.q.shape[2])
    return invalid(llvm::formatv(
        "max_seqlen_q {0} is longer than the packed query tokens ({1})",
        args.maxSeqlenQ, p.q.shape[2]));
  // The packed views, as forward() checks its tensors.
  if (auto err = checkForwardArgs(Spec, p))
    return withCode(ErrorCode::InvalidArgument, std::move(err));
  return llvm::Error::success();
}

llvm::Error Kernel::checkPagedArgs(const VarlenForwardArgs &args) const {
  auto invalid = [](const llvm::Twine &message) {
    return makeError(ErrorCode::InvalidArgument, message);
  };
  if (!Spec.paged()) {
    if (args.kvLens || args.blockTable || args.maxPages != 0)
      return invalid(Info.name +
                     " reads packed K/V (cu_seqlens_k): kv_lens, "
                     "block_table and max_pages are for kernels compiled "
                     "with a page size (AttentionSpec::pageSize)");
    return llvm::Error::success();
  }
  if (args.cuSeqlensK)
    return invalid(llvm::formatv(
        "{0} reads a paged KV cache: give each sequence's keys as kv_lens "
        "and its pages as block_table, not cu_seqlens_k",
        Info.name));
  const int64_t capacity = INT32_MAX / Spec.pageSize;
  if (args.maxPages < 1 || args.maxPages > capacity)
    return invalid(llvm::formatv(
        "max_pages {0} is out of range: the block table's row holds 1 to "
        "{1} pages of {2} tokens",
        args.maxPages, capacity, Spec.pageSize));
  const int64_t poolRows = args.packed.k.shape[2];
  if (poolRows % Spec.pageSize != 0 || args.packed.v.shape[2] != poolRows)
    return invalid(llvm::formatv(
        "the K and V pools hold {0} and {1} tokens: each must be whole "
        "pages of {2} tokens, the same for both (TensorRef::packed(pool, "
        "dtype, pages * pageSize, kvHeads, headDim))",
        poolRows, args.packed.v.shape[2], Spec.pageSize));
  // A TMA box's row coordinate is 32-bit, and the row past the pool must
  // be one too.
  if (poolRows > INT32_MAX - 256)
    return invalid(llvm::formatv(
        "the pools hold {0} tokens: at most {1} per launch",
        poolRows, INT32_MAX - 256));
  return llvm::Error::success();
}

llvm::Error Kernel::forwardVarlen(const VarlenForwardArgs &args) const {
  if (auto err = checkVarlen(args))
    return err;
  // The config follows the batch's longest query sequence, as a compile
  // hint does (a batch of 34-token sequences wants the config without TMA
  // boxes over the packed K/V, a batch up to 4k a persistent wgmma one).
  return launchForLengths(args.maxSeqlenQ, args.maxSeqlenQ, args.packed,
                          &args);
}

} // namespace flashjit
