"""DLPack's DLTensor in ctypes, and borrowing one from a Python array.

Why: the C API takes every tensor as a `const DLTensor *` (dlpack.h v0.6 or
later). A DLTensor only describes memory, so a borrowed one must keep its
owner, and the shape and stride arrays it points to, alive until the C call
returns; Borrowed does that. Three sources are understood:

* torch.Tensor, read from its metadata directly (no capsule, so no per-call
  DLPack export cost and no trouble with tensors that require grad);
* any object with __dlpack__ (CuPy, JAX, NumPy, ...): its legacy
  "dltensor" capsule is read and kept alive, never consumed, so the
  producer's deleter runs when the capsule is collected;
* a DLTensor built by hand (dltensor()), for callers that manage raw
  device pointers themselves.
"""

import ctypes
import sys
from typing import Any, Optional, Sequence, Tuple

from .errors import InvalidArgumentError

# DLDeviceType values used here.
KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13
# DLDataTypeCode values.
KDL_INT = 0
KDL_UINT = 1
KDL_FLOAT = 2
KDL_BFLOAT = 4

# Short names for the element types flashjit reads: (code, bits).
DTYPES = {
    "f16": (KDL_FLOAT, 16),
    "bf16": (KDL_BFLOAT, 16),
    "f32": (KDL_FLOAT, 32),
    "i32": (KDL_INT, 32),
}
_DTYPE_NAMES = {v: k for k, v in DTYPES.items()}

_DEVICE_NAMES = {KDL_CPU: "cpu", KDL_CUDA: "cuda", KDL_CUDA_HOST: "cuda pinned host memory",
                 KDL_CUDA_MANAGED: "cuda managed memory"}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    """The legacy capsule's payload; only dl_tensor (its first field) is read."""
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


def dtype_name(code: int, bits: int, lanes: int = 1) -> str:
    """"bf16", "f32", ... or a description of a type flashjit does not read."""
    if lanes == 1 and (code, bits) in _DTYPE_NAMES:
        return _DTYPE_NAMES[(code, bits)]
    kind = {KDL_INT: "int", KDL_UINT: "uint", KDL_FLOAT: "float", KDL_BFLOAT: "bfloat"}.get(
        code, f"type code {code} ")
    return f"{kind}{bits}" + (f"x{lanes}" if lanes != 1 else "")


def device_name(device_type: int, device_id: int) -> str:
    name = _DEVICE_NAMES.get(device_type, f"DLPack device type {device_type}")
    return f"{name}:{device_id}" if device_type == KDL_CUDA else name


class Borrowed:
    """A DLTensor describing someone else's memory, with what keeps that
    memory and the DLTensor's arrays alive. `pointer` is what C takes."""

    __slots__ = ("pointer", "tensor", "_keep")

    def __init__(self, pointer, keep: Tuple[Any, ...]):
        self.pointer = pointer
        self.tensor: DLTensor = pointer.contents
        self._keep = keep

    @property
    def shape(self) -> Tuple[int, ...]:
        t = self.tensor
        return tuple(t.shape[i] for i in range(t.ndim))

    @property
    def strides(self) -> Optional[Tuple[int, ...]]:
        t = self.tensor
        return tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None

    @property
    def dtype(self) -> str:
        d = self.tensor.dtype
        return dtype_name(d.code, d.bits, d.lanes)

    @property
    def device(self) -> Tuple[int, int]:
        return (self.tensor.device.device_type, self.tensor.device.device_id)


def dltensor(data: int, shape: Sequence[int], dtype: str, *, strides: Optional[Sequence[int]] = None,
             device: Tuple[int, int] = (KDL_CUDA, 0), byte_offset: int = 0,
             owner: Any = None) -> Borrowed:
    """A DLTensor over raw memory: `data` an address, `dtype` one of
    DTYPES' names, strides in elements (None: compact row-major), `device`
    (DLPack device type, ordinal). `owner` is kept alive with it."""
    if dtype not in DTYPES:
        raise InvalidArgumentError(f"dtype {dtype!r} is not one of {sorted(DTYPES)}")
    shape = [int(s) for s in shape]
    if strides is not None and len(strides) != len(shape):
        raise InvalidArgumentError(
            f"{len(strides)} strides for {len(shape)} dimensions")
    code, bits = DTYPES[dtype]
    return _build(int(data), shape, None if strides is None else [int(s) for s in strides],
                  code, bits, device[0], device[1], int(byte_offset), (owner,))


