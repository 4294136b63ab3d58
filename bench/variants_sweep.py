"""The variants benchmark's sweep: each variant's mods as MLIR text, its
mask and score on Python values, its block lists and its FLOP count.

Why: variants_bench.py times these on the GPU and its self-test checks
them without one; keeping the definitions apart keeps each file to one
job. eval_mod runs a mod's MLIR on Python values (the self-test's model of
what the kernel computes).
"""

import math
import operator
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashjit_capi  # noqa: E402

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

    def row_keys(self, block=BLOCK):
        """The keys of a dense row as long as the variant's rows on average:
        its computed tiles' pairs per query row, rounded up to whole tiles.
        A non-causal dense kernel of seqlen x row_keys() computes rows at
        least as long as the variant's (a dense row's rate grows with its
        length), so that the short rows' own cost is apart from the
        masking's."""
        return block * max(1, math.ceil(self.tile_pairs() / (self.seqlen * block)))

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
