//===- KernelIR.cpp - shared IR-building helpers of the templates ---------===//
// Why: see KernelIR.h; the bodies are small but every template needs them.
#include "KernelIR.h"

#include "flashjit/Templates/KernelABI.h"

#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>

using namespace mlir;

namespace flashjit {

KernelIR::KernelIR(OpBuilder &b, Location loc, const AttentionSpec &spec)
    : b(b), loc(loc), spec(spec) {
  elt = spec.dtype == DType::BF16 ? Type(b.getBF16Type())
                                  : Type(b.getF16Type());
  f32 = b.getF32Type();
  i64 = b.getI64Type();
  i32 = b.getI32Type();
  globalPtr = LLVM::LLVMPointerType::get(b.getContext(), /*addressSpace=*/1);
}

void KernelIR::appendVariantArgTypes(SmallVectorImpl<Type> &argTypes) {
  for (const CapturedTensor &c : spec.captures) {
    argTypes.push_back(globalPtr);
    argTypes.append(c.shape.size(), i64);
  }
  if (spec.isBlockSparse())
    for (int64_t rank : {3, 4, 3, 4}) {
      argTypes.push_back(globalPtr);
      argTypes.append(rank, i64);
    }
  if (takesTileOrder)
    argTypes.append({globalPtr, i64, i64});
  if (spec.varlen)
    argTypes.append(2, globalPtr);
  if (spec.paged())
    argTypes.append({globalPtr, i64});
}

void KernelIR::bindVariantArgs(ValueRange args, unsigned at,
                               ForwardParams &p) {
  for (const CapturedTensor &c : spec.captures) {
    ForwardParams::Capture capture;
    capture.data = args[at++];
    for (size_t d = 0; d < c.shape.size(); ++d)
      capture.strides.push_back(args[at++]);
    p.captures.push_back(capture);
  }
  if (spec.isBlockSparse())
    for (int64_t rank : {3, 4, 3, 4}) {
      ForwardParams::Capture list;
      list.data = args[at++];
      for (int64_t d = 0; d < rank; ++d)
        list.strides.push_back(args[at++]);
      p.blockMask.push_back(list);
    }
  if (takesTileOrder) {
    p.tileOrder = args[at++];
    p.tileOrderStrides = {args[at], args[at + 1]};
    at += 2;
  }
  if (spec.varlen) {
    p.cuSeqlensQ = args[at++];
    p.cuSeqlensK = args[at++];
  }
  if (spec.paged()) {
    p.blockTable = args[at++];
    p.maxPages = args[at++];
  }
}

gpu::GPUFuncOp KernelIR::beginKernel(StringRef name, ArrayRef<Type> argTypes,
                                     int64_t threads) {
  auto func = gpu::GPUFuncOp::create(b, loc, name,
                                     b.getFunctionType(argTypes, {}));
  func->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  func.setKnownBlockSizeAttr(
      b.getDenseI32ArrayAttr({static_cast<int32_t>(threads), 1, 1}));
  b.setInsertionPointToStart(&func.getBody().front());
  return func;
}

ForwardParams KernelIR::beginForwardKernel(StringRef name, int64_t threads,
                                           bool withTensorMaps) {
  SmallVector<Type> argTypes(5, globalPtr);
  argTypes.append(15, i64);
  argTypes.append({i32, i32, f32, i32, globalPtr});
  const unsigned numAbiParams = argTypes.size();
  if (withTensorMaps)
    argTypes.append(kNumTensorMaps,
                    LLVM::LLVMPointerType::get(b.getContext()));
  const unsigned capturesAt = argTypes.size();
  appendVariantArgTypes(argTypes);
  gpu::GPUFuncOp func = beginKernel(name, argTypes, threads);
  if (withTensorMaps) {
    SmallVector<int32_t> positions;
    for (unsigned i = 0; i < kNumTensorMaps; ++i)
      positions.push_back(numAbiParams + i);
    func->setAttr("flashjit.tensor_map_args",
                  b.getDenseI32ArrayAttr(positions));
  }

  ValueRange args = func.getBody().front().getArguments();
  ForwardParams p;
  p.q = args[0];
  p.k = args[1];
  p.v = args[2];
  p.o = args[3];
  p.lse = args[4];
  p.qStrides.assign(args.begin() + 5, args.begin() + 8);
  p.kStrides.assign(args.begin() + 8, args.begin() + 11);
  p.vStrides.assign(args.begin() + 11, args.begin() + 14);
  p.oStrides.assign(args.begin() + 14, args.begin() + 17);
  p.lseStrides.assign(args.begin() + 17, args.begin() + 20);
  p.seqlenQ = arith::ExtSIOp::create(b, loc, i64, args[20]);
  p.seqlenK = arith::ExtSIOp::create(b, loc, i64, args[21]);
  p.scaleLog2 = args[22];
  p.batch = args[23];
  p.tileCounter = args[24];
  if (withTensorMaps)
    p.tensorMaps.assign(args.begin() + numAbiParams,
                        args.begin() + numAbiParams + kNumTensorMaps);
  bindVariantArgs(args, capturesAt, p);
  return p;
}

ForwardParams KernelIR::beginBlockMaskKernel(StringRef name, int64_t threads) {
  SmallVector<Type> argTypes = {i32, i32};
  appendVariantArgTypes(argTypes);
  gpu::GPUFuncOp func = beginKernel(name, argTypes, threads);
  ValueRange args = func.getBody().front().getArguments();
  ForwardParams p;
  p.seqlenQ = arith::ExtSIOp::create(b, loc, i64, args[0]);
  p.seqlenK = arith::ExtSIOp::create(b, loc, i64, args[1]);
  bindVariantArgs(args, 2, p);
  return p;
}

BlockCoordinates KernelIR::blockCoordinates() {
  BlockCoordinates c;
  Value blockX = toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::x));
  c.head = toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::y));
  c.batch = toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::z));
  c.queryBlock = blockX;
  if (spec.causal) {
    Value gridX = toI64(gpu::GridDimOp::create(b, loc, gpu::Dimension::x));
    c.queryBlock = sub(sub(gridX, c64(1)), blockX);
  }
  c.kvHead = divU(c.head, spec.groupSize());
  return c;
}

