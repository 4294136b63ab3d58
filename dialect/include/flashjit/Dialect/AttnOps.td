//===- AttnOps.td - attention description ops ---------------*- tablegen -*-===//
// Why: one op carries everything a kernel needs to know about an attention,
// verified once, so later passes can trust its shapes.
#ifndef FLASHJIT_DIALECT_ATTN_OPS
#define FLASHJIT_DIALECT_ATTN_OPS

include "flashjit/Dialect/AttnBase.td"
include "flashjit/Dialect/AttnAttrs.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/RegionKindInterface.td"

def Attn_AttentionOp : Attn_Op<"attention", [
    Pure, RecursiveMemoryEffects]> {
  let summary = "Exact scaled dot-product attention over 4-d tensors";
  let description = [{
    Computes, for every batch `b`, query head `h`, query row `i`:

      O[b,h,i,:] = sum_j P[i,j] V[b,g(h),j,:],
      P[i,:] = softmax_j(mod(scale * Q[b,h,i,:] . K[b,g(h),j,:]))

    where `g(h) = h / (Hq / Hkv)` maps a query head to its key/value head
    (grouped-query attention when Hkv < Hq) and `lse[b,h,i]` is the natural
    log-sum-exp of the row. Shapes are `[batch, heads, seqlen, head_dim]`;
    batch and sequence lengths may be dynamic, heads and head dim are static.

    `causal` masks key positions after the query position (top-left
    alignment, `kv_idx <= q_idx`, as PyTorch's `is_causal`; with
    `bottom_right`, `kv_idx <= q_idx + Sk - Sq`). `window_left` and
    `window_right` bound the keys a query sees to
    `[q_idx + offset - window_left, q_idx + offset + window_right]` (the
    same diagonal offset). These structural masks become loop bounds.
    `sparse_block = [M, N]` makes the attention block-sparse: each launch
    lists, per batch, head and query block of M rows, the key blocks of N
    keys to visit (partial ones, where `mask_mod` applies, then full ones).
    `varlen` packs the batch's sequences along the sequence dimension (batch
    1, `[1, heads, total_tokens, head_dim]`): each launch gives every
    sequence's rows by cumulative offsets, and each sequence is attended
    alone (its own causal diagonal); no mods or block mask. With
    `page_size = P` (varlen only; a power of two from 16 to 256) the key
    and value operands are pools of pages of P tokens (`[1, kv_heads,
    pages * P, head_dim]`), each launch naming every sequence's pages by a
    block table and its keys by a length (chunked prefill on a paged KV
    cache).

    The optional `score_mod` region rewrites each score: its block
    arguments are `(score: f32, b: index, h: index, q_idx: index,
    kv_idx: index)` followed by one argument per captured tensor, and it
    yields an `f32`. The optional `mask_mod` region takes
    `(b, h, q_idx, kv_idx: index)` and the captured tensors, and yields an
    `i1` that keeps the score when true. Captured tensors are the op's
    `captures` operands (f32 or i32 tensors of rank 1 to 4); the regions
    read them with `tensor.extract`. The regions may use `arith` ops,
    the `math` ops exp, exp2, log, log2, tanh, sqrt, rsqrt, absf, fma,
    floor and ceil, and `tensor.extract` of a captured tensor. The
    optional `score_grad` region is what the backward pass needs of a
    `score_mod`: it takes the same arguments and yields the modified
    score and its derivative with respect to `score`.
    `attn-differentiate-score-mod` writes it from `score_mod`; one written
    by hand (for a function the pass has no rule for) is kept. The optional
    `config` attribute is the tile configuration that the autotuner
    attaches.

    Example:
    ```mlir
    %o, %lse = attn.attention %q, %k, %v scale %s causal
        {config = #attn.tile_config<family = "cuda_core", block_m = 64,
                                    block_n = 32, stages = 1, warps = 8>}
        : tensor<?x32x?x128xbf16>, tensor<?x8x?x128xbf16>,
          tensor<?x8x?x128xbf16> -> tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>

    // ALiBi: a per-head slope times the distance, added to each score.
    %o2, %lse2 = attn.attention %q, %k, %v scale %s causal
        captures(%slopes : tensor<32xf32>) score_mod {
    ^bb0(%score: f32, %b: index, %h: index, %qi: index, %kv: index,
         %sl: tensor<32xf32>):
      %slope = tensor.extract %sl[%h] : tensor<32xf32>
      %d = arith.subi %kv, %qi : index
      %di = arith.index_cast %d : index to i64
      %df = arith.sitofp %di : i64 to f32
      %bias = arith.mulf %slope, %df : f32
      %r = arith.addf %score, %bias : f32
      attn.yield %r : f32
    } : tensor<?x32x?x128xbf16>, tensor<?x8x?x128xbf16>,
        tensor<?x8x?x128xbf16> -> tensor<?x32x?x128xbf16>, tensor<?x32x?xf32>
    ```
  }];
  let arguments = (ins
    AnyRankedTensor:$query,
    AnyRankedTensor:$key,
    AnyRankedTensor:$value,
    F32:$scale,
    Variadic<AnyRankedTensor>:$captures,
    UnitAttr:$causal,
    UnitAttr:$bottom_right,
    OptionalAttr<I64Attr>:$window_left,
    OptionalAttr<I64Attr>:$window_right,
    OptionalAttr<DenseI64ArrayAttr>:$sparse_block,
    OptionalAttr<Attn_TileConfigAttr>:$config,
    UnitAttr:$varlen,
    OptionalAttr<I64Attr>:$page_size);
  let results = (outs AnyRankedTensor:$output, AnyRankedTensor:$lse);
  let regions = (region MaxSizedRegion<1>:$score_mod,
                        MaxSizedRegion<1>:$mask_mod,
                        MaxSizedRegion<1>:$score_grad);
  let assemblyFormat = [{
    $query `,` $key `,` $value `scale` $scale (`causal` $causal^)?
    (`captures` `(` $captures^ `:` type($captures) `)`)?
    attr-dict (`score_mod` $score_mod^)? (`mask_mod` $mask_mod^)?
    (`score_grad` $score_grad^)?
    `:` type($query) `,` type($key) `,` type($value) `->`
    type($output) `,` type($lse)
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// Sizes of the static parts of the problem.
    int64_t getHeadDim();
    int64_t getNumHeads();
    int64_t getNumKVHeads();
    ::mlir::Type getElementType();
    /// The C++ description of this attention (shapes, dtype, causal, GQA,
    /// window and alignment; the mods' text is left empty: the regions
    /// are the op's).
    ::flashjit::AttentionSpec getSpec();
    /// Whether a mod region may hold `op` (the lowering can place it).
    static bool isModOpSupported(::mlir::Operation *op);
  }];
}

def Attn_YieldOp : Attn_Op<"yield", [Pure, Terminator,
    ParentOneOf<["AttentionOp"]>]> {
  let summary = "Returns the values of a mod region";
  let description = [{
    Terminates the `score_mod` region with the modified `f32` score, the
    `mask_mod` region with an `i1` that keeps the score when true, or the
    `score_grad` region with the modified score and its derivative (two
    `f32`).

    Example:
    ```mlir
    attn.yield %score : f32
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

#endif
