//===- AttentionSpec.h - the C++ description of one attention ----*- C++ -*-===//
// Why: programs describe the attention they need with this plain struct; it
// mirrors the `attn.attention` op and its canonical text is the part of the
// kernel cache key that says *what* is computed.
#ifndef FLASHJIT_DIALECT_ATTENTIONSPEC_H
#define FLASHJIT_DIALECT_ATTENTIONSPEC_H

#include "llvm/Support/Error.h"
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flashjit {

/// Element type of Q, K, V and O. Softmax and accumulation are always f32.
enum class DType { F16, BF16 };

/// "f16" / "bf16".
const char *dtypeName(DType dtype);
/// Parses "f16" or "bf16"; anything else is an error naming the choices.
llvm::Expected<DType> parseDType(llvm::StringRef text);
/// Bytes of one element.
inline unsigned dtypeBytes(DType) { return 2; }

/// Which diagonal the causal mask and the window are measured from. Query
/// row i sits at key column i + offset: offset 0 top-left (PyTorch's
/// is_causal), seqlenK - seqlenQ bottom-right (the last query row sees
/// the last key: a query block appended to a KV cache).
enum class CausalAlign { TopLeft, BottomRight };
const char *causalAlignName(CausalAlign align);
/// Parses "top-left" or "bottom-right".
llvm::Expected<CausalAlign> parseCausalAlign(llvm::StringRef text);

/// Element type of a captured tensor.
enum class CaptureDType { F32, I32 };
const char *captureDTypeName(CaptureDType dtype);

/// A device tensor that score_mod and mask_mod read (per-head ALiBi slopes
/// [H] f32, document ids [B, S] i32, a bias table), passed at each launch
/// after Q, K, V. Row-major with any strides; a dimension of -1 takes any
/// size at launch. The mods index it with tensor.extract; indices out of
/// its bounds are the caller's contract (not checked on the GPU).
/// Captured tensors one spec may have.
constexpr unsigned kMaxCapturedTensors = 8;

struct CapturedTensor {
  std::string name;
  CaptureDType dtype = CaptureDType::F32;
  std::vector<int64_t> shape;
  /// "tensor<?x16xf32>": the type the mods' functions take it as.
  std::string typeText() const;
  /// Statically shaped with fewer than 2^31 elements: the kernels index it
  /// with 32-bit offsets, and a launch must pass it spanning fewer than
  /// 2^31 elements (docs/rules.md R13).
  bool hasNarrowOffsets() const;
};

struct AttentionSpec {
  int64_t headDim = 128;
  DType dtype = DType::BF16;
  bool causal = false;
  /// Query heads and key/value heads; numHeads % numKVHeads == 0. Fewer
  /// key/value heads is grouped-query attention.
  int64_t numHeads = 1;
  int64_t numKVHeads = 1;

  // ---- variants -----------------------------------------------------------
  /// The diagonal of `causal` and of the window.
  CausalAlign causalAlign = CausalAlign::TopLeft;
  /// Sliding window: key j is visible to query i only if
  /// i + offset - windowLeft <= j <= i + offset + windowRight (offset from
  /// causalAlign); -1 leaves that side open. Causal is windowRight 0.
  /// Keys outside the window of a whole tile are never loaded.
  int64_t windowLeft = -1, windowRight = -1;
  /// score_mod: MLIR text of one `func.func` taking (score: f32, b, h,
  /// q_idx, kv_idx: index, captures...) and returning the new f32 score;
  /// `score` is already scaled (scale * q . k). Empty: none.
  std::string scoreMod;
  /// mask_mod: MLIR text of one `func.func` taking (b, h, q_idx, kv_idx:
  /// index, captures...) and returning i1, true where the score is kept.
  /// Empty: none. A row that keeps no key gets O = 0 and LSE = -inf.
  std::string maskMod;
  /// The tensors both functions take after their fixed arguments, in order.
  std::vector<CapturedTensor> captures;
  /// Block-sparse attention: each launch lists, per batch, head and query
  /// block of sparseBlockM rows, the key blocks of sparseBlockN keys it
  /// visits (ForwardArgs::blockMask, FlexAttention's BlockMask format):
  /// "partial" blocks, where the mask_mod applies, then "full" blocks,
  /// where it does not. Key blocks not listed are never loaded. The
  /// causal mask, the window and the sequence ends apply on every block.
  /// The kernel's tile divides the mask's block (the autotuner only picks
  /// such tiles); 128 x 128 is FlexAttention's default. 0: dense.
  int64_t sparseBlockM = 0, sparseBlockN = 0;
  /// Variable-length batches (docs/inference.md): Q, K, V and O packed as
  /// [total_tokens, heads, head_dim], each sequence's rows given by
  /// cumulative offsets at launch (Kernel::forwardVarlen). Its own kernel
  /// name and cache key; no mods or block mask (validate() says so).
  bool varlen = false;
  /// Paged K/V for varlen attention (chunked prefill on a KV cache): K and
  /// V are pools of pages of pageSize tokens ([pages * pageSize, kv_heads,
  /// head_dim] packed), each sequence's pages named by a block table and
  /// its key count by kvLens at launch (VarlenForwardArgs). A power of two
  /// from 16 to 256; 0: K and V packed like Q (cu_seqlens_k).
  int64_t pageSize = 0;

  /// Checks what every template needs: head dim a multiple of 8 in
  /// [8, 256], heads positive, heads a multiple of KV heads, window
  /// extents -1 or more, captures of rank 1 to 4, that captures come
  /// with a mod that reads them, and sparse block sizes both 0 or both
  /// multiples of 16 up to 4096. The mods' text is checked when it is
  /// compiled.
  llvm::Error validate() const;
  /// Query heads per key/value head.
  int64_t groupSize() const { return numHeads / numKVHeads; }
  /// Whether keys right of the diagonal are masked (causal or a right
  /// window), and by how much: visible iff j <= i + offset + rightExtent().
  bool hasRightBound() const { return causal || windowRight >= 0; }
  int64_t rightExtent() const;
  bool hasLeftBound() const { return windowLeft >= 0; }
  bool isBlockSparse() const { return sparseBlockM > 0; }
  /// Whether any mask beyond the sequence ends applies (a block-sparse
  /// mask included: each one makes the key tiles of query blocks differ).
  bool hasStructuralMask() const {
    return hasRightBound() || hasLeftBound() || isBlockSparse();
  }
  bool hasMods() const { return !scoreMod.empty() || !maskMod.empty(); }
  bool paged() const { return pageSize > 0; }
  /// Whether `n` is a page size paged K/V takes: a power of two from 16 to
  /// 256.
  static bool validPageSize(int64_t n) {
    return n >= 16 && n <= 256 && (n & (n - 1)) == 0;
  }
  /// Whether some query row may keep no key at all (its O is then 0 and
  /// its LSE -inf): a mask_mod, a window, a bottom-right diagonal, a
  /// block mask, or varlen (a sequence may have no keys).
  bool mayEmptyRows() const;
  /// Whether the spec is plain causal or dense attention (no variant).
  bool isPlain() const;
  /// Stable text naming everything that changes the generated code, e.g.
  /// "fwd;d=128;dtype=bf16;causal=1;hq=32;hkv=8"; variants append their
  /// window, alignment, captures and the mods' text.
  std::string canonical() const;
  /// A symbol-safe kernel name, e.g. "flashjit_fwd_d128_bf16_causal_h32_kv8";
  /// variants append a short hash of their part of canonical().
  std::string kernelName() const;
  /// 1/sqrt(head dim), the scale used when the caller gives none.
  double defaultScale() const;
};

/// FLOPs of the forward pass by the FlashAttention convention:
/// 4 * batch * heads * seqlen_q * seqlen_k * head_dim, halved when causal
/// (top-left, no window, square).
double forwardFlops(const AttentionSpec &spec, int64_t batch, int64_t seqlenQ,
                    int64_t seqlenK);

/// The (query, key) pairs the causal mask and window leave visible in one
/// head: 4 * head_dim * this is the FLOP count of the computed scores.
double visiblePairs(const AttentionSpec &spec, int64_t seqlenQ,
                    int64_t seqlenK);

/// FLOPs of the scores a forward pass computes: forwardFlops for plain
/// attention, else 4 * batch * heads * head_dim * visiblePairs (a causal
/// mask or window counts the pairs it leaves; a mask_mod's own drops are
/// not known here).
double computedFlops(const AttentionSpec &spec, int64_t batch,
                     int64_t seqlenQ, int64_t seqlenK);

} // namespace flashjit

#endif
