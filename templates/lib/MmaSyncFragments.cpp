//===- MmaSyncFragments.cpp - fragment-level IR of the mma_sync kernel ----===//
// Why: the pieces the kernel is made of, each emitted the same way every
// time: 16-byte cp.async tile copies (zero-filled past the end), ldmatrix.x4
// and mma.sync m16n8k16 for f16 and bf16.
#include "MmaSyncBuilder.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace flashjit::mma_sync {

Value Builder::sharedAddress(Value byteOffset) {
  return LLVM::GEPOp::create(b, loc, sharedPtr, b.getI8Type(), smemBase,
                             ValueRange{byteOffset});
}

void Builder::copyTile(Value base, ValueRange strides, Value batch,
                       Value head, Value firstRow, Value end, int64_t rows,
                       Value tileOffset) {
  const int64_t chunksPerRow = d / 8;
  if (threads % chunksPerRow != 0)
    return copyTileClamped(base, strides, batch, head, firstRow, end, rows,
                           tileOffset);
  const int64_t rowsPerRound = threads / chunksPerRow;
  Value row0 = divU(tid, chunksPerRow);
  Value column = mul(remU(tid, chunksPerRow), c64(8));
  Value step = mul(strides[2], c64(rowsPerRound));
  // Zero-filled chunks still name an address: the tile's first row.
  Value safe = globalAddress(
      base, elt, add(rowOffset(strides, batch, head, firstRow), column));
  Value myRow = add(firstRow, row0);
  Value src = globalAddress(
      base, elt, add(rowOffset(strides, batch, head, myRow), column));
  Value dst0 = add(tileOffset, chunkOffset(row0, column));
  for (int64_t round = 0; round * rowsPerRound < rows; ++round) {
    OpBuilder::InsertionGuard guard(b);
    if ((round + 1) * rowsPerRound > rows) {
      Value row = add(row0, c64(round * rowsPerRound));
      auto ifOp = scf::IfOp::create(b, loc, cmp(Pred::slt, row, c64(rows)),
                                    /*withElse=*/false);
      b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
    }
    Value valid =
        cmp(Pred::slt, add(myRow, c64(round * rowsPerRound)), end);
    Value from = arith::SelectOp::create(b, loc, valid, src, safe);
    Value bytes = arith::SelectOp::create(b, loc, valid, c32(16), c32(0));
    Value dst = roundDestination(tileOffset, dst0, row0, column,
                                 round * rowsPerRound);
    cpAsync16(dst, from, bytes);
    b.setInsertionPointAfterValue(src);
    src = globalAddress(src, elt, step);
  }
}

void Builder::copyTileClamped(Value base, ValueRange strides, Value batch,
                              Value head, Value firstRow, Value end,
                              int64_t rows, Value tileOffset) {
  Value lastRow = sub(end, c64(1));
  forEachChunk(rows, [&](Value row, Value column) {
    Value seqRow = minS(add(firstRow, row), lastRow);
    Value src = globalAddress(
        base, elt, add(rowOffset(strides, batch, head, seqRow), column));
    Value dstOffset = toI32(add(tileOffset, chunkOffset(row, column)));
    cpAsync16(dstOffset, src, Value());
  });
}

void Builder::forEachChunk(int64_t rows,
                           function_ref<void(Value row, Value column)> body) {
  const int64_t chunksPerRow = d / 8;
  const int64_t chunks = rows * chunksPerRow;
  for (int64_t first = 0; first < chunks; first += threads) {
    OpBuilder::InsertionGuard guard(b);
    Value chunk = add(tid, c64(first));
    if (first + threads > chunks) {
      auto inRange = scf::IfOp::create(
          b, loc, cmp(Pred::slt, chunk, c64(chunks)), /*withElse=*/false);
      b.setInsertionPoint(inRange.thenBlock()->getTerminator());
    }
    Value row = divU(chunk, chunksPerRow);
    Value column = mul(remU(chunk, chunksPerRow), c64(8));
    body(row, column);
  }
}

