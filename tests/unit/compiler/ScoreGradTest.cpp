//===- ScoreGradTest.cpp - the derived score_grad against numbers ---------===//
// Why: the backward's dS factor is whatever attn-differentiate-score-mod
// derives; a wrong rule would be a silent gradient error. This derives the
// score_grad of the presets and of a score_mod through every rule, then
// evaluates it on the host (ModInterpreter) and compares its value with
// the score_mod's and its derivative with central differences of the
// score_mod, over scores of both signs and many indices.
#include "../../EveryRuleScoreMod.h"

#include "flashjit/Compiler/Description.h"
#include "flashjit/Compiler/ModInterpreter.h"
#include "flashjit/Compiler/Passes.h"
#include "flashjit/Compiler/Variants.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>

using namespace flashjit;

namespace {

struct Derived {
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  attn::AttentionOp op;
  std::string diagnostics;
  bool ok = false;

  explicit Derived(const AttentionSpec &spec) {
    mlir::DialectRegistry registry;
    registerCompilerDialects(registry);
    context.appendDialectRegistry(registry);
    context.loadAllAvailableDialects();
    mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
      diagnostics += d.str() + "\n";
      return mlir::success();
    });
    auto built = buildDescription(context, spec, std::nullopt);
    REQUIRE_MESSAGE(bool(built), llvm::toString(built.takeError()));
    module = std::move(*built);
    mlir::PassManager pm(&context);
    pm.addPass(createDifferentiateScoreMod());
    ok = mlir::succeeded(pm.run(*module));
    module->walk([&](attn::AttentionOp found) { op = found; });
  }
};

/// The derived value and derivative against the score_mod at `points`
/// scores x (b, h, q, kv) index sets.
void checkAgainstDifferences(
    const AttentionSpec &spec, const std::vector<HostCapture> &captures,
    const std::function<bool(double)> &nearKink = [](double s) {
      // The every-rule mod's clamp at -3 and 1, |s| and its select at 0.
      return std::fabs(s) < 1e-3 || std::fabs(s + 3) < 1e-3 ||
             std::fabs(s - 1) < 1e-3;
    }) {
  Derived derived(spec);
  REQUIRE_MESSAGE(derived.ok, derived.diagnostics);
  REQUIRE(!derived.op.getScoreGrad().empty());
  auto interpreter = ModInterpreter::create(spec);
  REQUIRE_MESSAGE(bool(interpreter), llvm::toString(interpreter.takeError()));
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> score(-12.0, 12.0);
  std::uniform_int_distribution<int64_t> index(0, 63);
  mlir::Block &block = derived.op.getScoreGrad().front();
  int checked = 0;
  for (int i = 0; i < 400; ++i) {
    const double s = score(rng);
    const int64_t b = index(rng) % 2, h = index(rng) % spec.numHeads,
                  q = index(rng), kv = index(rng);
    auto got = ModInterpreter::evaluateBlock(
        block, {s, double(b), double(h), double(q), double(kv)}, captures);
    REQUIRE_MESSAGE(bool(got), llvm::toString(got.takeError()));
    REQUIRE(got->size() == 2);
    auto at = [&](double x) {
      auto v = (*interpreter)->score(x, b, h, q, kv, captures);
      REQUIRE(bool(v));
      return *v;
    };
    // Away from kinks and jumps, where a difference quotient is no
    // derivative.
    const double step = 1e-5;
    if (nearKink(s))
      continue;
    const double difference = (at(s + step) - at(s - step)) / (2 * step);
    INFO("score " << s << " b " << b << " h " << h << " q " << q << " kv "
                  << kv);
    CHECK((*got)[0] == doctest::Approx(at(s)).epsilon(1e-12));
    CHECK((*got)[1] ==
          doctest::Approx(difference).epsilon(1e-6).scale(1.0));
    ++checked;
  }
  CHECK(checked > 300);
}

} // namespace

TEST_CASE("score_grad: soft-cap, ALiBi and every rule against differences") {
  AttentionSpec spec;
  spec.headDim = 64;
  spec.numHeads = 4;
  spec.numKVHeads = 2;
  SUBCASE("soft-cap") {
    REQUIRE(!presets::softcap(spec, 5.0));
    checkAgainstDifferences(spec, {});
  }
  SUBCASE("ALiBi (a captured slope per head)") {
    REQUIRE(!presets::alibi(spec));
    HostCapture slopes;
    slopes.shape = {spec.numHeads};
    for (float x : presets::alibiSlopes(spec.numHeads))
      slopes.values.push_back(x);
    checkAgainstDifferences(spec, {slopes});
  }
  SUBCASE("every rule") {
    spec.scoreMod = test::everyRuleScoreMod();
    checkAgainstDifferences(spec, {});
  }
  SUBCASE("floor and ceil: piecewise constant") {
    spec.scoreMod = "func.func @m(%s: f32, %b: index, %h: index, %q: index, "
                    "%k: index) -> f32 { %f = math.floor %s : f32\n"
                    "%c = math.ceil %s : f32\n %t = arith.mulf %f, %s : f32\n"
                    "%r = arith.addf %t, %c : f32\n return %r : f32 }";
    checkAgainstDifferences(spec, {}, [](double s) {
      return std::fabs(s - std::round(s)) < 1e-3;
    });
  }
}

TEST_CASE("score_grad: an op with no rule on the score is an error that "
          "names it") {
  AttentionSpec spec;
  spec.headDim = 64;
  spec.scoreMod = "func.func @m(%s: f32, %b: index, %h: index, %q: index, "
                  "%k: index) -> f32 { %c = arith.constant 3.0 : f32\n"
                  "%r = arith.remf %s, %c : f32\n return %r : f32 }";
  Derived derived(spec);
  CHECK(!derived.ok);
  CHECK(derived.diagnostics.find("'arith.remf' op computes on the score "
                                 "with no derivative rule") !=
        std::string::npos);
  CHECK(derived.op.getScoreGrad().empty());
}
