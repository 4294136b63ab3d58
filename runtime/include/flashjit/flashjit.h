/*===- flashjit.h - flashjit's C API ---------------------------------------===
 * Why: runtimes written in other languages (Python through ctypes, Rust,
 * Go, Julia) need an ABI that does not change with the C++ API or the
 * compiler that built it. This header is plain C (C99 and C++): opaque
 * handles, a status code from every function, a thread-local message for
 * the last failure, and DLPack tensors (dlpack/dlpack.h, v0.6 or later).
 *
 *   flashjit_context_t ctx;
 *   flashjit_context_create(0, NULL, NULL, &ctx);
 *   flashjit_attention_spec_t spec;
 *   flashjit_attention_spec_init(&spec);      // then set head_dim, causal...
 *   flashjit_kernel_t kernel;
 *   if (flashjit_kernel_compile(ctx, &spec, &kernel) != FLASHJIT_STATUS_OK)
 *     fprintf(stderr, "%s\n", flashjit_last_error());
 *   flashjit_kernel_forward(kernel, &q, &k, &v, &o, &lse, NAN, stream);
 *   flashjit_kernel_release(kernel);
 *   flashjit_context_destroy(ctx);
 *
 * ABI rules: functions and enum values are only added, never changed;
 * flashjit_attention_spec_t only grows at its end, and its struct_size
 * says which fields the caller knows. No function aborts, exits or lets a
 * C++ exception out; handles may be used from several threads at once.
 *===----------------------------------------------------------------------===*/
#ifndef FLASHJIT_C_API_H
#define FLASHJIT_C_API_H

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FLASHJIT_API __attribute__((visibility("default")))
#else
#define FLASHJIT_API
#endif

/* Raised when a function or a field is added (flashjit_get_version's
 * api_version tells what the loaded library implements). */
#define FLASHJIT_C_API_VERSION 12

typedef enum flashjit_status {
  FLASHJIT_STATUS_OK = 0,
  /* A null handle or pointer, a malformed tensor (dtype, device, ndim,
   * shape, strides, alignment) or spec, an unknown chip. */
  FLASHJIT_STATUS_INVALID_ARGUMENT = 1,
  /* Well-formed but not handled by any kernel template (e.g. head dim 48),
   * or a spec field this version of the library does not know. */
  FLASHJIT_STATUS_UNSUPPORTED = 2,
  /* No CUDA driver or GPU: kernels compile to PTX but cannot launch. */
  FLASHJIT_STATUS_NO_DEVICE = 3,
  /* Generating or compiling the kernel failed. */
  FLASHJIT_STATUS_COMPILE_ERROR = 4,
  /* The CUDA driver refused to JIT or load the kernel's module. */
  FLASHJIT_STATUS_DRIVER_ERROR = 5,
  /* The kernel launch failed. */
  FLASHJIT_STATUS_LAUNCH_ERROR = 6,
  /* Out of memory, or a failure flashjit has no better word for. */
  FLASHJIT_STATUS_INTERNAL = 7
} flashjit_status_t;

/* Element type of q, k, v and o (0 is left unused: a zeroed spec is
 * refused rather than read as some type). */
typedef enum flashjit_dtype {
  FLASHJIT_DTYPE_F16 = 1,
  FLASHJIT_DTYPE_BF16 = 2
} flashjit_dtype_t;

typedef struct flashjit_context *flashjit_context_t;
typedef struct flashjit_kernel *flashjit_kernel_t;

/* What one attention computes. Fill it with flashjit_attention_spec_init,
 * which sets struct_size to this header's sizeof and every field to its
 * default, then change the fields you need. */
