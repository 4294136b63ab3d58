//===- BackwardReference.h - exact attention gradients in float64 -*- C++ -*-===//
// Why: the backward kernels are checked against this: the gradients of
// softmax(scale Q K^T) V computed in double precision from the same
// (rounded) Q, K, V and dO, row by row, with no tiling and no saved
// statistics from the GPU.
#ifndef FLASHJIT_DEVTOOLS_BACKWARDREFERENCE_H
#define FLASHJIT_DEVTOOLS_BACKWARDREFERENCE_H

#include "flashjit/Compiler/ModInterpreter.h"
#include "flashjit/Dialect/AttentionSpec.h"
#include "flashjit/DevTools/HostBlockMask.h"

#include <cstdint>
#include <string>
#include <vector>

namespace flashjit {

/// Host tensors in float, contiguous: q, dO [batch, heads, seqlen_q, d];
/// k, v [batch, kv_heads, seqlen_k, d]. Dense or causal (either
/// alignment) attention, windows, and the spec's mods.
struct HostBackwardProblem {
  AttentionSpec spec;
  int64_t batch = 1, seqlenQ = 1, seqlenK = 1;
  double scale = 0;
  std::vector<float> q, k, v, dO;
  /// The spec's mods (null: none) and the tensors they read. The
  /// score_mod's derivative is taken by central differences of the
  /// interpreted function (step 1e-4 max(1, |score|)), independent of the
  /// kernels' derived score_grad.
  const ModInterpreter *mods = nullptr;
  std::vector<HostCapture> captures;
  /// A block-sparse spec's block mask, in the forward's form (null:
  /// dense): a key block a query block lists k times counts k times.
  const HostBlockMask *blockMask = nullptr;
};

/// The gradients of one KV head's group: dq of its spec.groupSize() query
/// heads [group, seqlen_q, d], dk and dv [seqlen_k, d]. A query row that
/// sees no key (bottom-right causal with seqlen_q > seqlen_k) has dq = 0
/// and adds nothing to dk and dv.
struct ReferenceGradients {
  std::vector<double> dq, dk, dv;
  /// The same sums over the absolute values of their terms (dS taken as
  /// P (|dP| + |D|)): the scale of each gradient's rounding errors, which
  /// stays when the gradient itself is zero (one visible key: P = 1 and
  /// dS = 0, so dq = dk = 0 while the kernels' rounded O leaves dP - D at
  /// the rounding of D).
  std::vector<double> dqMagnitude, dkMagnitude, dvMagnitude;
  /// Set when a mod cannot be evaluated (a captured tensor read out of
  /// bounds); the gradients are then incomplete.
  std::string error;
};

/// Computes the gradients of (batch, kvHead) on `threads` host threads
/// (0: the hardware's count).
ReferenceGradients referenceGradients(const HostBackwardProblem &p,
                                      int64_t batch, int64_t kvHead,
                                      unsigned threads = 0);

} // namespace flashjit

#endif
