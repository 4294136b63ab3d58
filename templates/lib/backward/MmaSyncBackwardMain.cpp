//===- MmaSyncBackwardMain.cpp - the main backward kernel on mma.sync -----===//
// Why: FlashAttention-2's backward, parallel over key blocks: dK and dV of
// a key block are sums over every query row, so the block that owns the
// key block keeps them in registers for its whole life and writes them
// once; only dQ, a sum over key blocks, leaves the chip as f32 atomics.
//
// Work split: a block owns block_n key rows of one (batch, KV head); warp
// w owns 16 of them (one m16 tile), and at head dim 256 half of their dK
// and dV columns (MmaSyncBackward::kvColumnParts: the two warps of a key
// tile each compute half of its S^T and dP^T columns and exchange P^T and
// dS^T through shared memory). K and V load once. For each query head
// of the GQA group and each query block of block_m rows that the causal
// mask and the window leave visible to some key of the block:
//   S^T  = K Q^T       mma.sync, the warp's K rows as A, Q tile as B;
//   P^T  = 2^(S^T c - LSE log2 e)   (c = scale log2 e; masked scores -inf);
//   dP^T = V dO^T      as S^T with V and dO;
//   dS^T = P^T (dP^T - D)           (D per query column, from preprocess);
//   dV  += P^T dO      the accumulators of P^T are the A fragments of a
//   dK  += dS^T Q      k16 step over queries (as P in the forward's P V);
//   dS^T -> shared memory, one barrier, then dQ = dS K: warp w takes a
//   16-row query tile and a column range, A by ldmatrix.trans of dS^T, and
//   adds its f32 results into the workspace with atomics.
// dK is scaled by the softmax scale once at the end; dQ's scale is applied
// by the convert kernel. Query rows past seqlen_q have LSE +inf (P = 0) and
// zero dO; key rows past seqlen_k are masked; a row whose forward LSE is
// -inf (it saw no key) gets P = 0.
//
// Deterministic variant (mma_sync_bwd_det): the blocks adding into one
// query block of dQ take turns, highest key block first
// (BackwardDqTurns.cpp); nothing else changes.
//
// Steps: one loop over (query head of the group, visible query block).
// stages = 1 loads a step's Q, dO, LSE and D, waits, then computes;
// stages = 2 starts the next step's loads into the other buffer first, so
// they stream in during this step's products.
//
// Shared layout: K [block_n][D + 8], V [block_n][D + 8], then per stage
// Q [block_m][D + 8], dO [block_m][D + 8] (element type) and the query
// rows' LSE and D (f32 [block_m] each), then dS^T [block_n][block_m + 8].
#include "BackwardBuilder.h"

#include "flashjit/Templates/MmaSyncBackward.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <cmath>
#include <limits>
#include <optional>

using namespace mlir;

namespace flashjit::backward {

using Pred = arith::CmpIPredicate;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kAcc = mma_sync::kAccPerTile;
} // namespace

void MainKernelBuilder::storeShared(Value value, Value offset) {
  LLVM::StoreOp::create(b, loc, value, sharedAddress(toI32(offset)),
                        /*alignment=*/4);
}

Value MainKernelBuilder::loadShared(Type type, Value offset) {
  return LLVM::LoadOp::create(b, loc, type, sharedAddress(toI32(offset)),
                              /*alignment=*/4);
}

SmallVector<Value> MainKernelBuilder::rowTimesColumns(Value aLane,
                                                      Value bLane,
                                                      int64_t nTiles) {
  SmallVector<Value> acc(nTiles * kAcc, cF32(0.0f));
  for (int64_t ks = 0; ks < d / 16; ++ks) {
    SmallVector<SmallVector<Value, 4>> a = {
        ldmatrix(toI32(add(aLane, c64(ks * 16 * eltBytes))), false)};
    for (int64_t np = 0; np < nTiles / 2; ++np) {
      auto bFrag = ldmatrix(
          toI32(add(bLane, c64((np * 16 * rowElems + ks * 16) * eltBytes))),
          false);
      mmaTwoTiles(a, bFrag, acc, [&](int64_t, int64_t half) {
        return (2 * np + half) * kAcc;
      });
    }
  }
  return acc;
}

