//===- AttnOps.cpp - verifiers of the attn ops ----------------------------===//
// Why: every shape rule of attention is checked here once, with a message
// that names the operand and the sizes that disagree.
#include "flashjit/Dialect/AttnDialect.h"

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
  RankedTensorType lse = getLse().getType();
  if (!lse.getElementType().isF32() || lse.getRank() != 3 ||
      failed(verifyCompatibleShape(lse.getShape(), q.take_front(3))))
    return emitOpError() << "lse type " << lse
                         << " must be f32 of shape [batch, heads, seqlen] of "
                            "the query";
  return success();
}

/// Checks a region's block arguments and the single value it yields.
static LogicalResult verifyModRegion(AttentionOp op, Region &region,
                                     StringRef name, ArrayRef<Type> argTypes,
                                     Type yieldType) {
  if (region.empty())
    return success();
  Block &block = region.front();
  auto signature = [&]() {
    std::string s;
    llvm::raw_string_ostream os(s);
    os << "(";
    llvm::interleaveComma(argTypes, os);
    os << ") -> " << yieldType;
    return s;
  };
  if (block.getNumArguments() != argTypes.size() ||
      !llvm::equal(block.getArgumentTypes(), argTypes))
    return op.emitOpError() << name << " region must take " << signature();
  auto yield = dyn_cast<YieldOp>(block.getTerminator());
  if (!yield || yield.getValues().size() != 1 ||
      yield.getValues()[0].getType() != yieldType)
    return op.emitOpError() << name << " region must end in attn.yield of one "
                            << yieldType;
  return success();
}

LogicalResult AttentionOp::verifyRegions() {
  Builder b(getContext());
  Type idx = b.getIndexType(), f32 = b.getF32Type();
  if (failed(verifyModRegion(*this, getScoreMod(), "score_mod",
                             {f32, idx, idx, idx, idx}, f32)))
    return failure();
  return verifyModRegion(*this, getMaskMod(), "mask_mod",
                         {idx, idx, idx, idx}, b.getI1Type());
}
