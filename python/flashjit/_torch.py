"""flashjit for PyTorch: attention(), sdpa() and the flashjit:: custom ops.

Why: PyTorch users want one call on CUDA tensors that works eagerly, under
torch.compile and inside CUDA graphs. So the kernel launch lives in a
torch.library custom op (flashjit::attention_forward) with a fake
implementation: torch.compile traces the op from shapes alone, and the real
implementation runs only on real tensors. The op allocates O and LSE itself,
picks the kernel from a cache keyed by the spec and the device (one Context
per device), and launches on the caller's current CUDA stream.

Its autograd formula calls a second op, flashjit::attention_backward, which
runs flashjit's backward kernels (dQ, dK, dV from the saved inputs, O and
LSE; docs/backward.md), so training works eagerly and under torch.compile
(the op's fake implementation gives the gradients' shapes). Gradients flow
through O; the LSE output is not differentiable.

CUDA graphs: compiling a kernel (module load) and the first launch of a
persistent kernel on a stream (the library allocates and zeroes that
stream's tile counter) cannot be captured. The op refuses both inside a
capture with a message saying to run the call once on the capture stream
first, instead of letting the capture fail inside the driver.

Host time: an eager call that needs no autograd, tracing or dispatch mode
does not go through the op's dispatcher. It looks up a per-thread plan made
on the first call of its shapes and options (the kernel, the C function and
the five DLTensors with their shapes and strides already filled), so each
later call only allocates O and LSE, writes five data pointers and calls the
C API. Where flashjit._fastpath is built (csrc/fastpath.cpp), those steps
run in C++ and anything else is handed back here (bench/python_overhead.py
measures both against the C API). An eager call with gradients (dense or
causal) goes through _TrainingAttention, an autograd.Function over the same
forward plans and backward plans made the same way (nine DLTensors): the
ops' per-call host work would otherwise outweigh the kernels at short
lengths (bench/results/training-nvidia-h100-80gb-hbm3.md).
"""

import ctypes
import math
import os
import threading
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from . import _dlpack
from .errors import GraphCaptureError, InvalidArgumentError, UnsupportedError
from .runtime import Backward, Context, Kernel
from .spec import AttentionSpec, Capture, softcap_score_mod


_DTYPES = {torch.float16: "f16", torch.bfloat16: "bf16"}
_CAPTURE_DTYPES = {torch.float32: "f32", torch.int32: "i32"}
_ALIGN = {"top_left": 0, "bottom_right": 1}
_ALIGN_NAMES = {0: "top_left", 1: "bottom_right"}


# ---------------------------------------------------------------------------
# Contexts and the kernel cache
# ---------------------------------------------------------------------------

_lock = threading.RLock()
_contexts: Dict[int, Context] = {}
_kernels: Dict[tuple, Kernel] = {}
_backwards: Dict[tuple, Backward] = {}
# (kernel handle, stream) pairs a persistent kernel has launched on.
_primed: set = set()


def _device_index(device) -> int:
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "cuda":
        raise InvalidArgumentError(f"flashjit runs on CUDA devices, not {device}")
    return device.index if device.index is not None else torch.cuda.current_device()


def context(device=None) -> Context:
    """The shared Context of a CUDA device (created on first use; the
    library's default kernel cache directory)."""
    index = _device_index(device)
    ctx = _contexts.get(index)
    if ctx is None:
        with _lock:
            ctx = _contexts.get(index)
            if ctx is None:
                ctx = _contexts[index] = Context(index)
    return ctx


def clear_cache() -> None:
    """Releases every cached kernel and context (the disk cache stays)."""
    global _generation
    with _lock:
        _generation += 1  # every thread's plans name released kernels
        for kernel in _kernels.values():
            kernel.release()
        _kernels.clear()
        for backward in _backwards.values():
            backward.release()
        _backwards.clear()
        _primed.clear()
        for ctx in _contexts.values():
            ctx.close()
        _contexts.clear()


