"""ctypes bindings for libflashjit.so's C API (runtime/include/flashjit/flashjit.h).

Why: the benchmark runs flashjit beside PyTorch in one Python process, on
machines that have PyTorch but no compiler, so it reaches the library the
way any foreign runtime would: through the C ABI and DLPack's DLTensor.
This module needs neither torch nor a GPU; its self_test() checks the
struct layouts and the argument marshalling against the real library.
"""

import ctypes
import math
import os
import sys

from self_check import Checks

# flashjit_status_t, in the header's order (flashjit_status_name gives
# the same words; self_test checks both agree).
STATUS_NAMES = {
    0: "ok",
    1: "invalid argument",
    2: "unsupported",
    3: "no device",
    4: "compile error",
    5: "driver error",
    6: "launch error",
    7: "internal error",
}
OK, INVALID_ARGUMENT, UNSUPPORTED, NO_DEVICE = 0, 1, 2, 3
C_API_VERSION = 12

DTYPE_CODES = {"f16": 1, "bf16": 2}  # flashjit_dtype_t
CAPTURE_DTYPES = {"f32": 1, "i32": 2}  # flashjit_capture_dtype_t
MAX_CAPTURES = 8

# DLPack (dlpack.h v0.6 and later): device types and type codes.
KDL_CPU, KDL_CUDA = 1, 2
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT = 0, 1, 2, 4
# element type name -> (DLDataTypeCode, bits)
DL_DTYPES = {
    "bf16": (KDL_BFLOAT, 16),
    "f16": (KDL_FLOAT, 16),
    "f32": (KDL_FLOAT, 32),
    "int8": (KDL_INT, 8),
    "i32": (KDL_INT, 32),
}


# The C API's structs (DLPack's DLTensor, flashjit_attention_spec_t) are
# the Python package's, imported from this source tree: one definition of
# the ABI's layout, which self_test() checks against the library.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir, "python"))
from flashjit._dlpack import DLDataType, DLDevice, DLTensor  # noqa: E402
from flashjit.spec import CSpec as AttentionSpec  # noqa: E402


# The sizes of version-1 and version-2 specs: a spec that sets no field of
# a later version says its version's size, so libraries of every version
# since read it the same.
SPEC_V1_SIZE = 40
SPEC_V2_SIZE = 400
# Byte offsets of flashjit.h's fields (as offsetof gives them on x86-64
# and aarch64): self_test checks ctypes lays the struct out the same.
SPEC_OFFSETS = {"num_kv_heads": 32, "causal_align": 40, "num_captures": 44,
                "window_left": 48, "window_right": 56, "score_mod": 64, "mask_mod": 72,
                "capture_dtype": 80, "capture_rank": 112, "capture_shape": 144,
                "sparse_block_m": 400, "sparse_block_n": 408, "varlen": 416,
                "page_size": 424}


class TensorArg:
    """A DLTensor plus the shape and stride arrays it points to (ctypes
    does not keep them alive on its own)."""

    def __init__(self, data_ptr, shape, strides, dtype, device_id=0,
                 device_type=KDL_CUDA, byte_offset=0):
        code, bits = DL_DTYPES[dtype]
        n = len(shape)
        self.shape = (ctypes.c_int64 * n)(*shape)
        self.strides = (ctypes.c_int64 * n)(*strides) if strides is not None else None
        self.dl = DLTensor()
        self.dl.data = data_ptr
        self.dl.device = DLDevice(device_type, device_id)
        self.dl.ndim = n
        self.dl.dtype = DLDataType(code, bits, 1)
        self.dl.shape = ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64))
        self.dl.strides = (ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64))
                           if self.strides is not None else None)
        self.dl.byte_offset = byte_offset

    @classmethod
    def from_torch(cls, tensor):
        """Describes a CUDA torch tensor (no copy: the same memory)."""
        import torch  # only the benchmark needs torch
        names = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32",
                 torch.int32: "i32"}
        if tensor.dtype not in names:
            raise ValueError(f"no DLPack mapping here for {tensor.dtype}")
        if tensor.device.type != "cuda":
            raise ValueError(f"tensor is on {tensor.device}, not a CUDA device")
        arg = cls(tensor.data_ptr(), list(tensor.shape), list(tensor.stride()),
                  names[tensor.dtype], device_id=tensor.device.index or 0)
        # The memory must outlive every launch bound to it: a freed tensor's
        # memory goes back to torch's allocator, and the next tensor there
        # would take the launch's writes.
        arg.owner = tensor
        return arg


