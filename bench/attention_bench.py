#!/usr/bin/env python3
"""flashjit's forward attention beside PyTorch's, on one GPU, in one process.

Why: a speed claim only means something against the peers run on the same
inputs, the same stream and the same clock. This runs flashjit (through
libflashjit.so's C API with ctypes and DLPack tensors), PyTorch SDPA with
its flash, cuDNN and efficient backends, and FlexAttention (torch.compile)
over FlashAttention's convention: bf16, batch x seqlen = 16k, hidden 2048,
seqlen 512..16k, head dim 64 and 128, causal and not; FLOPs 4*b*h*s*s*d,
half when causal. It checks flashjit's output against SDPA's, and prints a
markdown table (also --json, --out-md). A peer that fails is n/a with its
reason, never fatal.

  python3 bench/attention_bench.py --quick                 # a GPU with torch
  python3 bench/attention_bench.py --self-test --lib build/runtime/libflashjit.so

The library's own libMLIR/libLLVM must be on LD_LIBRARY_PATH before Python
starts. The exit code is 1 when flashjit's output differs from SDPA's.
"""

import argparse
import datetime
import os
import shlex
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_report  # noqa: E402
import flashjit_capi  # noqa: E402
from self_check import Checks  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
QUICK_SEQLENS = [1024, 4096]
# flashjit's output against SDPA's, both bf16 from f32 accumulators.
TOL_REL, TOL_ABS, TOL_LSE = 1e-2, 5e-2, 1e-2


def int_list(text):
    try:
        return [int(x.lower().rstrip("k")) * (1024 if x.lower().endswith("k") else 1)
                for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lib", default=None,
                   help="libflashjit.so (default $FLASHJIT_LIB, else .device-bundle/lib/libflashjit.so)")
    p.add_argument("--self-test", action="store_true",
                   help="check the ctypes bindings against the library and the report "
                        "formatting; needs neither torch nor a GPU")
    p.add_argument("--head-dims", type=int_list, default=[64, 128], help="default 64,128")
    p.add_argument("--seqlens", type=int_list, default=None,
                   help="default 512,1k,2k,4k,8k,16k (--quick: 1k,4k)")
    causal = p.add_mutually_exclusive_group()
    causal.add_argument("--causal", dest="causal", action="store_const", const=[True],
                        help="causal only")
    causal.add_argument("--no-causal", dest="causal", action="store_const", const=[False],
                        help="non-causal only")
    p.set_defaults(causal=[False, True])
    p.add_argument("--quick", action="store_true",
                   help="seqlens 1k,4k, fewer repeats: a smoke run of a minute or two")
    p.add_argument("--peers", default=",".join(bench_report.PEERS),
                   help="which peers to run (default all: %(default)s)")
    p.add_argument("--layout", choices=["bhsd", "bshd"], default="bhsd",
                   help="memory layout of q, k, v, o; every backend gets the same [B,H,S,D] "
                        "views (default bhsd, contiguous)")
    p.add_argument("--total-tokens", type=int, default=16384, help="batch x seqlen")
    p.add_argument("--hidden", type=int, default=2048, help="heads x head dim")
    p.add_argument("--warmup", type=int, default=None, help="calls before timing (default 3)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats, median reported (default 7)")
    p.add_argument("--target-ms", type=float, default=None,
                   help="length of one timed repeat of back-to-back calls (default 100)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON")
    p.add_argument("--out-md", metavar="PATH", nargs="?", const="",
                   help="write the results page; no PATH or a directory: "
                        "<dir, default bench/results>/<gpu-name>.md")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--flashjit-config", metavar="FAMILY|CONFIG", default=None,
                   help="run this kernel family's heuristic choice (e.g. mma_sync, to time "
                        "one template where another is the default) or this whole tile "
                        "config, instead of flashjit's own choice")
    args = p.parse_args(argv)
    unknown = set(args.peers.split(",")) - set(bench_report.PEERS)
    if unknown:
        p.error(f"unknown peers {sorted(unknown)}: choose from {bench_report.PEERS}")
    args.peers = [x for x in bench_report.PEERS if x in args.peers.split(",")]
    args.seqlens = args.seqlens or (QUICK_SEQLENS if args.quick else DEFAULT_SEQLENS)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    args.repeats = args.repeats or (3 if args.quick else 7)
    args.target_ms = args.target_ms or (30.0 if args.quick else 100.0)
    return args