void MainKernelBuilder::accumulateOverQueries(
    function_ref<SmallVector<Value, 4>(int64_t)> aOf, Value bLaneTrans,
    int64_t columns, MutableArrayRef<Value> acc) {
  for (int64_t kk = 0; kk < cfg.blockM / 16; ++kk) {
    SmallVector<SmallVector<Value, 4>> a = {aOf(kk)};
    for (int64_t dp = 0; dp < columns / 16; ++dp) {
      auto bFrag = ldmatrix(
          toI32(add(bLaneTrans,
                    c64((kk * 16 * rowElems + dp * 16) * eltBytes))),
          true);
      mmaTwoTiles(a, bFrag, acc, [&](int64_t, int64_t half) {
        return (2 * dp + half) * kAcc;
      });
    }
  }
}

void MainKernelBuilder::buildMain(StringRef name, const ModRegions &mods) {
  std::string smemName = (name + "_smem").str();
  LLVM::GlobalOp::create(b, loc, LLVM::LLVMArrayType::get(b.getI8Type(), 0),
                         /*isConstant=*/false, LLVM::Linkage::External,
                         smemName, Attribute(), /*alignment=*/128,
                         /*addrSpace=*/3);
  OpBuilder::InsertionGuard funcGuard(b);
  Params p = beginMainKernel(*this, name, threads,
                             MmaSyncBackward::isDeterministic(cfg));
  BackwardMods tileMods(*this, mods, p);
  smemBase = LLVM::AddressOfOp::create(b, loc, sharedPtr, smemName);
  tid = threadIdX();
  const int64_t bM = cfg.blockM, bN = cfg.blockN;
  Value keyBlocks = divU(add(p.seqlenK, c64(bN - 1)), bN);
  Value keyBlock =
      p.turns ? dqTurnKeyBlock(*this, keyBlocks)
              : toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::x));
  Value kvHead = toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::y));
  Value batch = toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::z));

  const int64_t nTiles = bM / 8;  // n8 tiles of S^T: query columns
  // dK and dV columns of a warp (kvColumnParts), in n8 tiles.
  const int64_t kvParts = MmaSyncBackward::kvColumnParts(spec);
  const int64_t kvColumns = d / kvParts;
  const int64_t dTiles = kvColumns / 8;
  const int64_t rowBytes = rowElems * eltBytes;
  const int64_t dsRowElems = bM + MmaSyncForward::kRowPadding;
  // K, V; then `stages` buffers of Q, dO, LSE and D; then dS^T.
  const int64_t kOff = 0, vOff = bN * rowBytes;
  const int64_t qOff = 2 * bN * rowBytes;
  const int64_t doOff = qOff + bM * rowBytes;
  const int64_t lseOff = doOff + bM * rowBytes;
  const int64_t dOff = lseOff + bM * 4;
  const int64_t stageBytes = 2 * bM * rowBytes + 2 * bM * 4;
  const int64_t dsOff = qOff + cfg.stages * stageBytes;
  // kvParts > 1: P^T [block_n][block_m + 8] after dS^T.
  const int64_t pOff = dsOff + bN * dsRowElems * eltBytes;
  // dQ = dS K: warp w takes query m tile w % qTiles, columns
  // [part * dCols, part * dCols + dCols) with part = w / qTiles.
  const int64_t qTiles = bM / 16;
  const int64_t dCols = d / (cfg.warps / qTiles);

  Value lane = remU(tid, 32), warp = divU(tid, 32);
  Value quadRow = divU(lane, 4);
  Value quadCol = mul(remU(lane, 4), c64(2));
  Value matrix = divU(lane, 8), matrixRow = remU(lane, 8);
  // The warp's key tile and (kvParts > 1) its part of dK and dV's columns.
  Value warpKey0 = mul(warp, c64(16)), kvColumn0 = c64(0), kvPart;
  if (kvParts > 1) {
    const int64_t keyTiles = bN / 16;
    warpKey0 = mul(remU(warp, keyTiles), c64(16));
    kvPart = divU(warp, keyTiles);
    kvColumn0 = mul(kvPart, c64(kvColumns));
  }
  Value n0 = mul(keyBlock, c64(bN));
  Value diagonal = spec.causalAlign == CausalAlign::BottomRight
                       ? sub(p.seqlenK, p.seqlenQ)
                       : c64(0);
  WindowDiagonals window = WindowDiagonals::of(*this, diagonal);

  // ---- K and V of the block, once ----------------------------------------
  copyTile(p.k, p.kStrides, batch, kvHead, n0, p.seqlenK, bN, c64(kOff));
  copyTile(p.v, p.vStrides, batch, kvHead, n0, p.seqlenK, bN, c64(vOff));
  NVVM::CpAsyncCommitGroupOp::create(b, loc);
  NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);

  // Lane addresses (bytes). A from the warp's 16 rows of a [block_n][...]
  // tile of `tileRowElems` elements per row (K, V; P^T, dS^T): matrices
  // (rows 0-7 | 8-15) x (k 0-7 | 8-15).
  auto rowsA = [&](int64_t tile, int64_t tileRowElems) {
    return add(c64(tile),
               mul(add(mul(add(warpKey0, remU(lane, 16)), c64(tileRowElems)),
                       mul(divU(lane, 16), c64(8))),
                   c64(eltBytes)));
  };
  // B (not transposed) from a [block_m][D] tile: two n8 tiles of one k16
  // step, (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
  auto columnsB = [&](int64_t tile) {
    return add(c64(tile),
               mul(add(mul(add(matrixRow, mul(divU(matrix, 2), c64(8))),
                           c64(rowElems)),
                       mul(remU(matrix, 2), c64(8))),
                   c64(eltBytes)));
  };
  // B by ldmatrix.trans from a [k][n] tile: (k 0-7, n 0-7), (k 8-15, n 0-7),
  // (k 0-7, n 8-15), (k 8-15, n 8-15).
  auto transposedB = [&](int64_t tile) {
    return add(c64(tile),
               mul(add(mul(add(matrixRow, mul(remU(matrix, 2), c64(8))),
                           c64(rowElems)),
                       mul(divU(matrix, 2), c64(8))),
                   c64(eltBytes)));
  };
  Value kA = rowsA(kOff, rowElems), vA = rowsA(vOff, rowElems);
  Value qB = columnsB(qOff), dOB = columnsB(doOff);
  Value qT = transposedB(qOff), dOT = transposedB(doOff);
  if (kvParts > 1) {
    qT = add(qT, mul(kvColumn0, c64(eltBytes)));
    dOT = add(dOT, mul(kvColumn0, c64(eltBytes)));
  }
  // dQ's operands: A = dS (m = query, k = key) by ldmatrix.trans of dS^T
  // [key][query] (matrix i: keys (i / 2) * 8.., queries (i % 2) * 8..),
  // this warp's query tile; B = K (k = key, n = d) transposed, this warp's
  // columns.
  Value dqTile = remU(warp, qTiles);
  Value dqColumn0 = mul(divU(warp, qTiles), c64(dCols));
  Value dsA = add(
      c64(dsOff),
      mul(add(mul(add(mul(divU(matrix, 2), c64(8)), matrixRow),
                  c64(dsRowElems)),
              add(mul(remU(matrix, 2), c64(8)), mul(dqTile, c64(16)))),
          c64(eltBytes)));
  Value kT = add(transposedB(kOff), mul(dqColumn0, c64(eltBytes)));

  // ---- the steps: (query head of the group, visible query block) ---------
  BackwardSteps plan =
      BackwardSteps::of(*this, p, batch, kvHead, n0, diagonal, bM, bN);
  Value queryBlocks = plan.queryBlocks, steps = plan.count;
  const float log2e = static_cast<float>(M_LOG2E);

  SmallVector<Value> init(2 * dTiles * kAcc, cF32(0.0f));
  auto headOf = [&](Value t) { return plan.head(*this, t); };
  auto firstRowOf = [&](Value t) { return plan.firstRow(*this, t); };
  // Starts the cp.async of step t's Q, dO, LSE and D into the buffer at
  // byte offset `buffer`; rows past seqlen_q read as zeros (their LSE and
  // D too: such columns are masked).
  auto loadStep = [&](Value t, Value buffer) {
    Value head = headOf(t), m0 = firstRowOf(t);
    copyTile(p.q, p.qStrides, batch, head, m0, p.seqlenQ, bM,
             add(c64(qOff), buffer));
    copyTile(p.dO, p.dOStrides, batch, head, m0, p.seqlenQ, bM,
             add(c64(doOff), buffer));
    OpBuilder::InsertionGuard g(b);
    auto owner = scf::IfOp::create(b, loc, cmp(Pred::slt, tid, c64(bM)),
                                   /*withElse=*/false);
    b.setInsertionPoint(owner.thenBlock()->getTerminator());
    auto rowAt = [&](int64_t to) {
      return sharedAddress(toI32(add(add(c64(to), buffer), mul(tid, c64(4)))));
    };
    copyRowStats(*this, p, batch, head, m0, tid, rowAt(lseOff), rowAt(dOff));
  };

  // One step: returns dK, dV accumulators.
  auto queryBlockStep = [&](Value t, ValueRange acc) {
    Value head = headOf(t), m0 = firstRowOf(t);
    SmallVector<Value> dkAcc(acc.begin(), acc.begin() + dTiles * kAcc);
    SmallVector<Value> dvAcc(acc.begin() + dTiles * kAcc, acc.end());
    // Every warp is done with the previous step's buffers and dS^T.
    gpu::BarrierOp::create(b, loc);
    Value buffer = c64(0);
    if (cfg.stages == 1) {
      loadStep(t, buffer);
      NVVM::CpAsyncCommitGroupOp::create(b, loc);
      NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
    } else {
      // Step t + 1 streams into the other buffer during this step.
      buffer = mul(remU(t, 2), c64(stageBytes));
      {
        OpBuilder::InsertionGuard g(b);
        Value next = add(t, c64(1));
        auto more = scf::IfOp::create(b, loc, cmp(Pred::slt, next, steps),
                                      /*withElse=*/false);
        b.setInsertionPoint(more.thenBlock()->getTerminator());
        loadStep(next, mul(sub(c64(1), remU(t, 2)), c64(stageBytes)));
      }
      NVVM::CpAsyncCommitGroupOp::create(b, loc);
      NVVM::CpAsyncWaitGroupOp::create(b, loc, 1);
    }
    gpu::BarrierOp::create(b, loc);
    Value qBt = add(qB, buffer), dOBt = add(dOB, buffer);
    Value qTt = add(qT, buffer), dOTt = add(dOT, buffer);
    Value lseAt = add(c64(lseOff), buffer), dAt = add(c64(dOff), buffer);
    // The query columns of S^T and dP^T this warp computes: all block_m,
    // or (kvParts > 1) its part's, from column sCol0 (query mS) on.
    const int64_t sTiles = nTiles / kvParts, sCols = bM / kvParts;
    Value mS = m0, sCol0, qBs = qBt, dOBs = dOBt;
    if (kvParts > 1) {
      sCol0 = mul(kvPart, c64(sCols));
      mS = add(m0, sCol0);
      qBs = add(qBt, mul(sCol0, c64(rowBytes)));
      dOBs = add(dOBt, mul(sCol0, c64(rowBytes)));
    }

    // S^T = K Q^T (and its score_mod), masked where the tile crosses
    // seqlen_k or a bound of the causal mask or the window, and everywhere
    // with a mask_mod.
    SmallVector<Value> s = rowTimesColumns(kA, qBs, sTiles);
    auto keyOf = [&](int64_t h) {
      return add(add(n0, warpKey0), add(quadRow, c64(8 * h)));
    };
    BackwardMods::Tile modTile{batch, head, {keyOf(0), keyOf(1)},
                               add(mS, quadCol)};
    SmallVector<Value> factors = tileMods.applyScoreMod(s, modTile);
    Value needMask = arith::OrIOp::create(
        b, loc, cmp(Pred::sgt, add(n0, c64(bN)), p.seqlenK),
        cmp(Pred::sgt, add(m0, c64(bM)), p.seqlenQ));
    needMask = window.orCrossed(*this, needMask, n0, bN, m0, bM);
    // The mask_mod applies everywhere, or on a block mask's partial blocks.
    Value maskModOn = plan.maskModApplies(*this, t);
    needMask = tileMods.orMaskModNeeded(needMask, maskModOn);
    s = maskWhere(*this, needMask, s, [&] {
      SmallVector<Value> out(s.size());
      Value columns = queryColumnsBelow(*this, p.seqlenQ, mS, quadCol, sCols);
      for (int64_t h = 0; h < 2; ++h) {
        Value key = keyOf(h);
        Value keyOk = cmp(Pred::slt, key, p.seqlenK);
        // Column c of the tile (query mS + quadCol + c) sees the key iff
        // need <= c <= limit (WindowDiagonals::columns).
        auto [need, limit] =
            window.columns(*this, sub(key, add(mS, quadCol)), sCols);
        for (int64_t nt = 0; nt < sTiles; ++nt)
          for (int64_t e = 0; e < 2; ++e) {
            int64_t i = nt * kAcc + 2 * h + e;
            Value valid = arith::AndIOp::create(
                b, loc, keyOk, cmp(Pred::slt, c32(nt * 8 + e), columns));
            if (need)
              valid = arith::AndIOp::create(
                  b, loc, valid, cmp(Pred::sge, c32(nt * 8 + e), need));
            if (limit)
              valid = arith::AndIOp::create(
                  b, loc, valid, cmp(Pred::sle, c32(nt * 8 + e), limit));
            if (tileMods.hasMaskMod())
              valid = arith::AndIOp::create(
                  b, loc, valid, tileMods.keep(modTile, i, maskModOn));
            out[i] = arith::SelectOp::create(b, loc, valid, s[i],
                                             cF32(-kInf));
          }
      }
      return out;
    });

    // P^T, dP^T and dS^T; LSE and D per query column.
    SmallVector<Value> negLse(sTiles * 2), dCol(sTiles * 2);
    for (int64_t nt = 0; nt < sTiles; ++nt)
      for (int64_t e = 0; e < 2; ++e) {
        Value column = add(c64(nt * 8 + e), quadCol);
        if (sCol0)
          column = add(column, sCol0);
        // A forward LSE of -inf (the row saw no key) is +inf: P = 0.
        Value lse = loadShared(f32, add(lseAt, mul(column, c64(4))));
        Value empty = arith::CmpFOp::create(
            b, loc, arith::CmpFPredicate::OEQ, lse, cF32(-kInf));
        negLse[nt * 2 + e] = arith::MulFOp::create(
            b, loc, arith::SelectOp::create(b, loc, empty, cF32(kInf), lse),
            cF32(-log2e));
        dCol[nt * 2 + e] = loadShared(f32, add(dAt, mul(column, c64(4))));
      }
    SmallVector<Value> prob(s.size());
    for (int64_t nt = 0; nt < sTiles; ++nt)
      for (int64_t r = 0; r < kAcc; ++r) {
        int64_t i = nt * kAcc + r;
        prob[i] = exp2(LLVM::FMAOp::create(b, loc, s[i], p.scaleLog2,
                                           negLse[nt * 2 + r % 2]));
      }
    SmallVector<Value> dp = rowTimesColumns(vA, dOBs, sTiles);
    SmallVector<Value> ds(s.size());
    for (int64_t nt = 0; nt < sTiles; ++nt)
      for (int64_t r = 0; r < kAcc; ++r) {
        int64_t i = nt * kAcc + r;
        ds[i] = arith::MulFOp::create(
            b, loc, prob[i],
            arith::SubFOp::create(b, loc, dp[i], dCol[nt * 2 + r % 2]));
        if (!factors.empty())
          ds[i] = arith::MulFOp::create(b, loc, ds[i], factors[i]);
      }
    auto pack = [&](ArrayRef<Value> x) {
      SmallVector<Value> packed(sTiles * 2);
      for (int64_t nt = 0; nt < sTiles; ++nt)
        for (int64_t h = 0; h < 2; ++h)
          packed[nt * 2 + h] =
              packPair(x[nt * kAcc + 2 * h], x[nt * kAcc + 2 * h + 1]);
      return packed;
    };
    SmallVector<Value> probPacked = pack(prob), dsPacked = pack(ds);

    // The A operand of a k16 step over the queries from packed pairs.
    auto fromPacked = [](ArrayRef<Value> packed) {
      return [packed](int64_t kk) {
        const Value *t0 = &packed[(2 * kk) * 2];
        const Value *t1 = &packed[(2 * kk + 1) * 2];
        return SmallVector<Value, 4>{t0[0], t0[1], t1[0], t1[1]};
      };
    };
    // This warp's columns of X^T (packed pairs) into the [block_n][block_m
    // + 8] tile at byte offset `tile`.
    auto storeColumns = [&](ArrayRef<Value> packed, int64_t tile) {
      for (int64_t nt = 0; nt < sTiles; ++nt)
        for (int64_t h = 0; h < 2; ++h) {
          Value row = add(warpKey0, add(quadRow, c64(8 * h)));
          Value column = add(quadCol, c64(nt * 8));
          if (sCol0)
            column = add(column, sCol0);
          Value offset = add(c64(tile), mul(add(mul(row, c64(dsRowElems)),
                                                column),
                                            c64(eltBytes)));
          storeShared(packed[nt * 2 + h], offset);
        }
    };
    if (kvParts == 1) {
      // dV += P^T dO, dK += dS^T Q from registers; dS^T to shared memory
      // for dQ.
      accumulateOverQueries(fromPacked(probPacked), dOTt, kvColumns, dvAcc);
      accumulateOverQueries(fromPacked(dsPacked), qTt, kvColumns, dkAcc);
      storeColumns(dsPacked, dsOff);
      gpu::BarrierOp::create(b, loc);
    } else {
      // Each warp of a key tile has half of P^T and dS^T's columns: both
      // go through shared memory, and each warp takes all of them as A
      // for its half of dV's and dK's columns.
      storeColumns(probPacked, pOff);
      storeColumns(dsPacked, dsOff);
      gpu::BarrierOp::create(b, loc);
      auto fromShared = [&](int64_t tile) {
        Value lane0 = rowsA(tile, dsRowElems);
        return [this, lane0](int64_t kk) {
          return ldmatrix(toI32(add(lane0, c64(kk * 16 * eltBytes))),
                          /*transpose=*/false);
        };
      };
      accumulateOverQueries(fromShared(pOff), dOTt, kvColumns, dvAcc);
      accumulateOverQueries(fromShared(dsOff), qTt, kvColumns, dkAcc);
    }

    // dQ (this warp's 16 query rows x dCols columns) += dS K, then added
    // into the workspace.
    SmallVector<Value> dq(dCols / 8 * kAcc, cF32(0.0f));
    for (int64_t ks = 0; ks < bN / 16; ++ks) {
      SmallVector<SmallVector<Value, 4>> a = {ldmatrix(
          toI32(add(dsA, c64(ks * 16 * dsRowElems * eltBytes))), true)};
      for (int64_t dp2 = 0; dp2 < dCols / 16; ++dp2) {
        auto bFrag = ldmatrix(
            toI32(add(kT, c64((ks * 16 * rowElems + dp2 * 16) * eltBytes))),
            true);
        mmaTwoTiles(a, bFrag, dq, [&](int64_t, int64_t half) {
          return (2 * dp2 + half) * kAcc;
        });
      }
    }
    std::optional<DqTurn> turn;
    if (p.turns) {
      turn = dqTurn(*this, p, batch, head, divU(m0, bM), queryBlocks,
                    keyBlock, keyBlocks, diagonal, bM, bN);
      waitForDqTurn(*this, *turn, tid,
                    [&] { gpu::BarrierOp::create(b, loc); });
    }
    for (int64_t h = 0; h < 2; ++h) {
      Value row = add(add(m0, mul(dqTile, c64(16))), add(quadRow, c64(8 * h)));
      OpBuilder::InsertionGuard g(b);
      auto inRange = scf::IfOp::create(
          b, loc, cmp(Pred::slt, row, p.seqlenQ), /*withElse=*/false);
      b.setInsertionPoint(inRange.thenBlock()->getTerminator());
      Value base = add(dqAccumRow(*this, DqAccumLayout::of(spec, cfg),
                                  p.seqlenQ, batch, head, row),
                       add(dqColumn0, quadCol));
      Value address = globalAddress(p.dqAccum, f32, base);
      for (int64_t dt = 0; dt < dCols / 8; ++dt)
        for (int64_t e = 0; e < 2; ++e)
          LLVM::AtomicRMWOp::create(
              b, loc, LLVM::AtomicBinOp::fadd,
              globalAddress(address, f32, c64(dt * 8 + e)),
              dq[dt * kAcc + 2 * h + e], LLVM::AtomicOrdering::monotonic);
    }
    if (turn)
      passDqTurn(*this, *turn, tid,
                 [&] { gpu::BarrierOp::create(b, loc); });
    SmallVector<Value> next(dkAcc);
    next.append(dvAcc.begin(), dvAcc.end());
    return next;
  };

  SmallVector<Value> result;
  {
    if (cfg.stages == 2) {
      // The first step's loads, before the loop.
      OpBuilder::InsertionGuard g(b);
      auto any = scf::IfOp::create(b, loc, cmp(Pred::sgt, steps, c64(0)),
                                   /*withElse=*/false);
      b.setInsertionPoint(any.thenBlock()->getTerminator());
      loadStep(c64(0), c64(0));
    }
    if (cfg.stages == 2)
      NVVM::CpAsyncCommitGroupOp::create(b, loc);
    auto loop = scf::ForOp::create(
        b, loc, cIdx(0), toIndex(steps), cIdx(1), init,
        [&](OpBuilder &, Location, Value step, ValueRange state) {
          scf::YieldOp::create(b, loc, queryBlockStep(toI64(step), state));
        });
    result.assign(loop.getResults().begin(), loop.getResults().end());
    // No copy is left in flight at the end.
    NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
  }

  // ---- epilogue: dK = scale * acc, dV, rows below seqlen_k ---------------
  // Staged in K's and V's tiles once every warp is done with them (the dQ
  // products read all of K), then copied out in 16-byte chunks
  // (storeKeyRows).
  gpu::BarrierOp::create(b, loc);
  storeKeyRows(
      *this, p, batch, kvHead, n0, bN, add(warpKey0, quadRow),
      divU(kvColumn0, 8), quadCol,
      ArrayRef<Value>(result).take_front(dTiles * kAcc),
      ArrayRef<Value>(result).drop_front(dTiles * kAcc),
      [&](Value offset) { return sharedAddress(offset); }, kOff, vOff, tid,
      cfg.warps * 32);
  gpu::ReturnOp::create(b, loc);
}

} // namespace flashjit::backward
