//===- Reference.cpp - exact attention in float64 -------------------------===//
// Why: see Reference.h. Two passes over the keys: the max, then the sum.
#include "flashjit/Runtime/Reference.h"

#include <cmath>
#include <limits>

namespace flashjit {

ReferenceRow referenceRow(const HostProblem &p, int64_t b, int64_t h,
                          int64_t row) {
  const AttentionSpec &s = p.spec;
  const int64_t d = s.headDim;
  const int64_t kvHead = h / s.groupSize();
  const float *q = &p.q[((b * s.numHeads + h) * p.seqlenQ + row) * d];
  const float *kBase = &p.k[(b * s.numKVHeads + kvHead) * p.seqlenK * d];
  const float *vBase = &p.v[(b * s.numKVHeads + kvHead) * p.seqlenK * d];
  // Causal is top-left aligned: key j is visible to query i when j <= i.
  int64_t visible = s.causal ? std::min(p.seqlenK, row + 1) : p.seqlenK;
  std::vector<double> scores(visible);
  double maxScore = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < visible; ++j) {
    double dot = 0;
    for (int64_t c = 0; c < d; ++c)
      dot += double(q[c]) * double(kBase[j * d + c]);
    scores[j] = dot * p.scale;
    maxScore = std::max(maxScore, scores[j]);
  }
  ReferenceRow r;
  r.out.assign(d, 0.0);
  double sum = 0;
  for (int64_t j = 0; j < visible; ++j) {
    double w = std::exp(scores[j] - maxScore);
    sum += w;
    for (int64_t c = 0; c < d; ++c)
      r.out[c] += w * double(vBase[j * d + c]);
  }
  for (double &x : r.out)
    x /= sum;
  r.lse = maxScore + std::log(sum);
  return r;
}

} // namespace flashjit
