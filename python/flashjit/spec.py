"""AttentionSpec: what one attention kernel computes, as a hashable value.

Why: flashjit compiles one kernel per spec (head dim, dtype, heads, causal,
window, score/mask functions, captured tensors, sparse blocks), so the spec
is the natural cache key. This frozen dataclass is that key on the Python
side and turns itself into flashjit_attention_spec_t for the C API. Python
checks only what ctypes needs to pass values faithfully (types, integer
ranges, the 8-capture limit); what the values mean (a head dim no template
handles, heads not a multiple of kv heads, malformed MLIR) is the library's
to judge, so its own message reaches the caller.

The C struct only grows at its end and says its size in struct_size. A spec
that sets no field of a later C API version is sent with the size of the
version that has all its fields, so a library of that older version reads it
too.
"""

import ctypes
import dataclasses
import math
from typing import Sequence, Optional, Tuple

from .errors import InvalidArgumentError

MAX_CAPTURES = 8
MAX_CAPTURE_RANK = 4

DTYPE_CODES = {"f16": 1, "bf16": 2}          # flashjit_dtype_t
CAPTURE_DTYPE_CODES = {"f32": 1, "i32": 2}   # flashjit_capture_dtype_t
CAUSAL_ALIGN_CODES = {"top_left": 0, "bottom_right": 1}

_DTYPE_ALIASES = {"f16": "f16", "float16": "f16", "half": "f16", "torch.float16": "f16",
                  "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16"}
_CAPTURE_DTYPE_ALIASES = {"f32": "f32", "float32": "f32", "float": "f32", "torch.float32": "f32",
                          "i32": "i32", "int32": "i32", "torch.int32": "i32"}

_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)


class CSpec(ctypes.Structure):
    """flashjit_attention_spec_t of C API version 8 (424 bytes on LP64)."""
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("head_dim", ctypes.c_int64),
        ("dtype", ctypes.c_int32),
        ("causal", ctypes.c_int32),
        ("num_heads", ctypes.c_int64),
        ("num_kv_heads", ctypes.c_int64),
        # C API version 2
        ("causal_align", ctypes.c_int32),
        ("num_captures", ctypes.c_int32),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("score_mod", ctypes.c_char_p),
        ("mask_mod", ctypes.c_char_p),
        ("capture_dtype", ctypes.c_int32 * MAX_CAPTURES),
        ("capture_rank", ctypes.c_int32 * MAX_CAPTURES),
        ("capture_shape", (ctypes.c_int64 * MAX_CAPTURE_RANK) * MAX_CAPTURES),
        # C API version 3
        ("sparse_block_m", ctypes.c_int64),
        ("sparse_block_n", ctypes.c_int64),
        # C API version 8 (varlen kernels)
        ("varlen", ctypes.c_int32),
        # C API version 10 (paged K/V of varlen kernels)
        ("page_size", ctypes.c_int64),
    ]


# struct_size of each C API version's spec: everything up to its last field.
SPEC_SIZES = {
    1: CSpec.num_kv_heads.offset + ctypes.sizeof(ctypes.c_int64),
    2: CSpec.capture_shape.offset + CSpec.capture_shape.size,
    3: CSpec.varlen.offset,
    8: CSpec.page_size.offset,
    10: ctypes.sizeof(CSpec),
}


def _int(name: str, value, bounds=_INT64) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import operator
            value = operator.index(value)  # numpy and torch integer scalars
        except TypeError:
            raise InvalidArgumentError(
                f"{name} must be an integer, got {type(value).__name__} {value!r}") from None
    if not bounds[0] <= value <= bounds[1]:
        raise InvalidArgumentError(f"{name} is {value}, outside the C type's range "
                                   f"[{bounds[0]}, {bounds[1]}]")
    return int(value)


def _text(name: str, value) -> Optional[str]:
    if value is None or value == "":
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be MLIR text (str) or None, got "
                                   f"{type(value).__name__}")
    if "\0" in value:
        raise InvalidArgumentError(f"{name} contains a NUL character")
    return value


