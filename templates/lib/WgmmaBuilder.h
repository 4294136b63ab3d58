//===- WgmmaBuilder.h - the wgmma template's IR builder ----------*- C++ -*-===//
// Why: the builder of the wgmma kernel is one class; its Hopper instruction
// helpers (mbarriers, TMA loads, shared-memory descriptors, wgmma) live in
// WgmmaInstructions.cpp and the kernel's structure (producer, consumers,
// the loop over K/V tiles) in WgmmaForward.cpp.
#ifndef FLASHJIT_TEMPLATES_WGMMABUILDER_H
#define FLASHJIT_TEMPLATES_WGMMABUILDER_H

#include "KernelIR.h"

#include "flashjit/Templates/TileConfig.h"
#include "flashjit/Templates/WgmmaForward.h"

namespace flashjit::wgmma {

namespace LLVM = mlir::LLVM;
using Pred = mlir::arith::CmpIPredicate;
using mlir::ArrayRef;
using mlir::Location;
using mlir::OpBuilder;
using mlir::SmallVector;
using mlir::StringRef;
using mlir::Type;
using mlir::Value;
using mlir::ValueRange;

/// How a wgmma operand tile sits in shared memory: 128-byte swizzled rows,
/// in panels of 64 columns (WgmmaForward::kPanelCols).
enum class Major {
  /// The reduction dimension is contiguous (Q and K for S = Q K^T).
  K,
  /// The N dimension is contiguous (V for O += P V, rows are keys).
  MN,
};

class Builder : public KernelIR {
public:
  Builder(OpBuilder &b, Location loc, const AttentionSpec &spec,
          const TileConfig &config);

  void build(StringRef name);

private:
  // ---- the two roles (WgmmaForward.cpp) ----------------------------------
  /// Warpgroup 0: one thread loads Q, then K and V into the ring.
  void emitProducer(const ForwardParams &p, const BlockCoordinates &at,
                    Value m0, Value numTiles, Value tid);
  /// Warpgroups 1..C: the products, the online softmax and the epilogue.
  void emitConsumer(const ForwardParams &p, const BlockCoordinates &at,
                    Value m0, Value numTiles, Value tid, Value warpgroup);
  /// The mbarriers after the tiles: Q full, then per slot K full, V full,
  /// K empty, V empty (`stages` each). K and V slots are released apart:
  /// K_j once S_j has landed, V_j after P_j V_j, a tile later.
  Value barrier(int64_t index) { return shared(barOffset + 8 * index); }
  Value slotBarrier(int64_t first, Value slot);
  Value kFull(Value slot) { return slotBarrier(1, slot); }
  Value vFull(Value slot) { return slotBarrier(1 + stages, slot); }
  Value kEmpty(Value slot) { return slotBarrier(1 + 2 * stages, slot); }
  Value vEmpty(Value slot) { return slotBarrier(1 + 3 * stages, slot); }

  // ---- shared memory and mbarriers (WgmmaInstructions.cpp) ---------------
  /// Pointer to byte `offset` (i32) of the aligned shared buffer.
  Value shared(Value offset);
  Value shared(int64_t offset) { return shared(c32(offset)); }
  void barrierInit(Value bar, int64_t count);
  /// Arrive and expect `bytes` from the copy engine on the barrier.
  void barrierExpect(Value bar, int64_t bytes);
  void barrierArrive(Value bar);
  /// Waits until the phase of the given parity (i32 0 or 1) has completed.
  void barrierWait(Value bar, Value parity);

  /// TMA: one box of `tensorMap` at (col, row, head, batch) (i32) into the
  /// shared bytes at `dst`, completing on `bar`.
  void tmaLoad(Value tensorMap, Value dst, Value bar, ValueRange coords);
  /// Loads rows [row0, row0 + rows) of a whole tile, one box per 64-column
  /// panel, panels `rows` * 128 bytes apart from `dstOffset`.
  void tmaLoadTile(Value tensorMap, int64_t dstOffset, Value dynamicOffset,
                   Value bar, Value row0, Value head, Value batch,
                   int64_t rows);

  /// TMA: the box of `tensorMap` at (col, row, head, batch) (i32) from the
  /// shared bytes at `src` (a bulk-group store).
  void tmaStore(Value tensorMap, Value src, ValueRange coords);
  /// Byte offset (i32) of consumer `consumer`'s 64 rows of the Q tile in
  /// 64-column panel `panel`: its A operand of S = Q K^T, and where its O
  /// is staged for the TMA store.
  Value consumerRows(Value consumer, int64_t panel);

  // ---- wgmma (WgmmaInstructions.cpp) -------------------------------------
  /// The shared-memory matrix descriptor of a 128-byte swizzled operand at
  /// byte address `address` (i32, 1024-aligned pattern): for K-major the
  /// 8-row groups are 1024 bytes apart; for MN-major also, and the 64-wide
  /// panels `panelBytes` apart.
  Value descriptor(Value address, Major major, int64_t panelBytes);
  /// Issues S = Q K^T for one warpgroup: fence, head_dim / 16 wgmma
  /// m64nNk16 with both operands in shared memory, commit (one group). The
  /// block_n / 2 f32 per thread (FragmentSoftmax's layout) are valid only
  /// after waitGroups.
  SmallVector<Value> issueScores(Value qDesc, Value kDesc);
  /// Issues O += P V: fence, block_n / 16 wgmma m64nNk16 with P from
  /// registers (four packed i32 per k step) and V from shared memory,
  /// commit (one group).
  SmallVector<Value> issueAccumulate(ValueRange o, ArrayRef<Value> pPacked,
                                     Value vDesc);
  /// Waits until at most `pending` wgmma groups are in flight; `values`
  /// (registers of the completed groups) come back usable.
  SmallVector<Value> waitGroups(int64_t pending, ValueRange values);
  /// bar.sync / bar.arrive on named barrier `id` (i32) for `threads`.
  void namedBarrierSync(Value id, int64_t threads);
  void namedBarrierArrive(Value id, int64_t threads);
  void asmVoid(StringRef text, StringRef constraints, ValueRange operands);
  /// Inline PTX with side effects returning `outs` f32 registers (the
  /// first constraints, "=f") from `operands` under `inputs` constraints.
  SmallVector<Value> asmFloats(StringRef text, StringRef inputs,
                               ValueRange operands, int64_t outs);
  /// "f16" or "bf16" in PTX type suffixes.
  StringRef ptxType() const;

  const TileConfig &cfg;
  const int64_t d, consumers, threads, stages;
  const int64_t qBytes, kvTileBytes;
  // Shared layout (bytes from the aligned base).
  int64_t kOffset, vOffset, barOffset;
  /// The 1024-aligned shared base, as a pointer and as a 32-bit address.
  Value smemAligned, alignedAddress;
  /// The Q-full barrier, made once.
  Value qFull;
  Type sharedPtr;
};

} // namespace flashjit::wgmma

#endif
