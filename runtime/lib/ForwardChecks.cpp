//===- ForwardChecks.cpp - argument checks before a launch ----------------===//
// Why: see ForwardChecks.h. Each check names the argument and the numbers.
#include "flashjit/Runtime/ForwardChecks.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>

namespace flashjit {
namespace {

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(message.str());
}

std::string shapeText(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Whether the elements of a tensor (extents >= 1, strides >= 0) lie
/// within 2^62 bytes of its first: the byte ranges and overlap checks below
/// then compute without overflow.
template <size_t N>
bool spanFits(const std::array<int64_t, N> &shape,
              const std::array<int64_t, N> &strides, size_t elemBytes) {
  constexpr int64_t kLimit = int64_t(1) << 62;
  int64_t span = 1;
  for (size_t i = 0; i < N; ++i) {
    int64_t step = 0;
    if (shape[i] < 1 || strides[i] < 0 ||
        __builtin_mul_overflow(shape[i] - 1, strides[i], &step) ||
        __builtin_add_overflow(span, step, &span) || span > kLimit)
      return false;
  }
  int64_t bytes = 0;
  return !__builtin_mul_overflow(span, static_cast<int64_t>(elemBytes),
                                 &bytes) &&
         bytes <= kLimit;
}

/// spanFits for a captured tensor of 4-byte words (dimensions past its
/// rank count as extent 1).
bool capturedSpanFits(const CapturedRef &c) {
  std::array<int64_t, 4> shape{1, 1, 1, 1}, strides{0, 0, 0, 0};
  for (int d = 0; d < c.rank && d < 4; ++d) {
    shape[d] = c.shape[d];
    strides[d] = c.strides[d];
  }
  return spanFits(shape, strides, 4);
}

/// [first, last] byte range a tensor touches.
struct ByteRange {
  uintptr_t first = 0, last = 0;
};

template <size_t N>
ByteRange byteRange(const void *data, const std::array<int64_t, N> &shape,
                    const std::array<int64_t, N> &strides, size_t elemBytes) {
  int64_t span = 0;
  for (size_t i = 0; i < N; ++i)
    span += (shape[i] - 1) * strides[i];
  auto base = reinterpret_cast<uintptr_t>(data);
  return {base, base + static_cast<uintptr_t>(span) * elemBytes + elemBytes - 1};
}

bool overlaps(ByteRange a, ByteRange b) {
  return a.first <= b.last && b.first <= a.last;
}

/// True when no two index tuples of the layout share an element: sorted by
/// stride, each stride must step over everything the smaller ones span.
template <size_t N>
bool isInjective(const std::array<int64_t, N> &shape,
                 const std::array<int64_t, N> &strides) {
  std::array<size_t, N> order;
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t span = 1; // elements covered by the smaller dims
  for (size_t i : order) {
    if (shape[i] == 1)
      continue;
    if (strides[i] < span)
      return false;
    span = strides[i] * (shape[i] - 1) + span;
  }
  return true;
}

llvm::Error checkTensor(const char *name, const TensorRef &t,
                        const AttentionSpec &spec) {
  if (!t.data)
    return fail(llvm::formatv("{0} is a null pointer", name));
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
    return fail(llvm::formatv("{0} pointer {1} is not 16-byte aligned: "
                              "kernels load rows with 16-byte vectors",
                              name, t.data));
  if (t.dtype != spec.dtype)
    return fail(llvm::formatv("{0} is {1} but the kernel was compiled for {2}",
                              name, dtypeName(t.dtype), dtypeName(spec.dtype)));
  for (int64_t extent : t.shape)
    if (extent < 1)
      return fail(llvm::formatv("{0} shape {1} has an empty dimension", name,
                                shapeText(t.shape)));
  if (t.shape[3] != spec.headDim)
    return fail(llvm::formatv("{0} head dim is {1} but the kernel was "
                              "compiled for head dim {2}",
                              name, t.shape[3], spec.headDim));
  if (t.strides[3] != 1)
    return fail(llvm::formatv("{0} head-dim stride is {1}: it must be 1 "
                              "(contiguous rows)",
                              name, t.strides[3]));
  for (int i = 0; i < 3; ++i)
    if (t.strides[i] < 0 || t.strides[i] % 8 != 0)
      return fail(llvm::formatv(
          "{0} strides {1} must be non-negative multiples of 8 elements so "
          "every row starts 16-byte aligned",
          name, shapeText(t.strides)));
  if (t.shape[2] >= (int64_t(1) << 31))
    return fail(llvm::formatv("{0} seqlen {1} is above 2^31 - 1", name,
                              t.shape[2]));
  if (!spanFits(t.shape, t.strides, 2))
    return fail(llvm::formatv("{0} shape {1} with strides {2} spans more "
                              "than 2^62 bytes: the strides or the shape "
                              "are wrong",
                              name, shapeText(t.shape), shapeText(t.strides)));
  return llvm::Error::success();
}

/// Blocks of `block` covering `length` (0 for a dense spec's block 0).
int64_t ceilDivBlocks(int64_t length, int64_t block) {
  return block > 0 ? (length + block - 1) / block : 0;
}

/// checkBlockMask for lists whose rows are `rowBlocks` blocks and whose
/// indices name `columnBlocks` blocks, named `names`.
llvm::Error checkListsOf(const AttentionSpec &spec, const BlockMaskRef &m,
                         int64_t batch, int64_t heads, int64_t seqlenQ,
                         int64_t seqlenK, int64_t rowBlocks,
                         int64_t columnBlocks,
                         const std::array<const char *, 4> &names) {
  const bool anyGiven = m.kvNumBlocks.data || m.kvIndices.data ||
                        m.fullKvNumBlocks.data || m.fullKvIndices.data;
  if (!spec.isBlockSparse()) {
    if (anyGiven)
      return fail("a block mask is given but the kernel is not block-sparse "
                  "(set AttentionSpec::sparseBlockM and sparseBlockN)");
    return llvm::Error::success();
  }
  const int64_t queryBlocks = rowBlocks, keyBlocks = columnBlocks;
  if (!m.kvNumBlocks.data || !m.kvIndices.data)
    return fail(llvm::formatv("the kernel is block-sparse: its block mask "
                              "needs {0} and {1} ({2} and {3} are optional)",
                              names[0], names[1], names[2], names[3]));
  if (!m.fullKvNumBlocks.data != !m.fullKvIndices.data)
    return fail(llvm::formatv("{0} and {1} come together: give both or "
                              "neither",
                              names[2], names[3]));
  auto check = [&](const char *name, const CapturedRef &t,
                   bool isIndices) -> llvm::Error {
    if (!t.data)
      return llvm::Error::success();
    if (reinterpret_cast<uintptr_t>(t.data) % 4 != 0)
      return fail(llvm::formatv("block mask {0} is not 4-byte aligned", name));
    if (t.dtype != CaptureDType::I32)
      return fail(llvm::formatv("block mask {0} is {1}: expected i32", name,
                                captureDTypeName(t.dtype)));
    const int rank = isIndices ? 4 : 3;
    std::string want = llvm::formatv("[{0} or 1, {1} or 1, {2}{3}]", batch,
                                     heads, queryBlocks,
                                     isIndices
                                         ? ", " + std::to_string(keyBlocks) +
                                               " or more"
                                         : std::string())
                           .str();
    std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.rank);
    if (t.rank != rank || (t.shape[0] != 1 && t.shape[0] != batch) ||
        (t.shape[1] != 1 && t.shape[1] != heads) ||
        t.shape[2] != queryBlocks || (isIndices && t.shape[3] < keyBlocks))
      return fail(llvm::formatv(
          "block mask {0} has shape {1}: expected {2} (sparse block {3} x "
          "{4}, seqlen q {5}, seqlen k {6})",
          name, shapeText(shape), want, spec.sparseBlockM, spec.sparseBlockN,
          seqlenQ, seqlenK));
    for (int d = 0; d < rank; ++d)
      if (t.strides[d] < 0)
        return fail(llvm::formatv("block mask {0} has a negative stride in "
                                  "dimension {1}",
                                  name, d));
    if (!capturedSpanFits(t))
      return fail(llvm::formatv("block mask {0} spans more than 2^62 bytes: "
                                "its strides are wrong",
                                name));
    return llvm::Error::success();
  };
  auto lists = m.lists();
  for (int l = 0; l < 4; ++l)
    if (auto err = check(names[l], *lists[l], l % 2 == 1))
      return err;
  return llvm::Error::success();
}

} // namespace