Value KernelIR::c64(int64_t v) {
  return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(v));
}
Value KernelIR::c32(int32_t v) {
  return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(v));
}
Value KernelIR::cIdx(int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}
Value KernelIR::cF32(float v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}
Value KernelIR::add(Value x, Value y) {
  return arith::AddIOp::create(b, loc, x, y);
}
Value KernelIR::sub(Value x, Value y) {
  return arith::SubIOp::create(b, loc, x, y);
}
Value KernelIR::mul(Value x, Value y) {
  return arith::MulIOp::create(b, loc, x, y);
}
Value KernelIR::divU(Value x, int64_t d) {
  Value c = x.getType() == i32 ? c32(d) : c64(d);
  return arith::DivUIOp::create(b, loc, x, c);
}
Value KernelIR::remU(Value x, int64_t d) {
  Value c = x.getType() == i32 ? c32(d) : c64(d);
  return arith::RemUIOp::create(b, loc, x, c);
}
Value KernelIR::minS(Value x, Value y) {
  return arith::MinSIOp::create(b, loc, x, y);
}
Value KernelIR::maxS(Value x, Value y) {
  return arith::MaxSIOp::create(b, loc, x, y);
}
Value KernelIR::cmp(arith::CmpIPredicate p, Value x, Value y) {
  return arith::CmpIOp::create(b, loc, p, x, y);
}
Value KernelIR::toI64(Value v) {
  if (v.getType() == i64)
    return v;
  if (v.getType().isIndex())
    return arith::IndexCastOp::create(b, loc, i64, v);
  return arith::ExtUIOp::create(b, loc, i64, v);
}
Value KernelIR::toI32(Value v) {
  if (v.getType() == i32)
    return v;
  if (v.getType().isIndex())
    return arith::IndexCastOp::create(b, loc, i32, v);
  return arith::TruncIOp::create(b, loc, i32, v);
}
Value KernelIR::toIndex(Value i64Value) {
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), i64Value);
}
Value KernelIR::threadIdX() {
  return toI64(gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x));
}

