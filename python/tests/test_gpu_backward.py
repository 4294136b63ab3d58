"""flashjit's backward on a GPU through the package, against float64 gradients.

Why: training is the backward's whole point, so dQ, dK and dV are checked
as a training step produces them: through torch.autograd (eagerly, through
the custom ops and under torch.compile), in the deterministic mode
(bitwise equal twice), with windows, block masks and a soft-cap score_mod,
each against gradients computed in float64 from the same rounded inputs,
with the gradients' buffers poisoned with NaN first. Helpers are
test_gpu.py's. Skipped without a CUDA GPU.
"""

import math

import pytest

import flashjit

from test_gpu import poison_allocator, rand, reference_gradients, relative_error

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("shape,causal,align,dtype_name", [
    ((1, 4, 4, 17, 17, 64), False, "top_left", "bfloat16"),
    ((2, 8, 2, 1000, 1000, 128), True, "top_left", "bfloat16"),
    ((1, 8, 1, 33, 100, 96), True, "bottom_right", "float16"),
    ((1, 2, 2, 100, 33, 128), True, "bottom_right", "bfloat16"),
    ((1, 4, 2, 1, 257, 64), False, "top_left", "float16"),
])
def test_gradients_against_float64(cuda, shape, causal, align, dtype_name):
    torch = cuda
    b, h, hkv, sq, sk, d = shape
    dtype = getattr(torch, dtype_name)
    q = rand(torch, b, h, sq, d, dtype=dtype).requires_grad_()
    k = rand(torch, b, hkv, sk, d, dtype=dtype).requires_grad_()
    v = rand(torch, b, hkv, sk, d, dtype=dtype).requires_grad_()
    grad_o = rand(torch, b, h, sq, d, dtype=dtype)
    o = flashjit.attention(q, k, v, causal=causal, causal_align=align)
    poison_allocator(torch, q, k, v)
    o.backward(grad_o)
    refs = reference_gradients(q, k, v, grad_o, causal=causal, align=align)
    # PyTorch's math backend in the same dtype, against the same reference:
    # by default it computes in f32 internally; with
    # allow_fp16_bf16_reduction_math_sdp(True) in the inputs' dtype.
    from torch.nn.attention import SDPBackend, sdpa_kernel
    mask = None
    if causal:
        i = torch.arange(sq, device="cuda")[:, None]
        j = torch.arange(sk, device="cuda")[None, :]
        mask = j <= i + (sk - sq if align == "bottom_right" else 0)

    def math_backend(reduced):
        qm, km, vm = (t.detach().clone().requires_grad_() for t in (q, k, v))
        allow = getattr(torch.backends.cuda, "allow_fp16_bf16_reduction_math_sdp", None)
        if reduced and allow is None:
            return (None,) * 3
        before = (torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
                  if allow is not None else None)
        try:
            if allow is not None:
                allow(reduced)
            with sdpa_kernel(SDPBackend.MATH):
                torch.nn.functional.scaled_dot_product_attention(
                    qm, km, vm, attn_mask=mask, enable_gqa=h != hkv).backward(grad_o)
        finally:
            if allow is not None:
                allow(before)
        return qm.grad, km.grad, vm.grad

    math_grads = math_backend(False)
    reduced_grads = math_backend(True)
    # SDPA's flash backend (FlashAttention-2: P and dS rounded to the
    # dtype, as flashjit's) where it takes the shape.
    flash_grads = (None,) * 3
    if h == hkv and (not causal or sq == sk):
        qf, kf, vf = (t.detach().clone().requires_grad_() for t in (q, k, v))
        try:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                torch.nn.functional.scaled_dot_product_attention(
                    qf, kf, vf, is_causal=causal).backward(grad_o)
            flash_grads = (qf.grad, kf.grad, vf.grad)
        except RuntimeError:
            pass
    def finite_error(got, ref):
        # Rows with no key are NaN in SDPA's math backend: compare where finite.
        if got is None:
            return math.nan
        finite = torch.isfinite(got)
        return relative_error(got[finite], ref[finite]) if finite.any() else math.nan

    for name, got, math_got, reduced_got, flash_got, ref in zip(
            "qkv", (q.grad, k.grad, v.grad), math_grads, reduced_grads, flash_grads, refs):
        err = relative_error(got, ref)
        math_err = finite_error(math_got, ref)
        reduced_err = finite_error(reduced_got, ref)
        flash_err = relative_error(flash_got, ref) if flash_got is not None else math.nan
        print(f"d{name} {shape} causal={causal} {align} {dtype_name}: flashjit {err:.2e}, "
              f"math backend {math_err:.2e} (in {dtype_name} {reduced_err:.2e}), "
              f"flash backend {flash_err:.2e}")
        assert err < 2e-2, f"d{name}: relative error {err:.3g} (math backend {math_err:.3g})"


