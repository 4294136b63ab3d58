//===- BlockMaskKernel.cpp - the block-mask kernel's IR -------------------===//
// Why: see BlockMaskKernel.h. One block per (query block, head, batch) walks
// the key blocks in order; its threads split each mask block's pairs, keep
// one "some kept" and one "all kept" bit each (stopping once they have seen
// both answers), and one barrier reduction per bit classifies the block for
// every thread at once, so the counts stay in registers and the lists come
// out sorted without shared memory.
#include "flashjit/Templates/BlockMaskKernel.h"
#include "KernelIR.h"
#include "ScoreMods.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace flashjit {

TileConfig blockMaskConfig(const AttentionSpec &spec) {
  TileConfig config;
  config.family = "block_mask";
  config.blockM = spec.sparseBlockM;
  config.blockN = spec.sparseBlockN;
  config.stages = 1;
  config.warps = kBlockMaskThreads / 32;
  return config;
}

KernelInfo blockMaskKernelInfo(const AttentionSpec &spec,
                               llvm::StringRef name) {
  KernelInfo info;
  info.name = name.str();
  info.config = blockMaskConfig(spec);
  info.threadsPerBlock = kBlockMaskThreads;
  info.sharedMemoryBytes = 0;
  info.numHeads = spec.numHeads;
  return info;
}

LaunchGeometry blockMaskGeometry(const AttentionSpec &spec, int64_t batch,
                                 int64_t heads, int64_t seqlenQ) {
  LaunchGeometry g;
  const int64_t blockM = spec.sparseBlockM > 0 ? spec.sparseBlockM : 1;
  g.gridX = static_cast<unsigned>((seqlenQ + blockM - 1) / blockM);
  g.gridY = static_cast<unsigned>(heads);
  g.gridZ = static_cast<unsigned>(batch);
  g.blockX = kBlockMaskThreads;
  return g;
}