Value KernelIR::exp2(Value x) {
  return LLVM::CallIntrinsicOp::create(
             b, loc, f32, b.getStringAttr("llvm.nvvm.ex2.approx.ftz.f"),
             ValueRange{x})
      .getResult(0);
}
Value KernelIR::log2(Value x) {
  return LLVM::CallIntrinsicOp::create(
             b, loc, f32, b.getStringAttr("llvm.nvvm.lg2.approx.f"),
             ValueRange{x})
      .getResult(0);
}
Value KernelIR::maxF(Value x, Value y) {
  return arith::MaximumFOp::create(b, loc, x, y);
}

Value KernelIR::packPair(Value lo, Value hi) {
  auto f32Pair = VectorType::get({2}, f32);
  Value wide = vector::FromElementsOp::create(b, loc, f32Pair,
                                              ValueRange{lo, hi});
  Value narrow =
      arith::TruncFOp::create(b, loc, VectorType::get({2}, elt), wide);
  return LLVM::BitcastOp::create(b, loc, i32, narrow);
}

Value KernelIR::shuffleXorReduce(Value x, int64_t width, bool isMax) {
  for (int64_t offset = width / 2; offset >= 1; offset /= 2) {
    Value other =
        gpu::ShuffleOp::create(b, loc, x, offset, 32, gpu::ShuffleMode::XOR)
            .getShuffleResult();
    x = isMax ? maxF(x, other)
              : Value(arith::AddFOp::create(b, loc, x, other));
  }
  return x;
}

Value KernelIR::rowOffset(ValueRange strides, Value batch, Value head,
                          Value row) {
  return add(add(mul(batch, strides[0]), mul(head, strides[1])),
             mul(row, strides[2]));
}

Value KernelIR::globalAddress(Value base, Type type, Value offset) {
  return LLVM::GEPOp::create(b, loc, globalPtr, type, base,
                             ValueRange{offset});
}

Value KernelIR::diagonalOffset(const ForwardParams &p) {
  if (spec.causalAlign == CausalAlign::BottomRight)
    return sub(p.seqlenK, p.seqlenQ);
  return c64(0);
}

std::pair<Value, Value> KernelIR::visibleKeys(const ForwardParams &p,
                                             Value m0, int64_t blockM) {
  Value diagonal = diagonalOffset(p);
  Value lo = c64(0), hi = p.seqlenK;
  if (spec.hasLeftBound())
    lo = maxS(lo, sub(add(m0, diagonal), c64(spec.windowLeft)));
  if (spec.hasRightBound())
    hi = minS(hi, add(add(m0, diagonal),
                      c64(blockM + spec.rightExtent())));
  return {lo, hi};
}

KvTileRange KernelIR::kvTileRange(const ForwardParams &p, Value batch,
                                  Value head, Value m0, int64_t blockM,
                                  int64_t blockN) {
  KvTileRange r;
  if (spec.isBlockSparse()) {
    // The query block's row of each list (the kernel's block_m divides
    // the mask's, TemplateRegistry's checkSparseTile). A query block whose
    // lists are empty visits one tile (all masked), so that its output is
    // written.
    r = blockListRange(p.blockMask, batch, head,
                       divU(m0, spec.sparseBlockM), spec.sparseBlockN, blockN,
                       p.seqlenK);
    r.count = maxS(r.count, c64(1));
    return r;
  }
  if (spec.isPlain()) {
    // Plain attention: from tile 0 up to the sequence end, or (causal) to
    // the block's last row's diagonal. Never empty.
    Value kvEnd = p.seqlenK;
    if (spec.causal)
      kvEnd = minS(p.seqlenK, add(m0, c64(blockM)));
    r.first = c64(0);
    r.count = divU(add(kvEnd, c64(blockN - 1)), blockN);
    return r;
  }
  auto [lo, hi] = visibleKeys(p, m0, blockM);
  Value lastTile = divU(sub(p.seqlenK, c64(1)), blockN);
  r.first = minS(divU(lo, blockN), lastTile);
  // hi <= 0 (no key for any row): end at the first tile; the max below
  // keeps one tile.
  Value end = divU(add(maxS(hi, c64(0)), c64(blockN - 1)), blockN);
  r.count = maxS(sub(end, r.first), c64(1));
  return r;
}

