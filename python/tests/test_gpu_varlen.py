"""flashjit.varlen_attention on a GPU: packed sequences of mixed lengths
(empty ones included) and a paged KV cache with shuffled pages, against a
float64 reference per sequence, outputs NaN-poisoned first; and its
gradients on packed keys (the varlen backward), per sequence against
float64 autograd.

Why: the Python path to the varlen and paged kernels goes through its own
argument packing (DLPack views, int32 offsets, the block table); a mistake
there would give wrong rows that the C++ suite cannot see.
"""

import itertools
import math

import pytest

import flashjit

from test_gpu import (check, poison_allocator, poison_next_allocations, reference,
                      reference_gradients, relative_error)

pytestmark = pytest.mark.gpu

LENGTHS_Q = [1, 17, 0, 300, 129, 2]
LENGTHS_K = [1, 1000, 5, 317, 129, 0]


def per_sequence_reference(torch, q, k, v, lq, lk, causal, align):
    """O [total_q, H, D] and LSE [H, total_q] in float64, each sequence alone."""
    outs, lses = [], []
    cq = ck = 0
    for a, b in zip(lq, lk):
        qs = q[cq:cq + a].permute(1, 0, 2)[None]
        ks = k[ck:ck + b].permute(1, 0, 2)[None]
        vs = v[ck:ck + b].permute(1, 0, 2)[None]
        if b == 0:
            o = torch.zeros(1, q.shape[1], a, q.shape[2], dtype=torch.float64, device=q.device)
            lse = torch.full((1, q.shape[1], a), -math.inf, dtype=torch.float64, device=q.device)
        else:
            o, lse = reference(qs, ks, vs, causal=causal, align=align)
        outs.append(o[0].permute(1, 0, 2))
        lses.append(lse[0])
        cq, ck = cq + a, ck + b
    return torch.cat(outs), torch.cat(lses, dim=1)


def offsets(lengths):
    """[0, l0, l0 + l1, ...]: where each packed sequence starts, and the end."""
    return [0] + list(itertools.accumulate(lengths))


def packed_inputs(torch, dtype, heads=8, kv_heads=2, d=128):
    tq, tk = sum(LENGTHS_Q), sum(LENGTHS_K)
    q = torch.randn(tq, heads, d, device="cuda", dtype=dtype)
    k = torch.randn(tk, kv_heads, d, device="cuda", dtype=dtype)
    v = torch.randn(tk, kv_heads, d, device="cuda", dtype=dtype)
    cu = lambda lens: torch.tensor(offsets(lens), dtype=torch.int32, device="cuda")  # noqa: E731
    return q, k, v, cu(LENGTHS_Q), cu(LENGTHS_K)


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("causal,align", [(False, "top_left"), (True, "bottom_right")])
def test_packed_sequences(cuda, dtype_name, causal, align):
    torch = cuda
    dtype = getattr(torch, dtype_name)
    q, k, v, cu_q, cu_k = packed_inputs(torch, dtype)
    poison_next_allocations(torch, (q.shape, dtype), ((8, q.shape[0]), torch.float32))
    o, lse = flashjit.varlen_attention(q, k, v, cu_q, cu_k, causal=causal, causal_align=align)
    ref_o, ref_lse = per_sequence_reference(torch, q, k, v, LENGTHS_Q, LENGTHS_K, causal, align)
    check(o, lse, ref_o, ref_lse, dtype_name)


