//===- PersistentTiles.cpp - the order a persistent kernel takes tiles ----===//
// Why: a persistent kernel runs one block per SM, each taking tile after
// tile from the launch's counter (WgmmaPersistent.cpp), so a block's
// epilogue overlaps the loads of its next tile and no block waits to be
// launched. The order in which the counter hands out tiles decides two
// things:
//
//  - L2 reuse: blocks that run at the same time should read the same K and
//    V. Tiles are grouped into sections of a few (batch, head) pairs whose
//    K and V fit in kL2BudgetBytes; within a section the query block varies
//    slowest, so the blocks at work share the section's K and V.
//  - Balance (causal): query block q has about q + 1 K/V tiles. Within a
//    section the longest tiles come first, so the short ones fill in at the
//    end of the section and of the grid. Block-sparse, a tile's length is
//    its lists', known only on the GPU: a tile-order kernel sorts each list
//    row's query blocks longest first (TileOrderKernel.h) and a section
//    takes them in that order. The grid's last section ends the grid, so
//    its longest rows must start early enough: a block mask made with a
//    mask_mod (rows of very different lengths, as documents give) takes
//    larger sections.
//
// Varlen: the query blocks of all packed sequences are numbered as one
// axis (KernelIR::varlenBlock, with a gap of at most one number between
// sequences) and the sections are of heads; the taker of a number finds
// its sequence and skips a gap. Causal, a section takes as many heads as
// sequences of the batch's average length fit the budget, so that, as in a
// dense grid, the grid's last tiles are the short ends of its heads' last
// sequence rather than one head's whole last sequence, longest block
// first (which left the grid's longest tiles to its end).
#include "KernelIR.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

#include <algorithm>
#include <cstdint>

using namespace mlir;

namespace flashjit {

namespace {
/// K and V bytes one section keeps in L2: about what the 132 blocks of a
/// grid of tiles read at once (8 heads of 2k, 2 of 8k at head dim 128), a
/// sixth of an H100's 50 MB; it beats larger sections (docs/performance.md).
constexpr int64_t kL2BudgetBytes = 8 << 20;
/// The budget of a block mask with a mask_mod (documents, prefix-LM):
/// its rows list very different numbers of key blocks and read only
/// those, so a section of a single head at 16k left the grid's last
/// section to a few long rows; four heads per section keep the tail short
/// (docs/performance.md, the sections of a block mask).
constexpr int64_t kMaskModListsL2BudgetBytes = 32 << 20;
} // namespace

PersistentTiles KernelIR::persistentTiles(const ForwardParams &p,
                                          int64_t blockM) {
  PersistentTiles t;
  Value seqlenQ = toI32(p.seqlenQ), seqlenK = toI32(p.seqlenK);
  if (spec.varlen) {
    // The packed sequences' query blocks, numbered as varlenBlock does
    // (gaps included), per head.
    t.queryBlocks = add(arith::DivUIOp::create(b, loc, seqlenQ, c32(blockM)),
                        p.batch);
    t.headsTimesBatch = c32(spec.numHeads);
  } else {
    t.queryBlocks = arith::DivUIOp::create(
        b, loc, add(seqlenQ, c32(blockM - 1)), c32(blockM));
    t.headsTimesBatch = mul(p.batch, c32(spec.numHeads));
  }
  t.count = mul(t.queryBlocks, t.headsTimesBatch);
  // Heads per section: the K and V rows of one kv head are seqlenK * head
  // dim * 2 bytes each; query heads of one group share them. A causal
  // varlen tile reads only its own sequence's keys, so the rows that count
  // there are a sequence's: the packed keys over the batch (the average
  // length). Without a mask a sequence's tiles all cost the same and the
  // order does not decide the balance: sections stay as the packed rows
  // give them.
  Value rowsPerHead = seqlenK;
  if (spec.varlen && spec.causal)
    rowsPerHead = arith::MaxUIOp::create(
        b, loc, arith::DivUIOp::create(b, loc, seqlenK, p.batch), c32(1));
  const int64_t budget = spec.isBlockSparse() && !spec.maskMod.empty()
                             ? kMaskModListsL2BudgetBytes
                             : kL2BudgetBytes;
  const int64_t budgetRows =
      budget / (2 * spec.headDim * dtypeBytes(spec.dtype));
  const int64_t groupRows =
      std::min<int64_t>(budgetRows * spec.groupSize(), INT32_MAX);
  Value heads = arith::DivUIOp::create(b, loc, c32(groupRows), rowsPerHead);
  heads = arith::MaxUIOp::create(b, loc, heads, c32(1));
  t.sectionHeads = arith::MinUIOp::create(b, loc, heads, t.headsTimesBatch);
  t.sectionTiles = mul(t.sectionHeads, t.queryBlocks);
  t.order = p.tileOrder;
  t.orderStrides = p.tileOrderStrides;
  return t;
}

BlockCoordinates KernelIR::tileCoordinates(const PersistentTiles &t,
                                           Value tile) {
  auto div = [&](Value x, Value y) {
    return arith::DivUIOp::create(b, loc, x, y).getResult();
  };
  Value section = div(tile, t.sectionTiles);
  Value within = sub(tile, mul(section, t.sectionTiles));
  Value firstHead = mul(section, t.sectionHeads);
  // The last section may hold fewer (batch, head) pairs.
  Value width = arith::MinUIOp::create(b, loc, t.sectionHeads,
                                       sub(t.headsTimesBatch, firstHead));
  Value rank = div(within, width);
  Value pair = add(firstHead, sub(within, mul(rank, width)));
  BlockCoordinates c;
  c.queryBlock = spec.causal ? sub(sub(t.queryBlocks, c32(1)), rank) : rank;
  c.queryBlock = toI64(c.queryBlock);
  c.head = toI64(remU(pair, spec.numHeads));
  c.batch = toI64(divU(pair, spec.numHeads));
  if (t.order) {
    // The rank-th block of the (batch, head)'s order row, unless the
    // launch passed no order.
    Value nullPtr = LLVM::ZeroOp::create(b, loc, globalPtr);
    Value given = LLVM::ICmpOp::create(b, loc, LLVM::ICmpPredicate::ne,
                                       t.order, nullPtr);
    c.queryBlock = ifElse(
        TypeRange{i64}, given,
        [&]() -> SmallVector<Value> {
          Value at = add(add(mul(c.batch, t.orderStrides[0]),
                             mul(c.head, t.orderStrides[1])),
                         toI64(rank));
          Value block = LLVM::LoadOp::create(
              b, loc, i32, globalAddress(t.order, i32, at), /*alignment=*/4);
          return {toI64(block)};
        },
        [&]() -> SmallVector<Value> { return {c.queryBlock}; })[0];
  }
  c.kvHead = divU(c.head, spec.groupSize());
  return c;
}

} // namespace flashjit
