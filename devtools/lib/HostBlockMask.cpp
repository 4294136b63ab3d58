//===- HostBlockMask.cpp - a block mask on the host -----------------------===//
// Why: see HostBlockMask.h.
#include "flashjit/DevTools/HostBlockMask.h"

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

HostBlockMask HostBlockMask::transposed(int64_t keyBlocks) const {
  HostBlockMask t;
  t.batch = batch;
  t.heads = heads;
  t.queryBlocks = keyBlocks;
  // visits[which][(b, h, kb)]: the query blocks, with repeats.
  std::vector<std::vector<int32_t>> lists[2];
  for (auto &l : lists)
    l.resize(batch * heads * keyBlocks);
  std::vector<int> partial, full;
  int64_t longest = queryBlocks;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t qb = 0; qb < queryBlocks; ++qb) {
        visits(b, h, qb, keyBlocks, partial, full);
        for (int64_t kb = 0; kb < keyBlocks; ++kb) {
          const int64_t row = (b * heads + h) * keyBlocks + kb;
          for (int which = 0; which < 2; ++which)
            for (int n = 0; n < (which ? full : partial)[kb]; ++n) {
              lists[which][row].push_back(static_cast<int32_t>(qb));
              longest = std::max<int64_t>(longest, lists[which][row].size());
            }
        }
      }
  t.indexColumns = longest;
  auto flatten = [&](const std::vector<std::vector<int32_t>> &rows,
                     std::vector<int32_t> &counts,
                     std::vector<int32_t> &indices) {
    counts.clear();
    indices.assign(rows.size() * t.indexColumns, -1);
    for (size_t r = 0; r < rows.size(); ++r) {
      counts.push_back(static_cast<int32_t>(rows[r].size()));
      std::copy(rows[r].begin(), rows[r].end(),
                indices.begin() + r * t.indexColumns);
    }
  };
  flatten(lists[0], t.kvNumBlocks, t.kvIndices);
  if (hasFullLists())
    flatten(lists[1], t.fullKvNumBlocks, t.fullKvIndices);
  return t;
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

llvm::Expected<HostBlockMask>
HostBlockMask::fromMask(const AttentionSpec &spec,
                        llvm::ArrayRef<HostCapture> captures, int64_t batch,
                        int64_t heads, int64_t seqlenQ, int64_t seqlenK,
                        bool fullLists) {
  std::unique_ptr<ModInterpreter> mods;
  if (!spec.maskMod.empty()) {
    auto created = ModInterpreter::create(spec);
    if (!created)
      return created.takeError();
    mods = std::move(*created);
  }
  const int64_t blockM = spec.sparseBlockM, blockN = spec.sparseBlockN;
  HostBlockMask m;
  m.batch = batch;
  m.heads = heads;
  m.queryBlocks = (seqlenQ + blockM - 1) / blockM;
  m.indexColumns = (seqlenK + blockN - 1) / blockN;
  const int64_t rows = batch * heads * m.queryBlocks;
  m.kvNumBlocks.assign(rows, 0);
  m.kvIndices.assign(rows * m.indexColumns, -1);
  if (fullLists) {
    m.fullKvNumBlocks.assign(rows, 0);
    m.fullKvIndices.assign(rows * m.indexColumns, -1);
  }
  const int64_t offset =
      spec.causalAlign == CausalAlign::BottomRight ? seqlenK - seqlenQ : 0;
  // The pair (q, k) is kept: inside both sequences, the causal mask and
  // window, and the mask_mod.
  auto kept = [&](int64_t b, int64_t h, int64_t q,
                  int64_t k) -> llvm::Expected<bool> {
    if (q >= seqlenQ || k >= seqlenK)
      return false;
    if (spec.hasRightBound() && k > q + offset + spec.rightExtent())
      return false;
    if (spec.hasLeftBound() && k < q + offset - spec.windowLeft)
      return false;
    if (!mods)
      return true;
    return mods->keep(b, h, q, k, captures);
  };
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t qb = 0; qb < m.queryBlocks; ++qb) {
        const int64_t row = (b * heads + h) * m.queryBlocks + qb;
        for (int64_t kb = 0; kb < m.indexColumns; ++kb) {
          bool some = false, every = true;
          for (int64_t i = 0; i < blockM && (every || !some); ++i)
            for (int64_t j = 0; j < blockN && (every || !some); ++j) {
              auto keep = kept(b, h, qb * blockM + i, kb * blockN + j);
              if (!keep)
                return keep.takeError();
              some |= *keep;
              every &= *keep;
            }
          if (every && fullLists)
            m.fullKvIndices[row * m.indexColumns + m.fullKvNumBlocks[row]++] =
                static_cast<int32_t>(kb);
          else if (some)
            m.kvIndices[row * m.indexColumns + m.kvNumBlocks[row]++] =
                static_cast<int32_t>(kb);
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