def _build(data: int, shape, strides, code: int, bits: int, device_type: int, device_id: int,
           byte_offset: int, keep: Tuple[Any, ...]) -> Borrowed:
    n = len(shape)
    shape_array = (ctypes.c_int64 * n)(*shape)
    stride_array = (ctypes.c_int64 * n)(*strides) if strides is not None else None
    t = DLTensor()
    t.data = data or None
    t.device = DLDevice(device_type, device_id)
    t.ndim = n
    t.dtype = DLDataType(code, bits, 1)
    t.shape = ctypes.cast(shape_array, ctypes.POINTER(ctypes.c_int64))
    t.strides = (ctypes.cast(stride_array, ctypes.POINTER(ctypes.c_int64))
                 if stride_array is not None else None)
    t.byte_offset = byte_offset
    return Borrowed(ctypes.pointer(t), keep + (shape_array, stride_array, t))


# torch dtype -> (code, bits), filled on first use so torch is never imported here.
_torch_dtypes: dict = {}


def _from_torch(t, strides_override=None) -> Borrowed:
    torch = sys.modules["torch"]
    if not _torch_dtypes:
        _torch_dtypes.update({
            torch.float16: (KDL_FLOAT, 16), torch.bfloat16: (KDL_BFLOAT, 16),
            torch.float32: (KDL_FLOAT, 32), torch.float64: (KDL_FLOAT, 64),
            torch.int32: (KDL_INT, 32), torch.int64: (KDL_INT, 64),
            torch.int16: (KDL_INT, 16), torch.int8: (KDL_INT, 8), torch.uint8: (KDL_UINT, 8),
            torch.bool: (6, 8),  # kDLBool
        })
    if t.dtype not in _torch_dtypes:
        raise InvalidArgumentError(f"a tensor of {t.dtype} has no DLPack type flashjit reads")
    code, bits = _torch_dtypes[t.dtype]
    kind = t.device.type
    if kind == "cuda":
        device = (KDL_CUDA, t.device.index if t.device.index is not None else 0)
    elif kind == "cpu":
        device = (KDL_CPU, 0)
    else:
        raise InvalidArgumentError(
            f"a tensor on {t.device} has no DLPack device flashjit reads: flashjit needs "
            "CUDA tensors (move it with .cuda())")
    strides = list(strides_override) if strides_override is not None else list(t.stride())
    return _build(t.data_ptr(), list(t.shape), strides, code, bits, device[0], device[1], 0, (t,))


_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_capsule_owner(obj, stream: Optional[int]) -> Borrowed:
    """Borrows through obj.__dlpack__: for CUDA memory the consumer's
    stream is passed (1 for the legacy default stream) so the producer can
    order its pending writes before our launch."""
    kwargs = {}
    device_fn = getattr(obj, "__dlpack_device__", None)
    if device_fn is not None:
        device_type, _ = device_fn()
        if int(device_type) == KDL_CUDA:
            kwargs["stream"] = 1 if not stream else int(stream)
    try:
        capsule = obj.__dlpack__(**kwargs)
    except TypeError:
        capsule = obj.__dlpack__()
    if not _capsule_is_valid(capsule, b"dltensor"):
        raise InvalidArgumentError(
            f"{type(obj).__name__}.__dlpack__() did not return an unused 'dltensor' capsule")
    address = _capsule_pointer(capsule, b"dltensor")
    managed = ctypes.cast(address, ctypes.POINTER(DLManagedTensor))
    pointer = ctypes.pointer(managed.contents.dl_tensor)
    return Borrowed(pointer, (obj, capsule, managed))


def borrow(obj, *, stream: Optional[int] = None, strides=None) -> Borrowed:
    """A Borrowed DLTensor for a torch.Tensor, an object with __dlpack__,
    a Borrowed (returned as is) or a DLTensor. `strides` overrides a torch
    tensor's strides (in elements) where the caller normalised them."""
    if isinstance(obj, Borrowed):
        return obj
    if isinstance(obj, DLTensor):
        return Borrowed(ctypes.pointer(obj), (obj,))
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _from_torch(obj, strides)
    if hasattr(obj, "__dlpack__"):
        return _from_capsule_owner(obj, stream)
    raise TypeError(
        f"expected a torch.Tensor, an array with __dlpack__ or a DLTensor, got "
        f"{type(obj).__name__}")
