"""flashjit on a GPU through the package, against a float64 reference.

Why: this is where the whole path is real: the ctypes marshalling of live
device tensors, the kernel cache, the caller's stream, torch.compile, CUDA
graph capture and replay, and the transformers backend. Every check
compares against attention computed in float64 on fresh random inputs, with
outputs poisoned with NaN first (explicitly where the API takes outputs,
through the allocator where it allocates them), and NaN never passes a
comparison. The backward's checks: test_gpu_backward.py. Skipped without
a CUDA GPU.
"""

import copy
import math
import warnings
import zlib

import pytest

import flashjit

pytestmark = pytest.mark.gpu

TOLERANCE = {"bfloat16": (2e-2, 2e-2), "float16": (4e-3, 4e-3)}  # (atol, rtol) on O


def reference(q, k, v, *, causal=False, scale=None, window=(-1, -1), align="top_left",
              softcap=None, bias=None, keep=None):
    """O and LSE in float64. q [B, H, Sq, D], k/v [B, Hkv, Sk, D]; bias(h,
    i, j) adds to the scaled scores; keep: an extra [Sq, Sk] bool mask."""
    import torch
    heads, kv_heads, sq, d = q.shape[1], k.shape[1], q.shape[2], q.shape[3]
    sk = k.shape[2]
    group = heads // kv_heads
    qd = q.double()
    kd = k.double().repeat_interleave(group, dim=1)
    vd = v.double().repeat_interleave(group, dim=1)
    s = (qd @ kd.transpose(-1, -2)) * (scale if scale is not None else 1 / math.sqrt(d))
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    if bias is not None:
        s = s + bias(torch.arange(heads, device=q.device)[:, None, None], i, j)
    diag = i + (sk - sq if align == "bottom_right" else 0)
    mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if causal:
        mask &= j <= diag
    if window[0] >= 0:
        mask &= j >= diag - window[0]
    if window[1] >= 0:
        mask &= j <= diag + window[1]
    if keep is not None:
        mask &= keep
    s = s.masked_fill(~mask, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    empty = torch.isinf(lse)
    p = torch.exp(s - torch.where(empty, 0.0, lse)[..., None])
    o = torch.where(empty[..., None], 0.0, p @ vd)
    return o, lse


def check(o, lse, ref_o, ref_lse, dtype_name, atol=None):
    import torch
    a, r = TOLERANCE[dtype_name]
    a = atol if atol is not None else a
    err = (o.double() - ref_o).abs()
    bad = ~(err <= a + r * ref_o.abs())  # NaN fails
    assert not bad.any(), (f"{int(bad.sum())} of {bad.numel()} outputs off; max error "
                           f"{err.nan_to_num(math.inf).max().item():.3g}")
    if lse is not None:
        finite = torch.isfinite(ref_lse)
        lerr = (lse.double() - ref_lse).abs()
        lbad = finite & ~(lerr <= 2e-3 + 1e-3 * ref_lse.abs())
        assert not lbad.any(), f"LSE off by up to {lerr[finite].nan_to_num(math.inf).max():.3g}"
        assert bool((lse[~finite] == -math.inf).all()), "rows with no key must have LSE -inf"


def rand(torch, *shape, dtype):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def poison_next_allocations(torch, *likes):
    """Frees NaN-filled blocks of the given sizes, so the caching allocator
    hands them to the next allocations of those sizes. Returns their
    addresses (to see whether the outputs did land there)."""
    junk = [torch.full(shape, math.nan, dtype=dtype, device="cuda") for shape, dtype in likes]
    addresses = [t.data_ptr() for t in junk]
    del junk
    return addresses


SHAPES = [  # batch, heads, kv_heads, seqlen_q, seqlen_k
    (2, 8, 8, 1, 1),
    (2, 8, 8, 17, 17),
    (1, 8, 2, 1000, 1000),
    (1, 8, 2, 1, 1000),
    (2, 4, 1, 17, 1000),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "b{}h{}kv{}q{}k{}".format(*s))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
def test_attention_matches_float64(cuda, dtype_name, head_dim, causal, shape):
    torch = cuda
    dtype = getattr(torch, dtype_name)
    b, h, hkv, sq, sk = shape
    torch.manual_seed(zlib.crc32(repr((dtype_name, head_dim, causal, shape)).encode()))
    q, k, v = (rand(torch, b, h, sq, head_dim, dtype=dtype),
               rand(torch, b, hkv, sk, head_dim, dtype=dtype),
               rand(torch, b, hkv, sk, head_dim, dtype=dtype))
    poison_next_allocations(torch, (q.shape, dtype), ((b, h, sq), torch.float32))
    o, lse = flashjit.attention(q, k, v, causal=causal, return_lse=True)
    torch.cuda.synchronize()
    assert o.shape == q.shape and o.dtype == dtype and lse.shape == (b, h, sq)
    check(o, lse, *reference(q, k, v, causal=causal), dtype_name)


def test_eager_plan_matches_the_op(cuda):
    # Eager calls skip the op's dispatcher through a per-thread plan; the
    # op itself (torch.ops.flashjit.attention_forward) must give the same
    # bits, and both must match float64, call after call on fresh inputs.
    torch = cuda
    from flashjit import _torch_eager as glue
    for call in range(3):
        torch.manual_seed(1000 + call)
        q = rand(torch, 2, 8, 257, 128, dtype=torch.bfloat16)
        k, v = (rand(torch, 2, 2, 257, 128, dtype=torch.bfloat16) for _ in range(2))
        poison_next_allocations(torch, (q.shape, torch.bfloat16), ((2, 8, 257), torch.float32))
        o, lse = flashjit.attention(q, k, v, causal=True, scale=0.1, return_lse=True)
        assert glue._tls.plans, "the eager call did not use a plan"
        o_op, lse_op = torch.ops.flashjit.attention_forward(
            q, k, v, 0.1, True, 0, -1, -1, None, None, None, [], [], 0, 0, [], None)
        torch.cuda.synchronize()
        assert torch.equal(o, o_op) and torch.equal(lse, lse_op)
        check(o, lse, *reference(q, k, v, causal=True, scale=0.1), "bfloat16")


def test_eager_cpp_path_matches_the_op(cuda):
    # flashjit._fastpath (where built) runs the calls after a plan's first:
    # the same bits as the op, call after call on fresh inputs, and NaN-free.
    torch = cuda
    from flashjit import _torch_eager as glue
    if glue._native is None:
        pytest.skip("flashjit._fastpath is not built (pip install --no-build-isolation with "
                    "torch and a C++ compiler builds it)")
    options = (True, 0.1, None, None, "top_left", None, None, None)
    for call in range(4):
        torch.manual_seed(2000 + call)
        q = rand(torch, 2, 8, 300, 64, dtype=torch.float16)
        k, v = (rand(torch, 2, 4, 300, 64, dtype=torch.float16) for _ in range(2))
        poison_next_allocations(torch, (q.shape, torch.float16), ((2, 8, 300), torch.float32))
        out = glue._native.forward(glue._tls.plans if call else {}, q, k, v, options,
                                   glue._current_device, glue._raw_stream, glue._primed)
        if call == 0:  # no plan yet: the Python path makes it and primes the stream
            assert out is None
            out = flashjit.attention(q, k, v, causal=True, scale=0.1, return_lse=True)
        assert out is not None, "the C++ path handed back a plain call"
        o, lse = out
        o_op, lse_op = torch.ops.flashjit.attention_forward(
            q, k, v, 0.1, True, 0, -1, -1, None, None, None, [], [], 0, 0, [], None)
        torch.cuda.synchronize()
        assert torch.equal(o, o_op) and torch.equal(lse, lse_op)
        check(o, lse, *reference(q, k, v, causal=True, scale=0.1), "float16")


def test_kernel_forward_writes_poisoned_outputs(cuda):
    # The framework-free layer on torch tensors, outputs NaN-filled first.
    torch = cuda
    spec = flashjit.AttentionSpec(head_dim=128, dtype="bf16", causal=True, num_heads=8,
                                  num_kv_heads=2)
    kernel = flashjit.get_kernel(spec, 0)
    q = rand(torch, 2, 8, 333, 128, dtype=torch.bfloat16)
    k, v = (rand(torch, 2, 2, 333, 128, dtype=torch.bfloat16) for _ in range(2))
    o = torch.full_like(q, math.nan)
    lse = torch.full((2, 8, 333), math.nan, device="cuda")
    kernel.forward(q, k, v, o, lse, scale=0.07, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    check(o, lse, *reference(q, k, v, causal=True, scale=0.07), "bfloat16")


def test_kernel_forward_through_dlpack_capsules(cuda):
    # Objects that only speak __dlpack__: the capsule path with live memory.
    torch = cuda

    class Producer:
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    spec = flashjit.AttentionSpec(head_dim=64, dtype="f16", num_heads=4, num_kv_heads=4)
    kernel = flashjit.get_kernel(spec, 0)
    q, k, v = (rand(torch, 1, 4, 77, 64, dtype=torch.float16) for _ in range(3))
    o = torch.full_like(q, math.nan)
    lse = torch.full((1, 4, 77), math.nan, device="cuda")
    kernel.forward(*(Producer(t) for t in (q, k, v, o, lse)))  # legacy default stream
    torch.cuda.synchronize()
    check(o, lse, *reference(q, k, v), "float16")


def test_cupy_arrays(cuda):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    torch = cuda
    spec = flashjit.AttentionSpec(head_dim=64, dtype="f16", num_heads=2, num_kv_heads=1)
    kernel = flashjit.get_kernel(spec, 0)
    q = cupy.random.standard_normal((1, 2, 50, 64), dtype=cupy.float32).astype(cupy.float16)
    k = cupy.random.standard_normal((1, 1, 70, 64), dtype=cupy.float32).astype(cupy.float16)
    v = cupy.random.standard_normal((1, 1, 70, 64), dtype=cupy.float32).astype(cupy.float16)
    o = cupy.full(q.shape, cupy.nan, dtype=cupy.float16)
    lse = cupy.full((1, 2, 50), cupy.nan, dtype=cupy.float32)
    kernel.forward(q, k, v, o, lse, stream=cupy.cuda.get_current_stream().ptr)
    cupy.cuda.get_current_stream().synchronize()
    as_torch = [torch.from_dlpack(x) for x in (q, k, v, o, lse)]
    check(as_torch[3], as_torch[4], *reference(*as_torch[:3]), "float16")


def test_layouts_and_strided_inputs(cuda):
    torch = cuda
    # flash-attn's [b, s, h, d], and q/k/v as slices of one packed projection
    qkv = rand(torch, 2, 129, 3, 8, 128, dtype=torch.bfloat16)
    q, k, v = qkv.unbind(2)
    o = flashjit.attention(q, k, v, causal=True, layout="bshd")
    assert o.shape == q.shape
    ref, _ = reference(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
    check(o.transpose(1, 2), None, ref, None, "bfloat16")
    # the last query token only (an extent-1 dim), as in decoding
    last = q.transpose(1, 2)[:, :, -1:]
    o = flashjit.sdpa(last, k.transpose(1, 2), v.transpose(1, 2))
    ref, _ = reference(last, k.transpose(1, 2), v.transpose(1, 2))
    check(o, None, ref, None, "bfloat16")


def test_caller_stream_is_used(cuda):
    torch = cuda
    q = rand(torch, 1, 4, 500, 128, dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        o = flashjit.attention(q, q, q, causal=True)
        o2 = o * 1  # ordered after the kernel on s only if the kernel ran on s
    s.synchronize()
    ref, _ = reference(q, q, q, causal=True)
    check(o2, None, ref, None, "bfloat16")


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
def test_window_alignment_and_softcap(cuda, dtype_name):
    torch = cuda
    dtype = getattr(torch, dtype_name)
    q = rand(torch, 1, 4, 300, 128, dtype=dtype)
    k, v = (rand(torch, 1, 2, 700, 128, dtype=dtype) for _ in range(2))
    o, lse = flashjit.attention(q, k, v, causal=True, causal_align="bottom_right",
                                window=(100, 0), return_lse=True)
    check(o, lse, *reference(q, k, v, causal=True, align="bottom_right", window=(100, 0)),
          dtype_name)
    o, lse = flashjit.attention(q, k, v, window=(50, 20), return_lse=True)
    check(o, lse, *reference(q, k, v, window=(50, 20)), dtype_name)
    # tanh.approx in the kernel: a looser bound on O
    o = flashjit.attention(q * 4, k, v, softcap=5.0)
    ref, _ = reference(q * 4, k, v, softcap=5.0)
    check(o, None, ref, None, dtype_name, atol=4e-2)


def test_score_mod_with_captures(cuda):
    # ALiBi written as a score_mod reading a captured slope per head.
    torch = cuda
    heads = 4
    text = "\n".join([
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
    slopes = torch.tensor([2.0 ** (-8 * (i + 1) / heads) for i in range(heads)], device="cuda")
    q, k, v = (rand(torch, 2, heads, 257, 64, dtype=torch.bfloat16) for _ in range(3))
    o = flashjit.attention(q, k, v, causal=True, score_mod=text, captures=[slopes])
    bias = lambda h, i, j: slopes.double()[h] * (j - i)  # noqa: E731
    ref, _ = reference(q, k, v, causal=True, bias=bias)
    check(o, None, ref, None, "bfloat16")


def test_block_sparse(cuda):
    torch = cuda
    block, seqlen = 128, 1000
    blocks = -(-seqlen // block)
    gen = torch.Generator(device="cuda").manual_seed(7)
    chosen = torch.rand(blocks, blocks, device="cuda", generator=gen) < 0.4
    chosen[torch.arange(blocks), torch.arange(blocks)] = True  # every row keeps a block
    counts = chosen.sum(-1).to(torch.int32)
    order = torch.argsort((~chosen).to(torch.int32), dim=-1, stable=True).to(torch.int32)
    kv_num_blocks = counts.view(1, 1, blocks)
    kv_indices = order.view(1, 1, blocks, blocks)
    q, k, v = (rand(torch, 1, 4, seqlen, 128, dtype=torch.bfloat16) for _ in range(3))
    o = flashjit.attention(q, k, v, block_mask=(kv_num_blocks, kv_indices),
                           sparse_block=(block, block))
    i = torch.arange(seqlen, device="cuda")
    keep = chosen[i[:, None] // block, i[None, :] // block]
    ref, _ = reference(q, k, v, keep=keep)
    check(o, None, ref, None, "bfloat16")


def test_opcheck(cuda):
    torch = cuda
    q = rand(torch, 2, 4, 65, 64, dtype=torch.bfloat16)
    kv = rand(torch, 2, 2, 65, 64, dtype=torch.bfloat16)
    args = (q, kv, kv, None, True, 0, -1, -1, None, None, None, [], [], 0, 0, [], None)
    torch.library.opcheck(torch.ops.flashjit.attention_forward.default, args,
                          test_utils=("test_schema", "test_faketensor"))


def reference_gradients(q, k, v, grad_o, *, causal, align="top_left", window=(-1, -1)):
    """dQ, dK, dV in float64 from the same rounded inputs (autograd through
    softmax(q k^T / sqrt(d)) v; rows that see no key get none)."""
    import torch
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    group, sq, sk = q.shape[1] // k.shape[1], q.shape[2], k.shape[2]
    s = qd @ kd.repeat_interleave(group, dim=1).transpose(-1, -2) / math.sqrt(q.shape[3])
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    diag = i + (sk - sq if align == "bottom_right" else 0)
    mask = j <= diag if causal else j >= 0
    if window[0] >= 0:
        mask = mask & (j >= diag - window[0])
    if window[1] >= 0:
        mask = mask & (j <= diag + window[1])
    has_key = mask.any(dim=-1, keepdim=True)
    s = torch.where(has_key, s.masked_fill(~mask, -math.inf), 0.0)
    p = torch.softmax(s, dim=-1) * has_key
    (p @ vd.repeat_interleave(group, dim=1)).backward(grad_o.double())
    return qd.grad, kd.grad, vd.grad


def relative_error(got, ref) -> float:
    """||got - ref|| / ||ref|| in float64; inf where got has a NaN or inf."""
    import torch
    if not bool(torch.isfinite(got).all()):
        return math.inf
    return ((got.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def poison_allocator(torch, *tensors):
    """Leaves blocks of the tensors' sizes filled with NaN in PyTorch's
    caching allocator, where the next allocations of those sizes land: a
    gradient the kernel does not write stays NaN."""
    filled = [torch.full_like(t, math.nan) for t in tensors]
    del filled


def test_torch_compile(cuda):
    torch = cuda

    def f(q, k, v):
        return flashjit.attention(q, k, v, causal=True).float() * 2 + 1

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)
    for seqlen in (300, 301):
        q = rand(torch, 2, 8, seqlen, 128, dtype=torch.bfloat16)
        k, v = (rand(torch, 2, 2, seqlen, 128, dtype=torch.bfloat16) for _ in range(2))
        out = compiled(q, k, v)
        torch.testing.assert_close(out, f(q, k, v), rtol=0, atol=1e-6)
        ref, _ = reference(q, k, v, causal=True)
        check((out - 1) / 2, None, ref, None, "bfloat16")


def _graph_inputs(torch):
    q = rand(torch, 2, 8, 1000, 128, dtype=torch.bfloat16)
    kv = [rand(torch, 2, 2, 1000, 128, dtype=torch.bfloat16) for _ in range(2)]
    return q, *kv


def test_cuda_graph_capture_and_replay(cuda):
    torch = cuda
    q, k, v = _graph_inputs(torch)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on the capture stream: compile, first launch
        for _ in range(2):
            flashjit.attention(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        static_o = flashjit.attention(q, k, v, causal=True)
    for _ in range(3):  # fresh inputs each replay
        for t in (q, k, v):
            t.copy_(torch.randn_like(t))
        static_o.fill_(math.nan)
        graph.replay()
        torch.cuda.synchronize()
        ref, _ = reference(q, k, v, causal=True)
        check(static_o, None, ref, None, "bfloat16")


def test_torch_compile_reduce_overhead(cuda):
    # torch.compile's CUDA graphs (cudagraph trees): warm-up runs, then capture.
    torch = cuda
    torch._dynamo.reset()
    fn = torch.compile(lambda q, k, v: flashjit.attention(q, k, v, causal=True) * 1,
                       mode="reduce-overhead")
    q, k, v = _graph_inputs(torch)
    for _ in range(4):
        for t in (q, k, v):
            t.copy_(torch.randn_like(t))
        out = fn(q, k, v).clone()
        torch.cuda.synchronize()
        ref, _ = reference(q, k, v, causal=True)
        check(out, None, ref, None, "bfloat16")


def test_transformers_tiny_llama(cuda, transformers, monkeypatch):
    torch = cuda
    from flashjit.integrations import _transformers as glue
    calls = []
    run = glue._run

    def counted(*args, **kwargs):
        calls.append(args[0].shape)
        return run(*args, **kwargs)

    monkeypatch.setattr(glue, "_run", counted)
    monkeypatch.setattr(glue, "_warned", set())
    name = flashjit.integrations.register_transformers()
    for heads, kv_heads in ((4, 2), (2, 1)):  # head dims 64 and 128, GQA
        config = transformers.LlamaConfig(
            vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
            num_attention_heads=heads, num_key_value_heads=kv_heads,
            max_position_embeddings=1024)
        torch.manual_seed(0)
        reference_model = transformers.AutoModelForCausalLM.from_config(
            copy.deepcopy(config), attn_implementation="sdpa").cuda().eval()
        models = {}
        for impl in (name, "sdpa"):
            model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                                                  attn_implementation=impl)
            model.load_state_dict(reference_model.state_dict())
            models[impl] = model.to(device="cuda", dtype=torch.bfloat16).eval()
        ids = torch.randint(0, 1000, (2, 300), device="cuda")
        calls.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.no_grad():
                ours = models[name](ids).logits.float()
                theirs = models["sdpa"](ids).logits.float()
                exact = reference_model(ids).logits
                generated = models[name].generate(ids[:1, :20], max_new_tokens=8,
                                                  min_new_tokens=8, do_sample=False)
        fallbacks = [str(w.message) for w in caught if "flashjit" in str(w.message)]
        assert not fallbacks, fallbacks  # every call ran on flashjit
        assert len(calls) >= 2 + 8 * 2  # prefill and every decode step of both layers
        assert bool(torch.isfinite(ours).all())
        err_ours = (ours - exact).abs().max().item()
        err_sdpa = (theirs - exact).abs().max().item()
        assert err_ours <= 2 * err_sdpa + 1e-2, (err_ours, err_sdpa)
        assert generated.shape == (1, 28)


def test_capture_refuses_uncompiled_and_unprimed_kernels(cuda):
    # Last: it leaves a graph capture by an exception.
    torch = cuda
    q, k, v = _graph_inputs(torch)
    flashjit.attention(q, k, v, causal=True)  # compiled and run on the current stream
    torch.cuda.synchronize()
    spec = flashjit.AttentionSpec(head_dim=128, causal=True, num_heads=8, num_kv_heads=2)
    kernel = flashjit.get_kernel(spec, 0, seqlen=1000)
    s = torch.cuda.Stream()
    if kernel.takes_tile_counter:
        with pytest.raises(flashjit.GraphCaptureError, match="has not run on this stream"):
            with torch.cuda.graph(torch.cuda.CUDAGraph(), stream=s):
                flashjit.attention(q, k, v, causal=True)
    with pytest.raises(flashjit.GraphCaptureError, match="compiles a kernel"):
        with torch.cuda.graph(torch.cuda.CUDAGraph(), stream=s):
            flashjit.attention(q[..., :64].contiguous(), k[..., :64].contiguous(),
                               v[..., :64].contiguous(), window=(7, 7))
    # the process is still healthy
    o = flashjit.attention(q, k, v, causal=True)
    torch.cuda.synchronize()
    check(o, None, reference(q, k, v, causal=True)[0], None, "bfloat16")