llvm::Error checkBlockMask(const AttentionSpec &spec, const BlockMaskRef &m,
                           int64_t batch, int64_t heads, int64_t seqlenQ,
                           int64_t seqlenK) {
  return checkListsOf(spec, m, batch, heads, seqlenQ, seqlenK,
                      ceilDivBlocks(seqlenQ, spec.sparseBlockM),
                      ceilDivBlocks(seqlenK, spec.sparseBlockN),
                      kBlockMaskListNames);
}

llvm::Error checkTransposedBlockMask(const AttentionSpec &spec,
                                     const BlockMaskRef &m, int64_t batch,
                                     int64_t heads, int64_t seqlenQ,
                                     int64_t seqlenK) {
  return checkListsOf(spec, m, batch, heads, seqlenQ, seqlenK,
                      ceilDivBlocks(seqlenK, spec.sparseBlockN),
                      ceilDivBlocks(seqlenQ, spec.sparseBlockM),
                      kTransposedBlockMaskListNames);
}

llvm::Error checkCaptures(const AttentionSpec &spec,
                          llvm::ArrayRef<CapturedRef> captures) {
  if (captures.size() != spec.captures.size())
    return fail(llvm::formatv("the kernel's mods read {0} captured tensors, "
                              "the call gives {1}",
                              spec.captures.size(), captures.size()));
  for (size_t i = 0; i < captures.size(); ++i) {
    const CapturedRef &c = captures[i];
    const CapturedTensor &want = spec.captures[i];
    std::string name = "captured tensor '" + want.name + "'";
    if (!c.data)
      return fail(name + " is a null pointer");
    if (reinterpret_cast<uintptr_t>(c.data) % 4 != 0)
      return fail(name + " is not 4-byte aligned");
    if (c.dtype != want.dtype)
      return fail(llvm::formatv("{0} has dtype {1}, the mods read {2}", name,
                                captureDTypeName(c.dtype),
                                captureDTypeName(want.dtype)));
    if (c.rank != static_cast<int>(want.shape.size()))
      return fail(llvm::formatv("{0} has rank {1}, the mods read {2} ({3})",
                                name, c.rank, want.shape.size(),
                                want.typeText()));
    for (int d = 0; d < c.rank; ++d) {
      if (c.shape[d] < 1 || (want.shape[d] >= 0 && c.shape[d] != want.shape[d]))
        return fail(llvm::formatv("{0} has size {1} in dimension {2}; the "
                                  "mods read {3}",
                                  name, c.shape[d], d, want.typeText()));
      if (c.strides[d] < 0)
        return fail(llvm::formatv("{0} has a negative stride in dimension "
                                  "{1}",
                                  name, d));
    }
    if (!capturedSpanFits(c))
      return fail(name + " spans more than 2^62 bytes: its strides are wrong");
    // The kernels index such a capture with 32-bit offsets
    // (ScoreModInline.cpp).
    if (want.hasNarrowOffsets()) {
      int64_t span = 1; // fits: capturedSpanFits
      for (int d = 0; d < c.rank; ++d)
        span += (c.shape[d] - 1) * c.strides[d];
      if (span >= (int64_t(1) << 31))
        return fail(llvm::formatv("{0} spans {1} elements: a capture "
                                  "declared with a static shape of fewer "
                                  "than 2^31 elements must span fewer than "
                                  "2^31 (the kernels use 32-bit offsets); "
                                  "pass a contiguous tensor",
                                  name, span));
    }
  }
  return llvm::Error::success();
}

