//===- BackwardReference.cpp - exact attention gradients in float64 -------===//
// Why: see BackwardReference.h. Per query row i (scores s_j = scale q_i.k_j
// over the keys it sees): P = softmax(s), dP_j = dO_i . v_j,
// D = sum_j P_j dP_j, dS_j = P_j (dP_j - D); then dq_i = scale sum_j dS_j
// k_j, dk_j += scale dS_j q_i, dv_j += P_j dO_i. With a score_mod, P is
// the softmax of y_j = score_mod(s_j) and dS_j takes the factor dy_j/ds_j;
// a mask_mod drops keys as the causal mask does. Rows are split among
// threads, each with its own dk and dv sums, added in thread order.
#include "flashjit/DevTools/BackwardReference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <thread>

namespace flashjit {

ReferenceGradients referenceGradients(const HostBackwardProblem &p,
                                      int64_t batch, int64_t kvHead,
                                      unsigned threads) {
  const AttentionSpec &spec = p.spec;
  const int64_t D = spec.headDim, Sq = p.seqlenQ, Sk = p.seqlenK;
  const int64_t group = spec.groupSize();
  const int64_t offset =
      spec.causalAlign == CausalAlign::BottomRight ? Sk - Sq : 0;
  ReferenceGradients out;
  out.dq.assign(group * Sq * D, 0.0);
  out.dk.assign(Sk * D, 0.0);
  out.dv.assign(Sk * D, 0.0);
  out.dqMagnitude.assign(group * Sq * D, 0.0);
  out.dkMagnitude.assign(Sk * D, 0.0);
  out.dvMagnitude.assign(Sk * D, 0.0);
  // No query rows or no keys (an empty sequence of a packed batch): every
  // gradient is zero.
  const int64_t rows = group * Sq;
  if (rows == 0 || Sk == 0)
    return out;
  const float *k = &p.k[((batch * spec.numKVHeads + kvHead) * Sk) * D];
  const float *v = &p.v[((batch * spec.numKVHeads + kvHead) * Sk) * D];

  if (threads == 0)
    threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<int64_t>(threads, rows));
  std::vector<std::vector<double>> dkParts(threads), dvParts(threads),
      dkMagParts(threads), dvMagParts(threads);
  std::atomic<int64_t> next{0};
  constexpr int64_t kRowsPerTask = 16;
  std::mutex errorLock;
  // The mods of one score (b, h, i, j): whether the mask_mod keeps it
  // (asked only where `masked`), its modified value and the derivative;
  // false when a mod fails (error set).
  auto modded = [&](double x, int64_t head, int64_t i, int64_t j, bool masked,
                    bool &keep, double &y, double &grad) {
    keep = true;
    y = x;
    grad = 1.0;
    if (!p.mods)
      return true;
    auto fail = [&](llvm::Error err) {
      std::lock_guard<std::mutex> guard(errorLock);
      if (out.error.empty())
        out.error = llvm::toString(std::move(err));
      else
        llvm::consumeError(std::move(err));
      return false;
    };
    if (masked) {
      auto kept = p.mods->keep(batch, head, i, j, p.captures);
      if (!kept)
        return fail(kept.takeError());
      keep = *kept;
    }
    if (!p.mods->hasScoreMod())
      return true;
    const double h = 1e-4 * std::max(1.0, std::fabs(x));
    auto at = [&](double s) { return p.mods->score(s, batch, head, i, j,
                                                   p.captures); };
    auto value = at(x), above = at(x + h), below = at(x - h);
    for (auto *e : {&value, &above, &below})
      if (!*e)
        return fail(e->takeError());
    y = *value;
    grad = (*above - *below) / (2 * h);
    return true;
  };

