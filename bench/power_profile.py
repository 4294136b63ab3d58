#!/usr/bin/env python3
"""Sustained rate, power and clock of flashjit and its peers, one shape at a time.

Why: in long runs an H100 holds its power limit by lowering its clock, so a
kernel's rate there is its work per joule, not its rate at boost clock. This
runs each kernel back to back for a few seconds while nvidia-smi samples the
board's power draw and SM clock, and prints, per kernel and shape: TFLOP/s,
watts, MHz, TFLOP per joule and TFLOP/s per GHz (the rate the clock alone
would give). Phases alternate between kernels for several rounds, so drift
hits all alike.

  python3 bench/power_profile.py --shapes 128:n:8192,64:c:2048 --seconds 3 \\
      --flashjit new=build/runtime/libflashjit.so --peers sdpa-cudnn --json out.json

A shape is HEAD_DIM:{n,c}:SEQLEN[:HEADS] (c: causal), at batch x seqlen = 16k
tokens and hidden 2048 (the benchmark's convention) unless HEADS is given:
128:n:8k:33 runs 33 heads, which change how many rounds of tiles the grid
takes. --q-scale 4 multiplies Q by 4: the scores then spread 4 times
wider than N(0,1) inputs give (spread 1), which decides how often a row
outgrows its first tile's max. The libraries'
libMLIR/libLLVM must be on LD_LIBRARY_PATH before Python starts.
"""

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_bench  # noqa: E402
import bench_report  # noqa: E402
import flashjit_capi  # noqa: E402

QUERY = "timestamp,power.draw,clocks.sm,temperature.gpu"
# Why the clock is below its maximum (power cap, thermal, ...), where this
# nvidia-smi knows the field under either of its names.
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")


def parse_shape(text):
    try:
        d, mask, s, *heads = text.split(":")
        if mask not in ("n", "c") or len(heads) > 1:
            raise ValueError
        d, s = int(d), attention_bench.int_list(s)[0]
        h = int(heads[0]) if heads else 2048 // d
        if h < 1:
            raise ValueError
        return d, mask == "c", s, h
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a shape is HEAD_DIM:n|c:SEQLEN[:HEADS] such as 128:n:8k, got '{text}'")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="128:n:8k",
                   type=lambda t: [parse_shape(x) for x in t.split(",") if x],
                   help="comma-separated HEAD_DIM:n|c:SEQLEN (default 128:n:8k)")
    p.add_argument("--seconds", type=float, default=3.0, help="length of one phase (default 3)")
    p.add_argument("--rounds", type=int, default=2, help="phases per kernel and shape (default 2)")
    p.add_argument("--flashjit", action="append", default=[],
                   help="LABEL=LIB[@CONFIG], repeatable (default flashjit=$FLASHJIT_LIB)")
    p.add_argument("--peers", default="sdpa-cudnn",
                   help="comma-separated SDPA backends: sdpa-cudnn, sdpa-flash (default sdpa-cudnn)")
    p.add_argument("--q-scale", type=float, default=1.0,
                   help="multiply Q by this: the scores spread that much wider than with "
                        "N(0,1) inputs (default 1)")
    p.add_argument("--sample-ms", type=int, default=50, help="nvidia-smi sampling period")
    p.add_argument("--json", default=None, help="write every phase and its samples here")
    args = p.parse_args(argv)
    if args.seconds <= 0.5 or args.rounds < 1:
        p.error("--seconds must be above 0.5 and --rounds at least 1")
    if not (args.q_scale > 0 and math.isfinite(args.q_scale)):
        p.error("--q-scale must be a positive finite number")
    if not args.flashjit:
        args.flashjit = [f"flashjit={os.environ.get('FLASHJIT_LIB', '')}"]
    return args


