//===- DecodeReference.h - exact decode attention in float64 ----*- C++ -*-===//
// Why: every decode result is checked against straightforward softmax in
// double precision over the same (rounded) inputs, read through the same
// cache layout (contiguous or paged) the kernel reads.
#ifndef FLASHJIT_DEVTOOLS_DECODEREFERENCE_H
#define FLASHJIT_DEVTOOLS_DECODEREFERENCE_H

#include "flashjit/Templates/DecodeKernel.h"

#include <cstdint>
#include <vector>

namespace flashjit {

/// Host images of a decode problem, as uploaded (element bits of the
/// spec's dtype). Q [batch, qLen, heads, d]; K and V contiguous [batch,
/// capacity, kvHeads, d] or paged [pages, pageSize, kvHeads, d] with the
/// block table [batch, maxPages].
struct HostDecodeProblem {
  DecodeSpec spec;
  int64_t batch = 1, capacity = 1, pages = 0, maxPages = 0;
  /// Contiguous K and V laid out [batch, kvHeads, capacity, d] instead.
  bool headMajor = false;
  double scale = 0;
  std::vector<uint16_t> q, k, v;
  std::vector<int32_t> kvLens, blockTable;
};

/// O (head_dim values) and natural-log LSE of token `token` of head
/// `head` of sequence `batch`: keys [0, kvLen) (clamped to the capacity),
/// causal from the bottom right. No key: O = 0, LSE = -inf.
struct DecodeReferenceRow {
  std::vector<double> out;
  double lse = 0;
};
DecodeReferenceRow decodeReferenceRow(const HostDecodeProblem &p, int64_t batch,
                                      int64_t head, int64_t token);

/// The rows numbered (batch x heads + head) x qLen + token in `rows`, in
/// that order, on up to `threads` threads.
std::vector<DecodeReferenceRow>
decodeReference(const HostDecodeProblem &p, const std::vector<int64_t> &rows,
                unsigned threads);

} // namespace flashjit

#endif
