//===- WgmmaConsumer.cpp - the consumer warpgroups of the wgmma forward ---===//
// Why: the consumers' half of the Hopper forward (WgmmaForward.cpp has the
// kernel's layout and roles): per tile, the software pipeline of products,
// mask and online softmax over the K/V ring, then the epilogue.
//
// The software pipeline, one tile deep: iteration j issues S_j = Q K_j^T
// (wgmma, both operands in shared memory) and O += P_{j-1} V_{j-1} (wgmma,
// P from registers) back to back, waits for S_j only, runs the softmax of
// S_j while P V is still on the tensor cores, then waits for P V, rescales
// O and rounds P_j. After a row's first tile the softmax takes no row max:
// P against the max as it stands, unless the row sums show a P past the
// bound (2^15 for f16, 2^64 for bf16) somewhere in the warpgroup, and then
// S_j again with the max (FragmentSoftmax::updateWithinBound; the step and
// its vote: WgmmaBoundedStep.cpp). The row max was 84 of the loop's 370
// instructions per 80 scores and thread (head dim 128). With a score_mod,
// once a tile of a query block outgrew the bound, the block's later tiles
// take the max on the scores they hold (a bias that grows toward the
// diagonal, as ALiBi's, outgrows it every tile). A score_mod that bounds
// the scores (soft-capping) needs neither: P is taken against a reference
// fixed for the kernel (FragmentSoftmax::fixReference), with no row max,
// vote or rescale on any tile.
// Two consumers take turns issuing (named barriers, ping-pong:
// WgmmaTurns.h), so one warpgroup's softmax and epilogue also run under the
// other's products. Three consumers (head dim 64) have 160 registers each.
//
// The bound tile (a right bound: causal, or a window's right extent): a
// query block's last K/V tile holds its diagonal. A consumer whose 64 rows
// see none of that tile's second half (the first consumer of a causal
// block whose diagonal starts at the tile) takes the tile's S and P V at
// half width, as a step of its own after the pipeline; at 512 keys the
// diagonal tiles are 4 of a head's 10 (docs/performance.md).
//
// K_j's slot is released (one arrive per warp) once the softmax of S_j no
// longer needs it, V_j's once P_j V_j has landed, so the producer refills K
// a tile ahead of V.
#include "WgmmaBuilder.h"

#include "FragmentSoftmax.h"
#include "ScoreMods.h"
#include "WgmmaTurns.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>
#include <optional>

using namespace mlir;