typedef struct flashjit_attention_spec {
  size_t struct_size;   /* sizeof(flashjit_attention_spec_t) of the caller */
  int64_t head_dim;     /* default 128 */
  int32_t dtype;        /* flashjit_dtype_t, default FLASHJIT_DTYPE_BF16 */
  int32_t causal;       /* 0 or 1 (top-left aligned, as PyTorch's is_causal) */
  int64_t num_heads;    /* query heads, default 1 */
  int64_t num_kv_heads; /* key/value heads, divides num_heads, default 1 */
  /* ---- API version 2: variants (AttentionSpec in FlashJIT.h says more) */
  /* 0: top-left diagonal (default), 1: bottom-right (query row i sits at
   * key column i + seqlen_k - seqlen_q), for causal and the window. */
  int32_t causal_align;
  /* Number of captured tensors (0 to 8) and, for each, its element type
   * (FLASHJIT_CAPTURE_F32 or _I32), rank (1 to 4) and dims (-1: any). */
  int32_t num_captures;
  /* Sliding window: keys the query reaches left and right of the
   * diagonal, -1 for no limit (default -1, -1). */
  int64_t window_left;
  int64_t window_right;
  /* MLIR text of one func.func each, NULL or "" for none:
   * score_mod (f32 score, index b, h, q_idx, kv_idx, captures...) -> f32,
   * mask_mod (index b, h, q_idx, kv_idx, captures...) -> i1. */
  const char *score_mod;
  const char *mask_mod;
  int32_t capture_dtype[8];
  int32_t capture_rank[8];
  int64_t capture_shape[8][4];
  /* ---- API version 3: block-sparse attention */
  /* The block mask's block, query rows x keys (multiples of 16 up to 4096,
   * e.g. 128 x 128); 0, 0 (default): dense. The mask itself is passed to
   * flashjit_kernel_forward_block_sparse at each launch. */
  int64_t sparse_block_m;
  int64_t sparse_block_n;
  /* ---- API version 8: variable-length batches */
  /* 1: the varlen kernel, launched with flashjit_kernel_forward_varlen on
   * packed sequences; 0 (default): dense. */
  int32_t varlen;
  /* ---- API version 10: paged KV caches for varlen kernels */
  /* Tokens per page (a power of two from 16 to 256) of the K/V cache a
   * varlen kernel reads (flashjit_kernel_forward_paged); 0 (default):
   * packed K/V. */
  int64_t page_size;
} flashjit_attention_spec_t;

/* Element types of captured tensors. */
typedef enum flashjit_capture_dtype {
  FLASHJIT_CAPTURE_F32 = 1,
  FLASHJIT_CAPTURE_I32 = 2
} flashjit_capture_dtype_t;

static inline void
flashjit_attention_spec_init(flashjit_attention_spec_t *spec) {
  spec->struct_size = sizeof(flashjit_attention_spec_t);
  spec->head_dim = 128;
  spec->dtype = FLASHJIT_DTYPE_BF16;
  spec->causal = 0;
  spec->num_heads = 1;
  spec->num_kv_heads = 1;
  spec->causal_align = 0;
  spec->num_captures = 0;
  spec->window_left = -1;
  spec->window_right = -1;
  spec->score_mod = 0;
  spec->mask_mod = 0;
  spec->sparse_block_m = 0;
  spec->sparse_block_n = 0;
  spec->varlen = 0;
  spec->page_size = 0;
  for (int i = 0; i < 8; ++i) {
    spec->capture_dtype[i] = 0;
    spec->capture_rank[i] = 0;
    for (int d = 0; d < 4; ++d)
      spec->capture_shape[i][d] = 0;
  }
}

/* The message of the last failed call on this thread ("" after a call that
 * succeeded). Valid until the next flashjit call on this thread. */
FLASHJIT_API const char *flashjit_last_error(void);

/* "ok", "invalid argument", ... ("unknown status" for other values). */
FLASHJIT_API const char *flashjit_status_name(flashjit_status_t status);

/* The library's version (major.minor.patch) and the C API version it
 * implements (FLASHJIT_C_API_VERSION of its header). Null pointers are
 * skipped. */
FLASHJIT_API flashjit_status_t flashjit_get_version(int32_t *major,
                                                    int32_t *minor,
                                                    int32_t *patch,
                                                    int32_t *api_version);

