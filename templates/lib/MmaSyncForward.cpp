//===- MmaSyncForward.cpp - IR builder of the mma_sync template -----------===//
// Why: emits the tensor-core FlashAttention-2 forward kernel as a gpu.func
// of upstream dialects (gpu, scf, arith, vector, llvm, nvvm), so the
// standard NVVM lowering turns it into PTX with mma.sync, ldmatrix and
// cp.async.
//
// Work split: a block owns block_m query rows of one (batch, head); each
// warp owns 16 or 32 of them (one or two m16 tiles). With one tile the Q
// fragments stay in registers for the whole kernel; with two, each K/V
// fragment read from shared memory feeds two mma.sync (half the shared
// traffic per FLOP) and Q is re-read at each k step. Per KV tile:
//   S = Q K^T      mma.sync m16n8k16, K fragments by ldmatrix from shared;
//   softmax        per row: max by two xor shuffles inside a quad, scale
//                  folded into one multiply, p = ex2(s - m), the running
//                  sum kept per thread and reduced once at the end;
//   O += P V       the S accumulators of two n8 tiles are exactly the A
//                  fragment of one k16 step, so P never leaves registers;
//                  V fragments by ldmatrix.trans.
// Pipeline, stages = 2: K and V tiles are double-buffered. Q, K[0] and V[0]
// load first; iteration j waits for its tile, passes one barrier, starts
// the cp.async of tile j+1 into the other buffer and computes on tile j, so
// a tile's loads overlap a whole tile of compute. stages = 1: one K and one
// V buffer (less shared memory, fewer live registers); V[j] loads while S
// computes and K[j+1] while P V computes, two barriers per tile.
// Masks: only tiles that cross the sequence end or the causal diagonal run
// the per-element selects; causal tiles past the diagonal are never visited.
//
// Shared layout: Q tile [block_m][D + 8], then two buffers of a K tile
// [block_n][D + 8] and a V tile [block_n][D + 8]; the 8 elements of padding
// make the 8 row addresses of each ldmatrix fall in distinct banks.
#include "flashjit/Templates/MmaSyncForward.h"

#include "FragmentSoftmax.h"
#include "MmaSyncBuilder.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <limits>

using namespace mlir;

