"""The flashjit:: custom ops: attention_forward and attention_backward.

Why: one op is what works eagerly, under torch.compile and inside CUDA
graphs. So the kernel launch lives in a torch.library custom op
(flashjit::attention_forward) with a fake implementation: torch.compile
traces the op from shapes alone, and the real implementation runs only on
real tensors. The op allocates O and LSE itself, picks the kernel from the
cache keyed by the spec and the device (flashjit._torch_cache), and launches
on the caller's current CUDA stream.

Its autograd formula calls a second op, flashjit::attention_backward, which
runs flashjit's backward kernels (dQ, dK, dV from the saved inputs, O and
LSE; docs/backward.md), so training works eagerly and under torch.compile
(the op's fake implementation gives the gradients' shapes). Gradients flow
through O; the LSE output is not differentiable.

CUDA graphs: compiling a kernel (module load) and the first launch of a
persistent kernel on a stream (the library allocates and zeroes that
stream's tile counter) cannot be captured. The ops refuse both inside a
capture with a message saying to run the call once on the capture stream
first, instead of letting the capture fail inside the driver.
"""

import math
from typing import List, Optional, Tuple

import torch

from . import _dlpack
from ._torch_args import _check_devices, _check_inputs, _gradient_input, _kernel_strides, _spec_of
from ._torch_cache import _backwards, _kernels, _primed, _seqlen_bucket, get_backward, get_kernel
from .errors import GraphCaptureError, InvalidArgumentError
from .runtime import Kernel


def _launch(kernel: Kernel, q, k, v, o, lse, scale, captures, block_mask, device: int) -> None:
    stream = torch.cuda.current_stream(device).cuda_stream
    capturing = torch.cuda.is_current_stream_capturing()
    pair = (kernel.handle, stream)
    if kernel.takes_tile_counter and pair not in _primed and capturing:
        raise GraphCaptureError(
            f"the kernel {kernel.name} ({kernel.config}) has not run on this stream yet, and "
            "its first launch on a stream sets up a tile counter, which CUDA graph capture "
            "cannot record: run the same flashjit call once on the capture stream before "
            "capturing (e.g. torch.cuda.graph(g, stream=s) after a warm-up under "
            "torch.cuda.stream(s))")
    borrowed = [_dlpack.borrow(t, strides=_kernel_strides(n, t))
                for n, t in (("q", q), ("k", k), ("v", v), ("o", o))]
    kernel.forward(*borrowed, lse, scale=scale, stream=stream, captures=captures,
                   block_mask=block_mask[:4] if block_mask else None)
    if kernel.takes_tile_counter and not capturing:
        _primed.add(pair)