class BlockMaskArgs:
    """A block-sparse kernel's block mask as TensorArgs, in FlexAttention's
    BlockMask layout (flashjit.h, flashjit_kernel_forward_block_sparse):
    i32 kv_num_blocks [B or 1, H or 1, Mq] and kv_indices [B or 1, H or 1,
    Mq, >= Nk], the key blocks each query block visits with the mask_mod
    (partial blocks), and full_kv_num_blocks, full_kv_indices of the same
    shapes (or both None), those it visits without. Where the lists come
    from is the caller's business: from_torch takes any four tensors (say a
    Flex BlockMask's, from_flex)."""

    def __init__(self, kv_num_blocks, kv_indices, full_kv_num_blocks=None,
                 full_kv_indices=None, keep=()):
        if (full_kv_num_blocks is None) != (full_kv_indices is None):
            raise ValueError("full_kv_num_blocks and full_kv_indices come together: "
                             "give both or neither")
        self.lists = (kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices)
        self.keep = tuple(keep)  # what the TensorArgs' addresses point into

    @classmethod
    def from_torch(cls, kv_num_blocks, kv_indices, full_kv_num_blocks=None,
                   full_kv_indices=None):
        """Describes CUDA torch int32 tensors (no copy: the same memory,
        kept alive by the BlockMaskArgs)."""
        import torch  # only the benchmark needs torch
        given = (kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices)
        names = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices")
        for name, t in zip(names, given):
            if t is not None and t.dtype != torch.int32:
                raise ValueError(f"block mask {name} is {t.dtype}: expected torch.int32")
        args = [None if t is None else TensorArg.from_torch(t) for t in given]
        return cls(*args, keep=[t for t in given if t is not None])

    @classmethod
    def from_flex(cls, block_mask):
        """The forward lists of a torch.nn.attention.flex_attention
        BlockMask (its BLOCK_SIZE must be the spec's sparse block)."""
        return cls.from_torch(block_mask.kv_num_blocks, block_mask.kv_indices,
                              block_mask.full_kv_num_blocks, block_mask.full_kv_indices)


class FlashjitError(RuntimeError):
    def __init__(self, function, status, message):
        self.function, self.status, self.message = function, status, message
        super().__init__(f"{STATUS_NAMES.get(status, status)}: {message}")


def default_library_path():
    """$FLASHJIT_LIB, else .device-bundle/lib/libflashjit.so (the stripped
    install the GPU machine receives), from the repository root."""
    env = os.environ.get("FLASHJIT_LIB")
    if env:
        return env
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(root, ".device-bundle", "lib", "libflashjit.so")


