//===- BackwardMods.cpp - score_mod and mask_mod in the backward kernels --===//
// Why: the backward recomputes P from the scores, so it must apply the
// forward's score_mod and mask_mod to them, and dS takes the score_mod's
// derivative as a factor (dL/ds = dL/dy * dy/ds). Both main kernels hold
// S^T in the same accumulator layout (key rows, query columns), so one
// building block maps each accumulator to its indices and places the
// forward's ScoreMods there.
#include "BackwardBuilder.h"

using namespace mlir;

namespace flashjit::backward {

BackwardMods::BackwardMods(KernelIR &ir, const ModRegions &regions,
                           const MainParams &p)
    : ir(ir), p(p), mods(ScoreMods::onDotProducts(ir, regions, p.variant)) {}

// Indices are clamped into the sequences, so that a captured tensor is
// read in bounds for keys and queries past the ends (their scores are
// masked or multiply zeros); the unclamped index is base + offset.
ModIndex BackwardMods::query(const Tile &tile, int64_t i) {
  const int64_t offset = (i / 4) * 8 + i % 2;
  Value q = ir.add(tile.firstQuery, ir.c64(offset));
  Value clamped = ir.minS(q, ir.sub(p.seqlenQ, ir.c64(1)));
  return ModIndex(clamped, ir.toI32(tile.firstQuery), offset);
}

ModIndex BackwardMods::key(const Tile &tile, int64_t i) {
  Value k = tile.keys[(i / 2) % 2];
  Value clamped = ir.minS(k, ir.sub(p.seqlenK, ir.c64(1)));
  return ModIndex(clamped, ir.toI32(k), 0);
}

SmallVector<Value> BackwardMods::applyScoreMod(MutableArrayRef<Value> s,
                                               const Tile &tile) {
  SmallVector<Value> factors;
  if (!hasScoreMod())
    return factors;
  for (size_t i = 0; i < s.size(); ++i) {
    ModIndex q = query(tile, i), k = key(tile, i);
    factors.push_back(mods.scoreGradient(s[i], tile.batch, tile.head, q, k));
    s[i] = mods.score(s[i], tile.batch, tile.head, q, k);
  }
  return factors;
}

Value BackwardMods::orMaskModNeeded(Value needMask, Value maskModOn) {
  if (!hasMaskMod())
    return needMask;
  if (maskModOn)
    return arith::OrIOp::create(ir.b, ir.loc, needMask, maskModOn);
  return arith::ConstantOp::create(ir.b, ir.loc, ir.b.getBoolAttr(true));
}

namespace {
/// Accumulator i's query slot (its query column, 8 (i / 4) + i % 2 from
/// the tile's first) and key slot (keys[(i / 2) % 2]).
int64_t querySlot(int64_t i) { return (i / 4) * 2 + i % 2; }
int64_t keySlot(int64_t i) { return (i / 2) % 2; }
} // namespace

ModReads BackwardMods::readAhead(const Tile &tile, int64_t accumulators,
                                 Value appliesHere,
                                 const IndexStaging *staging,
                                 Value firstQuery) {
  if (!hasMaskMod())
    return {};
  return mods.readWhere(appliesHere, [&] {
    SmallVector<ModIndex> queries, keys;
    for (int64_t i = 0; i < accumulators; ++i) {
      if (i % 4 < 2)
        queries.push_back(query(tile, i));
      if (i < 4 && i % 2 == 0)
        keys.push_back(key(tile, i));
    }
    if (!staging)
      return mods.readMaskAhead(tile.batch, tile.head, queries, keys);
    // The thread's query columns, as offsets from the tile's first query.
    IndexStaging stage = *staging;
    stage.queries = true;
    Value thread = ir.toI32(ir.sub(tile.firstQuery, firstQuery));
    for (const ModIndex &q : queries)
      stage.slotOffsets.push_back(ir.add(thread, ir.c32(q.offset)));
    return mods.readMaskAhead(tile.batch, tile.head, queries, keys, &stage,
                              firstQuery,
                              ir.toI32(ir.sub(p.seqlenQ, ir.c64(1))));
  });
}

Value BackwardMods::keep(const Tile &tile, int64_t i, Value appliesHere,
                         const ModReads *reads) {
  return mods.keep(tile.batch, tile.head, query(tile, i), key(tile, i),
                   appliesHere, reads, reads ? querySlot(i) : -1,
                   reads ? keySlot(i) : -1);
}

} // namespace flashjit::backward
