//===- HarnessTest.cpp - how many rows the GPU checks compare -------------===//
// Why: the GPU tests compare every row of a problem whose float64
// reference fits a budget, and sample beyond; the arithmetic that decides
// it, the tolerances and the random inputs need no GPU.
#include "flashjit/DevTools/Harness.h"
#include "flashjit/DevTools/HostFloat.h"

#include <doctest/doctest.h>

#include <cmath>
#include <random>

using namespace flashjit;

TEST_CASE("every row within the reference budget, as many as fit beyond") {
  AttentionSpec spec;
  spec.headDim = 64;
  spec.numHeads = 32;
  spec.numKVHeads = 8;
  // 16 x 32 x 4096 rows of 128 keys: 3.4e10 multiply-adds.
  CHECK(rowsWithinBudget(spec, 16, 4096, 128, 4e10) == 4096);
  CHECK(rowsWithinBudget(spec, 16, 4096, 128, 3e10) < 4096);
  // Causal: a row sees its diagonal's keys only (top-left), so a square
  // problem costs about half.
  AttentionSpec causal = spec;
  causal.causal = true;
  CHECK(rowsWithinBudget(causal, 16, 4096, 4096, 6e11) == 4096);
  CHECK(rowsWithinBudget(spec, 16, 4096, 4096, 6e11) < 4096);
  // Beyond the budget: what fits, never fewer than the minimum.
  AttentionSpec one;
  one.headDim = 128;
  one.numHeads = one.numKVHeads = 1;
  const int64_t rows = rowsWithinBudget(one, 1, 131072, 131072, 4e10);
  CHECK(rows == int64_t(4e10 / (131072.0 * 2 * 128)));
  CHECK(rowsWithinBudget(one, 1, 131072, 131072, 1.0) == 48);
  CHECK(rowsWithinBudget(one, 1, 17, 17, 1.0) == 17);
}

TEST_CASE("tolerances: O by its dtype, the LSE as an f32 result") {
  CHECK(checkTolerance(DType::BF16) == 1e-2);
  CHECK(checkTolerance(DType::F16) == 2e-3);
  AttentionSpec spec;
  CHECK(checkLseTolerance(spec) == 1e-5);
  spec.scoreMod = "func.func @score(...)";
  CHECK(checkLseTolerance(spec) == 1e-3);
}

TEST_CASE("random inputs: the seed decides them, in either layout") {
  // Drawn in chunks on every core: the same seed must give the same
  // values, a different one different values, the device image must be
  // the host's in the layout asked, and the samples must be standard
  // normal ones.
  const int64_t B = 2, H = 3, S = 700, D = 64; // 4 chunks and a part
  auto draw = [&](uint64_t seed, Layout layout, std::vector<float> &host) {
    std::mt19937_64 rng(seed);
    return makeRandomInput(host, DType::BF16, layout, B, H, S, D, rng);
  };
  std::vector<float> a, b, c;
  std::vector<uint16_t> bhsd = draw(7, Layout::BHSD, a);
  std::vector<uint16_t> bshd = draw(7, Layout::BSHD, b);
  draw(8, Layout::BHSD, c);
  REQUIRE(a.size() == size_t(B * H * S * D));
  CHECK(a == b);
  CHECK(a != c);
  int64_t mismatches = 0;
  double sum = 0, sumSq = 0;
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t i = ((bi * H + h) * S + s) * D + d;
          mismatches += bhsd[i] != bshd[((bi * S + s) * H + h) * D + d];
          mismatches += bitsToFloat(DType::BF16, bhsd[i]) != a[i];
          sum += a[i];
          sumSq += double(a[i]) * a[i];
        }
  CHECK(mismatches == 0);
  const double n = double(a.size());
  CHECK(std::fabs(sum / n) < 0.01);
  CHECK(std::fabs(sumSq / n - 1.0) < 0.02);
}
