"""The eager path: flashjit.attention calls that skip the op's dispatcher.

Why: host time. At short lengths the per-call host work of the custom ops
(flashjit._torch_ops: the dispatcher, the checks, DLPack) outweighs the
kernels, so an eager call that needs no autograd, tracing or dispatch mode
does not go through the op. It looks up a per-thread plan made on the first
call of its shapes and options (the kernel, the C function and the five
DLTensors with their shapes and strides already filled), so each later call
only allocates O and LSE, writes five data pointers and calls the C API.
Where flashjit._fastpath is built (csrc/fastpath.cpp), those steps run in
C++ and anything else is handed back here (bench/python_overhead.py
measures both against the C API). An eager call with gradients goes
through _TrainingAttention, an autograd.Function over the same forward
plans and backward plans made the same way (nine DLTensors;
bench/results/training-nvidia-h100-80gb-hbm3.md). Calls with captured
tensors or a block mask (a _Variant) have plans too, in Python only: their
DLTensors (_Extras) get the call's data pointers as q, k and v do; a
backward whose block mask comes without its transposed lists takes the
op, which transposes them.

A plan is made after the op's own checks (flashjit._torch_args), so a bad
call raises the same error either way. What a plan does not cover (empty
tensors, another current device, a misaligned pointer, a first call inside
a CUDA graph capture) returns None, and the op runs the call and says what
is wrong. The torch hooks are module globals, looked up here on each call:
the CPU tests replace them in this module (test_fastpath_cpu.py).
"""

import ctypes
import math
import os
import threading
from typing import NamedTuple, Optional, Tuple

import torch

from . import _dlpack
from . import _torch_cache as _cache
from . import _torch_ops  # noqa: F401  (registers torch.ops.flashjit.*, the fallback)
from ._torch_args import (_ALIGN, _CAPTURE_DTYPES, _DTYPES, _check_devices, _check_inputs,
                          _gradient_input, _kernel_strides, _pair, _spec_of)
from ._torch_cache import _backwards, _kernels, _primed, _seqlen_bucket, get_backward, get_kernel
from .errors import InvalidArgumentError


# ---------------------------------------------------------------------------
# The eager forward path
# ---------------------------------------------------------------------------

_Tensor = torch.Tensor
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


class _Variant(NamedTuple):
    """A call's options beyond causal, scale and alignment, as the op takes
    them: the window, soft-cap, mods, captured tensors with their declared
    dims, and the block mask (its block size and lists: the forward's two
    or four, then, from a FlexAttention BlockMask, the four transposed)."""
    window: Tuple[int, int] = (-1, -1)
    softcap: Optional[float] = None
    score_mod: Optional[str] = None
    mask_mod: Optional[str] = None
    captures: tuple = ()
    capture_dims: tuple = ()
    sparse_block: Tuple[int, int] = (0, 0)
    lists: tuple = ()

    def key(self) -> tuple:
        """What a plan depends on: the options, and the captures' and lists'
        metadata (their data is the call's)."""
        return (self.window, self.softcap, self.score_mod, self.mask_mod, self.capture_dims,
                self.sparse_block,
                tuple((t.shape, t.stride(), t.dtype, t.get_device()) for t in self.captures),
                tuple((t.shape, t.stride(), t.dtype, t.get_device()) for t in self.lists))

    def op_args(self) -> tuple:
        """The op's arguments from window_left to block_mask."""
        return (self.window[0], self.window[1], self.softcap, self.score_mod, self.mask_mod,
                list(self.captures), list(self.capture_dims), self.sparse_block[0],
                self.sparse_block[1], list(self.lists))


_DENSE = _Variant()


class _Extras:
    """The captured tensors and block-mask lists a plan passes beside its
    five or nine tensors: one DLTensor array for the captures (the C API
    takes them as an array) and one DLTensor per list, of which only the
    data pointers change from call to call."""

    __slots__ = ("array", "lists", "trailing", "_keep")

    def __init__(self, captures, lists, device):
        built = [_device_dltensor(c.shape, c.stride(), _CAPTURE_DTYPES[c.dtype], device)
                 for c in captures]
        self.array = (_dlpack.DLTensor * len(built))(*[b.tensor for b in built]) \
            if built else None
        listed = [_device_dltensor(t.shape, t.stride(), "i32", device) for t in lists]
        self.lists = tuple(b.tensor for b in listed)
        # The C arguments after the scale: the captures (array, count), then
        # with a block mask its four lists (NULL for those not given).
        self.trailing = (self.array, len(built))
        if listed:
            self.trailing += tuple(b.pointer for b in listed) + (None,) * (4 - len(listed))
        self._keep = (built, listed)

    def arguments(self, captures, lists) -> tuple:
        """The trailing C arguments, pointed at this call's tensors."""
        for slot, c in zip(self.array or (), captures):
            slot.data = c.data_ptr()
        for slot, t in zip(self.lists, lists):
            slot.data = t.data_ptr()
        return self.trailing