def test_deterministic_gradients_are_bitwise_equal(cuda):
    torch = cuda
    q = rand(torch, 1, 8, 2048, 128, dtype=torch.bfloat16).requires_grad_()
    k = rand(torch, 1, 2, 2048, 128, dtype=torch.bfloat16).requires_grad_()
    v = rand(torch, 1, 2, 2048, 128, dtype=torch.bfloat16).requires_grad_()
    grad_o = rand(torch, 1, 8, 2048, 128, dtype=torch.bfloat16)
    runs = []
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        for _ in range(3):
            for t in (q, k, v):
                t.grad = None
            flashjit.attention(q, k, v, causal=True).backward(grad_o)
            runs.append([t.grad.clone() for t in (q, k, v)])
    finally:
        torch.use_deterministic_algorithms(previous)
    for later in runs[1:]:
        for a, b in zip(runs[0], later):
            assert torch.equal(a, b)
    refs = reference_gradients(q, k, v, grad_o, causal=True)
    for got, ref in zip(runs[0], refs):
        assert relative_error(got, ref) < 2e-2


def test_eager_training_path_matches_the_custom_ops(cuda):
    # flashjit.attention with gradients runs its eager plans
    # (_TrainingAttention); the custom ops (what torch.compile records) are
    # the other path. Deterministic kernels: the same bits either way, also
    # for a non-contiguous dO and a GQA group, and on a second call (plans
    # reused).
    torch = cuda
    q = rand(torch, 2, 8, 333, 64, dtype=torch.float16).requires_grad_()
    k = rand(torch, 2, 2, 500, 64, dtype=torch.float16).requires_grad_()
    v = rand(torch, 2, 2, 500, 64, dtype=torch.float16).requires_grad_()
    grad_o = rand(torch, 2, 333, 8, 64, dtype=torch.float16).transpose(1, 2)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        for _ in range(2):
            o = flashjit.attention(q, k, v, causal=True, causal_align="bottom_right")
            assert type(o.grad_fn).__name__ == "_TrainingAttentionBackward"
            eager = torch.autograd.grad(o, (q, k, v), grad_o)
            o2, lse2 = torch.ops.flashjit.attention_forward(
                q, k, v, None, True, 1, -1, -1, None, None, None, [], [], 0, 0, [], None)
            ops = torch.ops.flashjit.attention_backward(
                grad_o, q, k, v, o2, lse2, None, True, 1, -1, -1, None, None, None, [], [],
                0, 0, [], None)
            assert torch.equal(o.detach(), o2.detach())
            for a, b in zip(eager, ops):
                assert torch.equal(a, b)
    finally:
        torch.use_deterministic_algorithms(previous)
    refs = reference_gradients(q, k, v, grad_o, causal=True, align="bottom_right")
    for got, ref in zip(eager, refs):
        assert relative_error(got, ref) < 2e-2


def test_backward_in_a_compiled_training_step(cuda):
    torch = cuda
    q = rand(torch, 2, 4, 300, 64, dtype=torch.bfloat16).requires_grad_()
    k = rand(torch, 2, 4, 300, 64, dtype=torch.bfloat16).requires_grad_()
    v = rand(torch, 2, 4, 300, 64, dtype=torch.bfloat16).requires_grad_()
    torch._dynamo.reset()
    step = torch.compile(lambda q, k, v: flashjit.attention(q, k, v, causal=True).float().sum(),
                         fullgraph=True)
    step(q, k, v).backward()
    grad_o = torch.ones(2, 4, 300, 64, device="cuda", dtype=torch.bfloat16)
    for got, ref in zip((q.grad, k.grad, v.grad),
                        reference_gradients(q, k, v, grad_o, causal=True)):
        assert relative_error(got, ref) < 2e-2


@pytest.mark.parametrize("window,causal,align", [
    ((100, 0), True, "top_left"),
    ((64, 0), True, "bottom_right"),
    ((50, 20), False, "top_left"),
])
def test_backward_of_a_window(cuda, window, causal, align):
    torch = cuda
    q = rand(torch, 1, 8, 300, 128, dtype=torch.bfloat16).requires_grad_()
    k = rand(torch, 1, 2, 333, 128, dtype=torch.bfloat16).requires_grad_()
    v = rand(torch, 1, 2, 333, 128, dtype=torch.bfloat16).requires_grad_()
    grad_o = rand(torch, 1, 8, 300, 128, dtype=torch.bfloat16)
    o = flashjit.attention(q, k, v, causal=causal, causal_align=align, window=window)
    poison_allocator(torch, q, k, v)
    o.backward(grad_o)
    refs = reference_gradients(q, k, v, grad_o, causal=causal, align=align, window=window)
    for name, got, ref in zip("qkv", (q.grad, k.grad, v.grad), refs):
        assert relative_error(got, ref) < 2e-2, name