llvm::Error checkBlockMaskOutput(const AttentionSpec &spec,
                                 const BlockMaskRef &m, int64_t seqlenQ,
                                 int64_t seqlenK) {
  if (!spec.isBlockSparse())
    return fail("only a block-sparse spec has a block mask to build (set "
                "AttentionSpec::sparseBlockM and sparseBlockN)");
  if (seqlenQ < 1 || seqlenK < 1 || seqlenQ >= (int64_t(1) << 31) ||
      seqlenK >= (int64_t(1) << 31))
    return fail(llvm::formatv("seqlens must be in [1, 2^31), got q {0} and "
                              "k {1}",
                              seqlenQ, seqlenK));
  if (!m.kvNumBlocks.data)
    return fail("the block mask to write needs kv_num_blocks and kv_indices "
                "(full_kv_num_blocks and full_kv_indices are optional)");
  // The lists' batch and head dimensions say which masks to build (the
  // problem's, or 1 for a mask shared by every sequence or head); all four
  // lists must agree on them.
  const int64_t batch = m.kvNumBlocks.shape[0], heads = m.kvNumBlocks.shape[1];
  if (batch < 1 || batch > 65535 || heads < 1 || heads > 65535)
    return fail(llvm::formatv("kv_num_blocks has batch {0} and heads {1}: "
                              "each must be in [1, 65535]",
                              batch, heads));
  if (heads != 1 && heads != spec.numHeads)
    return fail(llvm::formatv("kv_num_blocks has {0} heads: the kernel has "
                              "{1} query heads (or give 1 for one mask "
                              "shared by every head)",
                              heads, spec.numHeads));
  if (auto err = checkBlockMask(spec, m, batch, heads, seqlenQ, seqlenK))
    return err;
  const char *names[] = {"kv_num_blocks", "kv_indices", "full_kv_num_blocks",
                         "full_kv_indices"};
  auto lists = m.lists();
  std::vector<ByteRange> written;
  for (unsigned l = 0; l < 4; ++l) {
    const CapturedRef &t = *lists[l];
    if (!t.data)
      continue;
    if (t.shape[0] != batch || t.shape[1] != heads)
      return fail(llvm::formatv("{0} has batch {1} and heads {2}, "
                                "kv_num_blocks {3} and {4}: the lists of a "
                                "mask to build agree on both",
                                names[l], t.shape[0], t.shape[1], batch,
                                heads));
    bool injective =
        t.rank == 3 ? isInjective(std::array<int64_t, 3>{t.shape[0],
                                                         t.shape[1],
                                                         t.shape[2]},
                                  std::array<int64_t, 3>{t.strides[0],
                                                         t.strides[1],
                                                         t.strides[2]})
                    : isInjective(t.shape, t.strides);
    if (!injective)
      return fail(llvm::formatv("{0}'s strides make distinct entries share "
                                "memory",
                                names[l]));
    std::array<int64_t, 4> shape = t.shape, strides = t.strides;
    if (t.rank == 3)
      shape[3] = 1, strides[3] = 0;
    ByteRange range = byteRange(t.data, shape, strides, 4);
    for (const ByteRange &other : written)
      if (overlaps(range, other))
        return fail(llvm::formatv("{0} overlaps another list of the block "
                                  "mask in memory",
                                  names[l]));
    written.push_back(range);
  }
  return llvm::Error::success();
}


