//===- DecodeSplitKernel.cpp - the split kernel of Flash-Decoding ---------===//
// Why: see DecodeKernel.h. One block per (split, head chunk) x KV head x
// sequence. Its rows are the chunk's query heads times the query tokens
// (token-major), so each K/V tile it loads serves every head of the group.
//
// Per block: the sequence's KV length (clamped to the cache) is cut into
// numSplits ranges of whole tiles of blockN keys; the block walks its
// range. K and V tiles stream through `stages` cp.async buffers: tile j's
// buffer is refilled with tile j + stages - 1 right after the barrier that
// ends tile j - 1, so stages - 1 tiles are in flight while one computes.
// The warps split the rows (warpsM) and each tile's keys (warpsN); per warp
// S = Q K^T and O += P V are mma.sync m16n8k16 with the online softmax of
// FragmentSoftmax between them (masks only on tiles that cross the end or
// the causal diagonal). On sm_90 the K/V tiles may instead arrive by bulk
// copies that one warp issues (DecodeBulkCopy.cpp), each stage completing
// on its own mbarrier. At the end the warps of a row group merge their
// (max, sum, O) through shared memory, and the block writes O and LSE (one
// split) or its partial O and base-2 LSE for the combine kernel.
#include "DecodeBuilder.h"

#include "../FragmentSoftmax.h"
#include "../ScoreMods.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace flashjit::decode {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
} // namespace

DecodeParams Builder::beginSplitKernel(StringRef name) {
  SmallVector<Type> argTypes(9, globalPtr);
  argTypes.append(16, i64);
  argTypes.append({i32, i32, i32, f32});
  gpu::GPUFuncOp func = beginKernel(name, argTypes, threads);
  ValueRange args = func.getBody().front().getArguments();
  DecodeParams p;
  p.q = args[0];
  p.k = args[1];
  p.v = args[2];
  p.o = args[3];
  p.lse = args[4];
  p.oPartial = args[5];
  p.lsePartial = args[6];
  p.kvLens = args[7];
  p.blockTable = args[8];
  p.qStrides.assign(args.begin() + 9, args.begin() + 12);
  p.kStrides.assign(args.begin() + 12, args.begin() + 15);
  p.vStrides.assign(args.begin() + 15, args.begin() + 18);
  p.oStrides.assign(args.begin() + 18, args.begin() + 21);
  p.lseStrides.assign(args.begin() + 21, args.begin() + 24);
  p.blockTableStride = args[24];
  p.kvCapacity = arith::ExtSIOp::create(b, loc, i64, args[25]);
  p.numPages = arith::ExtSIOp::create(b, loc, i64, args[26]);
  p.numSplits = arith::ExtSIOp::create(b, loc, i64, args[27]);
  p.scaleLog2 = args[28];
  return p;
}

Value Builder::loadF32(Value address) {
  return LLVM::LoadOp::create(b, loc, f32, address, /*alignment=*/4);
}

void Builder::storeF32(Value value, Value address) {
  LLVM::StoreOp::create(b, loc, value, address, /*alignment=*/4);
}

Value Builder::sharedF32Address(Value byteOffset) {
  return sharedAddress(toI32(byteOffset));
}

void Builder::copyQueries(const DecodeParams &p, Value batch, Value headBase) {
  Value batchOffset = mul(batch, p.qStrides[0]);
  Value safe =
      globalAddress(p.q, elt, add(batchOffset, mul(headBase, p.qStrides[2])));
  forEachChunk(tiling.rowsPadded, [&](Value row, Value column) {
    Value token = divU(row, tiling.headsPerBlock);
    Value head = add(headBase, remU(row, tiling.headsPerBlock));
    Value valid = cmp(Pred::slt, row, c64(tiling.rows));
    Value offset = add(add(batchOffset, mul(token, p.qStrides[1])),
                       add(mul(head, p.qStrides[2]), column));
    Value from = arith::SelectOp::create(b, loc, valid,
                                         globalAddress(p.q, elt, offset), safe);
    Value bytes = arith::SelectOp::create(b, loc, valid, c32(16), c32(0));
    Value dst = toI32(chunkOffset(row, column));
    cpAsync16(dst, from, bytes);
  });
}

