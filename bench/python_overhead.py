#!/usr/bin/env python3
"""Host time per call of flashjit.attention against the C API called directly.

Why: the Python package promises to cost at most a few microseconds of host
time over the C API. This measures it on one GPU: the same kernel on the
same tensors, called N times back to back, host time only (the GPU work is
a tiny problem, and the launches are synchronised only between samples, so
the queue never fills and the GPU never stalls the host). Per call:

* c_api: flashjit_kernel_forward through ctypes with prepared DLTensors and
  preallocated O and LSE (what a hand-written binding at its leanest pays);
* attention: flashjit.attention(q, k, v), which allocates O and LSE and
  returns O, as a PyTorch user calls it (through flashjit._fastpath, the
  C++ eager path, where the package was built with it);
* attention_python: the same call with the extension switched off, the
  pure-Python plan path every installation has;
* allocation: torch.empty_like(q) and the LSE tensor alone, the part of
  attention's time any PyTorch op that returns new tensors pays;
* kernel_forward: flashjit.Kernel.forward, the framework-free layer, which
  borrows its DLPack tensors on every call.

Samples of each kind are interleaved, so drifting clocks hit all alike; the
figures are medians over samples of the mean time per call in a sample.

  python3 bench/python_overhead.py [--calls 200] [--samples 51] [--json PATH]
  (FLASHJIT_LIBRARY points the package at libflashjit.so)
"""

import argparse
import ctypes
import json
import math
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=200, help="calls per sample")
    p.add_argument("--samples", type=int, default=51, help="samples per kind")
    p.add_argument("--shape", default="1,8,2,64,128",
                   help="batch,heads,kv_heads,seqlen,head_dim (default: tiny)")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--json", help="write the figures here")
    return p.parse_args()


def main():
    args = parse_args()
    import torch
    import flashjit
    from flashjit import _dlpack
    from flashjit import _torch_eager as glue
    from flashjit._library import library

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to measure", file=sys.stderr)
        return 77
    b, h, hkv, s, d = (int(x) for x in args.shape.split(","))
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    q = torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(b, hkv, s, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(b, hkv, s, d, device=dev, dtype=torch.bfloat16)
    o = torch.empty_like(q)
    lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)

    # The kernel flashjit.attention runs for these inputs, and its outputs
    # as a check that both paths compute the same thing.
    expected = flashjit.attention(q, k, v, causal=args.causal)
    spec = flashjit.AttentionSpec(head_dim=d, dtype="bf16", causal=args.causal, num_heads=h,
                                  num_kv_heads=hkv)
    kernel = flashjit.get_kernel(spec, 0, seqlen=s)

    lib = library()
    forward = lib.fn("flashjit_kernel_forward")
    handle = kernel._live()
    pointers = [_dlpack.borrow(t) for t in (q, k, v, o, lse)]
    pq, pk, pv, po, plse = (p.pointer for p in pointers)
    stream = ctypes.c_void_p(torch.cuda.current_stream(dev).cuda_stream)
    nan = math.nan

    def c_api():
        status = forward(handle, pq, pk, pv, po, plse, nan, stream)
        if status:
            lib.check(status)

    def attention():
        flashjit.attention(q, k, v, causal=args.causal)

    native = glue._native

    def attention_python():  # run with glue._native off (see the sample loop)
        flashjit.attention(q, k, v, causal=args.causal)

    def allocation():
        torch.empty_like(q)
        torch.empty((b, h, s), dtype=torch.float32, device=dev)

    def kernel_forward():
        kernel.forward(q, k, v, o, lse, stream=stream.value)

    c_api()
    torch.cuda.synchronize()
    if not torch.equal(o, expected):
        print("error: the C API call and flashjit.attention disagree", file=sys.stderr)
        return 1

    kinds = {"c_api": c_api, "attention": attention, "attention_python": attention_python,
             "allocation": allocation, "kernel_forward": kernel_forward}
    per_call = {name: [] for name in kinds}
    clock = time.perf_counter_ns

    def sample(name, fn):
        glue._native = None if name == "attention_python" else native
        calls = range(args.calls)
        start = clock()
        for _ in calls:
            fn()
        elapsed = clock() - start
        glue._native = native
        torch.cuda.synchronize()
        return elapsed / args.calls / 1000.0

    for name, fn in kinds.items():  # warm-up
        sample(name, fn)
    for _ in range(args.samples):
        for name, fn in kinds.items():
            per_call[name].append(sample(name, fn))

    medians = {name: statistics.median(v) for name, v in per_call.items()}
    result = {
        "gpu": torch.cuda.get_device_name(dev),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "flashjit": str(flashjit.version()),
        "extension": native is not None,
        "kernel": kernel.name,
        "config": kernel.config,
        "shape": args.shape,
        "causal": args.causal,
        "calls_per_sample": args.calls,
        "samples": args.samples,
        "median_us_per_call": medians,
        "attention_over_c_api_us": medians["attention"] - medians["c_api"],
        "attention_over_c_api_and_allocation_us":
            medians["attention"] - medians["c_api"] - medians["allocation"],
        "attention_python_over_c_api_us": medians["attention_python"] - medians["c_api"],
        "kernel_forward_over_c_api_us": medians["kernel_forward"] - medians["c_api"],
    }
    print(f"{result['gpu']}, torch {result['torch']}, Python {result['python']}, "
          f"kernel {kernel.name} ({kernel.config}), shape {args.shape}")
    print("host time per call, median of "
          f"{args.samples} samples of {args.calls} calls (us):")
    for name, value in medians.items():
        print(f"  {name:15} {value:7.2f}")
    print(f"flashjit.attention over the C API: {result['attention_over_c_api_us']:.2f} us "
          f"({result['attention_over_c_api_and_allocation_us']:.2f} us besides allocating "
          "O and LSE)")
    print(f"the pure-Python path over the C API: "
          f"{result['attention_python_over_c_api_us']:.2f} us"
          + ("" if native else " (flashjit._fastpath is not built: both are this path)"))
    print(f"Kernel.forward over the C API: {result['kernel_forward_over_c_api_us']:.2f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
