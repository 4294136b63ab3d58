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

/// The kernel's parameters for `args` (call checkForwardArgs first).
ForwardKernelArgs toKernelArgs(const ForwardArgs &args, double scale);

} // namespace flashjit

#endif