/* A context on CUDA device `device`: its kernels are loaded, and launched,
 * in that device's primary context (the CUDA runtime's), whatever context
 * the calling thread has current, so one process may hold a context per
 * GPU and call each from any thread. cache_dir: NULL for the default
 * ($FLASHJIT_CACHE_DIR, else $XDG_CACHE_HOME/flashjit, else
 * ~/.cache/flashjit), "" for an in-memory cache only. chip: NULL or "" for
 * the device's (sm_90a when there is no GPU), else e.g. "sm_80". Without a
 * driver or GPU the context is still created: it compiles kernels, and
 * forward reports FLASHJIT_STATUS_NO_DEVICE. A context keeps every kernel
 * it compiles or loads (PTX, cubin, loaded module) until it is destroyed;
 * a process that compiles many distinct specs bounds that memory by
 * replacing contexts it no longer needs (kernels handed out stay valid;
 * the disk cache makes a new context's loads fast). */
FLASHJIT_API flashjit_status_t flashjit_context_create(int32_t device,
                                                       const char *cache_dir,
                                                       const char *chip,
                                                       flashjit_context_t *out);

/* Destroys a context (NULL: nothing to do). Kernels compiled by it stay
 * valid until released. */
FLASHJIT_API flashjit_status_t flashjit_context_destroy(flashjit_context_t ctx);

/* The chip kernels are compiled for, e.g. "sm_90a" (owned by ctx). */
FLASHJIT_API flashjit_status_t flashjit_context_chip(flashjit_context_t ctx,
                                                     const char **chip);

/* Whether a GPU was opened (*has_device = 1), and if not, why (*reason,
 * owned by ctx; may be NULL if not wanted). */
FLASHJIT_API flashjit_status_t flashjit_context_device(flashjit_context_t ctx,
                                                       int32_t *has_device,
                                                       const char **reason);

/* The kernel for `spec`: from memory, the disk cache, or compiled now.
 * Release it with flashjit_kernel_release. */
FLASHJIT_API flashjit_status_t flashjit_kernel_compile(
    flashjit_context_t ctx, const flashjit_attention_spec_t *spec,
    flashjit_kernel_t *out);

/* flashjit_kernel_compile with a say in the tile config. config: NULL or
 * "" as flashjit_kernel_compile; a whole config such as
 * "mma_sync:m128:n48:s1:w4" builds exactly that one; a family name such
 * as "mma_sync" builds that family's heuristic choice (to run one template
 * where another is the default). A malformed config or an unknown family
 * is FLASHJIT_STATUS_INVALID_ARGUMENT; a family or config that cannot
 * build this spec on this chip, FLASHJIT_STATUS_UNSUPPORTED or
 * FLASHJIT_STATUS_COMPILE_ERROR, with the reason in the last error. */
FLASHJIT_API flashjit_status_t flashjit_kernel_compile_config(
    flashjit_context_t ctx, const flashjit_attention_spec_t *spec,
    const char *config, flashjit_kernel_t *out);

/* flashjit_kernel_compile_config for the sequence length the kernel will
 * mostly run at: `seqlen` picks the tuning database's bucket (the kernel
 * still serves every length); 0 is the default hint (2048), a negative
 * seqlen FLASHJIT_STATUS_INVALID_ARGUMENT. Kernels for lengths in
 * different buckets may differ in their tile config. */
FLASHJIT_API flashjit_status_t flashjit_kernel_compile_for_seqlen(
    flashjit_context_t ctx, const flashjit_attention_spec_t *spec,
    const char *config, int64_t seqlen, flashjit_kernel_t *out);

/* Releases a kernel (NULL: nothing to do). */
FLASHJIT_API flashjit_status_t
flashjit_kernel_release(flashjit_kernel_t kernel);

/* The kernel's symbol name and its tile config, e.g.
 * "flashjit_fwd_d128_bf16_causal_h16_kv16" and "cuda_core:m128:n16:s1:w4"
 * (owned by the kernel). Either pointer may be NULL. */
FLASHJIT_API flashjit_status_t flashjit_kernel_describe(
    flashjit_kernel_t kernel, const char **name, const char **config);