llvm::Error checkOutputsApart(
    const TensorRef &o, const LseRef &lse,
    llvm::ArrayRef<std::pair<const char *, const TensorRef *>> inputs) {
  auto fail = [](const llvm::Twine &message) {
    return llvm::createStringError(message.str());
  };
  if (!isInjective(o.shape, o.strides))
    return fail(llvm::formatv("o strides {0} make distinct outputs share "
                              "memory (shape {1})",
                              shapeText(o.strides), shapeText(o.shape)));
  if (!isInjective(lse.shape, lse.strides))
    return fail(llvm::formatv("lse strides {0} make distinct outputs share "
                              "memory (shape {1})",
                              shapeText(lse.strides), shapeText(lse.shape)));
  ByteRange oRange = byteRange(o.data, o.shape, o.strides, 2);
  ByteRange lseRange = byteRange(lse.data, lse.shape, lse.strides, 4);
  if (overlaps(oRange, lseRange))
    return fail("o and lse overlap in memory");
  for (auto [name, t] : inputs) {
    ByteRange in = byteRange(t->data, t->shape, t->strides, 2);
    if (overlaps(oRange, in) || overlaps(lseRange, in))
      return fail(llvm::formatv("the outputs overlap input {0} in memory: "
                                "the kernel would read what it writes",
                                name));
  }
  return llvm::Error::success();
}