@pytest.mark.parametrize("page_size", [16, 64, 256])
def test_paged_cache(cuda, page_size):
    torch = cuda
    dtype = torch.bfloat16
    q, k, v, cu_q, _ = packed_inputs(torch, dtype)
    gen = torch.Generator().manual_seed(page_size)
    counts = [(n + page_size - 1) // page_size for n in LENGTHS_K]
    pages = sum(counts) + 3
    order = torch.randperm(pages, generator=gen).tolist()
    # Unused pages hold NaN (never read); the pages' rows past a sequence's
    # keys hold finite values, as the contract asks.
    k_cache = torch.full((pages, page_size, 2, 128), math.nan, dtype=dtype, device="cuda")
    v_cache = torch.full_like(k_cache, math.nan)
    max_pages = max(counts) + 1
    table = torch.full((len(LENGTHS_K), max_pages), -1, dtype=torch.int32)
    start, used = 0, 0
    for s, (n, c) in enumerate(zip(LENGTHS_K, counts)):
        for p in range(c):
            page = order[used]
            used += 1
            table[s, p] = page
            rows = min(page_size, n - p * page_size)
            k_cache[page].normal_()
            v_cache[page].normal_()
            k_cache[page, :rows] = k[start + p * page_size:start + p * page_size + rows]
            v_cache[page, :rows] = v[start + p * page_size:start + p * page_size + rows]
        start += n
    kv_lens = torch.tensor(LENGTHS_K, dtype=torch.int32, device="cuda")
    poison_next_allocations(torch, (q.shape, dtype), ((8, q.shape[0]), torch.float32))
    o, lse = flashjit.varlen_attention(q, k_cache, v_cache, cu_q, causal=True,
                                       causal_align="bottom_right", kv_lens=kv_lens,
                                       block_table=table.cuda())
    ref_o, ref_lse = per_sequence_reference(torch, q, k, v, LENGTHS_Q, LENGTHS_K, True,
                                            "bottom_right")
    check(o, lse, ref_o, ref_lse, "bfloat16")


def test_argument_errors(cuda):
    torch = cuda
    q, k, v, cu_q, cu_k = packed_inputs(torch, torch.bfloat16)
    with pytest.raises(flashjit.InvalidArgumentError, match="not both"):
        flashjit.varlen_attention(q, k, v, cu_q)
    with pytest.raises(flashjit.InvalidArgumentError, match="int32"):
        flashjit.varlen_attention(q, k, v, cu_q.long(), cu_k)
    with pytest.raises(flashjit.InvalidArgumentError, match="both kv_lens and block_table"):
        flashjit.varlen_attention(q, k, v, cu_q, kv_lens=cu_k[1:])


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal,align", [(False, "top_left"), (True, "bottom_right"),
                                          (True, "top_left")])
def test_packed_gradients(cuda, head_dim, causal, align):
    torch = cuda
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the varlen backward runs on sm_90a")
    dtype = torch.bfloat16
    q, k, v, cu_q, cu_k = packed_inputs(torch, dtype, d=head_dim)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    o, _ = flashjit.varlen_attention(q, k, v, cu_q, cu_k, causal=causal, causal_align=align)
    grad_o = torch.randn_like(o)
    poison_allocator(torch, q, k, v)
    o.backward(grad_o)
    # Each sequence's float64 gradients go into packed reference tensors
    # (zero rows for a sequence without queries or keys), compared whole: a
    # sequence of one query and one key has dQ exactly 0 in float64, so its
    # own norm cannot scale its rounding noise.
    want = [torch.zeros(t.shape, dtype=torch.float64, device=t.device) for t in (q, k, v)]
    cq = ck = 0
    for a, b in zip(LENGTHS_Q, LENGTHS_K):
        if a and b:
            per = lambda t, n, s: t[s:s + n].permute(1, 0, 2)[None]  # noqa: E731
            ref = reference_gradients(per(q, a, cq), per(k, b, ck), per(v, b, ck),
                                      per(grad_o, a, cq), causal=causal, align=align)
            for full, part, rows, start in ((want[0], ref[0], a, cq), (want[1], ref[1], b, ck),
                                            (want[2], ref[2], b, ck)):
                full[start:start + rows] = part[0].permute(1, 0, 2)
        else:  # a sequence without queries or keys gets no gradient
            for got, rows, start in ((q.grad, a, cq), (k.grad, b, ck), (v.grad, b, ck)):
                assert bool((got[start:start + rows] == 0).all())
        cq, ck = cq + a, ck + b
    for name, got, ref in zip(("dq", "dk", "dv"), (q.grad, k.grad, v.grad), want):
        assert relative_error(got, ref) < 2e-2, name
        # Each sequence's rows on their own, their error scaled by the larger
        # of their own norm and the norm they would have at the whole
        # gradient's root-mean-square element, so that a short sequence's
        # mistake is not averaged away.
        rms = (ref.norm() / math.sqrt(ref.numel())).item()
        starts = offsets(LENGTHS_Q if name == "dq" else LENGTHS_K)
        for s, (start, end) in enumerate(zip(starts, starts[1:])):
            if start == end:
                continue
            diff = (got[start:end].double() - ref[start:end]).norm().item()
            scale = max(ref[start:end].norm().item(), rms * math.sqrt(ref[start:end].numel()))
            assert math.isfinite(diff) and diff / scale < 2e-2, (name, s, diff / scale)
