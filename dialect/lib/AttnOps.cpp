//===- AttnOps.cpp - verifiers of the attn ops ----------------------------===//
// Why: every shape rule of attention is checked here once, with a message
// that names the operand and the sizes that disagree.
#include "flashjit/Dialect/AttnDialect.h"

#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;
using namespace flashjit::attn;

#define GET_OP_CLASSES
#include "flashjit/Dialect/AttnOps.cpp.inc"

namespace {
enum Dim { kBatch = 0, kHeads = 1, kSeq = 2, kHeadDim = 3 };

/// Two sizes agree when either is dynamic or both are equal.
bool compatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

std::string dimText(int64_t d) {
  return ShapedType::isDynamic(d) ? "?" : std::to_string(d);
}
} // namespace

int64_t AttentionOp::getHeadDim() {
  return getQuery().getType().getShape()[kHeadDim];
}
int64_t AttentionOp::getNumHeads() {
  return getQuery().getType().getShape()[kHeads];
}
int64_t AttentionOp::getNumKVHeads() {
  return getKey().getType().getShape()[kHeads];
}
Type AttentionOp::getElementType() {
  return getQuery().getType().getElementType();
}

flashjit::AttentionSpec AttentionOp::getSpec() {
  flashjit::AttentionSpec spec;
  spec.headDim = getHeadDim();
  spec.dtype = getElementType().isBF16() ? flashjit::DType::BF16
                                         : flashjit::DType::F16;
  spec.causal = getCausal();
  spec.numHeads = getNumHeads();
  spec.numKVHeads = getNumKVHeads();
  spec.causalAlign = getBottomRight() ? flashjit::CausalAlign::BottomRight
                                      : flashjit::CausalAlign::TopLeft;
  spec.varlen = getVarlen();
  if (auto page = getPageSizeAttr())
    spec.pageSize = page.getInt();
  if (auto left = getWindowLeftAttr())
    spec.windowLeft = left.getInt();
  if (auto right = getWindowRightAttr())
    spec.windowRight = right.getInt();
  if (auto block = getSparseBlockAttr(); block && block.size() == 2) {
    spec.sparseBlockM = block[0];
    spec.sparseBlockN = block[1];
  }
  for (auto [i, value] : llvm::enumerate(getCaptures())) {
    auto type = cast<RankedTensorType>(value.getType());
    flashjit::CapturedTensor c;
    c.name = "capture" + std::to_string(i);
    c.dtype = type.getElementType().isF32() ? flashjit::CaptureDType::F32
                                            : flashjit::CaptureDType::I32;
    for (int64_t d : type.getShape())
      c.shape.push_back(ShapedType::isDynamic(d) ? -1 : d);
    spec.captures.push_back(c);
  }
  // The regions' printed text names them in the spec (canonical text,
  // kernel name, and the checks that ask whether there are mods).
  auto printed = [](Region &region) {
    std::string text;
    if (!region.empty()) {
      llvm::raw_string_ostream os(text);
      region.front().print(os);
    }
    return text;
  };
  spec.scoreMod = printed(getScoreMod());
  spec.maskMod = printed(getMaskMod());
  return spec;
}

