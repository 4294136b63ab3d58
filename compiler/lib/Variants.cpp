//===- Variants.cpp - score_mod and mask_mod presets and builders ---------===//
// Why: see Variants.h. Each preset is a plain builder callback.
#include "flashjit/Compiler/Variants.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <random>

using namespace mlir;

namespace flashjit {

namespace {
/// Builds `func.func @name(fixed..., captures...) -> result` with `body`
/// and prints it.
llvm::Expected<std::string>
buildFunction(llvm::StringRef name, const std::vector<CapturedTensor> &captures,
              bool withScore,
              const std::function<Value(OpBuilder &, Location, ValueRange)>
                  &body) {
  MLIRContext ctx;
  ctx.loadDialect<func::FuncDialect, arith::ArithDialect, math::MathDialect,
                  tensor::TensorDialect>();
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
    diagnostics += diag.str() + "\n";
    return success();
  });
  OpBuilder b(&ctx);
  Location loc = UnknownLoc::get(&ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  SmallVector<Type> args;
  if (withScore)
    args.push_back(b.getF32Type());
  args.append(4, b.getIndexType());
  for (const CapturedTensor &c : captures) {
    SmallVector<int64_t> shape;
    for (int64_t d : c.shape)
      shape.push_back(d < 0 ? ShapedType::kDynamic : d);
    args.push_back(RankedTensorType::get(
        shape, c.dtype == CaptureDType::F32 ? Type(b.getF32Type())
                                            : Type(b.getI32Type())));
  }
  Type result = withScore ? Type(b.getF32Type()) : Type(b.getI1Type());
  auto fn = func::FuncOp::create(b, loc, name,
                                 b.getFunctionType(args, {result}));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  Value value = body(b, loc, entry->getArguments());
  if (!value || value.getType() != result)
    return llvm::createStringError(
        llvm::formatv("the {0} builder must return one {1} value", name,
                      withScore ? "f32" : "i1")
            .str());
  func::ReturnOp::create(b, loc, value);
  if (failed(verify(*module)))
    return llvm::createStringError(
        (name + " does not verify: " + diagnostics).str());
  std::string text;
  llvm::raw_string_ostream os(text);
  fn.print(os);
  return text;
}

/// A preset that adds mods must start from a spec without them: two
/// presets that each capture a tensor cannot be merged by text.
llvm::Error needsNoMods(const AttentionSpec &spec, llvm::StringRef preset) {
  if (spec.hasMods() || !spec.captures.empty())
    return llvm::createStringError(
        (preset + " needs a spec without mods or captures: to combine "
                  "variants, write one score_mod and one mask_mod with "
                  "buildScoreMod / buildMaskMod")
            .str());
  return llvm::Error::success();
}

Value indexToF32(OpBuilder &b, Location loc, Value index) {
  Value wide = arith::IndexCastOp::create(b, loc, b.getI64Type(), index);
  return arith::SIToFPOp::create(b, loc, b.getF32Type(), wide);
}
} // namespace

llvm::Expected<std::string>
buildScoreMod(const std::vector<CapturedTensor> &captures,
              const ScoreModBuilder &body) {
  return buildFunction("score_mod", captures, /*withScore=*/true,
                       [&](OpBuilder &b, Location loc, ValueRange a) {
                         ScoreModArgs args{a[0], a[1], a[2], a[3], a[4], {}};
                         args.captures.append(a.begin() + 5, a.end());
                         return body(b, loc, args);
                       });
}

llvm::Expected<std::string>
buildMaskMod(const std::vector<CapturedTensor> &captures,
             const MaskModBuilder &body) {
  return buildFunction("mask_mod", captures, /*withScore=*/false,
                       [&](OpBuilder &b, Location loc, ValueRange a) {
                         MaskModArgs args{a[0], a[1], a[2], a[3], {}};
                         args.captures.append(a.begin() + 4, a.end());
                         return body(b, loc, args);
                       });
}

