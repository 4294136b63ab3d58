//===- KernelIR.h - shared IR-building helpers of the templates --*- C++ -*-===//
// Why: every kernel family emits the same forward signature (KernelABI.h),
// finds its (query block, head, batch) the same way and needs the same small
// arithmetic helpers; they live here once instead of in each IR builder.
#ifndef FLASHJIT_TEMPLATES_KERNELIR_H
#define FLASHJIT_TEMPLATES_KERNELIR_H

#include "flashjit/Dialect/AttentionSpec.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

namespace flashjit {

/// The kernel's parameters (KernelABI.h) as IR values; seqlens widened to i64.
struct ForwardParams {
  mlir::Value q, k, v, o, lse;
  llvm::SmallVector<mlir::Value, 3> qStrides, kStrides, vStrides, oStrides,
      lseStrides;
  mlir::Value seqlenQ, seqlenK, scaleLog2;
  /// Sequences in the batch (i32).
  mlir::Value batch;
  /// Two u32 in global memory, zero at launch: the next tile of a
  /// persistent kernel, and its blocks that have finished.
  mlir::Value tileCounter;
  /// Generic pointers to the by-value tensor maps of Q, K, V and O, when the
  /// kernel takes them (KernelABI.h).
  llvm::SmallVector<mlir::Value, 4> tensorMaps;
  /// The captured tensors of the spec's mods (KernelABI.h): a global
  /// pointer and one stride (i64, elements) per dimension each.
  struct Capture {
    mlir::Value data;
    llvm::SmallVector<mlir::Value, 4> strides;
  };
  llvm::SmallVector<Capture> captures;
  /// A block-sparse spec's block mask (KernelABI.h), in the layout of a
  /// capture: kv_num_blocks [B, H, Mq], kv_indices [B, H, Mq, Nk], then the
  /// same two for the full blocks (a null pointer when there are none).
  llvm::SmallVector<Capture> blockMask;
  /// A kernel that takes a tile order (TileOrderKernel.h): the order (i32
  /// [B', H', row], global; null: the natural order) and its batch and head
  /// strides (i64, elements).
  mlir::Value tileOrder;
  llvm::SmallVector<mlir::Value, 2> tileOrderStrides;
  /// A varlen kernel's cumulative offsets (i32 [batch + 1] in global
  /// memory), and once KernelIR::beginVarlenSequence has run, the first row
  /// of the block's sequence in the packed Q and O, and in K and V (i64).
  mlir::Value cuSeqlensQ, cuSeqlensK, qRowBase, kRowBase;
  /// Paged K/V (AttentionSpec::pageSize): the block table (i32 [batch,
  /// maxPages] in global memory; cuSeqlensK then holds the sequences' key
  /// counts, i32 [batch]) and its row length (i64); once
  /// beginVarlenSequence has run, the block's row of the table and the
  /// pool's rows (i64; pages x page size: the packed K length).
  mlir::Value blockTable, maxPages, poolRows;
};

/// Where one key of a paged sequence lives (KernelIR::pagedKey).
struct PagedKey {
  /// The key's row in the pool (i64).
  mlir::Value row;
  /// Whether it is one of the sequence's keys in a page of the pool (i1).
  mlir::Value valid;
};

/// The K/V tiles one query block visits, `count` of them (i64, at least
/// one: a block whose rows see no key visits one tile that its mask
/// empties, so every row ends with O = 0 and LSE = -inf). KernelIR::kvTile
/// gives the j-th one: `first` + j, the tiles the causal mask and the
/// window leave visible to some row of the block; or, block-sparse, the
/// key blocks of the block mask's lists, partial ones first.
struct KvTileRange {
  mlir::Value first, count;
  /// Block-sparse only: the query block's index lists (i32 in global
  /// memory, `indexStride` elements apart), their lengths (i64, clamped
  /// to `maskBlocks`), whether the full lists exist (i1), the mask blocks
  /// of the key sequence (i64; an index at or past it names no keys), and
  /// the kernel's tiles per mask block.
  mlir::Value partialList, fullList, partialStride, fullStride;
  mlir::Value numPartial, numFull, maskBlocks, hasFull;
  int64_t tilesPerBlock = 1;
};

/// Where a thread block sits in the grid (KernelABI.h: x query block,
/// y head, z batch), as i64.
struct BlockCoordinates {
  /// Query block this block computes (reversed for causal: the blocks with
  /// the most tiles start first, the short ones fill the last wave).
  mlir::Value queryBlock;
  mlir::Value head, kvHead, batch;
};

/// The tiles of a persistent kernel (KernelABI.h's forwardGeometry): every
/// (query block, batch, head), numbered in the order the blocks take them
/// (PersistentTiles.cpp). i32 values, uniform across the block.
struct PersistentTiles {
  mlir::Value count;       ///< tiles in all
  mlir::Value queryBlocks; ///< ceil(seqlenQ / block_m)
  mlir::Value sectionHeads, sectionTiles;
  mlir::Value headsTimesBatch;
  /// ForwardParams::tileOrder and its strides; unset without one.
  mlir::Value order;
  llvm::SmallVector<mlir::Value, 2> orderStrides;
};

class KernelIR {
public:
  KernelIR(mlir::OpBuilder &b, mlir::Location loc, const AttentionSpec &spec);

