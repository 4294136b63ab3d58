//===- FixedReferenceTest.cpp - bounded score_mods skip the row max -------===//
// Why: a score_mod whose scores lie in an interval known at compile time
// lets the forward kernels take P against the interval's middle, with no
// row max, no vote on the softmax bound and no rescale of O
// (FragmentSoftmax::fixReference). The choice rests on an interval
// analysis of the region (ScoreModRange.cpp) and on the interval being
// narrow enough for the element type; this test states which mods get it.
// The kernels' exactness is the GPU suite's (VariantsGpuTest.cpp).
#include "flashjit/Compiler/Compiler.h"
#include "flashjit/Compiler/Variants.h"
#include "flashjit/FlashJIT.h"

#include "llvm/ADT/StringRef.h"

#include <doctest/doctest.h>

#include <string>

using namespace flashjit;

namespace {
/// A score_mod of `body`, which reads %s (the score) and %kv and defines
/// %r.
std::string scoreMod(const std::string &body) {
  return "func.func @score_mod(%s: f32, %b: index, %h: index, %q: index, "
         "%kv: index) -> f32 {\n" +
         body + "  return %r : f32\n}\n";
}

/// The forward kernel of `spec` at head dim `headDim` for `chip`, as PTX.
std::string forwardPtx(AttentionSpec spec, int64_t headDim, const char *chip) {
  spec.headDim = headDim;
  spec.numHeads = 4;
  spec.numKVHeads = 2;
  CompileOptions o;
  o.target = llvm::cantFail(Target::parse(chip));
  auto kernel = compileAttention(spec, o);
  REQUIRE_MESSAGE(bool(kernel), llvm::toString(kernel.takeError()));
  return kernel->text;
}

/// Whether the forward kernel of `spec` for `chip` takes P against a fixed
/// reference: a kernel with a running max votes (vote.sync) on whether
/// to rescale O, or on whether a tile outgrew the softmax bound.
bool fixesReference(const AttentionSpec &spec, const char *chip) {
  return forwardPtx(spec, 128, chip).find("vote.sync") == std::string::npos;
}

const char *const kSigmoid = "  %one = arith.constant 1.0 : f32\n"
                             "  %n = arith.negf %s : f32\n"
                             "  %e = math.exp %n : f32\n"
                             "  %d = arith.addf %one, %e : f32\n"
                             "  %g = arith.divf %one, %d : f32\n"
                             "  %c = arith.constant 20.0 : f32\n"
                             "  %r = arith.mulf %c, %g : f32\n";
const char *const kClamp = "  %lo = arith.constant -40.0 : f32\n"
                           "  %hi = arith.constant 40.0 : f32\n"
                           "  %m = arith.maximumf %s, %lo : f32\n"
                           "  %r = arith.minimumf %m, %hi : f32\n";
const char *const kTanhPlusKey = "  %t = math.tanh %s : f32\n"
                                 "  %i = arith.index_cast %kv : index to i32\n"
                                 "  %f = arith.sitofp %i : i32 to f32\n"
                                 "  %r = arith.addf %t, %f : f32\n";
const char *const kSelect = "  %t = math.tanh %s : f32\n"
                            "  %z = arith.constant 0.0 : f32\n"
                            "  %p = arith.cmpf ogt, %s, %z : f32\n"
                            "  %five = arith.constant 5.0 : f32\n"
                            "  %r = arith.select %p, %t, %five : f32\n";
const char *const kScaled = "  %c = arith.constant 2.0 : f32\n"
                            "  %r = arith.mulf %s, %c : f32\n";
} // namespace

