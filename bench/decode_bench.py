#!/usr/bin/env python3
"""flashjit's decode step beside PyTorch SDPA (flash, cuDNN) and a device copy.

Why: a decode step is a read of the KV cache, so its figure of merit is the
bandwidth of that read against what the GPU can copy, and against the
peers on the same shapes in the same run. For each (batch, KV length) this
times PyTorch SDPA's flash and cuDNN backends (one query token, GQA through
enable_gqa, contiguous cache), a device-to-device copy of the K+V bytes,
and flashjit: with --lib, in this process through the C API on the peers'
own tensors (compared with SDPA's output), and always through `flashjit
run --decode --json`, which checks the step against the float64 reference
on a sample of rows (contiguous and, with --page-sizes, paged). All timings are CUDA events around back-to-back
calls, after warm-up, medians.

Figures: GB/s = bytes of K and V read / time. The copy's rate counts the
bytes it reads and writes (the device copy bandwidth, about 3.0 TB/s on an
H100), so "vs copy" is the share of the copy bandwidth the decode reaches.

  python3 bench/decode_bench.py --flashjit build/tools/flashjit --quick
  python3 bench/decode_bench.py --out-md bench/results/decode-h100.md
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

DEFAULT_POINTS = ["1:2k", "1:16k", "1:64k", "1:128k", "8:16k", "8:64k", "8:128k",
                  "32:2k", "32:16k", "64:4k", "128:2k", "128:16k"]
QUICK_POINTS = ["1:2k", "1:64k", "8:64k", "128:2k"]


def size(text):
    text = text.lower()
    return int(text[:-1]) * 1024 if text.endswith("k") else int(text)


def parse_points(text):
    points = []
    for item in text.split(","):
        b, l = item.split(":")
        points.append((int(b), size(l)))
    return points


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--flashjit", default="flashjit", help="the flashjit binary")
    p.add_argument("--lib", default=None,
                   help="libflashjit.so: time flashjit in this process on the peers' own "
                        "tensors through the C API (default $FLASHJIT_LIB; without one, "
                        "through `flashjit run --decode`)")
    p.add_argument("--points", default=None,
                   help="batch:kv_len,... (default: a sweep of " + ",".join(DEFAULT_POINTS) + ")")
    p.add_argument("--quick", action="store_true", help="points " + ",".join(QUICK_POINTS))
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--page-sizes", default="", help="also time flashjit on paged caches, e.g. 16,64")
    p.add_argument("--kv-layouts", default="bhsd",
                   help="flashjit's contiguous cache layouts, the first in the main column: bhsd "
                        "(each head's keys together, as the peers' tensors here) and/or bshd")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--target-ms", type=float, default=20.0)
    p.add_argument("--json", default=None, help="write the results as JSON here")
    p.add_argument("--out-md", default=None, help="write the markdown table here")
    return p.parse_args(argv)


def time_cuda(torch, fn, repeats, target_ms, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    iters = max(1, min(1000, int(target_ms / max(start.elapsed_time(end), 1e-3))))
    samples = []
    for _ in range(repeats):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / iters)
    return statistics.median(samples)


def run_flashjit(args, b, l, page, layout="bshd"):
    cmd = [args.flashjit, "run", "--decode", "--json", "--batch", str(b), "--kv-len", str(l),
           "--kv-layout", layout,
           "--heads", str(args.heads), "--kv-heads", str(args.kv_heads),
           "--head-dim", str(args.head_dim), "--dtype", "bf16", "--q-len", "1",
           "--iters", str(args.repeats), "--warmup", "3", "--check-rows", "64"]
    if page:
        cmd += ["--page-size", str(page)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode not in (0, 2):
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    out = json.loads(proc.stdout)
    return {"gbps": out["gb_per_s"], "ms": out["median_ms"], "passed": out["passed"],
            "splits": out["splits"], "rel_error": out["rel_error"]}


class InProcess:
    """flashjit through the C API (flashjit_decode_capi) on torch tensors."""

    def __init__(self, path, heads, kv_heads, head_dim):
        import flashjit_capi
        import flashjit_decode_capi as dc
        self.dc = dc
        self.lib = flashjit_capi.Library(path)
        dc.bind(self.lib)
        self.ctx = flashjit_capi.Context(self.lib)
        self.kernel = dc.DecodeKernel(self.lib, self.ctx, dc.make_decode_spec(
            head_dim=head_dim, num_heads=heads, num_kv_heads=kv_heads))

    def step(self, torch, q, k, v):
        """A thunk for one step on q [b, h, 1, d], k, v [b, hkv, L, d] (the
        peers' layout, seen by flashjit as [b, L, hkv, d] through strides),
        and its outputs."""
        from flashjit_capi import TensorArg
        b, h, _, d = q.shape
        hkv, l = k.shape[1], k.shape[2]
        o = torch.empty(b, 1, h, d, device="cuda", dtype=q.dtype)
        lse = torch.empty(b, h, 1, device="cuda", dtype=torch.float32)
        lens = torch.full((b,), l, device="cuda", dtype=torch.int32)
        kv_strides = [hkv * l * d, d, l * d, 1]
        qa = TensorArg(q.data_ptr(), [b, 1, h, d], [h * d, h * d, d, 1], "bf16")
        ka = TensorArg(k.data_ptr(), [b, l, hkv, d], kv_strides, "bf16")
        va = TensorArg(v.data_ptr(), [b, l, hkv, d], kv_strides, "bf16")
        run = self.kernel.bind(qa, ka, va, TensorArg.from_torch(lens), TensorArg.from_torch(o),
                               TensorArg.from_torch(lse), max_kv_len=l,
                               stream=torch.cuda.current_stream().cuda_stream)
        return run, o, lens


def run_point(torch, args, b, l, in_process=None):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    h, hkv, d = args.heads, args.kv_heads, args.head_dim
    kv_bytes = 2 * b * l * hkv * d * 2
    row = {"batch": b, "kv_len": l, "kv_bytes": kv_bytes}
    q = torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, hkv, l, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, hkv, l, d, device="cuda", dtype=torch.bfloat16)
    for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                          ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel([backend]):
                ms = time_cuda(torch, lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                               args.repeats, args.target_ms)
            row[name] = {"gbps": kv_bytes / (ms * 1e-3) / 1e9, "ms": ms}
        except Exception as exc:  # a peer that cannot run is n/a
            row[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"}
    if in_process is not None:
        try:
            run, o, lens = in_process.step(torch, q, k, v)
            run()
            ref = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            got = o.transpose(1, 2).float()
            rel = ((got - ref.float()).norm() / ref.float().norm()).item()
            ms = time_cuda(torch, run, args.repeats, args.target_ms)
            row["flashjit"] = {"gbps": kv_bytes / (ms * 1e-3) / 1e9, "ms": ms,
                               "passed": bool(rel < 1e-2), "rel_error_vs_sdpa": rel,
                               "splits": "rule"}
        except Exception as exc:
            row["flashjit"] = {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}
    del q, k, v
    src = torch.empty(kv_bytes // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = time_cuda(torch, lambda: dst.copy_(src), args.repeats, args.target_ms)
    row["copy"] = {"gbps": 2 * kv_bytes / (ms * 1e-3) / 1e9, "ms": ms}
    del src, dst
    torch.cuda.empty_cache()
    layouts = [x for x in args.kv_layouts.split(",") if x]
    if in_process is None:
        row["flashjit"] = run_flashjit(args, b, l, 0, layouts[0])
    else:  # the CLI's run, checked against the float64 reference
        row["flashjit-cli"] = run_flashjit(args, b, l, 0, layouts[0])
    for layout in layouts[1:]:
        row[f"flashjit-{layout}"] = run_flashjit(args, b, l, 0, layout)
    for page in [int(x) for x in args.page_sizes.split(",") if x]:
        row[f"flashjit-p{page}"] = run_flashjit(args, b, l, page)
    return row


def fmt(entry):
    return f"{entry['gbps']:.0f}" if "gbps" in entry else "n/a"


def ratio(a, b):
    if "gbps" not in a or "gbps" not in b:
        return "n/a"
    return f"{a['gbps'] / b['gbps']:.2f}"


def table(rows, args):
    paged = [k for k in rows[0] if k.startswith("flashjit-")] if rows else []
    head = ["batch", "KV len", "flashjit GB/s", "splits"] + [f"{p} GB/s" for p in paged] + \
           ["SDPA flash", "SDPA cuDNN", "copy (r+w)", "vs copy", "vs cuDNN", "vs flash"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        fj = r["flashjit"]
        cells = [str(r["batch"]), f"{r['kv_len'] // 1024}k" if r["kv_len"] % 1024 == 0 else str(r["kv_len"]),
                 fmt(fj) + ("" if fj.get("passed", True) else " (FAILED check)"), str(fj.get("splits", ""))]
        cells += [fmt(r[p]) for p in paged]
        cells += [fmt(r["sdpa-flash"]), fmt(r["sdpa-cudnn"]), fmt(r["copy"]),
                  ratio(fj, r["copy"]), ratio(fj, r["sdpa-cudnn"]), ratio(fj, r["sdpa-flash"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    import torch
    points = parse_points(args.points) if args.points else \
        parse_points(",".join(QUICK_POINTS if args.quick else DEFAULT_POINTS))
    gpu = torch.cuda.get_device_name()
    in_process = None
    lib = args.lib or os.environ.get("FLASHJIT_LIB")
    if lib:
        in_process = InProcess(lib, args.heads, args.kv_heads, args.head_dim)
    rows = []
    for b, l in points:
        row = run_point(torch, args, b, l, in_process)
        rows.append(row)
        print(f"b={b} L={l}: flashjit {fmt(row['flashjit'])} GB/s, cuDNN {fmt(row['sdpa-cudnn'])}, "
              f"flash {fmt(row['sdpa-flash'])}, copy {fmt(row['copy'])}", flush=True)
        # Written after every point: a run cut short keeps what it measured.
        md = (f"Decode, {gpu}, bf16, {args.heads} query heads over {args.kv_heads} KV heads, head "
              f"dim {args.head_dim}, one query token; torch {torch.__version__}; flashjit's cache "
              f"{args.kv_layouts.split(',')[0]} (flashjit-P: paged, page size P)\n\n" +
              table(rows, args) + "\n")
        if args.out_md:
            with open(args.out_md, "w") as f:
                f.write(md)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"gpu": gpu, "torch": torch.__version__, "rows": rows}, f, indent=2)
    print(md)
    failed = [r for r in rows
              if not all(v.get("passed", True) for k, v in r.items() if k.startswith("flashjit"))
              or "gbps" not in r["flashjit"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
