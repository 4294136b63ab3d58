//===- BackwardReference.h - exact attention gradients in float64 -*- C++ -*-===//
// Why: the backward kernels are checked against this: the gradients of
// softmax(scale Q K^T) V computed in double precision from the same
// (rounded) Q, K, V and dO, row by row, with no tiling and no saved
// statistics from the GPU.
#ifndef FLASHJIT_DEVTOOLS_BACKWARDREFERENCE_H
#define FLASHJIT_DEVTOOLS_BACKWARDREFERENCE_H

#include "flashjit/Dialect/AttentionSpec.h"

#include <cstdint>
#include <vector>

namespace flashjit {

/// Host tensors in float, contiguous: q, dO [batch, heads, seqlen_q, d];
/// k, v [batch, kv_heads, seqlen_k, d]. Dense or causal (either
/// alignment) attention.
struct HostBackwardProblem {
  AttentionSpec spec;
  int64_t batch = 1, seqlenQ = 1, seqlenK = 1;
  double scale = 0;
  std::vector<float> q, k, v, dO;
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
};

/// Computes the gradients of (batch, kvHead) on `threads` host threads
/// (0: the hardware's count).
ReferenceGradients referenceGradients(const HostBackwardProblem &p,
                                      int64_t batch, int64_t kvHead,
                                      unsigned threads = 0);

} // namespace flashjit

#endif
