//===- WgmmaForward.cpp - IR builder of the wgmma template ----------------===//
// Why: emits the Hopper FlashAttention forward kernel (FlashAttention-3's
// structure) as a gpu.func of upstream dialects plus inline PTX for wgmma.
//
// Roles: warpgroup 0 is the producer. It gives registers back (setmaxnreg)
// and one of its threads issues every load: Q once, then for each K/V tile
// waits until the consumers have released the K slot (then the V slot) of
// the ring, and loads K and V with TMA, each completing on its own
// mbarrier. Warpgroups 1..C are the consumers, 64 query rows each, with
// the registers the producer gave up; each warp's wgmma accumulators have
// mma.sync's layout, so the mask and online softmax are FragmentSoftmax's.
//
// The software pipeline, one tile deep: iteration j issues S_j = Q K_j^T
// (wgmma, both operands in shared memory) and O += P_{j-1} V_{j-1} (wgmma,
// P from registers) back to back, waits for S_j only, runs the softmax of
// S_j while P V is still on the tensor cores, then waits for P V, rescales
// O and rounds P_j. Two consumers take turns issuing (named barriers,
// ping-pong), so one warpgroup's softmax also runs under the other's
// products. Three consumers (head dim 64) have 160 registers each and run
// the plain loop per tile (S, softmax, P V).
//
// Epilogue: each consumer writes O / l into its own rows of the Q tile (its
// last product has read them) in the 128-byte swizzled layout of a TMA box,
// and one of its threads stores them with TMA (one box per 64-column
// panel; rows past seqlenQ are dropped by the store).
//
// K_j's slot is released (one arrive per warp) once S_j has landed, V_j's
// once P_j V_j has, so the producer refills K a tile ahead of V.
//
// Shared layout, from a 1024-byte aligned base (the 128-byte swizzle
// pattern repeats every 1024 bytes): the Q tile, `stages` K tiles,
// `stages` V tiles, then the mbarriers (WgmmaBuilder.h). A tile of R rows
// is stored as head_dim / 64 panels of R rows x 128 bytes, each written by
// one TMA box with 128-byte swizzle. Rows past the sequence end arrive as
// zeros (TMA's out-of-bounds fill) and the mask sets their scores to -inf.
#include "WgmmaBuilder.h"

#include "FragmentSoftmax.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>

using namespace mlir;

namespace flashjit::wgmma {

namespace {
constexpr int64_t kWarpgroupThreads = 128;
constexpr int64_t kRowBytes = 128; // one swizzled shared row
} // namespace

Builder::Builder(OpBuilder &b, Location loc, const AttentionSpec &spec,
                 const TileConfig &config)
    : KernelIR(b, loc, spec), cfg(config), d(spec.headDim),
      consumers(config.blockM / WgmmaForward::kRowsPerWarpgroup),
      threads(config.warps * 32), stages(config.stages),
      qBytes(config.blockM * spec.headDim * dtypeBytes(spec.dtype)),
      kvTileBytes(config.blockN * spec.headDim * dtypeBytes(spec.dtype)) {
  sharedPtr = LLVM::LLVMPointerType::get(b.getContext(), /*addressSpace=*/3);
  kOffset = qBytes;
  vOffset = kOffset + stages * kvTileBytes;
  barOffset = vOffset + stages * kvTileBytes;
}

void Builder::build(StringRef name) {
  std::string smemName = (name + "_smem").str();
  LLVM::GlobalOp::create(b, loc, LLVM::LLVMArrayType::get(b.getI8Type(), 0),
                         /*isConstant=*/false, LLVM::Linkage::External,
                         smemName, Attribute(), /*alignment=*/1024,
                         /*addrSpace=*/3);
  OpBuilder::InsertionGuard funcGuard(b);
  ForwardParams p = beginForwardKernel(name, threads, /*withTensorMaps=*/true);
  // One block per SM: ptxas then caps registers at entry, which setmaxnreg
  // needs to take effect.
  b.getInsertionBlock()->getParentOp()->setAttr("nvvm.minctasm",
                                                b.getI32IntegerAttr(1));

  // The dynamic shared base, rounded up to 1024 bytes (resources() counts
  // the slack).
  Value base = LLVM::AddressOfOp::create(b, loc, sharedPtr, smemName);
  Value baseAddress = LLVM::PtrToIntOp::create(b, loc, i32, base);
  alignedAddress = arith::AndIOp::create(
      b, loc, add(baseAddress, c32(1023)), c32(~1023));
  smemAligned = LLVM::GEPOp::create(b, loc, sharedPtr, b.getI8Type(), base,
                                    ValueRange{sub(alignedAddress,
                                                   baseAddress)});
  qFull = barrier(0);

  Value tid = toI32(gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x));
  BlockCoordinates at = blockCoordinates();
  Value m0 = mul(at.queryBlock, c64(cfg.blockM));
  Value kvEnd = p.seqlenK;
  if (spec.causal)
    kvEnd = minS(p.seqlenK, add(m0, c64(cfg.blockM)));
  Value numTiles = divU(add(kvEnd, c64(cfg.blockN - 1)), cfg.blockN);