class _Plan:
    """One call's shapes and options, prepared: the kernel's handle and C
    function, and DLTensors for q, k, v, o and lse (and a variant's
    _Extras) of which only the data pointers change from call to call."""

    __slots__ = ("fn", "lib", "handle", "pointers", "tensors", "device", "torch_device",
                 "lse_shape", "scale", "tile_counter", "native", "extras", "_keep")


def _make_plan(q, k, v, causal, scale, window, softcap, causal_align, score_mod, mask_mod,
               config, variant=None):
    """The plan of a call, after the checks the op would make (so a bad
    call raises the same error either way), its kernel compiled if need
    be; _NO_PLAN where the op's own path is the one to take (empty
    tensors), or None inside a graph capture when the kernel is not
    compiled yet (the op says why that cannot be captured). With
    `variant`, its options replace window, softcap and the mods."""
    if causal_align not in _ALIGN:
        raise InvalidArgumentError(
            f"causal_align {causal_align!r}: expected 'top_left' or 'bottom_right'")
    if variant is None:
        variant = _Variant(_pair("window", window, (-1, -1)),
                           None if softcap is None else float(softcap), score_mod, mask_mod)
    align = _ALIGN[causal_align]
    scale = None if scale is None else float(scale)
    forward_lists = list(variant.lists[:4])
    _check_inputs(q, k, v, scale, align, variant.softcap, variant.score_mod,
                  list(variant.captures), list(variant.capture_dims), *variant.sparse_block,
                  list(variant.lists))
    device = _check_devices(q, k, v, list(variant.captures), list(variant.lists))
    if q.numel() == 0 or k.shape[2] == 0:
        return _NO_PLAN
    spec = _spec_of(q, k, bool(causal), align, *variant.window, variant.softcap,
                    variant.score_mod, variant.mask_mod, list(variant.captures),
                    list(variant.capture_dims), *variant.sparse_block)
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
    plan = _bind_plan(_Plan(), kernel, "flashjit_kernel_forward_block_sparse" if forward_lists
                      else "flashjit_kernel_forward_captures" if variant.captures
                      else "flashjit_kernel_forward", tensors, device)
    plan.extras = (_Extras(variant.captures, forward_lists, device)
                   if variant.captures or forward_lists else None)
    plan.torch_device = q.device
    plan.lse_shape = lse_shape
    plan.scale = math.nan if scale is None else scale
    plan.tile_counter = kernel.takes_tile_counter
    plan.native = None if _native is None or plan.extras is not None else _native.Plan(
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
                  config, variant=None):
    """O and LSE through a plan, or None where the op must run the call.
    `variant` (a _Variant): a call with captured tensors or a block mask,
    whose options replace window, softcap and the mods."""
    plans = getattr(_tls, "plans", None)
    if plans is None or _tls.generation != _cache._generation:
        plans = _tls.plans = {}
        _tls.generation = _cache._generation
    key = None
    if _native is not None and variant is None:
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
                   scale)
            # A variant's own key holds its options in one spelling (the
            # window a pair, never None), so that the eager call and the
            # training forward of the same variant share one plan.
            key += ((window, softcap, causal_align, score_mod, mask_mod, config)
                    if variant is None else (causal_align, config, variant.key()))
        plan = plans.get(key)
    except TypeError:  # an unhashable option (a list as window): the op takes it
        return None
    if plan is None:
        plan = _make_plan(q, k, v, causal, scale, window, softcap, causal_align, score_mod,
                          mask_mod, config, variant)
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
    if plan.extras is None:
        status = plan.fn(plan.handle, p[0], p[1], p[2], p[3], p[4], plan.scale, stream)
    else:
        status = plan.fn(plan.handle, *p, plan.scale,
                         *plan.extras.arguments(variant.captures, variant.lists), stream)
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
                 "scale", "extras", "_keep")