/* o = softmax(scale * q k^T) v, and lse = its log-sum-exp, launched on
 * `stream` (a CUstream of the primary context of the context's device, as
 * the CUDA runtime creates them; NULL: that context's legacy default
 * stream). The launch runs in that primary context whatever context the
 * calling thread has current, and leaves the caller's current.
 *   q, o:  [batch, num_heads, seqlen_q, head_dim]
 *   k, v:  [batch, num_kv_heads, seqlen_k, head_dim]
 *   lse:   [batch, num_heads, seqlen_q], kDLFloat 32 bits
 * Nothing is launched unless every rule holds (docs/rules.md lists them
 * with their tests); a broken one is FLASHJIT_STATUS_INVALID_ARGUMENT
 * with a message naming it. The same rules hold for every kernel family
 * (a tensor one family cannot take is refused, never run by another):
 *  - q, k, v, o: kDLFloat 16 bits (f16) or kDLBfloat 16 bits (bf16) as the
 *    spec says, lanes 1; all tensors on kDLCUDA with the context's device
 *    id, non-null data and shape pointers.
 *  - q, k, v, o start 16-byte aligned (data + byte_offset); lse 4-byte.
 *  - Every extent at least 1 (no empty tensors) and below 2^31; head_dim
 *    equal to the spec's; batch x num_heads x seqlen_q below 2^31.
 *  - Strides in elements (NULL: compact row-major); head_dim's is 1, the
 *    others non-negative multiples of 8 (0 broadcasts an input); BSHD and
 *    BHSD are just strides. A tensor spans at most 2^62 bytes.
 *  - o and lse give every element its own memory and overlap neither each
 *    other nor q, k, v.
 *  - scale: NaN for 1/sqrt(head_dim); else finite, positive, and in
 *    [8.15e-39, 2.35e38] (scale * log2(e) must be a normal f32).
 *  - The families that are not persistent (mma_sync, cuda_core, wgmma)
 *    take at most 65535 sequences and 65535 query heads per call (CUDA's
 *    grid limits): split the batch, or use wgmma_persistent.
 * NaN in the inputs propagates as IEEE arithmetic does, by rows and tiles
 * (docs/rules.md says exactly where). */
FLASHJIT_API flashjit_status_t flashjit_kernel_forward(
    flashjit_kernel_t kernel, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, DLTensor *o, DLTensor *lse, double scale, void *stream);

/* (API version 8) A varlen kernel's launch (spec varlen 1) on a batch of
 * sequences packed one after another (docs/inference.md):
 *   q, o:  [total_q, num_heads, head_dim]
 *   k, v:  [total_k, num_kv_heads, head_dim]
 *   lse:   [num_heads, total_q], kDLFloat 32 bits
 *   cu_seqlens_q, cu_seqlens_k: kDLInt 32 bits [batch + 1] on the
 *   context's device: sequence b's queries are rows [cu_seqlens_q[b],
 *   cu_seqlens_q[b + 1]) of q, its keys rows [cu_seqlens_k[b],
 *   cu_seqlens_k[b + 1]) of k and v (causal attention aligned per sequence
 *   as the spec's causal_align says; bottom-right for chunked prefill).
 *   max_seqlen_q: the longest query length (at least 1; it sizes the grid,
 *   and its length class picks the config, as a dense call's lengths do).
 * The tensors follow flashjit_kernel_forward's rules (strides in elements or
 * NULL); the offsets are read on the GPU only, where each sequence's rows
 * are clamped to the tensors: offsets that decrease or run past them give
 * shorter or empty sequences, and nothing is written outside o and lse. */
FLASHJIT_API flashjit_status_t flashjit_kernel_forward_varlen(
    flashjit_kernel_t kernel, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, DLTensor *o, DLTensor *lse,
    const DLTensor *cu_seqlens_q, const DLTensor *cu_seqlens_k,
    int64_t max_seqlen_q, double scale, void *stream);

/* (API version 10) A paged varlen kernel's launch (spec varlen 1 and a
 * page_size): chunked prefill of packed queries against a paged KV cache
 * (docs/inference.md):
 *   q, o, lse, cu_seqlens_q, max_seqlen_q: as flashjit_kernel_forward_varlen
 *   k, v:  [pages, page_size, num_kv_heads, head_dim] pools, the pages
 *          evenly strided (stride 0 = page_size x stride 1)
 *   kv_lens: kDLInt 32 bits [batch]: each sequence's keys, the new query
 *          tokens' included (bottom-right causal_align for chunked prefill)
 *   block_table: kDLInt 32 bits [batch, max_pages], contiguous: the page
 *          ids of each sequence's keys, in order.
 * kv_lens and block_table are read on the GPU only: a length is clamped to
 * [0, max_pages x page_size], a page id outside [0, pages) reads zeros, and
 * nothing is written outside o and lse. The rows of a sequence's last page
 * past its length are read and must hold finite values (as a zeroed or
 * reused pool does; NaN there would reach o). */
