//===- TileOrderKernel.h - block-sparse tiles, longest first ---*- C++ -*-===//
// Why: a persistent kernel hands out tiles from a counter; whoever takes
// the last ones decides when the launch ends. Under a block mask the query
// blocks of one (batch, head) visit very different numbers of key blocks
// (a document mask: a block in a 5k-token document visits 40, one in a
// 600-token document 5), so in their natural order the grid's tail can be
// a few long tiles on a few SMs while the rest idle. A small kernel run
// before the forward sorts each list row's query blocks by their listed
// key blocks, longest first (partial blocks weighed above full ones: they
// also pay for the mask_mod), and the persistent kernel takes its tiles in
// that order, so the short ones fill in at the end.
#ifndef FLASHJIT_TEMPLATES_TILEORDERKERNEL_H
#define FLASHJIT_TEMPLATES_TILEORDERKERNEL_H

#include "flashjit/Dialect/AttentionSpec.h"
#include "flashjit/Templates/KernelABI.h"
#include "flashjit/Templates/TileConfig.h"

#include "mlir/IR/Builders.h"

namespace flashjit {

/// Threads of the tile-order kernel's one block per list row.
constexpr unsigned kTileOrderThreads = 256;

/// Whether the forward kernel of `spec` built with `config` takes its query
/// blocks in a tile order: a block-sparse spec (not varlen) on a template
/// whose blocks take tiles from the launch's counter. Its module then holds
/// the tile-order kernel as `<name>_tile_order` (tileOrderKernelName), and
/// the forward kernel takes three more parameters after the block mask's:
/// the order (i32, null: the natural order) and its batch and head strides
/// (i64, elements; 0 for a list dimension of size 1).
bool usesTileOrder(const AttentionSpec &spec, const TileConfig &config);

/// `<forwardName>_tile_order`.
std::string tileOrderKernelName(llvm::StringRef forwardName);

/// i32 elements of one list row's order: the query blocks of block_m rows
/// rounded up to a multiple of 4, twice (the order, then the keys it was
/// sorted by).
int64_t tileOrderRowElements(int64_t seqlenQ, int64_t blockM);

/// Emits `gpu.func @name` at the builder's insertion point (inside a
/// gpu.module). Parameters: seqlen_q and seqlen_k (i32), the four lists of
/// the block mask as the forward kernel takes them (KernelABI.h:
/// kv_num_blocks, kv_indices, full_kv_num_blocks (null: none),
/// full_kv_indices, a pointer and one i64 stride per dimension each), and
/// the order (i32, global). Grid (H', B') of the lists' heads and batch,
/// kTileOrderThreads threads, no shared memory. Block (h, b) writes row
/// b * H' + h of tileOrderRowElements(seqlen_q, blockM) elements: the query
/// blocks of `blockM` rows, by 3 x partial + 2 x full listed key blocks of
/// their list row, descending, ties by query block.
void buildTileOrderKernel(mlir::OpBuilder &builder, mlir::Location loc,
                          const AttentionSpec &spec, int64_t blockM,
                          llvm::StringRef name);

/// grid = (listHeads, listBatch), block = kTileOrderThreads.
LaunchGeometry tileOrderGeometry(int64_t listBatch, int64_t listHeads);

} // namespace flashjit

#endif
