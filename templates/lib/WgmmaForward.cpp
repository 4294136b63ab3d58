//===- WgmmaForward.cpp - IR builder of the wgmma template ----------------===//
// Why: emits the Hopper FlashAttention forward kernel (FlashAttention-3's
// structure) as a gpu.func of upstream dialects plus inline PTX for wgmma.
//
// Three grids (WgmmaForward.h): one block per tile of block_m query rows
// of one (batch, head) (family wgmma), or persistent (wgmma_persistent):
// one block per SM looping over tiles from the launch's counter
// (WgmmaPersistent.cpp), so one tile's epilogue overlaps the next tile's
// loads and no block waits to be launched; or persistent in clusters of two
// (wgmma_cluster, no mask): the blocks of a cluster take adjacent query
// blocks of one head in a fixed order, each loads half of every K/V tile's
// rows into both (TMA multicast), and a slot is free once the consumers of
// both blocks have released it (each warp arrives on the slot's barrier in
// both blocks).
//
// Roles: warpgroup 0 is the producer (WgmmaProducer.cpp). It gives
// registers back (setmaxnreg) and one of its threads issues every load.
// Per tile: the first K tile, then each consumer's 64 rows of Q
// (persistent: once that consumer has stored the last tile's O from them,
// with the tile's coordinates in a small shared record), then the K and V
// tiles, each once the consumers have released its slot of the ring, each
// completing on its own mbarrier. Warpgroups 1..C are the consumers, 64
// query rows each, with the registers the producer gave up; each warp's
// wgmma accumulators have mma.sync's layout, so the mask and online softmax
// are FragmentSoftmax's. The ring position runs on across a persistent
// block's tiles.
//
// The software pipeline, one tile deep: iteration j issues S_j = Q K_j^T
// (wgmma, both operands in shared memory) and O += P_{j-1} V_{j-1} (wgmma,
// P from registers) back to back, waits for S_j only, runs the softmax of
// S_j while P V is still on the tensor cores, then waits for P V, rescales
// O and rounds P_j. After a row's first tile the softmax takes no row max:
// P against the max as it stands, unless the row sums show a P past the
// bound (2^15 for f16, 2^64 for bf16) somewhere in the warpgroup, and then
// S_j again with the max (FragmentSoftmax::updateWithinBound). The row max
// was 84 of the loop's 370 instructions per 80 scores and thread (head dim
// 128). Two consumers take turns issuing (named barriers, ping-pong), so
// one warpgroup's softmax and epilogue also run under the other's
// products. Three consumers (head dim 64) have 160 registers each.
//
// Varlen (AttentionSpec::varlen; per-tile and persistent grids): the
// tensor maps span the packed tensors (batch 1); a block reads its
// sequence's rows from the sequence's first row (ForwardParams::qRowBase,
// kRowBase). The persistent producer takes numbers of the packed
// sequences' query blocks (KernelIR::varlenBlock: a search over the
// offsets, gaps between sequences passed over) and writes the sequence
// into the consumers' tile record; each role narrows a copy of the
// parameters to it per tile. Rows read past
// the sequence's end are the next sequence's: K/V columns past its length
// are masked like the zeros past a dense sequence, Q rows past it are
// computed and dropped, and O goes out through bounded stores
// (FragmentSoftmax::store), since a TMA store would write the next
// sequence's rows.
//
// Epilogue (WgmmaEpilogue.cpp): each consumer writes O / l into its own
// rows of the Q tile (its last product has read them) in the 128-byte
// swizzled layout of a TMA box, and one of its threads stores them with TMA
// (one box per 64-column panel; rows past seqlenQ are dropped by the
// store); persistent, it waits until the store has read them and hands the
// rows back to the producer.
// A persistent kernel with room for it (WgmmaForward::stagesOutputApart)
// stages O in a buffer of its own instead: each consumer hands its Q rows
// back as soon as its last S has landed, and waits for its last store only
// before it next writes the buffer.
// Three persistent consumers without a mask skip a tile whose rows all lie
// past seqlenQ (Builder::skipsIdleRows): the producer arrives on each K/V
// slot's empty barrier for them as it loads the slot.
//
// K_j's slot is released (one arrive per warp) once the softmax of S_j no
// longer needs it, V_j's once P_j V_j has landed, so the producer refills K
// a tile ahead of V.
//
// Shared layout (WgmmaForward::sharedLayout), from a 1024-byte aligned base
// (the 128-byte swizzle pattern repeats every 1024 bytes): the Q tile,
// `stages` K tiles, `stages` V tiles, the O buffer when staged apart (laid
// out as the Q tile), the mbarriers, then the consumers' tile records
// (WgmmaBuilder.h). A tile of R rows is stored as head_dim / 64 panels of R
// rows x 128 bytes, each written by TMA boxes with 128-byte swizzle. Rows
// past the sequence end arrive as zeros (TMA's out-of-bounds fill) and the
// mask sets their scores to -inf.
#include "WgmmaBuilder.h"