FLASHJIT_API flashjit_status_t flashjit_kernel_forward_paged(
    flashjit_kernel_t kernel, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, DLTensor *o, DLTensor *lse,
    const DLTensor *cu_seqlens_q, const DLTensor *kv_lens,
    const DLTensor *block_table, int64_t max_seqlen_q, double scale,
    void *stream);

/* flashjit_kernel_forward with the spec's captured tensors: `captures`
 * holds num_captures DLTensors (kDLFloat 32 or kDLInt 32 bits as the spec
 * says, on the context's device, 4-byte aligned, strides in elements or
 * NULL for row-major), in the spec's order. Their shapes are checked
 * against the spec's; the indices the mods read are the caller's contract.
 * A capture declared with a static shape of fewer than 2^31 elements must
 * span fewer than 2^31 elements (32-bit offsets in the kernels). */
FLASHJIT_API flashjit_status_t flashjit_kernel_forward_captures(
    flashjit_kernel_t kernel, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, DLTensor *o, DLTensor *lse, double scale,
    const DLTensor *captures, int32_t num_captures, void *stream);

/* flashjit_kernel_forward_captures for a block-sparse spec (sparse_block_m
 * and _n set), with its block mask in FlexAttention's BlockMask layout:
 * kDLInt 32-bit tensors on the context's device, 4-byte aligned, strides in
 * elements or NULL for row-major, over Mq = ceil(seqlen_q / sparse_block_m)
 * query blocks and Nk = ceil(seqlen_k / sparse_block_n) key blocks:
 *   kv_num_blocks       [batch or 1, num_heads or 1, Mq]
 *   kv_indices          [batch or 1, num_heads or 1, Mq, Nk or more]
 *   full_kv_num_blocks  as kv_num_blocks, or NULL (no full blocks)
 *   full_kv_indices     as kv_indices, or NULL with full_kv_num_blocks
 * Query block qb of (b, h) visits key blocks kv_indices[b, h, qb, i] for i <
 * kv_num_blocks[b, h, qb], applying the mask_mod there, then the full
 * blocks without it; the causal mask and window apply everywhere. A batch or
 * head dimension of 1 serves every sequence or head. Shapes are checked; the
 * contents are read on the GPU only: counts are clamped to [0, Nk], indices
 * outside [0, Nk) are skipped, a block listed twice is attended twice. */
FLASHJIT_API flashjit_status_t flashjit_kernel_forward_block_sparse(
    flashjit_kernel_t kernel, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, DLTensor *o, DLTensor *lse, double scale,
    const DLTensor *captures, int32_t num_captures,
    const DLTensor *kv_num_blocks, const DLTensor *kv_indices,
    const DLTensor *full_kv_num_blocks, const DLTensor *full_kv_indices,
    void *stream);

/* (API version 4) Builds the block mask of a block-sparse spec on the GPU,
 * as FlexAttention's create_block_mask does: the spec's mask (its mask_mod
 * with `captures` as in flashjit_kernel_forward_captures, its causal mask
 * and window) is evaluated on every (query, key) pair of a seqlen_q x
 * seqlen_k problem, and each query block's key blocks are listed where
 * every pair is kept (full) and where some are (partial), in ascending
 * order, in the layout flashjit_kernel_forward_block_sparse reads. A pair
 * outside the sequences counts as dropped. The lists are written (kDLInt
 * 32-bit, on the context's device, not overlapping); their batch and head
 * dims (the same in all four; 1 for one mask shared by every sequence or
 * head, the mask_mod then sees b = 0 or h = 0) say which masks are built.
 * full_kv_num_blocks and full_kv_indices may be NULL: every kept block is
 * then partial. Entries past each count are not written. The block-mask
 * kernel is compiled (and cached) on first use per spec; the launch runs on
 * `stream`. */