LogicalResult AttentionOp::verify() {
  RankedTensorType types[] = {getQuery().getType(), getKey().getType(),
                              getValue().getType()};
  const char *names[] = {"query", "key", "value"};
  for (int i = 0; i < 3; ++i) {
    if (types[i].getRank() != 4)
      return emitOpError() << names[i]
                           << " must have rank 4 [batch, heads, seqlen, "
                              "head_dim], got rank "
                           << types[i].getRank();
    Type elt = types[i].getElementType();
    if (!elt.isF16() && !elt.isBF16())
      return emitOpError() << names[i] << " element type must be f16 or bf16, got "
                           << elt;
    if (elt != types[0].getElementType())
      return emitOpError() << names[i] << " element type " << elt
                           << " differs from the query's "
                           << types[0].getElementType();
    ArrayRef<int64_t> shape = types[i].getShape();
    if (ShapedType::isDynamic(shape[kHeads]) ||
        ShapedType::isDynamic(shape[kHeadDim]))
      return emitOpError() << names[i]
                           << " heads and head_dim must be static";
  }
  ArrayRef<int64_t> q = types[0].getShape(), k = types[1].getShape(),
                    v = types[2].getShape();
  if (k[kHeadDim] != q[kHeadDim] || v[kHeadDim] != q[kHeadDim])
    return emitOpError() << "head_dim of query (" << q[kHeadDim] << "), key ("
                         << k[kHeadDim] << ") and value (" << v[kHeadDim]
                         << ") must be equal";
  if (!compatible(q[kBatch], k[kBatch]) || !compatible(q[kBatch], v[kBatch]) ||
      !compatible(k[kBatch], v[kBatch]))
    return emitOpError() << "batch of query (" << dimText(q[kBatch])
                         << "), key (" << dimText(k[kBatch]) << ") and value ("
                         << dimText(v[kBatch]) << ") must agree";
  if (k[kHeads] != v[kHeads])
    return emitOpError() << "key has " << k[kHeads] << " heads but value has "
                         << v[kHeads];
  if (!compatible(k[kSeq], v[kSeq]))
    return emitOpError() << "key seqlen " << dimText(k[kSeq])
                         << " differs from value seqlen " << dimText(v[kSeq]);
  if (q[kHeads] % k[kHeads] != 0)
    return emitOpError() << "query heads (" << q[kHeads]
                         << ") must be a multiple of key/value heads ("
                         << k[kHeads] << ")";

  RankedTensorType out = getOutput().getType();
  if (out.getElementType() != types[0].getElementType() ||
      out.getRank() != 4 || failed(verifyCompatibleShape(out.getShape(), q)))
    return emitOpError() << "output type " << out
                         << " must match the query type " << types[0];
  for (auto [i, value] : llvm::enumerate(getCaptures())) {
    auto type = cast<RankedTensorType>(value.getType());
    if (type.getRank() < 1 || type.getRank() > 4 ||
        !(type.getElementType().isF32() ||
          type.getElementType().isSignlessInteger(32)))
      return emitOpError() << "captured tensor #" << i << " has type " << type
                           << ": expected an f32 or i32 tensor of rank 1 to 4";
  }
  if (!getCaptures().empty() && getScoreMod().empty() && getMaskMod().empty())
    return emitOpError()
           << "has captured tensors but no score_mod or mask_mod reads them";
  // The extents as signed numbers (I64Attr's getters are unsigned).
  for (auto [name, extent] :
       {std::pair{"window_left", getWindowLeftAttr()},
        std::pair{"window_right", getWindowRightAttr()}})
    if (extent && extent.getInt() < 0)
      return emitOpError() << name << " is " << extent.getInt()
                           << ": a window extent is 0 or more keys (leave "
                              "the attribute out for no limit)";
  if (auto block = getSparseBlockAttr()) {
    auto valid = [](int64_t n) { return n >= 16 && n <= 4096 && n % 16 == 0; };
    if (block.size() != 2 || !valid(block[0]) || !valid(block[1]))
      return emitOpError() << "sparse_block is " << block
                           << ": expected [block_m, block_n], each a multiple "
                              "of 16 from 16 to 4096";
  }
  if (auto page = getPageSizeAttr()) {
    const int64_t p = page.getInt();
    if (!flashjit::AttentionSpec::validPageSize(p))
      return emitOpError() << "page_size is " << p
                           << ": expected a power of two from 16 to 256";
    if (!getVarlen())
      return emitOpError() << "page_size is for varlen attention (paged K/V "
                              "of packed sequences): add varlen";
  }
  if (getBottomRight() && !getCausal() && !getWindowLeft() && !getWindowRight())
    return emitOpError() << "bottom_right aligns a causal mask or a window, "
                            "and this attention has neither";
  RankedTensorType lse = getLse().getType();
  if (!lse.getElementType().isF32() || lse.getRank() != 3 ||
      failed(verifyCompatibleShape(lse.getShape(), q.take_front(3))))
    return emitOpError() << "lse type " << lse
                         << " must be f32 of shape [batch, heads, seqlen] of "
                            "the query";
  return success();
}

