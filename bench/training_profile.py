#!/usr/bin/env python3
"""Where one training step's time goes: flashjit against its peers, kernel
by kernel inside the step, host time per step, and the clock and power
each sustains.

Why: the training sweep (bench/training_bench.py) times whole autograd
steps back to back, and a step there can take longer than the sum of its
kernels timed alone (Nsight Compute). The difference is one of: gaps
where the GPU waits for the host, kernels besides the attention's
(copies, fills), or the kernels themselves running slower under sustained
load (a lower clock at the power limit). This tells them apart, per
backend and shape, on the same inputs as the sweep:

- trace: torch.profiler over --steps forward+backward steps after
  warm-up; per step, the period (one step's start to the next's), the
  sum of its GPU activities (kernels, copies, fills) and the idle time
  between them, and each kernel's median duration;
- host: the host's time to issue one step (no synchronisation);
- sustained: each backend's steps back to back for --seconds, in
  alternating rounds, with nvidia-smi sampling power and SM clock.

  python3 bench/training_profile.py --shapes 128:n:2048,128:n:16384 --json out.json

A shape is HEAD_DIM:{n,c}:SEQLEN (c: causal) at batch x seqlen =
--total-tokens tokens and hidden --hidden, as the sweep's. The library's
libMLIR/libLLVM must be on LD_LIBRARY_PATH before Python starts.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from power_profile import PowerLog, parse_shape, sustained  # noqa: E402
from training_bench import attention_fns, point_inputs, training_calls  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", type=lambda s: [parse_shape(x) for x in s.split(",") if x],
                   default=[parse_shape(x) for x in ("128:n:2048", "128:c:4096", "128:n:16384")])
    p.add_argument("--total-tokens", type=int, default=16384)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--peers", default="sdpa-cudnn")
    p.add_argument("--steps", type=int, default=8, help="steps traced per backend")
    p.add_argument("--seconds", type=float, default=2.0, help="sustained phase per backend")
    p.add_argument("--rounds", type=int, default=2, help="alternating sustained rounds")
    p.add_argument("--sample-ms", type=int, default=50, help="nvidia-smi sampling period")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    args.peers = [x for x in args.peers.split(",") if x]
    return args


def short_name(name):
    """A kernel's name without its template arguments and parameters."""
    for cut in ("(", "<"):
        name = name.split(cut)[0]
    return name[:60]


def device_activities(prof):
    """(start us, end us, name) of every GPU activity the profiler saw."""
    out = []
    for e in prof.events():
        kind = str(getattr(e, "device_type", ""))
        if kind.endswith("CUDA") and e.time_range.end > e.time_range.start:
            out.append((e.time_range.start, e.time_range.end, e.name))
    return sorted(out)


def trace(torch, fn, steps):
    """fn's steps under torch.profiler: per step the period, the GPU's busy
    and idle time (ms), and each activity's median duration (us)."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps + 1):
            fn()
        torch.cuda.synchronize()
    acts = device_activities(prof)
    per_step = len(acts) // (steps + 1)
    if per_step == 0 or len(acts) % (steps + 1):
        return {"error": f"{len(acts)} GPU activities in {steps + 1} steps: not one set a step"}
    periods, busy, kernels = [], [], {}
    for i in range(steps):
        mine = acts[i * per_step:(i + 1) * per_step]
        nxt = acts[(i + 1) * per_step][0]
        periods.append((nxt - mine[0][0]) / 1e3)
        covered, reach = 0.0, mine[0][0]
        for start, end, name in mine:
            covered += max(0.0, end - max(start, reach))
            reach = max(reach, end)
            kernels.setdefault(short_name(name), []).append(end - start)
        busy.append(covered / 1e3)
    period, active = statistics.median(periods), statistics.median(busy)
    return {"period_ms": period, "busy_ms": active, "idle_ms": period - active,
            "activities_per_step": per_step,
            "activities_us": {n: round(statistics.median(d), 1) for n, d in kernels.items()}}


def host_ms(torch, fn, calls=10):
    """The host's time to issue one step, the GPU kept busy ahead of it."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    issued = (time.perf_counter() - t0) / calls * 1e3
    torch.cuda.synchronize()
    return issued


def run_shape(torch, args, fns, shape, log):
    d, causal, s, _ = shape
    out, inputs, grad_o = point_inputs(torch, args, d, causal, s)
    steps = {}
    for name, fn in fns.items():
        _, steps[name], _ = training_calls(
            torch, lambda q, k, v, fn=fn: fn(q, k, v, causal), inputs, grad_o)
    fwd_flops = out["fwd_flops"]
    out["backends"] = {}
    for name, step in steps.items():
        out["backends"][name] = {"trace": trace(torch, step, args.steps),
                                 "host_ms": host_ms(torch, step), "sustained": []}
    for _ in range(args.rounds):
        for name, step in steps.items():
            ms, t0, t1 = sustained(torch, step, args.seconds)
            rows = log.samples(t0 + 0.2, t1)  # past the phase's first samples
            mean = (lambda key: statistics.fmean(r[key] for r in rows) if rows else None)
            out["backends"][name]["sustained"].append(
                {"ms": ms, "fwd_bwd_tflops": 3.5 * fwd_flops / ms / 1e9,
                 "watts": mean("watts"), "mhz": mean("mhz"), "samples": len(rows)})
    return out


def report(point):
    d, s = point["head_dim"], point["seqlen"]
    mask = "causal" if point["causal"] else "dense"
    print(f"\nhead dim {d} {mask} {point['batch']} x {s}")
    for name, r in point["backends"].items():
        t = r["trace"]
        sus = r["sustained"]
        rate = statistics.median(x["fwd_bwd_tflops"] for x in sus)
        clocks = "/".join(f"{x['mhz']:.0f}" for x in sus if x["mhz"])
        watts = "/".join(f"{x['watts']:.0f}" for x in sus if x["watts"])
        if "error" in t:
            print(f"  {name}: trace: {t['error']}")
        else:
            print(f"  {name}: period {t['period_ms']:.3f} ms, busy {t['busy_ms']:.3f}, idle "
                  f"{t['idle_ms']:.3f}; host {r['host_ms']:.3f} ms a step; sustained "
                  f"{rate:.1f} TFLOP/s at {clocks} MHz, {watts} W")
            for n, us in sorted(t["activities_us"].items(), key=lambda kv: -kv[1]):
                print(f"      {us:9.1f} us  {n}")


def main(argv=None):
    args = parse_args(argv)
    import torch
    fns = attention_fns(torch, args.peers)
    log = PowerLog(args.sample_ms)
    if log.error:
        print(f"power and clock: {log.error}", file=sys.stderr)
    points = []
    try:
        for shape in args.shapes:
            points.append(run_shape(torch, args, fns, shape, log))
            report(points[-1])
    finally:
        log.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "points": points}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
