#!/usr/bin/env python3
"""Forward+backward (training) sweep: flashjit against SDPA flash, cuDNN and
FlexAttention, same inputs, same run; and peak memory against the math
backend.

Why: the backward's criteria (issue "Backward pass") are stated against
peers measured side by side: bf16, batch x seqlen = 16k tokens, hidden 2048,
head dims 64 and 128, causal and not. Every backend runs through PyTorch
autograd (torch.autograd.grad of the attention's output), so each pays the
same framework cost; flashjit through its package (flashjit.attention, the
flashjit::attention_backward op). FLOPs by the FlashAttention convention:
forward 4 b h s^2 d (half when causal), backward 2.5x the forward.

Times: CUDA events around back-to-back calls after warm-up, median of
--repeats windows; each round times one window of every backend's
forward+backward and backward in turn, so that the GPU's drifting clocks
weigh on all of them alike (bench/attention_bench.py's time_cuda_rounds).
These steps run at the H100's power limit, where a window's clock
depends on what ran before it: a backend timed after a slower, cooler one
(SDPA's FlashAttention-2 backend) gained up to about 10% on an H100. So flashjit is
timed against each peer in turn, the two alternating (--together: all
backends in one fixed order a round), and each timed window follows an
untimed window of the same calls (--no-settle drops it);
bench/training_profile.py measures the clock and power of each backend.
Before timing,
each point checks flashjit's dQ, dK, dV against the first SDPA backend
that ran (relative error of the norm).

  python3 bench/training_bench.py --json out.json --out-md out.md
  python3 bench/training_bench.py --memory-only --memory-seqlens 8192,32768,131072
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention_bench import flex_factory, int_list, reason, time_cuda_rounds  # noqa: E402

TOL_REL = 2e-2  # dQ/dK/dV against a peer's, norm-relative (both bf16)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--head-dims", type=int_list, default=[64, 128])
    p.add_argument("--seqlens", type=int_list, default=[1024, 2048, 4096, 8192, 16384])
    p.add_argument("--causal", choices=["both", "yes", "no"], default="both")
    p.add_argument("--total-tokens", type=int, default=16384)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--peers", default="sdpa-flash,sdpa-cudnn,flex")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--target-ms", type=float, default=40.0)
    p.add_argument("--together", dest="pairwise", action="store_false",
                   help="time every backend in one fixed order a round instead of flashjit "
                        "against each peer in turn")
    p.add_argument("--no-settle", dest="settle", action="store_false",
                   help="time each window straight after the previous backend's (no untimed "
                        "window of the same calls before it)")
    p.add_argument("--memory-seqlens", type=int_list, default=[8192, 32768, 131072])
    p.add_argument("--memory-only", action="store_true")
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--self-test", action="store_true",
                   help="check the timing groups and the table's ratios (no torch, no GPU)")
    p.add_argument("--out-md", help="write a markdown table here")
    args = p.parse_args(argv)
    args.causal = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    args.peers = [x for x in args.peers.split(",") if x]
    return args


def attention_fns(torch, peers):
    """name -> f(q, k, v, causal) returning O [B, H, S, D], differentiable."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import flashjit

    fns = {"flashjit": lambda q, k, v, causal: flashjit.attention(q, k, v, causal=causal)}
    backends = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
                "sdpa-math": SDPBackend.MATH}
    for name in peers:
        if name in backends:
            def sdpa(q, k, v, causal, backend=backends[name]):
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            fns[name] = sdpa
    if "flex" in peers:
        flex = flex_factory(torch)
        masks = {}

        def flex_fn(q, k, v, causal):
            compiled, create_block_mask = flex()
            mask = None
            if causal:
                key = (q.shape[2], k.shape[2])
                if key not in masks:
                    masks[key] = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None,
                                                   key[0], key[1], device=q.device)
                mask = masks[key]
            return compiled(q, k, v, block_mask=mask)
        fns["flex"] = flex_fn
    return fns