FLASHJIT_API flashjit_status_t flashjit_context_build_block_mask(
    flashjit_context_t ctx, const flashjit_attention_spec_t *spec,
    const DLTensor *captures, int32_t num_captures, int64_t seqlen_q,
    int64_t seqlen_k, DLTensor *kv_num_blocks, DLTensor *kv_indices,
    DLTensor *full_kv_num_blocks, DLTensor *full_kv_indices, void *stream);

/* ---- The backward pass (C API version 5; docs/backward.md) ----------- */

/* The backward kernels of one spec: dQ, dK and dV of softmax(scale Q K^T) V
 * from q, k, v, the forward's o and lse, and dO. Dense or causal attention
 * (either alignment), sliding windows, score_mod, mask_mod and block
 * masks (API 11), head dims 64, 96, 128 and 256, sm_80 or newer;
 * varlen specs (API 12, flashjit_backward_run_varlen) on sm_90a at head
 * dims 64 and 128; any other spec is FLASHJIT_STATUS_UNSUPPORTED. */
typedef struct flashjit_backward *flashjit_backward_t;

/* Compiles (or takes from the cache) the backward kernels of `spec`.
 * `config`: NULL or "" for the default, else a tile config of family
 * wgmma_bwd (sm_90a, the default there: "wgmma_bwd:m64:n128:s2:w8") or
 * mma_sync_bwd (sm_80 and newer, e.g. "mma_sync_bwd:m32:n128:s2:w8"). */
FLASHJIT_API flashjit_status_t flashjit_backward_compile(
    flashjit_context_t ctx, const flashjit_attention_spec_t *spec,
    const char *config, flashjit_backward_t *out);

/* Releases a backward handle (NULL: nothing to do). */
FLASHJIT_API flashjit_status_t flashjit_backward_release(
    flashjit_backward_t backward);

/* The bytes of device workspace one call on `batch` sequences of
 * `seqlen_q` query rows needs. The caller allocates it (256-byte aligned,
 * as cudaMalloc's), may do so in advance, and may reuse it for every call
 * on one stream; calls that may overlap need one each. */
FLASHJIT_API flashjit_status_t flashjit_backward_workspace_size(
    flashjit_backward_t backward, int64_t batch, int64_t seqlen_q,
    uint64_t *bytes);

/* Runs the backward pass on `stream` (a CUstream; NULL: the legacy default
 * stream): q, o, dout [B, H, Sq, D] and k, v [B, Hkv, Sk, D] in the spec's
 * dtype, lse f32 [B, H, Sq] as flashjit_kernel_forward wrote it; writes dq
 * [B, H, Sq, D], dk and dv [B, Hkv, Sk, D]. Strides in elements (NULL:
 * row-major), head_dim contiguous. `scale` is the forward's (NAN:
 * 1/sqrt(head_dim)). Every argument is checked before anything launches:
 * shapes, dtypes, alignment, gradients that overlap each other or an
 * input, the workspace's size. */
FLASHJIT_API flashjit_status_t flashjit_backward_run(
    flashjit_backward_t backward, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, const DLTensor *o, const DLTensor *lse,
    const DLTensor *dout, DLTensor *dq, DLTensor *dk, DLTensor *dv,
    void *workspace, uint64_t workspace_bytes, double scale, void *stream);

/* (API version 11) flashjit_backward_run for a spec with a score_mod or
 * mask_mod: `captures` as the forward took them
 * (flashjit_kernel_forward_captures), read again by the mods here. The
 * score_mod's derivative is derived from its function when the kernels
 * are compiled; an op it has no rule for is FLASHJIT_STATUS_COMPILE_ERROR
 * naming the op. */
FLASHJIT_API flashjit_status_t flashjit_backward_run_captures(
    flashjit_backward_t backward, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, const DLTensor *o, const DLTensor *lse,
    const DLTensor *dout, DLTensor *dq, DLTensor *dk, DLTensor *dv,
    void *workspace, uint64_t workspace_bytes, double scale,
    const DLTensor *captures, int32_t num_captures, void *stream);

