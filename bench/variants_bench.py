#!/usr/bin/env python3
"""Attention variants: flashjit beside FlexAttention, on one GPU, in one process.

Why: a variant (sliding window, ALiBi, soft-cap, document or block-sparse
masking) is only worth generating if it keeps most of flashjit's dense
speed and holds up against FlexAttention (torch.compile), the usual way to
write one in PyTorch. This times both on the same inputs with
attention_bench.py's clock (CUDA events, warm-up, medians; each round times
flashjit, its dense kernels and Flex in turn), times flashjit's dense
kernel of each shape too (time/dense: the variant's time over it) and a
non-causal dense kernel whose rows are as long as the variant's (tile
rate/dense rows: what the variant keeps of a dense kernel's rate on rows
of its length), and checks flashjit's output against Flex's. The document
and block-sparse rows run flashjit block-sparse (C API 3, sparse block 128
x 128) on the very BlockMask Flex runs on (create_block_mask's kv_num_blocks, kv_indices,
full_kv_num_blocks, full_kv_indices): its partial blocks with the mask_mod,
its full blocks without (a mask with no partial block needs no mask_mod).
FLOPs count computed scores only: 4 * batch * heads * head_dim * visible
(q, kv) pairs, counted exactly from the mask (for a block mask: its full
blocks whole, its partial blocks by the mask), the same for both sides. A
variant flashjit cannot compile is reported with the reason, not fatal.
The sweep itself (each variant's mods, masks and FLOPs): variants_sweep.py.

  python3 bench/variants_bench.py --json variants.json      # a GPU with torch
  python3 bench/variants_bench.py --self-test               # neither needed

The exit code is 1 when a flashjit output differs from Flex's.
"""

