//===- ModInterpreterTest.cpp - the host reference's integer edge cases ---===//
// Why: `flashjit run` and the GPU suite check kernels against mods that the
// host interprets from user text. Integer ops at the edges (a sum past
// INT64_MAX, INT64_MIN / -1, a shift by 64, an index from a NaN) must give
// a value or an error, never a trap or undefined behaviour (the sanitizer
// build runs this test under UBSan).
#include "flashjit/Compiler/ModInterpreter.h"
#include "flashjit/Dialect/AttentionSpec.h"

#include <doctest/doctest.h>

#include <string>
#include <utility>

using namespace flashjit;

namespace {

/// A score_mod that adds `body`'s i64 result %r (from %q and %kv as i64)
/// to the score.
std::string integerScoreMod(const std::string &body) {
  return "func.func @score_mod(%s: f32, %b: index, %h: index, %q: index, "
         "%kv: index) -> f32 {\n"
         "  %qi = arith.index_cast %q : index to i64\n"
         "  %kvi = arith.index_cast %kv : index to i64\n"
         "  %min = arith.constant -9223372036854775808 : i64\n"
         "  %max = arith.constant 9223372036854775807 : i64\n"
         "  %m1 = arith.constant -1 : i64\n" +
         body +
         "  %f = arith.sitofp %r : i64 to f32\n"
         "  %o = arith.addf %s, %f : f32\n"
         "  return %o : f32\n}\n";
}

/// The mod's score at score 0 and (q, kv), or the error's text.
std::string scoreOf(const std::string &body, int64_t q, int64_t kv) {
  AttentionSpec spec;
  spec.scoreMod = integerScoreMod(body);
  auto interpreter = ModInterpreter::create(spec);
  if (!interpreter)
    return "create: " + llvm::toString(interpreter.takeError());
  auto score = (*interpreter)->score(0.0, 0, 0, q, kv, {});
  if (!score)
    return llvm::toString(score.takeError());
  return std::to_string(*score);
}

} // namespace

TEST_CASE("mod interpreter: integer edges give a value or an error") {
  // Sums and products wrap as the GPU's integer units do.
  CHECK(scoreOf("  %r = arith.addi %max, %qi : i64\n", 1, 0) ==
        std::to_string(-9223372036854775808.0));
  CHECK(scoreOf("  %r = arith.muli %min, %m1 : i64\n", 0, 0) ==
        std::to_string(-9223372036854775808.0));
  CHECK(scoreOf("  %r = arith.subi %min, %qi : i64\n", 1, 0) ==
        std::to_string(9223372036854775807.0));
  // Shifts within 63 bits, an arithmetic right shift of a negative value.
  CHECK(scoreOf("  %r = arith.shrsi %m1, %qi : i64\n", 5, 0) ==
        std::to_string(-1.0));
  CHECK(scoreOf("  %n = arith.muli %qi, %m1 : i64\n"
                "  %r = arith.shrsi %n, %kvi : i64\n",
                9, 1) == std::to_string(-5.0));
  CHECK(scoreOf("  %r = arith.shli %qi, %kvi : i64\n", 3, 62) ==
        std::to_string(-4611686018427387904.0));
  // Undefined on the GPU too: an error that names the op.
  const std::pair<const char *, int64_t> undefined[] = {
      {"  %r = arith.divsi %min, %m1 : i64\n", 1},
      {"  %r = arith.remsi %min, %m1 : i64\n", 1},
      {"  %r = arith.divsi %qi, %kvi : i64\n", 0},
      {"  %r = arith.shli %qi, %kvi : i64\n", 64},
      {"  %r = arith.shrsi %qi, %kvi : i64\n", 64}};
  for (const auto &item : undefined) {
    std::string body = item.first;
    CAPTURE(body);
    std::string got = scoreOf(body, 3, item.second);
    CHECK(got.find("cannot evaluate 'arith.") == 0);
  }
  // An index from a NaN or a huge float is saturated before integer ops.
  CHECK(scoreOf("  %nan = arith.constant 0x7FC00000 : f32\n"
                "  %i = arith.fptosi %nan : f32 to i64\n"
                "  %r = arith.addi %i, %qi : i64\n",
                4, 0) == std::to_string(4.0));
  CHECK(scoreOf("  %huge = arith.constant 1.0e30 : f32\n"
                "  %i = arith.fptosi %huge : f32 to i64\n"
                "  %r = arith.addi %i, %qi : i64\n",
                0, 0) == std::to_string(9223372036854775807.0));
}
