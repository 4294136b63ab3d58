//===- BackwardSteps.cpp - what the main backward kernels share -----------===//
// Why: both main kernels (mma_sync_bwd, wgmma_bwd) walk the same steps
// (query head of the GQA group x visible query block), load each step's
// LSE and D rows the same way, mask the same tiles and write dK and dV from
// accumulators of the same layout; these pieces live here once.
#include "BackwardBuilder.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;

namespace flashjit::backward {

using Pred = arith::CmpIPredicate;

MainParams beginMainKernel(KernelIR &ir, StringRef name, int64_t threads,
                           bool deterministic, bool withTensorMaps) {
  OpBuilder &b = ir.b;
  SmallVector<Type> argTypes(9, ir.globalPtr);
  argTypes.append(21, ir.i64);
  argTypes.append({ir.i32, ir.i32, ir.f32, ir.f32});
  if (deterministic)
    argTypes.push_back(ir.globalPtr);
  const int32_t mapsAt = static_cast<int32_t>(argTypes.size());
  if (withTensorMaps)
    argTypes.append(2, LLVM::LLVMPointerType::get(b.getContext()));
  const unsigned capturesAt = argTypes.size();
  ir.appendVariantArgTypes(argTypes);
  gpu::GPUFuncOp func = ir.beginKernel(name, argTypes, threads);
  if (withTensorMaps)
    func->setAttr("flashjit.tensor_map_args",
                  b.getDenseI32ArrayAttr({mapsAt, mapsAt + 1}));
  ValueRange args = func.getBody().front().getArguments();
  MainParams p;
  p.q = args[0];
  p.k = args[1];
  p.v = args[2];
  p.dO = args[3];
  p.dk = args[4];
  p.dv = args[5];
  p.lse = args[6];
  p.d = args[7];
  p.dqAccum = args[8];
  SmallVector<Value, 3> *strides[] = {&p.qStrides,  &p.kStrides,
                                      &p.vStrides,  &p.dOStrides,
                                      &p.dkStrides, &p.dvStrides,
                                      &p.lseStrides};
  for (int i = 0; i < 7; ++i)
    strides[i]->assign(args.begin() + 9 + 3 * i, args.begin() + 12 + 3 * i);
  p.seqlenQ = arith::ExtSIOp::create(b, ir.loc, ir.i64, args[30]);
  p.seqlenK = arith::ExtSIOp::create(b, ir.loc, ir.i64, args[31]);
  p.scaleLog2 = args[32];
  p.scale = args[33];
  if (deterministic)
    p.turns = args[34];
  if (withTensorMaps)
    p.tensorMaps.assign(args.begin() + mapsAt, args.begin() + mapsAt + 2);
  ir.bindVariantArgs(args, capturesAt, p.variant);
  p.variant.scaleLog2 = p.scaleLog2;
  p.variant.seqlenQ = p.seqlenQ;
  p.variant.seqlenK = p.seqlenK;
  return p;
}

void narrowToSequence(KernelIR &ir, MainParams &p, Value batch) {
  KernelIR::SequenceRows rows = ir.sequenceRows(p.variant, batch);
  p.packedRowsQ = p.seqlenQ;
  p.qRowBase = rows.qStart;
  p.seqlenQ = p.variant.seqlenQ = rows.qLength;
  p.seqlenK = p.variant.seqlenK = rows.kLength;
  ir.rebaseRows(p.q, p.qStrides, ir.elt, rows.qStart);
  ir.rebaseRows(p.dO, p.dOStrides, ir.elt, rows.qStart);
  ir.rebaseRows(p.lse, p.lseStrides, ir.f32, rows.qStart);
  ir.rebaseRows(p.k, p.kStrides, ir.elt, rows.kStart);
  ir.rebaseRows(p.v, p.vStrides, ir.elt, rows.kStart);
  ir.rebaseRows(p.dk, p.dkStrides, ir.elt, rows.kStart);
  ir.rebaseRows(p.dv, p.dvStrides, ir.elt, rows.kStart);
}

Value workspaceRow(KernelIR &ir, const MainParams &p, Value batch, Value head,
                   Value row) {
  if (!p.packedRowsQ)
    return workspaceRow(ir, p.seqlenQ, batch, head, row);
  return workspaceRow(ir, p.packedRowsQ, ir.c64(0), head,
                      ir.add(p.qRowBase, row));
}

Value dqAccumRow(KernelIR &ir, const DqAccumLayout &layout,
                 const MainParams &p, Value batch, Value head, Value row) {
  if (!p.packedRowsQ)
    return dqAccumRow(ir, layout, p.seqlenQ, batch, head, row);
  return dqAccumRow(ir, layout, p.packedRowsQ, ir.c64(0), head,
                    ir.add(p.qRowBase, row));
}

Value workspaceRow(KernelIR &ir, Value seqlenQ, Value batch, Value head,
                   Value row) {
  return ir.add(
      ir.mul(ir.add(ir.mul(batch, ir.c64(ir.spec.numHeads)), head), seqlenQ),
      row);
}

Value dqAccumRow(KernelIR &ir, const DqAccumLayout &layout, Value seqlenQ,
                 Value batch, Value head, Value row) {
  Value rowsPerHead = seqlenQ;
  if (layout.rowMultiple > 1)
    rowsPerHead = ir.mul(
        ir.divU(ir.add(seqlenQ, ir.c64(layout.rowMultiple - 1)),
                layout.rowMultiple),
        ir.c64(layout.rowMultiple));
  if (layout.extraRows > 0)
    rowsPerHead = ir.add(rowsPerHead, ir.c64(layout.extraRows));
  Value rows = ir.add(
      ir.mul(ir.add(ir.mul(batch, ir.c64(ir.spec.numHeads)), head),
             rowsPerHead),
      row);
  return ir.mul(rows, ir.c64(layout.rowFloats));
}

BackwardSteps BackwardSteps::of(KernelIR &ir, const MainParams &p,
                                Value batch, Value kvHead, Value n0,
                                Value diagonal, int64_t blockM,
                                int64_t blockN) {
  BackwardSteps s;
  s.kvHead = kvHead;
  s.blockM = blockM;
  s.group = ir.spec.groupSize();
  s.queryBlocks = ir.divU(ir.add(p.seqlenQ, ir.c64(blockM - 1)), blockM);
  s.firstBlock = ir.c64(0);
  if (ir.spec.isBlockSparse()) {
    // The key block's row of each query head's transposed lists (the
    // kernel's block_n divides the mask's); the causal mask and the window
    // mask the tiles they cross.
    Value listRow = ir.divU(n0, ir.spec.sparseBlockN);
    s.prefix.push_back(ir.c64(0));
    for (int64_t g = 0; g < s.group; ++g) {
      Value head = ir.add(ir.mul(kvHead, ir.c64(s.group)), ir.c64(g));
      s.lists.push_back(ir.blockListRange(p.variant.blockMask, batch, head,
                                          listRow, ir.spec.sparseBlockM,
                                          blockM, p.seqlenQ));
      s.prefix.push_back(ir.add(s.prefix.back(), s.lists.back().count));
    }
    s.count = s.prefix.back();
    return s;
  }
  WindowDiagonals window = WindowDiagonals::of(ir, diagonal);
  if (window.right) {
    // Query row i sees key j only if j - i <= window.right.
    Value firstRow = ir.maxS(ir.sub(n0, window.right), ir.c64(0));
    s.firstBlock = ir.minS(ir.divU(firstRow, blockM), s.queryBlocks);
  }
  Value endBlock = s.queryBlocks;
  if (window.left) {
    // ... and j - i >= window.left (the diagonal minus the left extent):
    // rows below the block's last key + 1 + left extent - diagonal.
    Value rowsEnd = ir.sub(
        ir.add(n0, ir.c64(blockN + ir.spec.windowLeft)), diagonal);
    endBlock = ir.minS(ir.divU(ir.add(ir.maxS(rowsEnd, ir.c64(0)),
                                      ir.c64(blockM - 1)),
                               blockM),
                       s.queryBlocks);
    endBlock = ir.maxS(endBlock, s.firstBlock);
  }
  s.blocks = ir.sub(endBlock, s.firstBlock);
  s.count = ir.mul(s.blocks, ir.c64(s.group));
  return s;
}

std::pair<KvTileRange, Value> BackwardSteps::listOf(KernelIR &ir,
                                                   Value t) const {
  KvTileRange r = lists[0];
  Value start = prefix[0];
  for (int64_t g = 1; g < group; ++g) {
    Value past = ir.cmp(Pred::sge, t, prefix[g]);
    auto pick = [&](Value later, Value earlier) {
      return arith::SelectOp::create(ir.b, ir.loc, past, later, earlier)
          .getResult();
    };
    start = pick(prefix[g], start);
    r.partialList = pick(lists[g].partialList, r.partialList);
    r.fullList = pick(lists[g].fullList, r.fullList);
    r.numPartial = pick(lists[g].numPartial, r.numPartial);
    r.numFull = pick(lists[g].numFull, r.numFull);
  }
  return {r, start};
}

Value BackwardSteps::head(KernelIR &ir, Value t) const {
  if (!lists.empty()) {
    Value g = ir.c64(0);
    for (int64_t k = 1; k < group; ++k)
      g = ir.add(g, ir.toI64(ir.cmp(Pred::sge, t, prefix[k])));
    return ir.add(ir.mul(kvHead, ir.c64(group)), g);
  }
  if (group == 1)
    return kvHead;
  return ir.add(ir.mul(kvHead, ir.c64(group)),
                arith::DivUIOp::create(ir.b, ir.loc, t, blocks));
}

Value BackwardSteps::maskModApplies(KernelIR &ir, Value t) const {
  if (lists.empty())
    return Value();
  auto [r, start] = listOf(ir, t);
  return ir.maskModApplies(r, ir.sub(t, start));
}

Value BackwardSteps::firstRow(KernelIR &ir, Value t) const {
  if (!lists.empty()) {
    auto [r, start] = listOf(ir, t);
    return ir.mul(ir.kvTile(r, ir.sub(t, start)), ir.c64(blockM));
  }
  Value block =
      group == 1 ? t : Value(arith::RemUIOp::create(ir.b, ir.loc, t, blocks));
  return ir.mul(ir.add(firstBlock, block), ir.c64(blockM));
}

void copyRowStats(KernelIR &ir, const MainParams &p, Value batch, Value head,
                  Value m0, Value offset, Value lseDst, Value dDst) {
  OpBuilder &b = ir.b;
  Value row = ir.add(m0, offset);
  Value inRange = ir.cmp(Pred::slt, row, p.seqlenQ);
  Value bytes =
      arith::SelectOp::create(b, ir.loc, inRange, ir.c32(4), ir.c32(0));
  Value safeRow = arith::SelectOp::create(b, ir.loc, inRange, row, m0);
  auto copyWord = [&](Value from, Value to) {
    NVVM::CpAsyncOp::create(b, ir.loc, to, from, /*size=*/4,
                            NVVM::LoadCacheModifierKind::CA, bytes);
  };
  copyWord(ir.globalAddress(p.lse, ir.f32,
                            ir.rowOffset(p.lseStrides, batch, head, safeRow)),
           lseDst);
  copyWord(ir.globalAddress(p.d, ir.f32,
                            workspaceRow(ir, p, batch, head, safeRow)),
           dDst);
}

WindowDiagonals WindowDiagonals::of(KernelIR &ir, Value diagonal) {
  const AttentionSpec &spec = ir.spec;
  WindowDiagonals w;
  if (spec.hasRightBound())
    w.right = spec.rightExtent() ? ir.add(diagonal, ir.c64(spec.rightExtent()))
                                 : diagonal;
  if (spec.hasLeftBound())
    w.left = ir.sub(diagonal, ir.c64(spec.windowLeft));
  return w;
}

Value WindowDiagonals::orCrossed(KernelIR &ir, Value needMask, Value n0,
                                 int64_t blockN, Value m0,
                                 int64_t blockM) const {
  // Some key right of a row's bound: the tile's last key past its first
  // row's; left of it: its first key before its last row's.
  if (right)
    needMask = arith::OrIOp::create(
        ir.b, ir.loc, needMask,
        ir.cmp(Pred::sgt, ir.add(n0, ir.c64(blockN - 1)), ir.add(m0, right)));
  if (left)
    needMask = arith::OrIOp::create(
        ir.b, ir.loc, needMask,
        ir.cmp(Pred::slt, n0,
               ir.add(ir.add(m0, ir.c64(blockM - 1)), left)));
  return needMask;
}

std::pair<Value, Value> WindowDiagonals::columns(KernelIR &ir, Value offset,
                                                 int64_t columns) const {
  auto clamp = [&](Value x) {
    return ir.toI32(ir.maxS(ir.minS(x, ir.c64(columns)), ir.c64(-1)));
  };
  Value need, limit;
  if (right)
    need = clamp(ir.sub(offset, right));
  if (left)
    limit = clamp(ir.sub(offset, left));
  return {need, limit};
}

Value queryColumnsBelow(KernelIR &ir, Value seqlenQ, Value firstRow,
                        Value laneColumn, int64_t columns) {
  return ir.toI32(ir.maxS(
      ir.minS(ir.sub(ir.sub(seqlenQ, firstRow), laneColumn), ir.c64(columns)),
      ir.c64(0)));
}

SmallVector<Value> maskWhere(KernelIR &ir, Value needMask,
                             ArrayRef<Value> values,
                             llvm::function_ref<SmallVector<Value>()> masked) {
  SmallVector<Type> types(values.size(), ir.f32);
  return ir.ifElse(types, needMask, masked,
                   [&] { return SmallVector<Value>(values); });
}

void storeKeyRows(KernelIR &ir, const MainParams &p, Value batch,
                  Value kvHead, Value n0, int64_t rows, Value keyRow,
                  Value firstChunk, Value column, ArrayRef<Value> dk,
                  ArrayRef<Value> dv, function_ref<Value(Value)> sharedAt,
                  int64_t dkTile, int64_t dvTile, Value tid, int64_t threads) {
  OpBuilder &b = ir.b;
  const int64_t tiles = static_cast<int64_t>(dk.size()) / 4;
  // 16-byte chunks of 8 elements: an n8 tile's columns.
  const int64_t chunksPerRow = ir.spec.headDim / 8;
  const int64_t rowBytes = chunksPerRow * 16;
  keyRow = ir.toI32(keyRow);
  firstChunk = ir.toI32(firstChunk);
  tid = ir.toI32(tid);
  // Byte offset of 16-byte chunk `chunk` of block row `row` (i32 values);
  // rows of a multiple of 8 chunks swizzle them (head dim 96 does not).
  auto chunkAt = [&](int64_t tile, Value row, Value chunk) {
    Value swizzled =
        chunksPerRow % 8 == 0
            ? arith::XOrIOp::create(b, ir.loc, chunk, ir.remU(row, 8))
            : chunk;
    return ir.add(ir.c32(tile),
                  ir.add(ir.mul(row, ir.c32(rowBytes)),
                         ir.mul(swizzled, ir.c32(16))));
  };
  Value pairBytes = ir.mul(ir.toI32(column), ir.c32(2));
  for (int64_t h = 0; h < 2; ++h) {
    Value row = ir.add(keyRow, ir.c32(8 * h));
    for (int64_t t = 0; t < tiles; ++t) {
      int64_t i = t * 4 + 2 * h;
      Value dkPair =
          ir.packPair(arith::MulFOp::create(b, ir.loc, dk[i], p.scale),
                      arith::MulFOp::create(b, ir.loc, dk[i + 1], p.scale));
      Value dvPair = ir.packPair(dv[i], dv[i + 1]);
      for (auto [pair, tile] :
           {std::pair{dkPair, dkTile}, std::pair{dvPair, dvTile}})
        LLVM::StoreOp::create(
            b, ir.loc, pair,
            sharedAt(ir.add(chunkAt(tile, row, ir.add(firstChunk, ir.c32(t))),
                            pairBytes)),
            /*alignment=*/4);
    }
  }
  gpu::BarrierOp::create(b, ir.loc);
  auto quad = VectorType::get({4}, ir.i32);
  const int64_t chunks = rows * chunksPerRow;
  for (int64_t first = 0; first < chunks; first += threads) {
    Value index = ir.add(tid, ir.c32(first));
    Value row = ir.divU(index, chunksPerRow);
    Value chunk = ir.remU(index, chunksPerRow);
    Value key = ir.add(n0, ir.toI64(row));
    Value inRange = ir.cmp(Pred::slt, key, p.seqlenK);
    if (chunks - first < threads)
      inRange = arith::AndIOp::create(b, ir.loc, inRange,
                                      ir.cmp(Pred::slt, index, ir.c32(chunks)));
    ir.ifThen(inRange, [&] {
      Value column8 = ir.toI64(ir.mul(chunk, ir.c32(8)));
      for (auto [base, strides, tile] :
           {std::tuple{p.dk, ArrayRef<Value>(p.dkStrides), dkTile},
            std::tuple{p.dv, ArrayRef<Value>(p.dvStrides), dvTile}}) {
        Value data = LLVM::LoadOp::create(b, ir.loc, quad,
                                          sharedAt(chunkAt(tile, row, chunk)),
                                          /*alignment=*/16);
        Value at = ir.add(ir.rowOffset(strides, batch, kvHead, key), column8);
        LLVM::StoreOp::create(b, ir.loc, data,
                              ir.globalAddress(base, ir.elt, at),
                              /*alignment=*/16);
      }
    });
  }
}

} // namespace flashjit::backward
