"""flashjit for PyTorch: attention() and sdpa(), the calls PyTorch users make.

Why: PyTorch users want one call on CUDA tensors that works eagerly, under
torch.compile and inside CUDA graphs. attention() is that call: it turns
its friendly arguments (layouts, windows, captures, FlexAttention block
masks) into the flashjit::attention_forward custom op's, or, for an eager
call where the op's dispatcher has nothing to add, hands it to a per-thread
plan that calls the C API directly. flashjit's __init__ serves the torch
names (attention, sdpa, the ops, context, get_kernel, get_backward,
clear_cache) from this module, so importing it is what imports torch.

The layer behind it, one concern a module:
* flashjit._torch_cache: one Context per device, the compiled kernels,
  context(), get_kernel(), get_backward() and clear_cache();
* flashjit._torch_args: the argument checks and conversions every path
  shares, so a bad call raises the same error whichever path runs it;
* flashjit._torch_ops: the flashjit:: custom ops, their fake
  implementations and autograd formula (torch.compile, CUDA graphs);
* flashjit._torch_eager: the eager plans, forward and training
  (_TrainingAttention), and flashjit._fastpath, their C++ side.
"""

from typing import Optional, Sequence, Tuple

import torch

from ._torch_args import _ALIGN, _as_tensor, _block_mask_args, _pair
from ._torch_cache import clear_cache, context, get_backward, get_kernel
from ._torch_eager import (_FAST_PATH, _Tensor, _TrainingAttention, _Variant,
                           _dispatch_modes, _fast_forward, _function_modes, _functorch_active,
                           _grad_enabled, _is_compiling)
from ._torch_ops import attention_backward, attention_forward
from .errors import InvalidArgumentError, UnsupportedError

__all__ = ["attention", "sdpa", "attention_forward", "attention_backward", "context",
           "get_kernel", "get_backward", "clear_cache"]


