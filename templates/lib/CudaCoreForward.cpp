//===- CudaCoreForward.cpp - IR builder of the CUDA-core template ---------===//
// Why: emits the tiled FlashAttention-2 forward kernel as a gpu.func in
// upstream dialects (gpu, scf, arith, vector, memref, llvm), so the standard
// NVVM lowering turns it into PTX.
//
// Work split: a block owns block_m query rows of one (batch, head); each row
// is owned by D/32 adjacent threads ("slices"), each holding 32 columns of
// the pre-scaled Q row and of the f32 accumulator in registers. K and V tiles
// of block_n rows go through shared memory. Per tile, every thread computes
// its partial dot products, the slices of a row add them with butterfly
// shuffles, and the row's online softmax (running max m, running sum l,
// accumulator rescaled once per tile) is computed redundantly by its slices.
// Scores are in base 2: Q is multiplied by scale*log2(e) on load, so
// p = exp2(s - m) is one ex2.approx per score.
//
// Shared layout: each K/V row stores its D/32 slices 40 elements apart (32
// used, 8 padding), so the 16-byte loads of the slices of one row fall in
// distinct banks.
#include "flashjit/Templates/CudaCoreForward.h"

#include "KernelIR.h"
#include "ScoreMods.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"

#include <limits>

using namespace mlir;

namespace flashjit {
namespace {

constexpr int64_t kSharedSliceStride = CudaCoreForward::kSharedSliceStride;
/// Elements in one 16-byte vector load.
constexpr int64_t kVec = 8;

class Builder : public KernelIR {
public:
  Builder(OpBuilder &b, Location loc, const AttentionSpec &spec,
          const TileConfig &config)
      : KernelIR(b, loc, spec), cfg(config),
        slices(spec.headDim / CudaCoreForward::kSliceWidth),
        vecsPerSlice(CudaCoreForward::kSliceWidth / kVec),
        threads(cfg.blockM * slices), rowStride(slices * kSharedSliceStride) {
    MLIRContext *ctx = b.getContext();
    vecElt = VectorType::get({kVec}, elt);
    vecF32 = VectorType::get({kVec}, f32);
    auto workgroup = gpu::AddressSpaceAttr::get(ctx, gpu::AddressSpace::Workgroup);
    tileType = MemRefType::get({cfg.blockN, rowStride}, elt, AffineMap(),
                               workgroup);
    rawSharedType = MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                                    AffineMap(), workgroup);
  }

  void build(StringRef name, const ModRegions &mods);

private:
  Value splat(Value scalar) {
    return vector::BroadcastOp::create(b, loc, vecF32, scalar);
  }
  /// 16-byte load of 8 elements from global memory.
  Value loadGlobalVec(Value base, Value offset) {
    return LLVM::LoadOp::create(b, loc, vecElt,
                                globalAddress(base, elt, offset),
                                /*alignment=*/16);
  }
  /// 8 elements of slice-local chunk `chunk` of row `row` of a shared tile,
  /// widened to f32.
  Value loadSharedVec(Value tile, Value row, Value column) {
    Value v = vector::LoadOp::create(b, loc, vecElt, tile,
                                     ValueRange{row, column},
                                     /*nontemporal=*/false, llvm::Align(16));
    return arith::ExtFOp::create(b, loc, vecF32, v);
  }

  void emitTileLoad(Value kBase, Value vBase, ValueRange kStrides,
                    ValueRange vStrides, Value batch, Value kvHead, Value n0,
                    Value seqlenK, Value tid, Value kTile, Value vTile);