def sweep(args):
    """(head_dim, causal, seqlen, batch, heads) of every point, in order."""
    points = []
    for d in args.head_dims:
        for causal in args.causal:
            for s in args.seqlens:
                if args.hidden % d or args.total_tokens % s:
                    raise SystemExit(f"error: head dim {d} must divide hidden {args.hidden} "
                                     f"and seqlen {s} must divide {args.total_tokens} tokens")
                points.append((d, causal, s, args.total_tokens // s, args.hidden // d))
    return points


def reason(exc):
    """One line saying why a backend did not run."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else ""
    return f"{type(exc).__name__}: {line[:240]}"


def calls_per_window(torch, fn, warmup, window_ms, most=None):
    """Calls fn `warmup` times, times one more call between CUDA events, and
    returns how many back-to-back calls fill about window_ms (at least 1,
    at most `most`)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    calls = max(1, int(window_ms / max(start.elapsed_time(end), 1e-3)))
    return min(calls, most) if most else calls


def time_cuda(torch, fn, warmup, repeats, target_ms):
    """Median ms per call of back-to-back calls between CUDA events on the
    current stream, over `repeats` repeats of about target_ms each."""
    iters = calls_per_window(torch, fn, warmup, target_ms, most=1000)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(repeats):
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / iters)
    return window_stats(samples, iters)


def window_stats(samples, iters):
    """time_cuda's dict of per-call times, one sample per window."""
    return {"ms": statistics.median(samples), "ms_min": min(samples), "ms_max": max(samples),
            "iters": iters, "repeats": len(samples)}


def time_cuda_rounds(torch, fns, warmup, repeats, target_ms, settle=False, max_calls=1000):
    """time_cuda for several functions at once: every round times one window
    of each, in turn, so that drifting clocks weigh on all of them alike.
    settle: each timed window follows an untimed one of the same function,
    so that it starts at the clock and power draw its own calls bring the
    GPU to, not at those of the function timed before it (at the power
    limit a window of about 30 ms otherwise inherits its predecessor's
    clock: bench/results/training-nvidia-h100-80gb-hbm3.md).
    max_calls: the most calls in one window (a fast kernel's window is then
    shorter than target_ms; None: no limit, for windows of seconds).
    fns: name -> callable. Returns name -> time_cuda's dict, or
    {"error": why} for a function that raised (it leaves the rounds)."""
    iters, out = {}, {}
    for name, fn in fns.items():
        try:
            iters[name] = calls_per_window(torch, fn, warmup, target_ms, most=max_calls)
        except Exception as e:
            out[name] = {"error": reason(e)}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = {name: [] for name in iters}
    for _ in range(repeats):
        for name in list(samples):
            try:
                for _ in range(iters[name] if settle else 0):
                    fns[name]()
                start.record()
                for _ in range(iters[name]):
                    fns[name]()
                end.record()
                end.synchronize()
            except Exception as e:
                out[name] = {"error": reason(e)}
                del samples[name]
                continue
            samples[name].append(start.elapsed_time(end) / iters[name])
    for name, xs in samples.items():
        out[name] = window_stats(xs, iters[name])
    return out


def environment(torch, args, fj_version, chip):
    """What the results page says about where and how it ran."""
    idx = torch.cuda.current_device()
    driver = None
    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", str(idx)],
            capture_output=True, text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import triton
        triton_version = triton.__version__
    except Exception:  # absent or broken: the page says nothing
        triton_version = None
    cmd = " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0])] + sys.argv[1:])
    return {
        "gpu": torch.cuda.get_device_name(idx),
        "driver": driver,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "triton": triton_version,
        "flashjit": f"{fj_version}, chip {chip}" if fj_version else None,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "command": f"python3 {cmd}",
        # The tile configs flashjit picks depend on it (one per seqlen bucket).
        "tuning_db": os.environ.get("FLASHJIT_TUNING_DB")
        or "FLASHJIT_TUNING_DB not set (flashjit's default path, if a database is there)",
        "dtype": "bf16", "layout": args.layout,
        "total_tokens": args.total_tokens, "hidden": args.hidden,
        "tolerance": f"fails above relative {TOL_REL:g} or max abs {TOL_ABS:g}",
        "flashjit_kernels": {},
    }


class Flashjit:
    """flashjit through the C API, or the reason it cannot run."""

    def __init__(self, torch, path, config=None, cache_dir=None):
        """cache_dir: None (the library's default), "" (memory only)."""
        self.error, self.kernels, self.version, self.chip = None, {}, None, None
        self.config = config
        try:
            self.lib = flashjit_capi.Library(path)
            self.version, _ = self.lib.version()
            self.ctx = flashjit_capi.Context(self.lib, device=torch.cuda.current_device(),
                                             cache_dir=cache_dir)
            self.chip = self.ctx.chip()
            has_device, why = self.ctx.device()
            if not has_device:
                self.error = f"flashjit sees no GPU: {why}"
        except (OSError, flashjit_capi.FlashjitError) as e:
            self.error = f"cannot use {path or flashjit_capi.default_library_path()}: {e}"

    def kernel(self, d, causal, heads, seqlen, meta):
        """The kernel for this shape, compiled for its seqlen: with a tuning
        database, each length gets its bucket's config."""
        key = (d, causal, heads, seqlen)
        if key not in self.kernels:
            t0 = time.perf_counter()
            k = self.ctx.compile(d, "bf16", causal=causal, num_heads=heads,
                                 config=self.config, seqlen=seqlen)
            name, config = k.describe()
            meta["flashjit_kernels"][f"{name} at seqlen {seqlen}"] = {
                "config": config, "compile_ms": (time.perf_counter() - t0) * 1e3}
            self.kernels[key] = k
        return self.kernels[key]


def make_inputs(torch, b, h, s, d, layout):
    """q, k, v (random) and o as [B, H, S, D] views of `layout` memory."""
    def alloc(fill):
        if layout == "bshd":
            return fill(b, s, h, d).transpose(1, 2)
        return fill(b, h, s, d)
    randn = lambda *shape: torch.randn(*shape, dtype=torch.bfloat16, device="cuda")  # noqa: E731
    empty = lambda *shape: torch.empty(*shape, dtype=torch.bfloat16, device="cuda")  # noqa: E731
    return alloc(randn), alloc(randn), alloc(randn), alloc(empty)


def run_point(torch, args, fj, flex, meta, d, causal, s, b, h):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    flops = bench_report.forward_flops(b, h, s, d, causal)
    point = {"head_dim": d, "causal": causal, "seqlen": s, "batch": b, "heads": h,
             "flops": flops, "results": {}}
    timing = dict(warmup=args.warmup, repeats=args.repeats, target_ms=args.target_ms)
    q, k, v, o = make_inputs(torch, b, h, s, d, args.layout)
    lse = torch.empty(b, h, s, dtype=torch.float32, device="cuda")

    # Each backend's call, run once (and checked) here, timed below in
    # interleaved rounds.
    calls = {}
    fj_out = fj_lse = None
    try:
        if fj.error:
            raise RuntimeError(fj.error)
        kernel = fj.kernel(d, causal, h, s, meta)
        to = flashjit_capi.TensorArg.from_torch
        launch = kernel.bind(to(q), to(k), to(v), to(o), to(lse),
                             stream=torch.cuda.current_stream().cuda_stream)
        o.fill_(float("nan"))  # poisoned: a row the kernel skips shows up
        lse.fill_(float("nan"))
        launch()
        torch.cuda.synchronize()
        fj_out, fj_lse = o.clone(), lse.clone()
        calls["flashjit"] = launch
    except Exception as e:
        point["results"]["flashjit"] = {"error": reason(e)}

    backends = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
                "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION}
    reference = None
    for name in [p for p in args.peers if p in backends]:
        def call(backend=backends[name]):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        try:
            out = call()
            torch.cuda.synchronize()
            if reference is None:
                reference = (name, out)
            calls[name] = call
        except Exception as e:
            point["results"][name] = {"error": reason(e)}

    flex_first_call_s = None
    if "flex" in args.peers:
        try:
            compiled, create_block_mask = flex()
            mask = None
            if causal:
                mask = create_block_mask(lambda b_, h_, qi, ki: qi >= ki, None, None, s, s,
                                         device=q.device)
            t0 = time.perf_counter()
            compiled(q, k, v, block_mask=mask)
            torch.cuda.synchronize()
            flex_first_call_s = time.perf_counter() - t0
            calls["flex"] = lambda: compiled(q, k, v, block_mask=mask)
        except Exception as e:
            point["results"]["flex"] = {"error": reason(e)}

    for name, t in time_cuda_rounds(torch, calls, **timing).items():
        if "error" not in t:
            t["tflops"] = bench_report.tflops(flops, t["ms"])
        point["results"][name] = t
    if "flex" in calls:
        point["results"]["flex"]["first_call_s"] = flex_first_call_s

    point["check"] = check_output(torch, q, k, v, causal, fj_out, fj_lse, reference)
    return point


def check_output(torch, q, k, v, causal, out, lse, reference):
    """flashjit's o against the first SDPA backend that ran; its LSE against
    the flash backend's where that op is there."""
    if out is None:
        return {"error": "flashjit did not run"}
    if reference is None:
        return {"error": "no SDPA backend ran to compare with"}
    name, ref = reference
    diff = out.float() - ref.float()
    finite = bool(torch.isfinite(out).all())
    result = {"reference": name,
              "max_abs_err": float(diff.abs().max()),
              "rel_err": float(diff.norm() / ref.float().norm().clamp_min(1e-30)),
              "finite": finite}
    result["ok"] = finite and result["rel_err"] <= TOL_REL and result["max_abs_err"] <= TOL_ABS
    try:
        ref_lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)[1]
        ref_lse = ref_lse[..., : q.shape[2]].float()
        result["lse_max_abs_err"] = float((lse - ref_lse).abs().max())
        result["ok"] = result["ok"] and result["lse_max_abs_err"] <= TOL_LSE
    except Exception as e:  # the private op moved or is absent: o is still checked
        result["lse_note"] = reason(e)
    return result