bool AttentionOp::isModOpSupported(Operation *op) {
  if (isa<YieldOp>(op) || op->getDialect()->getNamespace() == "arith")
    return true;
  // Transcendentals become ex2.approx / lg2.approx, which are f32.
  if (isa<math::ExpOp, math::Exp2Op, math::LogOp, math::Log2Op, math::TanhOp>(
          op))
    return op->getResult(0).getType().isF32();
  if (isa<math::SqrtOp, math::RsqrtOp, math::AbsFOp, math::FmaOp,
          math::FloorOp, math::CeilOp>(op))
    return true;
  if (auto extract = dyn_cast<tensor::ExtractOp>(op))
    return isa<BlockArgument>(extract.getTensor());
  return false;
}

/// Checks a region's block arguments, the single value it yields, and
/// that every op in it is one the lowering can place.
static LogicalResult verifyModRegion(AttentionOp op, Region &region,
                                     StringRef name, ArrayRef<Type> argTypes,
                                     ArrayRef<Type> yieldTypes) {
  if (region.empty())
    return success();
  Block &block = region.front();
  auto signature = [&]() {
    std::string s;
    llvm::raw_string_ostream os(s);
    os << "(";
    llvm::interleaveComma(argTypes, os);
    os << ") -> ";
    if (yieldTypes.size() == 1)
      os << yieldTypes.front();
    else {
      os << "(";
      llvm::interleaveComma(yieldTypes, os);
      os << ")";
    }
    return s;
  };
  if (block.getNumArguments() != argTypes.size() ||
      !llvm::equal(block.getArgumentTypes(), argTypes))
    return op.emitOpError() << name << " region must take " << signature();
  auto yield = dyn_cast<YieldOp>(block.getTerminator());
  if (!yield || !llvm::equal(yield.getValues().getTypes(), yieldTypes)) {
    InFlightDiagnostic diag = op.emitOpError()
                              << name << " region must end in attn.yield of ";
    if (yieldTypes.size() == 1)
      diag << "one " << yieldTypes.front();
    else
      diag << yieldTypes.size() << " values (" << yieldTypes << ")";
    return diag;
  }
  if (!region.hasOneBlock())
    return op.emitOpError() << name << " region must have one block";
  for (Operation &inner : block) {
    if (!AttentionOp::isModOpSupported(&inner))
      return op.emitOpError()
             << name << " region uses '" << inner.getName()
             << "', which the kernels cannot place: use arith ops, the math "
                "ops exp, exp2, log, log2, tanh, sqrt, rsqrt, absf, fma, "
                "floor and ceil, and tensor.extract of a captured tensor";
    if (inner.getNumRegions() != 0)
      return op.emitOpError() << name << " region uses '" << inner.getName()
                              << "', an op with regions";
    // The region is cloned into the kernel alone: a value from outside it
    // (the function's scale, say) does not exist there.
    for (Value operand : inner.getOperands())
      if (operand.getParentRegion() != &region)
        return op.emitOpError()
               << name << " region uses a value defined outside it (operand "
               << operand.getType() << " of '" << inner.getName()
               << "'): a region reads its own arguments, the values it "
                  "defines and the captured tensors (pass a value in as a "
                  "captured tensor, or write it as an arith.constant)";
  }
  return success();
}

LogicalResult AttentionOp::verifyRegions() {
  Builder b(getContext());
  Type idx = b.getIndexType(), f32 = b.getF32Type();
  SmallVector<Type> scoreArgs = {f32, idx, idx, idx, idx};
  SmallVector<Type> maskArgs = {idx, idx, idx, idx};
  for (Value c : getCaptures()) {
    scoreArgs.push_back(c.getType());
    maskArgs.push_back(c.getType());
  }
  if (failed(verifyModRegion(*this, getScoreMod(), "score_mod", scoreArgs,
                             {f32})))
    return failure();
  if (failed(verifyModRegion(*this, getMaskMod(), "mask_mod", maskArgs,
                             {b.getI1Type()})))
    return failure();
  if (!getScoreGrad().empty() && getScoreMod().empty())
    return emitOpError() << "has a score_grad region but no score_mod: "
                            "score_grad is the derivative of a score_mod";
  return verifyModRegion(*this, getScoreGrad(), "score_grad", scoreArgs,
                         {f32, f32});
}