#include "FragmentSoftmax.h"
#include "ScoreMods.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>
#include <optional>

using namespace mlir;

namespace flashjit::wgmma {

Builder::Builder(OpBuilder &b, Location loc, const AttentionSpec &spec,
                 const TileConfig &config, bool persistent, bool multicast)
    : HopperIR(b, loc, spec), cfg(config), persistent(persistent),
      multicast(multicast),
      layout(WgmmaForward::sharedLayout(spec, config, persistent)),
      outputApart(layout.outputApart),
      skipsIdleRows(persistent && !multicast && outputApart && !spec.varlen &&
                    config.blockM / WgmmaForward::kRowsPerWarpgroup == 3 &&
                    !spec.hasStructuralMask()),
      d(spec.headDim),
      consumers(config.blockM / WgmmaForward::kRowsPerWarpgroup),
      threads(config.warps * 32), stages(config.stages),
      qBytes(config.blockM * spec.headDim * dtypeBytes(spec.dtype)),
      kvTileBytes(config.blockN * spec.headDim * dtypeBytes(spec.dtype)) {}

void Builder::build(StringRef name, const ModRegions &modRegions) {
  mods = modRegions;
  std::string smemName = (name + "_smem").str();
  LLVM::GlobalOp::create(b, loc, LLVM::LLVMArrayType::get(b.getI8Type(), 0),
                         /*isConstant=*/false, LLVM::Linkage::External,
                         smemName, Attribute(), /*alignment=*/1024,
                         /*addrSpace=*/3);
  OpBuilder::InsertionGuard funcGuard(b);
  ForwardParams p = beginForwardKernel(name, threads, /*withTensorMaps=*/true);
  // One block per SM (two with one consumer): ptxas then caps registers at
  // entry, which setmaxnreg needs to take effect.
  b.getInsertionBlock()->getParentOp()->setAttr(
      "nvvm.minctasm",
      b.getI32IntegerAttr(WgmmaForward::blocksPerSM(consumers)));
  if (multicast)
    b.getInsertionBlock()->getParentOp()->setAttr(
        NVVM::NVVMDialect::getClusterDimAttrName(),
        b.getDenseI32ArrayAttr(
            {static_cast<int32_t>(WgmmaForward::kClusterSize), 1, 1}));

  // Varlen: the block's sequence, or nothing past its last query block
  // (every thread of the block alike, before any barrier). A persistent
  // block finds each tile's sequence instead (varlenBlock).
  scf::IfOp varlenGuard;
  if (spec.varlen && !persistent)
    varlenGuard = beginVarlenSequence(p, blockCoordinates(), cfg.blockM);

  // The dynamic shared base, rounded up to 1024 bytes (resources() counts
  // the slack).
  alignSharedBase(smemName);

  Value tid = toI32(gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x));

