//===- HostBlockMask.h - a block mask on the host -----------------*- C++ -*-===//
// Why: a block-sparse kernel reads its lists of key blocks on the GPU
// (BlockMaskRef); `flashjit run`, the GPU tests and the float64 reference
// need the same lists on the host: random ones of a given density, the
// device image to upload, and which keys each query block visits under
// the kernel's rules.
#ifndef FLASHJIT_DEVTOOLS_HOSTBLOCKMASK_H
#define FLASHJIT_DEVTOOLS_HOSTBLOCKMASK_H

#include "flashjit/Compiler/ModInterpreter.h"
#include "flashjit/Dialect/AttentionSpec.h"

#include <cstdint>
#include <random>
#include <vector>

namespace flashjit {

/// BlockMaskRef's four tensors, contiguous: counts [batch, heads,
/// queryBlocks], indices [batch, heads, queryBlocks, indexColumns]; batch
/// and heads may be 1 (shared). No full lists: their vectors are empty.
struct HostBlockMask {
  int64_t batch = 1, heads = 1, queryBlocks = 0, indexColumns = 0;
  std::vector<int32_t> kvNumBlocks, kvIndices, fullKvNumBlocks, fullKvIndices;

  bool hasFullLists() const { return !fullKvNumBlocks.empty(); }
  std::vector<int64_t> countShape() const {
    return {batch, heads, queryBlocks};
  }
  std::vector<int64_t> indexShape() const {
    return {batch, heads, queryBlocks, indexColumns};
  }

  /// How many times query block `qb` of (b, h) visits each of `keyBlocks`
  /// key blocks through the partial lists (the mask_mod applies) and the
  /// full ones, by the kernels' rules: a count is clamped to [0,
  /// keyBlocks], an index outside [0, keyBlocks) is skipped.
  void visits(int64_t b, int64_t h, int64_t qb, int64_t keyBlocks,
              std::vector<int> &partial, std::vector<int> &full) const;

  /// The lists transposed for the backward (BackwardArgs::blockMask): per
  /// (b, h) and key block of `keyBlocks`, the query blocks that visit it
  /// by visits()' rules, ascending, each as often as it visits, partial
  /// and full apart. The result's rows (queryBlocks) are the key blocks;
  /// its indices name this mask's query blocks.
  HostBlockMask transposed(int64_t keyBlocks) const;

  /// A random mask for `spec`'s sparse block: each key block is listed
  /// with probability `density`, in a shuffled order, as partial or full
  /// (even odds; every listed block is partial when fullLists is false).
  /// `shareBatch`/`shareHeads` give one list for all sequences/heads.
  static HostBlockMask random(const AttentionSpec &spec, int64_t batch,
                              int64_t seqlenQ, int64_t seqlenK, double density,
                              bool fullLists, bool shareBatch, bool shareHeads,
                              std::mt19937_64 &rng);
  /// The mask a block-mask kernel builds (BlockMaskBuilder), evaluated on
  /// the host pair by pair: `batch` x `heads` lists (1 to share one, the
  /// mask_mod then sees b = 0 or h = 0), full lists or not, indices in
  /// ascending order and -1 past each count. The spec's mask_mod is
  /// interpreted (ModInterpreter) over `captures`; an error says what does
  /// not parse or which read failed.
  static llvm::Expected<HostBlockMask>
  fromMask(const AttentionSpec &spec, llvm::ArrayRef<HostCapture> captures,
           int64_t batch,
           int64_t heads, int64_t seqlenQ, int64_t seqlenK, bool fullLists);
};

/// The (query, key) pairs of one head that the block mask lists and the
/// causal mask and window leave, summed over batch and heads: 4 * head_dim
/// * this is the FLOP count of the computed scores (the mask_mod's drops
/// inside partial blocks included).
double listedPairs(const AttentionSpec &spec, const HostBlockMask &mask,
                   int64_t batch, int64_t seqlenQ, int64_t seqlenK);

} // namespace flashjit

#endif
