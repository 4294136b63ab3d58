//===- BackwardDqTurns.cpp - dQ added in a fixed order (deterministic) ----===//
// Why: f32 addition is not associative, so atomics that add the key
// blocks' dQ contributions in whatever order the blocks arrive give
// results that differ in the last bits from run to run. The deterministic
// variant (family mma_sync_bwd_det) keeps the atomics but makes the blocks
// that add into one (batch, query head, query block) take turns, so every
// element of the accumulator sees the same additions in the same order.
//
// Who adds into query block qb: key block kb visits the query blocks
// [firstBlock(kb), endBlock(kb)) (BackwardSteps), and neither bound ever
// decreases with kb, so the key blocks that add into qb are a contiguous
// range lo(qb) .. c(qb) - 1: every key block without a right bound; with
// the causal mask or a window's right extent (the diagonal plus it,
// `right`),
//   kb adds into qb only if  kb * block_n < (qb + 1) * block_m + right,
//   c(qb) = min(ceil(max((qb + 1) * block_m + right, 0) / block_n),
//               key blocks),
// and a window's left extent only raises lo(qb), which the order below
// does not need. A contributing block adds even when its rows see none of
// the block's keys (it adds zeros), so each of the blocks passes its
// turn; c(qb) - 1 adds whenever any does (its endBlock is the highest).
//
// The order: highest key block first, turn c(qb) - 1 - kb. Under the
// causal mask, key block kb starts at its diagonal, where it is the first
// to add, and reaches each later query block after the higher key blocks
// (which start further on) have passed it: little waiting. The other
// order would make every diagonal block wait for key block 0 to walk down
// to it.
//
// The turn: a per-(batch, query head, query block) i32 counter in the
// workspace, zeroed by the preprocess kernel. Thread 0 spins on an
// ld.acquire.gpu of the counter until it equals the block's turn, a
// barrier publishes that to the block, the block's atomics add its dQ
// tile, a second barrier, and thread 0 releases the turn (fence.acq_rel.gpu
// then red.relaxed.gpu add 1), the pattern of a global semaphore.
//
// Assumption (no forward-progress guarantee across blocks otherwise): the
// GPU starts the blocks of a grid in the order of their linear index, as
// NVIDIA GPUs do, so a block that waits only waits for blocks started
// before it, which hold their SMs until they finish. The grid therefore
// maps blockIdx.x to key block (key blocks - 1 - blockIdx.x): within one
// (batch, KV head), the block whose turn is first starts first.
#include "BackwardBuilder.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;

namespace flashjit::backward {

using Pred = arith::CmpIPredicate;

namespace {
/// An ld.acquire.gpu of the i32 at `address`.
Value loadAcquire(KernelIR &ir, Value address) {
  return LLVM::InlineAsmOp::create(
             ir.b, ir.loc, ir.i32, address,
             "ld.acquire.gpu.global.b32 $0, [$1];", "=r,l",
             /*has_side_effects=*/true, /*is_align_stack=*/false,
             LLVM::tailcallkind::TailCallKind::None,
             LLVM::AsmDialectAttr::get(ir.b.getContext(),
                                       LLVM::AsmDialect::AD_ATT),
             /*operand_attrs=*/ArrayAttr())
      .getResult(0);
}

/// Whether `tid` (i32 or i64) is thread 0.
Value isThreadZero(KernelIR &ir, Value tid) {
  Value zero = tid.getType() == ir.i64 ? ir.c64(0) : ir.c32(0);
  return ir.cmp(Pred::eq, tid, zero);
}
} // namespace

Value dqTurnKeyBlock(KernelIR &ir, Value keyBlocks) {
  Value x = ir.toI64(gpu::BlockIdOp::create(ir.b, ir.loc, gpu::Dimension::x));
  return ir.sub(ir.sub(keyBlocks, ir.c64(1)), x);
}

DqTurn dqTurn(KernelIR &ir, const MainParams &p, Value batch, Value head,
              Value queryBlock, Value queryBlocks, Value keyBlock,
              Value keyBlocks, Value diagonal, int64_t blockM, int64_t blockN) {
  Value contributors = keyBlocks;
  if (Value right = WindowDiagonals::of(ir, diagonal).right) {
    Value end = ir.maxS(
        ir.add(ir.mul(ir.add(queryBlock, ir.c64(1)), ir.c64(blockM)), right),
        ir.c64(0));
    contributors = ir.minS(ir.divU(ir.add(end, ir.c64(blockN - 1)), blockN),
                           keyBlocks);
  }
  DqTurn turn;
  turn.ordinal = ir.toI32(ir.sub(ir.sub(contributors, ir.c64(1)), keyBlock));
  Value index = ir.add(
      ir.mul(ir.add(ir.mul(batch, ir.c64(ir.spec.numHeads)), head), queryBlocks),
      queryBlock);
  turn.counter = ir.globalAddress(p.turns, ir.i32, index);
  return turn;
}

void waitForDqTurn(KernelIR &ir, const DqTurn &turn, Value tid,
                   llvm::function_ref<void()> barrier) {
  ir.ifThen(isThreadZero(ir, tid), [&] {
    OpBuilder &b = ir.b;
    scf::WhileOp::create(
        b, ir.loc, TypeRange{}, ValueRange{},
        [&](OpBuilder &, Location, ValueRange) {
          Value now = loadAcquire(ir, turn.counter);
          scf::ConditionOp::create(b, ir.loc,
                                   ir.cmp(Pred::ne, now, turn.ordinal),
                                   ValueRange{});
        },
        [&](OpBuilder &, Location, ValueRange) {
          scf::YieldOp::create(b, ir.loc);
        });
  });
  barrier();
}

void passDqTurn(KernelIR &ir, const DqTurn &turn, Value tid,
                llvm::function_ref<void()> barrier) {
  barrier();
  ir.ifThen(isThreadZero(ir, tid), [&] {
    ir.asmVoid(
        "fence.acq_rel.gpu;\n\tred.relaxed.gpu.global.add.s32 [$0], 1;", "l",
        turn.counter);
  });
}

} // namespace flashjit::backward