/* (API version 11) flashjit_backward_run_captures for a block-sparse spec,
 * with its block mask transposed: for each key block the query blocks that
 * list it, FlexAttention's BlockMask q_num_blocks, q_indices,
 * full_q_num_blocks and full_q_indices (kDLInt 32-bit on the context's
 * device, 4-byte aligned, strides in elements or NULL), over Nk =
 * ceil(seqlen_k / sparse_block_n) key blocks and Mq = ceil(seqlen_q /
 * sparse_block_m) query blocks:
 *   q_num_blocks       [batch or 1, num_heads or 1, Nk]
 *   q_indices          [batch or 1, num_heads or 1, Nk, Mq or more]
 *   full_q_num_blocks  as q_num_blocks, or NULL (no full blocks)
 *   full_q_indices     as q_indices, or NULL with full_q_num_blocks
 * The transpose of the forward's lists (a block listed k times there is
 * listed k times here); the mask_mod applies on partial blocks. Shapes are
 * checked; contents are read on the GPU as the forward reads its lists. No
 * deterministic kernels for block masks yet. */
FLASHJIT_API flashjit_status_t flashjit_backward_run_block_sparse(
    flashjit_backward_t backward, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, const DLTensor *o, const DLTensor *lse,
    const DLTensor *dout, DLTensor *dq, DLTensor *dk, DLTensor *dv,
    void *workspace, uint64_t workspace_bytes, double scale,
    const DLTensor *captures, int32_t num_captures,
    const DLTensor *q_num_blocks, const DLTensor *q_indices,
    const DLTensor *full_q_num_blocks, const DLTensor *full_q_indices,
    void *stream);

/* (API version 12) The backward of a varlen spec (spec varlen 1) on the
 * packed sequences its forward (flashjit_kernel_forward_varlen) ran on:
 * q, o, dout, dq [total_q, H, D] and k, v, dk, dv [total_k, Hkv, D]
 * (strides in elements or NULL, head_dim contiguous), lse f32 [H, total_q]
 * as the forward wrote it, cu_seqlens_q and cu_seqlens_k int32 [batch + 1]
 * on the device, max_seqlen_k the longest sequence's keys (it sizes the
 * grid; keys past it get no gradient). The workspace is
 * flashjit_backward_workspace_size(backward, 1, total_q) bytes. dq rows of
 * no sequence get 0; dk and dv rows of no sequence are not written. Offsets
 * that are not monotone or run past the tensors give shorter (or empty)
 * sequences, never a row outside them. */
FLASHJIT_API flashjit_status_t flashjit_backward_run_varlen(
    flashjit_backward_t backward, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, const DLTensor *o, const DLTensor *lse,
    const DLTensor *dout, DLTensor *dq, DLTensor *dk, DLTensor *dv,
    const DLTensor *cu_seqlens_q, const DLTensor *cu_seqlens_k,
    int64_t max_seqlen_k, void *workspace, uint64_t workspace_bytes,
    double scale, void *stream);

/* ---- API version 6: decode steps on a KV cache (flashjit/Decode.h) ---- */

typedef struct flashjit_decode_kernel *flashjit_decode_kernel_t;

/* What one decode kernel computes. Fill it with flashjit_decode_spec_init,
 * then change the fields you need. */
typedef struct flashjit_decode_spec {
  size_t struct_size;   /* sizeof(flashjit_decode_spec_t) of the caller */
  int64_t head_dim;     /* 64 or 128, default 128 */
  int32_t dtype;        /* flashjit_dtype_t, default FLASHJIT_DTYPE_BF16 */
  /* 1 (default): query token i of q_len sees keys [0, kv_len - q_len + i]
   * (bottom-right); 0: every token sees all kv_len keys. */
  int32_t causal;
  int64_t num_heads;    /* query heads, default 32 */
  int64_t num_kv_heads; /* divides num_heads, default 8 */
  int64_t q_len;        /* query tokens per sequence, 1 to 16, default 1 */
  /* Tokens per page of a paged cache, 16 to 256; 0 (default): a
   * contiguous cache. */
  int64_t page_size;
  /* Tile overrides, 0 for the defaults: keys per K/V tile (32, 64, 128),
   * cp.async stages (2 to 8), L2 prefetch bytes (-1 none, 64, 128, 256). */
  int64_t block_n;
  int64_t stages;
  int64_t l2_prefetch;
} flashjit_decode_spec_t;