class Library:
    """libflashjit.so with typed entry points. Every call checks its status
    and raises FlashjitError with the library's message."""

    def __init__(self, path=None):
        self.path = path or default_library_path()
        self.lib = ctypes.CDLL(self.path)
        L, P = self.lib, ctypes.POINTER
        status = ctypes.c_int
        sigs = {
            "flashjit_last_error": (ctypes.c_char_p, []),
            "flashjit_status_name": (ctypes.c_char_p, [status]),
            "flashjit_get_version": (status, [P(ctypes.c_int32)] * 4),
            "flashjit_context_create": (status, [ctypes.c_int32, ctypes.c_char_p,
                                                 ctypes.c_char_p, P(ctypes.c_void_p)]),
            "flashjit_context_destroy": (status, [ctypes.c_void_p]),
            "flashjit_context_chip": (status, [ctypes.c_void_p, P(ctypes.c_char_p)]),
            "flashjit_context_device": (status, [ctypes.c_void_p, P(ctypes.c_int32),
                                                 P(ctypes.c_char_p)]),
            "flashjit_kernel_compile": (status, [ctypes.c_void_p, ctypes.c_void_p,
                                                 P(ctypes.c_void_p)]),
            "flashjit_kernel_compile_config": (status, [ctypes.c_void_p, ctypes.c_void_p,
                                                        ctypes.c_char_p, P(ctypes.c_void_p)]),
            "flashjit_kernel_compile_for_seqlen": (status, [ctypes.c_void_p, ctypes.c_void_p,
                                                            ctypes.c_char_p, ctypes.c_int64,
                                                            P(ctypes.c_void_p)]),
            "flashjit_kernel_release": (status, [ctypes.c_void_p]),
            "flashjit_kernel_describe": (status, [ctypes.c_void_p, P(ctypes.c_char_p),
                                                  P(ctypes.c_char_p)]),
            "flashjit_kernel_forward": (status, [ctypes.c_void_p] + [P(DLTensor)] * 5
                                        + [ctypes.c_double, ctypes.c_void_p]),
        }
        for name, (restype, argtypes) in sigs.items():
            fn = getattr(L, name)
            fn.restype, fn.argtypes = restype, argtypes
        # API versions 2 and 3: bound where the library has them (has() says).
        optional = {
            "flashjit_kernel_forward_captures": (status, [ctypes.c_void_p] + [P(DLTensor)] * 5
                                                 + [ctypes.c_double, P(DLTensor),
                                                    ctypes.c_int32, ctypes.c_void_p]),
            "flashjit_kernel_forward_block_sparse": (status, [ctypes.c_void_p] + [P(DLTensor)] * 5
                                                     + [ctypes.c_double, P(DLTensor), ctypes.c_int32]
                                                     + [P(DLTensor)] * 4 + [ctypes.c_void_p]),
        }
        for name, (restype, argtypes) in optional.items():
            if hasattr(L, name):
                fn = getattr(L, name)
                fn.restype, fn.argtypes = restype, argtypes

    def has(self, name):
        """Whether the library exports `name` (a function newer than some
        libraries this module may load)."""
        return hasattr(self.lib, name)

    def call(self, name, *args):
        """Calls `name`; raises FlashjitError unless it returns OK."""
        status = getattr(self.lib, name)(*args)
        if status != OK:
            message = self.lib.flashjit_last_error().decode(errors="replace")
            raise FlashjitError(name, status, message)

    def status_name(self, status):
        return self.lib.flashjit_status_name(status).decode()

    def version(self):
        parts = [ctypes.c_int32() for _ in range(4)]
        self.call("flashjit_get_version", *[ctypes.byref(p) for p in parts])
        major, minor, patch, api = (p.value for p in parts)
        return f"{major}.{minor}.{patch}", api


class Context:
    def __init__(self, lib, device=0, cache_dir=None, chip=None):
        self.lib, self.handle = lib, ctypes.c_void_p()
        lib.call("flashjit_context_create", device,
                 cache_dir.encode() if cache_dir is not None else None,
                 chip.encode() if chip else None, ctypes.byref(self.handle))

    def close(self):
        if self.handle:
            self.lib.call("flashjit_context_destroy", self.handle)
            self.handle = ctypes.c_void_p()

    def chip(self):
        out = ctypes.c_char_p()
        self.lib.call("flashjit_context_chip", self.handle, ctypes.byref(out))
        return out.value.decode()

    def device(self):
        """(has_device, reason when not)."""
        has, reason = ctypes.c_int32(), ctypes.c_char_p()
        self.lib.call("flashjit_context_device", self.handle, ctypes.byref(has),
                      ctypes.byref(reason))
        return bool(has.value), (reason.value or b"").decode(errors="replace")

    def compile(self, head_dim, dtype="bf16", causal=False, num_heads=1,
                num_kv_heads=None, config=None, seqlen=None):
        """config: None (the default choice), a family such as "mma_sync"
        (its heuristic choice) or a whole tile config. seqlen: the length
        the kernel will mostly run at, which picks the tuning database's
        bucket (None: the default hint)."""
        spec = make_spec(head_dim, dtype, causal, num_heads,
                         num_kv_heads if num_kv_heads is not None else num_heads)
        return Kernel(self.lib, self._compile_spec(spec, config, seqlen))

    def compile_spec(self, spec, config=None, seqlen=None):
        """The Kernel for an AttentionSpec built by make_spec or
        make_variant_spec (config, seqlen: as compile)."""
        return Kernel(self.lib, self._compile_spec(spec, config, seqlen))

    def _compile_spec(self, spec, config=None, seqlen=None):
        handle = ctypes.c_void_p()
        self.lib.call("flashjit_kernel_compile_for_seqlen", self.handle, ctypes.byref(spec),
                      config.encode() if config else None, int(seqlen or 0),
                      ctypes.byref(handle))
        return handle


