//===- Reference.cpp - exact attention in float64 -------------------------===//
// Why: see Reference.h. Two passes over the keys: the max, then the sum.
#include "flashjit/DevTools/Reference.h"

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
  // Key j is visible to query i when j <= i + offset + right (causal:
  // right 0) and j >= i + offset - left, offset 0 (top-left) or Sk - Sq.
  const int64_t offset =
      s.causalAlign == CausalAlign::BottomRight ? p.seqlenK - p.seqlenQ : 0;
  int64_t lo = 0, hi = p.seqlenK - 1;
  if (s.hasLeftBound())
    lo = std::max<int64_t>(lo, row + offset - s.windowLeft);
  if (s.hasRightBound())
    hi = std::min<int64_t>(hi, row + offset + s.rightExtent());
  const double negInf = -std::numeric_limits<double>::infinity();
  ReferenceRow r;
  r.out.assign(d, 0.0);
  // Block-sparse: how often the row's query block visits each key block,
  // with the mask_mod (partial) and without it (full). Dense: once, with it.
  std::vector<int> partial, full;
  if (p.blockMask)
    p.blockMask->visits(b, h, row / s.sparseBlockM,
                        (p.seqlenK + s.sparseBlockN - 1) / s.sparseBlockN,
                        partial, full);
  std::vector<double> scores, weights;
  double maxScore = negInf;
  for (int64_t j = 0; j <= hi; ++j) {
    int partialVisits = 1, fullVisits = 0;
    if (p.blockMask) {
      partialVisits = partial[j / s.sparseBlockN];
      fullVisits = full[j / s.sparseBlockN];
    }
    if (j < lo || partialVisits + fullVisits == 0) {
      scores.push_back(negInf);
      weights.push_back(0);
      continue;
    }
    double dot = 0;
    for (int64_t c = 0; c < d; ++c)
      dot += double(q[c]) * double(kBase[j * d + c]);
    double score = dot * p.scale;
    if (p.mods) {
      auto modded = p.mods->score(score, b, h, row, j, p.captures);
      if (!modded) {
        r.error = llvm::toString(modded.takeError());
        return r;
      }
      auto kept = p.mods->keep(b, h, row, j, p.captures);
      if (!kept) {
        r.error = llvm::toString(kept.takeError());
        return r;
      }
      score = *modded;
      if (!*kept)
        partialVisits = 0;
    }
    double weight = partialVisits + fullVisits;
    if (weight == 0)
      score = negInf;
    scores.push_back(score);
    weights.push_back(weight);
    maxScore = std::max(maxScore, score);
  }
  if (maxScore == negInf) {
    r.lse = negInf;
    return r;
  }
  double sum = 0;
  for (int64_t j = 0; j < static_cast<int64_t>(scores.size()); ++j) {
    if (scores[j] == negInf)
      continue;
    double w = weights[j] * std::exp(scores[j] - maxScore);
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
