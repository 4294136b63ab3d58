#!/usr/bin/env python3
"""Same-run A/B of flashjit tile configs against cuDNN, point by point.

Why: choosing a config per length (the heuristic's rules) needs every
candidate timed beside cuDNN in one process, on the same inputs, with the
rounds interleaved so that drifting clocks (at the power cap an H100 lowers
them) hit every variant alike. attention_bench.py times one config per run;
this times several per point:

  python3 bench/config_ab.py --lib .device-bundle/lib/libflashjit.so \\
      --head-dims 64 --seqlens 512,1k --no-causal \\
      --configs default,wgmma:m192:n128:s2:w16,wgmma_persistent:m192:n128:s2:w16

"default" is flashjit's own choice for the call's length. A config that
does not apply to a point (another head dim) shows its error. Each output
is checked against cuDNN's (attention_bench.py's tolerances); a variant
whose output differs is marked FAIL. The exit code is 1 when one differs.
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_bench as ab  # noqa: E402
import bench_report  # noqa: E402
import flashjit_capi  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lib", default=os.environ.get("FLASHJIT_LIB"))
    p.add_argument("--head-dims", type=ab.int_list, default=[64, 128])
    p.add_argument("--seqlens", type=ab.int_list, default=[512, 1024])
    mask = p.add_mutually_exclusive_group()
    mask.add_argument("--causal", dest="causal", action="store_const", const=[True])
    mask.add_argument("--no-causal", dest="causal", action="store_const", const=[False])
    p.add_argument("--configs", default="default",
                   help="comma-separated: default (flashjit's choice) or tile configs")
    p.add_argument("--total-tokens", type=int, default=16384)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--target-ms", type=float, default=50)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    args.causal = args.causal or [False, True]
    args.configs = [c for c in args.configs.split(",") if c]
    return args


def main(argv=None):
    args = parse_args(argv)
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    lib = flashjit_capi.Library(args.lib)
    ctx = flashjit_capi.Context(lib, device=torch.cuda.current_device())
    to = flashjit_capi.TensorArg.from_torch
    rows, failed = [], False
    for d in args.head_dims:
        for causal in args.causal:
            for s in args.seqlens:
                b, h = args.total_tokens // s, args.hidden // d
                flops = bench_report.forward_flops(b, h, s, d, causal)
                q, k, v, o = ab.make_inputs(torch, b, h, s, d, "bhsd")
                lse = torch.empty(b, h, s, dtype=torch.float32, device="cuda")
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal).float()

                def cudnn():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                variants = {"cudnn": cudnn}
                row = {"head_dim": d, "causal": causal, "seqlen": s, "results": {}}
                for name in args.configs:
                    try:
                        kernel = ctx.compile(d, "bf16", causal=causal, num_heads=h,
                                             config=None if name == "default" else name,
                                             seqlen=s)
                        launch = kernel.bind(to(q), to(k), to(v), to(o), to(lse),
                                             stream=torch.cuda.current_stream().cuda_stream)
                        o.fill_(float("nan"))
                        launch()
                        torch.cuda.synchronize()
                        diff = o.float() - ref
                        rel = float(diff.norm() / ref.norm())
                        ok = bool(torch.isfinite(o).all()) and rel <= ab.TOL_REL and \
                            float(diff.abs().max()) <= ab.TOL_ABS
                        row["results"][name] = {"config": kernel.describe()[1],
                                                "rel_err": rel, "ok": ok, "tflops": []}
                        failed |= not ok
                        variants[name] = launch
                    except Exception as e:
                        row["results"][name] = {"error": ab.reason(e)}
                row["results"]["cudnn"] = {"tflops": []}
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    for _ in range(args.rounds):
                        for name, fn in variants.items():
                            t = ab.time_cuda(torch, fn, 3, args.repeats, args.target_ms)
                            row["results"][name]["tflops"].append(
                                bench_report.tflops(flops, t["ms"]))
                rows.append(row)
                c = statistics.median(row["results"]["cudnn"]["tflops"])
                cells = []
                for name in args.configs:
                    r = row["results"][name]
                    if "error" in r:
                        cells.append(f"{name}: n/a ({r['error'][:60]})")
                        continue
                    m = statistics.median(r["tflops"])
                    r["median"], r["vs_cudnn"] = m, m / c
                    cells.append(f"{name} [{r['config']}]: {m:.1f} {m / c:.3f}x"
                                 f"{'' if r['ok'] else ' FAIL'}")
                row["results"]["cudnn"]["median"] = c
                print(f"d{d} {'causal' if causal else 'dense'} s{s} cuDNN {c:.1f} | "
                      + " | ".join(cells), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