  const TileConfig &cfg;
  const int64_t slices, vecsPerSlice, threads, rowStride;
  VectorType vecElt, vecF32;
  MemRefType tileType, rawSharedType;
};

/// Cooperative copy of K and V rows [n0, n0 + block_n) into shared memory;
/// rows past the end of the sequence repeat its last row (their scores are
/// masked, so any finite data will do).
void Builder::emitTileLoad(Value kBase, Value vBase, ValueRange kStrides,
                           ValueRange vStrides, Value batch, Value kvHead,
                           Value n0, Value seqlenK, Value tid, Value kTile,
                           Value vTile) {
  const int64_t chunksPerRow = spec.headDim / kVec;
  const int64_t chunks = cfg.blockN * chunksPerRow;
  const int64_t rounds = (chunks + threads - 1) / threads;
  Value lastRow = arith::SubIOp::create(b, loc, seqlenK, c64(1));
  for (int64_t round = 0; round < rounds; ++round) {
    Value chunk = add(tid, c64(round * threads));
    OpBuilder::InsertionGuard guard(b);
    if ((round + 1) * threads > chunks) {
      Value inRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                            chunk, c64(chunks));
      auto ifOp = scf::IfOp::create(b, loc, inRange, /*withElse=*/false);
      b.setInsertionPoint(ifOp.thenBlock()->getTerminator());
    }
    Value row = arith::DivUIOp::create(b, loc, chunk, c64(chunksPerRow));
    Value column = mul(arith::RemUIOp::create(b, loc, chunk, c64(chunksPerRow)),
                       c64(kVec));
    Value seqRow = arith::MinSIOp::create(b, loc, add(n0, row), lastRow);
    // Padded shared column: slice * 40 + column within the slice.
    Value slice = arith::DivUIOp::create(
        b, loc, column, c64(CudaCoreForward::kSliceWidth));
    Value within = arith::RemUIOp::create(
        b, loc, column, c64(CudaCoreForward::kSliceWidth));
    Value sharedColumn = toIndex(add(mul(slice, c64(kSharedSliceStride)), within));
    Value sharedRow = toIndex(row);
    Value kVal = loadGlobalVec(
        kBase, add(rowOffset(kStrides, batch, kvHead, seqRow), column));
    Value vVal = loadGlobalVec(
        vBase, add(rowOffset(vStrides, batch, kvHead, seqRow), column));
    vector::StoreOp::create(b, loc, kVal, kTile,
                            ValueRange{sharedRow, sharedColumn},
                            /*nontemporal=*/false, llvm::Align(16));
    vector::StoreOp::create(b, loc, vVal, vTile,
                            ValueRange{sharedRow, sharedColumn},
                            /*nontemporal=*/false, llvm::Align(16));
  }
}