def _seqlen_bucket(n: int) -> int:
    """The power of two at or above n: the length hint kernels are cached by
    (the tuning database keys configs by length ranges)."""
    return 1 << max(0, int(n) - 1).bit_length()


def get_kernel(spec: AttentionSpec, device=None, *, config: Optional[str] = None,
               seqlen: Optional[int] = None) -> Kernel:
    """The cached kernel for `spec` on `device` (compiled on first use)."""
    index = _device_index(device)
    key = (spec, index, config, _seqlen_bucket(seqlen) if seqlen else 0)
    kernel = _kernels.get(key)
    if kernel is None:
        with _lock:
            kernel = _kernels.get(key)
            if kernel is None:
                kernel = context(index).compile(spec, config=config, seqlen=key[3] or None)
                _kernels[key] = kernel
    return kernel


# ---------------------------------------------------------------------------
# Argument checks
# ---------------------------------------------------------------------------

def _shape(t) -> list:
    return list(t.shape)


def _check_inputs(q, k, v, scale, causal_align, softcap, score_mod, captures, capture_dims,
                  sparse_block_m, sparse_block_n, block_mask) -> None:
    """Checks that read only metadata, so they run on fake tensors too (the
    error then surfaces while torch.compile traces)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise InvalidArgumentError(
                f"{name} has {t.dim()} dimensions (shape {_shape(t)}): flashjit takes "
                "[batch, heads, seqlen, head_dim] tensors (flashjit.attention(..., "
                "layout='bshd') takes [batch, seqlen, heads, head_dim])")
        if t.dtype not in _DTYPES:
            raise InvalidArgumentError(
                f"{name} is {t.dtype}: flashjit kernels take torch.float16 or torch.bfloat16; "
                f"convert with {name}.to(torch.bfloat16)")
    if not (q.dtype == k.dtype == v.dtype):
        raise InvalidArgumentError(
            f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if k.shape[3] != q.shape[3] or v.shape[3] != q.shape[3]:
        raise InvalidArgumentError(
            f"q, k and v must have the same head_dim (last dimension), got {q.shape[3]}, "
            f"{k.shape[3]} and {v.shape[3]}")
    if k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0]:
        raise InvalidArgumentError(
            f"q, k and v must have the same batch size, got {q.shape[0]}, {k.shape[0]} and "
            f"{v.shape[0]}")
    if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        raise InvalidArgumentError(
            f"k and v must have the same heads and seqlen: k is {_shape(k)}, v is {_shape(v)}")
    if k.shape[1] == 0 and q.shape[1] != 0 or k.shape[1] != 0 and q.shape[1] % k.shape[1] != 0:
        raise InvalidArgumentError(
            f"q has {q.shape[1]} heads, which is not a multiple of k/v's {k.shape[1]}: "
            "grouped-query attention needs heads = kv_heads x group size")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise InvalidArgumentError(f"scale must be a positive finite number or None, got {scale}")
    if causal_align not in _ALIGN_NAMES:
        raise InvalidArgumentError(f"causal_align code {causal_align}: expected 0 or 1")
    if softcap is not None:
        if score_mod is not None:
            raise InvalidArgumentError(
                "softcap and score_mod both given: softcap is a score_mod; write the cap into "
                "your score_mod instead")
        if not (math.isfinite(softcap) and softcap > 0):
            raise InvalidArgumentError(f"softcap must be a positive finite number, got {softcap}")
    if sum(c.dim() for c in captures) != len(capture_dims):
        raise InvalidArgumentError(
            f"capture_dims lists {len(capture_dims)} dims for captured tensors of ranks "
            f"{[c.dim() for c in captures]}")
    for i, c in enumerate(captures):
        if c.dtype not in _CAPTURE_DTYPES:
            raise InvalidArgumentError(
                f"captures[{i}] is {c.dtype}: flashjit's mods read torch.float32 or torch.int32 "
                "tensors; convert it with .to(torch.float32) or .to(torch.int32)")
    if (sparse_block_m == 0) != (sparse_block_n == 0):
        raise InvalidArgumentError(
            f"sparse block ({sparse_block_m}, {sparse_block_n}): give both sizes, or neither")
    if block_mask and len(block_mask) not in (2, 4, 8):
        raise InvalidArgumentError(
            f"block_mask has {len(block_mask)} tensors: give (kv_num_blocks, kv_indices) or "
            "those and (full_kv_num_blocks, full_kv_indices), then optionally the four "
            "transposed lists (q_num_blocks, q_indices, full_q_num_blocks, full_q_indices)")
    if bool(block_mask) != (sparse_block_m != 0):
        raise InvalidArgumentError(
            "a block mask needs its block size and a block size needs a block mask: pass "
            "block_mask with sparse_block=(m, n), or a FlexAttention BlockMask")
    for i, t in enumerate(block_mask):
        if t.dtype != torch.int32:
            raise InvalidArgumentError(
                f"block mask tensor {i} is {t.dtype}: block masks are torch.int32 (as "
                "FlexAttention's BlockMask)")


def _check_devices(q, k, v, captures, block_mask) -> int:
    if q.device.type != "cuda":
        raise InvalidArgumentError(
            f"q is on {q.device}: flashjit runs on CUDA tensors; move q, k and v with .cuda()")
    named = [("k", k), ("v", v)] + [(f"captures[{i}]", c) for i, c in enumerate(captures)] \
        + [(f"block mask tensor {i}", t) for i, t in enumerate(block_mask)]
    for name, t in named:
        if t.device != q.device:
            raise InvalidArgumentError(
                f"{name} is on {t.device} but q is on {q.device}: put every tensor on q's device")
    return q.device.index if q.device.index is not None else torch.cuda.current_device()


def _kernel_strides(name: str, t) -> Optional[List[int]]:
    """Checks the memory layout the library takes and returns the strides to
    hand it (None: the tensor's own). A dimension of extent 1 is never
    stepped, so where PyTorch left an unusable stride on one (any value is
    legal there), a valid one is put in its place."""
    strides = list(t.stride())
    shape = list(t.shape)
    if strides[3] != 1 and shape[3] != 1:
        raise InvalidArgumentError(
            f"{name} has strides {strides}: its last dimension (head_dim) must be contiguous "
            f"(stride 1); call {name}.contiguous()")
    changed = strides[3] != 1
    strides[3] = 1
    for d in range(3):
        if shape[d] == 1 and (strides[d] <= 0 or strides[d] % 8 != 0):
            span = max([shape[e] * abs(strides[e]) for e in range(4) if e != d] + [8])
            strides[d] = -(-span // 8) * 8
            changed = True
    if any(s < 0 or s % 8 != 0 for s in strides[:3]):
        raise InvalidArgumentError(
            f"{name} has strides {list(t.stride())}: flashjit needs the batch, head and seqlen "
            "strides to be non-negative multiples of 8 elements (16-byte aligned rows); call "
            f"{name}.contiguous()")
    if t.data_ptr() % 16 != 0:
        raise InvalidArgumentError(
            f"{name}'s data pointer {t.data_ptr():#x} is not 16-byte aligned (a slice at an odd "
            f"offset?): call {name}.contiguous()")
    return strides if changed else None


# ---------------------------------------------------------------------------
# The custom ops
# ---------------------------------------------------------------------------

def _spec_of(q, k, causal, causal_align, window_left, window_right, softcap, score_mod,
             mask_mod, captures, capture_dims, sparse_block_m, sparse_block_n) -> AttentionSpec:
    dims, at = [], 0
    for c in captures:
        dims.append(tuple(capture_dims[at:at + c.dim()]))
        at += c.dim()
    declared = tuple(Capture(_CAPTURE_DTYPES[c.dtype], d) for c, d in zip(captures, dims))
    return AttentionSpec(
        head_dim=q.shape[3], dtype=_DTYPES[q.dtype], causal=causal,
        num_heads=q.shape[1], num_kv_heads=k.shape[1], causal_align=_ALIGN_NAMES[causal_align],
        window=(window_left, window_right),
        score_mod=softcap_score_mod(softcap, declared) if softcap is not None else score_mod,
        mask_mod=mask_mod, captures=declared, sparse_block=(sparse_block_m, sparse_block_n))


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


def get_backward(spec: AttentionSpec, device=None, *, deterministic: bool = False) -> Backward:
    """The cached backward kernels for `spec` on `device` (compiled on
    first use)."""
    index = _device_index(device)
    key = (spec, index, bool(deterministic))
    backward = _backwards.get(key)
    if backward is None:
        with _lock:
            backward = _backwards.get(key)
            if backward is None:
                backward = context(index).compile_backward(spec, deterministic=deterministic)
                _backwards[key] = backward
    return backward


def _gradient_input(name: str, t: torch.Tensor) -> Tuple[torch.Tensor, Optional[List[int]]]:
    """dO as the kernel takes it: its own layout where that one works (an
    expanded gradient, stride 0, is read as it is), else a contiguous copy."""
    try:
        return t, _kernel_strides(name, t)
    except InvalidArgumentError:
        t = t.contiguous()
        return t, _kernel_strides(name, t)


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


# ---------------------------------------------------------------------------
# The eager fast path
# ---------------------------------------------------------------------------

_Tensor = torch.Tensor
_generation = 0
_tls = threading.local()
# Plans one thread keeps; past this many (shapes that keep changing, as a
# growing KV cache gives) they are dropped and made again as calls come.
_MAX_PLANS = 64
_NO_PLAN = object()


def _torch_hook(name: str, fallback):
    return getattr(torch._C, name, None) or fallback


# Each of these, where this PyTorch lacks it, makes every call take the op.
_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
_dispatch_modes = _torch_hook("_len_torch_dispatch_stack", None)
_function_modes = _torch_hook("_is_torch_function_mode_enabled", None)
_functorch_active = _torch_hook("_are_functorch_transforms_active", lambda: False)
_grad_enabled = torch.is_grad_enabled
_current_device = _torch_hook("_cuda_getDevice", torch.cuda.current_device)
_raw_stream = _torch_hook("_cuda_getCurrentRawStream",
                          lambda device: torch.cuda.current_stream(device).cuda_stream)
_stream_capturing = _torch_hook("_cuda_isCurrentStreamCapturing",
                                torch.cuda.is_current_stream_capturing)
_FAST_PATH = None not in (_is_compiling, _dispatch_modes, _function_modes)


def _load_native():
    """flashjit._fastpath (csrc/fastpath.cpp), which runs a call whose plan
    exists in C++, or None: not built, built against another PyTorch, or
    FLASHJIT_NO_EXTENSION set, or built from other sources than this file
    expects (its INTERFACE)."""
    if os.environ.get("FLASHJIT_NO_EXTENSION", "") not in ("", "0"):
        return None
    try:
        from . import _fastpath
    except (ImportError, OSError):
        return None
    return _fastpath if getattr(_fastpath, "INTERFACE", None) == 2 else None


_native = _load_native()


def _plain(q, k, v) -> bool:
    """Plain tensors and no autograd graph to record (flashjit._fastpath
    checks the same in C++)."""
    return (type(q) is _Tensor and type(k) is _Tensor and type(v) is _Tensor
            and not (_grad_enabled() and (q.requires_grad or k.requires_grad
                                          or v.requires_grad)))


def _device_dltensor(shape, strides, dtype_name: str, device: int):
    """A DLTensor on CUDA device `device` with no data pointer yet (a plan
    writes it on each call)."""
    return _dlpack._build(0, list(shape), list(strides), *_dlpack.DTYPES[dtype_name],
                          _dlpack.KDL_CUDA, device, 0, ())


def _kernel_dltensor(name: str, t, device: int):
    """_device_dltensor of `t`'s shape and dtype, with the strides the
    library takes for it (_kernel_strides)."""
    return _device_dltensor(t.shape, _kernel_strides(name, t) or t.stride(), _DTYPES[t.dtype],
                            device)


def _bind_plan(plan, owner, entry, dltensors, device):
    """`plan` (a _Plan or _BackwardPlan) bound to `owner`'s library handle
    and its C entry point `entry`, with the DLTensors it passes (their
    data pointers are rewritten per call) on `device`."""
    plan.lib = owner._lib
    plan.fn = owner._lib.fn(entry)
    plan.handle = owner._live()
    plan.pointers = tuple(t.pointer for t in dltensors)
    plan.tensors = tuple(t.tensor for t in dltensors)
    plan.device = device
    return plan


class _Plan:
    """One call's shapes and options, prepared: the kernel's handle and C
    function, and DLTensors for q, k, v, o and lse of which only the data
    pointers change from call to call."""

    __slots__ = ("fn", "lib", "handle", "pointers", "tensors", "device", "torch_device",
                 "lse_shape", "scale", "tile_counter", "native", "_keep")


def _make_plan(q, k, v, causal, scale, window, softcap, causal_align, score_mod, mask_mod,
               config):
    """The plan of a call, after the checks the op would make (so a bad
    call raises the same error either way), its kernel compiled if need
    be; _NO_PLAN where the op's own path is the one to take (empty
    tensors), or None inside a graph capture when the kernel is not
    compiled yet (the op says why that cannot be captured)."""
    if causal_align not in _ALIGN:
        raise InvalidArgumentError(
            f"causal_align {causal_align!r}: expected 'top_left' or 'bottom_right'")
    window_left, window_right = _pair("window", window, (-1, -1))
    align = _ALIGN[causal_align]
    scale = None if scale is None else float(scale)
    softcap = None if softcap is None else float(softcap)
    _check_inputs(q, k, v, scale, align, softcap, score_mod, [], [], 0, 0, [])
    device = _check_devices(q, k, v, [], [])
    if q.numel() == 0 or k.shape[2] == 0:
        return _NO_PLAN
    spec = _spec_of(q, k, bool(causal), align, window_left, window_right, softcap, score_mod,
                    mask_mod, [], [], 0, 0)
    bucket = _seqlen_bucket(max(q.shape[2], k.shape[2]))
    kernel = _kernels.get((spec, device, config, bucket))
    if kernel is None:
        if _stream_capturing():
            return None
        with torch.cuda.device(device):
            kernel = get_kernel(spec, device, config=config, seqlen=bucket)
    o = torch.empty_like(q)
    lse_shape = (q.shape[0], q.shape[1], q.shape[2])
    tensors = [_kernel_dltensor(name, t, device)
               for name, t in (("q", q), ("k", k), ("v", v), ("o", o))]
    b, h, sq = lse_shape
    tensors.append(_device_dltensor(lse_shape, (h * sq, sq, 1), "f32", device))
    plan = _bind_plan(_Plan(), kernel, "flashjit_kernel_forward", tensors, device)
    plan.torch_device = q.device
    plan.lse_shape = lse_shape
    plan.scale = math.nan if scale is None else scale
    plan.tile_counter = kernel.takes_tile_counter
    plan.native = None if _native is None else _native.Plan(
        ctypes.cast(plan.fn, ctypes.c_void_p).value, plan.handle.value,
        tuple(ctypes.addressof(t) for t in plan.tensors), plan.scale, lse_shape,
        tuple(o.stride()), device, plan.tile_counter, plan.lib.check)
    plan._keep = (tensors, kernel)
    return plan


def _keep_plan(plans: dict, key, plan) -> None:
    """Keeps a new plan, after dropping all of a thread's plans once it
    holds _MAX_PLANS (shapes that keep changing)."""
    if len(plans) >= _MAX_PLANS:
        plans.clear()
    plans[key] = plan


def _fast_forward(q, k, v, causal, scale, window, softcap, causal_align, score_mod, mask_mod,
                  config):
    """O and LSE through a plan, or None where the op must run the call."""
    plans = getattr(_tls, "plans", None)
    if plans is None or _tls.generation != _generation:
        plans = _tls.plans = {}
        _tls.generation = _generation
    key = None
    if _native is not None:
        # The plain case entirely in C++; the rest (no plan yet, another
        # device, misaligned, a stream to prime) below, with the same key.
        options = (causal, scale, window, softcap, causal_align, score_mod, mask_mod, config)
        out = _native.forward(plans, q, k, v, options, _current_device, _raw_stream, _primed)
        if out is not None:
            return out
        if not _plain(q, k, v):
            return None
        key = _native.key(q, k, v, options)
    elif not _plain(q, k, v):
        return None
    try:
        if key is None:
            key = (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype,
                   k.dtype, v.dtype, q.get_device(), k.get_device(), v.get_device(), causal,
                   scale, window, softcap, causal_align, score_mod, mask_mod, config)
        plan = plans.get(key)
    except TypeError:  # an unhashable option (a list as window): the op takes it
        return None
    if plan is None:
        plan = _make_plan(q, k, v, causal, scale, window, softcap, causal_align, score_mod,
                          mask_mod, config)
        if plan is None:
            return None
        _keep_plan(plans, key, plan)
    if plan is _NO_PLAN or _current_device() != plan.device:
        return None
    q_ptr, k_ptr, v_ptr = q.data_ptr(), k.data_ptr(), v.data_ptr()
    if (q_ptr | k_ptr | v_ptr) & 15:  # the op says which tensor is misaligned
        return None
    stream = _raw_stream(plan.device)
    pair = None
    if plan.tile_counter:
        pair = (plan.handle.value, stream)
        if pair in _primed:
            pair = None
        elif _stream_capturing():  # the op explains why this cannot be captured
            return None
    o = torch.empty_like(q)
    lse = torch.empty(plan.lse_shape, dtype=torch.float32, device=plan.torch_device)
    t = plan.tensors
    t[0].data, t[1].data, t[2].data = q_ptr, k_ptr, v_ptr
    t[3].data, t[4].data = o.data_ptr(), lse.data_ptr()
    p = plan.pointers
    status = plan.fn(plan.handle, p[0], p[1], p[2], p[3], p[4], plan.scale, stream)
    if status:
        plan.lib.check(status)
    if pair is not None:
        _primed.add(pair)
    return o, lse


# ---------------------------------------------------------------------------
# The eager training path
# ---------------------------------------------------------------------------

class _BackwardPlan:
    """One backward call's shapes and options, prepared as _Plan is for the
    forward: the backward kernels' handle and C function, and DLTensors for
    q, k, v, o, lse, dO, dq, dk and dv of which only the data pointers
    change from call to call."""

    __slots__ = ("fn", "lib", "handle", "pointers", "tensors", "device", "workspace_bytes",
                 "scale", "_keep")


def _make_backward_plan(q, k, v, o, lse, grad_o, grad_strides, causal, align, scale,
                        deterministic):
    """The plan of a backward call, its kernels compiled if need be; None
    where the op's own path is the one to take (empty tensors, or a graph
    capture before the kernels exist: the op says why)."""
    device = _check_devices(q, k, v, [], [])
    if q.numel() == 0 or k.numel() == 0:
        return None
    spec = _spec_of(q, k, causal, align, -1, -1, None, None, None, [], [], 0, 0)
    backward = _backwards.get((spec, device, deterministic))
    if backward is None:
        if _stream_capturing():
            return None
        with torch.cuda.device(device):
            backward = get_backward(spec, device, deterministic=deterministic)
    # The gradients as _fast_backward allocates them (empty_like keeps a
    # dense input's strides, and makes another's contiguous: the same each
    # call for the same input strides).
    dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
    built = [_kernel_dltensor(name, t, device)
             for name, t in (("q", q), ("k", k), ("v", v), ("o", o))]
    built.append(_device_dltensor(lse.shape, lse.stride(), "f32", device))
    built.append(_device_dltensor(grad_o.shape, grad_strides or grad_o.stride(),
                                  _DTYPES[grad_o.dtype], device))
    built += [_kernel_dltensor(name, t, device)
              for name, t in (("dq", dq), ("dk", dk), ("dv", dv))]
    plan = _bind_plan(_BackwardPlan(), backward, "flashjit_backward_run", built, device)
    plan.workspace_bytes = backward.workspace_bytes(q.shape[0], q.shape[2])
    plan.scale = math.nan if scale is None else float(scale)
    plan._keep = (built, backward)
    return plan


def _fast_backward(q, k, v, o, lse, grad_o, causal, align, scale):
    """dQ, dK, dV through a plan, or None where the op must run the call."""
    plans = getattr(_tls, "backward_plans", None)
    if plans is None or getattr(_tls, "backward_generation", None) != _generation:
        plans = _tls.backward_plans = {}
        _tls.backward_generation = _generation
    if _current_device() != q.get_device():
        return None
    try:
        grad_o, grad_strides = _gradient_input("grad_o", grad_o)
    except InvalidArgumentError:
        return None  # the op says what is wrong with dO
    deterministic = torch.are_deterministic_algorithms_enabled()
    key = (q.shape, k.shape, q.stride(), k.stride(), v.stride(), o.stride(), lse.stride(),
           tuple(grad_strides or grad_o.stride()), q.dtype, q.get_device(), causal, align,
           scale, deterministic)
    plan = plans.get(key)
    if plan is None:
        plan = _make_backward_plan(q, k, v, o, lse, grad_o, grad_strides, causal, align,
                                   scale, deterministic)
        if plan is None:
            return None
        _keep_plan(plans, key, plan)
    if (q.data_ptr() | k.data_ptr() | v.data_ptr() | o.data_ptr() | grad_o.data_ptr()) & 15:
        return None  # the op says which tensor is misaligned
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    workspace = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device=q.device)
    t = plan.tensors
    for i, x in enumerate((q, k, v, o, lse, grad_o, dq, dk, dv)):
        t[i].data = x.data_ptr()
    p = plan.pointers
    status = plan.fn(plan.handle, *p, ctypes.c_void_p(workspace.data_ptr()),
                     plan.workspace_bytes, plan.scale,
                     ctypes.c_void_p(_raw_stream(plan.device)))
    if status:
        plan.lib.check(status)
    return dq, dk, dv


class _TrainingAttention(torch.autograd.Function):
    """Dense or causal attention with gradients, eagerly: the forward's and
    the backward's plans (no dispatcher, no DLPack per call), the custom ops
    where a call has no plan. attention() takes it where the op's
    dispatcher has nothing to add (no tracing, no modes, no functorch)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, causal_align, config):
        out = _fast_forward(q, k, v, causal, scale, None, None, causal_align, None, None,
                            config)
        if out is None:
            out = torch.ops.flashjit.attention_forward(
                q, k, v, None if scale is None else float(scale), bool(causal),
                _ALIGN[causal_align], -1, -1, None, None, None, [], [], 0, 0, [], config)
        o, lse = out
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.mark_non_differentiable(lse)
        ctx.options = (bool(causal), None if scale is None else float(scale), causal_align,
                       config)
        return o, lse

    @staticmethod
    def backward(ctx, grad_o, grad_lse):
        q, k, v, o, lse = ctx.saved_tensors
        causal, scale, causal_align, config = ctx.options
        grads = None
        if not torch.is_grad_enabled():  # create_graph asks for the op's path
            grads = _fast_backward(q, k, v, o, lse, grad_o, causal, _ALIGN[causal_align],
                                   scale)
        if grads is None:
            grads = torch.ops.flashjit.attention_backward(
                grad_o, q, k, v, o, lse, scale, causal, _ALIGN[causal_align], -1, -1, None,
                None, None, [], [], 0, 0, [], config)
        return grads + (None, None, None, None)