void Builder::copyKeys(const DecodeParams &p, Value base, ValueRange strides,
                       Value batch, Value kvHead, Value firstKey, Value kvLen,
                       Value tileOffset, const TilePages &pages) {
  if (dspec.paged())
    return copyPagedKeys(p, base, strides, batch, kvHead, firstKey, kvLen,
                         tileOffset, pages.empty() ? nullptr : &pages);
  copyTile(base, strides, batch, kvHead, firstKey, kvLen, tiling.blockN,
           tileOffset);
}

Builder::TablePage Builder::tablePage(const DecodeParams &p, Value table,
                                      Value key) {
  Value page = arith::ExtSIOp::create(
      b, loc, i64,
      LLVM::LoadOp::create(
          b, loc, i32, globalAddress(table, i32, divU(key, dspec.pageSize)),
          4));
  Value inPool = arith::AndIOp::create(b, loc, cmp(Pred::sge, page, c64(0)),
                                       cmp(Pred::slt, page, p.numPages));
  return {arith::SelectOp::create(b, loc, inPool, page, c64(0)), inPool};
}

TilePages Builder::tilePages(const DecodeParams &p, Value batch,
                             Value firstKey, Value kvLen) {
  TilePages pages;
  const int64_t pageSize = dspec.pageSize, blockN = tiling.blockN;
  const int64_t rowsPerRound = threads / (d / 8);
  if (!dspec.paged() || bulk)
    return pages;
  if (blockN % pageSize == 0 && pageSize % rowsPerRound == 0)
    pages.slotRows = pageSize;
  else if (pageSize % blockN == 0)
    pages.slotRows = blockN;
  else
    return pages;
  Value table =
      globalAddress(p.blockTable, i32, mul(batch, p.blockTableStride));
  // kvLen 0 reads the sequence's first entry, which the table has.
  Value lastKey = maxS(sub(kvLen, c64(1)), c64(0));
  for (int64_t slot = 0; slot * pages.slotRows < blockN; ++slot) {
    Value key = minS(add(firstKey, c64(slot * pages.slotRows)), lastKey);
    TablePage page = tablePage(p, table, key);
    pages.page.push_back(page.page);
    pages.inPool.push_back(page.inPool);
  }
  return pages;
}

void Builder::copyPagedKeys(const DecodeParams &p, Value base,
                            ValueRange strides, Value batch, Value kvHead,
                            Value firstKey, Value kvLen, Value tileOffset,
                            const TilePages *pages) {
  const int64_t chunksPerRow = d / 8;
  const int64_t rowsPerRound = threads / chunksPerRow;
  const int64_t pageSize = dspec.pageSize;
  Value row0 = divU(tid, chunksPerRow);
  Value column = mul(remU(tid, chunksPerRow), c64(8));
  Value headColumn = add(mul(kvHead, strides[1]), column);
  Value table =
      globalAddress(p.blockTable, i32, mul(batch, p.blockTableStride));
  Value lastKey = sub(kvLen, c64(1));
  Value dst0 = add(tileOffset, chunkOffset(row0, column));
  for (int64_t round = 0; round * rowsPerRound < tiling.blockN; ++round) {
    Value key = add(firstKey, add(row0, c64(round * rowsPerRound)));
    Value inSequence = cmp(Pred::slt, key, kvLen);
    Value valid, safePage, inPage;
    if (pages) {
      // The round's rows lie on one slot's page; a row past the sequence
      // reads nothing, from a row of that (safe) page.
      const int64_t slot = round * rowsPerRound / pages->slotRows;
      valid = arith::AndIOp::create(b, loc, inSequence, pages->inPool[slot]);
      safePage = pages->page[slot];
      inPage = remU(key, pageSize);
    } else {
      // Keys past the end look up the last page the sequence has, which
      // the table holds; nothing is read for them.
      Value clamped = minS(key, lastKey);
      TablePage page = tablePage(p, table, clamped);
      valid = arith::AndIOp::create(b, loc, inSequence, page.inPool);
      safePage = page.page;
      inPage = remU(clamped, pageSize);
    }
    Value offset = add(
        add(mul(safePage, strides[0]), mul(inPage, strides[2])), headColumn);
    Value from = globalAddress(base, elt, offset);
    Value bytes = arith::SelectOp::create(b, loc, valid, c32(16), c32(0));
    Value dst = roundDestination(tileOffset, dst0, row0, column,
                                 round * rowsPerRound);
    cpAsync16(dst, from, bytes);
  }
}