def _make_backward_plan(q, k, v, o, lse, grad_o, grad_strides, causal, align, scale,
                        deterministic, variant):
    """The plan of a backward call, its kernels compiled if need be; None
    where the op's own path is the one to take (empty tensors, or a graph
    capture before the kernels exist: the op says why)."""
    device = _check_devices(q, k, v, list(variant.captures), list(variant.lists))
    if q.numel() == 0 or k.numel() == 0:
        return None
    spec = _spec_of(q, k, causal, align, *variant.window, variant.softcap, variant.score_mod,
                    variant.mask_mod, list(variant.captures), list(variant.capture_dims),
                    *variant.sparse_block)
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
    transposed = list(variant.lists[4:])
    plan = _bind_plan(_BackwardPlan(), backward, "flashjit_backward_run_block_sparse"
                      if transposed else "flashjit_backward_run_captures" if variant.captures
                      else "flashjit_backward_run", built, device)
    plan.extras = (_Extras(variant.captures, transposed, device)
                   if variant.captures or transposed else None)
    plan.workspace_bytes = backward.workspace_bytes(q.shape[0], q.shape[2])
    plan.scale = math.nan if scale is None else float(scale)
    plan._keep = (built, backward)
    return plan


def _fast_backward(q, k, v, o, lse, grad_o, causal, align, scale, variant=_DENSE):
    """dQ, dK, dV through a plan, or None where the op must run the call
    (a block mask without its transposed lists: the op transposes them)."""
    if variant.lists and len(variant.lists) != 8:
        return None
    plans = getattr(_tls, "backward_plans", None)
    if plans is None or getattr(_tls, "backward_generation", None) != _cache._generation:
        plans = _tls.backward_plans = {}
        _tls.backward_generation = _cache._generation
    if _current_device() != q.get_device():
        return None
    try:
        grad_o, grad_strides = _gradient_input("grad_o", grad_o)
    except InvalidArgumentError:
        return None  # the op says what is wrong with dO
    deterministic = torch.are_deterministic_algorithms_enabled()
    key = (q.shape, k.shape, q.stride(), k.stride(), v.stride(), o.stride(), lse.stride(),
           tuple(grad_strides or grad_o.stride()), q.dtype, q.get_device(), causal, align,
           scale, deterministic, variant.key() if variant is not _DENSE else None)
    plan = plans.get(key)
    if plan is None:
        plan = _make_backward_plan(q, k, v, o, lse, grad_o, grad_strides, causal, align,
                                   scale, deterministic, variant)
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
    space = ctypes.c_void_p(workspace.data_ptr())
    stream = ctypes.c_void_p(_raw_stream(plan.device))
    trailing = () if plan.extras is None else plan.extras.arguments(variant.captures,
                                                                      variant.lists[4:])
    status = plan.fn(plan.handle, *p, space, plan.workspace_bytes, plan.scale, *trailing,
                     stream)
    if status:
        plan.lib.check(status)
    return dq, dk, dv


class _TrainingAttention(torch.autograd.Function):
    """Attention with gradients, eagerly: the forward's and the backward's
    plans (no dispatcher, no DLPack per call), the custom ops where a call
    has no plan. `variant` (a _Variant, None for dense or causal) carries
    windows, mods, captured tensors and block masks; they take no
    gradient. attention() takes it where the op's dispatcher has nothing
    to add (no tracing, no modes, no functorch)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, causal_align, config, variant=None):
        variant = variant or _DENSE
        extras = variant.captures or variant.lists
        out = _fast_forward(q, k, v, causal, scale,
                            None if variant.window == (-1, -1) else variant.window,
                            variant.softcap, causal_align, variant.score_mod, variant.mask_mod,
                            config, variant if extras else None)
        scale = None if scale is None else float(scale)
        if out is None:
            out = torch.ops.flashjit.attention_forward(
                q, k, v, scale, bool(causal), _ALIGN[causal_align], *variant.op_args(), config)
        o, lse = out
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.mark_non_differentiable(lse)
        ctx.options = (bool(causal), scale, causal_align, config, variant)
        return o, lse

    @staticmethod
    def backward(ctx, grad_o, grad_lse):
        q, k, v, o, lse = ctx.saved_tensors
        causal, scale, causal_align, config, variant = ctx.options
        grads = None
        if not torch.is_grad_enabled():  # create_graph asks for the op's path
            grads = _fast_backward(q, k, v, o, lse, grad_o, causal, _ALIGN[causal_align],
                                   scale, variant)
        if grads is None:
            grads = torch.ops.flashjit.attention_backward(
                grad_o, q, k, v, o, lse, scale, causal, _ALIGN[causal_align],
                *variant.op_args(), config)
        return grads + (None, None, None, None, None)