void Builder::build(StringRef name, const ModRegions &modRegions) {
  OpBuilder::InsertionGuard guard(b);
  ForwardParams p = beginForwardKernel(name, threads);
  Value qBase = p.q, kBase = p.k, vBase = p.v, oBase = p.o, lseBase = p.lse;
  ValueRange qStrides = p.qStrides, kStrides = p.kStrides,
             vStrides = p.vStrides, oStrides = p.oStrides,
             lseStrides = p.lseStrides;
  Value seqlenQ = p.seqlenQ, seqlenK = p.seqlenK, scaleLog2 = p.scaleLog2;

  // ---- who am I ------------------------------------------------------------
  Value tid = threadIdX();
  BlockCoordinates at = blockCoordinates();
  Value head = at.head, batch = at.batch, queryBlock = at.queryBlock,
        kvHead = at.kvHead;
  Value rowInBlock = arith::DivUIOp::create(b, loc, tid, c64(slices));
  Value slice = arith::RemUIOp::create(b, loc, tid, c64(slices));
  Value row = add(mul(queryBlock, c64(cfg.blockM)), rowInBlock);
  Value lastQueryRow = arith::SubIOp::create(b, loc, seqlenQ, c64(1));
  Value loadRow = arith::MinSIOp::create(b, loc, row, lastQueryRow);
  Value column0 = mul(slice, c64(CudaCoreForward::kSliceWidth));

  // ---- Q slice into registers, pre-scaled into base 2 ----------------------
  SmallVector<Value> q;
  Value qRow = add(rowOffset(qStrides, batch, head, loadRow), column0);
  for (int64_t i = 0; i < vecsPerSlice; ++i) {
    Value raw = loadGlobalVec(qBase, add(qRow, c64(i * kVec)));
    Value wide = arith::ExtFOp::create(b, loc, vecF32, raw);
    q.push_back(arith::MulFOp::create(b, loc, wide, splat(scaleLog2)));
  }

  // ---- shared K and V tiles ----------------------------------------------
  Value shared = gpu::DynamicSharedMemoryOp::create(b, loc, rawSharedType);
  int64_t tileBytes = cfg.blockN * rowStride * dtypeBytes(spec.dtype);
  Value kTile = memref::ViewOp::create(b, loc, tileType, shared, cIdx(0),
                                       ValueRange{});
  Value vTile = memref::ViewOp::create(b, loc, tileType, shared,
                                       cIdx(tileBytes), ValueRange{});

  // ---- KV loop bounds: the tiles the causal mask and window leave -------
  KvTileRange range = kvTileRange(p, batch, head,
                                  mul(queryBlock, c64(cfg.blockM)),
                                  cfg.blockM, cfg.blockN);
  Value numTiles = range.count;
  // Q was pre-scaled into base 2.
  ScoreMods mods = ScoreMods::onBase2Scores(*this, modRegions, p);
  Value diagonal = add(row, diagonalOffset(p));
  Value modRow = arith::MinSIOp::create(b, loc, row, lastQueryRow);
  Value lastKey = sub(seqlenK, c64(1));

  const float negInf = -std::numeric_limits<float>::infinity();
  SmallVector<Value> init = {cF32(negInf), cF32(0.0f)};
  Value zeros = arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(vecF32, b.getF32FloatAttr(0.0f)));
  init.append(vecsPerSlice, zeros);

  Value sliceColumn = toIndex(mul(slice, c64(kSharedSliceStride)));
  auto loop = scf::ForOp::create(
      b, loc, cIdx(0), toIndex(numTiles), cIdx(1), init,
      [&](OpBuilder &, Location, Value tileIndex, ValueRange state) {
        Value n0 = mul(kvTile(range, toI64(tileIndex)), c64(cfg.blockN));
        Value maskModOn = maskModApplies(range, toI64(tileIndex));
        // Everyone is done reading the previous tile before it is replaced.
        gpu::BarrierOp::create(b, loc);
        emitTileLoad(kBase, vBase, kStrides, vStrides, batch, kvHead, n0,
                     seqlenK, tid, kTile, vTile);
        gpu::BarrierOp::create(b, loc);

        // S = Q K^T for this row's block_n columns, masked, in base 2.
        SmallVector<Value> scores;
        Value rowMax = state[0];
        for (int64_t j = 0; j < cfg.blockN; ++j) {
          Value jIdx = cIdx(j);
          Value partial;
          for (int64_t i = 0; i < vecsPerSlice; ++i) {
            Value column = arith::AddIOp::create(b, loc, sliceColumn,
                                                 cIdx(i * kVec));
            Value k = loadSharedVec(kTile, jIdx, column);
            partial = partial ? vector::FMAOp::create(b, loc, k, q[i], partial)
                                    .getResult()
                              : arith::MulFOp::create(b, loc, k, q[i])
                                    .getResult();
          }
          Value s = vector::ReductionOp::create(
              b, loc, vector::CombiningKind::ADD, partial);
          for (int64_t offset = slices / 2; offset >= 1; offset /= 2) {
            Value other = gpu::ShuffleOp::create(b, loc, s, offset, 32,
                                                 gpu::ShuffleMode::XOR)
                              .getShuffleResult();
            s = arith::AddFOp::create(b, loc, s, other);
          }
          Value column = add(n0, c64(j));
          Value modColumn = minS(column, lastKey);
          s = mods.score(s, batch, head, modRow, modColumn);
          Value valid = arith::CmpIOp::create(
              b, loc, arith::CmpIPredicate::slt, column, seqlenK);
          if (spec.hasRightBound())
            valid = arith::AndIOp::create(
                b, loc, valid,
                cmp(arith::CmpIPredicate::sle, column,
                    add(diagonal, c64(spec.rightExtent()))));
          if (spec.hasLeftBound())
            valid = arith::AndIOp::create(
                b, loc, valid,
                cmp(arith::CmpIPredicate::sge, column,
                    sub(diagonal, c64(spec.windowLeft))));
          if (mods.hasMaskMod())
            valid = arith::AndIOp::create(
                b, loc, valid,
                mods.keep(batch, head, modRow, modColumn, maskModOn));
          s = arith::SelectOp::create(b, loc, valid, s, cF32(negInf));
          scores.push_back(s);
          rowMax = arith::MaxNumFOp::create(b, loc, rowMax, s);
        }

        // Online softmax: rescale by exp2(m_old - m_new) once per tile. A
        // row whose scores are all masked so far keeps m = -inf; subtract 0
        // then, so no -inf - -inf appears.
        Value isEmpty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                                              rowMax, cF32(negInf));
        Value shift = arith::SelectOp::create(b, loc, isEmpty, cF32(0.0f), rowMax);
        Value alpha = exp2(arith::SubFOp::create(b, loc, state[0], shift));
        Value rowSum = arith::MulFOp::create(b, loc, state[1], alpha);
        SmallVector<Value> acc;
        Value alphaVec = splat(alpha);
        for (int64_t i = 0; i < vecsPerSlice; ++i)
          acc.push_back(
              arith::MulFOp::create(b, loc, state[2 + i], alphaVec));

        // O += P V.
        for (int64_t j = 0; j < cfg.blockN; ++j) {
          Value p = exp2(arith::SubFOp::create(b, loc, scores[j], shift));
          rowSum = arith::AddFOp::create(b, loc, rowSum, p);
          Value pVec = splat(p);
          Value jIdx = cIdx(j);
          for (int64_t i = 0; i < vecsPerSlice; ++i) {
            Value column = arith::AddIOp::create(b, loc, sliceColumn,
                                                 cIdx(i * kVec));
            Value v = loadSharedVec(vTile, jIdx, column);
            acc[i] = vector::FMAOp::create(b, loc, v, pVec, acc[i]);
          }
        }
        SmallVector<Value> next = {rowMax, rowSum};
        next.append(acc);
        scf::YieldOp::create(b, loc, next);
      });

  // ---- epilogue: O = acc / l, LSE = ln(l) + m * ln 2 -----------------------
  Value rowMax = loop.getResult(0), rowSum = loop.getResult(1);
  Value inverse = inverseOfSum(rowSum);
  Value rowInRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                           row, seqlenQ);
  auto store = scf::IfOp::create(b, loc, rowInRange, /*withElse=*/false);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(store.thenBlock()->getTerminator());
    Value oRow = add(rowOffset(oStrides, batch, head, row), column0);
    Value inverseVec = splat(inverse);
    for (int64_t i = 0; i < vecsPerSlice; ++i) {
      Value scaled =
          arith::MulFOp::create(b, loc, loop.getResult(2 + i), inverseVec);
      Value narrow = arith::TruncFOp::create(b, loc, vecElt, scaled);
      LLVM::StoreOp::create(b, loc, narrow,
                            globalAddress(oBase, elt, add(oRow, c64(i * kVec))),
                            /*alignment=*/16);
    }
    Value firstSlice = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                                             slice, c64(0));
    auto lseIf = scf::IfOp::create(b, loc, firstSlice, /*withElse=*/false);
    b.setInsertionPoint(lseIf.thenBlock()->getTerminator());
    Value lse = lseFromBase2(rowMax, rowSum);
    LLVM::StoreOp::create(
        b, loc, lse,
        globalAddress(lseBase, f32, rowOffset(lseStrides, batch, head, row)),
        /*alignment=*/4);
  }
  gpu::ReturnOp::create(b, loc);
}

} // namespace

void CudaCoreForward::emit(OpBuilder &builder, Location loc,
                    const AttentionSpec &spec, const TileConfig &config,
                    StringRef name, const ModRegions &mods) const {
  Builder(builder, loc, spec, config).build(name, mods);
}

} // namespace flashjit
