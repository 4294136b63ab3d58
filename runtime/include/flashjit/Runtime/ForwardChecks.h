//===- ForwardChecks.h - argument checks before a launch ----------*- C++ -*-===//
// Why: a bad pointer or stride given to a kernel corrupts memory silently;
// every forward() argument is checked here first, with a message that says
// which argument is wrong and what was expected.
#ifndef FLASHJIT_RUNTIME_FORWARDCHECKS_H
#define FLASHJIT_RUNTIME_FORWARDCHECKS_H

#include "flashjit/FlashJIT.h"

#include <array>

namespace flashjit {

/// Null or misaligned pointers, dtypes, shapes against the spec and each
/// other, head_dim stride 1, 16-byte aligned rows, seqlens in [1, 2^31),
/// outputs whose strides overlap or that overlap an input, the scale
/// (checkScale). docs/rules.md lists every rule.
llvm::Error checkForwardArgs(const AttentionSpec &spec, const ForwardArgs &args);
/// Error unless o (2-byte elements) and lse (f32) each map distinct
/// elements to distinct memory and neither overlaps the other or one of
/// the named inputs (also the decode kernels' check).
llvm::Error checkOutputsApart(
    const TensorRef &o, const LseRef &lse,
    llvm::ArrayRef<std::pair<const char *, const TensorRef *>> inputs);

/// The captured tensors of a launch against the spec's (count, dtype,
/// rank, sizes, alignment, strides).
llvm::Error checkCaptures(const AttentionSpec &spec,
                          llvm::ArrayRef<CapturedRef> captures);

/// A block mask's four tensors against the spec (given, or none for a
/// dense spec) and a problem of batch x heads x seqlenQ x seqlenK.
llvm::Error checkBlockMask(const AttentionSpec &spec, const BlockMaskRef &mask,
                           int64_t batch, int64_t heads, int64_t seqlenQ,
                           int64_t seqlenK);

/// The four lists of a block mask as messages and the C API name them
/// (BlockMaskRef::lists() order): the forward's, and the backward's
/// transposed ones (BackwardArgs::blockMask).
constexpr std::array<const char *, 4> kBlockMaskListNames = {
    "kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"};
constexpr std::array<const char *, 4> kTransposedBlockMaskListNames = {
    "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices"};

/// The backward's transposed block mask (BackwardArgs::blockMask: per key
/// block of sparseBlockN keys, the query blocks of sparseBlockM rows),
/// checked as checkBlockMask checks the forward's lists, and named
/// q_num_blocks, q_indices, full_q_num_blocks, full_q_indices.
llvm::Error checkTransposedBlockMask(const AttentionSpec &spec,
                                     const BlockMaskRef &mask, int64_t batch,
                                     int64_t heads, int64_t seqlenQ,
                                     int64_t seqlenK);

/// A block mask a block-mask kernel writes (BlockMaskBuilder::build): as
/// checkBlockMask for the lists' own batch and head sizes, which all four
/// share, and lists that do not overlap.
llvm::Error checkBlockMaskOutput(const AttentionSpec &spec,
                                 const BlockMaskRef &mask, int64_t seqlenQ,
                                 int64_t seqlenK);

/// One tensor of a launch: non-null, 16-byte aligned, the spec's dtype
/// and head dim, contiguous rows that start 16-byte aligned, seqlen below
/// 2^31. `name` starts the message.
llvm::Error checkTensorRef(const char *name, const TensorRef &t,
                           const AttentionSpec &spec);
/// Whether no two elements of `t` share memory.
bool hasDistinctElements(const TensorRef &t);
/// Whether the memory `a` spans meets the memory `b` spans (first to last
/// byte of each).
bool spansOverlap(const TensorRef &a, const TensorRef &b);
bool spansOverlap(const TensorRef &a, const LseRef &b);

/// The softmax scales the kernels take: scale * log2(e) must be a normal
/// f32 (FLT_MIN / log2(e) and FLT_MAX / log2(e), rounded inwards).
constexpr double kMinScale = 8.15e-39, kMaxScale = 2.35e38;
/// Error unless `scale` is finite, positive and, times log2(e), a normal
/// f32; the message names the range.
llvm::Error checkScale(double scale);

/// The most blocks a grid has in y and in z (CUDA's limit).
constexpr int64_t kMaxGridYZ = 65535;
/// Error when a kernel that is not persistent (one block per query block,
/// head and sequence: heads in grid y, sequences in grid z) would need more
/// than kMaxGridYZ heads or sequences; the message says to split the call.
llvm::Error checkGridLimits(const KernelInfo &info, bool persistent,
                            const ForwardArgs &args);

/// Error unless a varlen launch's `batch` (its sequences, one grid z each)
/// is 0 to kMaxGridYZ and each named array of offsets (or lengths, or a
/// block table: i32 on the device) is non-null and 4-byte aligned.
llvm::Error checkVarlenBatch(
    int64_t batch,
    llvm::ArrayRef<std::pair<const char *, const int32_t *>> offsets);

/// Error unless a varlen launch's packed q and k are batch-1 views of the
/// packed tokens (TensorRef::packed) and it passes no captured tensors or
/// block mask (varlen specs have no mods).
llvm::Error checkPackedViews(const TensorRef &q, const TensorRef &k,
                             llvm::ArrayRef<CapturedRef> captures,
                             const BlockMaskRef &blockMask);

/// The kernel's parameters for `args` (call checkForwardArgs first).
ForwardKernelArgs toKernelArgs(const ForwardArgs &args, double scale);

} // namespace flashjit

#endif