def training_calls(torch, fn, inputs, grad_o):
    """The gradients of fn(*inputs) for grad_o, and two calls to time: the
    forward+backward, and the backward alone (of a retained graph)."""
    out = fn(*inputs)
    grads = torch.autograd.grad(out, inputs, grad_o, retain_graph=True)
    torch.cuda.synchronize()

    def fwd_bwd():
        torch.autograd.grad(fn(*inputs), inputs, grad_o)

    def bwd():
        torch.autograd.grad(out, inputs, grad_o, retain_graph=True)
    return grads, fwd_bwd, bwd


def rates(both, back, fwd_flops):
    """Medians and rates (FLOPs: 3.5x and 2.5x the forward's) of one backend."""
    return {"fwd_bwd_ms": both["ms"], "bwd_ms": back["ms"],
            "fwd_bwd_tflops": 3.5 * fwd_flops / both["ms"] / 1e9,
            "bwd_tflops": 2.5 * fwd_flops / back["ms"] / 1e9}


def time_trainings(torch, fns, inputs, grad_o, fwd_flops, timing, pairwise=True,
                   calls_of=training_calls, timer=time_cuda_rounds):
    """Each backend's gradients of fn(*inputs) for grad_o, and its timings:
    forward+backward and backward windows in rounds (time_cuda_rounds).
    pairwise: flashjit against each peer in turn, the two alternating
    window by window, so that each follows the other alike; else every
    backend in one fixed order a round. fns: name -> fn. Returns (name ->
    gradients of those that ran and were timed, name -> rates() or
    {"error": why}), results in fns' order; flashjit's rates are those of
    its first pair, with every pair's under "pairs". calls_of and timer:
    training_calls and time_cuda_rounds, or stand-ins (self_test)."""
    calls, grads, failed = {}, {}, {}
    for name, fn in fns.items():
        try:
            grads[name], calls[(name, "fwd_bwd")], calls[(name, "bwd")] = calls_of(
                torch, fn, inputs, grad_o)
        except Exception as e:
            failed[name] = reason(e)
    peers = [n for n in fns if n != "flashjit" and n not in failed]
    groups = [[n for n in fns if n not in failed]]
    if pairwise and "flashjit" in fns and "flashjit" not in failed and peers:
        groups = [["flashjit", n] for n in peers]
    pairs, results = {}, {}
    for group in groups:
        times = timer(torch, {(n, k): calls[(n, k)] for n in group
                              for k in ("fwd_bwd", "bwd")}, **timing)
        for name in group:
            both, back = times[(name, "fwd_bwd")], times[(name, "bwd")]
            why = both.get("error") or back.get("error")
            rated = {"error": why} if why else rates(both, back, fwd_flops)
            if name == "flashjit" and len(groups[0]) == 2 and group[0] == "flashjit":
                pairs[group[1]] = dict(rated)
            if name not in results:
                results[name] = rated
    if pairs and "error" not in results["flashjit"]:
        results["flashjit"]["pairs"] = pairs
    for name in fns:
        if name in failed:
            results[name] = {"error": failed[name]}
        elif "error" in results[name]:
            failed[name] = results[name]["error"]
    results = {n: results[n] for n in fns}
    return {n: g for n, g in grads.items() if n not in failed}, results


def point_inputs(torch, args, d, causal, s):
    """The point's description (shape and forward FLOPs) and its inputs: q,
    k, v (requiring grad) and dO, bf16 [b, h, s, d] at b x s =
    --total-tokens and h = --hidden / d, seeded by the shape (the same for
    bench/training_profile.py)."""
    b, h = args.total_tokens // s, args.hidden // d
    fwd_flops = 4 * b * h * s * s * d // (2 if causal else 1)
    point = {"head_dim": d, "causal": causal, "seqlen": s, "batch": b, "heads": h,
             "fwd_flops": fwd_flops}
    gen = torch.Generator(device="cuda").manual_seed(s * 131 + d)

    def make():
        return torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    q, k, v = (make().requires_grad_() for _ in range(3))
    return point, (q, k, v), make()