@dataclasses.dataclass(frozen=True)
class Capture:
    """A tensor the score_mod/mask_mod reads: element type "f32" or "i32"
    and its dims (1 to 4; -1 for a dim of any size). The mods' MLIR
    arguments must have the matching type, e.g. tensor<16xf32> for
    Capture("f32", (16,)) or tensor<?x?xi32> for Capture("i32", (-1, -1))."""

    dtype: str
    shape: Tuple[int, ...]

    def __post_init__(self):
        name = _CAPTURE_DTYPE_ALIASES.get(str(self.dtype))
        if name is None:
            raise InvalidArgumentError(
                f"capture dtype {self.dtype!r}: flashjit reads float32 ('f32') or int32 "
                "('i32') captured tensors")
        object.__setattr__(self, "dtype", name)
        try:
            dims = tuple(self.shape)
        except TypeError:
            raise InvalidArgumentError(f"capture shape must be a sequence of ints, got "
                                       f"{self.shape!r}") from None
        if not 1 <= len(dims) <= MAX_CAPTURE_RANK:
            raise InvalidArgumentError(
                f"capture shape {dims} has rank {len(dims)}: a captured tensor has 1 to "
                f"{MAX_CAPTURE_RANK} dims")
        object.__setattr__(self, "shape", tuple(_int("capture dim", d) for d in dims))


@dataclasses.dataclass(frozen=True)
class AttentionSpec:
    """What one kernel computes (flashjit_attention_spec_t).

    head_dim, dtype ("bf16" or "f16"), causal, num_heads, num_kv_heads
    (grouped-query attention when fewer), causal_align ("top_left" as
    PyTorch's is_causal, or "bottom_right": query i sits at key
    i + seqlen_k - seqlen_q), window (left, right) keys each side of the
    diagonal, -1 for no limit; score_mod / mask_mod: MLIR text of one
    func.func each; captures: the tensors those read; sparse_block (m, n):
    the block mask's block for block-sparse attention, (0, 0) for dense;
    varlen: sequences packed as [total_tokens, heads, head_dim]
    (Kernel.forward_varlen); page_size: with varlen, K and V in a paged
    cache of pages of that many tokens (Kernel.forward_paged), 0 packed.
    """

    head_dim: int = 128
    dtype: str = "bf16"
    causal: bool = False
    num_heads: int = 1
    num_kv_heads: int = 1
    causal_align: str = "top_left"
    window: Tuple[int, int] = (-1, -1)
    score_mod: Optional[str] = None
    mask_mod: Optional[str] = None
    captures: Tuple[Capture, ...] = ()
    sparse_block: Tuple[int, int] = (0, 0)
    varlen: bool = False
    page_size: int = 0

    def __post_init__(self):
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("head_dim", _int("head_dim", self.head_dim))
        dtype = _DTYPE_ALIASES.get(str(self.dtype))
        if dtype is None:
            raise InvalidArgumentError(
                f"dtype {self.dtype!r}: flashjit kernels take 'bf16' or 'f16'")
        set_("dtype", dtype)
        if not isinstance(self.causal, bool):
            if self.causal in (0, 1):
                set_("causal", bool(self.causal))
            else:
                raise InvalidArgumentError(f"causal must be True or False, got {self.causal!r}")
        set_("num_heads", _int("num_heads", self.num_heads))
        set_("num_kv_heads", _int("num_kv_heads", self.num_kv_heads))
        if self.causal_align not in CAUSAL_ALIGN_CODES:
            raise InvalidArgumentError(
                f"causal_align {self.causal_align!r}: expected 'top_left' or 'bottom_right'")
        window = self.window if self.window is not None else (-1, -1)
        if not isinstance(window, (tuple, list)) or len(window) != 2:
            raise InvalidArgumentError(
                f"window must be a pair (left, right) of key counts, -1 for no limit; got "
                f"{self.window!r}")
        set_("window", (_int("window left", window[0]), _int("window right", window[1])))
        set_("score_mod", _text("score_mod", self.score_mod))
        set_("mask_mod", _text("mask_mod", self.mask_mod))
        captures = tuple(c if isinstance(c, Capture) else Capture(*c) for c in self.captures)
        if len(captures) > MAX_CAPTURES:
            raise InvalidArgumentError(
                f"{len(captures)} captured tensors: flashjit passes at most {MAX_CAPTURES}")
        set_("captures", captures)
        block = self.sparse_block if self.sparse_block is not None else (0, 0)
        if not isinstance(block, (tuple, list)) or len(block) != 2:
            raise InvalidArgumentError(
                f"sparse_block must be a pair (m, n), (0, 0) for dense; got {self.sparse_block!r}")
        set_("sparse_block", (_int("sparse_block m", block[0]), _int("sparse_block n", block[1])))
        if not isinstance(self.varlen, bool):
            if self.varlen in (0, 1):
                set_("varlen", bool(self.varlen))
            else:
                raise InvalidArgumentError(f"varlen must be True or False, got {self.varlen!r}")
        set_("page_size", _int("page_size", self.page_size))

    @property
    def api_version(self) -> int:
        """The oldest C API version whose spec holds every field set here."""
        if self.page_size != 0:
            return 10
        if self.varlen:
            return 8
        if self.sparse_block != (0, 0):
            return 3
        if (self.causal_align != "top_left" or self.window != (-1, -1) or self.score_mod
                or self.mask_mod or self.captures):
            return 2
        return 1

    @property
    def is_block_sparse(self) -> bool:
        return self.sparse_block != (0, 0)

    def to_c(self) -> CSpec:
        """The C struct. Its score_mod/mask_mod point into bytes objects the
        struct keeps (ctypes holds c_char_p values for the struct's life)."""
        c = CSpec()
        ctypes.memset(ctypes.addressof(c), 0, ctypes.sizeof(c))
        c.struct_size = SPEC_SIZES[self.api_version]
        c.head_dim = self.head_dim
        c.dtype = DTYPE_CODES[self.dtype]
        c.causal = 1 if self.causal else 0
        c.num_heads = self.num_heads
        c.num_kv_heads = self.num_kv_heads
        c.causal_align = CAUSAL_ALIGN_CODES[self.causal_align]
        c.num_captures = len(self.captures)
        c.window_left, c.window_right = self.window
        c.score_mod = self.score_mod.encode("utf-8") if self.score_mod else None
        c.mask_mod = self.mask_mod.encode("utf-8") if self.mask_mod else None
        for i, capture in enumerate(self.captures):
            c.capture_dtype[i] = CAPTURE_DTYPE_CODES[capture.dtype]
            c.capture_rank[i] = len(capture.shape)
            for d, extent in enumerate(capture.shape):
                c.capture_shape[i][d] = extent
        c.sparse_block_m, c.sparse_block_n = self.sparse_block
        c.varlen = 1 if self.varlen else 0
        c.page_size = self.page_size
        return c


