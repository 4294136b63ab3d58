//===- ForwardChecks.h - argument checks before a launch ----------*- C++ -*-===//
// Why: a bad pointer or stride given to a kernel corrupts memory silently;
// every forward() argument is checked here first, with a message that says
// which argument is wrong and what was expected.
#ifndef FLASHJIT_RUNTIME_FORWARDCHECKS_H
#define FLASHJIT_RUNTIME_FORWARDCHECKS_H

#include "flashjit/FlashJIT.h"

namespace flashjit {

/// Null or misaligned pointers, dtypes, shapes against the spec and each
/// other, head_dim stride 1, 16-byte aligned rows, seqlens in [1, 2^31),
/// outputs whose strides overlap or that overlap an input.
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

/// A block mask a block-mask kernel writes (BlockMaskBuilder::build): as
/// checkBlockMask for the lists' own batch and head sizes, which all four
/// share, and lists that do not overlap.
llvm::Error checkBlockMaskOutput(const AttentionSpec &spec,
                                 const BlockMaskRef &mask, int64_t seqlenQ,
                                 int64_t seqlenK);

/// The kernel's parameters for `args` (call checkForwardArgs first).
ForwardKernelArgs toKernelArgs(const ForwardArgs &args, double scale);

} // namespace flashjit

#endif
