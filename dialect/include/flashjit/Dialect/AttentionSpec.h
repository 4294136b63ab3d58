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

namespace flashjit {

/// Element type of Q, K, V and O. Softmax and accumulation are always f32.
enum class DType { F16, BF16 };

/// "f16" / "bf16".
const char *dtypeName(DType dtype);
/// Parses "f16" or "bf16"; anything else is an error naming the choices.
llvm::Expected<DType> parseDType(llvm::StringRef text);
/// Bytes of one element.
inline unsigned dtypeBytes(DType) { return 2; }

struct AttentionSpec {
  int64_t headDim = 128;
  DType dtype = DType::BF16;
  bool causal = false;
  /// Query heads and key/value heads; numHeads % numKVHeads == 0. Fewer
  /// key/value heads is grouped-query attention.
  int64_t numHeads = 1;
  int64_t numKVHeads = 1;

  /// Checks what every template needs: head dim a multiple of 8 in
  /// [8, 256], heads positive, heads a multiple of KV heads.
  llvm::Error validate() const;
  /// Query heads per key/value head.
  int64_t groupSize() const { return numHeads / numKVHeads; }
  /// Stable text naming everything that changes the generated code, e.g.
  /// "fwd;d=128;dtype=bf16;causal=1;hq=32;hkv=8".
  std::string canonical() const;
  /// A symbol-safe kernel name, e.g. "flashjit_fwd_d128_bf16_causal_h32_kv8".
  std::string kernelName() const;
  /// 1/sqrt(head dim), the scale used when the caller gives none.
  double defaultScale() const;
};

/// FLOPs of the forward pass by the FlashAttention convention:
/// 4 * batch * heads * seqlen_q * seqlen_k * head_dim, halved when causal.
double forwardFlops(const AttentionSpec &spec, int64_t batch, int64_t seqlenQ,
                    int64_t seqlenK);

} // namespace flashjit

#endif