namespace flashjit::mma_sync {

void Builder::build(StringRef name, const ModRegions &mods) {
  // Dynamic shared memory: one external array per kernel.
  std::string smemName = (name + "_smem").str();
  LLVM::GlobalOp::create(b, loc,
                         LLVM::LLVMArrayType::get(b.getI8Type(), 0),
                         /*isConstant=*/false, LLVM::Linkage::External,
                         smemName, Attribute(), /*alignment=*/128,
                         /*addrSpace=*/3);
  OpBuilder::InsertionGuard funcGuard(b);
  ForwardParams p = beginForwardKernel(name, threads);
  smemBase = LLVM::AddressOfOp::create(b, loc, sharedPtr, smemName);
  tid = threadIdX();
  BlockCoordinates at = blockCoordinates();
  // Varlen: the block's sequence, or nothing past its last query block.
  scf::IfOp varlenGuard;
  if (spec.varlen)
    varlenGuard = beginVarlenSequence(p, at, cfg.blockM);

  const int64_t mTiles = cfg.blockM / (cfg.warps * 16); // m16 tiles per warp
  const int64_t nTiles = cfg.blockN / 8;   // n8 score tiles per row block
  const int64_t dTiles = d / 8;            // n8 output tiles
  const int64_t qSteps = d / 16;           // k16 steps of Q K^T
  const int64_t rowBytes = rowElems * eltBytes;
  const int64_t qTileOffset = 0;
  // Two buffers, each a K tile then a V tile, after the Q tile.
  const int64_t kTileOffset = cfg.blockM * rowBytes;
  const int64_t vTileOffset = kTileOffset + cfg.blockN * rowBytes;
  const int64_t bufferBytes = 2 * cfg.blockN * rowBytes;
  const bool doubleBuffered = cfg.stages == 2;
  // Register state per thread: for each (m tile, row half h) a running max
  // and a partial sum, then the O accumulators [m tile][d tile][4].
  const int64_t rowsState = mTiles * 2;
  auto maxAt = [&](int64_t mt, int64_t h) { return mt * 2 + h; };
  auto sumAt = [&](int64_t mt, int64_t h) { return rowsState + mt * 2 + h; };

  Value lane = remU(tid, 32), warp = divU(tid, 32);
  Value quadRow = divU(lane, 4);            // g: row within an 8-row half
  Value quadCol = mul(remU(lane, 4), c64(2)); // 2t: first column of a pair
  Value m0 = mul(at.queryBlock, c64(cfg.blockM));
  Value warpRow0 = mul(warp, c64(16 * mTiles)); // within the block
  // The query row of accumulator row half h of m tile mt of this thread.
  auto myRow = [&](int64_t mt, int64_t h) {
    return add(add(m0, warpRow0), add(quadRow, c64(16 * mt + 8 * h)));
  };

  // KV tiles to visit: those the causal mask and the window leave
  // visible to some row of the block.
  KvTileRange range =
      kvTileRange(p, at.batch, at.head, m0, cfg.blockM, cfg.blockN);
  Value numTiles = range.count;
  // The first key of the j-th tile visited.
  auto keyOf = [&](Value j) { return mul(kvTile(range, j), c64(cfg.blockN)); };
  Value firstKey = keyOf(c64(0));

  // ---- prologue: Q and K[0] into shared ------------------------------------
  copyTile(p.q, p.qStrides, at.batch, at.head, m0, p.seqlenQ, cfg.blockM,
           c64(qTileOffset));
  copyKvTile(p, p.k, p.kStrides, at.batch, at.kvHead, firstKey, cfg.blockN,
             c64(kTileOffset));
  if (doubleBuffered)
    copyKvTile(p, p.v, p.vStrides, at.batch, at.kvHead, firstKey, cfg.blockN,
               c64(vTileOffset));
  NVVM::CpAsyncCommitGroupOp::create(b, loc);
  NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
  gpu::BarrierOp::create(b, loc);

  // Per-lane ldmatrix row addresses (bytes). x4 matrices, lane l gives a
  // row of matrix l / 8.
  Value matrix = divU(lane, 8), matrixRow = remU(lane, 8);
  // Q (A operand): matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15).
  Value qLane = add(c64(qTileOffset),
                    mul(add(mul(add(warpRow0, remU(lane, 16)), c64(rowElems)),
                            mul(divU(lane, 16), c64(8))),
                        c64(eltBytes)));
  // K (B operand of S): matrices (keys 0-7, k 0-7), (keys 0-7, k 8-15),
  // (keys 8-15, k 0-7), (keys 8-15, k 8-15): two n8 tiles of one k16 step.
  Value kLane = add(c64(kTileOffset),
                    mul(add(mul(add(matrixRow, mul(divU(matrix, 2), c64(8))),
                                c64(rowElems)),
                            mul(remU(matrix, 2), c64(8))),
                        c64(eltBytes)));
  // V (B operand of O, transposed): matrices (keys 0-7, d 0-7),
  // (keys 8-15, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 8-15).
  Value vLane = add(c64(vTileOffset),
                    mul(add(mul(add(matrixRow, mul(remU(matrix, 2), c64(8))),
                                c64(rowElems)),
                            mul(divU(matrix, 2), c64(8))),
                        c64(eltBytes)));
  auto loadQ = [&](int64_t mt, int64_t ks) {
    return ldmatrix(
        laneAt(qLane, (mt * 16 * rowElems + ks * 16) * eltBytes), false);
  };
  // One m tile per warp keeps its Q fragments in registers for the whole
  // kernel; two re-read them from shared memory at each k step (the
  // registers go to the second tile's accumulators instead).
  SmallVector<SmallVector<Value, 4>> qFrags;
  if (mTiles == 1)
    for (int64_t ks = 0; ks < qSteps; ++ks)
      qFrags.push_back(loadQ(0, ks));

  // ---- the loop over KV tiles --------------------------------------------
  const float negInf = -std::numeric_limits<float>::infinity();
  SmallVector<Value> init(rowsState, cF32(negInf));
  init.append(rowsState, cF32(0.0f));
  init.append(mTiles * dTiles * kAccPerTile, cF32(0.0f));
  const int64_t accBase = 2 * rowsState;
  FragmentSoftmax softmax(*this, mTiles, nTiles);
  ScoreMods scoreMods = ScoreMods::onDotProducts(*this, mods, p);
  softmax.fixReference(scoreMods);
  ScoreRules rules{p.seqlenQ, p.seqlenK, diagonalOffset(p),
                   spec.hasMods() ? &scoreMods : nullptr, at.batch, at.head};

  auto loop = scf::ForOp::create(
      b, loc, cIdx(0), toIndex(numTiles), cIdx(1), init,
      [&](OpBuilder &, Location, Value tileIndex, ValueRange state) {
        Value j = toI64(tileIndex);
        Value n0 = keyOf(j);
        rules.maskModOn = maskModApplies(range, j);
        Value kTile = kLane, vTile = vLane;
        auto copyNextK = [&](Value offset) {
          OpBuilder::InsertionGuard g(b);
          Value nextTile = add(j, c64(1));
          auto more = scf::IfOp::create(
              b, loc, cmp(Pred::slt, nextTile, numTiles), /*withElse=*/false);
          b.setInsertionPoint(more.thenBlock()->getTerminator());
          Value n1 = spec.isBlockSparse() ? keyOf(nextTile)
                                          : add(n0, c64(cfg.blockN));
          copyKvTile(p, p.k, p.kStrides, at.batch, at.kvHead, n1, cfg.blockN,
                     add(c64(kTileOffset), offset));
          if (doubleBuffered)
            copyKvTile(p, p.v, p.vStrides, at.batch, at.kvHead, n1, cfg.blockN,
                       add(c64(vTileOffset), offset));
        };
        if (doubleBuffered) {
          // K[j] and V[j] have landed, and every warp is done with tile
          // j-1, whose buffer now receives tile j+1: it streams in during
          // the whole of this tile's S, softmax and P V. One barrier.
          NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
          gpu::BarrierOp::create(b, loc);
          Value parity = remU(j, 2);
          copyNextK(mul(sub(c64(1), parity), c64(bufferBytes)));
          Value bufferOffset = mul(parity, c64(bufferBytes));
          kTile = add(kLane, bufferOffset);
          vTile = add(vLane, bufferOffset);
        } else {
          // One buffer: V[j] streams in while S and the softmax compute.
          copyKvTile(p, p.v, p.vStrides, at.batch, at.kvHead, n0,
                     cfg.blockN, c64(vTileOffset));
        }
        NVVM::CpAsyncCommitGroupOp::create(b, loc);

        // S = Q K^T.
        SmallVector<Value> s = scoreTile(
            [&](int64_t mt, int64_t ks) {
              return mTiles == 1 ? qFrags[ks] : loadQ(mt, ks);
            },
            kTile, mTiles, nTiles);

        // P packed in pairs of the element type: packed[(mt * nTiles + nt)
        // * 2 + h] holds row half h of score tile nt.
        SmallVector<Value> next(state.begin(), state.end());
        SmallVector<Value> packed(mTiles * nTiles * 2);
        SmallVector<Value> acc;
        if (!withSoftmax) {
          // Measurement only (family mma_sync_nosoftmax): P = S as it is,
          // with no mask, max, exp2, sum or rescale, to time the rest.
          packed = softmax.pack(s);
          acc.assign(state.begin() + accBase, state.end());
        } else {
          // Mods, and masks only on tiles that cross the end or a bound.
          softmax.mask(s, n0, cfg.blockN, m0, add(m0, c64(cfg.blockM - 1)),
                       quadCol, rules, myRow);
          FragmentSoftmax::Update u = softmax.update(
              s, state.slice(0, rowsState), state.slice(rowsState, rowsState),
              p.scaleLog2);
          for (int64_t i = 0; i < rowsState; ++i) {
            next[maxAt(i / 2, i % 2)] = u.max[i];
            next[sumAt(i / 2, i % 2)] = u.sum[i];
          }
          packed = softmax.pack(u.probs);
          acc = softmax.rescale(state.drop_front(accBase), u.alpha);
        }

        if (!doubleBuffered) {
          // V[j] has landed and every warp is done with K[j]: K[j+1]
          // streams in while P V computes.
          NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
          gpu::BarrierOp::create(b, loc);
          copyNextK(c64(0));
          NVVM::CpAsyncCommitGroupOp::create(b, loc);
        }

        // O += P V: S tiles 2kk and 2kk+1 form the A fragment of step kk.
        accumulatePV(packed, vTile, mTiles, nTiles, acc);
        if (!doubleBuffered) {
          // K[j+1] has landed and every warp is done with V[j].
          NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
          gpu::BarrierOp::create(b, loc);
        }
        std::copy(acc.begin(), acc.end(), next.begin() + accBase);
        scf::YieldOp::create(b, loc, next);
      });

  // ---- epilogue: O = acc / l, LSE = (m c + log2 l) ln 2 ---------------------
  ValueRange results = loop.getResults();
  softmax.store(p, at, results.slice(0, rowsState),
                results.slice(rowsState, rowsState),
                results.drop_front(accBase), quadCol, myRow);
  if (varlenGuard)
    b.setInsertionPointAfter(varlenGuard);
  gpu::ReturnOp::create(b, loc);
}

} // namespace flashjit::mma_sync

namespace flashjit {

void MmaSyncForward::emit(OpBuilder &builder, Location loc,
                          const AttentionSpec &spec, const TileConfig &config,
                          StringRef name, const ModRegions &mods) const {
  mma_sync::Builder(builder, loc, spec, config, WithSoftmax).build(name, mods);
}

} // namespace flashjit