import argparse
import contextlib
import io
import math
import os
import random
import re
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_report  # noqa: E402
import flashjit_capi  # noqa: E402
from attention_bench import environment, flex_factory, reason, time_cuda_rounds  # noqa: E402
from self_check import Checks  # noqa: E402
from variants_report import goal_lines, table  # noqa: E402
from variants_sweep import (  # noqa: E402
    BLOCK, FAMILIES, HEAD_DIM, HEADS, TOKENS, TOL_REL, BlockLists, alibi_variant,
    blocksparse_variant, document_variant, eval_mod, flashjit_visible, mod_text,
    softcap_variant, sweep, tensor_type, window_variant)

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lib", default=None,
                   help="libflashjit.so (default $FLASHJIT_LIB, else .device-bundle/lib/libflashjit.so)")
    p.add_argument("--self-test", action="store_true",
                   help="check the sweep, the FLOP counts and the mods' MLIR; no torch or GPU")
    p.add_argument("--variants", default=",".join(FAMILIES), help="subset of %(default)s")
    p.add_argument("--warmup", type=int, default=3, help="calls before timing (default 3)")
    p.add_argument("--repeats", type=int, default=7, help="timed repeats, median reported (default 7)")
    p.add_argument("--target-ms", type=float, default=100.0,
                   help="length of one timed repeat of back-to-back calls (default 100)")
    p.add_argument("--no-settle", dest="settle", action="store_false",
                   help="time each repeat straight after the previous function's; by default an untimed "
                        "repeat of the same calls precedes it, so that it runs at the clock its own calls "
                        "bring the GPU to at the power limit, not at its predecessor's")
    p.add_argument("--max-calls", type=int, default=1000,
                   help="most back-to-back calls in one timed repeat (default 1000; 0: none, so that "
                        "--target-ms 2000 times two seconds of even the fastest kernel, at the clock the "
                        "power limit holds it to)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    chosen = [x for x in args.variants.split(",") if x]
    unknown = sorted(set(chosen) - set(FAMILIES))
    if unknown or not chosen:
        p.error(f"unknown variants {unknown}: choose from {FAMILIES}")
    args.variants = [f for f in FAMILIES if f in chosen]
    return args


# ---- the GPU run
class Runner:
    """flashjit (a context per distinct spec: a context's kernel table may
    key on the plain fields only), Flex, and the clock."""

    def __init__(self, torch, args):
        self.torch, self.lib, self.kernels = torch, None, {}
        self.timing = dict(warmup=args.warmup, repeats=args.repeats, target_ms=args.target_ms,
                           settle=args.settle, max_calls=args.max_calls or None)
        self.flex, self.error, self.version, self.chip = flex_factory(torch), None, None, None
        self.block_mask_lists = flex_lists  # where a block-sparse flashjit's lists come from
        try:
            self.lib = flashjit_capi.Library(args.lib)
            self.version = self.lib.version()[0]
            ctx = flashjit_capi.Context(self.lib, device=torch.cuda.current_device())
            self.chip, (has, why) = ctx.chip(), ctx.device()
            self.error = None if has else f"flashjit sees no GPU: {why}"
        except (OSError, flashjit_capi.FlashjitError) as e:
            self.error = f"cannot use {args.lib or flashjit_capi.default_library_path()}: {e}"

    def kernel(self, v, dense, partial=None, causal=None):
        """(Kernel or None, info) of the variant (partial: whether its block
        mask has partial blocks) or of flashjit's plain kernel of its shape
        (causal as the variant unless `causal` says), compiled once for its
        seqlen."""
        causal = v.causal if causal is None else causal
        key = (("dense", causal) if dense else v.key(partial), v.seqlen)
        if key not in self.kernels:
            spec = (flashjit_capi.make_spec(HEAD_DIM, "bf16", causal, HEADS, HEADS) if dense
                    else v.spec(partial))
            t0 = time.perf_counter()
            try:
                ctx = flashjit_capi.Context(self.lib, device=self.torch.cuda.current_device())
                kernel = ctx.compile_spec(spec, seqlen=v.seqlen)
            except flashjit_capi.FlashjitError as e:
                self.kernels[key] = (None, {"unsupported": reason(e)})
                return self.kernels[key]
            name, config = kernel.describe()
            plain = f"flashjit_fwd_d{HEAD_DIM}_bf16{'_causal' if causal else ''}_h{HEADS}_kv{HEADS}"
            if name != plain if dense else not name.startswith(plain + "_v"):
                raise RuntimeError(f"flashjit handed back kernel {name} for this spec")
            self.kernels[key] = (kernel, {"kernel": name, "config": config,
                                          "compile_ms": (time.perf_counter() - t0) * 1e3})
        return self.kernels[key]

    def run_flashjit(self, v, q, k, val, caps, block_mask=None, dense=False, keys=None):
        """(info, output, launch, FLOPs), launched once; dense: FLOPs of the
        plain kernel's own pairs, and with `keys` the plain kernel is
        non-causal on the first `keys` keys. block_mask(): Flex's BlockMask
        of the row (a block-sparse variant runs on its lists)."""
        torch, to, s = self.torch, flashjit_capi.TensorArg.from_torch, v.seqlen
        lists = partial = None
        if v.sparse_block is not None and not dense:
            lists = self.block_mask_lists(v, block_mask())
            partial = bool(lists[0].any())  # kv_num_blocks: the partial blocks' counts
        kernel, info = self.kernel(v, dense, partial, causal=False if keys is not None else None)
        if keys is not None:
            k, val = (x[:, :, :keys].contiguous() for x in (k, val))
        if kernel is None:
            return dict(info), None, None, None
        o = torch.full_like(q, float("nan"))  # poisoned: a row the kernel skips shows up
        lse = torch.empty(q.shape[:3], dtype=torch.float32, device="cuda")
        tensors, stream = [to(x) for x in (q, k, val, o, lse)], torch.cuda.current_stream().cuda_stream
        used = [to(c) for c in caps] if caps and v.flashjit_captures(partial) else []
        if dense:
            launch = kernel.bind(*tensors, stream=stream)
        elif lists is not None:
            launch = kernel.bind_block_sparse(*tensors, flashjit_capi.BlockMaskArgs.from_torch(*lists),
                                              used, stream=stream)
            info = dict(info, sparse_block=list(v.sparse_block), mask_mod=v.uses_mask_mod(partial))
        else:
            launch = kernel.bind_captures(*tensors, used, stream=stream)
        launch()
        torch.cuda.synchronize()
        out = o.clone()
        pairs = v.pairs if not dense else (
            s * keys if keys is not None else s * (s + 1) // 2 if v.causal else s * s)
        return dict(info), out, launch, v.flops(pairs)

    def run_dense(self, v, q, k, val, keys=None):
        info, _, launch, flops = self.run_flashjit(v, q, k, val, None, dense=True, keys=keys)
        return (info if keys is None else dict(info, seqlen_k=keys)), None, launch, flops

    def block_mask(self, v, caps):
        """Flex's BlockMask of the variant's mask (block-sparse: with its
        sparse block), one for every batch and head."""
        _, create_block_mask = self.flex()
        size = {"BLOCK_SIZE": tuple(v.sparse_block)} if v.sparse_block is not None else {}
        return create_block_mask(v.mask(caps), None, None, v.seqlen, v.seqlen, device="cuda", **size)

    def run_flex(self, v, q, k, val, caps, block_mask):
        torch = self.torch
        compiled, _ = self.flex()
        block_mask = block_mask() if v.mask else None
        score_mod = v.score(torch, caps) if v.score else None
        call = lambda: compiled(q, k, val, score_mod=score_mod, block_mask=block_mask)  # noqa: E731
        t0 = time.perf_counter()
        out = call()
        torch.cuda.synchronize()
        return {"first_call_s": time.perf_counter() - t0}, out, call, v.flops()

    def run_row(self, v):
        torch, b, s = self.torch, v.batch, v.seqlen
        q, k, val = (torch.randn(b, HEADS, s, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
                     for _ in range(3))
        dtypes = {"f32": torch.float32, "i32": torch.int32}
        caps = [torch.tensor(values, dtype=dtypes[dt], device="cuda") for _, dt, values in v.captures]
        row = {"variant": v.label, "family": v.family, "shape": v.shape(), "batch": b, "heads": HEADS,
               "seqlen": s, "head_dim": HEAD_DIM, "visible_pairs": v.pairs, "flops": v.flops(),
               "density": v.pairs / (s * s), "results": {}}
        outs, masks = {}, {}

        def block_mask():  # built once: Flex and a block-sparse flashjit run on the same one
            if "mask" not in masks:
                masks["mask"] = self.block_mask(v, caps)
            return masks["mask"]
        # Each side runs once here (outputs compared below), then all are
        # timed in interleaved rounds.
        # Besides the dense kernel of the shape, one whose rows are as long
        # as the variant's (Variant.row_keys), unless that is the same.
        keys = v.row_keys()
        row["dense_row_keys"] = keys
        runs = [("flashjit", lambda: self.run_flashjit(v, q, k, val, caps, block_mask)),
                ("flashjit-dense", lambda: self.run_dense(v, q, k, val))]
        if v.causal or keys != s:
            runs.append(("flashjit-dense-rows", lambda: self.run_dense(v, q, k, val, keys)))
        runs.append(("flex", lambda: self.run_flex(v, q, k, val, caps, block_mask)))
        calls = {}
        for name, run in runs:
            try:
                if name != "flex" and self.error:
                    raise RuntimeError(self.error)
                row["results"][name], outs[name], call, flops = run()
                if call is not None:
                    calls[name] = (call, flops)
            except Exception as e:  # one side failing leaves the others' numbers
                row["results"][name] = {"error": reason(e)}
        times = time_cuda_rounds(torch, {n: c for n, (c, _) in calls.items()}, **self.timing)
        for name, t in times.items():
            if "error" in t:
                row["results"][name] = t
            else:
                t["tflops"] = bench_report.tflops(calls[name][1], t["ms"])
                row["results"][name].update(t)
        row["check"] = check_output(torch, outs.get("flashjit"), outs.get("flex"))
        fj, dn = row["results"].get("flashjit", {}), row["results"].get("flashjit-dense", {})

        def tile_rate_vs(dense, dense_tile_pairs):  # the variant's rate on its tiles over a dense kernel's
            if "ms" not in fj or "ms" not in dense:
                return None
            return v.tile_pairs() / dense_tile_pairs * dense["ms"] / fj["ms"]
        if "ms" in fj and "ms" in dn:
            row["time_vs_dense"] = fj["ms"] / dn["ms"]
            row["tile_rate_vs_dense"] = tile_rate_vs(dn, v.tile_pairs(dense=True))
        # Rows as long as the variant's: their own kernel (non-causal, s x keys), or the dense kernel of
        # the shape where that is the same one.
        rows_dense = row["results"].get("flashjit-dense-rows")
        row["tile_rate_vs_dense_rows"] = (tile_rate_vs(rows_dense, s * keys) if rows_dense is not None
                                          else row.get("tile_rate_vs_dense"))
        if v.goal is not None:
            row["goal_time_vs_dense"] = v.goal
        if v.sparse_block is not None and "mask" in masks:
            try:
                row["block_mask"] = describe_block_mask(v, self.block_mask_lists(v, masks["mask"]))
            except Exception as e:
                row["block_mask"] = {"error": reason(e)}
        return row


def flex_lists(v, block_mask):
    """A block-sparse flashjit's lists: the forward lists of Flex's
    BlockMask (kv_num_blocks, kv_indices, full_kv_num_blocks,
    full_kv_indices; torch int32, full ones possibly None), so both run on
    the same mask. Another source (say flashjit building them from the
    spec's mask_mod) would plug in as Runner.block_mask_lists."""
    if tuple(block_mask.BLOCK_SIZE) != tuple(v.sparse_block):
        raise RuntimeError(f"Flex's block mask has block {tuple(block_mask.BLOCK_SIZE)}, "
                           f"flashjit's spec {tuple(v.sparse_block)}")
    return (block_mask.kv_num_blocks, block_mask.kv_indices, block_mask.full_kv_num_blocks,
            block_mask.full_kv_indices)


def describe_block_mask(v, lists):
    """What the row's block mask lists (of (batch, head) 0, 0) against the
    bench's model of it, whose pairs the FLOPs count."""
    got = BlockLists.from_flex(lists, v.sparse_block, v.seqlen)
    partial, full = got.counts()
    info = {"block": list(v.sparse_block), "shape": list(lists[1].shape), "partial_blocks": partial,
            "full_blocks": full, "listed_pairs": got.pairs(v.block_pairs),
            "same_as_model": got == v.block_lists()}
    if not info["same_as_model"] or info["listed_pairs"] != v.pairs:
        print(f"warning: {v.label} {v.shape()}: Flex's block mask differs from the bench's model "
              f"({partial} partial, {full} full blocks; {info['listed_pairs']} pairs listed, "
              f"{v.pairs} counted)", file=sys.stderr)
    return info


def check_output(torch, out, ref):
    if out is None or ref is None:
        return {"error": "flashjit did not run" if out is None else "Flex did not run"}
    diff = out.float() - ref.float()
    rel = float(diff.norm() / ref.float().norm().clamp_min(1e-30))
    result = {"max_abs_err": float(diff.abs().max()), "rel_err": rel,
              "finite": bool(torch.isfinite(out).all())}
    result["ok"] = result["finite"] and rel <= TOL_REL  # NaN fails both
    return result


def run_bench(args):
    import torch
    if not torch.cuda.is_available():
        print("error: torch sees no CUDA GPU (--self-test runs without)", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    torch.empty(1, device="cuda")  # CUDA initialised: flashjit joins torch's context
    runner = Runner(torch, args)
    if runner.error:
        print(f"warning: flashjit is n/a: {runner.error}", file=sys.stderr)
    shape = types.SimpleNamespace(layout="bhsd", total_tokens=TOKENS, hidden=HEADS * HEAD_DIM)
    meta = environment(torch, shape, runner.version, runner.chip)
    meta.update(timing=dict(runner.timing, window="each repeat's calls back to back between CUDA events; "
                                                  "settle: after an untimed repeat of the same calls"),
                tolerance=f"FAILED above relative {TOL_REL:g} against Flex, or not finite",
                flops="4 * batch * heads * head_dim * visible (q, kv) pairs",
                time_vs_dense="flashjit's time over its dense kernel's at the same shape (causal as the row)",
                tile_rate_vs_dense="flashjit's rate on the 128 x 128 tiles it computes (listed blocks, "
                                   "tiles holding a visible pair) over the dense kernel's on its own",
                tile_rate_vs_dense_rows="the same rate over a non-causal dense kernel whose rows are "
                                        "as long as the variant's on average (dense_row_keys keys: its "
                                        "tiles' pairs per query row, rounded up to whole tiles)",
                block_sparse="document and block-sparse rows: flashjit block-sparse (C API 3) on Flex's "
                             "BlockMask from create_block_mask, partial blocks with the mask_mod, full "
                             "blocks without")
    rows, plan = [], sweep(args.variants)
    for i, v in enumerate(plan, 1):
        try:
            row = runner.run_row(v)
        except Exception as e:  # e.g. out of memory for the inputs: the sweep goes on
            row = {"variant": v.label, "shape": v.shape(), "results": {}, "check": {"error": reason(e)}}
        torch.cuda.empty_cache()
        rows.append(row)
        c = row["check"]
        print(f"[{i}/{len(plan)}] {v.label} {v.shape()}: " + ", ".join(
            f"{n} {r['tflops']:.1f}" if "tflops" in r else f"{n} {'unsupported' if 'unsupported' in r else 'n/a'}"
            for n, r in row["results"].items())
            + " TFLOP/s; " + (f"time/dense {row['time_vs_dense']:.3f}; " if "time_vs_dense" in row else "")
            + (f"check {'ok' if c['ok'] else 'FAILED'}, max abs {c['max_abs_err']:.2e}, "
               f"rel {c['rel_err']:.2e}" if "ok" in c else f"check n/a: {c['error']}"),
            file=sys.stderr, flush=True)
        if args.json:  # after every row: a run cut short keeps what it measured
            with open(args.json, "w") as f:
                f.write(bench_report.to_json(meta, rows) + "\n")
    print(f"# {meta['gpu']} (driver {meta['driver']}, torch {meta['torch']}, flashjit {meta['flashjit']})\n")
    print(table(rows) + "\n")
    for line in goal_lines(rows):
        print(line)
    for r in rows:  # why a cell is n/a (flashjit "unsupported": it could not compile the variant)
        for name, res in r["results"].items():
            if "error" in res or "unsupported" in res:
                print(f"- {r['variant']} {r['shape']}: {name} n/a: {res.get('error') or res['unsupported']}")
    failed = [r for r in rows if r["check"].get("ok") is False]
    if failed:
        print(f"\n!!! flashjit's output differs from Flex's in {len(failed)} row(s)", file=sys.stderr)
    return 1 if failed else 0


# ---- the self-test: no torch, no GPU
def self_test_agree(check, v, samples=None):
    """flashjit's structural mask and mods (their MLIR run by eval_mod)
    against Flex's mask_mod and score_mod, on every (q, kv) pair (then also
    counting the visible ones) or on `samples` random pairs. Block-sparse:
    on the bench's model of Flex's block mask, which is also checked against
    create_block_mask's rule run on Flex's mask (every pair) and, counting
    full blocks whole and partial ones by the mask, gives the FLOPs' pairs."""
    caps = [values for _, _, values in v.captures]
    flex_mask, rng = v.mask(caps) if v.mask else (lambda b, h, q, kv: True), random.Random(1)
    pairs = ([(rng.randrange(v.seqlen), rng.randrange(v.seqlen)) for _ in range(samples)] if samples
             else [(q, kv) for q in range(v.seqlen) for kv in range(v.seqlen)])
    what = f"{v.label} {v.shape()}, " + (f"{samples} sampled pairs" if samples else f"{v.pairs} visible")
    lists = v.block_lists()
    if lists is not None:
        (m, n), s = v.sparse_block, v.seqlen
        partial, full = lists.counts()
        check(f"{what}: the block mask's pairs ({partial} partial, {full} full blocks of {m}x{n}) "
              "are the FLOPs' pairs", lists.pairs(v.block_pairs) == v.pairs,
              f"{lists.pairs(v.block_pairs)} != {v.pairs}")
        if not samples:
            def flex_rule(qb, kb):  # visible pairs of the block, by Flex's mask
                return sum(bool(flex_mask(0, 0, q, kv)) for q in range(qb * m, min(s, qb * m + m))
                           for kv in range(kb * n, min(s, kb * n + n)))
            check(f"{what}: the model of the block mask is create_block_mask's",
                  BlockLists.from_pairs(flex_rule, s, (m, n)) == lists)
    same, seen, worst = True, 0, 0.0
    for q, kv in pairs:
        h = (q * 7 + kv) % HEADS
        keep = flashjit_visible(v, caps, 0, h, q, kv, lists)
        same, seen = same and keep == bool(flex_mask(0, h, q, kv)), seen + keep
        if v.score_mod:
            x = rng.uniform(-60, 60)
            worst = max(worst, abs(eval_mod(v.score_mod, [x, 0, h, q, kv] + caps)
                                   - v.score(math, caps)(x, 0, h, q, kv)))
    check(f"{what}: flashjit matches Flex's mask{' and score_mod' if v.score_mod else ''}",
          same and worst < 1e-9 and (samples or seen == v.pairs), f"same mask {same}, "
          f"{seen} visible, score off by {worst}")
    captured = [tensor_type(dt, len(values)) for _, dt, values in v.captures]
    for text, fixed, ret in ((v.score_mod, ["f32"], "f32"), (v.mask_mod, [], "i1")):
        head = (text or "").split("\n")[0]
        if text and samples:
            check(f"{what}: the signature {head}", head.endswith(f"-> {ret} {{") and
                  re.findall(r"%\w+: ([^,)]+)", head) == fixed + ["index"] * 4 + captured)


TEXT_ERRORS = ("not valid MLIR", "must have type", "exactly one func.func", "one block", "region uses",
               "region must")


def self_test_library(check, path, rows):
    """With a C API 2 library: each distinct spec compiles (PTX: no GPU
    needed; a failure that blames the mods' text fails, another is a note)
    and forward_captures passes its captures on; with C API 3 also the
    block-sparse specs, and forward_block_sparse takes the document's."""
    try:
        lib = flashjit_capi.Library(path)
        api = lib.version()[1]
    except OSError as e:
        return print(f"     skipped the library checks: {e}")
    if api < 2 or not lib.has("flashjit_kernel_forward_captures"):
        return print(f"     skipped the library checks: {lib.path} has C API {api}")
    sparse = api >= 3 and lib.has("flashjit_kernel_forward_block_sparse")
    if not sparse:
        print(f"     skipped the block-sparse rows: {lib.path} has C API {api}"
              f"{'' if api < 3 else ' without flashjit_kernel_forward_block_sparse'}")
    kernels = {}
    for v in rows:
        if v.sparse_block is not None and not sparse:
            continue
        if v.key() not in kernels:
            try:  # a context each: see Runner
                kernels[v.key()] = flashjit_capi.Context(lib, cache_dir="").compile_spec(v.spec())
                check(f"flashjit compiles {v.label}: {' '.join(kernels[v.key()].describe())}", True)
            except flashjit_capi.FlashjitError as e:
                kernels[v.key()] = None
                if any(t in e.message for t in TEXT_ERRORS):
                    check(f"flashjit reads {v.label}'s mods", False, e.message)
                else:
                    print(f"     note: flashjit cannot compile {v.label}: {' '.join(e.message.split())[:400]}")
    if flashjit_capi.Context(lib, cache_dir="").device()[0]:
        return print("     a GPU is present: skipped the forward_captures calls")
    t = [flashjit_capi.fake_bhsd(0x10000000 * (i + 1), 1, HEADS, 64, HEAD_DIM) for i in range(4)]
    t.append(flashjit_capi.TensorArg(0x50000000, [1, HEADS, 64], None, "f32"))
    window = kernels[rows[0].key()]  # no captures: checked before the launch is refused
    for dtypes, want in (([], "no device"), (["f32"], "gives 1")) if window else ():
        try:
            window.bind_captures(*t, [flashjit_capi.TensorArg(0x60000000, [HEADS], None, dt)
                                      for dt in dtypes])()
            msg = "ok"
        except flashjit_capi.FlashjitError as e:
            msg = f"{flashjit_capi.STATUS_NAMES[e.status]}: {e.message}"
        check(f"forward_captures with {len(dtypes)} captured tensors: '{want}'", want in msg, msg)
    doc = next((v for v in rows if v.family == "document"), None)
    if sparse and doc is not None and kernels.get(doc.key()):  # seqlen 64: one block of 128
        lists = [flashjit_capi.TensorArg(0x70000000 + 0x1000 * i, [1, 1, 1] + [1] * (i % 2), None, "i32")
                 for i in range(4)]
        caps = [flashjit_capi.TensorArg(0x60000000, [len(values)], None, dt)
                for _, dt, values in doc.flashjit_captures()]
        try:
            kernels[doc.key()].bind_block_sparse(*t, flashjit_capi.BlockMaskArgs(*lists), caps)()
            msg = "ok"
        except flashjit_capi.FlashjitError as e:
            msg = f"{flashjit_capi.STATUS_NAMES[e.status]}: {e.message}"
        check("forward_block_sparse with the document's capture and block mask: 'no device'",
              "no device" in msg, msg)


class FakeTensor:
    """What BlockLists.from_flex and describe_block_mask read of a torch
    tensor ([0, 0], tolist, shape), over nested lists."""

    def __init__(self, data):
        self.data = data

    def __getitem__(self, index):
        data = self.data
        for i in index:
            data = data[i]
        return FakeTensor(data)

    def tolist(self):
        return self.data

    @property
    def shape(self):
        dims, data = [], self.data
        while isinstance(data, list):
            dims, data = dims + [len(data)], data[0] if data else None
        return dims


def flex_layout(lists):
    """A BlockLists as Flex's four tensors (its argsort order: the listed
    blocks first, in increasing order, then the others)."""
    nk = -(-lists.seqlen // lists.block[1])

    def pair(rows):
        return (FakeTensor([[[len(r) for r in rows]]]),
                FakeTensor([[[r + [kb for kb in range(nk) if kb not in r] for r in rows]]]))
    return pair(lists.partial) + pair(lists.full)


def refuses(error, fn, *args):
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            fn(*args)
    except error:
        return True
    return False


def self_test(lib_path):
    check = Checks()
    args = parse_args(["--variants", "document,alibi", "--repeats", "3", "--target-ms", "20", "--json", "x"])
    check("options", (args.variants, args.repeats, args.target_ms, args.json) == (
        ["alibi", "document"], 3, 20.0, "x") and parse_args([]).variants == FAMILIES, str(args))
    check("an unknown variant is refused", refuses(SystemExit, parse_args, ["--variants", "alibi,rope"]))
    rows = sweep()
    check("the sweep: 13 rows of 16k tokens (the window's 32k: batch 1)", len(rows) == 13 and all(
        v.batch * v.seqlen == (32768 if v.seqlen == 32768 else TOKENS) for v in rows))
    win, spec = rows[0], rows[0].spec()
    check("window 8k: 1024*1025/2 + 7168*1025 pairs a head, FLOPs 4*b*h*d*pairs",
          win.pairs == 7872000 and win.flops() == 4 * 2 * 16 * 128 * 7872000, str(win.pairs))
    check("window: structural, causal, left 1024, right open, no mods",
          (spec.causal, spec.window_left, spec.window_right, spec.score_mod, spec.mask_mod,
           spec.num_captures) == (1, 1024, -1, None, None, 0))
    check("alibi 2k: causal s(s+1)/2 pairs", rows[2].pairs == 2048 * 2049 // 2)
    doc = next(v for v in rows if v.family == "document")
    check("document: 8 documents summing to 16k", len(doc.lengths) == 8 and sum(doc.lengths) == TOKENS
          and min(doc.lengths) > 0, str(doc.lengths))
    sparse = [v for v in rows if v.family == "blocksparse"]
    check("block-sparse: densities 10/25/50% at 8k (batch 2) and 16k (batch 1)",
          [(v.seqlen, v.batch, round(v.pairs / v.seqlen ** 2, 3)) for v in sparse]
          == [(s, TOKENS // s, d) for s in (8192, TOKENS) for d in (0.1, 0.25, 0.5)])
    window = next(v for v in rows if v.family == "window" and v.seqlen == 8192)
    check("a 1024 window at 8k computes 9 of 64 key tiles per query block but the first 8",
          window.tile_pairs() == sum(min(qb, 8) + 1 for qb in range(64)) * BLOCK * BLOCK
          and window.tile_pairs(dense=True) == 64 * 65 // 2 * BLOCK * BLOCK,
          (window.tile_pairs(), window.tile_pairs(dense=True)))
    sparse10 = next(v for v in sparse if v.seqlen == TOKENS and v.label == "block-sparse 10%")
    check("dense rows as long as the variants': the 8k window's 1080 keys a row on average up to "
          "1152, block-sparse 10% at 16k's about 1638 up to 1664, soft-cap's every key",
          (window.row_keys(), sparse10.row_keys(), rows[4].row_keys())
          == (1152, 1664, rows[4].seqlen) and rows[4].family == "softcap",
          (window.row_keys(), sparse10.row_keys(), rows[4].family, rows[4].row_keys()))
    check("block-sparse 10% at 16k is held to time/dense <= 0.15, no other row to a goal",
          [(v.seqlen, v.label, v.goal) for v in rows if v.goal is not None]
          == [(TOKENS, "block-sparse 10%", 0.15)])
    bs, spec = rows[-1], rows[-1].spec()
    check("a block-sparse spec: 416 bytes, sparse block 128x128, no mask_mod and no capture "
          "(its mask lists full blocks only)", not bs.block_lists().has_partial and
          (spec.struct_size, spec.sparse_block_m, spec.sparse_block_n, spec.mask_mod, spec.num_captures)
          == (416, 128, 128, None, 0))
    spec = bs.spec(partial=True)
    check("a block-sparse spec for a mask with partial blocks keeps the mask_mod and its i32 capture",
          (spec.struct_size, spec.num_captures, spec.capture_dtype[0], spec.capture_rank[0],
           spec.capture_shape[0][0], spec.mask_mod.decode()) == (416, 1, 2, 1, 128 * 128, bs.mask_mod)
          and bs.key(True) != bs.key(False))
    spec, (partial, full) = doc.spec(), doc.block_lists().counts()
    check("the document spec: block-sparse 128x128 with its mask_mod and an i32 capture of 16k; "
          "its mask has partial and full blocks",
          (spec.struct_size, spec.sparse_block_m, spec.sparse_block_n, spec.num_captures,
           spec.capture_shape[0][0], spec.mask_mod.decode()) == (416, 128, 128, 1, TOKENS, doc.mask_mod)
          and partial > 0 and full > 0, f"{partial} partial, {full} full")
    for v in (doc, bs):  # Flex's tensors as the GPU run reads them
        info = describe_block_mask(v, flex_layout(v.block_lists()))
        check(f"{v.label}: Flex's layout reads back as the model, its pairs the FLOPs' pairs",
              info["same_as_model"] and info["listed_pairs"] == v.pairs and
              info["shape"] == [1, 1, 128, 128], str(info))
    odd = flex_layout(bs.block_lists())
    odd = (FakeTensor([[[c + 1 for c in odd[0].data[0][0]]]]),) + odd[1:]
    with contextlib.redirect_stderr(io.StringIO()) as warned:
        info = describe_block_mask(bs, odd)
    check("a block mask other than the model's is told apart (and warned of)",
          not info["same_as_model"] and info["listed_pairs"] != bs.pairs
          and "differs from the bench's model" in warned.getvalue(), str(info))
    for v in (window_variant(70, 1, w=13), alibi_variant(40, 1), softcap_variant(24, 1),
              document_variant(90, seed=3, block=16), blocksparse_variant(96, 1, 0.25, block=16)):
        self_test_agree(check, v)
    for v in rows:
        self_test_agree(check, v, samples=300)
    fake = [{"variant": "block-sparse 10%", "shape": "b1 h16 s16k d128", "check": {"error": "x"},
             "time_vs_dense": 0.125, "goal_time_vs_dense": 0.15, "tile_rate_vs_dense_rows": 0.9,
             "results": {"flashjit": {"ms": 1.0, "tflops": 80.0},
                         "flashjit-dense": {"ms": 8.0, "tflops": 700.0}}}]
    check("the table's tile rate/dense rows and time/dense columns and the goal's line",
          "| 0.11 | n/a | 0.90 | 0.12 | n/a (x) |" in table(fake) and goal_lines(fake) ==
          ["- block-sparse 10% b1 h16 s16k d128: flashjit time/dense <= 0.15: 0.125, met"],
          table(fake) + "\n" + "\n".join(goal_lines(fake)))
    bad = mod_text("score", "x", [], ["%r = math.sin %score : f32", "return %r : f32"])
    check("an op the kernels cannot place is caught", refuses(ValueError, eval_mod, bad, [0.0] * 5))
    self_test_library(check, lib_path, rows)
    print(f"{len(check.failed)} check(s) failed" if check.failed else "all checks passed")
    return 1 if check.failed else 0


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return self_test(args.lib) if args.self_test else run_bench(args)


if __name__ == "__main__":
    sys.exit(main())