  auto work = [&](unsigned t) {
    std::vector<double> &dk = dkParts[t], &dv = dvParts[t];
    std::vector<double> &dkMag = dkMagParts[t], &dvMag = dvMagParts[t];
    dk.assign(Sk * D, 0.0);
    dv.assign(Sk * D, 0.0);
    dkMag.assign(Sk * D, 0.0);
    dvMag.assign(Sk * D, 0.0);
    std::vector<double> s(Sk), dp(Sk), grad(Sk), qi(D), doi(D), dqi(D),
        dqiMag(D);
    std::vector<int> partial, full; // block-sparse visits of a row's block
    for (;;) {
      const int64_t first = next.fetch_add(kRowsPerTask);
      if (first >= rows)
        break;
      for (int64_t r = first; r < std::min(rows, first + kRowsPerTask); ++r) {
        const int64_t g = r / Sq, i = r % Sq;
        const int64_t head = kvHead * group + g;
        const float *q = &p.q[((batch * spec.numHeads + head) * Sq + i) * D];
        const float *dO =
            &p.dO[((batch * spec.numHeads + head) * Sq + i) * D];
        for (int64_t c = 0; c < D; ++c) {
          qi[c] = q[c];
          doi[c] = dO[c];
        }
        // Keys [begin, end) are visible (causal mask and window).
        int64_t begin = 0, end = Sk;
        if (spec.hasRightBound())
          end = std::clamp<int64_t>(i + offset + spec.rightExtent() + 1, 0,
                                    Sk);
        if (spec.hasLeftBound())
          begin = std::clamp<int64_t>(i + offset - spec.windowLeft, 0, Sk);
        if (end <= begin)
          continue;
        // Block-sparse: each key counts as often as its block is listed
        // (partial visits only where the mask_mod keeps it); the weight
        // joins the score as ln(weight).
        if (p.blockMask)
          p.blockMask->visits(batch, head, i / spec.sparseBlockM,
                              (Sk + spec.sparseBlockN - 1) /
                                  spec.sparseBlockN,
                              partial, full);
        double max = -INFINITY;
        for (int64_t j = begin; j < end; ++j) {
          int partialVisits = 1, fullVisits = 0;
          if (p.blockMask) {
            partialVisits = partial[j / spec.sparseBlockN];
            fullVisits = full[j / spec.sparseBlockN];
          }
          if (partialVisits + fullVisits == 0) {
            s[j] = -INFINITY;
            continue;
          }
          double dot = 0;
          for (int64_t c = 0; c < D; ++c)
            dot += qi[c] * k[j * D + c];
          bool keep = true;
          if (!modded(p.scale * dot, head, i, j, partialVisits > 0, keep,
                      s[j], grad[j]))
            return;
          const int weight = (keep ? partialVisits : 0) + fullVisits;
          s[j] = weight == 0 ? -INFINITY : s[j] + std::log(double(weight));
          max = std::max(max, s[j]);
        }
        if (max == -INFINITY)
          continue; // no key kept: dq = 0, nothing reaches dk or dv
        double sum = 0;
        for (int64_t j = begin; j < end; ++j) {
          s[j] = std::exp(s[j] - max);
          sum += s[j];
        }
        double rowD = 0;
        for (int64_t j = begin; j < end; ++j) {
          s[j] /= sum; // P
          double dot = 0;
          for (int64_t c = 0; c < D; ++c)
            dot += doi[c] * v[j * D + c];
          dp[j] = dot;
          rowD += s[j] * dot;
        }
        std::fill(dqi.begin(), dqi.end(), 0.0);
        std::fill(dqiMag.begin(), dqiMag.end(), 0.0);
        for (int64_t j = begin; j < end; ++j) {
          if (s[j] == 0.0)
            continue; // masked (or underflowed): no term
          const double ds = s[j] * (dp[j] - rowD) * grad[j];
          const double dsScaled = p.scale * ds;
          const double dsMag = p.scale * s[j] *
                               (std::fabs(dp[j]) + std::fabs(rowD)) *
                               std::fabs(grad[j]);
          for (int64_t c = 0; c < D; ++c) {
            const double kc = k[j * D + c];
            dqi[c] += dsScaled * kc;
            dqiMag[c] += dsMag * std::fabs(kc);
            dk[j * D + c] += dsScaled * qi[c];
            dkMag[j * D + c] += dsMag * std::fabs(qi[c]);
            dv[j * D + c] += s[j] * doi[c];
            dvMag[j * D + c] += s[j] * std::fabs(doi[c]);
          }
        }
        std::copy(dqi.begin(), dqi.end(), &out.dq[(g * Sq + i) * D]);
        std::copy(dqiMag.begin(), dqiMag.end(),
                  &out.dqMagnitude[(g * Sq + i) * D]);
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t)
    pool.emplace_back(work, t);
  work(0);
  for (std::thread &th : pool)
    th.join();
  for (unsigned t = 0; t < threads; ++t)
    for (int64_t e = 0; e < Sk * D; ++e) {
      out.dk[e] += dkParts[t][e];
      out.dv[e] += dvParts[t][e];
      out.dkMagnitude[e] += dkMagParts[t][e];
      out.dvMagnitude[e] += dvMagParts[t][e];
    }
  return out;
}

} // namespace flashjit
