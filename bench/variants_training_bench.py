#!/usr/bin/env python3
"""Forward+backward of attention variants: flashjit against FlexAttention,
same inputs, same run.

Why: a score_mod or mask_mod must train, not only infer. This times
forward+backward and the backward alone of soft-capping (a score_mod whose
derivative flashjit derives), ALiBi (a score_mod reading a captured slope
per head) and document masking (a mask_mod reading captured document ids)
through PyTorch autograd on both sides: flashjit.attention (its backward
kernels) and torch.compile(flex_attention) with the same functions and,
for the document mask, the BlockMask create_block_mask builds (flashjit
visits its listed blocks, the mask_mod on partial ones only, forward and
backward; its backward transposes the lists on the GPU at each call).
Before timing, flashjit's dQ, dK, dV are compared with Flex's.

FLOPs count computed scores only, as variants_bench.py does: 4 b h d x the
visible (query, key) pairs for the forward (causal and the document mask
counted exactly), 2.5x that for the backward. Times: CUDA events around
back-to-back calls after warm-up, median of --repeats rounds (each timing
flashjit and Flex in turn).

  python3 bench/variants_training_bench.py --json out.json --out-md out.md
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention_bench import flex_factory, int_list, reason  # noqa: E402
from training_bench import time_trainings  # noqa: E402

TOL_REL = 2e-2  # dQ/dK/dV against Flex's, norm-relative (both bf16)
VARIANTS = ("softcap", "alibi", "documents")

DOCUMENT_MASK = "\n".join([
    "func.func @documents(%b: index, %h: index, %q: index, %kv: index, "
    "%ids: tensor<?x?xi32>) -> i1 {",
    "  %dq = tensor.extract %ids[%b, %q] : tensor<?x?xi32>",
    "  %dk = tensor.extract %ids[%b, %kv] : tensor<?x?xi32>",
    "  %same = arith.cmpi eq, %dq, %dk : i32",
    "  return %same : i1",
    "}"])


def alibi_score_mod(heads):
    return "\n".join([
        f"func.func @alibi(%score: f32, %b: index, %h: index, %q: index, %kv: index, "
        f"%slopes: tensor<{heads}xf32>) -> f32 {{",
        f"  %s = tensor.extract %slopes[%h] : tensor<{heads}xf32>",
        "  %qi = arith.index_cast %q : index to i32",
        "  %ki = arith.index_cast %kv : index to i32",
        "  %d = arith.subi %ki, %qi : i32",
        "  %df = arith.sitofp %d : i32 to f32",
        "  %bias = arith.mulf %s, %df : f32",
        "  %r = arith.addf %score, %bias : f32",
        "  return %r : f32",
        "}"])


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default=",".join(VARIANTS), help="subset of %(default)s")
    p.add_argument("--seqlens", type=int_list, default=[4096, 16384])
    p.add_argument("--total-tokens", type=int, default=16384)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--documents", type=int, default=8, help="documents per sequence")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--target-ms", type=float, default=40.0)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--out-md", help="write a markdown table here")
    args = p.parse_args(argv)
    args.variants = [v for v in args.variants.split(",") if v]
    for v in args.variants:
        if v not in VARIANTS:
            p.error(f"unknown variant {v!r}: expected some of {', '.join(VARIANTS)}")
    return args


def document_ids(torch, batch, seqlen, documents, seed):
    """[batch, seqlen] int32 ids of `documents` packed documents of random
    lengths per sequence."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.empty(batch, seqlen, dtype=torch.int32)
    for b in range(batch):
        cuts = torch.randperm(seqlen - 1, generator=gen)[:documents - 1] + 1
        bounds = [0] + sorted(cuts.tolist()) + [seqlen]
        for d in range(documents):
            ids[b, bounds[d]:bounds[d + 1]] = d
    return ids.cuda()