def make_spec(head_dim, dtype, causal, num_heads, num_kv_heads):
    """A version-1 spec (no variant): struct_size says 40 bytes, so a
    library of either C API version reads exactly these fields."""
    spec = AttentionSpec(SPEC_V1_SIZE, head_dim, DTYPE_CODES[dtype],
                         1 if causal else 0, num_heads, num_kv_heads)
    spec.window_left = spec.window_right = -1  # flashjit_attention_spec_init's defaults
    return spec


def make_variant_spec(head_dim, dtype, causal, num_heads, num_kv_heads=None,
                      causal_align=0, window_left=-1, window_right=-1,
                      score_mod=None, mask_mod=None, captures=(), sparse_block=None):
    """A version-2 spec, or version 3 with sparse_block. score_mod,
    mask_mod: MLIR text of one func.func (None: none). captures: (dtype,
    shape) per captured tensor, dtype "f32" or "i32", shape of 1 to 4 dims
    (-1: any size). sparse_block: (query rows, keys) of the block mask's
    block, e.g. (128, 128), for a kernel launched by bind_block_sparse
    (None: dense; struct_size then says 400 bytes, so a version-2 library
    reads the spec too)."""
    if len(captures) > MAX_CAPTURES:
        raise ValueError(f"{len(captures)} captured tensors: at most {MAX_CAPTURES}")
    spec = make_spec(head_dim, dtype, causal, num_heads,
                     num_kv_heads if num_kv_heads is not None else num_heads)
    spec.struct_size = SPEC_V2_SIZE
    if sparse_block is not None:
        spec.struct_size = AttentionSpec.varlen.offset  # a version-3 spec
        spec.sparse_block_m, spec.sparse_block_n = (int(n) for n in sparse_block)
    spec.causal_align, spec.num_captures = causal_align, len(captures)
    spec.window_left, spec.window_right = window_left, window_right
    spec.score_mod = score_mod.encode() if score_mod else None
    spec.mask_mod = mask_mod.encode() if mask_mod else None
    for i, (dtype_name, shape) in enumerate(captures):
        if not 1 <= len(shape) <= 4:
            raise ValueError(f"captured tensor {i} has rank {len(shape)}: expected 1 to 4")
        spec.capture_dtype[i] = CAPTURE_DTYPES[dtype_name]
        spec.capture_rank[i] = len(shape)
        for d, n in enumerate(shape):
            spec.capture_shape[i][d] = n
    return spec


class Kernel:
    def __init__(self, lib, handle):
        self.lib, self.handle = lib, handle

    def release(self):
        if self.handle:
            self.lib.call("flashjit_kernel_release", self.handle)
            self.handle = ctypes.c_void_p()

    def describe(self):
        name, config = ctypes.c_char_p(), ctypes.c_char_p()
        self.lib.call("flashjit_kernel_describe", self.handle, ctypes.byref(name),
                      ctypes.byref(config))
        return name.value.decode(), config.value.decode()

    def bind(self, q, k, v, o, lse, scale=None, stream=None):
        """A no-argument function that launches forward on these TensorArgs
        (built once, so a timed loop pays only the ctypes call)."""
        fn, handle = self.lib.lib.flashjit_kernel_forward, self.handle
        args = [ctypes.byref(t.dl) for t in (q, k, v, o, lse)]
        scale = math.nan if scale is None else float(scale)
        stream = ctypes.c_void_p(stream or 0)
        keep = (q, k, v, o, lse)  # the DLTensors must outlive the closure

        def launch():
            status = fn(handle, *args, scale, stream)
            if status != OK:
                message = self.lib.lib.flashjit_last_error().decode(errors="replace")
                raise FlashjitError("flashjit_kernel_forward", status, message)
        launch.keep = keep
        return launch

    def bind_captures(self, q, k, v, o, lse, captures, scale=None, stream=None):
        """bind for flashjit_kernel_forward_captures: `captures` are the
        spec's captured tensors (TensorArgs, f32 or i32) in its order."""
        return self._bind_with_captures("flashjit_kernel_forward_captures",
                                        "C API version 1", q, k, v, o, lse,
                                        captures, (), (), scale, stream)

    def bind_block_sparse(self, q, k, v, o, lse, block_mask, captures=(), scale=None,
                          stream=None):
        """bind for flashjit_kernel_forward_block_sparse (a spec made with
        sparse_block): `block_mask` is a BlockMaskArgs, `captures` the
        spec's captured tensors (TensorArgs) in its order."""
        lists = [ctypes.byref(t.dl) if t is not None else None for t in block_mask.lists]
        return self._bind_with_captures("flashjit_kernel_forward_block_sparse",
                                        "C API version 2 or older", q, k, v, o, lse,
                                        captures, lists, (block_mask,), scale, stream)

    def _bind_with_captures(self, name, older, q, k, v, o, lse, captures, extra,
                            keep_extra, scale, stream):
        """The launch closure of `name`(kernel, q, k, v, o, lse, scale,
        captures, count, *extra, stream), refused where the library (of
        `older`) lacks it."""
        if not self.lib.has(name):
            raise FlashjitError(name, UNSUPPORTED, f"{self.lib.path} has no {name} ({older})")
        fn, handle = getattr(self.lib.lib, name), self.handle
        args = [ctypes.byref(t.dl) for t in (q, k, v, o, lse)]
        array = (DLTensor * max(1, len(captures)))(*[t.dl for t in captures])
        count = ctypes.c_int32(len(captures))
        scale = math.nan if scale is None else float(scale)
        stream = ctypes.c_void_p(stream or 0)
        # What the closure's pointers point into must outlive it.
        keep = (q, k, v, o, lse, tuple(captures), array, tuple(keep_extra))

        def launch():
            status = fn(handle, *args, scale, array, count, *extra, stream)
            if status != OK:
                message = self.lib.lib.flashjit_last_error().decode(errors="replace")
                raise FlashjitError(name, status, message)
        launch.keep = keep
        return launch


