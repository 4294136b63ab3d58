#!/usr/bin/env python3
"""flashjit's varlen prefill beside its dense kernel on the same tokens.

Why: a packed batch (AttentionSpec::varlen) must cost no more than the dense
kernel where the lengths are equal (the varlen kernel reads each sequence's
offsets and bounds its stores, nothing more), and many short sequences must
beat padding them to a tile. For each point this runs `flashjit run --json`
(dense: the heuristic's family, and the varlen families' dense form) and
`flashjit run --varlen --json` (the heuristic's varlen kernel, then each
varlen family) one after another in
this process run; each run checks its result against the float64 reference
on a sample of rows and times its kernel with CUDA events after warm-up
(median of --iters launches). Points are repeated --rounds times, dense and
varlen interleaved, and the median of the rounds' medians is reported.

FLOPs: 4 * heads * head_dim * seqlen_q * seqlen_k per sequence (halved when
causal), summed over the sequences; the padded dense run counts the same
useful FLOPs as the varlen one (its padding is wasted work), so its
TFLOP/s column is comparable.

  python3 bench/varlen_bench.py --flashjit build/tools/flashjit --quick
  python3 bench/varlen_bench.py --out-md bench/results/varlen-nvidia-h100-80gb-hbm3.md
"""

import argparse
import json
import statistics
import subprocess
import sys


def run(flashjit, args):
    cmd = [flashjit, "run", "--json"] + args
    proc = subprocess.run(cmd, capture_output=True, text=True)
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        sys.stderr.write(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
        return None
    if not out.get("passed"):
        sys.stderr.write("check failed: " + " ".join(cmd) + "\n" + proc.stdout)
    return out


def shape_args(heads, kv_heads, head_dim, causal, iters, warmup):
    a = ["--heads", str(heads), "--kv-heads", str(kv_heads),
         "--head-dim", str(head_dim), "--dtype", "bf16",
         "--iters", str(iters), "--warmup", str(warmup)]
    return a + (["--causal"] if causal else [])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--flashjit", default="flashjit")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--points", help="comma list of point indices (0-2) to run")
    p.add_argument("--causal", choices=["both", "yes", "no"], default="both")
    p.add_argument("--out-md")
    p.add_argument("--out-json")
    opt = p.parse_args()

    # (name, batch, seqlen, padded seqlen for the dense run, heads, kv heads)
    points = [("4 x 4096", 4, 4096, 4096, 16, 16),
              ("16 x 1024", 16, 1024, 1024, 16, 16),
              ("8192 x 34 (dense: padded to 64)", 8192, 34, 64, 4, 4)]
    if opt.quick:
        points = points[:1]
    if opt.points:
        points = [points[int(i)] for i in opt.points.split(",")]
    flags = {"both": (False, True), "yes": (True,), "no": (False,)}[opt.causal]
    rows = []
    for name, batch, seqlen, padded, heads, kv_heads in points:
        for causal in flags:
            common = shape_args(heads, kv_heads, 128, causal, opt.iters, opt.warmup)
            check = ["--check-rows", "4" if batch > 64 else "8"]
            lengths = ",".join([str(seqlen)] * batch)
            runs = {
                "dense": ["--batch", str(batch), "--seqlen", str(padded),
                          "--layout", "bshd"] + check,
                "dense wgmma": ["--batch", str(batch), "--seqlen", str(padded),
                                "--layout", "bshd", "--config", "wgmma"] + check,
                "varlen": ["--varlen", lengths] + check,
                "varlen wgmma": ["--varlen", lengths, "--config", "wgmma"] + check,
                "varlen wgmma_persistent": ["--varlen", lengths, "--config",
                                            "wgmma_persistent"] + check,
                "varlen mma_sync": ["--varlen", lengths, "--config", "mma_sync"] + check,
            }
            # Many sequences: the heuristic's dense kernel is the reference
            # (generating the padded inputs twice would take most of a run).
            if batch > 64:
                del runs["dense wgmma"]
            times = {k: [] for k in runs}
            meta = {}
            # The many-sequence point generates its inputs for a while: one
            # round.
            for _ in range(opt.rounds if batch <= 64 else 1):
                for key, extra in runs.items():
                    out = run(opt.flashjit, common + extra)
                    if out is None:
                        continue
                    times[key].append(out["median_ms"])
                    meta[key] = {"config": out["config"], "passed": out["passed"],
                                 "kernel": out["kernel"]}
            # Useful FLOPs: the unpadded tokens.
            flops = 4.0 * batch * heads * 128 * seqlen * seqlen * (0.5 if causal else 1.0)
            row = {"point": name, "causal": causal, "flops": flops}
            for key, ts in times.items():
                if ts:
                    ms = statistics.median(ts)
                    row[key] = {"ms": ms, "tflops": flops / (ms * 1e-3) / 1e12,
                                **meta[key]}
            rows.append(row)
            print(json.dumps(row), flush=True)

    if opt.out_json:
        with open(opt.out_json, "w") as f:
            json.dump(rows, f, indent=2)
    if opt.out_md:
        keys = ["dense", "dense wgmma", "varlen", "varlen wgmma",
                "varlen wgmma_persistent", "varlen mma_sync"]
        lines = ["| point | causal | " + " | ".join(k + " TFLOP/s" for k in keys) +
                 " | varlen / dense | varlen wgmma / dense wgmma | best varlen / dense |",
                 "|" + " --- |" * (len(keys) + 5)]
        for r in rows:
            cells = []
            for k in keys:
                c = r.get(k)
                cells.append("-" if not c else
                             f"{c['tflops']:.1f} ({c['config']}{'' if c['passed'] else ', FAILED'})")
            def tf(k):
                return r[k]["tflops"] if k in r else float("nan")
            best = max(tf(k) for k in keys if k.startswith("varlen"))
            lines.append(f"| {r['point']} | {'yes' if r['causal'] else 'no'} | " +
                         " | ".join(cells) +
                         f" | {tf('varlen') / tf('dense'):.3f}"
                         f" | {tf('varlen wgmma') / tf('dense wgmma'):.3f}"
                         f" | {best / tf('dense'):.3f} |")
        with open(opt.out_md, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
