//===- HarnessTest.cpp - how many rows the GPU checks compare -------------===//
// Why: the GPU tests compare every row of a problem whose float64
// reference fits a budget, and sample beyond; the arithmetic that decides
// it, and the tolerances, need no GPU.
#include "flashjit/DevTools/Harness.h"

#include <doctest/doctest.h>

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