def run_point(torch, args, fns, d, causal, s):
    point, (q, k, v), grad_o = point_inputs(torch, args, d, causal, s)
    fwd_flops = point["fwd_flops"]
    point["results"] = {}
    timing = dict(warmup=args.warmup, repeats=args.repeats, target_ms=args.target_ms,
                  settle=args.settle)
    grads, point["results"] = time_trainings(
        torch, {name: (lambda q, k, v, fn=fn: fn(q, k, v, causal)) for name, fn in fns.items()},
        (q, k, v), grad_o, fwd_flops, timing, pairwise=args.pairwise)
    reference = next(((n, g) for n, g in grads.items() if n != "flashjit"), None)
    mine = grads.get("flashjit")
    if "flashjit" in point["results"] and "error" not in point["results"]["flashjit"] \
            and reference is not None:
        errs = [float((a.float() - r.float()).norm() / r.float().norm().clamp_min(1e-30))
                for a, r in zip(mine, reference[1])]
        finite = all(bool(torch.isfinite(a).all()) for a in mine)
        point["check"] = {"reference": reference[0], "rel_err_dq_dk_dv": errs,
                          "ok": finite and max(errs) <= TOL_REL}
    return point


def peak_memory(torch, fns, s, d=128, h=16):
    """Peak device memory (bytes) of one forward+backward at batch 1 beyond
    q, k, v and dO, per backend; an error string where it does not fit."""
    out = {}
    for name, fn in fns.items():
        torch.cuda.empty_cache()
        try:
            q, k, v = (torch.randn(1, h, s, d, device="cuda", dtype=torch.bfloat16)
                       .requires_grad_() for _ in range(3))
            grad_o = torch.randn(1, h, s, d, device="cuda", dtype=torch.bfloat16)
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            grads = torch.autograd.grad(fn(q, k, v, True), (q, k, v), grad_o)
            torch.cuda.synchronize()
            out[name] = torch.cuda.max_memory_allocated() - base
            del grads
        except torch.cuda.OutOfMemoryError:
            out[name] = "out of memory"
        except Exception as e:
            out[name] = reason(e)
        finally:
            q = k = v = grad_o = None
    return out


