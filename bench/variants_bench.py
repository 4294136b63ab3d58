#!/usr/bin/env python3
"""Attention variants: flashjit beside FlexAttention, on one GPU, in one process.

Why: a variant (sliding window, ALiBi, soft-cap, document or block-sparse
masking) is only worth generating if it keeps most of flashjit's dense
speed and holds up against FlexAttention (torch.compile), the usual way to
write one in PyTorch. This times both on the same inputs with
attention_bench.py's clock (CUDA events, warm-up, medians), times flashjit's
dense kernel of each shape too (time/dense: the variant's time over it), and
checks flashjit's output against Flex's. The document and block-sparse rows
run flashjit block-sparse (C API 3, sparse block 128 x 128) on the very
BlockMask Flex runs on (create_block_mask's kv_num_blocks, kv_indices,
full_kv_num_blocks, full_kv_indices): its partial blocks with the mask_mod,
its full blocks without (a mask with no partial block needs no mask_mod).
FLOPs count computed scores only: 4 * batch * heads * head_dim * visible
(q, kv) pairs, counted exactly from the mask (for a block mask: its full
blocks whole, its partial blocks by the mask), the same for both sides. A
variant flashjit cannot compile is reported with the reason, not fatal.

  python3 bench/variants_bench.py --json variants.json      # a GPU with torch
  python3 bench/variants_bench.py --self-test               # neither needed

The exit code is 1 when a flashjit output differs from Flex's.
"""

import argparse
import contextlib
import io
import math
import operator
import os
import random
import re
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_report  # noqa: E402
import flashjit_capi  # noqa: E402
from attention_bench import environment, flex_factory, reason, time_cuda  # noqa: E402
from self_check import Checks  # noqa: E402

HEADS, HEAD_DIM, TOKENS, BLOCK = 16, 128, 16384, 128
FAMILIES = ["window", "alibi", "softcap", "document", "blocksparse"]
TOL_REL = 2e-2  # flashjit's o against Flex's, both bf16 from f32 accumulators


