"""Variable-length and paged prefill from PyTorch (docs/inference.md).

Why: serving runtimes batch prompts of different lengths without padding
and keep their keys in a paged KV cache, and training runs on packed
sequences; flashjit.varlen_attention runs flashjit's varlen kernels on such
batches (FlashAttention's flash_attn_varlen_func, with a block table for
paged caches), on the current CUDA stream, and with packed keys it is
differentiable (the varlen backward, docs/backward.md).
"""

from typing import Optional, Tuple

import torch

from ._torch_args import _DTYPES
from ._torch_cache import _device_index, get_backward, get_kernel
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
                     config: Optional[str] = None,
                     max_seqlen_k: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
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

    With packed keys, O is differentiable: where q, k or v requires grad,
    autograd's backward runs flashjit's varlen backward kernels (sm_90a,
    head dims 64 and 128; not deterministic) and gives dq, dk, dv shaped
    as q, k, v. max_seqlen_k: the longest key length (None: read from
    cu_seqlens_k when the backward runs, which synchronizes). The LSE is
    not differentiable.
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
    if batch == 0 or q.shape[0] == 0:
        return torch.empty_like(q), torch.empty((heads, q.shape[0]), dtype=torch.float32,
                                                device=device)
    if max_seqlen_q is None:
        max_seqlen_q = int((cu_q[1:] - cu_q[:-1]).max().item())
    max_seqlen_q = max(1, min(int(max_seqlen_q), q.shape[0]))
    index = _device_index(device)
    if not paged:
        cu_k = _int32_vector("cu_seqlens_k", cu_seqlens_k, device)
        if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
            return _VarlenAttention.apply(q, k, v, cu_q, cu_k, spec, index, max_seqlen_q,
                                          max_seqlen_k, scale, config)
        return _forward_packed(q, k, v, cu_q, cu_k, spec, index, max_seqlen_q, scale,
                               config)
    o = torch.empty_like(q)
    lse = torch.empty((heads, q.shape[0]), dtype=torch.float32, device=device)
    with torch.cuda.device(index):
        kernel = get_kernel(spec, index, config=config, seqlen=max_seqlen_q)
        lens = _int32_vector("kv_lens", kv_lens, device)
        table = _int32_vector("block_table", block_table, device, rank=2)
        kernel.forward_paged(q, k, v, o, lse, cu_q, lens, table, max_seqlen_q, scale=scale,
                             stream=torch.cuda.current_stream(index).cuda_stream)
    return o, lse


def _forward_packed(q, k, v, cu_q, cu_k, spec, index, max_seqlen_q, scale, config):
    o = torch.empty_like(q)
    lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
    with torch.cuda.device(index):
        kernel = get_kernel(spec, index, config=config, seqlen=max_seqlen_q)
        kernel.forward_varlen(q, k, v, o, lse, cu_q, cu_k, max_seqlen_q, scale=scale,
                              stream=torch.cuda.current_stream(index).cuda_stream)
    return o, lse


class _VarlenAttention(torch.autograd.Function):
    """varlen_attention on packed keys with gradients: the varlen forward,
    then the varlen backward on the same offsets."""

    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, spec, index, max_seqlen_q, max_seqlen_k, scale,
                config):
        o, lse = _forward_packed(q, k, v, cu_q, cu_k, spec, index, max_seqlen_q, scale,
                                 config)
        ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k)
        ctx.mark_non_differentiable(lse)
        ctx.options = (spec, index, max_seqlen_k, scale)
        return o, lse

    @staticmethod
    def backward(ctx, grad_o, grad_lse):
        q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
        spec, index, max_seqlen_k, scale = ctx.options
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        if q.shape[0] == 0 or k.shape[0] == 0 or cu_q.numel() < 2:
            return (dq.zero_(), dk.zero_(), dv.zero_()) + (None,) * 8
        # The kernels leave dk and dv rows of no sequence (before cu_k[0] or
        # from cu_k[-1] on) unwritten: zero them where there are any, or
        # everywhere when the offsets are not read here.
        if max_seqlen_k is None:
            first, last, longest = torch.stack(
                [cu_k[0], cu_k[-1], (cu_k[1:] - cu_k[:-1]).max()]).tolist()
            max_seqlen_k = longest
            if first != 0 or last != k.shape[0]:
                dk.zero_()
                dv.zero_()
        else:
            dk.zero_()
            dv.zero_()
        max_seqlen_k = max(1, min(int(max_seqlen_k), k.shape[0]))
        with torch.cuda.device(index):
            backward = get_backward(spec, index)
            workspace = torch.empty(backward.workspace_bytes(1, q.shape[0]),
                                    dtype=torch.uint8, device=q.device)
            backward.backward_varlen(q, k, v, o, lse, grad_o.contiguous(), dq, dk, dv, cu_q,
                                     cu_k, max_seqlen_k, workspace=workspace, scale=scale,
                                     stream=torch.cuda.current_stream(index).cuda_stream)
        return (dq, dk, dv) + (None,) * 8


__all__ = ["varlen_attention"]