void Builder::emitSplitKernel(StringRef name) {
  std::string smemName = (name + "_smem").str();
  LLVM::GlobalOp::create(b, loc, LLVM::LLVMArrayType::get(b.getI8Type(), 0),
                         /*isConstant=*/false, LLVM::Linkage::External,
                         smemName, Attribute(), /*alignment=*/128,
                         /*addrSpace=*/3);
  OpBuilder::InsertionGuard funcGuard(b);
  DecodeParams p = beginSplitKernel(name);
  smemBase = LLVM::AddressOfOp::create(b, loc, sharedPtr, smemName);
  tid = threadIdX();

  const DecodeTiling &t = tiling;
  const int64_t mTiles = t.mTilesPerWarp;
  const int64_t kw = t.keysPerWarp;
  const int64_t nTiles = kw / 8; // n8 score tiles per warp
  const int64_t dTiles = d / 8;  // n8 output tiles
  const int64_t qSteps = d / 16; // k16 steps of Q K^T
  const int64_t rowBytes = rowElems * eltBytes;
  const int64_t kTileOffset = t.rowsPadded * rowBytes;
  const int64_t vTileOffset = kTileOffset + t.blockN * rowBytes;
  const int64_t stageBytes = 2 * t.blockN * rowBytes;
  const int64_t rowsState = mTiles * 2;
  const int64_t accBase = 2 * rowsState;

  // Where the block sits: grid (split x head chunk, KV head, sequence).
  Value blockX = toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::x));
  Value kvHead = toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::y));
  Value batch = toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::z));
  Value split = divU(blockX, t.headChunks);
  Value chunk = remU(blockX, t.headChunks);
  Value headBase = add(mul(kvHead, c64(dspec.groupSize())),
                       mul(chunk, c64(t.headsPerBlock)));

  Value lane = remU(tid, 32), warp = divU(tid, 32);
  Value wm = divU(warp, t.warpsN), wn = remU(warp, t.warpsN);
  Value quadRow = divU(lane, 4);
  Value quadCol = mul(remU(lane, 4), c64(2));
  Value warpRow0 = mul(wm, c64(16 * mTiles));

  // This sequence's keys, and this split's whole tiles of them.
  Value rawLen = arith::ExtSIOp::create(
      b, loc, i64,
      LLVM::LoadOp::create(b, loc, i32, globalAddress(p.kvLens, i32, batch),
                           4));
  Value kvLen = minS(maxS(rawLen, c64(0)), p.kvCapacity);
  Value tiles = divU(add(kvLen, c64(t.blockN - 1)), t.blockN);
  Value perSplit = arith::DivUIOp::create(
      b, loc, add(tiles, sub(p.numSplits, c64(1))), p.numSplits);
  Value firstTile = mul(split, perSplit);
  Value numTiles = maxS(minS(sub(tiles, firstTile), perSplit), c64(0));
  auto keyOf = [&](Value j) { return mul(add(firstTile, j), c64(t.blockN)); };

  // Tile j's K and V rows; `pages`: its block-table reads (tilePages),
  // or empty.
  auto copyIfTile = [&](Value j, Value slotOffset, const TilePages &pages) {
    OpBuilder::InsertionGuard g(b);
    auto more = scf::IfOp::create(b, loc, cmp(Pred::slt, j, numTiles),
                                  /*withElse=*/false);
    b.setInsertionPoint(more.thenBlock()->getTerminator());
    Value n0 = keyOf(j);
    copyKeys(p, p.k, p.kStrides, batch, kvHead, n0, kvLen,
             add(c64(kTileOffset), slotOffset), pages);
    copyKeys(p, p.v, p.vStrides, batch, kvHead, n0, kvLen,
             add(c64(vTileOffset), slotOffset), pages);
  };
  // Bulk copies: warp 0 issues tile j into stage j % stages.
  Value copyWarp = cmp(Pred::eq, warp, c64(0));
  auto bulkIfTile = [&](Value j) {
    OpBuilder::InsertionGuard g(b);
    auto more = scf::IfOp::create(
        b, loc,
        arith::AndIOp::create(b, loc, copyWarp, cmp(Pred::slt, j, numTiles)),
        /*withElse=*/false);
    b.setInsertionPoint(more.thenBlock()->getTerminator());
    bulkCopyTile(p, batch, kvHead, keyOf(j), kvLen, remU(j, t.stages));
  };

  // ---- prologue: Q, then tiles 0 .. stages-2, one group each ------------
  copyQueries(p, batch, headBase);
  NVVM::CpAsyncCommitGroupOp::create(b, loc);
  if (evictFirst && !bulk)
    l2Policy = evictFirstPolicy();
  if (bulk) {
    initStageBarriers();
    gpu::BarrierOp::create(b, loc);
    for (int64_t s = 0; s + 1 < t.stages; ++s)
      bulkIfTile(c64(s));
    NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
  } else {
    for (int64_t s = 0; s + 1 < t.stages; ++s) {
      copyIfTile(c64(s), c64(s * stageBytes),
                 tilePages(p, batch, keyOf(c64(s)), kvLen));
      NVVM::CpAsyncCommitGroupOp::create(b, loc);
    }
    NVVM::CpAsyncWaitGroupOp::create(b, loc, t.stages - 1);
  }
  gpu::BarrierOp::create(b, loc);

  // ldmatrix lane addresses, as the mma_sync forward kernel's; the warp's
  // keys start kw rows into each K/V tile.
  Value matrix = divU(lane, 8), matrixRow = remU(lane, 8);
  LaneTile qLane = laneTile(c64(0), add(warpRow0, remU(lane, 16)),
                            mul(divU(lane, 16), c64(8)));
  Value warpKeys = mul(wn, c64(kw * rowBytes));
  LaneTile kLane =
      laneTile(add(c64(kTileOffset), warpKeys),
               add(matrixRow, mul(divU(matrix, 2), c64(8))),
               mul(remU(matrix, 2), c64(8)));
  LaneTile vLane =
      laneTile(add(c64(vTileOffset), warpKeys),
               add(matrixRow, mul(remU(matrix, 2), c64(8))),
               mul(divU(matrix, 2), c64(8)));
  auto loadQ = [&](int64_t mt, int64_t ks) {
    return ldmatrix(laneAt(qLane, mt * 16, ks * 2), false);
  };
  // One m tile keeps its Q fragments in registers up to head dim 128; at
  // 256 (64 registers of Q) they are read from shared memory each tile.
  const bool qInRegisters = mTiles == 1 && d <= 128;
  SmallVector<SmallVector<Value, 4>> qFrags;
  if (qInRegisters)
    for (int64_t ks = 0; ks < qSteps; ++ks)
      qFrags.push_back(loadQ(0, ks));

  // The query token of a row state: rows are token-major.
  auto tokenOf = [&](int64_t mt, int64_t h) {
    Value row = add(warpRow0, add(quadRow, c64(16 * mt + 8 * h)));
    return divU(row, t.headsPerBlock);
  };
  FragmentSoftmax softmax(*this, mTiles, nTiles);
  ScoreRules rules{c64(dspec.qLen), kvLen, sub(kvLen, c64(dspec.qLen)),
                   nullptr,         batch, headBase};

  SmallVector<Value> init(rowsState, cF32(kNegInf));
  init.append(rowsState, cF32(0.0f));
  init.append(mTiles * dTiles * kAccPerTile, cF32(0.0f));
  auto loop = scf::ForOp::create(
      b, loc, cIdx(0), toIndex(numTiles), cIdx(1), init,
      [&](OpBuilder &, Location, Value tileIndex, ValueRange state) {
        Value j = toI64(tileIndex);
        Value next = add(j, c64(t.stages - 1));
        if (bulk) {
          // Every warp is done with tile j - 1, whose stage now receives
          // tile j + stages - 1; then wait for tile j.
          gpu::BarrierOp::create(b, loc);
          bulkIfTile(next);
          waitStage(j);
        } else {
          // Tile j has landed and every warp is done with tile j - 1,
          // whose buffer now receives tile j + stages - 1. That tile's
          // block-table reads go first, under the wait.
          TilePages pages = tilePages(p, batch, keyOf(next), kvLen);
          NVVM::CpAsyncWaitGroupOp::create(b, loc, t.stages - 2);
          gpu::BarrierOp::create(b, loc);
          copyIfTile(next, mul(remU(next, t.stages), c64(stageBytes)), pages);
          NVVM::CpAsyncCommitGroupOp::create(b, loc);
        }
        Value slot = mul(remU(j, t.stages), c64(stageBytes));
        LaneTile kTile = kLane.plus(*this, slot);
        LaneTile vTile = vLane.plus(*this, slot);

        // S = Q K^T over this warp's kw keys.
        SmallVector<Value> s = scoreTile(
            [&](int64_t mt, int64_t ks) {
              return qInRegisters ? qFrags[ks] : loadQ(mt, ks);
            },
            kTile, mTiles, nTiles);

        Value warpN0 = add(keyOf(j), mul(wn, c64(kw)));
        softmax.mask(s, warpN0, kw, c64(0), c64(dspec.qLen - 1), quadCol, rules,
                     tokenOf);
        FragmentSoftmax::Update u =
            softmax.update(s, state.slice(0, rowsState),
                           state.slice(rowsState, rowsState), p.scaleLog2);
        SmallVector<Value> nextState(u.max);
        nextState.append(u.sum);
        SmallVector<Value> packed = softmax.pack(u.probs);
        SmallVector<Value> acc =
            softmax.rescale(state.drop_front(accBase), u.alpha);

        // O += P V.
        accumulatePV(packed, vTile, mTiles, nTiles, acc);
        nextState.append(acc);
        scf::YieldOp::create(b, loc, nextState);
      });

  // ---- epilogue ------------------------------------------------------------
  // Every warp is done with the K/V buffers (the merge reuses them).
  NVVM::CpAsyncWaitGroupOp::create(b, loc, 0);
  gpu::BarrierOp::create(b, loc);
  ValueRange results = loop.getResults();
  RowsState mine;
  for (int64_t r = 0; r < rowsState; ++r) {
    mine.maxBase2.push_back(
        arith::MulFOp::create(b, loc, results[r], p.scaleLog2));
    mine.sum.push_back(
        shuffleXorReduce(results[rowsState + r], 4, /*isMax=*/false));
  }
  mine.acc.assign(results.begin() + accBase, results.end());
  if (t.warpsN == 1) {
    storeRows(p, mine, batch, headBase, split, wm, quadRow, quadCol);
  } else {
    RowsState merged = mergeWarps(mine, warp, wn, lane, kTileOffset);
    OpBuilder::InsertionGuard g(b);
    auto first = scf::IfOp::create(b, loc, cmp(Pred::eq, wn, c64(0)),
                                   /*withElse=*/false);
    b.setInsertionPoint(first.thenBlock()->getTerminator());
    storeRows(p, merged, batch, headBase, split, wm, quadRow, quadCol);
  }
  gpu::ReturnOp::create(b, loc);
}