llvm::Error checkForwardArgs(const AttentionSpec &spec,
                             const ForwardArgs &args) {
  const std::pair<const char *, const TensorRef *> tensors[] = {
      {"q", &args.q}, {"k", &args.k}, {"v", &args.v}, {"o", &args.o}};
  for (auto [name, t] : tensors)
    if (auto err = checkTensor(name, *t, spec))
      return err;
  const auto &q = args.q.shape, &k = args.k.shape, &v = args.v.shape,
             &o = args.o.shape;
  if (q[1] != spec.numHeads)
    return fail(llvm::formatv("q has {0} heads but the kernel was compiled "
                              "for {1}",
                              q[1], spec.numHeads));
  if (k[1] != spec.numKVHeads || v[1] != spec.numKVHeads)
    return fail(llvm::formatv("k and v have {0} and {1} heads but the kernel "
                              "was compiled for {2} kv heads",
                              k[1], v[1], spec.numKVHeads));
  if (k[0] != q[0] || v[0] != q[0])
    return fail(llvm::formatv("batch sizes differ: q {0}, k {1}, v {2}", q[0],
                              k[0], v[0]));
  if (k[2] != v[2])
    return fail(llvm::formatv("k has seqlen {0} but v has {1}", k[2], v[2]));
  if (o != q)
    return fail(llvm::formatv("o shape {0} must equal q shape {1}",
                              shapeText(o), shapeText(q)));
  // Persistent kernels number the query rows of every (batch, head) with
  // 32-bit integers.
  if (double(q[0]) * double(q[1]) * double(q[2]) >= double(int64_t(1) << 31))
    return fail(llvm::formatv("q has {0} x {1} x {2} query rows (batch x "
                              "heads x seqlen), above 2^31 - 1: split the "
                              "batch into smaller calls",
                              q[0], q[1], q[2]));

  const LseRef &lse = args.lse;
  if (!lse.data)
    return fail("lse is a null pointer");
  if (reinterpret_cast<uintptr_t>(lse.data) % 4 != 0)
    return fail("lse pointer is not 4-byte aligned");
  if (lse.shape != std::array<int64_t, 3>{q[0], q[1], q[2]})
    return fail(llvm::formatv("lse shape {0} must be [batch, heads, seqlen] "
                              "of q = [{1}, {2}, {3}]",
                              shapeText(lse.shape), q[0], q[1], q[2]));
  for (int64_t s : lse.strides)
    if (s < 0)
      return fail(llvm::formatv("lse strides {0} must be non-negative",
                                shapeText(lse.strides)));
  if (!spanFits(lse.shape, lse.strides, 4))
    return fail(llvm::formatv("lse shape {0} with strides {1} spans more "
                              "than 2^62 bytes: the strides are wrong",
                              shapeText(lse.shape), shapeText(lse.strides)));

  if (auto err = checkOutputsApart(
          args.o, lse, {tensors[0], tensors[1], tensors[2]}))
    return err;
  if (auto err = checkCaptures(spec, args.captures))
    return err;
  if (auto err = checkBlockMask(spec, args.blockMask, q[0], q[1], q[2], k[2]))
    return err;
  if (args.scale)
    return checkScale(*args.scale);
  return llvm::Error::success();
}

llvm::Error checkScale(double scale) {
  // The kernels keep the running max of the unscaled scores and fold the
  // scale into one multiply-add per score, which needs scale > 0; they
  // work in base 2 with scale * log2(e) as an f32, which must be a normal
  // number: inf makes (s - max) * inf a NaN, and 0 or a subnormal (flushed
  // to zero) would make every row uniform.
  if (!(std::isfinite(scale) && scale > 0))
    return fail(llvm::formatv("scale must be a positive finite number, got "
                              "{0}",
                              scale));
  const float folded = static_cast<float>(scale * M_LOG2E);
  if (!std::isfinite(folded) || folded < std::numeric_limits<float>::min())
    return fail(llvm::formatv(
        "scale {0:e} is out of range: the kernels compute in f32 with scale "
        "* log2(e) folded in, which must be a normal f32, so the scale must "
        "be in [{1:e}, {2:e}]; rescale q (or k) instead",
        scale, kMinScale, kMaxScale));
  return llvm::Error::success();
}