def flex_factory(torch):
    """torch.compile(flex_attention), built once on first use."""
    cache = {}

    def get():
        if "fn" not in cache:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            cfg = torch._dynamo.config
            for knob in ("recompile_limit", "cache_size_limit"):  # one compile per shape
                if hasattr(cfg, knob):
                    setattr(cfg, knob, max(getattr(cfg, knob), 256))
            # The backward alone is timed on a retained graph, which a
            # compiled backward that donates its saved buffers refuses (the
            # document mask's); donation saves memory, not time.
            try:
                import torch._functorch.config as functorch
                functorch.donated_buffer = False
            except (ImportError, AttributeError):
                pass
            cache["fn"] = (torch.compile(flex_attention, dynamic=False), create_block_mask)
        return cache["fn"]
    return get


def results_page_path(arg, gpu):
    if arg and not os.path.isdir(arg):
        return arg
    folder = arg or os.path.join(HERE, "results")
    return os.path.join(folder, bench_report.slug(gpu) + ".md")


def progress(i, n, point):
    parts = []
    for name in bench_report.BACKENDS:
        r = point["results"].get(name)
        if r is not None:
            parts.append(f"{name} {r['tflops']:.1f}" if "tflops" in r else f"{name} n/a")
    c = point["check"]
    check = ("check n/a" if "error" in c else
             f"check {'ok' if c['ok'] else 'MISMATCH'} (rel {c['rel_err']:.1e})")
    print(f"[{i}/{n}] d={point['head_dim']} {'causal' if point['causal'] else 'full'} "
          f"s={point['seqlen']} b={point['batch']} h={point['heads']}: "
          f"{', '.join(parts)} TFLOP/s; {check}", file=sys.stderr, flush=True)