def fake_bhsd(address, b, h, s, d, dtype="bf16", strides=True):
    """A [B, H, S, D] TensorArg over an address nothing reads (for checks
    that fail, or a forward that cannot launch, before memory is touched)."""
    st = [h * s * d, s * d, d, 1]
    return TensorArg(address, [b, h, s, d], st if strides else None, dtype)


def self_test_block_sparse(check, ctx, dense_kernel, args, has_device, status_of):
    """The version-3 spec fields and forward_block_sparse's checks, on
    addresses nothing reads (args() of self_test: b 2, h 4, s 40, d 64)."""
    b, h, d, m = 2, 4, 64, 128  # seqlen 40, sparse block 128 x 128: Mq = Nk = 1
    st, msg = status_of(lambda: ctx.compile_spec(
        make_variant_spec(d, "bf16", False, h, sparse_block=(7, 0))))
    check("a sparse block of 7 x 0 is an invalid argument",
          st == INVALID_ARGUMENT and "sparse block 7 x 0" in msg, f"{STATUS_NAMES.get(st)}: {msg}")
    spec = make_variant_spec(d, "bf16", False, h, sparse_block=(m, m))
    check("a block-sparse spec says 416 bytes and its block",
          (spec.struct_size, spec.sparse_block_m, spec.sparse_block_n) == (416, m, m))
    check("a variant spec without a sparse block says 400 bytes",
          make_variant_spec(d, "bf16", False, h, window_left=8).struct_size == SPEC_V2_SIZE)
    kernel = ctx.compile_spec(spec)
    name, _ = kernel.describe()
    check("a block-sparse spec compiles a variant kernel",
          name.startswith(f"flashjit_fwd_d{d}_bf16_h{h}_kv{h}_v"), name)

    def lists(rows=1, cols=1, heads=h, dtype="i32", full=True, base=0x60000000):
        n = TensorArg(base, [1, heads, rows], None, dtype)
        i = TensorArg(base + 0x1000, [1, heads, rows, cols], None, dtype)
        if not full:
            return BlockMaskArgs(n, i)
        return BlockMaskArgs(n, i, TensorArg(base + 0x2000, [b, 1, rows], None, dtype),
                             TensorArg(base + 0x3000, [b, 1, rows, cols + 1], None, dtype))

    def sparse(kernel, mask):
        return status_of(kernel.bind_block_sparse(*args(), mask, scale=None))

    try:
        BlockMaskArgs(*lists().lists[:3], None)
        refused = False
    except ValueError:
        refused = True
    check("BlockMaskArgs refuses full_kv_num_blocks without full_kv_indices", refused)
    half = lists()
    half.lists = half.lists[:3] + (None,)  # past BlockMaskArgs' own check: the library's
    bad = {
        "kv_num_blocks of 2 query blocks": (lists(rows=2), "block mask kv_num_blocks has shape"),
        "kv_indices of no key block": (lists(cols=0), "block mask kv_indices has shape"),
        "lists of 3 heads for 4": (lists(heads=3), "expected [2 or 1, 4 or 1, 1]"),
        "f32 lists": (lists(dtype="f32"), "expected i32"),
        "full_kv_num_blocks without full_kv_indices": (half, "come together"),
    }
    for what, (mask, expect) in bad.items():
        st, msg = sparse(kernel, mask)
        check(f"forward_block_sparse refuses {what}", st == INVALID_ARGUMENT and expect in msg,
              f"{STATUS_NAMES.get(st)}: {msg}")
    st, msg = sparse(dense_kernel, lists())
    check("forward_block_sparse refuses a block mask for a dense kernel",
          st == INVALID_ARGUMENT and "not block-sparse" in msg, f"{STATUS_NAMES.get(st)}: {msg}")
    st, msg = status_of(kernel.bind(*args()))
    check("forward refuses a block-sparse kernel (no block mask)",
          st == INVALID_ARGUMENT and "needs kv_num_blocks" in msg, f"{STATUS_NAMES.get(st)}: {msg}")
    if not has_device:
        for what, mask in (("partial and full lists", lists()),
                           ("partial lists only", lists(full=False))):
            st, msg = sparse(kernel, mask)
            check(f"forward_block_sparse with {what} passes the checks ('no device')",
                  st == NO_DEVICE, f"{STATUS_NAMES.get(st)}: {msg}")
    kernel.release()