RowsState Builder::mergeWarps(const RowsState &mine, Value warp, Value wn,
                              Value lane, int64_t scratchOffset) {
  // Each warp writes its state lane-major ([warp][value][lane], f32), so
  // a warp with wn = 0 reads another warp's values at its own fragment
  // positions: no change of layout, no bank conflicts.
  const int64_t rowsState = mine.maxBase2.size();
  const int64_t values = 2 * rowsState + mine.acc.size();
  auto slot = [&](Value w, int64_t value) {
    return add(
        c64(scratchOffset),
        mul(add(mul(add(mul(w, c64(values)), c64(value)), c64(32)), lane),
            c64(4)));
  };
  SmallVector<Value> all(mine.maxBase2);
  all.append(mine.sum);
  all.append(mine.acc);
  for (int64_t i = 0; i < values; ++i)
    storeF32(all[i], sharedF32Address(slot(warp, i)));
  gpu::BarrierOp::create(b, loc);

  // Only warps with wn = 0 use the result; the others compute it too and
  // drop it (the reads are in bounds, the branch is warp-uniform).
  RowsState merged;
  SmallVector<SmallVector<Value>> others; // [peer][value]
  Value groupWarp0 = sub(warp, wn);
  for (int64_t peer = 1; peer < tiling.warpsN; ++peer) {
    Value w = add(groupWarp0, c64(peer));
    SmallVector<Value> v;
    for (int64_t i = 0; i < values; ++i)
      v.push_back(loadF32(sharedF32Address(slot(w, i))));
    others.push_back(v);
  }
  SmallVector<SmallVector<Value>> factors(tiling.warpsN);
  for (int64_t r = 0; r < rowsState; ++r) {
    Value m = mine.maxBase2[r];
    for (auto &o : others)
      m = maxF(m, o[r]);
    // All -inf (no key in any warp): shift by 0, every factor is 0.
    Value empty = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, m,
                                        cF32(kNegInf));
    Value shift = arith::SelectOp::create(b, loc, empty, cF32(0.0f), m);
    auto factor = [&](Value max) {
      return exp2(arith::SubFOp::create(b, loc, max, shift));
    };
    factors[0].push_back(factor(mine.maxBase2[r]));
    Value sum = arith::MulFOp::create(b, loc, mine.sum[r], factors[0][r]);
    for (size_t peer = 0; peer < others.size(); ++peer) {
      factors[peer + 1].push_back(factor(others[peer][r]));
      sum = arith::AddFOp::create(
          b, loc, sum,
          arith::MulFOp::create(b, loc, others[peer][rowsState + r],
                                factors[peer + 1][r]));
    }
    merged.maxBase2.push_back(m);
    merged.sum.push_back(sum);
  }
  for (size_t i = 0; i < mine.acc.size(); ++i) {
    // Accumulator i is row half (i % 4) / 2 of m tile i / (dTiles * 4).
    const int64_t dTiles = d / 8;
    int64_t r = (i / (dTiles * kAccPerTile)) * 2 + (i % kAccPerTile) / 2;
    Value acc = arith::MulFOp::create(b, loc, mine.acc[i], factors[0][r]);
    for (size_t peer = 0; peer < others.size(); ++peer)
      acc = arith::AddFOp::create(
          b, loc, acc,
          arith::MulFOp::create(b, loc, others[peer][2 * rowsState + i],
                                factors[peer + 1][r]));
    merged.acc.push_back(acc);
  }
  return merged;
}

