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

/// Emits one mma_sync kernel: MmaSyncForward.cpp has its structure (the
/// loop over K/V tiles), MmaSyncFragments.cpp the pieces it is made of.
class Builder : public KernelIR {
public:
  Builder(OpBuilder &b, Location loc, const AttentionSpec &spec,
          const TileConfig &config, bool withSoftmax)
      : KernelIR(b, loc, spec), cfg(config), withSoftmax(withSoftmax),
        d(spec.headDim), threads(config.warps * 32),
        rowElems(spec.headDim + MmaSyncForward::kRowPadding),
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
            Value kLane, int64_t mTiles, int64_t nTiles);
  /// acc += P V for one V tile: P packed in pairs (FragmentSoftmax::pack
  /// of mTiles x nTiles score tiles; tiles 2kk and 2kk + 1 are the A
  /// fragment of k step kk), acc in [m tile][head_dim / 8][4]; `vLane` as
  /// kLane, read with ldmatrix.trans.
  void accumulatePV(ArrayRef<Value> packed, Value vLane, int64_t mTiles,
                    int64_t nTiles, MutableArrayRef<Value> acc);
  /// `laneOffset` (i64 bytes) + `bytes`, as the i32 an ldmatrix takes.
  Value laneAt(Value laneOffset, int64_t bytes);

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
  const int64_t d, threads, rowElems, eltBytes;
  Value smemBase, tid;
  Type sharedPtr;
  LLVM::LLVMStructType accType, frag4Type;
};

} // namespace flashjit::mma_sync

#endif
