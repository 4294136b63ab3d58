//===- ScoreModReads.cpp - a mask_mod's captured reads, issued ahead ------===//
// Why: a mask_mod that reads captured tensors (a document mask's ids) would
// otherwise read them where each score is masked, after the scores' wait
// and once per score; here the reads are issued for a whole tile before
// that wait (ScoreMods::readMaskAhead), only on the tiles where the mod
// applies (readWhere), and a read of the index that varies along a
// thread's slots goes once per warp through shared memory (stageRead,
// IndexStaging). Kept apart from ScoreModInline.cpp, which clones the
// regions.
#include "ScoreMods.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;

namespace flashjit {

Value ModReads::lookup(Operation *read, int64_t rowSlot,
                      int64_t columnSlot) const {
  for (auto [key, value] : llvm::zip(keys, values))
    if (key.read == read && (key.rowSlot < 0 || key.rowSlot == rowSlot) &&
        (key.columnSlot < 0 || key.columnSlot == columnSlot))
      return value;
  return {};
}

ScoreMods::ReadDependence ScoreMods::dependenceOf(Operation *read) const {
  // The mask_mod's arguments: batch, head, query index, key index, then
  // the captures. A read depends on the indices its operands reach.
  ReadDependence d;
  SmallVector<Value> work(read->getOperands());
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      d.row |= arg.getArgNumber() == 2;
      d.column |= arg.getArgNumber() == 3;
    } else if (Operation *def = v.getDefiningOp()) {
      llvm::append_range(work, def->getOperands());
    }
  }
  return d;
}

ModReads ScoreMods::readMaskAhead(Value batch, Value head,
                                  ArrayRef<ModIndex> rows,
                                  ArrayRef<ModIndex> columns,
                                  const IndexStaging *staging, Value first,
                                  Value last) {
  ModReads reads;
  if (!hasMaskMod())
    return reads;
  // Each read is cloned with the region's other ops, which are dead here
  // and go (the loads are invariant, free of side effects).
  for (Operation &op : mods.maskMod->front()) {
    if (!isa<tensor::ExtractOp>(op))
      continue;
    ReadDependence d = dependenceOf(&op);
    if (staging) {
      const bool onQuery = staging->queries;
      const bool alone = onQuery ? d.row && !d.column : d.column && !d.row;
      const size_t slots = onQuery ? rows.size() : columns.size();
      if (alone && op.getResult(0).getType().getIntOrFloatBitWidth() == 32 &&
          staging->slotOffsets.size() == slots) {
        SmallVector<Value> staged =
            stageRead(&op, batch, head, onQuery ? columns.front() : rows.front(),
                      *staging, first, last);
        for (int64_t c = 0; c < static_cast<int64_t>(staged.size()); ++c) {
          reads.keys.push_back({&op, onQuery ? c : int64_t(-1),
                                onQuery ? int64_t(-1) : c});
          reads.values.push_back(staged[c]);
        }
        continue;
      }
    }
    const int64_t rowSlots = d.row ? rows.size() : 1;
    const int64_t columnSlots = d.column ? columns.size() : 1;
    for (int64_t r = 0; r < rowSlots; ++r)
      for (int64_t c = 0; c < columnSlots; ++c) {
        reads.keys.push_back(
            {&op, d.row ? r : int64_t(-1), d.column ? c : int64_t(-1)});
        reads.values.push_back(
            inlineRegion(*mods.maskMod, {batch, head, rows[r], columns[c]},
                         {op.getResult(0)})
                .front());
      }
  }
  return reads;
}

ModReads ScoreMods::readWhere(Value appliesHere,
                              function_ref<ModReads()> read) {
  if (!appliesHere)
    return read();
  OpBuilder &b = ir.b;
  Location loc = ir.loc;
  // Built without results first (the reads' types are known once they are
  // issued), then moved into an if that yields them.
  ModReads reads;
  auto op = scf::IfOp::create(b, loc, TypeRange{}, appliesHere,
                              /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard g(b);
    Operation *thenEnd = op.thenBlock()->getTerminator();
    b.setInsertionPoint(thenEnd);
    reads = read();
    scf::YieldOp::create(b, loc, reads.values);
    thenEnd->erase();
    Operation *elseEnd = op.elseBlock()->getTerminator();
    b.setInsertionPoint(elseEnd);
    SmallVector<Value> zeros = llvm::map_to_vector(reads.values, [&](Value v) {
      return arith::ConstantOp::create(b, loc, b.getZeroAttr(v.getType()))
          .getResult();
    });
    scf::YieldOp::create(b, loc, zeros);
    elseEnd->erase();
  }
  // The if was built before its types were known: rebuild it with them.
  SmallVector<Type> types = llvm::map_to_vector(
      reads.values, [](Value v) { return v.getType(); });
  auto typed = scf::IfOp::create(b, loc, types, appliesHere,
                                 /*withElseRegion=*/true);
  typed.getThenRegion().takeBody(op.getThenRegion());
  typed.getElseRegion().takeBody(op.getElseRegion());
  op.erase();
  for (auto [value, result] : llvm::zip(reads.values, typed.getResults()))
    value = result;
  return reads;
}

SmallVector<Value> ScoreMods::stageRead(Operation *read, Value batch,
                                       Value head, ModIndex other,
                                       const IndexStaging &staging,
                                       Value first, Value last) {
  OpBuilder &b = ir.b;
  Location loc = ir.loc;
  Type type = read->getResult(0).getType();
  // Element `index` (i32) of the warp's scratch.
  auto slot = [&](Value index) -> Value {
    return LLVM::GEPOp::create(b, loc, staging.scratch.getType(), type,
                               staging.scratch, ValueRange{index});
  };
  Value allLanes = ir.c32(-1);
  // The warp's lanes are done with the last tile's values.
  NVVM::SyncWarpOp::create(b, loc, allLanes);
  // Every read issued before the first store waits for one.
  Value first32 = ir.toI32(first);
  SmallVector<std::pair<Value, Value>> staged; // (offset, value)
  for (int64_t k = 0; k * 32 < staging.extent; ++k) {
    Value offset = ir.add(staging.lane, ir.c32(32 * k));
    // Clamped into the sequence, as the per-slot reads are: an index past
    // it is masked, its value unused.
    ModIndex index(ir.minS(ir.add(first32, offset), last));
    SmallVector<ModIndex> fixed{batch, head, other, index};
    if (staging.queries)
      std::swap(fixed[2], fixed[3]);
    staged.push_back(
        {offset, inlineRegion(*mods.maskMod, fixed, {read->getResult(0)})
                     .front()});
  }
  for (int64_t k = 0; k < static_cast<int64_t>(staged.size()); ++k) {
    auto [offset, value] = staged[k];
    auto store = [&, offset = offset, value = value] {
      LLVM::StoreOp::create(b, loc, value, slot(offset), /*alignment=*/4);
    };
    // A last round of lanes past an extent that 32 does not divide reads
    // (in bounds) but does not store.
    if ((k + 1) * 32 <= staging.extent)
      store();
    else
      ir.ifThen(ir.cmp(arith::CmpIPredicate::slt, offset,
                       ir.c32(staging.extent)),
                store);
  }
  // The stores are seen by the warp's other lanes.
  NVVM::SyncWarpOp::create(b, loc, allLanes);
  SmallVector<Value> values;
  for (Value offset : staging.slotOffsets)
    values.push_back(
        LLVM::LoadOp::create(b, loc, type, slot(offset), /*alignment=*/4));
  return values;
}

} // namespace flashjit