  // Barriers: set up by one thread, visible to the copy engine and to every
  // thread (with multicast: of the cluster) before any use. A K/V slot is
  // free once the consumers of every block that receives it released it.
  const int64_t blocksSharingKV = multicast ? WgmmaForward::kClusterSize : 1;
  {
    OpBuilder::InsertionGuard g(b);
    auto first = scf::IfOp::create(b, loc, cmp(Pred::eq, tid, c32(0)),
                                   /*withElse=*/false);
    b.setInsertionPoint(first.thenBlock()->getTerminator());
    // Q-empty: every thread of the consumer arrives (storeOutput), so each
    // thread's own reads of the tile record and writes of its Q rows are
    // released to the producer by its own arrive, not through a named
    // barrier and another thread's arrive (racecheck does not compose those).
    for (int64_t c = 0; c < consumers; ++c) {
      barrierInit(qFull(c32(c)), 1);
      barrierInit(qEmpty(c32(c)), kWarpgroupThreads);
    }
    for (int64_t s = 0; s < stages; ++s)
      for (int64_t kind = 0; kind < 4; ++kind)
        barrierInit(slotBarrier(2 * consumers + kind * stages, c32(s)),
                    kind < 2 ? 1
                             : consumers * WgmmaForward::kWarpsPerWarpgroup *
                                   blocksSharingKV);
    NVVM::FenceMbarrierInitOp::create(b, loc);
  }
  if (multicast)
    clusterSync();
  else
    gpu::BarrierOp::create(b, loc);