class Variant:
    """One row. flashjit: structural causal/window, the mods' MLIR, captured
    tensors (flat lists). Flex: mask(caps) and score(math_module, caps) give
    its mask_mod and score_mod, on Python ints or torch tensors alike.
    sparse_block (m, n): flashjit runs block-sparse on Flex's BlockMask of
    `mask` with that block; block_pairs(qb, kb), the visible pairs of one
    block, is the bench's own model of that mask (block_lists). goal: the
    most time/dense the row should take (reported, not checked)."""

    def __init__(self, family, label, seqlen, batch, pairs, causal=False, window_left=-1,
                 score_mod=None, mask_mod=None, captures=(), mask=None, score=None,
                 sparse_block=None, block_pairs=None, goal=None):
        self.family, self.label, self.seqlen, self.batch = family, label, seqlen, batch
        self.pairs, self.causal, self.window_left = pairs, causal, window_left
        self.score_mod, self.mask_mod, self.captures = score_mod, mask_mod, list(captures)
        self.mask, self.score = mask, score
        self.sparse_block, self.block_pairs, self.goal = sparse_block, block_pairs, goal
        self._lists = None

    def shape(self):
        s = f"{self.seqlen // 1024}k" if self.seqlen % 1024 == 0 else str(self.seqlen)
        return f"b{self.batch} h{HEADS} s{s} d{HEAD_DIM}"

    def flops(self, pairs=None):
        return 4 * self.batch * HEADS * HEAD_DIM * (self.pairs if pairs is None else pairs)

    def tile_pairs(self, dense=False, block=BLOCK):
        """The pairs of one sequence's block x block tiles a kernel computes (its own
        block-sparse lists, else every tile that holds a visible pair of
        the causal mask and window); dense: those of the dense kernel of
        the row's shape. The issue's effective rate counts these."""
        if self.sparse_block is not None and not dense:
            return self.block_lists().listed_area()
        s, nb = self.seqlen, -(-self.seqlen // block)
        size = lambda i: min(s, (i + 1) * block) - i * block  # noqa: E731
        total = 0
        for qb in range(nb):
            last = qb if self.causal else nb - 1
            first = 0
            if self.window_left >= 0 and not dense:
                first = max(0, (qb * block - self.window_left) // block)
            total += size(qb) * sum(size(kb) for kb in range(first, last + 1))
        return total

    def block_lists(self):
        """The BlockMask create_block_mask builds of `mask`, as the bench
        models it (BlockLists; None for a variant that is not block-sparse)."""
        if self.sparse_block is not None and self._lists is None:
            self._lists = BlockLists.from_pairs(self.block_pairs, self.seqlen, self.sparse_block)
        return self._lists

    def uses_mask_mod(self, partial=None):
        """Whether flashjit's spec keeps the mask_mod: a block-sparse kernel
        applies it to partial blocks only, so a block mask that lists none
        (`partial` False; None: the bench's model says) needs none."""
        if self.mask_mod is None or self.sparse_block is None:
            return self.mask_mod is not None
        return self.block_lists().has_partial if partial is None else bool(partial)

    def flashjit_captures(self, partial=None):
        """The captured tensors flashjit's spec takes (none when no mod is
        left to read them)."""
        return self.captures if self.score_mod or self.uses_mask_mod(partial) else []

    def spec(self, partial=None):
        return flashjit_capi.make_variant_spec(
            HEAD_DIM, "bf16", self.causal, HEADS, window_left=self.window_left,
            score_mod=self.score_mod, mask_mod=self.mask_mod if self.uses_mask_mod(partial) else None,
            captures=[(dt, [len(values)]) for _, dt, values in self.flashjit_captures(partial)],
            sparse_block=self.sparse_block)

    def key(self, partial=None):  # what changes flashjit's kernel
        return (self.causal, self.window_left, self.score_mod,
                self.mask_mod if self.uses_mask_mod(partial) else None, self.sparse_block)


class BlockLists:
    """A block mask as Python lists, of one (batch, head) (the bench's masks
    depend on neither): partial[qb] and full[qb], the key blocks query block
    qb visits with and without the mask_mod, in increasing order (Flex's
    argsort lists them so)."""

    def __init__(self, block, seqlen, partial, full):
        self.block, self.seqlen, self.partial, self.full = tuple(block), seqlen, partial, full
        self.has_partial = any(partial)

    def area(self, qb, kb):  # pairs of block (qb, kb); the last ones may be short
        (m, n), s = self.block, self.seqlen
        return (min(s, (qb + 1) * m) - qb * m) * (min(s, (kb + 1) * n) - kb * n)

    @classmethod
    def from_pairs(cls, block_pairs, seqlen, block):
        """create_block_mask's rule: a block is full when all its m x n
        pairs are visible (a block cut short by the sequence's end never
        is: Flex pads the mask with hidden pairs), partial when some are."""
        m, n = block
        lists = cls(block, seqlen, [], [])
        for qb in range(-(-seqlen // m)):
            pairs = [(kb, block_pairs(qb, kb)) for kb in range(-(-seqlen // n))]
            lists.full.append([kb for kb, c in pairs if c == m * n])
            lists.partial.append([kb for kb, c in pairs if 0 < c < m * n])
        lists.has_partial = any(lists.partial)
        return lists

    @classmethod
    def from_flex(cls, tensors, block, seqlen):
        """Flex's four forward lists (torch tensors; (b, h) = (0, 0)),
        counts clamped as flashjit's kernel clamps them."""
        nk = -(-seqlen // block[1])

        def rows(num, idx):
            if num is None:
                return [[] for _ in range(-(-seqlen // block[0]))]
            num, idx = num[0, 0].tolist(), idx[0, 0].tolist()
            return [sorted(kb for kb in r[:max(0, min(c, nk))] if 0 <= kb < nk)
                    for c, r in zip(num, idx)]
        return cls(block, seqlen, rows(tensors[0], tensors[1]), rows(tensors[2], tensors[3]))

    def visit(self, q, kv):
        """How flashjit visits pair (q, kv): "full", "partial" or None."""
        qb, kb = q // self.block[0], kv // self.block[1]
        return "full" if kb in self.full[qb] else "partial" if kb in self.partial[qb] else None

    def pairs(self, block_pairs):
        """The pairs a kernel computes: full blocks whole, partial ones by
        the mask (block_pairs)."""
        return sum(self.area(qb, kb) for qb, row in enumerate(self.full) for kb in row) + sum(
            block_pairs(qb, kb) for qb, row in enumerate(self.partial) for kb in row)

    def counts(self):
        return sum(map(len, self.partial)), sum(map(len, self.full))

    def listed_area(self):
        """The pairs of every listed block, partial ones whole."""
        return sum(self.area(qb, kb) for lists in (self.full, self.partial)
                   for qb, row in enumerate(lists) for kb in row)

    def __eq__(self, other):
        return (self.block, self.seqlen, self.partial, self.full) == (
            other.block, other.seqlen, other.partial, other.full)


def tensor_type(dtype, n):  # a captured tensor's MLIR type
    return f"tensor<{n}x{dtype}>"


def mod_text(kind, name, captures, body):
    """One func.func: score (f32 score, index b, h, q, kv, captures...) -> f32
    or mask (index b, h, q, kv, captures...) -> i1."""
    args = (["%score: f32"] if kind == "score" else []) + [f"%{a}: index" for a in ("b", "h", "q", "kv")]
    args += [f"%{n}: {tensor_type(dt, len(v))}" for n, dt, v in captures]
    result = "f32" if kind == "score" else "i1"
    return "\n".join([f"func.func @{name}({', '.join(args)}) -> {result} {{"]
                     + [f"  {line}" for line in body] + ["}"]) + "\n"


def window_variant(seqlen, batch, w=1024):
    """Causal, keys at most w left of the diagonal: flashjit's structural
    window (no mod), Flex's mask_mod."""
    pairs = w * (w + 1) // 2 + (seqlen - w) * (w + 1) if seqlen > w else seqlen * (seqlen + 1) // 2
    return Variant("window", f"window {w} causal", seqlen, batch, pairs, causal=True, window_left=w,
                   mask=lambda c: lambda b, h, q, kv: (q - kv <= w) & (kv <= q))


def alibi_variant(seqlen, batch, heads=HEADS):
    slopes = [2.0 ** (-8.0 * (i + 1) / heads) for i in range(heads)]
    caps = [("slopes", "f32", slopes)]
    body = [f"%s = tensor.extract %slopes[%h] : {tensor_type('f32', heads)}",
            "%d = arith.subi %kv, %q : index", "%di = arith.index_cast %d : index to i64",
            "%df = arith.sitofp %di : i64 to f32", "%bias = arith.mulf %s, %df : f32",
            "%r = arith.addf %score, %bias : f32", "return %r : f32"]
    return Variant("alibi", "alibi causal", seqlen, batch, seqlen * (seqlen + 1) // 2, causal=True,
                   score_mod=mod_text("score", "alibi", caps, body), captures=caps,
                   mask=lambda c: lambda b, h, q, kv: kv <= q,
                   score=lambda m, c: lambda s, b, h, q, kv: s + c[0][h] * (kv - q))


def softcap_variant(seqlen, batch, cap=30.0):
    body = [f"%cap = arith.constant {cap!r} : f32", "%x = arith.divf %score, %cap : f32",
            "%t = math.tanh %x : f32", "%r = arith.mulf %t, %cap : f32", "return %r : f32"]
    return Variant("softcap", f"softcap {cap:g}", seqlen, batch, seqlen * seqlen,
                   score_mod=mod_text("score", "softcap", [], body),
                   score=lambda m, c: lambda s, b, h, q, kv: cap * m.tanh(s / cap))


def overlap(a0, a1, b0, b1):
    return max(0, min(a1, b1) - max(a0, b0))


def document_variant(seqlen, ndocs=8, seed=0, block=BLOCK):
    """One sequence of ndocs documents of random lengths; a query sees its
    own document's keys (not causal). flashjit: block-sparse on Flex's
    BlockMask (partial blocks where a block straddles a document boundary,
    full ones inside a document) with the mask_mod for the partial ones."""
    cuts = sorted(random.Random(seed).sample(range(1, seqlen), ndocs - 1))
    lengths = [b - a for a, b in zip([0] + cuts, cuts + [seqlen])]
    docs = list(zip([0] + cuts, cuts + [seqlen]))  # [start, end) of each
    caps = [("doc", "i32", [i for i, n in enumerate(lengths) for _ in range(n)])]
    t = tensor_type("i32", seqlen)
    body = [f"%dq = tensor.extract %doc[%q] : {t}", f"%dk = tensor.extract %doc[%kv] : {t}",
            "%keep = arith.cmpi eq, %dq, %dk : i32", "return %keep : i1"]

    def block_pairs(qb, kb):  # same-document pairs of a block
        q0, k0 = qb * block, kb * block
        return sum(overlap(q0, q0 + block, a, b) * overlap(k0, k0 + block, a, b) for a, b in docs)
    v = Variant("document", f"document {ndocs} docs", seqlen, 1, sum(n * n for n in lengths),
                mask_mod=mod_text("mask", "document", caps, body), captures=caps,
                mask=lambda c: lambda b, h, q, kv: c[0][q] == c[0][kv],
                sparse_block=(block, block), block_pairs=block_pairs)
    v.lengths = lengths
    return v


def blocksparse_variant(seqlen, batch, density, seed=0, block=BLOCK, goal=None):
    """round(density * nb^2) of the nb x nb tiles of block x block kept at
    random, the diagonal always (so no query row is empty); not causal.
    flashjit: block-sparse on Flex's BlockMask, whose kept blocks are all
    full, so its spec needs no mask_mod (kept should Flex list a partial
    block)."""
    nb = seqlen // block
    rng = random.Random(seed * 1000 + round(density * 1000))
    off = [i * nb + j for i in range(nb) for j in range(nb) if i != j]
    kept = set(i * (nb + 1) for i in range(nb)) | set(rng.sample(off, max(0, round(density * nb * nb) - nb)))
    caps = [("blk", "i32", [int(i in kept) for i in range(nb * nb)])]
    body = [f"%bs = arith.constant {block} : index", f"%nb = arith.constant {nb} : index",
            "%qb = arith.divui %q, %bs : index", "%kb = arith.divui %kv, %bs : index",
            "%row = arith.muli %qb, %nb : index", "%i = arith.addi %row, %kb : index",
            f"%m = tensor.extract %blk[%i] : {tensor_type('i32', nb * nb)}",
            "%zero = arith.constant 0 : i32", "%keep = arith.cmpi ne, %m, %zero : i32", "return %keep : i1"]
    return Variant("blocksparse", f"block-sparse {density:.0%}", seqlen, batch,
                   len(kept) * block * block, mask_mod=mod_text("mask", "blocksparse", caps, body),
                   captures=caps,
                   mask=lambda c: lambda b, h, q, kv: c[0][(q // block) * nb + kv // block] != 0,
                   sparse_block=(block, block), goal=goal,
                   block_pairs=lambda qb, kb: block * block if qb * nb + kb in kept else 0)


# The goal: block-sparse time falls in proportion to density (10%
# density: at most 0.15 of dense time at 16k).
BLOCKSPARSE_GOALS = {0.10: 0.15}


def sweep(families=FAMILIES):
    """bf16, 16 heads of 128, batch x seqlen = 16k tokens (the window's 32k
    row: batch 1; block-sparse also at seqlen 16k, batch 1, where
    time/dense is held to BLOCKSPARSE_GOALS)."""
    rows = []
    if "window" in families:
        rows += [window_variant(8192, 2), window_variant(32768, 1)]
    for family, make in (("alibi", alibi_variant), ("softcap", softcap_variant)):
        if family in families:
            rows += [make(s, TOKENS // s) for s in (2048, 8192)]
    if "document" in families:
        rows.append(document_variant(TOKENS))
    if "blocksparse" in families:
        rows += [blocksparse_variant(8192, TOKENS // 8192, d) for d in (0.10, 0.25, 0.50)]
        rows += [blocksparse_variant(TOKENS, 1, d, goal=BLOCKSPARSE_GOALS.get(d))
                 for d in (0.10, 0.25, 0.50)]
    return rows


# ---- the mods' MLIR on Python values: the self-test's model of the kernel
OPS = {"arith.addf": operator.add, "arith.subf": operator.sub, "arith.mulf": operator.mul,
       "arith.divf": operator.truediv, "arith.addi": operator.add, "arith.subi": operator.sub,
       "arith.muli": operator.mul, "arith.divui": operator.floordiv, "arith.andi": operator.and_,
       "arith.ori": operator.or_, "arith.index_cast": int, "arith.sitofp": float,
       "math.exp": math.exp, "math.log": math.log, "math.tanh": math.tanh, "math.sqrt": math.sqrt}
CMPI = {"eq": operator.eq, "ne": operator.ne, "slt": operator.lt, "sle": operator.le,
        "sgt": operator.gt, "sge": operator.ge}


def eval_mod(text, args):
    """Runs one mod on Python values; raises ValueError on an op outside
    those the kernels place (and KeyError on a value used before defined)."""
    lines = [line.strip() for line in text.strip().splitlines()]
    head = re.fullmatch(r"func\.func @\w+\((.*)\) -> (f32|i1) \{", lines[0])
    if not head or lines[-1] != "}":
        raise ValueError(f"not one func.func: {lines[0]!r}")
    names = re.findall(r"(%\w+): ", head.group(1))
    if len(names) != len(args):
        raise ValueError(f"{len(names)} arguments, given {len(args)}")
    env = dict(zip(names, args))
    for line in lines[1:-1]:
        res, op, operands = re.fullmatch(r"(?:(%\w+) = )?([\w.]+) (.*?)(?: : .*)?", line).groups()
        vals = [env[x] for x in re.findall(r"%\w+", operands)]
        if op == "return":
            return vals[0]
        if op == "arith.constant":
            env[res] = float(operands) if "." in operands else int(operands)
        elif op == "arith.cmpi":
            env[res] = CMPI[operands.split(",")[0]](*vals)
        elif op == "tensor.extract" and operands.split("[")[0] in names:
            env[res] = vals[0][vals[1]]
        elif op in OPS:
            env[res] = OPS[op](*vals)
        else:
            raise ValueError(f"'{op}' is not an op the kernels place: {line}")
    raise ValueError("no return")


def flashjit_visible(v, caps, b, h, q, kv, lists=None):
    """flashjit's view: the structural mask, then (block-sparse: on the
    block mask `lists`, in its partial blocks only) its spec's mask_mod."""
    if (v.causal and kv > q) or (v.window_left >= 0 and kv < q - v.window_left):
        return False
    visit = lists.visit(q, kv) if lists is not None else "partial"
    if visit != "partial":
        return visit == "full"
    partial = lists.has_partial if lists is not None else None
    return not v.uses_mask_mod(partial) or bool(eval_mod(v.mask_mod, [b, h, q, kv] + caps))


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
        self.torch, self.lib, self.kernels, self.dense = torch, None, {}, {}
        self.timing = dict(warmup=args.warmup, repeats=args.repeats, target_ms=args.target_ms)
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

    def time(self, fn, flops):
        t = time_cuda(self.torch, fn, **self.timing)
        t["tflops"] = bench_report.tflops(flops, t["ms"])
        return t

    def kernel(self, v, dense, partial=None):
        """(Kernel or None, info) of the variant (partial: whether its block
        mask has partial blocks) or of flashjit's plain kernel of its shape
        (causal as the variant), compiled once for its seqlen."""
        key = (("dense", v.causal) if dense else v.key(partial), v.seqlen)
        if key not in self.kernels:
            spec = (flashjit_capi.make_spec(HEAD_DIM, "bf16", v.causal, HEADS, HEADS) if dense
                    else v.spec(partial))
            t0 = time.perf_counter()
            try:
                ctx = flashjit_capi.Context(self.lib, device=self.torch.cuda.current_device())
                kernel = ctx.compile_spec(spec, seqlen=v.seqlen)
            except flashjit_capi.FlashjitError as e:
                self.kernels[key] = (None, {"unsupported": reason(e)})
                return self.kernels[key]
            name, config = kernel.describe()
            plain = f"flashjit_fwd_d{HEAD_DIM}_bf16{'_causal' if v.causal else ''}_h{HEADS}_kv{HEADS}"
            if name != plain if dense else not name.startswith(plain + "_v"):
                raise RuntimeError(f"flashjit handed back kernel {name} for this spec")
            self.kernels[key] = (kernel, {"kernel": name, "config": config,
                                          "compile_ms": (time.perf_counter() - t0) * 1e3})
        return self.kernels[key]

    def run_flashjit(self, v, q, k, val, caps, block_mask=None, dense=False):
        """(timing, output); dense: FLOPs of the plain kernel's own pairs.
        block_mask(): Flex's BlockMask of the row (a block-sparse variant
        runs on its lists)."""
        torch, to, s = self.torch, flashjit_capi.TensorArg.from_torch, v.seqlen
        lists = partial = None
        if v.sparse_block is not None and not dense:
            lists = self.block_mask_lists(v, block_mask())
            partial = bool(lists[0].any())  # kv_num_blocks: the partial blocks' counts
        kernel, info = self.kernel(v, dense, partial)
        if kernel is None:
            return dict(info), None
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
        pairs = (s * (s + 1) // 2 if v.causal else s * s) if dense else v.pairs
        return dict(info, **self.time(launch, v.flops(pairs))), out

    def run_dense(self, v, q, k, val):  # timed once per shape
        key = (v.batch, v.seqlen, v.causal)
        if key not in self.dense:
            self.dense[key] = self.run_flashjit(v, q, k, val, None, dense=True)[0]
        return self.dense[key], None

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
        return dict(self.time(call, v.flops()), first_call_s=time.perf_counter() - t0), out

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
        for name, run in (("flashjit", lambda: self.run_flashjit(v, q, k, val, caps, block_mask)),
                          ("flashjit-dense", lambda: self.run_dense(v, q, k, val)),
                          ("flex", lambda: self.run_flex(v, q, k, val, caps, block_mask))):
            try:
                if name != "flex" and self.error:
                    raise RuntimeError(self.error)
                row["results"][name], outs[name] = run()
            except Exception as e:  # one side failing leaves the others' numbers
                row["results"][name] = {"error": reason(e)}
        row["check"] = check_output(torch, outs.get("flashjit"), outs.get("flex"))
        fj, dn = row["results"].get("flashjit", {}), row["results"].get("flashjit-dense", {})
        if "ms" in fj and "ms" in dn:
            row["time_vs_dense"] = fj["ms"] / dn["ms"]
            row["tile_rate_vs_dense"] = (v.tile_pairs() / v.tile_pairs(dense=True)
                                         / row["time_vs_dense"])
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


def table(rows):
    head = ["variant", "shape", "flashjit ms", "flex ms", "flashjit TFLOP/s", "flex TFLOP/s",
            "flashjit/flex", "flashjit dense TFLOP/s", "variant/dense", "tile rate/dense",
            "time/dense", "check"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ratio = lambda a, b: a["tflops"] / b["tflops"] if "tflops" in a and "tflops" in b else None  # noqa: E731
    fmt = lambda x, spec=".2f": "n/a" if x is None else format(x, spec)  # noqa: E731
    for r in rows:
        fj, fx, dn = (r["results"].get(n, {}) for n in ("flashjit", "flex", "flashjit-dense"))
        c = r["check"]
        check = (f"{'ok' if c['ok'] else 'FAILED'} (rel {c['rel_err']:.1e}, max abs {c['max_abs_err']:.1e})"
                 if "ok" in c else f"n/a ({c['error']})")
        lines.append("| " + " | ".join([
            r["variant"], r["shape"], "unsupported" if "unsupported" in fj else fmt(fj.get("ms"), ".3f"),
            fmt(fx.get("ms"), ".3f"), fmt(fj.get("tflops"), ".1f"), fmt(fx.get("tflops"), ".1f"),
            fmt(ratio(fj, fx)), fmt(dn.get("tflops"), ".1f"), fmt(ratio(fj, dn)),
            fmt(r.get("tile_rate_vs_dense")), fmt(r.get("time_vs_dense")), check]) + " |")
    return "\n".join(lines)


def goal_lines(rows):
    """One line per row held to a time/dense goal."""
    lines = []
    for r in rows:
        if "goal_time_vs_dense" in r:
            goal, got = r["goal_time_vs_dense"], r.get("time_vs_dense")
            verdict = ("n/a" if got is None else f"{got:.3f}, {'met' if got <= goal else 'NOT met'}")
            lines.append(f"- {r['variant']} {r['shape']}: flashjit time/dense <= {goal:g}: {verdict}")
    return lines


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
    meta.update(tolerance=f"FAILED above relative {TOL_REL:g} against Flex, or not finite",
                flops="4 * batch * heads * head_dim * visible (q, kv) pairs",
                time_vs_dense="flashjit's time over its dense kernel's at the same shape (causal as the row)",
                tile_rate_vs_dense="flashjit's rate on the 128 x 128 tiles it computes (listed blocks, "
                                   "tiles holding a visible pair) over the dense kernel's on its own",
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
             "time_vs_dense": 0.125, "goal_time_vs_dense": 0.15,
             "results": {"flashjit": {"ms": 1.0, "tflops": 80.0},
                         "flashjit-dense": {"ms": 8.0, "tflops": 700.0}}}]
    check("the table's time/dense column and the goal's line",
          "| 0.11 | n/a | 0.12 | n/a (x) |" in table(fake) and goal_lines(fake) ==
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