DOCUMENT_MASK = "\n".join([
    "func.func @documents(%b: index, %h: index, %q: index, %kv: index, "
    "%ids: tensor<?x?xi32>) -> i1 {",
    "  %dq = tensor.extract %ids[%b, %q] : tensor<?x?xi32>",
    "  %dk = tensor.extract %ids[%b, %kv] : tensor<?x?xi32>",
    "  %same = arith.cmpi eq, %dq, %dk : i32",
    "  return %same : i1",
    "}"])


@pytest.mark.parametrize("causal", [False, True])
def test_backward_of_a_block_mask(cuda, causal):
    # Random lists of 128 x 128 blocks (shuffled, every row with a block):
    # the backward's transposed lists are built from them on the GPU.
    torch = cuda
    block, seqlen, heads, kv_heads = 128, 1000, 4, 2
    blocks = -(-seqlen // block)
    gen = torch.Generator(device="cuda").manual_seed(11)
    chosen = torch.rand(heads, blocks, blocks, device="cuda", generator=gen) < 0.4
    chosen[:, torch.arange(blocks), torch.arange(blocks)] = True
    counts = chosen.sum(-1).to(torch.int32)
    shuffled = torch.rand(heads, blocks, blocks, device="cuda", generator=gen)
    order = torch.argsort(torch.where(chosen, shuffled, 2.0), dim=-1).to(torch.int32)
    lists = (counts.view(1, heads, blocks), order.view(1, heads, blocks, blocks))
    q = rand(torch, 1, heads, seqlen, 64, dtype=torch.bfloat16).requires_grad_()
    k = rand(torch, 1, kv_heads, seqlen, 64, dtype=torch.bfloat16).requires_grad_()
    v = rand(torch, 1, kv_heads, seqlen, 64, dtype=torch.bfloat16).requires_grad_()
    grad_o = rand(torch, 1, heads, seqlen, 64, dtype=torch.bfloat16)
    o = flashjit.attention(q, k, v, causal=causal, block_mask=lists, sparse_block=(block, block))
    poison_allocator(torch, q, k, v)
    o.backward(grad_o)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    group = heads // kv_heads
    s = qd @ kd.repeat_interleave(group, dim=1).transpose(-1, -2) / 8.0
    i = torch.arange(seqlen, device="cuda")
    keep = chosen[:, i[:, None] // block, i[None, :] // block][None]
    if causal:
        keep = keep & (i[None, :] <= i[:, None])
    p = torch.softmax(s.masked_fill(~keep, -math.inf), dim=-1)
    (p @ vd.repeat_interleave(group, dim=1)).backward(grad_o.double())
    for name, got, ref in zip("qkv", (q.grad, k.grad, v.grad), (qd.grad, kd.grad, vd.grad)):
        assert relative_error(got, ref) < 2e-2, name


@pytest.mark.parametrize("head_dim", [64, 128])
def test_backward_of_softcap_and_a_document_mask(cuda, head_dim):
    # Soft-capped scores (their derivative 1 - tanh^2 derived from the
    # score_mod) under a document mask, against float64 autograd through
    # the same functions.
    torch = cuda
    batch, heads, kv_heads, seqlen, cap = 2, 4, 2, 300, 5.0
    q = (rand(torch, batch, heads, seqlen, head_dim, dtype=torch.bfloat16) * 4).requires_grad_()
    k = rand(torch, batch, kv_heads, seqlen, head_dim, dtype=torch.bfloat16).requires_grad_()
    v = rand(torch, batch, kv_heads, seqlen, head_dim, dtype=torch.bfloat16).requires_grad_()
    grad_o = rand(torch, batch, heads, seqlen, head_dim, dtype=torch.bfloat16)
    ids = (torch.arange(seqlen, device="cuda") // 77).to(torch.int32).repeat(batch, 1)
    ids[1] = (torch.arange(seqlen, device="cuda") // 120).to(torch.int32)
    o = flashjit.attention(q, k, v, causal=True, softcap=cap, mask_mod=DOCUMENT_MASK,
                           captures=[ids], capture_dims=[[-1, -1]])
    poison_allocator(torch, q, k, v)
    o.backward(grad_o)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    group = heads // kv_heads
    s = qd @ kd.repeat_interleave(group, dim=1).transpose(-1, -2) / math.sqrt(head_dim)
    s = cap * torch.tanh(s / cap)
    i = torch.arange(seqlen, device="cuda")
    keep = (i[None, :] <= i[:, None])[None, None] & (ids[:, None, :, None] == ids[:, None, None, :])
    p = torch.softmax(s.masked_fill(~keep, -math.inf), dim=-1)
    (p @ vd.repeat_interleave(group, dim=1)).backward(grad_o.double())
    for name, got, ref in zip("qkv", (q.grad, k.grad, v.grad), (qd.grad, kd.grad, vd.grad)):
        assert relative_error(got, ref) < 2e-2, name


def test_eager_variant_plans_match_the_ops(cuda, monkeypatch):
    # A document mask with its ids captured and a FlexAttention BlockMask
    # runs through plans (flashjit._torch_eager, _Variant), eagerly and
    # with gradients: the forward gives the op's bits, call after call on
    # fresh inputs and fresh ids and lists of the same shapes (one plan),
    # and the gradients match float64 through the same mask.
    torch = cuda
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    from flashjit import _torch_eager as glue
    from flashjit._torch_args import _block_mask_args
    batch, heads, kv_heads, seqlen, head_dim = 2, 4, 2, 640, 64
    # Plans of earlier tests on this thread are not this test's.
    earlier_plans = {id(p) for p in getattr(glue._tls, "plans", {}).values()}
    # The backward runs on autograd's device thread, whose plans this
    # thread cannot see: the plans made are recorded as they are made.
    made = []
    make_backward_plan = glue._make_backward_plan
    monkeypatch.setattr(glue, "_make_backward_plan",
                        lambda *args: made.append(make_backward_plan(*args)) or made[-1])
    for call in range(3):
        torch.manual_seed(3000 + call)
        ids = (torch.arange(seqlen, device="cuda") // (150 + 40 * call)).to(torch.int32)
        ids = torch.stack([ids, ids.flip(0)])
        mask = flex.create_block_mask(lambda b, h, qi, ki: ids[b, qi] == ids[b, ki], batch,
                                      None, seqlen, seqlen, device="cuda")
        sparse_m, sparse_n, lists = _block_mask_args(mask, None)
        assert len(lists) == 8, "the BlockMask's transposed lists are what the plan takes"
        q = rand(torch, batch, heads, seqlen, head_dim, dtype=torch.bfloat16).requires_grad_()
        k = rand(torch, batch, kv_heads, seqlen, head_dim, dtype=torch.bfloat16).requires_grad_()
        v = rand(torch, batch, kv_heads, seqlen, head_dim, dtype=torch.bfloat16).requires_grad_()
        grad_o = rand(torch, batch, heads, seqlen, head_dim, dtype=torch.bfloat16)
        kwargs = dict(mask_mod=DOCUMENT_MASK, captures=[ids], capture_dims=[[-1, -1]],
                      block_mask=mask)
        with torch.no_grad():
            o, lse = flashjit.attention(q, k, v, return_lse=True, **kwargs)
        o_op, lse_op = torch.ops.flashjit.attention_forward(
            q.detach(), k.detach(), v.detach(), None, False, 0, -1, -1, None, None,
            DOCUMENT_MASK, [ids], [-1, -1], sparse_m, sparse_n, lists, None)
        torch.cuda.synchronize()
        assert torch.equal(o, o_op) and torch.equal(lse, lse_op)
        ours = [p for p in glue._tls.plans.values()
                if p.extras is not None and id(p) not in earlier_plans]
        assert len(ours) == 1, "one plan for the eager and the training forward, every call"

        o = flashjit.attention(q, k, v, **kwargs)
        assert type(o.grad_fn).__name__ == "_TrainingAttentionBackward"
        poison_allocator(torch, q, k, v)
        got = torch.autograd.grad(o, (q, k, v), grad_o)
        assert len(made) == 1 and made[0].extras is not None, \
            "one backward plan with the captures and transposed lists, made once"
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        group = heads // kv_heads
        s = qd @ kd.repeat_interleave(group, dim=1).transpose(-1, -2) / math.sqrt(head_dim)
        keep = (ids[:, None, :, None] == ids[:, None, None, :])
        p = torch.softmax(s.masked_fill(~keep, -math.inf), dim=-1)
        refs = torch.autograd.grad(p @ vd.repeat_interleave(group, dim=1), (qd, kd, vd),
                                   grad_o.double())
        for name, a, ref in zip("qkv", got, refs):
            assert relative_error(a, ref) < 2e-2, name