void Builder::storeRows(const DecodeParams &p, const RowsState &rows,
                        Value batch, Value headBase, Value split, Value wm,
                        Value quadRow, Value quadCol) {
  const int64_t mTiles = tiling.mTilesPerWarp;
  const int64_t dTiles = d / 8;
  Value oneSplit = cmp(Pred::eq, p.numSplits, c64(1));
  auto ifOp = scf::IfOp::create(b, loc, oneSplit, /*withElse=*/true);
  for (bool direct : {true, false}) {
    OpBuilder::InsertionGuard g(b);
    b.setInsertionPoint(direct ? ifOp.thenBlock()->getTerminator()
                               : ifOp.elseBlock()->getTerminator());
    for (int64_t mt = 0; mt < mTiles; ++mt)
      for (int64_t h = 0; h < 2; ++h) {
        const int64_t r = mt * 2 + h;
        Value row =
            add(mul(wm, c64(16 * mTiles)), add(quadRow, c64(16 * mt + 8 * h)));
        Value token = divU(row, tiling.headsPerBlock);
        Value head = add(headBase, remU(row, tiling.headsPerBlock));
        // A row with no key in this split (or at all) has sum 0: O = 0.
        Value noKey = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                                            rows.sum[r], cF32(0.0f));
        Value inverse = arith::SelectOp::create(
            b, loc, noKey, cF32(0.0f),
            arith::DivFOp::create(b, loc, cF32(1.0f), rows.sum[r]));
        // log2 of the row's sum of exp2: -inf for a row with no key.
        Value lse2 =
            arith::AddFOp::create(b, loc, rows.maxBase2[r], log2(rows.sum[r]));
        OpBuilder::InsertionGuard rowGuard(b);
        auto valid = scf::IfOp::create(
            b, loc, cmp(Pred::slt, row, c64(tiling.rows)), /*withElse=*/false);
        b.setInsertionPoint(valid.thenBlock()->getTerminator());
        Value lseOwner = cmp(Pred::eq, quadCol, c64(0));
        auto normalized = [&](int64_t i) {
          return arith::MulFOp::create(b, loc, rows.acc[i], inverse);
        };
        if (direct) {
          Value oRow =
              add(add(mul(batch, p.oStrides[0]), mul(token, p.oStrides[1])),
                  add(mul(head, p.oStrides[2]), quadCol));
          for (int64_t dt = 0; dt < dTiles; ++dt) {
            int64_t i = (mt * dTiles + dt) * kAccPerTile + 2 * h;
            LLVM::StoreOp::create(
                b, loc, packPair(normalized(i), normalized(i + 1)),
                globalAddress(p.o, elt, add(oRow, c64(dt * 8))),
                /*alignment=*/4);
          }
          OpBuilder::InsertionGuard lseGuard(b);
          auto owner = scf::IfOp::create(b, loc, lseOwner, /*withElse=*/false);
          b.setInsertionPoint(owner.thenBlock()->getTerminator());
          Value lse = arith::MulFOp::create(b, loc, lse2,
                                            cF32(static_cast<float>(M_LN2)));
          storeF32(lse, globalAddress(p.lse, f32,
                                      add(add(mul(batch, p.lseStrides[0]),
                                              mul(head, p.lseStrides[1])),
                                          mul(token, p.lseStrides[2]))));
        } else {
          // Partial row ((batch, head, token), split): [.., splits, d].
          Value partialRow =
              add(mul(add(mul(add(mul(batch, c64(dspec.numHeads)), head),
                              c64(dspec.qLen)),
                          token),
                      p.numSplits),
                  split);
          Value oRow = add(mul(partialRow, c64(d)), quadCol);
          auto pairType = VectorType::get({2}, f32);
          for (int64_t dt = 0; dt < dTiles; ++dt) {
            int64_t i = (mt * dTiles + dt) * kAccPerTile + 2 * h;
            Value pair = vector::FromElementsOp::create(
                b, loc, pairType, ValueRange{normalized(i), normalized(i + 1)});
            LLVM::StoreOp::create(
                b, loc, pair,
                globalAddress(p.oPartial, f32, add(oRow, c64(dt * 8))),
                /*alignment=*/8);
          }
          OpBuilder::InsertionGuard lseGuard(b);
          auto owner = scf::IfOp::create(b, loc, lseOwner, /*withElse=*/false);
          b.setInsertionPoint(owner.thenBlock()->getTerminator());
          storeF32(lse2, globalAddress(p.lsePartial, f32, partialRow));
        }
      }
  }
}

} // namespace flashjit::decode