def _f32_literal(value: float) -> str:
    """An MLIR float literal that parses back to the same f32."""
    return f"{value:.9e}"


def softcap_score_mod(cap: float, captures: Sequence[Capture] = ()) -> str:
    """A score_mod for logit soft-capping (Gemma 2): cap * tanh(score / cap),
    where score is the scaled dot product. captures: the spec's captured
    tensors (a mask_mod's), which every mod takes as trailing arguments;
    the soft-cap reads none of them."""
    cap = float(cap)
    if not (math.isfinite(cap) and cap > 0):
        raise InvalidArgumentError(f"softcap must be a positive finite number, got {cap}")
    extra = "".join(
        f", %c{i}: tensor<{'x'.join('?' if d < 0 else str(d) for d in c.shape)}x{c.dtype}>"
        for i, c in enumerate(captures))
    return "\n".join([
        "func.func @softcap(%score: f32, %b: index, %h: index, %q: index, %kv: index"
        + extra + ") -> f32 {",
        f"  %cap = arith.constant {_f32_literal(cap)} : f32",
        "  %x = arith.divf %score, %cap : f32",
        "  %t = math.tanh %x : f32",
        "  %y = arith.mulf %t, %cap : f32",
        "  return %y : f32",
        "}",
    ]) + "\n"