  /// Creates `gpu.func @name` with the forward ABI, marked as a kernel with
  /// a known block size, and moves the insertion point into its body. With
  /// withTensorMaps, the Q, K, V and O tensor maps follow the ABI's parameters,
  /// named in `flashjit.tensor_map_args` for MarkGridConstantParams.
  ForwardParams beginForwardKernel(llvm::StringRef name, int64_t threads,
                                   bool withTensorMaps = false);
  /// The same for the block-mask kernel (BlockMaskKernel.h): its
  /// parameters are the seqlens (i32; widened to i64 in the result), then
  /// the captured tensors and the four lists, as the forward kernel's.
  ForwardParams beginBlockMaskKernel(llvm::StringRef name, int64_t threads);
  BlockCoordinates blockCoordinates();
  /// A varlen kernel (launched with the packed lengths as seqlens and one
  /// grid z per sequence) narrowed to the sequence of `at`: its rows
  /// [start, end) of the packed tensors, each clamped to the packed
  /// lengths (end at least start), become the seqlens, the row bases and
  /// the tensors' bases (batch strides 0). Returns the scf.if that holds
  /// the kernel's body: blocks past their sequence's last query block
  /// (query block * `blockM` >= its length) do nothing. Paged (AttentionSpec
  /// ::pageSize), K and V stay the pool, the key count comes from the
  /// sequence's length in cuSeqlensK (clamped to [0, maxPages x page size])
  /// and blockTable moves to the sequence's row. The insertion point
  /// moves into it; the caller places the kernel's return after it.
  mlir::scf::IfOp beginVarlenSequence(ForwardParams &p,
                                      const BlockCoordinates &at,
                                      int64_t blockM);
  /// The narrowing of beginVarlenSequence without the scf.if: a persistent
  /// kernel narrows a copy of its parameters for each tile it takes.
  void narrowToSequence(ForwardParams &p, mlir::Value batch);
  /// The rows narrowToSequence takes from the offsets (four loads):
  /// sequence `batch`'s first row and length in Q and in K/V (i64; kStart
  /// unused when paged), clamped as beginVarlenSequence says.
  struct SequenceRows {
    mlir::Value qStart, qLength, kStart, kLength;
  };
  SequenceRows sequenceRows(const ForwardParams &p, mlir::Value batch);
  /// narrowToSequence with rows found already (a persistent consumer gets
  /// them from its producer).
  void narrowToRows(ForwardParams &p, mlir::Value batch,
                    const SequenceRows &rows);
  /// A tensor of `type` elements (row strides in elements: batch, head,
  /// row) moved to its row `start` (i64) of batch 0: `base` advances by
  /// start rows and the batch stride becomes 0.
  void rebaseRows(mlir::Value &base,
                  llvm::SmallVectorImpl<mlir::Value> &strides, mlir::Type type,
                  mlir::Value start);
  /// A persistent varlen kernel's query blocks (PersistentTiles): sequence
  /// b's blocks are numbered from floor(start_b / blockM) + b (start_b its
  /// first packed row, clamped as beginVarlenSequence does), which leaves
  /// each sequence room for its ceil(length / blockM) blocks, gaps of at
  /// most one between sequences, and floor(rows / blockM) + batch numbers
  /// in all. Finds the sequence of number `block` (i64) by a binary search
  /// over the offsets and returns (batch, query block) in `at`, and whether
  /// the number is one of the sequence's blocks (i1; not in a gap).
  mlir::Value varlenBlock(const ForwardParams &p, mlir::Value block,
                          int64_t blockM, BlockCoordinates &at);
  /// Paged K/V, after beginVarlenSequence: where key `key` (i64) of the
  /// block's sequence lives. A key past the sequence's length or in a page
  /// id outside [0, pages) is not valid; its row is then the first past
  /// the pool (a TMA box there reads zeros); for a key past the length the
  /// table's slot 0 is read (every row has one) and its entry unused.
  PagedKey pagedKey(const ForwardParams &p, mlir::Value key);
  /// The tile numbering of a persistent kernel with `blockM` query rows per
  /// tile (PersistentTiles.cpp).
  PersistentTiles persistentTiles(const ForwardParams &p, int64_t blockM);
  /// The coordinates (i64) of tile `tile` (i32) of `tiles`. With a tile
  /// order, a section's i-th query block is the i-th of its (batch, head)'s
  /// order row.
  BlockCoordinates tileCoordinates(const PersistentTiles &tiles,
                                   mlir::Value tile);
  /// The key column of query row 0's diagonal (i64): 0, or seqlenK -
  /// seqlenQ for bottom-right alignment (AttentionSpec::causalAlign).
  mlir::Value diagonalOffset(const ForwardParams &p);
  /// Keys [lo, hi) (i64; 0 <= lo, hi <= seqlenK, empty when hi <= lo)
  /// hold every key the causal mask and the window leave visible to some
  /// query row of [m0, m0 + blockM).
  std::pair<mlir::Value, mlir::Value>
  visibleKeys(const ForwardParams &p, mlir::Value m0, int64_t blockM);
  /// The K/V tiles of block_n keys that query rows [m0, m0 + blockM) of
  /// (batch, head) visit (i64 values).
  KvTileRange kvTileRange(const ForwardParams &p, mlir::Value batch,
                          mlir::Value head, mlir::Value m0, int64_t blockM,
                          int64_t blockN);
  /// One row of a block-sparse mask's lists (ForwardParams::blockMask
  /// order: counts, indices, full counts, full indices), walked in tiles:
  /// the row `listRow` (i64) of (batch, head), whose indices name blocks
  /// of `maskBlock` columns of a length `columns` (i64), each `tile`
  /// columns a tile. The forward walks a query block's key blocks; the
  /// backward, on the transposed lists, a key block's query blocks. count
  /// is (partial + full) x tiles per block, 0 for empty lists.
  KvTileRange blockListRange(llvm::ArrayRef<ForwardParams::Capture> lists,
                             mlir::Value batch, mlir::Value head,
                             mlir::Value listRow, int64_t maskBlock,
                             int64_t tile, mlir::Value columns);
  /// The index (i64, in tiles of block_n) of the j-th tile (i32 or i64) a
  /// query block visits.
  mlir::Value kvTile(const KvTileRange &range, mlir::Value j);
  /// Whether the mask_mod applies on the j-th tile (i1): on a block-sparse
  /// mask's partial blocks only; null (everywhere) otherwise.
  mlir::Value maskModApplies(const KvTileRange &range, mlir::Value j);
  /// 1 / rowSum, or 0 where the row kept no key (rowSum 0) and the spec
  /// allows such rows (AttentionSpec::mayEmptyRows): their O is then 0.
  mlir::Value inverseOfSum(mlir::Value rowSum);
  /// Keeps `loop` (an scf.for) rolled: its loop annotation,
  /// which the lowering to cf moves onto the latch branch, tells LLVM not
  /// to unroll it. NVPTX unrolls small loops of unknown trip count by two;
  /// for a loop that mostly waits on barriers that gains nothing and keeps
  /// the remainder's trip count and flags live in registers.
  void keepRolled(mlir::Operation *loop);
  /// Runs `body` with the insertion point inside an scf.if on `condition`
  /// (i1), no else.
  void ifThen(mlir::Value condition, llvm::function_ref<void()> body);
  /// scf.if with results of `types`: the values `then` or `otherwise`
  /// (each built in its own region) returns.
  llvm::SmallVector<mlir::Value>
  ifElse(mlir::TypeRange types, mlir::Value condition,
         llvm::function_ref<llvm::SmallVector<mlir::Value>()> then,
         llvm::function_ref<llvm::SmallVector<mlir::Value>()> otherwise);
  /// Inline PTX with side effects and no result.
  void asmVoid(llvm::StringRef text, llvm::StringRef constraints,
               mlir::ValueRange operands);

