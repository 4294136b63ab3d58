//===- FoldRepeats.cpp - fold repeated ops among those just emitted -------===//
// Why: see FoldRepeats.h; the equivalence is MLIR's own (operation name,
// operands, attributes and result types; locations ignored).
#include "FoldRepeats.h"

#include "mlir/IR/OperationSupport.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;

namespace flashjit {
namespace {
struct Equivalence : llvm::DenseMapInfo<Operation *> {
  static unsigned getHashValue(const Operation *op) {
    return OperationEquivalence::computeHash(
        const_cast<Operation *>(op), OperationEquivalence::directHashValue,
        OperationEquivalence::ignoreHashValue,
        OperationEquivalence::IgnoreLocations);
  }
  static bool isEqual(const Operation *x, const Operation *y) {
    if (x == y)
      return true;
    if (x == getEmptyKey() || x == getTombstoneKey() || y == getEmptyKey() ||
        y == getTombstoneKey())
      return false;
    return OperationEquivalence::isEquivalentTo(
        const_cast<Operation *>(x), const_cast<Operation *>(y),
        OperationEquivalence::IgnoreLocations);
  }
};

/// Whether every effect `op` declares is a read.
bool onlyReads(Operation *op) {
  auto effects = dyn_cast<MemoryEffectOpInterface>(op);
  if (!effects)
    return false;
  SmallVector<MemoryEffects::EffectInstance> list;
  effects.getEffects(list);
  return llvm::all_of(list, [](const MemoryEffects::EffectInstance &e) {
    return isa<MemoryEffects::Read>(e.getEffect());
  });
}
} // namespace

RepeatFolder::RepeatFolder(OpBuilder &b)
    : b(b), block(b.getInsertionBlock()),
      before(b.getInsertionPoint() == block->begin()
                 ? nullptr
                 : &*std::prev(b.getInsertionPoint())) {}

void RepeatFolder::fold() {
  if (b.getInsertionBlock() != block)
    return;
  Block::iterator from =
      before ? std::next(before->getIterator()) : block->begin();
  llvm::DenseSet<Operation *, Equivalence> pure, reads;
  for (Operation &op : llvm::make_early_inc_range(
           llvm::make_range(from, b.getInsertionPoint()))) {
    if (op.getNumRegions() != 0) {
      reads.clear();
      continue;
    }
    llvm::DenseSet<Operation *, Equivalence> *table = nullptr;
    if (isMemoryEffectFree(&op))
      table = &pure;
    else if (onlyReads(&op))
      table = &reads;
    if (!table) {
      reads.clear();
      continue;
    }
    auto [it, inserted] = table->insert(&op);
    if (inserted)
      continue;
    op.replaceAllUsesWith((*it)->getResults());
    op.erase();
  }
}

} // namespace flashjit