def markdown(results):
    lines = []
    names = [n for n in ["flashjit", "sdpa-flash", "sdpa-cudnn", "flex"]
             if any(n in p["results"] for p in results["points"])]
    if results["points"]:
        head = ["head dim", "mask", "batch x seqlen"]
        head += [f"{n} fwd+bwd TFLOP/s" for n in names] + ["flashjit bwd TFLOP/s"]
        head += [f"vs {n}" for n in names[1:]] + ["check"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for p in results["points"]:
            r = p["results"]

            def rate(n, key="fwd_bwd_tflops"):
                x = r.get(n, {})
                return f"{x[key]:.1f}" if key in x else "-"
            row = [str(p["head_dim"]), "causal" if p["causal"] else "dense",
                   f"{p['batch']} x {p['seqlen']}"]
            row += [rate(n) for n in names] + [rate("flashjit", "bwd_tflops")]
            for n in names[1:]:
                a, b = r.get("flashjit", {}), r.get(n, {})
                a = a.get("pairs", {}).get(n, a)  # flashjit's time beside this peer
                row.append(f"{b['fwd_bwd_ms'] / a['fwd_bwd_ms']:.2f}"
                           if "fwd_bwd_ms" in a and "fwd_bwd_ms" in b else "-")
            c = p.get("check", {})
            row.append(("ok" if c.get("ok") else "FAILED") + f" ({max(c['rel_err_dq_dk_dv']):.1e})"
                       if c else "-")
            lines.append("| " + " | ".join(row) + " |")
    if results.get("memory"):
        lines += ["", "Peak memory of one forward+backward beyond q, k, v and dO (16 heads, "
                  "head dim 128, causal, batch 1):", ""]
        mem_names = sorted({n for m in results["memory"].values() for n in m})
        lines += ["| seqlen | " + " | ".join(mem_names) + " |",
                  "|---|" + "---|" * len(mem_names)]
        for s, m in results["memory"].items():
            cells = [f"{m[n] / 2**20:.0f} MiB" if isinstance(m.get(n), int) else str(m.get(n, "-"))
                     for n in mem_names]
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def self_test(out=print):
    """The rounds each backend is timed in and the ratios the table shows,
    with stand-ins for the calls and the timer. Returns the failed checks."""
    from self_check import Checks
    check = Checks(out)
    groups = []

    def calls_of(torch, fn, inputs, grad_o):
        if fn is None:
            raise RuntimeError("no such backend here")
        return ("grads", fn), (fn, "fwd_bwd"), (fn, "bwd")

    def timer(torch, calls, **timing):
        groups.append([name for name, kind in calls if kind == "fwd_bwd"])
        # flashjit runs 1 ms beside cuDNN and 2 ms beside SDPA flash; the
        # peers' own times: cuDNN 1.5 ms, SDPA flash 3 ms.
        slow = any(name == "sdpa-flash" for name, _ in calls)
        ms = {"flashjit": 2.0 if slow else 1.0, "sdpa-cudnn": 1.5, "sdpa-flash": 3.0}
        return {key: {"ms": ms[key[0]]} for key in calls}
    fns = {"flashjit": "fj", "sdpa-cudnn": "cd", "sdpa-flash": "fl", "flex": None}
    grads, results = time_trainings(None, fns, (), None, 1e9, {}, calls_of=calls_of,
                                    timer=timer)
    check("pairwise: flashjit against each peer in turn",
          groups == [["flashjit", "sdpa-cudnn"], ["flashjit", "sdpa-flash"]], groups)
    check("a backend that fails to run is reported, not timed",
          results["flex"] == {"error": "RuntimeError: no such backend here"}
          and "flex" not in grads, results["flex"])
    check("flashjit's rates are its first pair's", results["flashjit"]["fwd_bwd_ms"] == 1.0,
          results["flashjit"])
    point = {"head_dim": 128, "causal": False, "seqlen": 2048, "batch": 8, "results": results}
    row = markdown({"points": [point]}).splitlines()[2].split(" | ")
    check("each ratio from flashjit's time beside that peer",
          row[-4:-1] == ["1.50", "1.50", "-"], row)
    groups.clear()
    time_trainings(None, fns, (), None, 1e9, {}, pairwise=False, calls_of=calls_of, timer=timer)
    check("--together: every backend in one round",
          groups == [["flashjit", "sdpa-cudnn", "sdpa-flash"]], groups)
    return check.failed


def main(argv=None):
    args = parse_args(argv)
    if args.self_test:
        failed = self_test()
        print(f"{len(failed)} failed" if failed else "all checks passed")
        return 1 if failed else 0
    import torch
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "timing": {"warmup": args.warmup, "repeats": args.repeats,
                          "target_ms": args.target_ms, "settle": args.settle,
                          "pairwise": args.pairwise},
               "points": [], "memory": {}}
    fns = attention_fns(torch, args.peers)
    if not args.memory_only:
        points = [(d, c, s) for d in args.head_dims for c in args.causal for s in args.seqlens]
        for i, (d, c, s) in enumerate(points):
            p = run_point(torch, args, fns, d, c, s)
            r = p["results"].get("flashjit", {})
            print(f"[{i + 1}/{len(points)}] d{d} {'causal' if c else 'dense'} s{s}: "
                  + ", ".join(f"{n} {x.get('fwd_bwd_tflops', 0):.0f}" if "error" not in x
                              else f"{n} error" for n, x in p["results"].items())
                  + f" | flashjit bwd {r.get('bwd_tflops', 0):.0f} | check {p.get('check')}",
                  flush=True)
            results["points"].append(p)
    if not args.no_memory:
        mem_fns = attention_fns(torch, ["sdpa-flash", "sdpa-cudnn", "sdpa-math"])
        for s in args.memory_seqlens:
            results["memory"][s] = peak_memory(torch, mem_fns, s)
            print(f"memory s{s}: {results['memory'][s]}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    text = markdown(results)
    if args.out_md:
        with open(args.out_md, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