void Builder::copyKvTile(const ForwardParams &p, Value base,
                         ValueRange strides, Value batch, Value head,
                         Value firstKey, int64_t rows, Value tileOffset) {
  if (!spec.paged())
    return copyTile(base, strides, batch, head, firstKey, p.seqlenK, rows,
                    tileOffset);
  // Zero-filled chunks still name an address: the pool's first row.
  Value safe = globalAddress(base, elt, rowOffset(strides, c64(0), head,
                                                  c64(0)));
  forEachChunk(rows, [&](Value row, Value column) {
    PagedKey key = pagedKey(p, add(firstKey, row));
    Value src = globalAddress(
        base, elt, add(rowOffset(strides, c64(0), head, key.row), column));
    src = arith::SelectOp::create(b, loc, key.valid, src, safe);
    Value bytes = arith::SelectOp::create(b, loc, key.valid, c32(16), c32(0));
    Value dst = toI32(add(
        tileOffset, mul(add(mul(row, c64(rowElems)), column), c64(eltBytes))));
    cpAsync16(dst, src, bytes);
  });
}

void Builder::cpAsync16(Value dst, Value src, Value bytes) {
  if (l2PrefetchBytes == 0 && !l2Policy) {
    NVVM::CpAsyncOp::create(b, loc, sharedAddress(dst), src, /*size=*/16,
                            NVVM::LoadCacheModifierKind::CG, bytes);
    return;
  }
  std::string text = "cp.async.cg.shared.global";
  if (l2Policy)
    text += ".L2::cache_hint";
  if (l2PrefetchBytes)
    text += ".L2::" + std::to_string(l2PrefetchBytes) + "B";
  SmallVector<Value> operands = {sharedAddress(dst), src};
  std::string constraints = "l,l";
  if (l2Policy) {
    // The policy operand follows src-size, which is then always given.
    text += " [$0], [$1], 16, $2, $3;";
    operands.push_back(bytes ? bytes : c32(16));
    operands.push_back(l2Policy);
    constraints += ",r,l";
  } else {
    text += std::string(" [$0], [$1], 16") + (bytes ? ", $2;" : ";");
    if (bytes) {
      operands.push_back(bytes);
      constraints += ",r";
    }
  }
  LLVM::InlineAsmOp::create(
      b, loc, Type(), operands, text, constraints,
      /*has_side_effects=*/true, /*is_align_stack=*/false,
      LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT),
      /*operand_attrs=*/ArrayAttr());
}

SmallVector<Value, 4> Builder::ldmatrix(Value byteOffset, bool transpose) {
  auto shape = NVVM::LdStMatrixShapeAttr::get(b.getContext(), 8, 8);
  Value frags = NVVM::LdMatrixOp::create(
      b, loc, frag4Type, sharedAddress(byteOffset), /*num=*/4,
      transpose ? NVVM::MMALayout::col : NVVM::MMALayout::row, shape,
      NVVM::LdStMatrixEltType::B16);
  SmallVector<Value, 4> out;
  for (int64_t i = 0; i < 4; ++i)
    out.push_back(LLVM::ExtractValueOp::create(b, loc, frags, i));
  return out;
}

SmallVector<Value, 4> Builder::mma(ArrayRef<Value> a, ArrayRef<Value> bFrag,
                                   ArrayRef<Value> c) {
  SmallVector<Value> aOps(a), bOps(bFrag);
  std::array<NVVM::MMATypes, 2> types = {NVVM::MMATypes::bf16,
                                         NVVM::MMATypes::bf16};
  if (spec.dtype == DType::F16) {
    // f16 operands are typed vector<2xf16>; bf16 ones stay packed in i32.
    auto pair = VectorType::get({2}, elt);
    for (Value &v : aOps)
      v = LLVM::BitcastOp::create(b, loc, pair, v);
    for (Value &v : bOps)
      v = LLVM::BitcastOp::create(b, loc, pair, v);
    types = {NVVM::MMATypes::f16, NVVM::MMATypes::f16};
  }
  Value res = NVVM::MmaOp::create(
      b, loc, accType, aOps, bOps, c, ArrayRef<int64_t>{16, 8, 16},
      std::nullopt, std::nullopt, types,
      std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                     NVVM::MMALayout::col});
  SmallVector<Value, 4> out;
  for (int64_t i = 0; i < kAccPerTile; ++i)
    out.push_back(LLVM::ExtractValueOp::create(b, loc, res, i));
  return out;
}

void Builder::mmaTwoTiles(ArrayRef<SmallVector<Value, 4>> a,
                          ArrayRef<Value> b4, MutableArrayRef<Value> acc,
                          llvm::function_ref<int64_t(int64_t, int64_t)> slot) {
  for (size_t mt = 0; mt < a.size(); ++mt)
    for (int64_t half = 0; half < 2; ++half) {
      int64_t at = slot(mt, half);
      auto out = mma(a[mt], {b4[2 * half], b4[2 * half + 1]},
                     acc.slice(at, kAccPerTile));
      std::copy(out.begin(), out.end(), acc.begin() + at);
    }
}

