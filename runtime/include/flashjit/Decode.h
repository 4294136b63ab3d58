//===- Decode.h - decode steps on a KV cache (Flash-Decoding) -----*- C++
//-*-===//
// Why: serving spends most attention time in decode steps: 1 to 16 new
// query tokens per sequence against a long KV cache. A DecodeKernel reads
// the cache once per KV group at the GPU's bandwidth, splitting long
// caches across blocks and merging the splits exactly (DecodeKernel.h in
// templates has the design).
//
//   flashjit::DecodeSpec spec;            // head dim, dtype, heads, qLen
//   spec.numHeads = 32; spec.numKVHeads = 8; spec.pageSize = 64;
//   auto decoder = (*ctx)->decodeKernel(spec);
//   flashjit::DecodeArgs args;
//   args.q = flashjit::decodeTensor(q, dtype, batch, 1, 32, 128);
//   args.k = flashjit::decodeTensor(kPool, dtype, pages, 64, 8, 128); ...
//   args.kvLens = lens; args.blockTable = table; args.maxPages = maxPages;
//   llvm::Error err = (*decoder)->decode(args);
#ifndef FLASHJIT_DECODE_H
#define FLASHJIT_DECODE_H

#include "flashjit/FlashJIT.h"
#include "flashjit/Templates/DecodeKernel.h"

#include <memory>

namespace flashjit {

/// A contiguous 4-D device tensor [d0, d1, d2, d3] (row-major strides) as
/// the decode arguments take them: Q and O [batch, qLen, heads, headDim],
/// K and V [batch, capacity, kvHeads, headDim] or, paged, [pages,
/// pageSize, kvHeads, headDim]. Other strides are fine too (headDim
/// contiguous).
TensorRef decodeTensor(void *data, DType dtype, int64_t d0, int64_t d1,
                       int64_t d2, int64_t d3);

struct DecodeArgs {
  /// Q and O [batch, qLen, heads, headDim]: the query tokens are the last
  /// qLen positions of each sequence.
  TensorRef q, o;
  /// The K and V caches: contiguous [batch, capacity, kvHeads, headDim],
  /// or paged [pages, pageSize, kvHeads, headDim] (DecodeSpec::pageSize).
  TensorRef k, v;
  /// The log-sum-exp of each row, natural log, f32 [batch, heads, qLen]
  /// (LseRef::contiguous(ptr, batch, heads, qLen)): -inf for a row that
  /// sees no key.
  LseRef lse;
  /// i32 [batch] on the GPU: keys in each sequence's cache, the query
  /// tokens' own included. Contract (not checked on the host: the values
  /// stay on the GPU): lengths are clamped to [0, capacity]; a sequence
  /// shorter than qLen leaves its first tokens without keys (O = 0,
  /// LSE = -inf).
  const int32_t *kvLens = nullptr;
  /// Paged: i32 [batch, >= maxPages] on the GPU, row i listing sequence
  /// i's pages in order; `blockTableStride` elements between rows (0:
  /// maxPages). Capacity = maxPages x pageSize. Contract: ids in [0,
  /// pages); an id outside reads zeros instead of memory.
  const int32_t *blockTable = nullptr;
  int64_t maxPages = 0;
  int64_t blockTableStride = 0;
  /// The longest length in kvLens, when the caller knows it (0: the
  /// capacity). It only sizes the split of the KV length: a shorter or
  /// longer value changes the speed, never the result.
  int64_t maxKvLen = 0;
  /// Splits of the KV length; 0: the documented rule (chooseDecodeSplits).
  int64_t numSplits = 0;
  /// f32 scratch for the partial results of a split launch, at least
  /// DecodeKernel::workspaceBytes(batch, splits) bytes, 16-byte aligned,
  /// apart from every tensor above (not checked).
  /// Null: the kernel keeps one per stream, grown on demand (allocated
  /// outside any graph capture: call decode once before capturing).
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
  /// Softmax scale; none: 1/sqrt(head_dim).
  std::optional<double> scale;
  CUstream stream = nullptr;
};

/// The decode kernels of one DecodeSpec (Context::decodeKernel): a split
/// kernel, and a combine kernel launched after it when the KV length is
/// split.
class DecodeKernel {
public:
  const DecodeSpec &spec() const { return Spec; }
  /// The split kernel's name, config and resources.
  const KernelInfo &info() const { return Info; }
  const std::string &ptx() const { return Ptx; }

  /// Checks every argument the host can (shapes, dtypes, strides,
  /// alignment, pointers, workspace size), then launches on args.stream.
  /// A failed check launches nothing.
  llvm::Error decode(const DecodeArgs &args) const;
  /// The checks of decode() alone (no device needed).
  llvm::Error check(const DecodeArgs &args) const;
  /// The splits decode() uses for `args` (the rule when numSplits is 0).
  int64_t splitsFor(const DecodeArgs &args) const;
  /// The rule's splits of this kernel (tuned variants aside) for `batch`
  /// sequences of at most `longest` keys, filling `splitWaves` waves.
  int64_t ruleSplits(int64_t batch, int64_t longest,
                     int64_t splitWaves = 1) const;
  /// Bytes of workspace a launch of `batch` sequences in `numSplits`
  /// splits needs (0 for one split).
  size_t workspaceBytes(int64_t batch, int64_t numSplits) const;

  /// A tuned choice for a class of launches (the tuning database's decode
  /// entries, `flashjit autotune --decode`): launches whose batch and
  /// longest KV length fall in the ranges ([min, max), max 0: unbounded)
  /// run `kernel` (null: this one) with the split rule filling
  /// `splitWaves` waves.
  struct TunedVariant {
    int64_t batchMin = 1, batchMax = 0, kvMin = 1, kvMax = 0;
    std::shared_ptr<const DecodeKernel> kernel;
    int64_t splitWaves = 1;
  };
  /// Context::decodeKernel adds the tuned variants before sharing the
  /// kernel; a launch that none matches runs this kernel as built.
  void addTunedVariant(TunedVariant variant);
  /// The tuned variants (empty: no tuning database entry applied).
  const std::vector<TunedVariant> &tunedVariants() const { return Tuned; }

  DecodeKernel(DecodeSpec spec, KernelInfo info, std::string ptx,
               std::unique_ptr<LoadedModule> module, std::string deviceError);
  ~DecodeKernel();

private:
  /// Tokens each sequence of `args` can hold.
  int64_t capacity(const DecodeArgs &args) const;
  /// The longest length the split rule plans for.
  int64_t longest(const DecodeArgs &args) const;
  /// The tuned variant of `args`'s launch, if one matches.
  const TunedVariant *variantFor(const DecodeArgs &args) const;
  int64_t splitsWith(const DecodeArgs &args, int64_t splitWaves) const;
  llvm::Error launchWith(const DecodeArgs &args, int64_t splitWaves) const;

  DecodeSpec Spec;
  KernelInfo Info;
  std::string Ptx;
  std::unique_ptr<LoadedModule> Module;
  CUfunction Combine = nullptr;
  std::string DeviceError;
  struct Workspaces;
  std::unique_ptr<Workspaces> Scratch;
  std::vector<TunedVariant> Tuned;
};

} // namespace flashjit

#endif