  // Constants and integer arithmetic.
  mlir::Value c64(int64_t v);
  mlir::Value c32(int32_t v);
  mlir::Value cIdx(int64_t v);
  mlir::Value cF32(float v);
  mlir::Value add(mlir::Value x, mlir::Value y);
  mlir::Value sub(mlir::Value x, mlir::Value y);
  mlir::Value mul(mlir::Value x, mlir::Value y);
  mlir::Value divU(mlir::Value x, int64_t d);
  mlir::Value remU(mlir::Value x, int64_t d);
  mlir::Value minS(mlir::Value x, mlir::Value y);
  mlir::Value maxS(mlir::Value x, mlir::Value y);
  mlir::Value cmp(mlir::arith::CmpIPredicate p, mlir::Value x, mlir::Value y);
  /// An index, i32 or i64 value as i64 (zero-extended) or i32 (truncated);
  /// a value of that type already is returned as it is.
  mlir::Value toI64(mlir::Value v);
  mlir::Value toI32(mlir::Value v);
  mlir::Value toIndex(mlir::Value i64Value);
  mlir::Value threadIdX();

  /// 2^x and log2(x) as one ex2.approx.ftz / lg2.approx instruction.
  mlir::Value exp2(mlir::Value x);
  /// 2^x computed on the FP32 and integer units, no special-function
  /// unit: a polynomial and an exponent shift, relative error below 2^-18
  /// (Exp2Polynomial.cpp). -inf gives +0.0; x must be below 128.
  mlir::Value exp2OnFmaUnits(mlir::Value x);
  mlir::Value log2(mlir::Value x);
  mlir::Value maxF(mlir::Value x, mlir::Value y);
  /// Two f32 values rounded to the element type and packed into an i32.
  mlir::Value packPair(mlir::Value lo, mlir::Value hi);
  /// Butterfly reduction over `width` adjacent lanes (a power of two).
  mlir::Value shuffleXorReduce(mlir::Value x, int64_t width, bool isMax);

