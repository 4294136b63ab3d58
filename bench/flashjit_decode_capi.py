"""ctypes bindings for the decode part of libflashjit.so's C API
(flashjit_decode_*, C API version 5; flashjit.h).

Why: the decode benchmark times flashjit beside PyTorch in one process, on
the peers' own tensors, through the C ABI as any foreign runtime would.
Built on flashjit_capi (its Library, TensorArg and errors); needs neither
torch nor a GPU for its self_test(), which checks the struct layout and the
argument checks against the real library.

  python3 bench/flashjit_decode_capi.py --lib build/runtime/libflashjit.so
"""

import argparse
import ctypes
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashjit_capi  # noqa: E402
from flashjit_capi import (DTYPE_CODES, INVALID_ARGUMENT, NO_DEVICE, OK,  # noqa: E402
                           STATUS_NAMES, FlashjitError, TensorArg)
from self_check import Checks  # noqa: E402

DECODE_API_VERSION = 5


class DecodeSpec(ctypes.Structure):
    """flashjit_decode_spec_t."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("head_dim", ctypes.c_int64),
                ("dtype", ctypes.c_int32), ("causal", ctypes.c_int32),
                ("num_heads", ctypes.c_int64), ("num_kv_heads", ctypes.c_int64),
                ("q_len", ctypes.c_int64), ("page_size", ctypes.c_int64),
                ("block_n", ctypes.c_int64), ("stages", ctypes.c_int64),
                ("l2_prefetch", ctypes.c_int64)]


def make_decode_spec(head_dim=128, dtype="bf16", num_heads=32, num_kv_heads=8, q_len=1,
                     page_size=0, causal=True, block_n=0, stages=0, l2_prefetch=0):
    return DecodeSpec(ctypes.sizeof(DecodeSpec), head_dim, DTYPE_CODES[dtype],
                      1 if causal else 0, num_heads, num_kv_heads, q_len, page_size,
                      block_n, stages, l2_prefetch)


def bind(lib):
    """Declares the decode entry points on a flashjit_capi.Library."""
    P, status = ctypes.POINTER, ctypes.c_int
    DL = P(flashjit_capi.DLTensor)
    sigs = {
        "flashjit_decode_kernel_compile": (status, [ctypes.c_void_p, P(DecodeSpec),
                                                    P(ctypes.c_void_p)]),
        "flashjit_decode_kernel_release": (status, [ctypes.c_void_p]),
        "flashjit_decode": (status, [ctypes.c_void_p] + [DL] * 7
                            + [ctypes.c_int64, ctypes.c_int64, ctypes.c_double,
                               ctypes.c_void_p]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib.lib, name)
        fn.restype, fn.argtypes = restype, argtypes


class DecodeKernel:
    def __init__(self, lib, ctx, spec):
        self.lib, self.handle, self.spec = lib, ctypes.c_void_p(), spec
        lib.call("flashjit_decode_kernel_compile", ctx.handle, ctypes.byref(spec),
                 ctypes.byref(self.handle))

    def release(self):
        if self.handle:
            self.lib.call("flashjit_decode_kernel_release", self.handle)
            self.handle = ctypes.c_void_p()

    def bind(self, q, k, v, kv_lens, o, lse, block_table=None, max_kv_len=0,
             num_splits=0, scale=None, stream=None):
        """A thunk that runs one decode step (TensorArgs; raises
        FlashjitError): the arguments are marshalled once, so timing the
        thunk times the library's own work."""
        args = (self.handle, ctypes.byref(q.dl), ctypes.byref(k.dl), ctypes.byref(v.dl),
                ctypes.byref(kv_lens.dl),
                ctypes.byref(block_table.dl) if block_table is not None else None,
                ctypes.byref(o.dl), ctypes.byref(lse.dl), int(max_kv_len), int(num_splits),
                float("nan") if scale is None else float(scale),
                ctypes.c_void_p(stream) if stream else None)
        keep = (q, k, v, kv_lens, o, lse, block_table)

        def run():
            _ = keep
            self.lib.call("flashjit_decode", *args)
        return run


def self_test(path=None, out=print):
    """Checks the decode bindings against the library (no torch, no GPU).
    Returns the number of failed checks."""
    check = Checks(out)

    def status_of(thunk):
        try:
            thunk()
            return OK, ""
        except FlashjitError as e:
            return e.status, e.message

    check("sizeof(flashjit_decode_spec_t) is 80 bytes", ctypes.sizeof(DecodeSpec) == 80,
          str(ctypes.sizeof(DecodeSpec)))
    lib = flashjit_capi.Library(path)
    _, api = lib.version()
    check(f"C API version {DECODE_API_VERSION} or later", api >= DECODE_API_VERSION, str(api))
    if api < DECODE_API_VERSION:
        return len(check.failed)
    bind(lib)
    ctx = flashjit_capi.Context(lib, cache_dir="", chip="sm_90a")
    try:
        has_device, _ = ctx.device()
        st, msg = status_of(lambda: DecodeKernel(lib, ctx, make_decode_spec(q_len=17)))
        check("q_len 17 is an invalid argument", st == INVALID_ARGUMENT and "1 to 16" in msg,
              f"{STATUS_NAMES.get(st)}: {msg}")
        bad = make_decode_spec()
        bad.struct_size = 8
        st, msg = status_of(lambda: DecodeKernel(lib, ctx, bad))
        check("a short struct_size is refused", st == INVALID_ARGUMENT and
              "flashjit_decode_spec_init" in msg, msg)
        kernel = DecodeKernel(lib, ctx, make_decode_spec(num_heads=8, num_kv_heads=2, q_len=2))
        b, h, hkv, d, cap = 3, 8, 2, 128, 500
        q = TensorArg(0x10000000, [b, 2, h, d], None, "bf16")
        k = TensorArg(0x20000000, [b, cap, hkv, d], None, "bf16")
        v = TensorArg(0x30000000, [b, cap, hkv, d], None, "bf16")
        o = TensorArg(0x40000000, [b, 2, h, d], None, "bf16")
        lse = TensorArg(0x50000000, [b, h, 2], None, "f32")
        lens = TensorArg(0x60000000, [b], None, "i32")
        if not has_device:
            st, msg = status_of(kernel.bind(q, k, v, lens, o, lse))
            check("good arguments reach the launch (no GPU here)", st == NO_DEVICE,
                  f"{STATUS_NAMES.get(st)}: {msg}")
        short = TensorArg(0x60000000, [b - 1], None, "i32")
        st, msg = status_of(kernel.bind(q, k, v, short, o, lse))
        check("kv_lens of the wrong length is refused",
              st == INVALID_ARGUMENT and "kv_lens has 2 entries" in msg, msg)
        st, msg = status_of(kernel.bind(q, k, v, lens, o, lse, scale=math.inf))
        check("an infinite scale is refused", st == INVALID_ARGUMENT and "scale" in msg, msg)
        kernel.release()
    finally:
        ctx.close()
    return len(check.failed)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lib", default=None, help="libflashjit.so (default: flashjit_capi's)")
    args = p.parse_args(argv)
    failed = self_test(args.lib)
    print(f"{'FAILED' if failed else 'passed'}: decode bindings self-test")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