def self_test(path=None, out=print):
    """Checks the bindings against the real library without torch or a GPU.
    Returns the number of failed checks."""
    check = Checks(out)

    def status_of(thunk):
        try:
            thunk()
            return OK, ""
        except FlashjitError as e:
            return e.status, e.message

    check("sizeof(DLTensor) is 48 bytes", ctypes.sizeof(DLTensor) == 48,
          str(ctypes.sizeof(DLTensor)))
    check("sizeof(flashjit_attention_spec_t) is 432 bytes",
          ctypes.sizeof(AttentionSpec) == 432, str(ctypes.sizeof(AttentionSpec)))
    offsets = {name: getattr(AttentionSpec, name).offset for name in SPEC_OFFSETS}
    check("the spec's fields sit at flashjit.h's offsets", offsets == SPEC_OFFSETS, str(offsets))
    lib = Library(path)
    out(f"     library: {lib.path}")
    version, api = lib.version()
    out(f"     flashjit {version}, C API {api}")
    check("C API version", api == C_API_VERSION, f"{api} != {C_API_VERSION}")
    for code, name in STATUS_NAMES.items():
        check(f"status {code} is '{name}'", lib.status_name(code) == name,
              lib.status_name(code))

    ctx = Context(lib, cache_dir="")  # memory-only cache
    has_device, reason = ctx.device()
    out(f"     chip {ctx.chip()}, GPU: {'yes' if has_device else 'no (' + reason + ')'}")
    b, h, s, d = 2, 4, 40, 64
    kernel = ctx.compile(d, "bf16", causal=True, num_heads=h)
    name, config = kernel.describe()
    check("compile names the kernel", name == f"flashjit_fwd_d{d}_bf16_causal_h{h}_kv{h}",
          name)
    check("compile reports its tile config", config.split(":")[0] in ("wgmma_cluster", "wgmma_persistent", "wgmma", "mma_sync", "cuda_core"), config)
    _, family_config = ctx.compile(d, "bf16", causal=True, num_heads=h,
                                   config="cuda_core").describe()
    check("compile with a family builds that family", family_config.startswith("cuda_core:"),
          family_config)
    st, msg = status_of(lambda: ctx.compile(d, "bf16", num_heads=h, config="tpu"))
    check("an unknown family is an invalid argument",
          st == INVALID_ARGUMENT and "unknown kernel family 'tpu'" in msg,
          f"{STATUS_NAMES.get(st)}: {msg}")

    _, hinted = ctx.compile(d, "bf16", causal=True, num_heads=h, seqlen=8192).describe()
    check("a seqlen hint compiles (no tuning database: the default choice)",
          hinted == config, f"{hinted} != {config}")
    st, msg = status_of(lambda: ctx.compile(d, "bf16", num_heads=h, seqlen=-1))
    check("a negative seqlen hint is an invalid argument",
          st == INVALID_ARGUMENT and "seqlen must be 0" in msg,
          f"{STATUS_NAMES.get(st)}: {msg}")

    st, msg = status_of(lambda: ctx.compile(48, "bf16", num_heads=h))
    check("head dim 48 is unsupported", st == UNSUPPORTED and "head dim 48" in msg,
          f"{STATUS_NAMES.get(st)}: {msg}")
    # The library reads struct_size from this struct: a nonzero byte past
    # what it knows (its sizeof) must be refused.
    class Longer(ctypes.Structure):
        _fields_ = [("spec", AttentionSpec), ("future", ctypes.c_int64)]
    longer = Longer(make_spec(d, "bf16", False, h, h), 7)
    longer.spec.struct_size = ctypes.sizeof(Longer)
    st, msg = status_of(lambda: ctx._compile_spec(longer))
    past = ctypes.sizeof(AttentionSpec)
    check(f"a spec field past version {C_API_VERSION} is refused",
          st == UNSUPPORTED and f"byte {past}" in msg,
          f"{STATUS_NAMES.get(st)}: {msg}")

    def args(**change):
        t = {n: fake_bhsd(0x10000000 * (i + 1), b, h, s, d)
             for i, n in enumerate(("q", "k", "v", "o"))}
        t["lse"] = TensorArg(0x50000000, [b, h, s], [h * s, s, 1], "f32")
        t.update(change)
        return [t[n] for n in ("q", "k", "v", "o", "lse")]

    def forward(tensors, scale=None):
        return status_of(kernel.bind(*tensors, scale=scale))

    bad = {
        "q with 3 dimensions": (dict(q=TensorArg(0x10000000, [b, h, s], None, "bf16")),
                                "q has 3 dimensions"),
        "k of int8": (dict(k=fake_bhsd(0x20000000, b, h, s, d, "int8")), "k has dtype int8"),
        "v on the CPU": (dict(v=TensorArg(0x30000000, [b, h, s, d], None, "bf16",
                                          device_type=KDL_CPU)), "v is on kDLCPU"),
        "o of f16 for a bf16 kernel": (dict(o=fake_bhsd(0x40000000, b, h, s, d, "f16")),
                                       "o is f16"),
        "q of another head dim": (dict(q=fake_bhsd(0x10000000, b, h, s, 128)),
                                  "q head dim is 128"),
        "lse of bf16": (dict(lse=TensorArg(0x50000000, [b, h, s], None, "bf16")),
                        "lse has dtype bf16"),
        "q at an odd byte offset": (dict(q=TensorArg(0x10000000, [b, h, s, d], None, "bf16",
                                                     byte_offset=2)), "16-byte aligned"),
    }
    for what, (change, expect) in bad.items():
        st, msg = forward(args(**change))
        check(f"forward refuses {what}", st == INVALID_ARGUMENT and expect in msg,
              f"{STATUS_NAMES.get(st)}: {msg}")
    if not has_device:
        st, msg = forward(args())
        check("forward without a GPU is 'no device'", st == NO_DEVICE, f"{STATUS_NAMES.get(st)}: {msg}")
        compact = args(**{n: fake_bhsd(0x10000000 * (i + 1), b, h, s, d, strides=False)
                          for i, n in enumerate(("q", "k", "v", "o"))})
        st, msg = forward(compact, scale=0.125)
        check("null strides and an explicit scale pass the checks", st == NO_DEVICE,
              f"{STATUS_NAMES.get(st)}: {msg}")
    else:
        out("     a GPU is present: skipped the forward calls that would launch")
    if lib.has("flashjit_kernel_forward_block_sparse"):
        self_test_block_sparse(check, ctx, kernel, args, has_device, status_of)
    else:
        check("the library has flashjit_kernel_forward_block_sparse (C API 3)", False,
              f"{lib.path} lacks it")
    kernel.release()
    ctx.close()
    out(f"self-test: {len(check.failed)} failed" if check.failed else "self-test: all passed")
    return len(check.failed)
