//===- MmaSyncBuilder.h - the mma_sync template's IR builder ------*- C++ -*-===//
// Why: the builder of the mma_sync kernel is one class; its fragment-level
// helpers (tile copies, ldmatrix, mma, packing) live in
// MmaSyncFragments.cpp and the kernel's structure in MmaSyncForward.cpp, so
// each file stays one concept.
#ifndef FLASHJIT_TEMPLATES_MMASYNCBUILDER_H
#define FLASHJIT_TEMPLATES_MMASYNCBUILDER_H

#include "KernelIR.h"

#include "flashjit/Templates/MmaSyncForward.h"
#include "flashjit/Templates/TileConfig.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/BuiltinTypes.h"

namespace flashjit::mma_sync {

namespace LLVM = mlir::LLVM;
using Pred = mlir::arith::CmpIPredicate;
using mlir::ArrayRef;
using mlir::MLIRContext;
using mlir::Location;
using mlir::MutableArrayRef;
using mlir::OpBuilder;
using mlir::SmallVector;
using mlir::StringRef;
using mlir::Type;
using mlir::Value;
using mlir::ValueRange;
using mlir::VectorType;

/// Accumulator registers of one m16n8 tile per thread.
constexpr int64_t kAccPerTile = 4;

/// One lane's ldmatrix address of a shared tile (its rows' layout:
/// Builder::swizzledRows): `base` (i64 bytes) is where the lane's row
/// starts, plus its column for padded rows; for swizzled rows `chunkXor`
/// (i64, 0-7) is what the lane's 16-byte chunk index is XORed with (its
/// own chunk within an ldmatrix row pair and its row's index mod 8). A
/// bare Value is a padded tile's lane.
struct LaneTile {
  LaneTile(Value base) : base(base) {}
  LaneTile(Value base, Value chunkXor) : base(base), chunkXor(chunkXor) {}
  /// The same lane `bytes` (i64) further on (another stage's buffer).
  LaneTile plus(KernelIR &ir, Value bytes) const {
    return LaneTile(ir.add(base, bytes), chunkXor);
  }
  Value base, chunkXor;
};

/// Emits one mma_sync kernel: MmaSyncForward.cpp has its structure (the
/// loop over K/V tiles), MmaSyncFragments.cpp the pieces it is made of.
class Builder : public KernelIR {
public:
  /// `swizzledRows`: the shared tiles' rows unpadded with swizzled chunks
  /// (see the member), where head_dim x element bytes is a multiple of 128.
  Builder(OpBuilder &b, Location loc, const AttentionSpec &spec,
          const TileConfig &config, bool withSoftmax,
          bool swizzledRows = false)
      : KernelIR(b, loc, spec), cfg(config), withSoftmax(withSoftmax),
        swizzledRows(swizzledRows), d(spec.headDim),
        threads(config.warps * 32),
        rowElems(spec.headDim +
                 (swizzledRows ? 0 : MmaSyncForward::kRowPadding)),
        eltBytes(dtypeBytes(spec.dtype)) {
    MLIRContext *ctx = b.getContext();
    sharedPtr = LLVM::LLVMPointerType::get(ctx, /*addressSpace=*/3);
    accType = LLVM::LLVMStructType::getLiteral(ctx, {f32, f32, f32, f32});
    frag4Type = LLVM::LLVMStructType::getLiteral(ctx, {i32, i32, i32, i32});
  }

