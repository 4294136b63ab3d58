//===- BlockMaskKernel.h - a block mask built on the GPU ----------*- C++ -*-===//
// Why: a block-sparse kernel is only as good as its block mask, and the
// mask a user means is usually their mask_mod (documents, prefix-LM) with
// the causal mask or window. Evaluating it on the host per (query, key) is
// far too slow at serving lengths, so flashjit builds a second kernel from
// the same description, as FlexAttention's create_block_mask does: it
// evaluates the mask on every (query, key) pair and writes the lists the
// forward kernels read (ForwardArgs::blockMask's layout).
#ifndef FLASHJIT_TEMPLATES_BLOCKMASKKERNEL_H
#define FLASHJIT_TEMPLATES_BLOCKMASKKERNEL_H

#include "flashjit/Templates/KernelABI.h"
#include "flashjit/Templates/KernelTemplate.h"

namespace flashjit {

/// Threads of one block of the block-mask kernel.
constexpr unsigned kBlockMaskThreads = 128;

/// The config that names the block-mask kernel of `spec` (in KernelInfo
/// and the kernel cache's key): family "block_mask", block_m x block_n the
/// mask's block, one stage, kBlockMaskThreads / 32 warps.
TileConfig blockMaskConfig(const AttentionSpec &spec);

/// Its KernelInfo: name, config, threads, no dynamic shared memory.
KernelInfo blockMaskKernelInfo(const AttentionSpec &spec,
                               llvm::StringRef name);

/// Emits `gpu.func @name`, the block-mask kernel of a block-sparse `spec`,
/// at the builder's insertion point (inside a gpu.module).
///
/// Parameters: seqlen_q and seqlen_k (i32), then the spec's captured
/// tensors and the four lists, each a pointer and one i64 stride (in
/// elements) per dimension, as the forward kernel takes them (KernelABI.h):
/// kv_num_blocks [B', H', Mq], kv_indices [B', H', Mq, >= Nk],
/// full_kv_num_blocks and full_kv_indices (null: no full lists).
/// Grid (Mq, H', B') (blockMaskGeometry), kBlockMaskThreads threads.
///
/// Query block qb of (b, h) classifies each key block kb by the pairs
/// (q, k) of its sparseBlockM x sparseBlockN rectangle: a pair is kept
/// when q < seqlen_q, k < seqlen_k, the causal mask and the window leave
/// it and the mask_mod (of b, h, q, k) keeps it. A block where every pair
/// is kept is full, one where some are is partial (full too when there are
/// no full lists), one where none is is left out. Each list holds its key
/// blocks in ascending order; entries past its count are not written.
llvm::Error buildBlockMaskKernel(mlir::OpBuilder &builder, mlir::Location loc,
                                 const AttentionSpec &spec,
                                 llvm::StringRef name, const ModRegions &mods);

/// grid = (ceil(seqlenQ / sparseBlockM), heads, batch) for lists of
/// `batch` x `heads` (each the problem's, or 1 for one list shared by
/// every sequence or head: the mask_mod then sees b = 0 or h = 0).
LaunchGeometry blockMaskGeometry(const AttentionSpec &spec, int64_t batch,
                                 int64_t heads, int64_t seqlenQ);

} // namespace flashjit

#endif