@torch.library.custom_op("flashjit::attention_forward", mutates_args=())
def attention_forward(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: Optional[float], causal: bool,
        causal_align: int, window_left: int, window_right: int, softcap: Optional[float],
        score_mod: Optional[str], mask_mod: Optional[str], captures: List[torch.Tensor],
        capture_dims: List[int], sparse_block_m: int, sparse_block_n: int,
        block_mask: List[torch.Tensor], config: Optional[str],
) -> Tuple[torch.Tensor, torch.Tensor]:
    """O and LSE of flashjit's attention: q [B, H, Sq, D], k and v [B, Hkv,
    Sk, D] -> O like q, LSE f32 [B, H, Sq]. flashjit.attention is the
    friendly front; this is the op torch.compile records."""
    _check_inputs(q, k, v, scale, causal_align, softcap, score_mod, captures, capture_dims,
                  sparse_block_m, sparse_block_n, block_mask)
    device = _check_devices(q, k, v, captures, block_mask)
    batch, heads, seqlen_q, _ = q.shape
    seqlen_k = k.shape[2]
    o = torch.empty_like(q)
    lse = torch.empty((batch, heads, seqlen_q), dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        return o, lse
    if seqlen_k == 0:  # no key: as a row whose keys are all masked
        o.zero_()
        lse.fill_(-math.inf)
        return o, lse
    spec = _spec_of(q, k, causal, causal_align, window_left, window_right, softcap, score_mod,
                    mask_mod, captures, capture_dims, sparse_block_m, sparse_block_n)
    with torch.cuda.device(device):
        key = (spec, device, config, _seqlen_bucket(max(seqlen_q, seqlen_k)))
        kernel = _kernels.get(key)
        if kernel is None:
            if torch.cuda.is_current_stream_capturing():
                raise GraphCaptureError(
                    "flashjit compiles a kernel on its first call, and CUDA graph capture "
                    "cannot record that: run the same flashjit call once (same shapes, dtype "
                    "and options) before capturing")
            kernel = get_kernel(spec, device, config=config, seqlen=key[3])
        _launch(kernel, q, k, v, o, lse, scale, captures, block_mask, device)
    return o, lse


@attention_forward.register_fake
def _attention_forward_fake(q, k, v, scale, causal, causal_align, window_left, window_right,
                            softcap, score_mod, mask_mod, captures, capture_dims,
                            sparse_block_m, sparse_block_n, block_mask, config):
    _check_inputs(q, k, v, scale, causal_align, softcap, score_mod, captures, capture_dims,
                  sparse_block_m, sparse_block_n, block_mask)
    o = torch.empty_like(q)
    lse = q.new_empty((q.shape[0], q.shape[1], q.shape[2]), dtype=torch.float32)
    return o, lse


@torch.library.custom_op("flashjit::attention_backward", mutates_args=())
def attention_backward(
        grad_o: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
        o: torch.Tensor, lse: torch.Tensor, scale: Optional[float], causal: bool,
        causal_align: int, window_left: int, window_right: int, softcap: Optional[float],
        score_mod: Optional[str], mask_mod: Optional[str], captures: List[torch.Tensor],
        capture_dims: List[int], sparse_block_m: int, sparse_block_n: int,
        block_mask: List[torch.Tensor], config: Optional[str],
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV of attention_forward from its inputs, its O and LSE, and
    dO (docs/backward.md): flashjit's backward kernels on the current CUDA
    stream, deterministic when torch.use_deterministic_algorithms(True) is
    on; score_mod, soft-capping, mask_mod (the score_mod's derivative is
    derived from its function) and block masks (their lists transposed
    here) included. What the backward does not support raises
    UnsupportedError naming it."""
    device = _check_devices(q, k, v, captures, block_mask)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    if dq.numel() == 0 or dk.numel() == 0:  # no query or no key: no gradient flows
        return dq.zero_(), dk.zero_(), dv.zero_()
    spec = _spec_of(q, k, causal, causal_align, window_left, window_right, softcap, score_mod,
                    mask_mod, captures, capture_dims, sparse_block_m, sparse_block_n)
    deterministic = torch.are_deterministic_algorithms_enabled()
    with torch.cuda.device(device):
        backward = _backwards.get((spec, device, deterministic))
        if backward is None:
            if torch.cuda.is_current_stream_capturing():
                raise GraphCaptureError(
                    "flashjit compiles the backward kernels on their first call, and CUDA "
                    "graph capture cannot record that: run the same backward once (same "
                    "shapes, dtype and options) before capturing")
            backward = get_backward(spec, device, deterministic=deterministic)
        workspace = torch.empty(backward.workspace_bytes(q.shape[0], q.shape[2]),
                                dtype=torch.uint8, device=q.device)
        grad_o, grad_strides = _gradient_input("grad_o", grad_o)
        borrowed = [_dlpack.borrow(t, strides=_kernel_strides(n, t))
                    for n, t in (("q", q), ("k", k), ("v", v), ("o", o))]
        gradients = [_dlpack.borrow(t, strides=_kernel_strides(n, t))
                     for n, t in (("dq", dq), ("dk", dk), ("dv", dv))]
        transposed = None
        if len(block_mask) == 8:  # the forward's lists, then the transposed ones
            transposed = block_mask[4:]
        elif block_mask:
            transposed = _transposed_block_mask(block_mask, q.shape[2], k.shape[2],
                                                sparse_block_m, sparse_block_n)
        backward.backward(*borrowed, lse, _dlpack.borrow(grad_o, strides=grad_strides),
                          *gradients, workspace=workspace, scale=scale,
                          stream=torch.cuda.current_stream(device).cuda_stream,
                          captures=list(captures), block_mask=transposed)
    return dq, dk, dv


def _transposed_block_mask(lists, seqlen_q: int, seqlen_k: int, block_m: int,
                           block_n: int) -> List[torch.Tensor]:
    """The backward's block mask from the forward's lists (kv_num_blocks,
    kv_indices[, full_kv_num_blocks, full_kv_indices]): for each key block,
    the query blocks whose lists hold it, ascending (FlexAttention's
    q_num_blocks, q_indices, ...), by the kernels' rules (counts clamped,
    indices out of range skipped). A key block listed twice in one row is
    refused outside CUDA graph capture: the transpose keeps each once."""
    key_blocks = -(-seqlen_k // block_n)
    out = []
    for num, idx in zip(lists[0::2], lists[1::2]):
        columns = torch.arange(idx.shape[-1], device=idx.device)
        valid = ((columns < num.clamp(0, key_blocks)[..., None]) & (idx >= 0)
                 & (idx < key_blocks))
        dense = torch.zeros(*idx.shape[:3], key_blocks + 1, dtype=torch.int32, device=idx.device)
        dense.scatter_add_(-1, torch.where(valid, idx, key_blocks).long(), valid.int())
        dense = dense[..., :key_blocks]
        if not torch.cuda.is_current_stream_capturing() and bool((dense > 1).any()):
            raise InvalidArgumentError(
                "the block mask lists a key block twice in one query block's list: the "
                "backward takes each block once; list it once")
        # Each listed query block at its rank among the listed ones.
        listed = dense.transpose(-1, -2) > 0
        rank = torch.cumsum(listed, dim=-1, dtype=torch.int32) - 1
        query_blocks = listed.shape[-1]
        indices = torch.zeros(*listed.shape[:3], query_blocks + 1, dtype=torch.int32,
                              device=idx.device)
        order = torch.arange(query_blocks, dtype=torch.int32, device=idx.device)
        indices.scatter_(-1, torch.where(listed, rank, query_blocks).long(),
                         order.expand_as(rank))
        out.append(listed.sum(-1, dtype=torch.int32))
        out.append(indices[..., :query_blocks])
    return out


@attention_backward.register_fake
def _attention_backward_fake(grad_o, q, k, v, *args):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v = inputs[:3]
    o, lse = output
    ctx.options = inputs[3:]
    ctx.save_for_backward(q, k, v, o, lse)
    # Gradients flow through O only: the backward kernels take no dLSE.
    ctx.mark_non_differentiable(lse)


def _backward(ctx, grad_o, grad_lse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.flashjit.attention_backward(grad_o, q, k, v, o, lse, *ctx.options)
    # One gradient per input, shaped as the input: a list of Nones for a
    # list of tensors (captures, block_mask), None for anything else (a list
    # of ints, capture_dims, included).
    rest = tuple([None] * len(x)
                 if isinstance(x, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in x)
                 else None for x in ctx.options)
    return (dq, dk, dv) + rest


attention_forward.register_autograd(_backward, setup_context=_setup_context)