  /// Offset in elements of row `row` of (batch, head) for (b, h, row) strides.
  mlir::Value rowOffset(mlir::ValueRange strides, mlir::Value batch,
                        mlir::Value head, mlir::Value row);
  /// Address of element `offset` (i64) of a global tensor of `type`.
  mlir::Value globalAddress(mlir::Value base, mlir::Type type,
                            mlir::Value offset);
  /// LSE in natural log from the base-2 running max and sum.
  mlir::Value lseFromBase2(mlir::Value maxBase2, mlir::Value sum);

  mlir::OpBuilder &b;
  mlir::Location loc;
  const AttentionSpec &spec;
  mlir::Type elt, f32, i64, i32, globalPtr;

  /// A kernel of `argTypes` with a known block size; the insertion point
  /// moves into its body (protected: kernels of other ABIs, as decode's,
  /// declare their own parameters).
  mlir::gpu::GPUFuncOp beginKernel(llvm::StringRef name,
                                   llvm::ArrayRef<mlir::Type> argTypes,
                                   int64_t threads);

  /// The parameters of the spec's captured tensors and block mask (a
  /// pointer and one i64 stride per dimension each), in the ABI's order,
  /// and their values from `args` starting at `at` (the forward kernels'
  /// and the backward's).
  void appendVariantArgTypes(llvm::SmallVectorImpl<mlir::Type> &argTypes);
  void bindVariantArgs(mlir::ValueRange args, unsigned at, ForwardParams &p);
  /// Whether the forward kernel being built takes a tile order after the
  /// block mask (usesTileOrder in TileOrderKernel.h); set before
  /// beginForwardKernel.
  bool takesTileOrder = false;
};

} // namespace flashjit

#endif