namespace {

class BlockMaskBuilder : public KernelIR {
public:
  BlockMaskBuilder(OpBuilder &b, Location loc, const AttentionSpec &spec)
      : KernelIR(b, loc, spec) {}
  void emit(StringRef name, const ModRegions &modRegions);

private:
  Value i1(bool value) {
    return arith::ConstantOp::create(b, loc, b.getBoolAttr(value));
  }
  Value andI(Value x, Value y) { return arith::AndIOp::create(b, loc, x, y); }
  Value orI(Value x, Value y) { return arith::OrIOp::create(b, loc, x, y); }
  Value notI(Value x) { return arith::XOrIOp::create(b, loc, x, i1(true)); }
  /// The predicate (i1) reduced over the block's threads: all of them
  /// (`all`) or any of them; every thread gets the answer.
  Value reduceOverBlock(Value predicate, bool all);
  /// Stores `value` (i64, narrowed to i32) at element `index` of `base`
  /// when `when` holds.
  void storeIf(Value when, Value base, Value index, Value value);
};

Value BlockMaskBuilder::reduceOverBlock(Value predicate, bool all) {
  auto kind = all ? NVVM::BarrierReduction::AND : NVVM::BarrierReduction::OR;
  Value asI32 = arith::ExtUIOp::create(b, loc, i32, predicate);
  Value reduced =
      NVVM::BarrierOp::create(
          b, loc, TypeRange{i32}, Value(), Value(),
          NVVM::BarrierReductionAttr::get(b.getContext(), kind), asI32)
          .getResult(0);
  return cmp(arith::CmpIPredicate::ne, reduced, c32(0));
}

void BlockMaskBuilder::storeIf(Value when, Value base, Value index,
                               Value value) {
  auto store = scf::IfOp::create(b, loc, when, /*withElse=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(store.thenBlock()->getTerminator());
  LLVM::StoreOp::create(b, loc, toI32(value), globalAddress(base, i32, index),
                        /*alignment=*/4);
}

void BlockMaskBuilder::emit(StringRef name, const ModRegions &modRegions) {
  const int64_t blockM = spec.sparseBlockM, blockN = spec.sparseBlockN;
  const int64_t threads = kBlockMaskThreads;
  // Block sizes are multiples of 16, so the threads split the pairs evenly.
  const int64_t pairsPerThread = blockM * blockN / threads;

  ForwardParams p = beginBlockMaskKernel(name, threads);
  // The mask_mod takes no score: the scale factors are unused.
  ScoreMods mods(*this, modRegions, p, cF32(1.0f), cF32(1.0f));
  Value queryBlock = toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::x));
  Value head = toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::y));
  Value batch = toI64(gpu::BlockIdOp::create(b, loc, gpu::Dimension::z));
  Value tid = threadIdX();
  Value q0 = mul(queryBlock, c64(blockM));
  Value keyBlocks = divU(add(p.seqlenK, c64(blockN - 1)), blockN);
  Value diagonal = diagonalOffset(p);
  Value lastQuery = sub(p.seqlenQ, c64(1)), lastKey = sub(p.seqlenK, c64(1));

  // This query block's row of each list; the full lists may be absent.
  const ForwardParams::Capture &counts = p.blockMask[0],
                               &partial = p.blockMask[1],
                               &fullCounts = p.blockMask[2],
                               &full = p.blockMask[3];
  auto rowOf = [&](const ForwardParams::Capture &c) {
    return add(add(mul(batch, c.strides[0]), mul(head, c.strides[1])),
               mul(queryBlock, c.strides[2]));
  };
  Value nullPtr = LLVM::ZeroOp::create(b, loc, globalPtr);
  Value hasFull = LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::ne,
                                       fullCounts.data, nullPtr);
  Value partialRow = globalAddress(partial.data, i32, rowOf(partial));
  Value fullRow = globalAddress(full.data, i32, rowOf(full));
  Value leader = cmp(arith::CmpIPredicate::eq, tid, c64(0));

  // Whether the pair (q, k) is kept: inside both sequences, left by the
  // causal mask and the window, and by the mask_mod (its indices clamped
  // into the sequences, where it may read captured tensors).
  auto kept = [&](Value q, Value k) {
    Value keep = andI(cmp(arith::CmpIPredicate::slt, q, p.seqlenQ),
                      cmp(arith::CmpIPredicate::slt, k, p.seqlenK));
    Value onDiagonal = add(q, diagonal);
    if (spec.hasRightBound())
      keep = andI(keep, cmp(arith::CmpIPredicate::sle, k,
                            add(onDiagonal, c64(spec.rightExtent()))));
    if (spec.hasLeftBound())
      keep = andI(keep, cmp(arith::CmpIPredicate::sge, k,
                            sub(onDiagonal, c64(spec.windowLeft))));
    if (mods.hasMaskMod())
      keep = andI(keep, mods.keep(batch, head, minS(q, lastQuery),
                                  minS(k, lastKey)));
    return keep;
  };

  // Key blocks outside the causal mask's and the window's reach are empty
  // without looking at their pairs.
  auto [lo, hi] = visibleKeys(p, q0, blockM);
  Value firstBlock = minS(divU(lo, blockN), keyBlocks);
  Value endBlock = maxS(divU(add(maxS(hi, c64(0)), c64(blockN - 1)), blockN),
                        firstBlock);
  auto loop = scf::ForOp::create(
      b, loc, toIndex(firstBlock), toIndex(endBlock), cIdx(1),
      ValueRange{c64(0), c64(0)},
      [&](OpBuilder &, Location, Value keyBlockIndex, ValueRange listed) {
        Value keyBlock = toI64(keyBlockIndex);
        Value k0 = mul(keyBlock, c64(blockN));
        // Thread t takes pairs t, t + threads, ...: with block_n a
        // multiple of the threads, one query row per step and consecutive
        // keys across the threads (a captured [S] tensor read coalesced).
        auto scan = scf::WhileOp::create(
            b, loc, TypeRange{i64, b.getI1Type(), b.getI1Type()},
            ValueRange{c64(0), i1(false), i1(true)},
            [&](OpBuilder &, Location, ValueRange s) {
              // Once a thread has seen a kept and a dropped pair, the
              // block is partial whatever the rest holds.
              Value more = cmp(arith::CmpIPredicate::slt, s[0],
                               c64(pairsPerThread));
              Value undecided = orI(notI(s[1]), s[2]);
              scf::ConditionOp::create(b, loc, andI(more, undecided), s);
            },
            [&](OpBuilder &, Location, ValueRange s) {
              Value pair = add(tid, mul(s[0], c64(threads)));
              Value keep = kept(add(q0, divU(pair, blockN)),
                                add(k0, remU(pair, blockN)));
              scf::YieldOp::create(
                  b, loc,
                  ValueRange{add(s[0], c64(1)), orI(s[1], keep),
                             andI(s[2], keep)});
            });
        Value some = reduceOverBlock(scan.getResult(1), /*all=*/false);
        Value every = reduceOverBlock(scan.getResult(2), /*all=*/true);
        Value isFull = andI(every, hasFull);
        Value isPartial = andI(some, notI(isFull));
        storeIf(andI(leader, isPartial), partialRow,
                mul(listed[0], partial.strides[3]), keyBlock);
        storeIf(andI(leader, isFull), fullRow, mul(listed[1], full.strides[3]),
                keyBlock);
        scf::YieldOp::create(
            b, loc,
            ValueRange{add(listed[0], toI64(isPartial)),
                       add(listed[1], toI64(isFull))});
      });

  storeIf(leader, counts.data, rowOf(counts), loop.getResult(0));
  storeIf(andI(leader, hasFull), fullCounts.data, rowOf(fullCounts),
          loop.getResult(1));
  gpu::ReturnOp::create(b, loc);
}

} // namespace

llvm::Error buildBlockMaskKernel(OpBuilder &builder, Location loc,
                                 const AttentionSpec &spec, StringRef name,
                                 const ModRegions &mods) {
  if (auto err = spec.validate())
    return err;
  if (!spec.isBlockSparse())
    return llvm::createStringError(
        "a block mask is built for a block-sparse spec (sparse block M x "
        "N); " +
        spec.canonical() + " is dense");
  BlockMaskBuilder(builder, loc, spec).emit(name, mods);
  return llvm::Error::success();
}

} // namespace flashjit
