//===- WgmmaBackwardMain.cpp - the main backward kernel on wgmma ----------===//
// Why: FlashAttention's backward with every product on the warpgroup
// tensor cores (WgmmaBackward.h has the algorithm). The pieces are the
// forward's Hopper ones (HopperIR: swizzled-tile descriptors, wgmma issue
// and wait) and the backward's parameters (BackwardBuilder.h); this file
// is the schedule.
//
// Thread layout: warpgroup g (0 or 1) owns key rows [64 g, 64 g + 64) of
// the block; in a wgmma accumulator a thread of warp w, lane l holds rows
// 16 w + l / 4 (+ 8) and columns 8 j + 2 (l % 4) (+ 1).
//
// One step (a query block of one query head), all 256 threads (stages
// 2 or 3): wait for this step's loads (started stages - 1 steps earlier:
// Q and dO by TMA from thread 0 onto the stage's mbarrier, LSE and D by
// cp.async); fence; bar.sync; start those of step t + stages - 1; the
// previous step's staged dQ tile into the workspace (one bulk
// reduction); S^T, dP^T issued; P^T after
// S^T's wait; dV issued; dS^T after dP^T's wait, stored; fence; wait until
// the reduction has read the staging rows; bar.sync; dQ and dK issued;
// dQ, once done, to the staging rows while dK runs; wait for dK.
//
// Shared layout (1024-aligned; tiles 128-byte swizzled in panels of 64
// columns): K [128][d], V [128][d], per stage Q [block_m][d] and dO
// [block_m][d], dS^T [128 keys][block_m queries], per stage LSE and D
// (f32 [block_m] each), the dQ staging rows (f32 [block_m][d], each row
// padded by kDqRowPadding bytes, as the workspace's rows are), an mbarrier
// per stage. K and V load once by cp.async.
#include "BackwardBuilder.h"

#include "../HopperIR.h"

#include "flashjit/Templates/MmaSyncBackward.h"
#include "flashjit/Templates/WgmmaBackward.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>
#include <limits>
#include <optional>

using namespace mlir;

namespace flashjit::backward {
namespace {

using wgmma::HopperIR;
using wgmma::kRowBytes;
using wgmma::Major;
using Pred = arith::CmpIPredicate;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kKeysPerWarpgroup = 64;
constexpr int64_t kPanelCols = 64;

class WgmmaMainBuilder : public HopperIR {
public:
  WgmmaMainBuilder(OpBuilder &b, Location loc, const AttentionSpec &spec,
                   const TileConfig &config)
      : HopperIR(b, loc, spec), cfg(config), d(spec.headDim), bM(config.blockM),
        bN(config.blockN), stages(config.stages), threads(config.warps * 32),
        L(WgmmaBackward::SharedLayout::of(spec, config)) {}

  void build(StringRef name, const ModRegions &mods);

private:
  /// Byte offset (i32) of a per-stage buffer at `offset` in stage `stage`.
  Value inStage(int64_t offset, Value stage, int64_t bytesPerStage) {
    return add(c32(offset), mul(stage, c32(bytesPerStage)));
  }
  Value descriptorAt(Value offset, Major major, int64_t panelBytes) {
    return descriptor(sharedAddress(offset), major, panelBytes);
  }