TEST_CASE("score_mods that bound the scores take P against a fixed "
          "reference") {
  struct Case {
    const char *what;
    double softcap; // 0: `body`
    const char *body;
    DType dtype;
    bool fixed;
  };
  const Case cases[] = {
      // cap * tanh: P within 2^(+-cap log2 e), at most 2^64 (bf16) or
      // 2^14 (f16).
      {"soft-cap 30, bf16", 30, nullptr, DType::BF16, true},
      {"soft-cap 44, bf16", 44, nullptr, DType::BF16, true},
      {"soft-cap 50, bf16", 50, nullptr, DType::BF16, false},
      {"soft-cap 30, f16", 30, nullptr, DType::F16, false},
      {"soft-cap 8, f16", 8, nullptr, DType::F16, true},
      {"20 sigmoid", 0, kSigmoid, DType::BF16, true},
      {"clamp to [-40, 40]", 0, kClamp, DType::BF16, true},
      {"a tanh or a constant", 0, kSelect, DType::F16, true},
      {"tanh plus the key index", 0, kTanhPlusKey, DType::BF16, false},
      {"twice the score", 0, kScaled, DType::BF16, false},
  };
  for (const Case &c : cases)
    for (const char *chip : {"sm_90a", "sm_80"}) {
      AttentionSpec spec;
      spec.dtype = c.dtype;
      if (c.softcap > 0) {
        llvm::Error err = presets::softcap(spec, c.softcap);
        REQUIRE_MESSAGE(!err, llvm::toString(std::move(err)));
      } else {
        spec.scoreMod = scoreMod(c.body);
      }
      INFO(c.what << " on " << chip);
      CHECK(fixesReference(spec, chip) == c.fixed);
    }
  // ALiBi's bias grows along the row: a running max.
  AttentionSpec alibi;
  REQUIRE(!presets::alibi(alibi));
  CHECK_FALSE(fixesReference(alibi, "sm_90a"));
}

namespace {
/// Whether a kernel computes part of P's exp2 on the FMA units: the
/// polynomial's leading coefficient, 0x1.3a02ccp-7 (Exp2Polynomial.cpp),
/// appears in its PTX as 0f3C1D0166.
bool sharesExp2(const std::string &ptx) {
  return ptx.find("0f3C1D0166") != std::string::npos;
}
} // namespace

TEST_CASE("with a fixed reference, soft-cap's cap joins P's exponent, and "
          "at head dim 64 on Hopper part of P's exp2 runs on the FMA "
          "units") {
  AttentionSpec softcap30, softcap50, clamp;
  REQUIRE(!presets::softcap(softcap30, 30));
  REQUIRE(!presets::softcap(softcap50, 50));
  clamp.scoreMod = scoreMod(kClamp);
  // One multiply a score: the score into tanh's argument (scale / cap);
  // the cap itself is folded into the exponent's multiply-add. A running
  // max (soft-cap 50) needs the scores formed: more.
  for (const char *chip : {"sm_90a", "sm_80"}) {
    INFO(chip);
    const std::string foldedPtx = forwardPtx(softcap30, 128, chip);
    const std::string formedPtx = forwardPtx(softcap50, 128, chip);
    const llvm::StringRef folded = foldedPtx, formed = formedPtx;
    const size_t tanhs = folded.count("tanh.approx.f32");
    REQUIRE(tanhs > 0);
    CHECK(folded.count("mul.f32") <= tanhs + 2);
    CHECK(formed.count("mul.f32") > formed.count("tanh.approx.f32") + 2);
  }
  AttentionSpec causal = softcap30;
  causal.causal = true;
  CHECK(sharesExp2(forwardPtx(softcap30, 64, "sm_90a")));
  CHECK(sharesExp2(forwardPtx(causal, 64, "sm_90a")));
  // At head dim 128 the extra instructions cost more than the special-
  // function unit gives back (docs/performance.md).
  CHECK_FALSE(sharesExp2(forwardPtx(softcap30, 128, "sm_90a")));
  // A running max can put P's exponent past the polynomial's range.
  CHECK_FALSE(sharesExp2(forwardPtx(softcap50, 64, "sm_90a")));
  // A clamp costs the special-function unit nothing.
  CHECK_FALSE(sharesExp2(forwardPtx(clamp, 64, "sm_90a")));
  // mma_sync (Ampere) and the dense kernels: ex2 alone.
  CHECK_FALSE(sharesExp2(forwardPtx(softcap30, 64, "sm_80")));
  CHECK_FALSE(sharesExp2(forwardPtx(AttentionSpec{}, 64, "sm_90a")));
}