def attention(q, k, v, *, causal: bool = False, scale: Optional[float] = None,
              window: Optional[Tuple[int, int]] = None, softcap: Optional[float] = None,
              return_lse: bool = False, causal_align: str = "top_left",
              score_mod: Optional[str] = None, mask_mod: Optional[str] = None,
              captures: Sequence[torch.Tensor] = (),
              capture_dims: Optional[Sequence[Sequence[int]]] = None,
              block_mask=None, sparse_block: Optional[Tuple[int, int]] = None,
              config: Optional[str] = None, layout: str = "bhsd"):
    """softmax(scale * q k^T [+ mods]) v on CUDA tensors, differentiable.

    q: [batch, heads, seqlen_q, head_dim]; k, v: [batch, kv_heads, seqlen_k,
    head_dim] (layout="bhsd", PyTorch SDPA's; layout="bshd" takes and
    returns [batch, seqlen, heads, head_dim] as flash-attn does). float16 or
    bfloat16, head_dim contiguous; heads a multiple of kv_heads (GQA).
    Objects with __dlpack__ are taken through torch.from_dlpack (no copy).

    causal: key j visible to query i iff j <= i (causal_align="top_left",
    as PyTorch's is_causal) or j <= i + seqlen_k - seqlen_q
    ("bottom_right", as flash-attn). scale: None for 1/sqrt(head_dim).
    window: (left, right) keys visible each side of the diagonal, -1 for no
    limit. softcap: cap * tanh(score / cap) on the scaled scores.
    score_mod / mask_mod: MLIR func.func text (see the C API); captures:
    the float32/int32 tensors they read, with capture_dims their declared
    dims (default: the tensors' shapes; -1 for a dynamic dim). block_mask:
    a FlexAttention BlockMask, or (kv_num_blocks, kv_indices[,
    full_kv_num_blocks, full_kv_indices]) int32 tensors with sparse_block.
    config: a tile config or family name (None: flashjit's choice).

    Returns O shaped like q, or (O, LSE) with return_lse, LSE float32
    [batch, heads, seqlen_q] (natural log). Runs on the current CUDA stream.

    Gradients: O.backward() runs flashjit's backward kernels for dense and
    causal attention (either alignment, GQA/MQA, head dims 64, 96, 128, 256),
    bitwise reproducible under torch.use_deterministic_algorithms(True).
    Sliding windows have a backward too, and so do score_mod,
    soft-capping, mask_mod (the score_mod's derivative is derived from its
    function) and block masks (transposed for the backward; not
    deterministic yet). LSE is not differentiable.
    """
    # The eager path where the op's dispatcher has nothing to add: no
    # tracing, no dispatch or function mode, no functorch transform here;
    # plain tensors and no autograd graph checked by _fast_forward.
    eager = (_FAST_PATH and layout == "bhsd" and not _is_compiling() and not _dispatch_modes()
             and not _function_modes() and not _functorch_active())
    plain = eager and not captures and block_mask is None
    if plain:
        out = _fast_forward(q, k, v, causal, scale, window, softcap, causal_align, score_mod,
                            mask_mod, config)
        if out is not None:
            return out if return_lse else out[0]
        # Training, dense or causal: the plans through an autograd.Function.
        if (window is None and softcap is None and score_mod is None and mask_mod is None
                and causal_align in _ALIGN and _training(q, k, v)):
            o, lse = _TrainingAttention.apply(q, k, v, bool(causal), scale, causal_align,
                                              config, None)
            return (o, lse) if return_lse else o
    q, k, v = _as_tensor("q", q), _as_tensor("k", k), _as_tensor("v", v)
    if layout == "bshd":
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    elif layout != "bhsd":
        raise InvalidArgumentError(f"layout {layout!r}: expected 'bhsd' or 'bshd'")
    if causal_align not in _ALIGN:
        raise InvalidArgumentError(
            f"causal_align {causal_align!r}: expected 'top_left' or 'bottom_right'")
    window_left, window_right = _pair("window", window, (-1, -1))
    captures = [_as_tensor(f"captures[{i}]", c) for i, c in enumerate(captures)]
    if capture_dims is None:
        dims = [int(d) for c in captures for d in c.shape]
    else:
        if len(capture_dims) != len(captures):
            raise InvalidArgumentError(
                f"capture_dims has {len(capture_dims)} entries for {len(captures)} captures")
        dims = [int(d) for entry in capture_dims for d in entry]
    sparse_m, sparse_n, lists = _block_mask_args(block_mask, sparse_block)
    if eager and (not plain or _training(q, k, v)):
        # Windows, mods, captured tensors and block masks: plans too (the
        # same checks at a plan's making; the op where a call has none).
        variant = _Variant((window_left, window_right),
                           None if softcap is None else float(softcap), score_mod, mask_mod,
                           tuple(captures), tuple(dims), (sparse_m, sparse_n), tuple(lists))
        if _training(q, k, v):
            o, lse = _TrainingAttention.apply(q, k, v, bool(causal), scale, causal_align,
                                              config, variant)
            return (o, lse) if return_lse else o
        out = _fast_forward(q, k, v, causal, scale, variant.window, variant.softcap,
                            causal_align, score_mod, mask_mod, config, variant)
        if out is not None:
            return out if return_lse else out[0]
    o, lse = torch.ops.flashjit.attention_forward(
        q, k, v, None if scale is None else float(scale), bool(causal), _ALIGN[causal_align],
        window_left, window_right, None if softcap is None else float(softcap), score_mod,
        mask_mod, captures, dims, sparse_m, sparse_n, lists, config)
    if layout == "bshd":
        o = o.transpose(1, 2)
    return (o, lse) if return_lse else o


def _training(q, k, v) -> bool:
    """Plain tensors, grad mode on and one of them requiring grad: an
    autograd graph to record (_TrainingAttention)."""
    return (type(q) is _Tensor and type(k) is _Tensor and type(v) is _Tensor
            and _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))


def sdpa(query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
         scale: Optional[float] = None, enable_gqa: bool = False):
    """torch.nn.functional.scaled_dot_product_attention's signature on
    flashjit: [batch, heads, seqlen, head_dim] tensors. attn_mask and
    dropout are refused (flashjit.attention has windows, mods and block
    masks instead); fewer key/value heads need enable_gqa=True, as in
    PyTorch."""
    if attn_mask is not None:
        raise UnsupportedError(
            "flashjit.sdpa does not take attn_mask: use is_causal=True for causal masks, or "
            "flashjit.attention's window=, mask_mod= or block_mask= to express other masks")
    if dropout_p:
        raise UnsupportedError(
            f"flashjit.sdpa has no dropout (dropout_p={dropout_p}): pass dropout_p=0.0")
    if query.dim() == 4 and key.dim() == 4 and key.shape[1] != query.shape[1] and not enable_gqa:
        raise InvalidArgumentError(
            f"query has {query.shape[1]} heads and key {key.shape[1]}: pass enable_gqa=True for "
            "grouped-query attention (as with PyTorch's SDPA)")
    return attention(query, key, value, causal=is_causal, scale=scale)
