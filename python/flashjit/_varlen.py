"""Variable-length and paged prefill from PyTorch (docs/inference.md).

Why: serving runtimes batch prompts of different lengths without padding
and keep their keys in a paged KV cache; flashjit.varlen_attention runs
flashjit's varlen kernels on such batches (FlashAttention's
flash_attn_varlen_func, with a block table for paged caches), on the
current CUDA stream. Inference only: it is not differentiable.
"""

from typing import Optional, Tuple

import torch

from ._torch import _DTYPES, _device_index, get_kernel
from .errors import InvalidArgumentError
from .spec import AttentionSpec


def _int32_vector(name: str, t, device: torch.device, rank: int = 1) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int32 or t.dim() != rank:
        raise InvalidArgumentError(f"{name} must be a {rank}-D torch.int32 tensor")
    if t.device != device:
        raise InvalidArgumentError(f"{name} is on {t.device}, the queries on {device}")
    return t.contiguous()


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     cu_seqlens_q: torch.Tensor, cu_seqlens_k: Optional[torch.Tensor] = None,
                     max_seqlen_q: Optional[int] = None, *, causal: bool = False,
                     causal_align: str = "top_left", scale: Optional[float] = None,
                     kv_lens: Optional[torch.Tensor] = None,
                     block_table: Optional[torch.Tensor] = None,
                     config: Optional[str] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """O and LSE of each packed sequence attended alone.

    q: [total_q, heads, head_dim] (f16 or bf16, CUDA); cu_seqlens_q: int32
    [batch + 1], sequence b's queries are rows cu_seqlens_q[b] to
    cu_seqlens_q[b + 1]. Keys either packed the same way (k, v [total_k,
    kv_heads, head_dim] with cu_seqlens_k) or in a paged KV cache (k, v
    [pages, page_size, kv_heads, head_dim], kv_lens int32 [batch] and
    block_table int32 [batch, max_pages]; page_size a power of two from 16
    to 256; the rows of a sequence's last page past its length must hold
    finite values). causal_align "bottom_right" for chunked prefill (the
    last query sees the last key). max_seqlen_q: the longest query length
    (None: read from cu_seqlens_q, which synchronizes with the GPU).
    Returns O like q and LSE f32 [heads, total_q]; a query row with no key
    gets O = 0 and LSE = -inf.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or not t.is_cuda:
            raise InvalidArgumentError(f"{name} must be a CUDA torch.Tensor")
    if q.dtype not in _DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise InvalidArgumentError(
            f"q, k, v must all be float16 or bfloat16, got {q.dtype}, {k.dtype}, {v.dtype}")
    paged = block_table is not None or kv_lens is not None
    if paged and (block_table is None or kv_lens is None):
        raise InvalidArgumentError("a paged KV cache needs both kv_lens and block_table")
    if paged == (cu_seqlens_k is not None):
        raise InvalidArgumentError(
            "give cu_seqlens_k for packed keys, or kv_lens and block_table for a paged "
            "KV cache (not both)")
    if q.dim() != 3 or k.dim() != (4 if paged else 3) or v.shape != k.shape:
        raise InvalidArgumentError(
            f"q must be [total_q, heads, head_dim] and k, v "
            f"{'[pages, page_size, kv_heads, head_dim]' if paged else '[total_k, kv_heads, head_dim]'}"
            f" (the same shape); got q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)}")
    device = q.device
    cu_q = _int32_vector("cu_seqlens_q", cu_seqlens_q, device)
    batch = cu_q.numel() - 1
    if batch < 0:
        raise InvalidArgumentError("cu_seqlens_q needs batch + 1 entries, at least 1")
    heads, head_dim = q.shape[1], q.shape[2]
    kv_heads = k.shape[-2]
    spec = AttentionSpec(head_dim=head_dim, dtype=_DTYPES[q.dtype], causal=bool(causal),
                         num_heads=heads, num_kv_heads=kv_heads, causal_align=causal_align,
                         varlen=True, page_size=k.shape[1] if paged else 0)
    o = torch.empty_like(q)
    lse = torch.empty((heads, q.shape[0]), dtype=torch.float32, device=device)
    if batch == 0 or q.shape[0] == 0:
        return o, lse
    if max_seqlen_q is None:
        max_seqlen_q = int((cu_q[1:] - cu_q[:-1]).max().item())
    max_seqlen_q = max(1, min(int(max_seqlen_q), q.shape[0]))
    index = _device_index(device)
    with torch.cuda.device(index):
        kernel = get_kernel(spec, index, config=config, seqlen=max_seqlen_q)
        stream = torch.cuda.current_stream(index).cuda_stream
        if paged:
            lens = _int32_vector("kv_lens", kv_lens, device)
            table = _int32_vector("block_table", block_table, device, rank=2)
            kernel.forward_paged(q, k, v, o, lse, cu_q, lens, table, max_seqlen_q,
                                 scale=scale, stream=stream)
        else:
            cu_k = _int32_vector("cu_seqlens_k", cu_seqlens_k, device)
            kernel.forward_varlen(q, k, v, o, lse, cu_q, cu_k, max_seqlen_q, scale=scale,
                                  stream=stream)
    return o, lse


__all__ = ["varlen_attention"]