  // Barriers: set up by one thread, visible to the copy engine and to every
  // thread before any use.
  {
    OpBuilder::InsertionGuard g(b);
    auto first = scf::IfOp::create(b, loc, cmp(Pred::eq, tid, c32(0)),
                                   /*withElse=*/false);
    b.setInsertionPoint(first.thenBlock()->getTerminator());
    barrierInit(qFull, 1);
    for (int64_t s = 0; s < stages; ++s) {
      barrierInit(barrier(1 + s), 1);
      barrierInit(barrier(1 + stages + s), 1);
      barrierInit(barrier(1 + 2 * stages + s),
                  consumers * WgmmaForward::kWarpsPerWarpgroup);
      barrierInit(barrier(1 + 3 * stages + s),
                  consumers * WgmmaForward::kWarpsPerWarpgroup);
    }
    NVVM::FenceMbarrierInitOp::create(b, loc);
  }
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
    emitProducer(p, at, m0, numTiles, tid);
  }
  b.setInsertionPoint(roles.elseBlock()->getTerminator());
  emitConsumer(p, at, m0, numTiles, tid, warpgroup);
  b.setInsertionPointAfter(roles);
  gpu::ReturnOp::create(b, loc);
}

Value Builder::slotBarrier(int64_t first, Value slot) {
  return shared(add(c32(barOffset + 8 * first), mul(slot, c32(8))));
}

// ---- producer ---------------------------------------------------------------
void Builder::emitProducer(const ForwardParams &p, const BlockCoordinates &at,
                           Value m0, Value numTiles, Value tid) {
  NVVM::SetMaxRegisterOp::create(
      b, loc, WgmmaForward::producerRegisters(consumers),
      NVVM::SetMaxRegisterAction::decrease);
  auto issuer = scf::IfOp::create(b, loc, cmp(Pred::eq, tid, c32(0)),
                                  /*withElse=*/false);
  b.setInsertionPoint(issuer.thenBlock()->getTerminator());
  Value qMap = p.tensorMaps[0], kMap = p.tensorMaps[1],
        vMap = p.tensorMaps[2];
  barrierExpect(qFull, qBytes);
  tmaLoadTile(qMap, 0, c32(0), qFull, m0, at.head, at.batch, cfg.blockM);
  scf::ForOp::create(
      b, loc, cIdx(0), toIndex(numTiles), cIdx(1), ValueRange{},
      [&](OpBuilder &, Location, Value tileIndex, ValueRange) {
        Value j = toI32(tileIndex);
        Value s = remU(j, stages);
        Value round = divU(j, stages);
        // The first round finds every slot free: waiting on the parity
        // before a fresh barrier's phase 0 returns at once.
        Value freeParity = arith::XOrIOp::create(
            b, loc, arith::AndIOp::create(b, loc, round, c32(1)), c32(1));
        Value row0 = mul(toI64(tileIndex), c64(cfg.blockN));
        Value slotOffset = mul(s, c32(kvTileBytes));
        barrierWait(kEmpty(s), freeParity);
        barrierExpect(kFull(s), kvTileBytes);
        tmaLoadTile(kMap, kOffset, slotOffset, kFull(s), row0, at.kvHead,
                    at.batch, cfg.blockN);
        barrierWait(vEmpty(s), freeParity);
        barrierExpect(vFull(s), kvTileBytes);
        tmaLoadTile(vMap, vOffset, slotOffset, vFull(s), row0, at.kvHead,
                    at.batch, cfg.blockN);
        scf::YieldOp::create(b, loc);
      });
}

