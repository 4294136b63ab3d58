"""Context and Kernel: the C API's two handles as Python objects.

Why: these are the framework-free layer. They take any DLPack tensors
(torch, CuPy, JAX, NumPy, or hand-built DLTensors), never import torch, and
work without a GPU as far as the library does (a context compiles PTX; a
forward then reports NoDeviceError). Handles are released by close() or when
collected. Every call's status goes through Library.check, so a failure is a
FlashjitError subclass carrying the library's status name and message.
"""

import ctypes
import math
from typing import Any, NamedTuple, Optional, Sequence, Tuple

from . import _dlpack
from ._library import library
from .errors import InvalidArgumentError
from .spec import AttentionSpec, _int


# Template families whose kernels take tiles from a per-stream counter
# (runtime/lib/Kernel.cpp, Kernel::TileCounters).
TILE_COUNTER_FAMILIES = frozenset({"wgmma_persistent", "wgmma_cluster"})


class Version(NamedTuple):
    major: int
    minor: int
    patch: int
    api_version: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch} (C API {self.api_version})"


def version() -> Version:
    """The loaded library's version and the C API version it implements."""
    lib = library()
    return Version(*lib.version, lib.api_version)


def library_path() -> str:
    """The file of the loaded libflashjit.so."""
    return library().path


def _stream_handle(stream: Any) -> Optional[int]:
    """A CUstream as an int (None: the legacy default stream). Takes an int,
    None, or a stream object with .cuda_stream (torch) or .ptr (CuPy)."""
    if stream is None:
        return None
    for attr in ("cuda_stream", "ptr"):
        if hasattr(stream, attr):
            stream = getattr(stream, attr)
            break
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"stream must be a CUstream handle (int), a torch.cuda.Stream or "
                        f"None, got {type(stream).__name__}")
    return stream or None