  // The warpgroup index, broadcast from lane 0: ptxas then knows it is
  // warp-uniform, so the role branches stay uniform and the wgmma
  // descriptors computed inside them live in uniform registers. Derived
  // from the thread index directly, every branch on it is divergent to
  // ptxas, descriptors go through R2UR into the same uniform registers, and
  // ptxas waits for each wgmma before the next may start.
  Value warpgroup =
      gpu::ShuffleOp::create(b, loc, divU(tid, kWarpgroupThreads), 0, 32,
                             gpu::ShuffleMode::IDX)
          .getShuffleResult();
  auto roles = scf::IfOp::create(b, loc, cmp(Pred::eq, warpgroup, c32(0)),
                                 /*withElse=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(roles.thenBlock()->getTerminator());
    emitProducer(p, tid);
  }
  b.setInsertionPoint(roles.elseBlock()->getTerminator());
  emitConsumer(p, tid, warpgroup);
  b.setInsertionPointAfter(roles);
  // A block of a cluster stays until the others are done: they may still
  // arrive on its barriers.
  if (multicast)
    clusterSync();
  if (varlenGuard)
    b.setInsertionPointAfter(varlenGuard);
  gpu::ReturnOp::create(b, loc);
}

Value Builder::slotBarrier(int64_t first, Value slot) {
  return sharedAddress(
      add(c32(layout.barriers + 8 * first), mul(slot, c32(8))));
}

KvTileRange Builder::kvTiles(const ForwardParams &p,
                             const BlockCoordinates &at) {
  return kvTileRange(p, at.batch, at.head, mul(at.queryBlock, c64(cfg.blockM)),
                     cfg.blockM, cfg.blockN);
}

// ---- consumers --------------------------------------------------------------
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

  // Ping-pong: consumer c issues its products only after c - 1 (cyclic)
  // issued theirs, so the tensor cores take the warpgroups' products in
  // turn and one warpgroup's softmax runs under the other's products.
  // Named barrier 1 + c admits consumer c (its 128 threads wait, the
  // previous consumer's 128 arrive); the last consumer opens the first
  // turn, every turn ends with an arrive, and the first consumer takes the
  // last consumer's final one before it exits (endTurns), so every barrier
  // ends balanced. In a persistent kernel the turns run on across tiles:
  // one consumer's epilogue runs under the other's products too.
  Value isLastConsumer = cmp(Pred::eq, consumer, c32(consumers - 1));
  Value myTurn = add(consumer, c32(1));
  Value nextTurn = add(remU(add(consumer, c32(1)), consumers), c32(1));
  const int64_t turnThreads = 2 * kWarpgroupThreads;
  // Every consumer runs the software pipeline below (two of them taking
  // turns) rather than a plain loop per tile (S, softmax, P V): the
  // softmax of one tile runs under the products of the next
  // (docs/performance.md has what each schedule gains).
  const bool pingPong = consumers == 2;
  auto beginProducts = [&] {
    if (pingPong)
      namedBarrierSync(myTurn, turnThreads);
  };
  auto endProducts = [&](Value) {
    if (pingPong)
      namedBarrierArrive(nextTurn, turnThreads);
  };
  if (pingPong)
    ifThen(isLastConsumer,
           [&] { namedBarrierArrive(c32(1), turnThreads); });

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
  // The parameters of the tile at work: a persistent varlen consumer
  // narrows a copy of `p` to each tile's sequence (narrowToSequence), and
  // takes the diagonal of each (bottom-right alignment differs per
  // sequence).
  ForwardParams cur = p;
  const bool perTileSequence = persistent && spec.varlen;
  Value diagonal = perTileSequence ? Value() : diagonalOffset(p);
  Value qDesc =
      descriptor(add(alignedAddress, consumerRows(consumer, 0)), Major::K, 0);
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
  auto nextTile = [&](Value done) {
    barrierWait(qFull(consumer), arith::AndIOp::create(b, loc, done, c32(1)));
    return readTileInfoField(consumer, 0);
  };
  // The turns end with the last consumer's arrive on the first consumer's
  // barrier (it cannot know a turn is its last); the first consumer takes
  // it here, so every barrier ends balanced.
  auto endTurns = [&](Value, Value) {
    if (pingPong)
      ifThen(cmp(Pred::eq, consumer, c32(0)),
             [&] { namedBarrierSync(myTurn, turnThreads); });
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
    return Target{readTileInfo(consumer), readTileInfoField(consumer, 3)};
  };
  auto releaseEarly =
      [&](const BlockCoordinates &at) -> std::optional<Target> {
    if (!outputApart)
      return std::nullopt;
    Target t = target(at);
    t.rows = add(t.rows, c32(layout.o));
    barrierArrive(qEmpty(consumer));
    return t;
  };
  auto epilogue = [&](const BlockCoordinates &at,
                      const std::optional<Target> &early, ValueRange max,
                      ValueRange sum, ValueRange o) {
    Target t = early ? *early : target(at);
    storeOutput(cur, softmax, consumer, quadRow, quadCol, warpInGroup, tid,
                t.at, t.rows, max, sum, o);
  };
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
    auto readAhead = [&](Visit &v) {
      v.reads = softmax.readMaskAhead(mul(v.tile, c64(cfg.blockN)), quadCol,
                                      rulesOf(v), myRow);
    };
    auto maskTile = [&](SmallVector<Value> &s, const Visit &v) {
      ScoreRules rules = rulesOf(v);
      softmax.mask(s, mul(v.tile, c64(cfg.blockN)), cfg.blockN,
                   consumerRow0,
                   add(consumerRow0,
                       c64(WgmmaForward::kRowsPerWarpgroup - 1)),
                   quadCol, rules, myRow);
    };
    auto softmaxStep = [&](SmallVector<Value> &s, const Visit &j,
                           ValueRange max, ValueRange sum) {
      maskTile(s, j);
      return softmax.update(s, max, sum, p.scaleLog2);
    };
    // Tile j's step against the max as it stands (K_j still in `slot`).
    // Where a row of the warpgroup outgrew the bound the tile goes through
    // the max after all: S_j again (a wgmma, hence the warpgroup's vote),
    // which also waits for the P V in flight. With random scores only the
    // first tile of a row needs the max, and it takes it (softmaxStep).
    auto boundedStep = [&](SmallVector<Value> &s, const Visit &j, Value slot,
                           ValueRange max, ValueRange sum) {
      maskTile(s, j);
      FragmentSoftmax::Update fast =
          softmax.updateWithinBound(s, max, sum, p.scaleLog2);
      const int64_t rows = softmax.rowStates();
      SmallVector<Type> types(s.size() + 3 * rows, f32);
      auto step = scf::IfOp::create(b, loc, types,
                                    warpgroupAny(fast.outgrown, consumer),
                                    /*withElseRegion=*/true);
      auto yield = [&](const FragmentSoftmax::Update &u) {
        SmallVector<Value> values(u.probs);
        llvm::append_range(values, u.max);
        llvm::append_range(values, u.sum);
        llvm::append_range(values, u.alpha);
        scf::YieldOp::create(b, loc, values);
      };
      {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPointToStart(step.thenBlock());
        SmallVector<Value> again =
            waitGroups(0, issueScores(qDesc, kDesc(slot)));
        yield(softmaxStep(again, j, max, sum));
        b.setInsertionPointToStart(step.elseBlock());
        yield(fast);
      }
      ValueRange r = step.getResults();
      FragmentSoftmax::Update u;
      u.probs.assign(r.begin(), r.begin() + s.size());
      u.max.assign(r.begin() + s.size(), r.begin() + s.size() + rows);
      u.sum.assign(r.begin() + s.size() + rows,
                   r.begin() + s.size() + 2 * rows);
      u.alpha.assign(r.begin() + s.size() + 2 * rows, r.end());
      return u;
    };
    auto at_ = [&](Value j) { return add(iteration, j); };

    // Software pipeline, one K/V tile apart: iteration j issues S_j = Q
    // K_j^T and O += P_{j-1} V_{j-1} together, then runs the softmax of
    // S_j while P V is still on the tensor cores, and rescales O once that
    // lands. Tile 0: S only.
    Value zero = c32(0);
    Visit visit0 = visit(zero);
    Value slot0 = slotOf(at_(zero));
    barrierWait(kFull(slot0), parityOf(at_(zero)));
    beginProducts();
    SmallVector<Value> s0 = issueScores(qDesc, kDesc(slot0));
    endProducts(Value());
    readAhead(visit0);
    s0 = waitGroups(0, s0);
    release(kEmpty(slot0));
    FragmentSoftmax::Update first =
        softmaxStep(s0, visit0, ValueRange{negInfV, negInfV},
                    ValueRange{zeroF, zeroF});

    // State: max[2], sum[2], O[outs], P of the previous tile.
    SmallVector<Value> init = {first.max[0], first.max[1], first.sum[0],
                               first.sum[1]};
    init.append(outs, zeroF);
    SmallVector<Value> firstPacked = softmax.pack(first.probs);
    init.append(firstPacked.begin(), firstPacked.end());
    const int64_t oAt = 4, pAt = 4 + outs;
    const int64_t pCount = firstPacked.size();
    auto loop = scf::ForOp::create(
        b, loc, c32(1), numTiles, c32(1), init,
        [&](OpBuilder &, Location, Value j, ValueRange state) {
          Value prev = sub(j, c32(1));
          Visit visitJ = visit(j);
          Value slot = slotOf(at_(j)), prevSlot = slotOf(at_(prev));
          barrierWait(kFull(slot), parityOf(at_(j)));
          barrierWait(vFull(prevSlot), parityOf(at_(prev)));
          beginProducts();
          SmallVector<Value> scores = issueScores(qDesc, kDesc(slot));
          SmallVector<Value> o = issueAccumulate(
              state.slice(oAt, outs),
              SmallVector<Value>(state.slice(pAt, pCount)), vDesc(prevSlot));
          endProducts(Value());
          readAhead(visitJ);
          scores = waitGroups(1, scores);
          FragmentSoftmax::Update u = boundedStep(
              scores, visitJ, slot, state.slice(0, 2), state.slice(2, 2));
          release(kEmpty(slot));
          o = waitGroups(0, o);
          release(vEmpty(prevSlot));
          o = softmax.rescale(o, u.alpha);
          // P_j is rounded only now, in the registers P_{j-1} held until
          // its product landed: one packed P is live, not two.
          SmallVector<Value> packed = softmax.pack(u.probs);
          SmallVector<Value> next = {u.max[0], u.max[1], u.sum[0], u.sum[1]};
          next.append(o.begin(), o.end());
          next.append(packed.begin(), packed.end());
          scf::YieldOp::create(b, loc, next);
        });

    // The last tile's P V.
    ValueRange results = loop.getResults();
    std::optional<Target> early = releaseEarly(at);
    Value last = at_(sub(numTiles, c32(1)));
    barrierWait(vFull(slotOf(last)), parityOf(last));
    beginProducts();
    SmallVector<Value> o = issueAccumulate(
        results.slice(oAt, outs),
        SmallVector<Value>(results.slice(pAt, pCount)), vDesc(slotOf(last)));
    endProducts(Value());
    o = waitGroups(0, o);
    release(vEmpty(slotOf(last)));
    epilogue(at, early, results.slice(0, 2), results.slice(2, 2), o);
    return numTiles;
  };
  // A consumer whose 64 rows all lie past seqlenQ (the last query block of
  // a length that block_m does not divide) does no products: the producer
  // releases each K/V slot for it (idleWarps), and it hands its Q rows
  // back at once. The other consumers then have the tensor cores to
  // themselves.
  auto idleTile = [&](const BlockCoordinates &at) {
    barrierArrive(qEmpty(consumer));
    return toI32(kvTiles(p, at).count);
  };
  // Each branch reads the tile's record itself: nothing of it stays live
  // across the branch.
  auto persistentTile = [&](Value iteration) {
    if (perTileSequence) {
      cur = p;
      narrowToRows(cur, toI64(readTileInfoField(consumer, 2)),
                   readTileRows(consumer));
    }
    if (!skipsIdleRows)
      return consumeTile(readTileInfo(consumer), iteration);
    Value rows0 = add(
        mul(toI64(readTileInfoField(consumer, 0)), c64(cfg.blockM)),
        toI64(mul(consumer, c32(WgmmaForward::kRowsPerWarpgroup))));
    // Read from lane 0, so that ptxas knows the branch warp-uniform.
    Value idle = gpu::ShuffleOp::create(
                     b, loc,
                     arith::ExtUIOp::create(b, loc, i32,
                                            cmp(Pred::sge, rows0, p.seqlenQ)),
                     0, 32, gpu::ShuffleMode::IDX)
                     .getShuffleResult();
    auto branch = scf::IfOp::create(b, loc, TypeRange{i32},
                                    cmp(Pred::ne, idle, c32(0)),
                                    /*withElseRegion=*/true);
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPointToStart(branch.thenBlock());
    scf::YieldOp::create(b, loc, idleTile(readTileInfo(consumer)));
    b.setInsertionPointToStart(branch.elseBlock());
    scf::YieldOp::create(b, loc,
                         consumeTile(readTileInfo(consumer), iteration));
    return branch.getResult(0);
  };
  if (!persistent) {
    barrierWait(qFull(consumer), c32(0));
    consumeTile(blockCoordinates(), c32(0));
    endTurns(Value(), Value());
    return;
  }
  forEachTile(
      [&] { return c32(kNoTile); }, nextTile,
      [&](Value, Value iteration, Value) { return persistentTile(iteration); },
      endTurns);
  // The last store must have read its staging rows before the block exits.
  if (outputApart)
    waitForStores(tid);
}

} // namespace flashjit::wgmma

namespace flashjit {

void WgmmaForward::emit(OpBuilder &builder, Location loc,
                        const AttentionSpec &spec, const TileConfig &config,
                        StringRef name, const ModRegions &mods) const {
  wgmma::Builder(builder, loc, spec, config, persistent(),
                 Kind == Grid::Cluster)
      .build(name, mods);
}

} // namespace flashjit
