//===- DecodeReference.cpp - exact decode attention in float64 ------------===//
// Why: see DecodeReference.h.
#include "flashjit/DevTools/DecodeReference.h"
#include "flashjit/DevTools/HostFloat.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>

namespace flashjit {

namespace {
/// Element offset of key `key` of `kvHead` of sequence `batch` in K or V.
int64_t keyOffset(const HostDecodeProblem &p, int64_t batch, int64_t kvHead,
                  int64_t key) {
  const DecodeSpec &s = p.spec;
  int64_t row;
  if (s.paged()) {
    int64_t page = p.blockTable[batch * p.maxPages + key / s.pageSize];
    row = page * s.pageSize + key % s.pageSize;
  } else if (p.headMajor) {
    return ((batch * s.numKVHeads + kvHead) * p.capacity + key) * s.headDim;
  } else {
    row = batch * p.capacity + key;
  }
  return (row * s.numKVHeads + kvHead) * s.headDim;
}
} // namespace

DecodeReferenceRow decodeReferenceRow(const HostDecodeProblem &p, int64_t batch,
                                      int64_t head, int64_t token) {
  const DecodeSpec &s = p.spec;
  const int64_t d = s.headDim;
  const int64_t kvHead = head / s.groupSize();
  int64_t kvLen = std::clamp<int64_t>(p.kvLens[batch], 0, p.capacity);
  int64_t end = kvLen;
  if (s.causal)
    end = std::min(end, kvLen - s.qLen + token + 1);
  DecodeReferenceRow r;
  r.out.assign(d, 0.0);
  if (end <= 0) {
    r.lse = -std::numeric_limits<double>::infinity();
    return r;
  }
  std::vector<double> q(d);
  const uint16_t *qRow =
      &p.q[((batch * s.qLen + token) * s.numHeads + head) * d];
  for (int64_t c = 0; c < d; ++c)
    q[c] = bitsToFloat(s.dtype, qRow[c]);
  std::vector<double> scores(end);
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < end; ++j) {
    const uint16_t *kRow = &p.k[keyOffset(p, batch, kvHead, j)];
    double dot = 0;
    for (int64_t c = 0; c < d; ++c)
      dot += q[c] * bitsToFloat(s.dtype, kRow[c]);
    scores[j] = dot * p.scale;
    max = std::max(max, scores[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < end; ++j) {
    double w = std::exp(scores[j] - max);
    sum += w;
    const uint16_t *vRow = &p.v[keyOffset(p, batch, kvHead, j)];
    for (int64_t c = 0; c < d; ++c)
      r.out[c] += w * bitsToFloat(s.dtype, vRow[c]);
  }
  for (double &x : r.out)
    x /= sum;
  r.lse = max + std::log(sum);
  return r;
}

std::vector<DecodeReferenceRow>
decodeReference(const HostDecodeProblem &p, const std::vector<int64_t> &rows,
                unsigned threads) {
  const int64_t count = rows.size();
  std::vector<DecodeReferenceRow> out(count);
  std::atomic<int64_t> next{0};
  auto work = [&]() {
    for (int64_t i = next++; i < count; i = next++) {
      int64_t row = rows[i];
      int64_t token = row % p.spec.qLen;
      int64_t head = (row / p.spec.qLen) % p.spec.numHeads;
      int64_t batch = row / (p.spec.qLen * p.spec.numHeads);
      out[i] = decodeReferenceRow(p, batch, head, token);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < std::max(threads, 1u); ++t)
    pool.emplace_back(work);
  work();
  for (std::thread &t : pool)
    t.join();
  return out;
}

} // namespace flashjit