KvTileRange KernelIR::blockListRange(ArrayRef<ForwardParams::Capture> lists,
                                     Value batch, Value head, Value listRow,
                                     int64_t maskBlock, int64_t tile,
                                     Value columns) {
  KvTileRange r;
  const ForwardParams::Capture &counts = lists[0], &partial = lists[1],
                               &fullCounts = lists[2], &full = lists[3];
  auto rowOf = [&](const ForwardParams::Capture &c) {
    return add(add(mul(batch, c.strides[0]), mul(head, c.strides[1])),
               mul(listRow, c.strides[2]));
  };
  r.tilesPerBlock = maskBlock / tile;
  r.maskBlocks = divU(add(columns, c64(maskBlock - 1)), maskBlock);
  // Lengths clamped to [0, maskBlocks] (as unsigned, so a negative one
  // is a full row first, then clamped): the lists hold that many.
  auto length = [&](Value address) {
    Value raw = arith::ExtSIOp::create(
        b, loc, i64, LLVM::LoadOp::create(b, loc, i32, address, 4));
    Value negative = cmp(arith::CmpIPredicate::slt, raw, c64(0));
    return arith::SelectOp::create(b, loc, negative, c64(0),
                                   minS(raw, r.maskBlocks));
  };
  Value countAddress = globalAddress(counts.data, i32, rowOf(counts));
  r.numPartial = length(countAddress);
  // No full lists: a null pointer. Their length is then 0 (read from
  // the partial length's address, which is valid).
  Value nullPtr = LLVM::ZeroOp::create(b, loc, globalPtr);
  r.hasFull = LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::ne,
                                   fullCounts.data, nullPtr);
  Value fullCountAddress = arith::SelectOp::create(
      b, loc, r.hasFull,
      globalAddress(fullCounts.data, i32, rowOf(fullCounts)), countAddress);
  r.numFull = arith::SelectOp::create(b, loc, r.hasFull,
                                      length(fullCountAddress), c64(0));
  r.partialList = globalAddress(partial.data, i32, rowOf(partial));
  r.partialStride = partial.strides[3];
  r.fullList = arith::SelectOp::create(
      b, loc, r.hasFull, globalAddress(full.data, i32, rowOf(full)),
      r.partialList);
  r.fullStride = full.strides[3];
  r.first = c64(0);
  r.count = mul(add(r.numPartial, r.numFull), c64(r.tilesPerBlock));
  return r;
}

Value KernelIR::kvTile(const KvTileRange &r, Value j) {
  j = toI64(j);
  if (!spec.isBlockSparse())
    return add(r.first, j);
  // Position `at` in the lists (partial, then full) and the tile within
  // that mask block. Past the lists (a query block with empty lists visits
  // one tile), and for an index out of [0, maskBlocks), the block is
  // maskBlocks: past the keys, so the tile is all masked and its loads
  // read nothing (TMA fills zeros, the others check the sequence end).
  Value at = r.tilesPerBlock > 1 ? divU(j, r.tilesPerBlock) : j;
  Value within = r.tilesPerBlock > 1 ? remU(j, r.tilesPerBlock) : c64(0);
  Value inPartial = cmp(arith::CmpIPredicate::slt, at, r.numPartial);
  Value listed = cmp(arith::CmpIPredicate::slt, at,
                     add(r.numPartial, r.numFull));
  Value fromFull = arith::SelectOp::create(
      b, loc, listed,
      globalAddress(r.fullList, i32,
                    mul(sub(at, r.numPartial), r.fullStride)),
      r.partialList);
  Value address = arith::SelectOp::create(
      b, loc, inPartial,
      globalAddress(r.partialList, i32, mul(at, r.partialStride)), fromFull);
  // Zero-extended: a negative index is then above maskBlocks too.
  Value raw = toI64(LLVM::LoadOp::create(b, loc, i32, address, 4));
  Value usable = arith::AndIOp::create(
      b, loc, listed, cmp(arith::CmpIPredicate::ult, raw, r.maskBlocks));
  Value block =
      arith::SelectOp::create(b, loc, usable, raw, r.maskBlocks);
  return add(mul(block, c64(r.tilesPerBlock)), within);
}