static inline void flashjit_decode_spec_init(flashjit_decode_spec_t *spec) {
  spec->struct_size = sizeof(flashjit_decode_spec_t);
  spec->head_dim = 128;
  spec->dtype = FLASHJIT_DTYPE_BF16;
  spec->causal = 1;
  spec->num_heads = 32;
  spec->num_kv_heads = 8;
  spec->q_len = 1;
  spec->page_size = 0;
  spec->block_n = 0;
  spec->stages = 0;
  spec->l2_prefetch = 0;
}

/* The decode kernels of `spec` (compiled and cached like forward kernels,
 * under keys of their own). Release with flashjit_decode_kernel_release. */
FLASHJIT_API flashjit_status_t flashjit_decode_kernel_compile(
    flashjit_context_t ctx, const flashjit_decode_spec_t *spec,
    flashjit_decode_kernel_t *out);
/* Releases a decode kernel (NULL: nothing to do). */
FLASHJIT_API flashjit_status_t
flashjit_decode_kernel_release(flashjit_decode_kernel_t kernel);
/* One decode step on `stream`:
 *   q, o:     [batch, q_len, num_heads, head_dim] (the query tokens are the
 *             last q_len positions of each sequence)
 *   k, v:     contiguous [batch, capacity, num_kv_heads, head_dim], or
 *             paged [pages, page_size, num_kv_heads, head_dim]
 *   kv_lens:  kDLInt 32 [batch], keys per sequence (query tokens included)
 *   block_table: kDLInt 32 [batch, max_pages] (paged; NULL otherwise),
 *             sequence i's pages in order
 *   lse:      kDLFloat 32 [batch, num_heads, q_len], natural log
 * Tensors on the context's device, strides in elements (NULL: row-major),
 * head_dim with stride 1. max_kv_len: the longest kv_lens entry when known
 * (0: the capacity; it sizes the split only). num_splits: 0 for the
 * documented rule. scale: NaN for 1/sqrt(head_dim). The partial results of
 * a split launch live in a workspace the kernel keeps per stream. The
 * contents of kv_lens and block_table stay on the GPU: lengths are clamped
 * to the capacity, a page id outside the pool reads zeros. */
FLASHJIT_API flashjit_status_t flashjit_decode(
    flashjit_decode_kernel_t kernel, const DLTensor *q, const DLTensor *k,
    const DLTensor *v, const DLTensor *kv_lens, const DLTensor *block_table,
    DLTensor *o, DLTensor *lse, int64_t max_kv_len, int64_t num_splits,
    double scale, void *stream);

/* ---- API version 7: options of the backward pass --------------------- */

/* How to build the backward kernels. Fill it with
 * flashjit_backward_options_init, then change the fields you need. */
typedef struct flashjit_backward_options {
  size_t struct_size; /* sizeof(flashjit_backward_options_t) of the caller */
  /* NULL or "" (default): the default tile config; else a config as
   * flashjit_backward_compile takes it. */
  const char *config;
  /* 0 (default) or 1: dq, dk and dv bitwise reproducible run to run (the
   * additions into dq's f32 accumulator take turns in a fixed order), at
   * a measured cost in time (docs/backward.md) and a little more
   * workspace (flashjit_backward_workspace_size counts it). */
  int32_t deterministic;
  /* (API version 9) Without a config: the sequence length the kernels are
   * chosen for, which picks the tuning database's backward bucket
   * (`flashjit autotune --backward`); 0 (default): 2048. */
  int64_t seqlen;
} flashjit_backward_options_t;

static inline void
flashjit_backward_options_init(flashjit_backward_options_t *options) {
  options->struct_size = sizeof(flashjit_backward_options_t);
  options->config = 0;
  options->deterministic = 0;
  options->seqlen = 0;
}

/* flashjit_backward_compile with options (NULL: the defaults). */
FLASHJIT_API flashjit_status_t flashjit_backward_compile_with_options(
    flashjit_context_t ctx, const flashjit_attention_spec_t *spec,
    const flashjit_backward_options_t *options, flashjit_backward_t *out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHJIT_C_API_H */