class PowerLog:
    """nvidia-smi sampling in the background; samples(t0, t1) gives those
    taken between two host times (seconds since the epoch)."""

    def __init__(self, period_ms):
        self.rows, self.error = [], None
        query = QUERY
        for field in REASON_FIELDS:
            try:
                probe = subprocess.run(["nvidia-smi", f"--query-gpu={QUERY},{field}",
                                        "--format=csv"], capture_output=True, text=True)
            except OSError:
                break  # reported below, where nvidia-smi is started
            if probe.returncode == 0:
                query = f"{QUERY},{field}"
                break
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits",
                 f"-lms={period_ms}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        except OSError as e:
            self.proc, self.error = None, f"cannot start nvidia-smi: {e}"
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            fields = [f.strip() for f in line.split(",")]
            try:
                stamp = datetime.datetime.strptime(fields[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                self.rows.append({"t": stamp, "watts": float(fields[1]), "mhz": float(fields[2]),
                                  "celsius": float(fields[3]),
                                  "reasons": fields[4] if len(fields) > 4 else "?"})
            except (ValueError, IndexError):
                continue  # a header or a field nvidia-smi cannot read

    def samples(self, t0, t1):
        return [r for r in self.rows if t0 <= r["t"] <= t1]

    def close(self):
        if self.proc:
            self.proc.terminate()


def sustained(torch, fn, seconds):
    """Calls fn back to back for about `seconds`; returns (ms per call, host
    start, host end) of the timed part, after a short warm-up."""
    batch = attention_bench.calls_per_window(torch, fn, warmup=3, window_ms=20.0)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    # One batch queued ahead of the one running: the host's clock then
    # follows the GPU's work, and the GPU never waits for the host.
    t0 = time.time()
    start.record()
    calls, ahead = 0, None
    while time.time() - t0 < seconds:
        for _ in range(batch):
            fn()
        calls += batch
        done = torch.cuda.Event()
        done.record()
        if ahead is not None:
            ahead.synchronize()
        ahead = done
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls, t0, time.time()


def kernels_for(torch, args, shape, fjs, q, k, v, o, lse):
    """(label, fn) of every kernel to profile at this shape."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    d, causal, s, _ = shape
    out = []
    for label, fj in fjs:
        meta = {"flashjit_kernels": {}}
        kernel = fj.kernel(d, causal, q.shape[1], s, meta)
        to = flashjit_capi.TensorArg.from_torch
        out.append((label, kernel.bind(to(q), to(k), to(v), to(o), to(lse),
                                       stream=torch.cuda.current_stream().cuda_stream)))
    backends = {"sdpa-cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa-flash": SDPBackend.FLASH_ATTENTION}
    for name in [x for x in args.peers.split(",") if x]:
        if name not in backends:
            raise SystemExit(f"error: unknown peer '{name}' (sdpa-cudnn, sdpa-flash)")

        def call(backend=backends[name]):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out.append((name, call))
    return out


def main(argv=None):
    args = parse_args(argv)
    import torch

    fjs = []
    for spec in args.flashjit:
        label, _, rest = spec.partition("=")
        lib, _, config = rest.partition("@")
        # Memory-only caches: variants built from one commit share cache keys.
        fj = attention_bench.Flashjit(torch, lib or None, config or None, cache_dir="")
        if fj.error:
            raise SystemExit(f"error: {label}: {fj.error}")
        fjs.append((label, fj))
    log = PowerLog(args.sample_ms)
    if log.error:
        raise SystemExit(f"error: {log.error}")
    phases = []
    try:
        for shape in args.shapes:
            d, causal, s, h = shape
            b = max(1, 16384 // s)
            flops = bench_report.forward_flops(b, h, s, d, causal)
            q, k, v, o = attention_bench.make_inputs(torch, b, h, s, d, "bhsd")
            q.mul_(args.q_scale)
            lse = torch.empty(b, h, s, dtype=torch.float32, device="cuda")
            kernels = kernels_for(torch, args, shape, fjs, q, k, v, o, lse)
            for r in range(args.rounds):
                for label, fn in kernels:
                    ms, t0, t1 = sustained(torch, fn, args.seconds)
                    # The first half second settles the clock; the rest counts.
                    rows = log.samples(t0 + 0.5, t1)
                    phase = {"kernel": label, "head_dim": d, "causal": causal, "seqlen": s,
                             "heads": h, "batch": b, "round": r, "ms": ms, "tflops": bench_report.tflops(flops, ms),
                             "samples": rows}
                    if rows:
                        phase["watts"] = statistics.mean(x["watts"] for x in rows)
                        phase["mhz"] = statistics.mean(x["mhz"] for x in rows)
                        phase["reasons"] = statistics.mode(x["reasons"] for x in rows)
                    phases.append(phase)
                    print(f"{label:>12} d{d} {'causal' if causal else 'non-causal'} s{s} h{h} "
                          f"round {r}: {phase['tflops']:.1f} TFLOP/s, "
                          f"{phase.get('watts', float('nan')):.0f} W, "
                          f"{phase.get('mhz', float('nan')):.0f} MHz, {len(rows)} samples",
                          flush=True)
    finally:
        log.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "phases": phases}, f, indent=1)
    print("\nkernel | shape | TFLOP/s | W | MHz | TFLOP/J | TFLOP/s per GHz | event reasons")
    keys = []
    for ph in phases:
        key = (ph["kernel"], ph["head_dim"], ph["causal"], ph["seqlen"], ph["heads"])
        if key not in keys:
            keys.append(key)
    for key in keys:
        mine = [ph for ph in phases
                if (ph["kernel"], ph["head_dim"], ph["causal"], ph["seqlen"], ph["heads"]) == key
                and "watts" in ph]
        if not mine:
            print(f"{key[0]} | d{key[1]} s{key[3]} h{key[4]} | no power samples")
            continue
        tf = statistics.median(ph["tflops"] for ph in mine)
        w = statistics.median(ph["watts"] for ph in mine)
        mhz = statistics.median(ph["mhz"] for ph in mine)
        print(f"{key[0]} | d{key[1]} {'causal' if key[2] else 'non-causal'} s{key[3]} h{key[4]} | "
              f"{tf:.1f} | {w:.0f} | {mhz:.0f} | {tf / w:.3f} | {tf / (mhz / 1000):.1f} | "
              f"{mine[-1]['reasons']}")


if __name__ == "__main__":
    main()