Value KernelIR::maskModApplies(const KvTileRange &r, Value j) {
  if (!spec.isBlockSparse())
    return Value();
  Value at = toI64(j);
  if (r.tilesPerBlock > 1)
    at = divU(at, r.tilesPerBlock);
  return cmp(arith::CmpIPredicate::slt, at, r.numPartial);
}

Value KernelIR::inverseOfSum(Value rowSum) {
  Value inverse = arith::DivFOp::create(b, loc, cF32(1.0f), rowSum);
  if (!spec.mayEmptyRows())
    return inverse;
  Value empty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                                      rowSum, cF32(0.0f));
  return arith::SelectOp::create(b, loc, empty, cF32(0.0f), inverse);
}

Value KernelIR::lseFromBase2(Value maxBase2, Value sum) {
  Value log2Sum = arith::AddFOp::create(b, loc, maxBase2, log2(sum));
  return arith::MulFOp::create(b, loc, log2Sum,
                               cF32(static_cast<float>(M_LN2)));
}

void KernelIR::ifThen(Value condition, llvm::function_ref<void()> body) {
  OpBuilder::InsertionGuard g(b);
  auto op = scf::IfOp::create(b, loc, condition, /*withElse=*/false);
  b.setInsertionPoint(op.thenBlock()->getTerminator());
  body();
}

SmallVector<Value>
KernelIR::ifElse(TypeRange types, Value condition,
                 llvm::function_ref<SmallVector<Value>()> then,
                 llvm::function_ref<SmallVector<Value>()> otherwise) {
  auto op = scf::IfOp::create(b, loc, types, condition,
                              /*withElseRegion=*/true);
  OpBuilder::InsertionGuard g(b);
  b.setInsertionPointToStart(op.thenBlock());
  scf::YieldOp::create(b, loc, then());
  b.setInsertionPointToStart(op.elseBlock());
  scf::YieldOp::create(b, loc, otherwise());
  return SmallVector<Value>(op.getResults());
}

void KernelIR::asmVoid(StringRef text, StringRef constraints,
                       ValueRange operands) {
  LLVM::InlineAsmOp::create(
      b, loc, /*res=*/Type(), operands, text, constraints,
      /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
      /*operand_attrs=*/ArrayAttr());
}

void KernelIR::keepRolled(Operation *loop) {
  MLIRContext *ctx = b.getContext();
  auto unroll = LLVM::LoopUnrollAttr::get(
      ctx, /*disable=*/b.getBoolAttr(true), /*count=*/{},
      /*runtimeDisable=*/{}, /*full=*/{}, /*followupUnrolled=*/{},
      /*followupRemainder=*/{}, /*followupAll=*/{});
  auto annotation = LLVM::LoopAnnotationAttr::get(
      ctx, /*disableNonforced=*/{}, /*vectorize=*/{}, /*interleave=*/{},
      unroll, /*unrollAndJam=*/{}, /*licm=*/{}, /*distribute=*/{},
      /*pipeline=*/{}, /*peeled=*/{}, /*unswitch=*/{}, /*mustProgress=*/{},
      /*isVectorized=*/{}, /*startLoc=*/{}, /*endLoc=*/{},
      /*parallelAccesses=*/{});
  loop->setAttr("loop_annotation", annotation);
}

} // namespace flashjit
