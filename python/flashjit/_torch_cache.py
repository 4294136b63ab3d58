"""Contexts and compiled kernels for the PyTorch layer, shared by all of it.

Why: compiling a kernel costs a JIT compile (or a disk-cache load and a
module load), so the PyTorch layer compiles each (spec, device, config,
length bucket) once per process and keeps it here, with one Context per
CUDA device. The custom ops (flashjit._torch_ops), the eager plans
(flashjit._torch_eager) and varlen_attention all draw on these caches;
clear_cache() releases everything and bumps _generation, so plans that
name a released kernel are dropped by every thread on its next call.
"""

import threading
from typing import Dict, Optional

import torch

from .errors import InvalidArgumentError
from .runtime import Backward, Context, Kernel
from .spec import AttentionSpec


_lock = threading.RLock()
_contexts: Dict[int, Context] = {}
_kernels: Dict[tuple, Kernel] = {}
_backwards: Dict[tuple, Backward] = {}
# (kernel handle, stream) pairs a persistent kernel has launched on.
_primed: set = set()
# Bumped by clear_cache(): every thread's plans made before it are dropped
# (flashjit._torch_eager reads it as _torch_cache._generation).
_generation = 0


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