  void build(StringRef name, const ModRegions &mods);

protected:
  // Protected: the backward and decode kernels (templates/lib/backward,
  // templates/lib/decode) are made of the same tile copies, ldmatrix and
  // mma steps.
  /// Copies rows [firstRow, firstRow + rows) of one (batch, head) into the
  /// shared tile at byte offset `tileOffset` with 16-byte cp.async; rows at
  /// or past `end` are zero-filled (nothing is read for them). Each thread's
  /// rows are one pointer stepped by a fixed stride: a 64-bit add per chunk.
  /// firstRow must be before `end`.
  void copyTile(Value base, ValueRange strides, Value batch, Value head,
                Value firstRow, Value end, int64_t rows, Value tileOffset);
  /// copyTile where the rows of a round do not line up (threads not a
  /// multiple of the chunks per row): rows past `end` repeat the last one.
  void copyTileClamped(Value base, ValueRange strides, Value batch,
                       Value head, Value firstRow, Value end, int64_t rows,
                       Value tileOffset);
  /// A tile of `rows` keys of K or V (`base`, `strides` of p's K or V)
  /// from `firstKey` on: copyTile, or for a paged K/V (AttentionSpec::
  /// pageSize) one 16-byte cp.async per chunk from the row pagedKey finds,
  /// zero-filled for keys past the length and pages outside the pool.
  void copyKvTile(const ForwardParams &p, Value base, ValueRange strides,
                  Value batch, Value head, Value firstKey, int64_t rows,
                  Value tileOffset);
  /// Runs `body` for each 16-byte chunk of a tile of `rows` rows that
  /// this thread copies (threads take chunks tid, tid + threads, ...; the
  /// last round guarded), with the chunk's row and first column (i64).
  void forEachChunk(int64_t rows,
                    llvm::function_ref<void(Value row, Value column)> body);
  /// ldmatrix.x4 at `byteOffset` (i32) of shared memory.
  SmallVector<Value, 4> ldmatrix(Value byteOffset, bool transpose);
  /// D = A B + C for one m16n8k16 step; A, B packed pairs as i32.
  SmallVector<Value, 4> mma(ArrayRef<Value> a, ArrayRef<Value> bFrag,
                            ArrayRef<Value> c);
  /// The B fragments of one ldmatrix.x4 (two n8 tiles) against the A
  /// fragment of each m tile: acc[slot(mt, half) ...] += a[mt] * b[half].
  void mmaTwoTiles(ArrayRef<SmallVector<Value, 4>> a, ArrayRef<Value> b4,
                   MutableArrayRef<Value> acc,
                   llvm::function_ref<int64_t(int64_t, int64_t)> slot);
  Value sharedAddress(Value byteOffset);
  /// S = Q K^T of one K tile: mTiles x nTiles n8 score tiles (the
  /// FragmentSoftmax layout), over head_dim / 16 k steps; qFrag(mt, ks)
  /// gives the A fragment of m tile mt at step ks, `kLane` (i64) this
  /// lane's ldmatrix byte offset of the tile's first key.
  SmallVector<Value>
  scoreTile(llvm::function_ref<SmallVector<Value, 4>(int64_t, int64_t)> qFrag,
            const LaneTile &kLane, int64_t mTiles, int64_t nTiles);
  /// acc += P V for one V tile: P packed in pairs (FragmentSoftmax::pack
  /// of mTiles x nTiles score tiles; tiles 2kk and 2kk + 1 are the A
  /// fragment of k step kk), acc in [m tile][head_dim / 8][4]; `vLane` as
  /// kLane, read with ldmatrix.trans.
  void accumulatePV(ArrayRef<Value> packed, const LaneTile &vLane,
                    int64_t mTiles, int64_t nTiles,
                    MutableArrayRef<Value> acc);
  /// `laneOffset` (i64 bytes) + `bytes`, as the i32 an ldmatrix takes.
  Value laneAt(Value laneOffset, int64_t bytes);
  /// The i32 an ldmatrix takes for `lane`'s row `rows` rows further on
  /// and its chunk `chunk` 16-byte chunks further on (chunk even: a lane
  /// reads its own chunk of a pair).
  Value laneAt(const LaneTile &lane, int64_t rows, int64_t chunk);
  /// Byte offset (i64) in a tile of the 16-byte chunk at (`row`,
  /// `column`), column in elements (a multiple of 8), in the tiles' row
  /// layout.
  Value chunkOffset(Value row, Value column);
  /// Where (i32) a copy round puts the thread's chunk `rowsAhead` rows
  /// past its first row `row0` (i64), whose place in the tile at
  /// `tileOffset` is `dst0` (tileOffset + chunkOffset(row0, column)).
  Value roundDestination(Value tileOffset, Value dst0, Value row0,
                         Value column, int64_t rowsAhead);
  /// The lane of an ldmatrix of a tile at `tileOffset` (i64 bytes): row
  /// `row` (i64), first column `column` (i64 elements, a multiple of 8).
  LaneTile laneTile(Value tileOffset, Value row, Value column);

  /// One 16-byte cp.async.cg of `src` into shared memory at `dst` (i32
  /// byte offset); `bytes` (i32, null: 16) of them are read, the rest
  /// zero-filled. With l2PrefetchBytes (64, 128 or 256) the L2 fetches
  /// that much around each request (PTX .L2::NB, through inline PTX: the
  /// NVVM op has no such hint).
  void cpAsync16(Value dst, Value src, Value bytes);

  /// L2 prefetch size of the tile copies; 0: none.
  int64_t l2PrefetchBytes = 0;
  /// An L2 cache policy (createpolicy's i64) for the tile copies; null:
  /// none (PTX .L2::cache_hint).
  Value l2Policy;

  const TileConfig &cfg;
  const bool withSoftmax;
  /// The shared tiles' rows: padded by kRowPadding elements (an ldmatrix's
  /// 8 rows fall on distinct banks), or unpadded with 16-byte chunk c of
  /// row r stored at chunk (c & ~7) | ((c ^ r) & 7). Swizzled rows keep
  /// every 128 bytes of a global row on one 128-byte line of shared
  /// memory, which a streaming kernel needs: a warp's cp.async copies into
  /// padded rows span two lines, and the SMs then take more bytes from the
  /// L2 than they keep (docs/inference.md).
  const bool swizzledRows;
  const int64_t d, threads, rowElems, eltBytes;
  Value smemBase, tid;
  Type sharedPtr;
  LLVM::LLVMStructType accType, frag4Type;
};

} // namespace flashjit::mma_sync

#endif