def run_bench(args):
    import torch
    if not torch.cuda.is_available():
        print("error: torch sees no CUDA GPU; the benchmark needs one "
              "(--self-test runs without)", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    torch.empty(1, device="cuda")  # CUDA initialised: flashjit joins torch's context
    fj = Flashjit(torch, args.lib, args.flashjit_config)
    if fj.error:
        print(f"warning: flashjit is n/a: {fj.error}", file=sys.stderr)
    meta = environment(torch, args, fj.version, fj.chip)
    flex = flex_factory(torch)
    plan, points = sweep(args), []
    md_path = results_page_path(args.out_md, meta["gpu"]) if args.out_md is not None else None

    def save():  # after every point: a run cut short keeps what it measured
        if args.json:
            with open(args.json, "w") as f:
                f.write(bench_report.to_json(meta, points) + "\n")
        if md_path:
            os.makedirs(os.path.dirname(md_path) or ".", exist_ok=True)
            with open(md_path, "w") as f:
                f.write(bench_report.markdown(meta, points, args.peers))

    for i, (d, causal, s, b, h) in enumerate(plan, 1):
        try:
            point = run_point(torch, args, fj, flex, meta, d, causal, s, b, h)
        except Exception as e:  # e.g. out of memory for the inputs: the sweep goes on
            why = {"error": reason(e)}
            point = {"head_dim": d, "causal": causal, "seqlen": s, "batch": b, "heads": h,
                     "flops": bench_report.forward_flops(b, h, s, d, causal),
                     "results": {n: why for n in ["flashjit"] + args.peers}, "check": why}
        torch.cuda.empty_cache()  # the point's tensors are gone: give their memory back
        points.append(point)
        progress(i, len(plan), point)
        c = point["check"]
        if c.get("ok") is False:
            print(f"!!! MISMATCH: flashjit vs {c['reference']} at d={d} causal={causal} s={s}: "
                  f"max abs {c['max_abs_err']:.3e}, rel {c['rel_err']:.3e}, "
                  f"lse {c.get('lse_max_abs_err', float('nan')):.3e}, finite={c['finite']}",
                  file=sys.stderr, flush=True)
        save()

    print(f"# {meta['gpu']} (driver {meta['driver']}, torch {meta['torch']})\n")
    print(bench_report.table(points, args.peers))
    for note in bench_report.unavailable_notes(points):
        print(note)
    bad = bench_report.mismatches(points)
    if bad:
        print(f"\n!!! flashjit's output differs from SDPA's at {len(bad)} point(s)", file=sys.stderr)
    if md_path:
        print(f"\nwrote {md_path}", file=sys.stderr)
    return 1 if bad else 0


def self_test_plan(out=print):
    """The sweep the options ask for. Returns failures."""
    check = Checks(out)

    plan = sweep(parse_args([]))
    check("the default sweep has 2 head dims x 2 x 6 seqlens", len(plan) == 24, str(len(plan)))
    check("d64 s512 runs batch 32 x 32 heads", plan[0] == (64, False, 512, 32, 32), str(plan[0]))
    check("d128 causal s16k runs batch 1 x 16 heads", plan[-1] == (128, True, 16384, 1, 16),
          str(plan[-1]))
    quick = parse_args(["--quick", "--head-dims", "128", "--causal"])
    check("--quick seqlens", quick.seqlens == QUICK_SEQLENS, str(quick.seqlens))
    check("--causal alone", sweep(quick) == [(128, True, 1024, 16, 16), (128, True, 4096, 4, 16)],
          str(sweep(quick)))
    args = parse_args(["--seqlens", "2k,8192", "--no-causal", "--peers", "flex,sdpa-flash"])
    check("seqlens in k", args.seqlens == [2048, 8192], str(args.seqlens))
    check("peers in table order", args.peers == ["sdpa-flash", "flex"], str(args.peers))
    check("flashjit's own choice by default", args.flashjit_config is None,
          str(args.flashjit_config))
    check("--flashjit-config names a family",
          parse_args(["--flashjit-config", "mma_sync"]).flashjit_config == "mma_sync")
    check("results page named for the GPU", results_page_path("", "NVIDIA H100 80GB HBM3")
          == os.path.join(HERE, "results", "nvidia-h100-80gb-hbm3.md"))
    return len(check.failed)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.self_test:
        failed = bench_report.self_test() + self_test_plan()
        try:
            failed += flashjit_capi.self_test(args.lib)
        except OSError as e:
            print(f"FAIL cannot load the library: {e}")
            failed += 1
        print(f"{failed} check(s) failed" if failed else "all checks passed")
        return 1 if failed else 0
    return run_bench(args)


if __name__ == "__main__":
    sys.exit(main())