namespace presets {

llvm::Error alibi(AttentionSpec &spec) {
  if (auto err = needsNoMods(spec, "alibi"))
    return err;
  std::vector<CapturedTensor> captures = {
      {"alibi_slopes", CaptureDType::F32, {spec.numHeads}}};
  auto text = buildScoreMod(captures, [](OpBuilder &b, Location loc,
                                         const ScoreModArgs &a) -> Value {
    Value slope =
        tensor::ExtractOp::create(b, loc, a.captures[0], ValueRange{a.h});
    Value distance = indexToF32(
        b, loc, arith::SubIOp::create(b, loc, a.kvIdx, a.qIdx));
    Value bias = arith::MulFOp::create(b, loc, slope, distance);
    return arith::AddFOp::create(b, loc, a.score, bias);
  });
  if (!text)
    return text.takeError();
  spec.scoreMod = std::move(*text);
  spec.captures = std::move(captures);
  return llvm::Error::success();
}

std::vector<float> alibiSlopes(int64_t numHeads) {
  // The paper's geometric sequence for the closest power of two, then
  // every other slope of the next power's sequence for the rest.
  auto powerOfTwoSlopes = [](int64_t n) {
    std::vector<float> s;
    double start = std::exp2(-8.0 / double(n));
    for (int64_t i = 0; i < n; ++i)
      s.push_back(float(std::pow(start, double(i + 1))));
    return s;
  };
  int64_t closest = 1;
  while (closest * 2 <= numHeads)
    closest *= 2;
  std::vector<float> slopes = powerOfTwoSlopes(closest);
  if (closest < numHeads) {
    std::vector<float> extra = powerOfTwoSlopes(2 * closest);
    for (int64_t i = 0; i < numHeads - closest; ++i)
      slopes.push_back(extra[2 * i]);
  }
  return slopes;
}

llvm::Error softcap(AttentionSpec &spec, double cap) {
  if (!(cap > 0) || !std::isfinite(cap))
    return llvm::createStringError(
        llvm::formatv("the soft-cap must be a positive finite number, got "
                      "{0}",
                      cap)
            .str());
  // It reads no captured tensor, so it joins a mask_mod's (a document
  // mask's ids) as trailing arguments it ignores.
  if (!spec.scoreMod.empty())
    return llvm::createStringError(
        "softcap needs a spec without a score_mod: to combine score mods, "
        "write one score_mod with buildScoreMod");
  auto text = buildScoreMod(spec.captures, [cap](OpBuilder &b, Location loc,
                                                 const ScoreModArgs &a)
                                               -> Value {
    Value capValue = arith::ConstantOp::create(
        b, loc, b.getF32FloatAttr(static_cast<float>(cap)));
    Value inverse = arith::ConstantOp::create(
        b, loc, b.getF32FloatAttr(static_cast<float>(1.0 / cap)));
    Value t = math::TanhOp::create(
        b, loc, arith::MulFOp::create(b, loc, a.score, inverse));
    return arith::MulFOp::create(b, loc, capValue, t);
  });
  if (!text)
    return text.takeError();
  spec.scoreMod = std::move(*text);
  return llvm::Error::success();
}

llvm::Error slidingWindow(AttentionSpec &spec, int64_t left, int64_t right) {
  if (left < -1 || right < -1)
    return llvm::createStringError(
        llvm::formatv("window ({0}, {1}): each extent is 0 or more keys, or "
                      "-1 for no limit",
                      left, right)
            .str());
  spec.windowLeft = left;
  spec.windowRight = right;
  return llvm::Error::success();
}

llvm::Error documentMask(AttentionSpec &spec) {
  if (auto err = needsNoMods(spec, "documentMask"))
    return err;
  std::vector<CapturedTensor> captures = {
      {"document_ids", CaptureDType::I32, {-1, -1}}};
  auto text = buildMaskMod(captures, [](OpBuilder &b, Location loc,
                                        const MaskModArgs &a) -> Value {
    Value ids = a.captures[0];
    Value queryDoc =
        tensor::ExtractOp::create(b, loc, ids, ValueRange{a.b, a.qIdx});
    Value keyDoc =
        tensor::ExtractOp::create(b, loc, ids, ValueRange{a.b, a.kvIdx});
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, queryDoc,
                                 keyDoc);
  });
  if (!text)
    return text.takeError();
  spec.maskMod = std::move(*text);
  spec.captures = std::move(captures);
  return llvm::Error::success();
}

llvm::Error prefixLM(AttentionSpec &spec) {
  if (auto err = needsNoMods(spec, "prefixLM"))
    return err;
  std::vector<CapturedTensor> captures = {
      {"prefix_lengths", CaptureDType::I32, {-1}}};
  auto text = buildMaskMod(captures, [](OpBuilder &b, Location loc,
                                        const MaskModArgs &a) -> Value {
    Value prefix =
        tensor::ExtractOp::create(b, loc, a.captures[0], ValueRange{a.b});
    Value key = arith::IndexCastOp::create(b, loc, b.getI32Type(), a.kvIdx);
    Value inPrefix =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, key, prefix);
    Value causal = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sle,
                                         a.kvIdx, a.qIdx);
    return arith::OrIOp::create(b, loc, inPrefix, causal);
  });
  if (!text)
    return text.takeError();
  spec.maskMod = std::move(*text);
  spec.captures = std::move(captures);
  return llvm::Error::success();
}

llvm::Expected<std::vector<HostCapture>>
sampleCaptures(const AttentionSpec &spec, int64_t batch, int64_t seqlenQ,
               int64_t seqlenK, int64_t documents, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<HostCapture> out;
  for (const CapturedTensor &c : spec.captures) {
    HostCapture h;
    if (c.name == "alibi_slopes") {
      h.shape = {spec.numHeads};
      for (float s : alibiSlopes(spec.numHeads))
        h.values.push_back(s);
    } else if (c.name == "document_ids") {
      if (seqlenQ != seqlenK)
        return llvm::createStringError(
            "document ids index one packed sequence for queries and keys: "
            "seqlen q and k must be equal");
      if (documents < 1)
        return llvm::createStringError("documents must be at least 1");
      // documents - 1 cuts at random places of each sequence.
      h.shape = {batch, seqlenQ};
      std::uniform_int_distribution<int64_t> cut(
          1, std::max<int64_t>(seqlenQ - 1, 1));
      for (int64_t b = 0; b < batch; ++b) {
        std::vector<int64_t> cuts;
        for (int64_t i = 0; i + 1 < documents; ++i)
          cuts.push_back(cut(rng));
        std::sort(cuts.begin(), cuts.end());
        for (int64_t s = 0; s < seqlenQ; ++s)
          h.values.push_back(double(
              std::upper_bound(cuts.begin(), cuts.end(), s) - cuts.begin()));
      }
    } else if (c.name == "prefix_lengths") {
      h.shape = {batch};
      std::uniform_int_distribution<int64_t> length(0, seqlenK);
      for (int64_t b = 0; b < batch; ++b)
        h.values.push_back(double(length(rng)));
    } else {
      return llvm::createStringError(
          "captured tensor '" + c.name +
          "' is not one a preset makes: give its data through the C++ or C "
          "API");
    }
    out.push_back(std::move(h));
  }
  return out;
}

} // namespace presets
} // namespace flashjit
