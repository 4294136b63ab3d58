"""The PyTorch layer without a GPU: op registration, fake shapes, checks.

Why: torch.compile and CUDA graphs depend on the fake implementation giving
the real one's shapes and strides, and on the Python front never touching
the library while tracing; both can be checked on fake CUDA tensors on any
machine with PyTorch. Argument checks must raise flashjit's exceptions with
a message that says what to do, before anything reaches the library.
"""

import math

import pytest

import flashjit


@pytest.fixture
def fake(torch):
    """A FakeTensorMode: tensors on a fake 'cuda' device, no GPU needed."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        yield torch


def _t(torch, *shape, dtype=None, device="cuda"):
    return torch.empty(*shape, dtype=dtype or torch.bfloat16, device=device)


def test_ops_are_registered(torch):
    import flashjit._torch_ops  # noqa: F401  (registers the ops)
    forward = torch.ops.flashjit.attention_forward.default
    schema = str(forward._schema)
    for arg in ("Tensor q", "Tensor k", "Tensor v", "float? scale", "bool causal",
                "str? score_mod", "Tensor[] captures", "Tensor[] block_mask", "str? config"):
        assert arg in schema, schema
    assert schema.endswith("-> (Tensor, Tensor)")
    assert "Tensor grad_o" in str(torch.ops.flashjit.attention_backward.default._schema)


@pytest.mark.parametrize("b,h,hkv,sq,sk,d", [
    (2, 8, 8, 17, 17, 64), (1, 8, 2, 1, 1000, 128), (3, 4, 1, 1000, 17, 64), (1, 2, 2, 0, 5, 64),
])
def test_fake_shapes(fake, b, h, hkv, sq, sk, d):
    torch = fake
    q, k = _t(torch, b, h, sq, d), _t(torch, b, hkv, sk, d)
    o, lse = flashjit.attention(q, k, k.clone(), causal=True, return_lse=True)
    assert o.shape == q.shape and o.dtype == q.dtype and o.device == q.device
    assert o.stride() == q.stride()
    assert lse.shape == (b, h, sq) and lse.dtype == torch.float32
    assert lse.is_contiguous()


def test_fake_layouts_follow_the_input(fake):
    torch = fake
    # bshd memory seen as bhsd (what transformers passes): O keeps that memory order,
    # so O.transpose(1, 2) is contiguous [b, s, h, d].
    q = _t(torch, 2, 17, 8, 64).transpose(1, 2)
    o = flashjit.attention(q, q, q)
    assert o.stride() == q.stride() and o.transpose(1, 2).is_contiguous()
    # layout="bshd" takes and gives [b, s, h, d]
    qb = _t(torch, 2, 17, 8, 64)
    ob = flashjit.attention(qb, _t(torch, 2, 33, 2, 64), _t(torch, 2, 33, 2, 64), layout="bshd")
    assert ob.shape == (2, 17, 8, 64) and ob.is_contiguous()
    # SDPA's signature
    assert flashjit.sdpa(q, q, q, is_causal=True).shape == q.shape


def test_meta_tensors_run_the_fake(torch):
    import flashjit._torch_ops  # noqa: F401
    q = _t(torch, 1, 4, 5, 128, dtype=torch.float16, device="meta")
    o, lse = torch.ops.flashjit.attention_forward(
        q, q, q, None, False, 0, -1, -1, None, None, None, [], [], 0, 0, [], None)
    assert o.shape == q.shape and lse.shape == (1, 4, 5)


@pytest.mark.parametrize("make,words", [
    (lambda t: ((t.empty(4, 5, 64, device="cuda"),) * 3, {}), "3 dimensions"),
    (lambda t: ((_t(t, 1, 2, 5, 64, dtype=t.float32),) * 3, {}), "torch.float16 or torch.bfloat16"),
    (lambda t: ((_t(t, 1, 2, 5, 64), _t(t, 1, 2, 5, 64, dtype=t.float16),
                 _t(t, 1, 2, 5, 64, dtype=t.float16)), {}), "share one dtype"),
    (lambda t: ((_t(t, 1, 6, 5, 64), _t(t, 1, 4, 5, 64), _t(t, 1, 4, 5, 64)), {}),
     "not a multiple"),
    (lambda t: ((_t(t, 1, 2, 5, 64), _t(t, 1, 2, 5, 128), _t(t, 1, 2, 5, 128)), {}),
     "same head_dim"),
    (lambda t: ((_t(t, 1, 2, 5, 64), _t(t, 2, 2, 5, 64), _t(t, 2, 2, 5, 64)), {}), "batch size"),
    (lambda t: ((_t(t, 1, 2, 5, 64), _t(t, 1, 2, 5, 64), _t(t, 1, 2, 6, 64)), {}),
     "same heads and seqlen"),
    (lambda t: ((_t(t, 1, 2, 5, 64),) * 3, {"scale": -1.0}), "positive finite"),
    (lambda t: ((_t(t, 1, 2, 5, 64),) * 3, {"softcap": 30.0, "score_mod": "x"}),
     "softcap and score_mod"),
    (lambda t: ((_t(t, 1, 2, 5, 64),) * 3, {"softcap": math.inf}), "softcap"),
    (lambda t: ((_t(t, 1, 2, 5, 64),) * 3,
                {"captures": [t.empty(2, dtype=t.int64, device="cuda")]}), "int32"),
    (lambda t: ((_t(t, 1, 2, 5, 64),) * 3, {"causal_align": "center"}), "bottom_right"),
    (lambda t: ((_t(t, 1, 2, 5, 64),) * 3, {"layout": "sbhd"}), "layout"),
    (lambda t: ((_t(t, 1, 2, 5, 64),) * 3, {"sparse_block": (64, 64)}), "without block_mask"),
    (lambda t: ((_t(t, 1, 2, 5, 64),) * 3,
                {"block_mask": (t.empty(1, 1, 1, dtype=t.int64, device="cuda"),) * 2,
                 "sparse_block": (64, 64)}), "torch.int32"),
])
def test_argument_errors_while_tracing(fake, make, words):
    args, kwargs = make(fake)
    with pytest.raises(flashjit.InvalidArgumentError) as info:
        flashjit.attention(*args, **kwargs)
    assert words in str(info.value)


def test_real_cpu_tensors_are_refused_clearly(torch):
    q = torch.randn(1, 2, 4, 64, dtype=torch.bfloat16)
    with pytest.raises(flashjit.InvalidArgumentError, match=r"on cpu.*\.cuda\(\)"):
        flashjit.attention(q, q, q)


def test_varlen_attention_argument_errors(torch):
    q = torch.randn(10, 4, 64, dtype=torch.bfloat16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    with pytest.raises(flashjit.InvalidArgumentError, match="CUDA torch.Tensor"):
        flashjit.varlen_attention(q, q, q, cu, cu)
    assert "varlen_attention" in dir(flashjit)


def test_sdpa_refuses_what_it_cannot_do(fake):
    torch = fake
    q = _t(torch, 1, 4, 5, 64)
    with pytest.raises(flashjit.UnsupportedError, match="attn_mask"):
        flashjit.sdpa(q, q, q, attn_mask=torch.ones(5, 5, dtype=torch.bool, device="cuda"))
    with pytest.raises(flashjit.UnsupportedError, match="dropout"):
        flashjit.sdpa(q, q, q, dropout_p=0.1)
    kv = _t(torch, 1, 2, 5, 64)
    with pytest.raises(flashjit.InvalidArgumentError, match="enable_gqa"):
        flashjit.sdpa(q, kv, kv)
    assert flashjit.sdpa(q, kv, kv, enable_gqa=True).shape == q.shape


def test_backward_op_refuses_cpu_tensors(torch):
    import flashjit._torch_ops  # noqa: F401
    x = torch.zeros(1, 1, 1, 64, dtype=torch.bfloat16)
    with pytest.raises(flashjit.InvalidArgumentError, match="on cpu"):
        torch.ops.flashjit.attention_backward(x, x, x, x, x, x[..., 0].float(), None, False, 0,
                                              -1, -1, None, None, None, [], [], 0, 0, [], None)


def test_torch_compile_traces_one_graph(torch):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return lambda *args: (torch.zeros(()),)

    def f(q, k, v):
        return flashjit.attention(q, k, v, causal=True, window=(16, 0), softcap=30.0) * 2

    q = torch.randn(1, 4, 33, 64, dtype=torch.bfloat16)
    k = torch.randn(1, 2, 33, 64, dtype=torch.bfloat16)
    torch._dynamo.reset()
    torch.compile(f, backend=backend, fullgraph=True)(q, k, k)
    code = graphs[0].code
    assert "torch.ops.flashjit.attention_forward" in code
    assert "30.0" in code and "16" in code


def test_compile_with_grad_traces_backward_lazily(torch):
    # Inputs that require grad: AOTAutograd traces the joint graph through
    # the fake backward; the runtime error is the CPU refusal.
    from torch._dynamo.backends.common import aot_autograd
    backend = aot_autograd(fw_compiler=lambda gm, ex: gm, bw_compiler=lambda gm, ex: gm)
    q = torch.randn(1, 4, 33, 64, dtype=torch.bfloat16, requires_grad=True)
    torch._dynamo.reset()
    fn = torch.compile(lambda q: flashjit.attention(q, q, q, causal=True).sum(), backend=backend,
                       fullgraph=True)
    with pytest.raises(flashjit.InvalidArgumentError, match="on cpu"):
        fn(q)


def test_strides_the_library_takes(torch):
    from flashjit._torch_args import _kernel_strides
    q = torch.empty(2, 8, 17, 64, dtype=torch.bfloat16)
    assert _kernel_strides("q", q) is None
    assert _kernel_strides("q", q.transpose(1, 2).contiguous().transpose(1, 2)) is None
    # An extent-1 dim may carry any stride in PyTorch: a usable one replaces it.
    odd = torch.empty(64, dtype=torch.bfloat16).as_strided((1, 1, 1, 64), (3, 5, 1, 1))
    strides = _kernel_strides("q", odd)
    assert strides[3] == 1 and all(s > 0 and s % 8 == 0 for s in strides[:3])
    with pytest.raises(flashjit.InvalidArgumentError, match=r"contiguous \(stride 1\)"):
        _kernel_strides("k", q.transpose(2, 3))
    with pytest.raises(flashjit.InvalidArgumentError, match="multiples of 8"):
        _kernel_strides("v", torch.empty(1, 2, 3, 68, dtype=torch.bfloat16)[..., :64])
    with pytest.raises(flashjit.InvalidArgumentError, match="16-byte aligned"):
        _kernel_strides("q", torch.empty(1 + 2 * 64, dtype=torch.bfloat16)[1:].view(1, 1, 2, 64))


def test_torch_tensors_as_dlpack(torch):
    from flashjit._dlpack import borrow
    t = torch.empty(2, 3, 5, 64, dtype=torch.bfloat16).transpose(1, 2)
    b = borrow(t)
    assert b.shape == (2, 5, 3, 64) and b.strides == tuple(t.stride())
    assert b.dtype == "bf16" and b.device == (1, 0)
    assert b.tensor.data == t.data_ptr()
    # the __dlpack__ path reads the same description
    class Producer:
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__()

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    c = borrow(Producer(t))
    assert (c.shape, c.strides, c.dtype, c.tensor.data) == (b.shape, b.strides, b.dtype,
                                                            b.tensor.data)


def test_kernel_cache_without_gpu(torch, lib):
    # Kernels compile without a GPU; the cache hands back the same object.
    spec = flashjit.AttentionSpec(head_dim=64, dtype="f16", num_heads=4, num_kv_heads=4)
    a = flashjit.get_kernel(spec, 0, seqlen=100)
    b = flashjit.get_kernel(spec, 0, seqlen=128)
    c = flashjit.get_kernel(spec, 0, seqlen=129)
    assert a is b and a is not c
    assert flashjit.context(0) is flashjit.context(0)
    flashjit.clear_cache()
    assert flashjit.get_kernel(spec, 0, seqlen=100) is not a


def test_gpu_tests_reference_agrees_with_sdpa(torch):
    # The float64 reference of the GPU tests, checked against PyTorch's own
    # attention on the CPU for the masks it builds.
    from test_gpu import check, reference
    q = torch.randn(2, 8, 17, 64, dtype=torch.bfloat16)
    k, v = torch.randn(2, 2, 30, 64, dtype=torch.bfloat16), torch.randn(2, 2, 30, 64,
                                                                         dtype=torch.bfloat16)
    i, j = torch.arange(17)[:, None], torch.arange(30)[None, :]
    cases = [({"causal": True}, j <= i), ({"causal": True, "align": "bottom_right"}, j <= i + 13),
             ({"window": (3, 2)}, (j >= i - 3) & (j <= i + 2)), ({}, None)]
    for kwargs, mask in cases:
        o, lse = reference(q, k, v, **kwargs)
        expected = torch.nn.functional.scaled_dot_product_attention(
            q.double(), k.double(), v.double(), attn_mask=mask, enable_gqa=True)
        torch.testing.assert_close(o, expected)
    o, lse = reference(q, k, v, keep=torch.zeros(17, 30, dtype=torch.bool))
    assert bool((o == 0).all()) and bool((lse == -math.inf).all())
    poisoned = o.clone()
    poisoned[0, 0, 0, 0] = math.nan
    with pytest.raises(AssertionError):
        check(poisoned, None, o, None, "bfloat16")
