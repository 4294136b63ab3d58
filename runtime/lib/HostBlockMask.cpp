//===- HostBlockMask.cpp - a block mask on the host -----------------------===//
// Why: see HostBlockMask.h.
#include "flashjit/Runtime/HostBlockMask.h"

#include <algorithm>

namespace flashjit {

void HostBlockMask::visits(int64_t b, int64_t h, int64_t qb,
                           int64_t keyBlocks, std::vector<int> &partial,
                           std::vector<int> &full) const {
  partial.assign(keyBlocks, 0);
  full.assign(keyBlocks, 0);
  const int64_t row =
      ((batch == 1 ? 0 : b) * heads + (heads == 1 ? 0 : h)) * queryBlocks +
      qb;
  auto walk = [&](const std::vector<int32_t> &counts,
                  const std::vector<int32_t> &indices,
                  std::vector<int> &out) {
    if (counts.empty())
      return;
    int64_t n = std::clamp<int64_t>(counts[row], 0, keyBlocks);
    for (int64_t i = 0; i < n; ++i) {
      int64_t kb = indices[row * indexColumns + i];
      if (kb >= 0 && kb < keyBlocks)
        ++out[kb];
    }
  };
  walk(kvNumBlocks, kvIndices, partial);
  walk(fullKvNumBlocks, fullKvIndices, full);
}

HostBlockMask HostBlockMask::random(const AttentionSpec &spec, int64_t batch,
                                    int64_t seqlenQ, int64_t seqlenK,
                                    double density, bool fullLists,
                                    bool shareBatch, bool shareHeads,
                                    std::mt19937_64 &rng) {
  HostBlockMask m;
  m.batch = shareBatch ? 1 : batch;
  m.heads = shareHeads ? 1 : spec.numHeads;
  m.queryBlocks = (seqlenQ + spec.sparseBlockM - 1) / spec.sparseBlockM;
  m.indexColumns = (seqlenK + spec.sparseBlockN - 1) / spec.sparseBlockN;
  const int64_t rows = m.batch * m.heads * m.queryBlocks;
  m.kvNumBlocks.assign(rows, 0);
  m.kvIndices.assign(rows * m.indexColumns, 0);
  if (fullLists) {
    m.fullKvNumBlocks.assign(rows, 0);
    m.fullKvIndices.assign(rows * m.indexColumns, 0);
  }
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int32_t> order(m.indexColumns);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < m.indexColumns; ++i)
      order[i] = static_cast<int32_t>(i);
    std::shuffle(order.begin(), order.end(), rng);
    for (int32_t kb : order) {
      if (u(rng) >= density)
        continue;
      bool full = fullLists && u(rng) < 0.5;
      auto &count = full ? m.fullKvNumBlocks[r] : m.kvNumBlocks[r];
      auto &indices = full ? m.fullKvIndices : m.kvIndices;
      indices[r * m.indexColumns + count++] = kb;
    }
  }
  return m;
}

double listedPairs(const AttentionSpec &spec, const HostBlockMask &mask,
                   int64_t batch, int64_t seqlenQ, int64_t seqlenK) {
  const int64_t keyBlocks =
      (seqlenK + spec.sparseBlockN - 1) / spec.sparseBlockN;
  const int64_t offset =
      spec.causalAlign == CausalAlign::BottomRight ? seqlenK - seqlenQ : 0;
  std::vector<int> partial, full;
  double pairs = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < spec.numHeads; ++h)
      for (int64_t qb = 0; qb < mask.queryBlocks; ++qb) {
        mask.visits(b, h, qb, keyBlocks, partial, full);
        for (int64_t i = qb * spec.sparseBlockM;
             i < std::min(seqlenQ, (qb + 1) * spec.sparseBlockM); ++i) {
          int64_t lo = 0, hi = seqlenK - 1;
          if (spec.hasLeftBound())
            lo = std::max<int64_t>(lo, i + offset - spec.windowLeft);
          if (spec.hasRightBound())
            hi = std::min<int64_t>(hi, i + offset + spec.rightExtent());
          for (int64_t kb = 0; kb < keyBlocks; ++kb) {
            int visitsOf = partial[kb] + full[kb];
            if (!visitsOf)
              continue;
            int64_t from = std::max(lo, kb * spec.sparseBlockN);
            int64_t to = std::min(hi, (kb + 1) * spec.sparseBlockN - 1);
            if (to >= from)
              pairs += double(visitsOf) * double(to - from + 1);
          }
        }
      }
  return pairs;
}

} // namespace flashjit