# ---------------------------------------------------------------------------
# The Python API
# ---------------------------------------------------------------------------

def _as_tensor(name: str, x):
    if isinstance(x, torch.Tensor):
        return x
    if hasattr(x, "__dlpack__"):
        return torch.from_dlpack(x)
    raise TypeError(f"{name} must be a torch.Tensor or an array with __dlpack__, got "
                    f"{type(x).__name__}")


def _pair(name: str, value, default: Tuple[int, int]) -> Tuple[int, int]:
    if value is None:
        return default
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise InvalidArgumentError(f"{name} must be a pair of ints, got {value!r}")
    return int(value[0]), int(value[1])


def _block_mask_args(block_mask, sparse_block) -> Tuple[int, int, List[torch.Tensor]]:
    if block_mask is None:
        if sparse_block is not None:
            raise InvalidArgumentError("sparse_block given without block_mask")
        return 0, 0, []
    if hasattr(block_mask, "kv_num_blocks") and hasattr(block_mask, "kv_indices"):
        # FlexAttention's BlockMask: its block size and its four lists.
        size = getattr(block_mask, "BLOCK_SIZE", None)
        if sparse_block is None:
            if size is None:
                raise InvalidArgumentError("the block mask has no BLOCK_SIZE: pass sparse_block")
            sparse_block = (size, size) if isinstance(size, int) else tuple(size)
        lists = [block_mask.kv_num_blocks, block_mask.kv_indices]
        full = getattr(block_mask, "full_kv_num_blocks", None)
        if full is not None:
            lists += [full, block_mask.full_kv_indices]
            # Its transposed lists too, for the backward (which otherwise
            # transposes the forward's on the GPU at each call).
            transposed = [getattr(block_mask, name, None) for name in (
                "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices")]
            if all(t is not None for t in transposed):
                lists += transposed
    else:
        lists = list(block_mask)
        if sparse_block is None:
            raise InvalidArgumentError(
                "block_mask given as tensors needs sparse_block=(m, n), its block size")
    m, n = _pair("sparse_block", sparse_block, (0, 0))
    return m, n, lists


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
    if (_FAST_PATH and not captures and block_mask is None and layout == "bhsd"
            and not _is_compiling() and not _dispatch_modes() and not _function_modes()
            and not _functorch_active()):
        out = _fast_forward(q, k, v, causal, scale, window, softcap, causal_align, score_mod,
                            mask_mod, config)
        if out is not None:
            return out if return_lse else out[0]
        # Training, dense or causal: the plans through an autograd.Function.
        if (window is None and softcap is None and score_mod is None and mask_mod is None
                and causal_align in _ALIGN and type(q) is _Tensor and type(k) is _Tensor
                and type(v) is _Tensor and _grad_enabled()
                and (q.requires_grad or k.requires_grad or v.requires_grad)):
            o, lse = _TrainingAttention.apply(q, k, v, bool(causal), scale, causal_align,
                                              config)
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
    o, lse = torch.ops.flashjit.attention_forward(
        q, k, v, None if scale is None else float(scale), bool(causal), _ALIGN[causal_align],
        window_left, window_right, None if softcap is None else float(softcap), score_mod,
        mask_mod, captures, dims, sparse_m, sparse_n, lists, config)
    if layout == "bshd":
        o = o.transpose(1, 2)
    return (o, lse) if return_lse else o


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