llvm::Error checkGridLimits(const KernelInfo &info, bool persistent,
                            const ForwardArgs &args) {
  // A persistent kernel walks every (batch, head, query block) itself from
  // a one-dimensional grid (the 2^31 row limit is checkForwardArgs').
  if (persistent)
    return llvm::Error::success();
  const int64_t batch = args.q.shape[0], heads = args.q.shape[1];
  if (heads > kMaxGridYZ)
    return fail(llvm::formatv(
        "q has {0} heads, above {1}: a {2} kernel runs one block per (query "
        "block, head, sequence) with the heads in CUDA's grid y, which holds "
        "at most {1}; split the heads into calls of at most {1} (or use a "
        "persistent family such as wgmma_persistent on sm_90a)",
        heads, kMaxGridYZ, info.config.family));
  if (batch > kMaxGridYZ)
    return fail(llvm::formatv(
        "batch {0} is above {1}: a {2} kernel runs one block per (query "
        "block, head, sequence) with the sequences in CUDA's grid z, which "
        "holds at most {1}; split the batch into calls of at most {1} "
        "sequences (or use a persistent family such as wgmma_persistent on "
        "sm_90a)",
        batch, kMaxGridYZ, info.config.family));
  return llvm::Error::success();
}

llvm::Error checkVarlenBatch(
    int64_t batch,
    llvm::ArrayRef<std::pair<const char *, const int32_t *>> offsets) {
  if (batch < 0 || batch > kMaxGridYZ)
    return fail(llvm::formatv(
        "varlen batch {0} is out of range: 0 to {1} sequences per call "
        "(CUDA's grid z); split larger batches",
        batch, kMaxGridYZ));
  for (auto [name, array] : offsets) {
    if (!array)
      return fail(llvm::Twine(name) + " is a null pointer");
    if (reinterpret_cast<uintptr_t>(array) % 4 != 0)
      return fail(llvm::Twine(name) + " is not 4-byte aligned");
  }
  return llvm::Error::success();
}

llvm::Error checkPackedViews(const TensorRef &q, const TensorRef &k,
                             llvm::ArrayRef<CapturedRef> captures,
                             const BlockMaskRef &blockMask) {
  if (q.shape[0] != 1 || k.shape[0] != 1)
    return fail(llvm::formatv(
        "varlen tensors are batch-1 views of the packed tokens ([1, heads, "
        "total_tokens, head_dim], TensorRef::packed), but q has batch {0} "
        "and k batch {1}",
        q.shape[0], k.shape[0]));
  if (!captures.empty() || blockMask.kvNumBlocks.data)
    return fail("a varlen launch takes no captured tensors or block mask");
  return llvm::Error::success();
}

llvm::Error checkTensorRef(const char *name, const TensorRef &t,
                           const AttentionSpec &spec) {
  return checkTensor(name, t, spec);
}

bool hasDistinctElements(const TensorRef &t) {
  return isInjective(t.shape, t.strides);
}

bool spansOverlap(const TensorRef &a, const TensorRef &b) {
  return overlaps(byteRange(a.data, a.shape, a.strides, 2),
                  byteRange(b.data, b.shape, b.strides, 2));
}

bool spansOverlap(const TensorRef &a, const LseRef &b) {
  return overlaps(byteRange(a.data, a.shape, a.strides, 2),
                  byteRange(b.data, b.shape, b.strides, 4));
}

ForwardKernelArgs toKernelArgs(const ForwardArgs &args, double scale) {
  ForwardKernelArgs k;
  k.q = args.q.data;
  k.k = args.k.data;
  k.v = args.v.data;
  k.o = args.o.data;
  k.lse = args.lse.data;
  auto first3 = [](const std::array<int64_t, 4> &s) {
    return std::array<int64_t, 3>{s[0], s[1], s[2]};
  };
  k.qStrides = first3(args.q.strides);
  k.kStrides = first3(args.k.strides);
  k.vStrides = first3(args.v.strides);
  k.oStrides = first3(args.o.strides);
  k.lseStrides = args.lse.strides;
  k.seqlenQ = static_cast<int32_t>(args.q.shape[2]);
  k.seqlenK = static_cast<int32_t>(args.k.shape[2]);
  k.scaleLog2 = static_cast<float>(scale * M_LOG2E);
  k.batch = static_cast<int32_t>(args.q.shape[0]);
  return k;
}

} // namespace flashjit