class Context:
    """A flashjit context on one CUDA device: it compiles and caches
    kernels (in memory and in the disk cache).

    device: the CUDA ordinal. cache_dir: None for the library's default
    ($FLASHJIT_CACHE_DIR, else ~/.cache/flashjit), "" for memory only.
    chip: None for the device's own (sm_90a where there is no GPU), or a
    name such as "sm_80".
    """

    def __init__(self, device: int = 0, *, cache_dir: Optional[str] = None,
                 chip: Optional[str] = None):
        self._handle = None
        lib = library()
        if isinstance(device, bool) or not isinstance(device, int):
            raise InvalidArgumentError(f"device must be a CUDA ordinal (int), got {device!r}")
        handle = ctypes.c_void_p()
        lib.check(lib.fn("flashjit_context_create")(
            device,
            None if cache_dir is None else str(cache_dir).encode(),
            None if chip is None else str(chip).encode(),
            ctypes.byref(handle)))
        self._lib = lib
        self._handle = handle
        self.device = device

    def _live(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise InvalidArgumentError("this Context was closed")
        return self._handle

    @property
    def chip(self) -> str:
        """The chip kernels are compiled for, e.g. "sm_90a"."""
        out = ctypes.c_char_p()
        self._lib.check(self._lib.fn("flashjit_context_chip")(self._live(), ctypes.byref(out)))
        return out.value.decode()

    @property
    def has_device(self) -> bool:
        """Whether a GPU was opened (else kernels compile but cannot run)."""
        return self._device_state()[0]

    @property
    def device_error(self) -> str:
        """Why no GPU was opened ("" when one was)."""
        return self._device_state()[1]

    def _device_state(self):
        has = ctypes.c_int32()
        reason = ctypes.c_char_p()
        self._lib.check(self._lib.fn("flashjit_context_device")(
            self._live(), ctypes.byref(has), ctypes.byref(reason)))
        return bool(has.value), (reason.value or b"").decode("utf-8", "replace")

    def compile(self, spec: AttentionSpec, *, config: Optional[str] = None,
                seqlen: Optional[int] = None) -> "Kernel":
        """The kernel for `spec` (from memory, the disk cache, or compiled
        now). config: None for flashjit's choice, a family ("mma_sync") or a
        whole tile config ("mma_sync:m128:n48:s1:w4"). seqlen: the length
        the kernel will mostly run at, which picks the tuning database's
        bucket (the kernel serves every length)."""
        if not isinstance(spec, AttentionSpec):
            raise TypeError(f"spec must be a flashjit.AttentionSpec, got {type(spec).__name__}")
        if config is not None and not isinstance(config, str):
            raise TypeError(f"config must be a str or None, got {type(config).__name__}")
        c_spec = spec.to_c()
        out = ctypes.c_void_p()
        c_config = config.encode() if config else None
        if seqlen is not None and seqlen != 0:
            if isinstance(seqlen, bool) or not isinstance(seqlen, int):
                raise InvalidArgumentError(f"seqlen must be an int, got {seqlen!r}")
            fn = self._lib.fn("flashjit_kernel_compile_for_seqlen")
            status = fn(self._live(), ctypes.byref(c_spec), c_config, seqlen, ctypes.byref(out))
        elif c_config is not None:
            fn = self._lib.fn("flashjit_kernel_compile_config")
            status = fn(self._live(), ctypes.byref(c_spec), c_config, ctypes.byref(out))
        else:
            fn = self._lib.fn("flashjit_kernel_compile")
            status = fn(self._live(), ctypes.byref(c_spec), ctypes.byref(out))
        self._lib.check(status)
        return Kernel(self._lib, out, spec, self.device)

    def compile_backward(self, spec: AttentionSpec, *, config: Optional[str] = None,
                         deterministic: bool = False,
                         seqlen: Optional[int] = None) -> "Backward":
        """The backward kernels of `spec` (dQ, dK, dV; docs/backward.md),
        compiled or taken from the cache. config: None for the default, or
        a tile config of family wgmma_bwd or mma_sync_bwd. deterministic:
        dq, dk and dv bitwise equal run to run, at a measured cost in
        time (wgmma_bwd_det or mma_sync_bwd_det kernels). seqlen: without
        a config, the sequence length whose tuning-database bucket gives
        the config (`flashjit autotune --backward`; None: 2048; C API 9).
        A spec the backward does not support (varlen off sm_90a or at
        head dims other than 64 and 128, or deterministic; block masks
        with deterministic=True) raises UnsupportedError saying which
        part."""
        if not isinstance(spec, AttentionSpec):
            raise TypeError(f"spec must be a flashjit.AttentionSpec, got {type(spec).__name__}")
        if config is not None and not isinstance(config, str):
            raise TypeError(f"config must be a str or None, got {type(config).__name__}")
        if seqlen is not None and (not isinstance(seqlen, int) or isinstance(seqlen, bool)
                                   or seqlen < 1):
            raise ValueError(f"seqlen must be a positive int or None, got {seqlen!r}")
        c_spec = spec.to_c()
        options = _BackwardOptions(ctypes.sizeof(_BackwardOptions),
                                   config.encode() if config else None, int(bool(deterministic)),
                                   seqlen or 0)
        out = ctypes.c_void_p()
        self._lib.check(self._lib.fn("flashjit_backward_compile_with_options")(
            self._live(), ctypes.byref(c_spec), ctypes.byref(options), ctypes.byref(out)))
        return Backward(self._lib, out, spec, self.device, bool(deterministic))

    def close(self) -> None:
        """Destroys the context; kernels it compiled stay usable."""
        handle, self._handle = self._handle, None
        if handle is not None:
            self._lib.fn("flashjit_context_destroy")(handle)

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing useful to do
            pass

    def __repr__(self) -> str:
        state = "closed" if self._handle is None else f"chip={self.chip}"
        return f"flashjit.Context(device={self.device}, {state})"


class _Handle:
    """A library handle released once: by release()/close() or when
    collected. Subclasses name their C release function."""

    _RELEASE = ""

    def _live(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise InvalidArgumentError(f"this {type(self).__name__} was released")
        return self._handle

    def release(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            self._lib.fn(self._RELEASE)(handle)

    def close(self) -> None:
        self.release()

    def __del__(self):
        try:
            self.release()
        except Exception:  # interpreter shutdown: nothing useful to do
            pass


class Kernel(_Handle):
    """A compiled kernel for one AttentionSpec on one device."""

    _RELEASE = "flashjit_kernel_release"

    def __init__(self, lib, handle: ctypes.c_void_p, spec: AttentionSpec, device: int):
        self._lib = lib
        self._handle = handle
        self.spec = spec
        self.device = device
        name = ctypes.c_char_p()
        config = ctypes.c_char_p()
        lib.check(lib.fn("flashjit_kernel_describe")(handle, ctypes.byref(name),
                                                     ctypes.byref(config)))
        self.name: str = name.value.decode()
        self.config: str = config.value.decode()

    @property
    def handle(self) -> int:
        """The flashjit_kernel_t as an int (0 once released)."""
        return (self._handle.value or 0) if self._handle is not None else 0

    @property
    def family(self) -> str:
        """The template family of the tile config ("wgmma_persistent", ...)."""
        return self.config.split(":", 1)[0]

    @property
    def takes_tile_counter(self) -> bool:
        """Whether the kernel takes its tiles from a per-stream counter that
        the library allocates on the kernel's first launch on a stream (the
        persistent families); that first launch cannot be graph-captured."""
        return self.family in TILE_COUNTER_FAMILIES

    def forward(self, q, k, v, o, lse, *, scale: Optional[float] = None, stream: Any = None,
                captures: Sequence[Any] = (), block_mask: Optional[Sequence[Any]] = None) -> None:
        """o = softmax(scale * q k^T) v and lse its log-sum-exp, launched on
        `stream` (None: the legacy default stream). Tensors are DLPack
        tensors: q, o [batch, heads, seqlen_q, head_dim]; k, v [batch,
        kv_heads, seqlen_k, head_dim]; lse f32 [batch, heads, seqlen_q].
        scale None: 1/sqrt(head_dim). captures: the spec's captured tensors
        in order. block_mask: (kv_num_blocks, kv_indices) or those and
        (full_kv_num_blocks, full_kv_indices), for a block-sparse spec.
        Nothing is launched unless every check passes."""
        lib = self._lib
        handle = self._live()
        stream_handle = _stream_handle(stream)
        c_scale = math.nan if scale is None else float(scale)
        tensors = [_dlpack.borrow(t, stream=stream_handle) for t in (q, k, v, o, lse)]
        pointers = [t.pointer for t in tensors]
        c_stream = ctypes.c_void_p(stream_handle)
        captured = [_dlpack.borrow(t, stream=stream_handle) for t in captures]
        array = None
        if captured:
            array = (_dlpack.DLTensor * len(captured))(*[c.tensor for c in captured])
        if block_mask is not None:
            if len(block_mask) not in (2, 4):
                raise InvalidArgumentError(
                    f"block_mask has {len(block_mask)} tensors: give (kv_num_blocks, kv_indices) "
                    "or those and (full_kv_num_blocks, full_kv_indices)")
            lists = [_dlpack.borrow(t, stream=stream_handle) if t is not None else None
                     for t in block_mask] + [None] * (4 - len(block_mask))
            status = lib.fn("flashjit_kernel_forward_block_sparse")(
                handle, *pointers, c_scale, array, len(captured),
                *[b.pointer if b is not None else None for b in lists], c_stream)
        elif captured:
            status = lib.fn("flashjit_kernel_forward_captures")(
                handle, *pointers, c_scale, array, len(captured), c_stream)
        else:
            status = lib.fn("flashjit_kernel_forward")(handle, *pointers, c_scale, c_stream)
        lib.check(status)

    def forward_varlen(self, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, *,
                       scale: Optional[float] = None, stream: Any = None) -> None:
        """A varlen kernel's launch (spec varlen, page_size 0) on sequences
        packed one after another (docs/inference.md): q, o [total_q, heads,
        head_dim]; k, v [total_k, kv_heads, head_dim]; lse f32 [heads,
        total_q]; cu_seqlens_q, cu_seqlens_k int32 [batch + 1] on the
        device; max_seqlen_q the longest query length (it sizes the grid)."""
        self._launch_varlen("flashjit_kernel_forward_varlen",
                            (q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k),
                            max_seqlen_q, scale, stream)

    def forward_paged(self, q, k_cache, v_cache, o, lse, cu_seqlens_q, kv_lens, block_table,
                      max_seqlen_q: int, *, scale: Optional[float] = None,
                      stream: Any = None) -> None:
        """A paged varlen kernel's launch (spec varlen and page_size):
        packed queries as forward_varlen against a paged KV cache, k_cache
        and v_cache [pages, page_size, kv_heads, head_dim], kv_lens int32
        [batch] (each sequence's keys, the new tokens' included),
        block_table int32 [batch, max_pages] (contiguous). The rows of a
        sequence's last page past its length must hold finite values."""
        self._launch_varlen("flashjit_kernel_forward_paged",
                            (q, k_cache, v_cache, o, lse, cu_seqlens_q, kv_lens, block_table),
                            max_seqlen_q, scale, stream)

    def _launch_varlen(self, function: str, tensors, max_seqlen_q, scale, stream) -> None:
        lib = self._lib
        handle = self._live()
        stream_handle = _stream_handle(stream)
        c_scale = math.nan if scale is None else float(scale)
        borrowed = [_dlpack.borrow(t, stream=stream_handle) for t in tensors]
        max_q = _int("max_seqlen_q", max_seqlen_q)
        lib.check(lib.fn(function)(handle, *[t.pointer for t in borrowed], max_q, c_scale,
                                   ctypes.c_void_p(stream_handle)))

    def __repr__(self) -> str:
        return f"flashjit.Kernel({self.name!r}, config={self.config!r}, device={self.device})"


def _workspace_span(space) -> Tuple[int, int]:
    """The device address and byte size of a borrowed workspace tensor."""
    c = space.tensor
    count = 1
    for n in space.shape:
        count *= n
    return (c.data or 0) + c.byte_offset, count * ((c.dtype.bits * c.dtype.lanes + 7) // 8)


class _BackwardOptions(ctypes.Structure):
    """flashjit_backward_options_t (C API version 7; seqlen: version 9)."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("config", ctypes.c_char_p),
                ("deterministic", ctypes.c_int32), ("seqlen", ctypes.c_int64)]


class Backward(_Handle):
    """The backward kernels of one AttentionSpec on one device: dQ, dK, dV
    from q, k, v, the forward's o and lse, and dO."""

    _RELEASE = "flashjit_backward_release"

    def __init__(self, lib, handle: ctypes.c_void_p, spec: AttentionSpec, device: int,
                 deterministic: bool):
        self._lib = lib
        self._handle = handle
        self.spec = spec
        self.device = device
        self.deterministic = deterministic

    def workspace_bytes(self, batch: int, seqlen_q: int) -> int:
        """The bytes of device workspace a call on `batch` sequences of
        `seqlen_q` query rows needs (256-byte aligned, reusable by every
        call on one stream)."""
        out = ctypes.c_uint64()
        self._lib.check(self._lib.fn("flashjit_backward_workspace_size")(
            self._live(), int(batch), int(seqlen_q), ctypes.byref(out)))
        return out.value

    def backward(self, q, k, v, o, lse, dout, dq, dk, dv, *, workspace,
                 scale: Optional[float] = None, stream: Any = None,
                 captures: Sequence[Any] = (),
                 block_mask: Optional[Sequence[Any]] = None) -> None:
        """Writes dq, dk, dv (shaped as q, k, v) on `stream`. Tensors are
        DLPack tensors as Kernel.forward takes them, dout shaped as o.
        workspace: a DLPack tensor of at least workspace_bytes() bytes on
        the same device (its contents are overwritten). scale: the
        forward's (None: 1/sqrt(head_dim)). captures: the spec's captured
        tensors, as the forward took them. block_mask: a block-sparse
        spec's lists transposed, (q_num_blocks, q_indices) or those and
        (full_q_num_blocks, full_q_indices), as FlexAttention's BlockMask
        holds them. Nothing is launched unless every check passes."""
        stream_handle = _stream_handle(stream)
        tensors = [_dlpack.borrow(t, stream=stream_handle)
                   for t in (q, k, v, o, lse, dout, dq, dk, dv)]
        space = _dlpack.borrow(workspace, stream=stream_handle)
        address, size = _workspace_span(space)
        c_scale = math.nan if scale is None else float(scale)
        if block_mask is not None:
            if len(block_mask) not in (2, 4):
                raise InvalidArgumentError(
                    f"block_mask has {len(block_mask)} tensors: give (q_num_blocks, q_indices) "
                    "or those and (full_q_num_blocks, full_q_indices)")
            captured = [_dlpack.borrow(t, stream=stream_handle) for t in captures]
            array = ((_dlpack.DLTensor * len(captured))(*[t.tensor for t in captured])
                     if captured else None)
            lists = [_dlpack.borrow(t, stream=stream_handle) if t is not None else None
                     for t in block_mask] + [None] * (4 - len(block_mask))
            self._lib.check(self._lib.fn("flashjit_backward_run_block_sparse")(
                self._live(), *[t.pointer for t in tensors], ctypes.c_void_p(address or None),
                size, c_scale, array, len(captured),
                *[t.pointer if t is not None else None for t in lists],
                ctypes.c_void_p(stream_handle)))
            return
        if not captures:
            self._lib.check(self._lib.fn("flashjit_backward_run")(
                self._live(), *[t.pointer for t in tensors], ctypes.c_void_p(address or None),
                size, c_scale, ctypes.c_void_p(stream_handle)))
            return
        captured = [_dlpack.borrow(t, stream=stream_handle) for t in captures]
        array = (_dlpack.DLTensor * len(captured))(*[t.tensor for t in captured])
        self._lib.check(self._lib.fn("flashjit_backward_run_captures")(
            self._live(), *[t.pointer for t in tensors], ctypes.c_void_p(address or None),
            size, c_scale, array, len(captured), ctypes.c_void_p(stream_handle)))

    def backward_varlen(self, q, k, v, o, lse, dout, dq, dk, dv, cu_seqlens_q, cu_seqlens_k,
                        max_seqlen_k: int, *, workspace, scale: Optional[float] = None,
                        stream: Any = None) -> None:
        """The backward of a varlen spec on the packed sequences its forward
        (Kernel.forward_varlen) ran on: q, o, dout, dq [total_q, heads,
        head_dim]; k, v, dk, dv [total_k, kv_heads, head_dim]; lse f32
        [heads, total_q] as the forward wrote it; cu_seqlens_q, cu_seqlens_k
        int32 [batch + 1] on the device; max_seqlen_k the longest key length
        (it sizes the grid). workspace: at least workspace_bytes(1,
        total_q) bytes. C API version 12."""
        stream_handle = _stream_handle(stream)
        tensors = [_dlpack.borrow(t, stream=stream_handle)
                   for t in (q, k, v, o, lse, dout, dq, dk, dv, cu_seqlens_q, cu_seqlens_k)]
        space = _dlpack.borrow(workspace, stream=stream_handle)
        address, size = _workspace_span(space)
        c_scale = math.nan if scale is None else float(scale)
        self._lib.check(self._lib.fn("flashjit_backward_run_varlen")(
            self._live(), *[t.pointer for t in tensors], _int("max_seqlen_k", max_seqlen_k),
            ctypes.c_void_p(address or None), size, c_scale, ctypes.c_void_p(stream_handle)))

    def __repr__(self) -> str:
        mode = ", deterministic" if self.deterministic else ""
        return f"flashjit.Backward(device={self.device}{mode})"
