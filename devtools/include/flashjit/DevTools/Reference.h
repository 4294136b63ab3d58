//===- Reference.h - exact attention in float64 on the CPU ----------*- C++ -*-===//
// Why: every GPU result is checked against this: straightforward softmax in
// double precision over the same (rounded) inputs, for chosen rows.
#ifndef FLASHJIT_DEVTOOLS_REFERENCE_H
#define FLASHJIT_DEVTOOLS_REFERENCE_H

#include "flashjit/Compiler/ModInterpreter.h"
#include "flashjit/Dialect/AttentionSpec.h"
#include "flashjit/DevTools/HostBlockMask.h"
#include <cstdint>
#include <vector>

namespace flashjit {

/// Host tensors in float, contiguous [batch, heads, seqlen, head_dim].
struct HostProblem {
  AttentionSpec spec;
  int64_t batch = 1, seqlenQ = 1, seqlenK = 1;
  double scale = 0;
  std::vector<float> q, k, v;
  /// The spec's mods (null: none) and the tensors they read.
  const ModInterpreter *mods = nullptr;
  std::vector<HostCapture> captures;
  /// A block-sparse spec's block mask (null: dense).
  const HostBlockMask *blockMask = nullptr;
};

/// O (row of head_dim) and LSE of query row `row` of (batch, head), with
/// the spec's causal mask, window (either alignment), mods and block mask
/// (a key block listed k times counts k times, as in the kernels). A row that
/// keeps no key has O = 0 and LSE = -inf (the kernels' convention, as
/// FlexAttention's). A mod that cannot be evaluated (a captured tensor read
/// out of bounds) leaves `error` set.
struct ReferenceRow {
  std::vector<double> out;
  double lse = 0;
  std::string error;
};
ReferenceRow referenceRow(const HostProblem &p, int64_t batch, int64_t head,
                          int64_t row);

} // namespace flashjit

#endif