// ---- consumers --------------------------------------------------------------
void Builder::emitConsumer(const ForwardParams &p, const BlockCoordinates &at,
                           Value m0, Value numTiles, Value tid,
                           Value warpgroup) {
  NVVM::SetMaxRegisterOp::create(b, loc,
                                 WgmmaForward::consumerRegisters(consumers),
                                 NVVM::SetMaxRegisterAction::increase);
  Value consumer = sub(warpgroup, c32(1));
  Value lane = remU(tid, 32);
  Value warpInGroup = remU(divU(tid, 32), WgmmaForward::kWarpsPerWarpgroup);
  Value quadRow = toI64(divU(lane, 4));
  Value quadCol = toI64(mul(remU(lane, 4), c32(2)));
  Value consumerRow0 = add(
      m0, toI64(mul(consumer, c32(WgmmaForward::kRowsPerWarpgroup))));
  Value warpRow0 = add(consumerRow0, toI64(mul(warpInGroup, c32(16))));
  auto myRow = [&](int64_t, int64_t h) {
    return add(warpRow0, add(quadRow, c64(8 * h)));
  };

  // Ping-pong: consumer c issues its products only after c - 1 (cyclic)
  // issued theirs, so the tensor cores take the warpgroups' products in
  // turn and one warpgroup's softmax runs under the other's products.
  // Named barrier 1 + c admits consumer c (its 128 threads wait, the
  // previous consumer's 128 arrive); the last consumer opens the first
  // turn and skips its final arrive, so every barrier ends balanced.
  Value isLastConsumer = cmp(Pred::eq, consumer, c32(consumers - 1));
  Value myTurn = add(consumer, c32(1));
  Value nextTurn = add(remU(add(consumer, c32(1)), consumers), c32(1));
  const int64_t turnThreads = 2 * kWarpgroupThreads;
  auto ifThen = [&](Value condition, llvm::function_ref<void()> body) {
    OpBuilder::InsertionGuard g(b);
    auto op = scf::IfOp::create(b, loc, condition, /*withElse=*/false);
    b.setInsertionPoint(op.thenBlock()->getTerminator());
    body();
  };
  // One or two consumers run the software pipeline below, two of them
  // taking turns; three (head dim 64, 160 registers each) the plain loop.
  // Measured on an H100 (bf16, b4 h16 s4096, one run, TFLOP/s, plain /
  // pipelined / pipelined with turns): head dim 128 m128 n128 559 / 637 /
  // 633, head dim 256 m128 n64 632 / 681 / 680, head dim 64 m192 n128 474 /
  // 475 / -, m128 n128 401 / - / 396.
  const bool pipelined = consumers != 3;
  const bool pingPong = consumers == 2;
  auto beginProducts = [&] {
    if (pingPong)
      namedBarrierSync(myTurn, turnThreads);
  };
  auto endProducts = [&](bool final) {
    if (!pingPong)
      return;
    if (!final)
      return namedBarrierArrive(nextTurn, turnThreads);
    ifThen(arith::XOrIOp::create(b, loc, isLastConsumer,
                                 arith::ConstantIntOp::create(b, loc, 1, 1)),
           [&] { namedBarrierArrive(nextTurn, turnThreads); });
  };
  if (pingPong)
    ifThen(isLastConsumer,
           [&] { namedBarrierArrive(c32(1), turnThreads); });

  const int64_t nTiles = cfg.blockN / 8;
  const int64_t outs = d / 2;
  FragmentSoftmax softmax(*this, /*mTiles=*/1, nTiles);
  Value qDesc =
      descriptor(add(alignedAddress, consumerRows(consumer, 0)), Major::K, 0);
  auto kDesc = [&](Value s) {
    return descriptor(add(alignedAddress,
                          add(c32(kOffset), mul(s, c32(kvTileBytes)))),
                      Major::K, 0);
  };
  auto vDesc = [&](Value s) {
    return descriptor(add(alignedAddress,
                          add(c32(vOffset), mul(s, c32(kvTileBytes)))),
                      Major::MN, cfg.blockN * kRowBytes);
  };
  auto slotOf = [&](Value j) { return remU(j, stages); };
  auto parityOf = [&](Value j) {
    return arith::AndIOp::create(b, loc, divU(j, stages), c32(1));
  };
  // The scores of tile j (i32) through the mask and the online softmax.
  auto softmaxStep = [&](SmallVector<Value> &s, Value j, ValueRange max,
                         ValueRange sum) {
    softmax.mask(s, mul(toI64(j), c64(cfg.blockN)), cfg.blockN, consumerRow0,
                 quadCol, p.seqlenK, myRow);
    return softmax.update(s, max, sum, p.scaleLog2);
  };
  // The products that read a slot are complete: one arrive per warp.
  auto release = [&](Value emptyBarrier) {
    ifThen(cmp(Pred::eq, lane, c32(0)),
           [&] { barrierArrive(emptyBarrier); });
  };
  // Epilogue: O / l into this consumer's rows of the Q tile (its last
  // product has read them), in the 128-byte swizzled layout of a TMA box,
  // then one thread stores the 64 rows with TMA, one box per 64-column
  // panel; rows past seqlenQ are dropped by the store.
  auto storeOutput = [&](ValueRange max, ValueRange sum, ValueRange o) {
    SmallVector<Value> packed =
        softmax.finish(p, at, max, sum, o, quadCol, myRow);
    const int64_t dTiles = d / 8;
    Value rowBase = add(
        mul(warpInGroup, c32(16 * kRowBytes)),
        mul(toI32(quadRow), c32(kRowBytes)));
    Value quadBytes = mul(toI32(quadCol), c32(2));
    Value swizzle = toI32(quadRow); // row % 8: the 16-byte chunk XOR
    for (int64_t dt = 0; dt < dTiles; ++dt) {
      int64_t panel = dt / 8, chunk = dt % 8;
      Value chunkBytes =
          mul(arith::XOrIOp::create(b, loc, c32(chunk), swizzle), c32(16));
      for (int64_t h = 0; h < 2; ++h) {
        Value offset = add(add(consumerRows(consumer, panel),
                                   add(rowBase, c32(h * 8 * kRowBytes))),
                               add(chunkBytes, quadBytes));
        LLVM::StoreOp::create(b, loc, packed[dt * 2 + h], shared(offset),
                              /*alignment=*/4);
      }
    }
    // The generic-proxy writes become visible to the copy engine, then the
    // warpgroup's threads meet before one of them issues the stores.
    NVVM::FenceProxyOp::create(
        b, loc, NVVM::ProxyKind::async_shared,
        NVVM::SharedSpaceAttr::get(b.getContext(),
                                   NVVM::SharedSpace::shared_cta));
    namedBarrierSync(add(c32(1 + consumers), consumer), kWarpgroupThreads);
    ifThen(cmp(Pred::eq, remU(tid, kWarpgroupThreads), c32(0)), [&] {
      for (int64_t panel = 0; panel < d / WgmmaForward::kPanelCols; ++panel)
        tmaStore(p.tensorMaps[3], shared(consumerRows(consumer, panel)),
                 {c32(panel * WgmmaForward::kPanelCols), toI32(consumerRow0),
                  toI32(at.head), toI32(at.batch)});
      NVVM::CpAsyncBulkCommitGroupOp::create(b, loc);
      // Shared memory must outlive the copy's reads of it.
      NVVM::CpAsyncBulkWaitGroupOp::create(b, loc, 0, b.getUnitAttr());
    });
  };
  barrierWait(qFull, c32(0));

  const float negInf = -std::numeric_limits<float>::infinity();
  Value negInfV = cF32(negInf), zeroF = cF32(0.0f);
  if (!pipelined) {
    // The plain loop: per tile, S = Q K^T, the softmax and rescale, then
    // O += P V; the other consumer's products fill the tensor cores while
    // this one runs its softmax.
    SmallVector<Value> init = {negInfV, negInfV, zeroF, zeroF};
    init.append(outs, zeroF);
    auto loop = scf::ForOp::create(
        b, loc, cIdx(0), toIndex(numTiles), cIdx(1), init,
        [&](OpBuilder &, Location, Value tileIndex, ValueRange state) {
          Value j = toI32(tileIndex);
          Value slot = slotOf(j);
          barrierWait(kFull(slot), parityOf(j));
          SmallVector<Value> scores =
              waitGroups(0, issueScores(qDesc, kDesc(slot)));
          release(kEmpty(slot));
          FragmentSoftmax::Update u =
              softmaxStep(scores, j, state.slice(0, 2), state.slice(2, 2));
          SmallVector<Value> packed = softmax.pack(u.probs);
          SmallVector<Value> o = softmax.rescale(state.drop_front(4), u.alpha);
          barrierWait(vFull(slot), parityOf(j));
          o = waitGroups(0, issueAccumulate(o, packed, vDesc(slot)));
          release(vEmpty(slot));
          SmallVector<Value> next = {u.max[0], u.max[1], u.sum[0], u.sum[1]};
          next.append(o.begin(), o.end());
          scf::YieldOp::create(b, loc, next);
        });
    ValueRange results = loop.getResults();
    storeOutput(results.slice(0, 2), results.slice(2, 2),
                results.drop_front(4));
    return;
  }

  // Software pipeline, one K/V tile apart: iteration j issues S_j = Q K_j^T
  // and O += P_{j-1} V_{j-1} together, then runs the softmax of S_j while
  // P V is still on the tensor cores, and rescales O once that lands.
  // Tile 0: S only.
  Value zero = c32(0);
  barrierWait(kFull(zero), zero);
  beginProducts();
  SmallVector<Value> s0 = issueScores(qDesc, kDesc(zero));
  endProducts(/*final=*/false);
  s0 = waitGroups(0, s0);
  release(kEmpty(zero));
  FragmentSoftmax::Update first =
      softmaxStep(s0, zero, ValueRange{negInfV, negInfV},
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
      b, loc, cIdx(1), toIndex(numTiles), cIdx(1), init,
      [&](OpBuilder &, Location, Value tileIndex, ValueRange state) {
        Value j = toI32(tileIndex);
        Value prev = sub(j, c32(1));
        Value slot = slotOf(j), prevSlot = slotOf(prev);
        barrierWait(kFull(slot), parityOf(j));
        barrierWait(vFull(prevSlot), parityOf(prev));
        beginProducts();
        SmallVector<Value> scores = issueScores(qDesc, kDesc(slot));
        SmallVector<Value> o = issueAccumulate(
            state.slice(oAt, outs),
            SmallVector<Value>(state.slice(pAt, pCount)), vDesc(prevSlot));
        endProducts(/*final=*/false);
        scores = waitGroups(1, scores);
        release(kEmpty(slot));
        FragmentSoftmax::Update u =
            softmaxStep(scores, j, state.slice(0, 2), state.slice(2, 2));
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
  Value last = toI32(sub(numTiles, c64(1)));
  barrierWait(vFull(slotOf(last)), parityOf(last));
  beginProducts();
  SmallVector<Value> o = issueAccumulate(
      results.slice(oAt, outs), SmallVector<Value>(results.slice(pAt, pCount)),
      vDesc(slotOf(last)));
  endProducts(/*final=*/true);
  o = waitGroups(0, o);
  storeOutput(results.slice(0, 2), results.slice(2, 2), o);
}

} // namespace flashjit::wgmma

namespace flashjit {

void WgmmaForward::emit(OpBuilder &builder, Location loc,
                        const AttentionSpec &spec, const TileConfig &config,
                        StringRef name) const {
  wgmma::Builder(builder, loc, spec, config).build(name);
}

} // namespace flashjit