Value Builder::laneAt(Value laneOffset, int64_t bytes) {
  return toI32(add(laneOffset, c64(bytes)));
}

Value Builder::laneAt(const LaneTile &lane, int64_t rows, int64_t chunk) {
  if (!lane.chunkXor)
    return laneAt(lane.base, (rows * rowElems + chunk * 8) * eltBytes);
  // The lane's chunk is chunk + (0 or 1, in chunkXor with its row's bits),
  // so its place is (chunk & ~7) | ((chunk & 7) ^ chunkXor).
  Value place = arith::XOrIOp::create(b, loc, lane.chunkXor, c64(chunk & 7));
  return toI32(add(add(lane.base, mul(place, c64(16))),
                   c64(rows * rowElems * eltBytes + (chunk & ~7) * 16)));
}

Value Builder::chunkOffset(Value row, Value column) {
  if (!swizzledRows)
    return mul(add(mul(row, c64(rowElems)), column), c64(eltBytes));
  Value chunk = divU(column, 8);
  Value place = arith::OrIOp::create(
      b, loc, arith::AndIOp::create(b, loc, chunk, c64(~int64_t(7))),
      arith::AndIOp::create(b, loc,
                            arith::XOrIOp::create(b, loc, chunk, row),
                            c64(7)));
  return add(mul(row, c64(rowElems * eltBytes)), mul(place, c64(16)));
}

Value Builder::roundDestination(Value tileOffset, Value dst0, Value row0,
                                Value column, int64_t rowsAhead) {
  // Swizzled rows whose index mod 8 the round changes take their chunk's
  // place again.
  if (swizzledRows && rowsAhead % 8 != 0)
    return toI32(
        add(tileOffset, chunkOffset(add(row0, c64(rowsAhead)), column)));
  return toI32(add(dst0, c64(rowsAhead * rowElems * eltBytes)));
}

LaneTile Builder::laneTile(Value tileOffset, Value row, Value column) {
  Value rowStart = add(tileOffset, mul(row, c64(rowElems * eltBytes)));
  if (!swizzledRows)
    return LaneTile(add(rowStart, mul(column, c64(eltBytes))));
  Value chunkXor = arith::AndIOp::create(
      b, loc, arith::XOrIOp::create(b, loc, divU(column, 8), row), c64(7));
  return LaneTile(rowStart, chunkXor);
}

SmallVector<Value> Builder::scoreTile(
    llvm::function_ref<SmallVector<Value, 4>(int64_t, int64_t)> qFrag,
    const LaneTile &kLane, int64_t mTiles, int64_t nTiles) {
  SmallVector<Value> s(mTiles * nTiles * kAccPerTile, cF32(0.0f));
  for (int64_t ks = 0; ks < d / 16; ++ks) {
    SmallVector<SmallVector<Value, 4>> q;
    for (int64_t mt = 0; mt < mTiles; ++mt)
      q.push_back(qFrag(mt, ks));
    for (int64_t np = 0; np < nTiles / 2; ++np) {
      auto kFrag = ldmatrix(laneAt(kLane, np * 16, ks * 2), false);
      mmaTwoTiles(q, kFrag, s, [&](int64_t mt, int64_t half) {
        return (mt * nTiles + 2 * np + half) * kAccPerTile;
      });
    }
  }
  return s;
}

void Builder::accumulatePV(ArrayRef<Value> packed, const LaneTile &vLane,
                           int64_t mTiles, int64_t nTiles,
                           MutableArrayRef<Value> acc) {
  const int64_t dTiles = d / 8;
  for (int64_t kk = 0; kk < nTiles / 2; ++kk) {
    SmallVector<SmallVector<Value, 4>> aFrag;
    for (int64_t mt = 0; mt < mTiles; ++mt) {
      const Value *t0 = &packed[(mt * nTiles + 2 * kk) * 2];
      const Value *t1 = &packed[(mt * nTiles + 2 * kk + 1) * 2];
      aFrag.push_back({t0[0], t0[1], t1[0], t1[1]});
    }
    for (int64_t dp = 0; dp < dTiles / 2; ++dp) {
      auto vFrag = ldmatrix(laneAt(vLane, kk * 16, dp * 2), true);
      mmaTwoTiles(aFrag, vFrag, acc, [&](int64_t mt, int64_t half) {
        return (mt * dTiles + 2 * dp + half) * kAccPerTile;
      });
    }
  }
}

} // namespace flashjit::mma_sync