def variant_fns(torch, variant, batch, heads, seqlen, args):
    """(flashjit fn, flex fn, visible pairs per head) of one variant, each
    fn(q, k, v) -> O, differentiable."""
    import flashjit
    flex = flex_factory(torch)
    compiled, create_block_mask = flex()
    causal_rule = lambda b, h, qi, ki: qi >= ki  # noqa: E731
    if variant == "softcap":
        cap = 30.0

        def mod(score, b, h, qi, ki):
            return cap * torch.tanh(score / cap)
        mask = create_block_mask(causal_rule, None, None, seqlen, seqlen, device="cuda")
        visible = batch * seqlen * (seqlen + 1) / 2
        return (lambda q, k, v: flashjit.attention(q, k, v, causal=True, softcap=cap),
                lambda q, k, v: compiled(q, k, v, score_mod=mod, block_mask=mask), visible)
    if variant == "alibi":
        slopes = torch.tensor([2.0 ** (-8 * (i + 1) / heads) for i in range(heads)],
                              device="cuda", dtype=torch.float32)
        text = alibi_score_mod(heads)

        def mod(score, b, h, qi, ki):
            return score + slopes[h] * (ki - qi)
        mask = create_block_mask(causal_rule, None, None, seqlen, seqlen, device="cuda")
        visible = batch * seqlen * (seqlen + 1) / 2
        return (lambda q, k, v: flashjit.attention(q, k, v, causal=True, score_mod=text,
                                                   captures=[slopes]),
                lambda q, k, v: compiled(q, k, v, score_mod=mod, block_mask=mask), visible)
    ids = document_ids(torch, batch, seqlen, args.documents, seed=seqlen)

    def rule(b, h, qi, ki):
        return ids[b, qi] == ids[b, ki]
    mask = create_block_mask(rule, batch, None, seqlen, seqlen, device="cuda")
    counts = torch.stack([torch.bincount(ids[b].long()) for b in range(batch)])
    visible = float((counts.double() ** 2).sum())
    return (lambda q, k, v: flashjit.attention(q, k, v, mask_mod=DOCUMENT_MASK, captures=[ids],
                                               capture_dims=[[-1, -1]], block_mask=mask),
            lambda q, k, v: compiled(q, k, v, block_mask=mask), visible)


def run_point(torch, args, variant, seqlen):
    d, h = args.head_dim, args.heads
    b = max(1, args.total_tokens // seqlen)
    point = {"variant": variant, "seqlen": seqlen, "batch": b, "heads": h, "head_dim": d,
             "results": {}}
    try:
        fj, flex, visible = variant_fns(torch, variant, b, h, seqlen, args)
    except Exception as e:
        point["error"] = reason(e)
        return point
    fwd_flops = 4 * h * d * visible
    point["fwd_flops"] = fwd_flops
    gen = torch.Generator(device="cuda").manual_seed(seqlen * 7 + d)

    def make():
        return torch.randn(b, h, seqlen, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    q, k, v = (make().requires_grad_() for _ in range(3))
    grad_o = make()
    timing = dict(warmup=args.warmup, repeats=args.repeats, target_ms=args.target_ms)
    grads, point["results"] = time_trainings(torch, {"flashjit": fj, "flex": flex}, (q, k, v),
                                             grad_o, fwd_flops, timing)
    if "flashjit" in grads and "flex" in grads:
        errs = [float((a.float() - r.float()).norm() / r.float().norm().clamp_min(1e-30))
                for a, r in zip(grads["flashjit"], grads["flex"])]
        finite = all(bool(torch.isfinite(a).all()) for a in grads["flashjit"])
        point["check"] = {"rel_err_dq_dk_dv": errs, "ok": finite and max(errs) <= TOL_REL}
    return point


def markdown(results):
    head = ["variant", "batch x seqlen", "flashjit fwd+bwd ms", "flex fwd+bwd ms",
            "flashjit fwd+bwd TFLOP/s", "flex fwd+bwd TFLOP/s", "fwd+bwd vs flex",
            "flashjit bwd TFLOP/s", "flex bwd TFLOP/s", "bwd vs flex", "check"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in results["points"]:
        r = p["results"]
        a, f = r.get("flashjit", {}), r.get("flex", {})

        def cell(x, key, fmt):
            return fmt.format(x[key]) if key in x else x.get("error", "-")[:40]

        def ratio(key):
            return f"{f[key] / a[key]:.2f}" if key in a and key in f else "-"
        c = p.get("check")
        check = (("ok" if c["ok"] else "FAILED") + f" ({max(c['rel_err_dq_dk_dv']):.1e})"
                 if c else p.get("error", "-"))
        lines.append("| " + " | ".join([
            p["variant"], f"{p['batch']} x {p['seqlen']}",
            cell(a, "fwd_bwd_ms", "{:.3f}"), cell(f, "fwd_bwd_ms", "{:.3f}"),
            cell(a, "fwd_bwd_tflops", "{:.1f}"), cell(f, "fwd_bwd_tflops", "{:.1f}"),
            ratio("fwd_bwd_ms"), cell(a, "bwd_tflops", "{:.1f}"), cell(f, "bwd_tflops", "{:.1f}"),
            ratio("bwd_ms"), check]) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("variants_training_bench: no CUDA device", file=sys.stderr)
        return 2
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
               "args": {k: v for k, v in vars(args).items() if k not in ("json", "out_md")},
               "points": []}
    failed = False
    for variant in args.variants:
        for s in args.seqlens:
            point = run_point(torch, args, variant, s)
            results["points"].append(point)
            failed |= not point.get("check", {}).get("ok", False)
            print(json.dumps(point), flush=True)
    table = markdown(results)
    print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.out_md:
        with open(args.out_md, "w") as f:
            f.write(table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
