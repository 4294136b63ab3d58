"""flashjit: JIT-generated FlashAttention kernels, from Python.

Why: one package for two audiences. PyTorch users call
flashjit.attention(q, k, v, causal=True) (or flashjit.sdpa, with SDPA's
signature) and get a custom op that works eagerly, under torch.compile and
in CUDA graphs; Hugging Face users call
flashjit.integrations.register_transformers(). Everyone else uses the
framework-free layer (AttentionSpec, Context, Kernel) on any DLPack tensors.

Importing this package loads neither torch nor libflashjit.so: torch is
imported when attention/sdpa are first touched, and the library on the first
call that needs it (see flashjit._library for where it is looked for).
"""

from .errors import (CompileError, DriverError, FlashjitError, GraphCaptureError,
                     InternalError, InvalidArgumentError, LaunchError, LibraryNotFoundError,
                     NoDeviceError, UnsupportedError)
from .runtime import Backward, Context, Kernel, Version, library_path, version
from .spec import AttentionSpec, Capture, softcap_score_mod
from ._dlpack import dltensor

__version__ = "0.4.0"

# Names served by flashjit._torch, which imports torch.
_TORCH_NAMES = ("attention", "sdpa", "attention_forward", "attention_backward", "context",
                "get_kernel", "get_backward", "clear_cache")

__all__ = [
    "AttentionSpec", "Backward", "Capture", "CompileError", "Context", "DriverError", "FlashjitError",
    "GraphCaptureError",
    "InternalError", "InvalidArgumentError", "Kernel", "LaunchError", "LibraryNotFoundError",
    "NoDeviceError", "UnsupportedError", "Version", "dltensor", "library_path",
    "softcap_score_mod", "version", "varlen_attention", *_TORCH_NAMES,
]


def __getattr__(name):
    if name == "integrations":
        import importlib
        return importlib.import_module(".integrations", __name__)
    if name == "varlen_attention":
        from . import _varlen
        globals()[name] = _varlen.varlen_attention
        return _varlen.varlen_attention
    if name in _TORCH_NAMES:
        from . import _torch
        value = getattr(_torch, name)
        globals()[name] = value  # later lookups are plain attribute reads
        return value
    raise AttributeError(f"module 'flashjit' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_TORCH_NAMES) | {"integrations", "varlen_attention"})