  const TileConfig &cfg;
  const int64_t d, bM, bN, stages, threads;
  /// Where each buffer sits in shared memory.
  const WgmmaBackward::SharedLayout L;
};

void WgmmaMainBuilder::build(StringRef name, const ModRegions &mods) {
  std::string smemName = (name + "_smem").str();
  LLVM::GlobalOp::create(b, loc, LLVM::LLVMArrayType::get(b.getI8Type(), 0),
                         /*isConstant=*/false, LLVM::Linkage::External,
                         smemName, Attribute(), /*alignment=*/1024,
                         /*addrSpace=*/3);
  OpBuilder::InsertionGuard funcGuard(b);
  const bool deterministic = MmaSyncBackward::isDeterministic(cfg);
  MainParams p = beginMainKernel(*this, name, threads, deterministic,
                                 /*withTensorMaps=*/true);
  alignSharedBase(smemName);
  BackwardMods tileMods(*this, mods, p);

  Value tid = toI32(threadIdX());
  Value isIssuer = cmp(Pred::eq, tid, c32(0));
  // One mbarrier per stage: the TMA loads of a step's Q and dO complete
  // their bytes on it; use k of stage s (step s + k stages) is phase k.
  auto fullBarrier = [&](Value stage) {
    return sharedAddress(add(c32(L.barOff), mul(stage, c32(8))));
  };
  ifThen(isIssuer, [&] {
    for (int64_t s = 0; s < stages; ++s)
      barrierInit(fullBarrier(c32(s)), 1);
    NVVM::FenceMbarrierInitOp::create(b, loc);
  });
  gpu::BarrierOp::create(b, loc);
  Value warpgroup = divU(tid, 128);
  Value inGroup = remU(tid, 128);
  Value warp = divU(inGroup, 32), lane = remU(inGroup, 32);
  Value quadRow = divU(lane, 4);
  Value quadCol = mul(remU(lane, 4), c32(2));
  // This thread's first accumulator row within its warpgroup's 64.
  Value warpRow = add(mul(warp, c32(16)), quadRow);

  // Deterministic: highest key block first along blockIdx.x (its turn
  // comes first; BackwardDqTurns.cpp).
  Value keyBlocks = divU(add(p.seqlenK, c64(bN - 1)), bN);
  Value keyBlock =
      deterministic ? dqTurnKeyBlock(*this, keyBlocks)
                    : toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::x));
  Value kvHead = toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::y));
  Value batch = toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::z));
  Value n0 = mul(keyBlock, c64(bN));
  // Varlen: the block's sequence (grid z) gives the seqlens and the
  // tensors' bases; key blocks past its keys (the grid spans the longest
  // sequence's) do nothing. Q and dO keep their packed rows for TMA.
  std::optional<scf::IfOp> inSequence;
  if (spec.varlen) {
    backward::narrowToSequence(*this, p, batch);
    inSequence = scf::IfOp::create(b, loc, cmp(Pred::slt, n0, p.seqlenK),
                                   /*withElse=*/false);
    b.setInsertionPoint(inSequence->thenBlock()->getTerminator());
  }
  // The TMA coordinates (row, batch) of query row m0 of the block's
  // sequence.
  auto tmaRowAndBatch = [&](Value m0) -> std::pair<Value, Value> {
    if (!spec.varlen)
      return {toI32(m0), toI32(batch)};
    return {toI32(add(p.qRowBase, m0)), c32(0)};
  };
  Value diagonal = spec.causalAlign == CausalAlign::BottomRight
                       ? sub(p.seqlenK, p.seqlenQ)
                       : c64(0);
  WindowDiagonals window = WindowDiagonals::of(*this, diagonal);

  // ---- K and V of the block, once ----------------------------------------
  copySwizzledRows(p.k, p.kStrides, batch, kvHead, n0, p.seqlenK, bN,
                   c32(L.kOff), threads);
  copySwizzledRows(p.v, p.vStrides, batch, kvHead, n0, p.seqlenK, bN,
                   c32(L.vOff), threads);

  // ---- the steps: (query head of the group, visible query block) ---------
  BackwardSteps plan =
      BackwardSteps::of(*this, p, batch, kvHead, n0, diagonal, bM, bN);
  Value steps = plan.count;
  auto headOf = [&](Value t) { return plan.head(*this, t); };
  auto firstRowOf = [&](Value t) { return plan.firstRow(*this, t); };
  // Step t's Q, dO, LSE and D into stage `stage` (i32); rows past
  // seqlen_q read as zeros (S = 0, LSE = 0: P = 1 there, but dO and D are
  // 0, so dS = 0 and nothing reaches dK, dV or dQ). Varlen, Q and dO rows
  // past the sequence are the next sequence's: their P is masked to 0.
  auto loadStep = [&](Value t, Value stage) {
    Value head = headOf(t), m0 = firstRowOf(t);
    // Q and dO by TMA from thread 0, 64-column panels of block_m rows
    // (rows past seqlen_q arrive as zeros).
    ifThen(isIssuer, [&] {
      Value bar = fullBarrier(stage);
      barrierExpect(bar, 2 * bM * d * 2);
      auto [row, boxBatch] = tmaRowAndBatch(m0);
      for (auto [map, offset] : {std::pair{p.tensorMaps[0], L.qOff},
                                 std::pair{p.tensorMaps[1], L.doOff}})
        for (int64_t panel = 0; panel < d / kPanelCols; ++panel)
          tmaLoadBox(map,
                     sharedAddress(add(inStage(offset, stage, L.stageBytes),
                                       c32(panel * bM * kRowBytes))),
                     bar,
                     {c32(panel * kPanelCols), row, toI32(head), boxBatch});
    });
    ifThen(cmp(Pred::slt, tid, c32(bM)), [&] {
      auto rowAt = [&](int64_t to) {
        return shared(
            add(inStage(to, stage, L.smallStageBytes), mul(tid, c32(4))));
      };
      copyRowStats(*this, p, batch, head, m0, toI64(tid), rowAt(L.lseOff),
                   rowAt(L.dOff));
    });
  };

  // ---- the products -------------------------------------------------------
  const int64_t perPanel = kPanelCols / 16;
  // K-major operands: k step ks is 32 bytes into a 128-byte row, in panel
  // ks / 4 (panels rows * 128 bytes apart).
  auto kMajorStep = [perPanel](int64_t rows) {
    return [rows, perPanel](int64_t ks) {
      return (ks / perPanel) * rows * kRowBytes + (ks % perPanel) * 32;
    };
  };
  // MN-major operands: k step kk is 16 rows further.
  auto rowStep = [](int64_t kk) { return kk * 16 * kRowBytes; };
  auto keyRowsStep = kMajorStep(bN), queryRowsStep = kMajorStep(bM);
  Product scores; // S^T = K Q^T and dP^T = V dO^T: m64 keys x block_m
  scores.n = bM;
  scores.kSteps = d / 16;
  scores.aStepBytes = keyRowsStep;
  scores.bStepBytes = queryRowsStep;
  Product overQueries; // dV += P^T dO, dK += dS^T Q: m64 keys x d
  overQueries.n = d;
  overQueries.kSteps = bM / 16;
  overQueries.transB = true;
  overQueries.bStepBytes = rowStep;
  overQueries.zeroFirst = false;
  // dQ = dS K: block_m 64: this warpgroup's half of the columns for the
  // 64 query rows; block_m 128: its 64 query rows, every column.
  const bool splitColumns = bM == 64;
  const int64_t dqCols = splitColumns ? d / 2 : d;
  Product dqProduct;
  dqProduct.n = dqCols;
  dqProduct.kSteps = bN / 16;
  dqProduct.transA = true;
  dqProduct.transB = true;
  dqProduct.aStepBytes = rowStep;
  dqProduct.bStepBytes = rowStep;

  Value groupRows = mul(warpgroup, c32(kKeysPerWarpgroup * kRowBytes));
  Value kA = descriptorAt(add(c32(L.kOff), groupRows), Major::K, 0);
  Value vA = descriptorAt(add(c32(L.vOff), groupRows), Major::K, 0);
  Value dsA, kB;
  if (splitColumns) {
    dsA = descriptorAt(c32(L.dsOff), Major::MN, bN * kRowBytes);
    // Column dqCols * g of K: panel g (d 128), or 64 bytes into the rows
    // (d 64).
    Value column = d == 128 ? mul(warpgroup, c32(bN * kRowBytes))
                            : mul(warpgroup, c32(dqCols * 2));
    kB = descriptorAt(add(c32(L.kOff), column), Major::MN, bN * kRowBytes);
  } else {
    dsA = descriptorAt(add(c32(L.dsOff), mul(warpgroup, c32(bN * kRowBytes))),
                       Major::MN, bN * kRowBytes);
    kB = descriptorAt(c32(L.kOff), Major::MN, bN * kRowBytes);
  }

  const float log2e = static_cast<float>(M_LOG2E);
  const int64_t sTiles = bM / 8; // n8 tiles of S^T: query columns

  // Step t's dQ tile from the staging rows into the workspace, whose rows
  // are padded and rounded up like the staging rows (DqAccumLayout), so
  // the tile is one range: thread 0 adds it with one bulk reduction
  // (cp.reduce.async.bulk .add.f32; the L2 adds whole lines). Rows past
  // seqlen_q hold zeros and land in the rounding rows.
  const DqAccumLayout dqLayout = DqAccumLayout::of(spec, cfg);
  auto flushDq = [&](Value t) {
    Value m0 = firstRowOf(t), head = headOf(t);
    auto issue = [&] {
      Value dst = globalAddress(
          p.dqAccum, f32, dqAccumRow(*this, dqLayout, p, batch, head, m0));
      asmVoid("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 "
              "[$0], [$1], $2;\n\tcp.async.bulk.commit_group;",
              "l,r,r",
              {dst, sharedAddress(c32(L.dqOff)), c32(bM * L.dqRowBytes)});
    };
    // A block mask's step past seqlen_q (an index out of range, or a mask
    // block's tiles past the end) has no rows of this head to add to.
    Value adds = isIssuer;
    if (spec.isBlockSparse())
      adds = arith::AndIOp::create(b, loc, adds, cmp(Pred::slt, m0, p.seqlenQ));
    ifThen(adds, [&] {
      if (!deterministic) {
        issue();
        return;
      }
      // The issuer takes the query block's turn, adds, waits until its
      // reduction has completed, and passes the turn; the cross-proxy
      // fences order the async-proxy reduction after the acquire and
      // before the release.
      DqTurn turn =
          dqTurn(*this, p, batch, head, divU(m0, bM), plan.queryBlocks,
                 keyBlock, keyBlocks, diagonal, bM, bN);
      auto alone = [] {};
      waitForDqTurn(*this, turn, tid, alone);
      asmVoid("fence.proxy.async.global;", "", {});
      issue();
      asmVoid("cp.async.bulk.wait_group 0;\n\tfence.proxy.async.global;", "",
              {});
      passDqTurn(*this, turn, tid, alone);
    });
  };
  // The issuer waits until its reduction has read the staging rows.
  auto waitDqFlushRead = [&] {
    ifThen(isIssuer,
           [&] { asmVoid("cp.async.bulk.wait_group.read 0;", "", {}); });
  };

  // dQ to the staging rows ([block_m][d] f32, rows padded): rows (64 g
  // when the rows are split) + warpRow (+ 8), columns (dqCols g when the
  // columns are split) + 8 j + quadCol. flushDq adds them into the
  // workspace.
  auto stageDq = [&](ArrayRef<Value> dq) {
    Value rowBase =
        splitColumns ? warpRow : add(mul(warpgroup, c32(64)), warpRow);
    Value column0 =
        splitColumns ? add(mul(warpgroup, c32(dqCols)), quadCol) : quadCol;
    auto pairType = VectorType::get({2}, f32);
    for (int64_t h = 0; h < 2; ++h) {
      Value rowAt =
          add(c32(L.dqOff), mul(add(rowBase, c32(8 * h)), c32(L.dqRowBytes)));
      for (int64_t j = 0; j < dqCols / 8; ++j) {
        Value pair = vector::FromElementsOp::create(
            b, loc, pairType,
            ValueRange{dq[j * 4 + 2 * h], dq[j * 4 + 2 * h + 1]});
        LLVM::StoreOp::create(
            b, loc, pair,
            shared(add(rowAt, mul(add(column0, c32(j * 8)), c32(4)))),
            /*alignment=*/8);
      }
    }
  };
  auto step = [&](Value t, ValueRange acc) {
    SmallVector<Value> dk(acc.begin(), acc.begin() + d / 2);
    SmallVector<Value> dv(acc.begin() + d / 2, acc.end());
    Value m0 = firstRowOf(t);
    Value stage = c32(0);
    // Step t is use t / stages of its stage's mbarrier: that phase's parity.
    Value parity = toI32(remU(divU(t, stages), 2));
    if (stages == 1) {
      // Every thread is done with the previous step's buffers and dS^T.
      gpu::BarrierOp::create(b, loc);
      loadStep(t, stage);
      NVVM::CpAsyncCommitGroupOp::create(b, loc);
      NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
      barrierWait(fullBarrier(stage), parity);
      fenceProxyAsync();
      gpu::BarrierOp::create(b, loc);
    } else {
      // This step's loads (started stages - 1 steps earlier, one group per
      // step) have landed for every thread; past the barrier every thread
      // is also done with the previous step, whose buffer the loads of
      // step t + stages - 1 then reuse.
      stage = toI32(remU(t, stages));
      NVVM::CpAsyncWaitGroupOp::create(b, loc, stages - 2);
      barrierWait(fullBarrier(stage), parity);
      fenceProxyAsync();
      gpu::BarrierOp::create(b, loc);
      Value ahead = add(t, c64(stages - 1));
      ifThen(cmp(Pred::slt, ahead, steps),
             [&] { loadStep(ahead, toI32(remU(ahead, stages))); });
      NVVM::CpAsyncCommitGroupOp::create(b, loc);
    }
    // The previous step's dQ rows, staged and fenced before the barrier.
    ifThen(cmp(Pred::sgt, t, c64(0)), [&] { flushDq(sub(t, c64(1))); });

    Value qAt = inStage(L.qOff, stage, L.stageBytes);
    Value doAt = inStage(L.doOff, stage, L.stageBytes);
    SmallVector<Value> s =
        issueProduct(scores, {}, kA, {}, descriptorAt(qAt, Major::K, 0));
    SmallVector<Value> dp =
        issueProduct(scores, {}, vA, {}, descriptorAt(doAt, Major::K, 0));

    // LSE (as -log2e LSE, +inf for a row that saw no key) and D of this
    // thread's query columns 8 j + quadCol + e, each read where it is used
    // (fewer live registers while the products run).
    Value lseAt = inStage(L.lseOff, stage, L.smallStageBytes);
    Value dAt = inStage(L.dOff, stage, L.smallStageBytes);
    auto columnByte = [&](int64_t j, int64_t e) {
      return mul(add(quadCol, c32(j * 8 + e)), c32(4));
    };
    auto negLseOf = [&](int64_t j, int64_t e) {
      Value lse = LLVM::LoadOp::create(b, loc, f32,
                                       shared(add(lseAt, columnByte(j, e))), 4);
      Value empty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                                          lse, cF32(-kInf));
      return arith::MulFOp::create(
          b, loc, arith::SelectOp::create(b, loc, empty, cF32(kInf), lse),
          cF32(-log2e));
    };
    auto dOf = [&](int64_t j, int64_t e) -> Value {
      return LLVM::LoadOp::create(b, loc, f32,
                                  shared(add(dAt, columnByte(j, e))), 4);
    };

    auto keyOf = [&](int64_t h) {
      return add(add(n0, toI64(mul(warpgroup, c32(kKeysPerWarpgroup)))),
                 toI64(add(warpRow, c32(8 * h))));
    };
    BackwardMods::Tile modTile{
        batch, headOf(t), {keyOf(0), keyOf(1)}, add(m0, toI64(quadCol))};
    // The mask_mod's reads (a document mask's ids of the step's queries)
    // are issued while the products run, each query's once per warp.
    Value maskModOn = plan.maskModApplies(*this, t);
    IndexStaging staging{
        shared(add(c32(L.maskOff), mul(divU(tid, 32), c32(bM * 4)))),
        lane,
        bM,
        {}};
    ModReads reads =
        tileMods.readAhead(modTile, s.size(), maskModOn, &staging, m0);
    s = waitGroups(1, s);
    SmallVector<Value> factors = tileMods.applyScoreMod(s, modTile);
    SmallVector<Value> prob(s.size());
    for (int64_t j = 0; j < sTiles; ++j)
      for (int64_t e = 0; e < 2; ++e) {
        Value negLse = negLseOf(j, e);
        for (int64_t h = 0; h < 2; ++h)
          prob[j * 4 + 2 * h + e] = exp2(LLVM::FMAOp::create(
              b, loc, s[j * 4 + 2 * h + e], p.scaleLog2, negLse));
      }
    // Keys past seqlen_k, and pairs the causal mask, the window or the
    // mask_mod hide, get P = 0: only on tiles that reach past seqlen_k or
    // cross a bound, and on every tile with a mask_mod.
    Value needMask = cmp(Pred::sgt, add(n0, c64(bN)), p.seqlenK);
    needMask = window.orCrossed(*this, needMask, n0, bN, m0, bM);
    // Query rows past seqlen_q (zeros, LSE 0) need P = 0 once a score_mod
    // may make their scores large (exp would overflow, and inf times
    // their zero dO is NaN); without one their P is 1, harmless. Varlen,
    // they are the next sequence's rows (its Q and dO): always P = 0.
    const bool maskQueryTail = tileMods.hasScoreMod() || spec.varlen;
    if (maskQueryTail)
      needMask = arith::OrIOp::create(
          b, loc, needMask, cmp(Pred::sgt, add(m0, c64(bM)), p.seqlenQ));
    // The mask_mod applies everywhere, or on a block mask's partial blocks.
    needMask = tileMods.orMaskModNeeded(needMask, maskModOn);
    prob = maskWhere(*this, needMask, prob, [&] {
      SmallVector<Value> out(prob.size());
      Value queryColumns;
      if (maskQueryTail)
        queryColumns =
            queryColumnsBelow(*this, p.seqlenQ, m0, toI64(quadCol), bM);
      for (int64_t h = 0; h < 2; ++h) {
        Value key = keyOf(h);
        Value keyOk = cmp(Pred::slt, key, p.seqlenK);
        // Column c (query m0 + quadCol + c) sees the key iff need <= c <=
        // limit (WindowDiagonals::columns).
        auto [need, limit] =
            window.columns(*this, sub(key, add(m0, toI64(quadCol))), bM);
        for (int64_t j = 0; j < sTiles; ++j)
          for (int64_t e = 0; e < 2; ++e) {
            int64_t i = j * 4 + 2 * h + e;
            Value valid = keyOk;
            if (need)
              valid = arith::AndIOp::create(
                  b, loc, valid, cmp(Pred::sge, c32(j * 8 + e), need));
            if (limit)
              valid = arith::AndIOp::create(
                  b, loc, valid, cmp(Pred::sle, c32(j * 8 + e), limit));
            if (queryColumns)
              valid = arith::AndIOp::create(
                  b, loc, valid, cmp(Pred::slt, c32(j * 8 + e), queryColumns));
            if (tileMods.hasMaskMod())
              valid = arith::AndIOp::create(
                  b, loc, valid, tileMods.keep(modTile, i, maskModOn, &reads));
            out[i] =
                arith::SelectOp::create(b, loc, valid, prob[i], cF32(0.0f));
          }
      }
      return out;
    });

    // Accumulators packed in pairs are the A fragments of the next
    // products (four per k16 step over the query columns).
    auto pack = [&](ArrayRef<Value> x) {
      SmallVector<Value> packed(x.size() / 2);
      for (size_t i = 0; i < packed.size(); ++i)
        packed[i] = packPair(x[2 * i], x[2 * i + 1]);
      return packed;
    };
    // dV += P^T dO runs while dS^T is computed and stored.
    SmallVector<Value> probPacked = pack(prob);
    dv = issueProduct(overQueries, dv, Value(), probPacked,
                      descriptorAt(doAt, Major::MN, bM * kRowBytes));
    // dS takes the score_mod's derivative as a factor: folded into P here,
    // so that one set of registers, not two, waits for dP^T.
    for (size_t i = 0; i < factors.size(); ++i)
      prob[i] = arith::MulFOp::create(b, loc, prob[i], factors[i]);
    dp = waitGroups(1, dp);
    SmallVector<Value> ds(prob.size());
    for (int64_t j = 0; j < sTiles; ++j)
      for (int64_t e = 0; e < 2; ++e) {
        Value dCol = dOf(j, e);
        for (int64_t h = 0; h < 2; ++h) {
          int64_t i = j * 4 + 2 * h + e;
          ds[i] = arith::MulFOp::create(
              b, loc, prob[i], arith::SubFOp::create(b, loc, dp[i], dCol));
        }
      }
    SmallVector<Value> dsPacked = pack(ds);

    // dS^T to shared memory, [key][query] in panels of 64 queries: row r's
    // 16-byte chunk c sits at chunk c ^ (r % 8), and r % 8 is quadRow.
    Value keyRow = add(mul(warpgroup, c32(kKeysPerWarpgroup)), warpRow);
    for (int64_t j = 0; j < sTiles; ++j)
      for (int64_t h = 0; h < 2; ++h) {
        Value row = add(keyRow, c32(8 * h));
        Value chunk = arith::XOrIOp::create(b, loc, c32(j % 8), quadRow);
        Value offset = add(add(c32(L.dsOff + (j / 8) * bN * kRowBytes),
                               mul(row, c32(kRowBytes))),
                           add(mul(chunk, c32(16)), mul(quadCol, c32(2))));
        LLVM::StoreOp::create(b, loc, dsPacked[j * 2 + h], shared(offset),
                              /*alignment=*/4);
      }
    fenceProxyAsync();
    // The previous step's dQ reductions have read the staging rows.
    waitDqFlushRead();
    gpu::BarrierOp::create(b, loc);

    // dQ, then dK += dS^T Q: dQ goes to the staging rows while dK runs;
    // the next step adds them into the workspace after its first barrier.
    SmallVector<Value> dq = issueProduct(dqProduct, {}, dsA, {}, kB);
    dk = issueProduct(overQueries, dk, Value(), dsPacked,
                      descriptorAt(qAt, Major::MN, bM * kRowBytes));
    SmallVector<Value> done(dv);
    done.append(dq.begin(), dq.end());
    done = waitGroups(1, done);
    dv.assign(done.begin(), done.begin() + d / 2);
    dq.assign(done.begin() + d / 2, done.end());
    stageDq(dq);
    dk = waitGroups(0, dk);
    SmallVector<Value> next(dk);
    next.append(dv.begin(), dv.end());
    return next;
  };

  SmallVector<Value> result;
  {
    // The first stages - 1 steps' loads, one group each, the first with K
    // and V (at stages 1, K and V alone).
    if (stages == 1)
      NVVM::CpAsyncCommitGroupOp::create(b, loc);
    for (int64_t i = 0; i < stages - 1; ++i) {
      ifThen(cmp(Pred::sgt, steps, c64(i)), [&] { loadStep(c64(i), c32(i)); });
      NVVM::CpAsyncCommitGroupOp::create(b, loc);
    }
    SmallVector<Value> init(d, cF32(0.0f));
    auto loop = scf::ForOp::create(
        b, loc, cIdx(0), toIndex(steps), cIdx(1), init,
        [&](OpBuilder &, Location, Value t, ValueRange state) {
          scf::YieldOp::create(b, loc, step(toI64(t), state));
        });
    result.assign(loop.getResults().begin(), loop.getResults().end());
    // No copy is left in flight at the end (K and V when there was no step).
    NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
    // The last step's dQ rows; their reduction runs during the epilogue
    // (it reads only the staging rows) and completes before the exit.
    fenceProxyAsync();
    gpu::BarrierOp::create(b, loc);
    ifThen(cmp(Pred::sgt, steps, c64(0)), [&] { flushDq(sub(steps, c64(1))); });
  }

  // ---- epilogue: dK = scale * acc, dV, rows below seqlen_k ---------------
  // Staged in K's and V's tiles: past the barrier above, every product has
  // read them (storeKeyRows).
  Value keyRow = add(mul(warpgroup, c32(kKeysPerWarpgroup)), warpRow);
  storeKeyRows(
      *this, p, batch, kvHead, n0, bN, keyRow, c32(0), quadCol,
      ArrayRef<Value>(result).take_front(d / 2),
      ArrayRef<Value>(result).drop_front(d / 2),
      [&](Value offset) { return shared(offset); }, L.kOff, L.vOff, tid,
      threads);
  ifThen(isIssuer, [&] { asmVoid("cp.async.bulk.wait_group 0;", "", {}); });
  if (inSequence)
    b.setInsertionPointAfter(*inSequence);
  gpu::ReturnOp::create(b, loc);
}

} // namespace
} // namespace flashjit::backward

namespace flashjit {

void WgmmaBackward::buildMain(mlir::OpBuilder &builder, mlir::Location loc,
                              const AttentionSpec &spec,
                              const TileConfig &config, llvm::StringRef name,
                              const ModRegions &mods) {
  backward::WgmmaMainBuilder(builder, loc, spec, config).build(name, mods);
}

} // namespace flashjit