namespace flashjit::wgmma {
namespace {
/// The share of P's exp2, in eighths, that goes to the FMA units where the
/// score_mod spends the special-function unit too.
constexpr int64_t kExp2EighthsOnFmaUnits = 2;
} // namespace

void Builder::emitConsumer(const ForwardParams &p, Value tid,
                           Value warpgroup) {
  NVVM::SetMaxRegisterOp::create(b, loc,
                                 WgmmaForward::consumerRegisters(
                                     consumers, persistent,
                                     spec.hasStructuralMask() || spec.varlen),
                                 NVVM::SetMaxRegisterAction::increase);
  Value consumer = sub(warpgroup, c32(1));
  Value lane = remU(tid, 32);
  Value warpInGroup = remU(divU(tid, 32), WgmmaForward::kWarpsPerWarpgroup);
  Value quadRow = toI64(divU(lane, 4));
  Value quadCol = toI64(mul(remU(lane, 4), c32(2)));

  // Two consumers take turns issuing their products (ping-pong); every
  // consumer runs the software pipeline below rather than a plain loop per
  // tile (S, softmax, P V) (docs/performance.md has what each schedule
  // gains).
  ConsumerTurns turns(*this, consumer, consumers);

  const int64_t nTiles = cfg.blockN / 8;
  // O's accumulators.
  const int64_t outs = d / 2;
  // The loop takes P against the max as it stands, with no row max
  // (FragmentSoftmax::updateWithinBound), and takes S again with the max
  // only for a tile that outgrew it: at the power cap every instruction
  // costs joules, and the row max was a fifth of the loop's instructions
  // (docs/performance.md).
  FragmentSoftmax softmax(*this, /*mTiles=*/1, nTiles);
  ScoreMods scoreMods = ScoreMods::onDotProducts(*this, mods, p);
  // A mask_mod's key-column reads go through this warp's scratch.
  auto stageColumns = [&](FragmentSoftmax &sm) {
    if (spec.maskMod.empty())
      return;
    Value warp = add(mul(consumer, c32(WgmmaForward::kWarpsPerWarpgroup)),
                     warpInGroup);
    sm.stageColumnReads(
        shared(add(c32(layout.maskColumns), mul(warp, c32(cfg.blockN * 4)))),
        lane, cfg.blockN);
  };
  stageColumns(softmax);
  // A score_mod that bounds the scores (soft-capping) fixes P's reference:
  // no row max, no vote on the bound, no rescale of O.
  const bool fixedReference = softmax.fixReference(scoreMods);
  // Where the score_mod spends the special-function unit too (tanh) at
  // head dim 64, part of P's exp2 goes to the FMA units.
  const int64_t exp2Eighths = fixedReference && spec.headDim == 64 &&
                                      scoreModSpecialFunctions(spec) > 0
                                  ? kExp2EighthsOnFmaUnits
                                  : 0;
  softmax.shareExp2WithFmaUnits(exp2Eighths);
  // The parameters of the tile at work: a persistent varlen consumer
  // narrows a copy of `p` to each tile's sequence (narrowToSequence), and
  // takes the diagonal of each (bottom-right alignment differs per
  // sequence).
  ForwardParams cur = p;
  const bool perTileSequence = persistent && spec.varlen;
  Value diagonal = perTileSequence ? Value() : diagonalOffset(p);
  // The Q slot of the tile at work (WgmmaBuilder.h's qSlot) and the
  // descriptor of its rows: with two Q tiles, a persistent consumer sets
  // both per tile.
  Value qs = consumer;
  auto qDescOf = [&](Value slot) {
    return descriptor(add(alignedAddress, qSlotRows(slot, 0)), Major::K, 0);
  };
  const bool qSlotPerTile = persistent && qBuffers > 1;
  Value qDesc = qSlotPerTile ? Value() : qDescOf(qs);
  auto kDesc = [&](Value s) {
    return descriptor(add(alignedAddress,
                          add(c32(layout.k), mul(s, c32(kvTileBytes)))),
                      Major::K, 0);
  };
  auto vDesc = [&](Value s) {
    return descriptor(add(alignedAddress,
                          add(c32(layout.v), mul(s, c32(kvTileBytes)))),
                      Major::MN, cfg.blockN * kRowBytes);
  };
  // Ring position g (i32, counted over the block's tiles): its slot, and
  // the parity of the barrier phase that fills it.
  auto slotOf = [&](Value g) { return remU(g, stages); };
  auto parityOf = [&](Value g) {
    return arith::AndIOp::create(b, loc, divU(g, stages), c32(1));
  };
  // The products that read a slot are complete: one arrive per warp, with
  // multicast on the slot's barrier in every block of the cluster (lane r
  // arrives in the block of rank r xor this block's).
  Value rank = multicast ? clusterRank() : Value();
  auto release = [&](Value emptyBarrier) {
    if (!multicast) {
      ifThen(cmp(Pred::eq, lane, c32(0)),
             [&] { barrierArrive(emptyBarrier); });
      return;
    }
    ifThen(cmp(Pred::ult, lane, c32(WgmmaForward::kClusterSize)), [&] {
      barrierArriveInCluster(emptyBarrier,
                             arith::XOrIOp::create(b, loc, rank, lane));
    });
  };
  const float negInf = -std::numeric_limits<float>::infinity();
  Value negInfV = cF32(negInf), zeroF = cF32(0.0f);

  // The next tile is in this consumer's record once its Q-full barrier
  // completes; the loop runs until the end mark (as unsigned, above every
  // query block).
  auto nextTile = [&](Value done) -> SmallVector<Value> {
    Value slot = qSlot(consumer, done);
    barrierWait(qFull(slot), qParity(done));
    return {readTileInfoField(slot, 0)};
  };
  // The epilogue. A persistent consumer reads its tile and rows from the
  // record again rather than keeping them in registers through the loop:
  // computed from loop-invariant values alone, LLVM would hoist the d / 4
  // store addresses (64-bit) out of the tile loop, and they would spill.
  // With O staged apart, a persistent consumer reads them right after its
  // loop (its last S has landed) and hands the Q rows and the record back
  // at once: the producer then loads the next tile's Q under this tile's
  // last P V and epilogue.
  // The tile the epilogue stores and the rows it stages O in.
  struct Target {
    BlockCoordinates at;
    Value rows;
  };
  auto target = [&](const BlockCoordinates &at) {
    if (!persistent)
      return Target{at, consumerRows(consumer, 0)};
    return Target{readTileInfo(qs), readTileInfoField(qs, 3)};
  };
  // With O staged apart: the tile and rows, read before the Q rows and the
  // record go back (handBackQ).
  auto earlyTarget =
      [&](const BlockCoordinates &at) -> std::optional<Target> {
    if (!outputApart)
      return std::nullopt;
    Target t = target(at);
    t.rows = add(t.rows, c32(layout.o));
    return t;
  };
  auto handBackQ = [&] {
    if (outputApart)
      barrierArrive(qEmpty(qs));
  };
  auto epilogue = [&](const BlockCoordinates &at,
                      const std::optional<Target> &early, ValueRange max,
                      ValueRange sum, ValueRange o) {
    Target t = early ? *early : target(at);
    storeOutput(cur, softmax, consumer, quadRow, quadCol, warpInGroup, tid,
                t.at, t.rows, max, sum, o);
  };
  // The bound tile: with a right bound (causal, or a window's right
  // extent) a query block's last K/V tile holds its diagonal, and a
  // consumer whose 64 rows see none of that tile's second half takes the
  // tile's products at half width: S_last over its first block_n / 2 keys,
  // P_last V_last over the same keys (FlashAttention's causal tiles pay
  // for the masked half; at 512 keys that is a tenth of the products).
  const int64_t halfKeys = cfg.blockN / 2;
  const bool halvesBoundTile =
      spec.hasRightBound() && !spec.isBlockSparse() && halfKeys % 16 == 0;
  FragmentSoftmax halfSoftmax(*this, /*mTiles=*/1, nTiles / 2);
  stageColumns(halfSoftmax);
  halfSoftmax.fixReference(scoreMods);
  halfSoftmax.shareExp2WithFmaUnits(exp2Eighths);
  // One tile at `at`, ring position `iteration` (i32); returns its K/V
  // tile count.
  auto consumeTile = [&](const BlockCoordinates &at, Value iteration) {
    Value m0 = mul(at.queryBlock, c64(cfg.blockM));
    KvTileRange range = kvTiles(cur, at);
    Value diag = diagonal ? diagonal : diagonalOffset(cur);
    Value numTiles = toI32(range.count);
    Value consumerRow0 = add(
        m0, toI64(mul(consumer, c32(WgmmaForward::kRowsPerWarpgroup))));
    Value warpRow0 = add(consumerRow0, toI64(mul(warpInGroup, c32(16))));
    auto myRow = [&](int64_t, int64_t h) {
      return add(warpRow0, add(quadRow, c64(8 * h)));
    };
    // The scores of tile j (local index, i32) through the mask and the
    // online softmax. Its key tile is looked up where the loop body
    // starts (`Visit`), so that a block-sparse list's load is under way
    // while the products run.
    // The mask_mod's reads of captured tensors are issued once the
    // products are (`readAhead`), before the scores are waited for.
    struct Visit {
      Value tile, maskMod;
      ModReads reads;
    };
    auto visit = [&](Value j) {
      return Visit{kvTile(range, j), maskModApplies(range, j), {}};
    };
    auto rulesOf = [&](const Visit &v) {
      return ScoreRules{cur.seqlenQ, cur.seqlenK, diag,
                        spec.hasMods() ? &scoreMods : nullptr, at.batch,
                        at.head, v.maskMod, &v.reads};
    };
    // `sm` and `keys`: the whole tile (softmax, block_n) or its first half
    // (halfSoftmax, halfKeys).
    auto readAhead = [&](Visit &v, FragmentSoftmax &sm) {
      v.reads = sm.readMaskAhead(mul(v.tile, c64(cfg.blockN)), quadCol,
                                 rulesOf(v), myRow);
    };
    auto maskTile = [&](SmallVector<Value> &s, const Visit &v,
                        FragmentSoftmax &sm, int64_t keys) {
      ScoreRules rules = rulesOf(v);
      sm.mask(s, mul(v.tile, c64(cfg.blockN)), keys, consumerRow0,
              add(consumerRow0, c64(WgmmaForward::kRowsPerWarpgroup - 1)),
              quadCol, rules, myRow);
    };
    auto softmaxStep = [&](SmallVector<Value> &s, const Visit &j,
                           ValueRange max, ValueRange sum,
                           FragmentSoftmax &sm, int64_t keys) {
      maskTile(s, j, sm, keys);
      return sm.update(s, max, sum, p.scaleLog2);
    };
    auto at_ = [&](Value j) { return add(iteration, j); };

    // Software pipeline, one K/V tile apart: iteration j issues S_j = Q
    // K_j^T and O += P_{j-1} V_{j-1} together, then runs the softmax of
    // S_j while P V is still on the tensor cores, and rescales O once that
    // lands. Tile 0: S only.
    //
    // State: max[2], sum[2], O[outs], P of the previous tile (packed),
    // and with a score_mod whether a tile outgrew the bound (i32).
    const int64_t oAt = 4, pAt = 4 + outs;
    const int64_t pCount = nTiles * 2;
    const int64_t outgrewAt = pAt + pCount;
    // A score_mod can raise a row's scores from tile to tile (ALiBi's bias
    // grows toward the diagonal by its slope times block_n per tile), and
    // then every later tile would outgrow the bound and take its S twice.
    const bool stickyMax = scoreMods.hasScoreMod() && !fixedReference;
    Value zero = c32(0);
    // Tile 0 from the empty state, `keys` wide; P_0 stays packed in the
    // state (zeros past `keys`).
    auto firstStep = [&](FragmentSoftmax &sm, int64_t keys) {
      Visit visit0 = visit(zero);
      Value slot0 = slotOf(at_(zero));
      barrierWait(kFull(slot0), parityOf(at_(zero)));
      turns.begin();
      SmallVector<Value> s0 = issueScores(qDesc, kDesc(slot0), keys);
      turns.end();
      readAhead(visit0, sm);
      s0 = waitGroups(0, s0);
      release(kEmpty(slot0));
      FragmentSoftmax::Update first =
          softmaxStep(s0, visit0, ValueRange{negInfV, negInfV},
                      ValueRange{zeroF, zeroF}, sm, keys);
      SmallVector<Value> state = {first.max[0], first.max[1], first.sum[0],
                                  first.sum[1]};
      state.append(outs, zeroF);
      llvm::append_range(state, sm.pack(first.probs));
      state.resize(4 + outs + pCount, c32(0));
      if (stickyMax)
        state.push_back(c32(0));
      return state;
    };
    // Tile j >= 1: S_j (`keys` wide) with P_{j-1} V_{j-1}, the softmax of
    // S_j, O rescaled; the next state.
    auto pipelinedStep = [&](Value j, ValueRange state, FragmentSoftmax &sm,
                             int64_t keys) {
      Value prev = sub(j, c32(1));
      Visit visitJ = visit(j);
      Value slot = slotOf(at_(j)), prevSlot = slotOf(at_(prev));
      barrierWait(kFull(slot), parityOf(at_(j)));
      barrierWait(vFull(prevSlot), parityOf(at_(prev)));
      turns.begin();
      SmallVector<Value> scores = issueScores(qDesc, kDesc(slot), keys);
      SmallVector<Value> o = issueAccumulate(
          state.slice(oAt, outs), SmallVector<Value>(state.slice(pAt, pCount)),
          vDesc(prevSlot));
      turns.end();
      readAhead(visitJ, sm);
      scores = waitGroups(1, scores);
      Value outgrew;
      if (stickyMax)
        outgrew = cmp(Pred::ne, state[outgrewAt], c32(0));
      ValueRange max = state.slice(0, 2), sum = state.slice(2, 2);
      FragmentSoftmax::Update u = boundedStep(
          scores, sm, max, sum, p.scaleLog2, consumer, outgrew,
          [&](SmallVector<Value> &s) { maskTile(s, visitJ, sm, keys); },
          [&](SmallVector<Value> &s) {
            return softmaxStep(s, visitJ, max, sum, sm, keys);
          },
          [&] { return waitGroups(0, issueScores(qDesc, kDesc(slot), keys)); });
      release(kEmpty(slot));
      o = waitGroups(0, o);
      release(vEmpty(prevSlot));
      o = sm.rescale(o, u.alpha);
      // P_j is rounded only now, in the registers P_{j-1} held until its
      // product landed: one packed P is live, not two.
      SmallVector<Value> next = {u.max[0], u.max[1], u.sum[0], u.sum[1]};
      next.append(o.begin(), o.end());
      llvm::append_range(next, sm.pack(u.probs));
      next.resize(4 + outs + pCount, c32(0));
      if (stickyMax)
        next.push_back(arith::ExtUIOp::create(b, loc, i32, outgrew));
      return next;
    };
    // Tiles 1 .. end - 1 of the pipeline from `state`.
    auto pipeline = [&](ValueRange state, Value end) {
      auto loop = scf::ForOp::create(
          b, loc, c32(1), end, c32(1), state,
          [&](OpBuilder &, Location, Value j, ValueRange st) {
            scf::YieldOp::create(b, loc,
                                 pipelinedStep(j, st, softmax, cfg.blockN));
          });
      return SmallVector<Value>(loop.getResults());
    };
    // The last tile's P V (`keys` of it): max[2], sum[2] and O.
    auto lastProduct = [&](ValueRange state, int64_t keys) {
      Value last = at_(sub(numTiles, c32(1)));
      barrierWait(vFull(slotOf(last)), parityOf(last));
      turns.begin();
      SmallVector<Value> o = issueAccumulate(
          state.slice(oAt, outs),
          SmallVector<Value>(state.slice(pAt, keys / 4)),
          vDesc(slotOf(last)), keys);
      turns.end();
      o = waitGroups(0, o);
      release(vEmpty(slotOf(last)));
      SmallVector<Value> out(state.take_front(4));
      out.append(o.begin(), o.end());
      return out;
    };

    if (!halvesBoundTile) {
      SmallVector<Value> state = pipeline(firstStep(softmax, cfg.blockN),
                                          numTiles);
      std::optional<Target> early = earlyTarget(at);
      handBackQ();
      SmallVector<Value> out = lastProduct(state, cfg.blockN);
      epilogue(at, early, ValueRange(out).slice(0, 2),
               ValueRange(out).slice(2, 2), ValueRange(out).slice(oAt, outs));
      return numTiles;
    }
    // The bound tile at half width where this consumer's rows stop short of
    // its second half (the vote makes the branches warpgroup-uniform): a
    // step of its own after a pipeline one tile shorter, in both widths, so
    // that nothing in flight crosses a branch (each waits for its products)
    // and every step keeps the bounded softmax. The Q rows go back inside
    // the branches, the tile's record having been read before them. The
    // price is code size: these kernels' PTX about doubles (the forms
    // measured and their compile times: bench/results/
    // nvidia-h100-80gb-hbm3-short-lengths.md).
    Value lastKey0 =
        mul(kvTile(range, sub(numTiles, c32(1))), c64(cfg.blockN));
    Value lastVisible = add(
        add(consumerRow0, c64(WgmmaForward::kRowsPerWarpgroup - 1)),
        add(diag, c64(spec.rightExtent())));
    Value half = warpgroupAny(
        cmp(Pred::slt, lastVisible, add(lastKey0, c64(halfKeys))), consumer);
    std::optional<Target> early = earlyTarget(at);
    SmallVector<Type> outTypes(4 + outs, f32);
    auto branch = [&](Value cond, function_ref<SmallVector<Value>()> then,
                      function_ref<SmallVector<Value>()> otherwise) {
      return ifElse(outTypes, cond, then, otherwise);
    };
    auto boundTileFirst = [&](FragmentSoftmax &sm, int64_t keys) {
      SmallVector<Value> state = firstStep(sm, keys);
      handBackQ();
      return lastProduct(state, keys);
    };
    auto boundTileLater = [&](ValueRange state, FragmentSoftmax &sm,
                              int64_t keys) {
      SmallVector<Value> next =
          pipelinedStep(sub(numTiles, c32(1)), state, sm, keys);
      handBackQ();
      return lastProduct(next, keys);
    };
    SmallVector<Value> out = branch(
        warpgroupAny(cmp(Pred::eq, numTiles, c32(1)), consumer),
        [&] {
          return branch(
              half, [&] { return boundTileFirst(halfSoftmax, halfKeys); },
              [&] { return boundTileFirst(softmax, cfg.blockN); });
        },
        [&] {
          SmallVector<Value> state = pipeline(firstStep(softmax, cfg.blockN),
                                              sub(numTiles, c32(1)));
          return branch(
              half,
              [&] { return boundTileLater(state, halfSoftmax, halfKeys); },
              [&] { return boundTileLater(state, softmax, cfg.blockN); });
        });
    epilogue(at, early, ValueRange(out).slice(0, 2),
             ValueRange(out).slice(2, 2), ValueRange(out).slice(oAt, outs));
    return numTiles;
  };
  // A consumer whose 64 rows all lie past seqlenQ (the last query block of
  // a length that block_m does not divide) does no products: the producer
  // releases each K/V slot for it (idleWarps), and it hands its Q rows
  // back at once. The other consumers then have the tensor cores to
  // themselves.
  auto idleTile = [&](const BlockCoordinates &at) {
    barrierArrive(qEmpty(qs));
    return toI32(kvTiles(p, at).count);
  };
  // Each branch reads the tile's record itself: nothing of it stays live
  // across the branch.
  auto persistentTile = [&](Value iteration, Value done) {
    if (qSlotPerTile) {
      qs = qSlot(consumer, done);
      qDesc = qDescOf(qs);
    }
    if (perTileSequence) {
      cur = p;
      narrowToRows(cur, toI64(readTileInfoField(qs, 2)), readTileRows(qs));
    }
    if (!skipsIdleRows)
      return consumeTile(readTileInfo(qs), iteration);
    Value rows0 = add(
        mul(toI64(readTileInfoField(qs, 0)), c64(cfg.blockM)),
        toI64(mul(consumer, c32(WgmmaForward::kRowsPerWarpgroup))));
    // Read from lane 0, so that ptxas knows the branch warp-uniform.
    Value idle = gpu::ShuffleOp::create(
                     b, loc,
                     arith::ExtUIOp::create(b, loc, i32,
                                            cmp(Pred::sge, rows0, p.seqlenQ)),
                     0, 32, gpu::ShuffleMode::IDX)
                     .getShuffleResult();
    return ifElse(
        TypeRange{i32}, cmp(Pred::ne, idle, c32(0)),
        [&] { return SmallVector<Value>{idleTile(readTileInfo(qs))}; },
        [&] {
          return SmallVector<Value>{
              consumeTile(readTileInfo(qs), iteration)};
        })[0];
  };
  if (!persistent) {
    barrierWait(qFull(consumer), c32(0));
    consumeTile(blockCoordinates(), c32(0));
    turns.finish();
    return;
  }
  forEachTile(
      TypeRange{i32}, [&] { return c32(kNoTile); }, nextTile,
      [&](ValueRange, Value iteration, Value done) {
        return persistentTile(iteration, done);
      },
      [&](Value, Value) { turns.finish(); });
  // The last store must have read its staging rows before the block exits.
  if (outputApart)
    waitForStores(tid);
}

} // namespace flashjit::wgmma
