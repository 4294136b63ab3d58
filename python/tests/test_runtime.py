"""The ctypes layer: specs, contexts, kernels and forward's argument checks.

Why: these run wherever the library does, GPU or not (a context compiles
PTX without one), so CI checks that every C status reaches Python as the
right FlashjitError subclass with the library's own message, that specs
reach the library as written (the kernel's name spells them back), and that
DLPack tensors from NumPy and hand-built DLTensors marshal correctly.
"""

import ctypes
import threading

import pytest

import flashjit
from flashjit import AttentionSpec, Capture, dltensor
from flashjit.spec import CSpec


@pytest.fixture
def ctx(lib, cache_dir):
    with flashjit.Context(0, cache_dir=cache_dir) as context:
        yield context


class FakeDevice:
    """Hand-built kDLCUDA tensors at made-up addresses: the library checks
    them on the host and, without a GPU, stops before any launch."""

    def __init__(self):
        self.next = 1 << 32

    def tensor(self, shape, dtype="bf16", strides=None, offset=0):
        self.next += 1 << 28
        return dltensor(self.next + offset, shape, dtype, strides=strides)

    def problem(self, b=1, h=4, hkv=2, sq=16, sk=16, d=128, dtype="bf16"):
        return (self.tensor((b, h, sq, d), dtype), self.tensor((b, hkv, sk, d), dtype),
                self.tensor((b, hkv, sk, d), dtype), self.tensor((b, h, sq, d), dtype),
                self.tensor((b, h, sq), "f32"))


def test_context_without_gpu_still_compiles(ctx, has_gpu):
    assert ctx.chip.startswith("sm_")
    if not has_gpu:
        assert ctx.chip == "sm_90a"
        assert not ctx.has_device and "libcuda" in ctx.device_error
    kernel = ctx.compile(AttentionSpec(head_dim=128, causal=True, num_heads=16, num_kv_heads=4))
    assert kernel.name == "flashjit_fwd_d128_bf16_causal_h16_kv4"
    assert kernel.config.count(":") >= 1 and kernel.family in kernel.config
    assert kernel.spec.num_kv_heads == 4


@pytest.mark.parametrize("spec,expected", [
    (AttentionSpec(head_dim=64, dtype="f16"), "flashjit_fwd_d64_f16_h1_kv1"),
    (AttentionSpec(head_dim=128, dtype="bfloat16", num_heads=8, num_kv_heads=8),
     "flashjit_fwd_d128_bf16_h8_kv8"),
    (AttentionSpec(head_dim=256, causal=True), "flashjit_fwd_d256_bf16_causal_h1_kv1"),
])
def test_spec_fields_reach_the_library(ctx, spec, expected):
    assert ctx.compile(spec).name == expected


def test_variant_specs_compile(ctx):
    window = ctx.compile(AttentionSpec(causal=True, window=(64, 0), causal_align="bottom_right"))
    softcap = ctx.compile(AttentionSpec(score_mod=flashjit.softcap_score_mod(30.0)))
    sparse = ctx.compile(AttentionSpec(sparse_block=(128, 128)))
    names = {window.name, softcap.name, sparse.name}
    assert len(names) == 3  # the variant part of each name differs
    assert all("_v" in name for name in names)


def test_varlen_and_paged_specs(ctx):
    packed = AttentionSpec(num_heads=8, num_kv_heads=2, causal=True,
                           causal_align="bottom_right", varlen=True)
    paged = AttentionSpec(num_heads=8, num_kv_heads=2, causal=True,
                          causal_align="bottom_right", varlen=True, page_size=16)
    assert (packed.api_version, paged.api_version) == (8, 10)
    c = paged.to_c()
    assert (c.varlen, c.page_size, c.struct_size) == (1, 16, ctypes.sizeof(CSpec))
    names = (ctx.compile(packed).name, ctx.compile(paged).name)
    assert "_varlen_v" in names[0] and "_varlen_paged_v" in names[1]
    with pytest.raises(flashjit.InvalidArgumentError, match="power of two"):
        ctx.compile(AttentionSpec(varlen=True, page_size=48))
    with pytest.raises(flashjit.InvalidArgumentError, match="varlen kernels only"):
        ctx.compile(AttentionSpec(page_size=16))
    with pytest.raises(flashjit.InvalidArgumentError, match="varlen must be"):
        AttentionSpec(varlen="yes")


def test_config_and_chip_choose_the_template(lib, cache_dir):
    with flashjit.Context(0, cache_dir=cache_dir, chip="sm_80") as ampere:
        assert ampere.chip == "sm_80"
        assert ampere.compile(AttentionSpec()).family == "mma_sync"
    with flashjit.Context(0, cache_dir=cache_dir) as ctx:
        assert ctx.compile(AttentionSpec(), config="mma_sync").family == "mma_sync"
        assert ctx.compile(AttentionSpec(), config="cuda_core", seqlen=4096).family == "cuda_core"


def test_unsupported_head_dim_is_unsupported_error(ctx):
    with pytest.raises(flashjit.UnsupportedError) as info:
        ctx.compile(AttentionSpec(head_dim=48))
    assert info.value.status == 2 and info.value.status_name == "unsupported"
    assert "head dim 48" in info.value.message
    assert info.value.message.startswith("flashjit_kernel_compile:")


def test_bad_gqa_is_the_librarys_invalid_argument(ctx):
    with pytest.raises(flashjit.InvalidArgumentError) as info:
        ctx.compile(AttentionSpec(num_heads=6, num_kv_heads=4))
    assert "multiple of kv heads" in info.value.message
    assert isinstance(info.value, ValueError)


def test_malformed_mlir_is_reported(ctx):
    with pytest.raises(flashjit.FlashjitError) as info:
        ctx.compile(AttentionSpec(score_mod="func.func @f(%score: f32) -> f32 { nonsense }"))
    assert info.value.status in (1, 2, 4)
    assert info.value.message


def test_bad_config_and_seqlen(ctx):
    with pytest.raises(flashjit.InvalidArgumentError):
        ctx.compile(AttentionSpec(), config="no_such_family")
    with pytest.raises(flashjit.InvalidArgumentError) as info:
        ctx.compile(AttentionSpec(), seqlen=-5)
    assert "seqlen" in info.value.message


def test_python_side_spec_checks():
    with pytest.raises(flashjit.InvalidArgumentError, match="'bf16' or 'f16'"):
        AttentionSpec(dtype="f32")
    with pytest.raises(flashjit.InvalidArgumentError, match="range"):
        AttentionSpec(head_dim=1 << 70)
    with pytest.raises(flashjit.InvalidArgumentError, match="integer"):
        AttentionSpec(head_dim=64.0)
    with pytest.raises(flashjit.InvalidArgumentError, match="causal"):
        AttentionSpec(causal="yes")
    with pytest.raises(flashjit.InvalidArgumentError, match="at most 8"):
        AttentionSpec(captures=[Capture("f32", (4,))] * 9)
    with pytest.raises(flashjit.InvalidArgumentError, match="rank"):
        Capture("i32", (1, 2, 3, 4, 5))
    with pytest.raises(flashjit.InvalidArgumentError, match="int32"):
        Capture("f16", (4,))
    with pytest.raises(flashjit.InvalidArgumentError, match="window"):
        AttentionSpec(window=5)
    with pytest.raises(flashjit.InvalidArgumentError, match="positive"):
        flashjit.softcap_score_mod(-1.0)


def test_spec_is_a_hashable_cache_key():
    a = AttentionSpec(head_dim=64, dtype="float16", captures=[("f32", [4])])
    b = AttentionSpec(head_dim=64, dtype="f16", captures=(Capture("f32", (4,)),))
    assert a == b and hash(a) == hash(b)
    assert {a: 1}[b] == 1


def test_struct_size_follows_the_fields_set():
    assert AttentionSpec().to_c().struct_size == 40
    assert AttentionSpec(window=(8, 0)).to_c().struct_size == 400
    assert AttentionSpec(sparse_block=(64, 64)).to_c().struct_size == 416


def test_a_spec_from_a_newer_header_is_refused(lib, ctx):
    # A caller whose spec is longer than this library knows and sets a field
    # there: the library says so instead of ignoring it.
    buffer = (ctypes.c_uint8 * 512)()
    spec = AttentionSpec().to_c()
    ctypes.memmove(buffer, ctypes.addressof(spec), ctypes.sizeof(spec))
    known = ctypes.sizeof(CSpec)
    CSpec.from_buffer(buffer).struct_size = known + 8
    buffer[known + 4] = 1
    out = ctypes.c_void_p()
    status = lib.fn("flashjit_kernel_compile")(ctx._handle, ctypes.addressof(buffer),
                                               ctypes.byref(out))
    error = lib.error(status)
    assert isinstance(error, flashjit.UnsupportedError)
    assert f"beyond the {known} bytes" in error.message


def test_forward_without_gpu_is_no_device(ctx, has_gpu):
    if has_gpu:
        pytest.skip("a GPU is present: fake addresses would be launched")
    kernel = ctx.compile(AttentionSpec(num_heads=4, num_kv_heads=2))
    with pytest.raises(flashjit.NoDeviceError) as info:
        kernel.forward(*FakeDevice().problem())
    assert info.value.status_name == "no device"
    assert kernel.name in info.value.message


def test_forward_checks_reach_python(ctx):
    kernel = ctx.compile(AttentionSpec(num_heads=4, num_kv_heads=2))
    dev = FakeDevice()
    q, k, v, o, lse = dev.problem()
    cases = [
        ((q, k, v, o, dev.tensor((1, 4, 15), "f32")), "lse shape"),
        ((dev.tensor((1, 4, 16, 128), "f16"), k, v, o, lse), "compiled for bf16"),
        ((q, k, v, dev.tensor((1, 4, 16, 128), strides=(8192, 2048, 128, 2)), lse),
         "head-dim stride"),
        ((q, k, v, dev.tensor((1, 4, 16, 128), offset=2), lse), "16-byte aligned"),
        ((q, k, v, q, lse), "overlap"),
        ((q, dev.tensor((1, 4, 16, 128)), v, o, lse), "kv heads"),
        ((q, k, v, o, dev.tensor((1, 4, 16), "bf16")), "f32"),
    ]
    for args, words in cases:
        with pytest.raises(flashjit.InvalidArgumentError) as info:
            kernel.forward(*args)
        assert words in info.value.message, info.value.message


def test_forward_takes_numpy_through_dlpack(ctx, numpy):
    kernel = ctx.compile(AttentionSpec(head_dim=64, dtype="f16"))
    q = numpy.zeros((1, 1, 8, 64), numpy.float16)
    lse = numpy.zeros((1, 1, 8), numpy.float32)
    with pytest.raises(flashjit.InvalidArgumentError) as info:
        kernel.forward(q, q, q, q.copy(), lse)
    assert "kDLCPU" in info.value.message  # the library read numpy's DLTensor
    borrowed = flashjit._dlpack.borrow(q)
    assert borrowed.shape == (1, 1, 8, 64) and borrowed.dtype == "f16"
    assert borrowed.device == (1, 0)


def test_captures_and_block_masks_are_checked(ctx):
    dev = FakeDevice()
    alibi = ctx.compile(AttentionSpec(
        num_heads=4, num_kv_heads=2, captures=[Capture("f32", (4,))],
        score_mod="\n".join([
            "func.func @alibi(%score: f32, %b: index, %h: index, %q: index, %kv: index, "
            "%slopes: tensor<4xf32>) -> f32 {",
            "  %s = tensor.extract %slopes[%h] : tensor<4xf32>",
            "  %qi = arith.index_cast %q : index to i32",
            "  %ki = arith.index_cast %kv : index to i32",
            "  %d = arith.subi %ki, %qi : i32",
            "  %df = arith.sitofp %d : i32 to f32",
            "  %bias = arith.mulf %s, %df : f32",
            "  %r = arith.addf %score, %bias : f32",
            "  return %r : f32",
            "}"])))
    with pytest.raises(flashjit.InvalidArgumentError, match="captured tensors"):
        alibi.forward(*dev.problem())
    with pytest.raises(flashjit.InvalidArgumentError, match="dtype"):
        alibi.forward(*dev.problem(), captures=[dev.tensor((4,), "i32")])
    dense = ctx.compile(AttentionSpec(num_heads=4, num_kv_heads=2))
    mask = (dev.tensor((1, 1, 1), "i32"), dev.tensor((1, 1, 1, 1), "i32"))
    with pytest.raises(flashjit.InvalidArgumentError, match="not block-sparse"):
        dense.forward(*dev.problem(), block_mask=mask)
    with pytest.raises(flashjit.InvalidArgumentError, match="block_mask has 3"):
        dense.forward(*dev.problem(), block_mask=mask + mask[:1])


def test_handles_close_once_and_refuse_reuse(lib, cache_dir):
    ctx = flashjit.Context(0, cache_dir=cache_dir)
    kernel = ctx.compile(AttentionSpec())
    ctx.close()
    ctx.close()
    assert kernel.handle != 0  # kernels outlive their context
    with pytest.raises(flashjit.InvalidArgumentError, match="closed"):
        ctx.compile(AttentionSpec())
    kernel.release()
    kernel.release()
    assert kernel.handle == 0
    with pytest.raises(flashjit.InvalidArgumentError, match="released"):
        kernel.forward(*FakeDevice().problem())


def test_argument_types_are_python_errors(ctx):
    kernel = ctx.compile(AttentionSpec(num_heads=4, num_kv_heads=2))
    with pytest.raises(TypeError, match="DLTensor"):
        kernel.forward([1, 2], *FakeDevice().problem()[1:])
    with pytest.raises(TypeError, match="stream"):
        kernel.forward(*FakeDevice().problem(), stream="default")
    with pytest.raises(TypeError, match="AttentionSpec"):
        ctx.compile({"head_dim": 128})
    with pytest.raises(flashjit.InvalidArgumentError):
        flashjit.Context(-1)
    with pytest.raises(flashjit.InvalidArgumentError):
        dltensor(0x1000, (4,), "f64")


def test_errors_are_per_thread(ctx):
    # The message read after a failure is that thread's own call's.
    messages = {}

    def fail(head_dim):
        try:
            ctx.compile(AttentionSpec(head_dim=head_dim))
        except flashjit.UnsupportedError as e:
            messages[head_dim] = e.message

    threads = [threading.Thread(target=fail, args=(d,)) for d in (40, 48, 72)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(f"head dim {d}" in messages[d] for d in (40, 48, 72))


def test_backward_compiles_and_its_checks_reach_python(ctx, has_gpu):
    spec = AttentionSpec(num_heads=4, num_kv_heads=2, causal=True)
    backward = ctx.compile_backward(spec)
    assert backward.workspace_bytes(1, 16) >= 4 * 4 * 16 * 129  # D and the f32 dQ
    assert ctx.compile_backward(spec, deterministic=True).deterministic
    assert ctx.compile_backward(spec, seqlen=4096).workspace_bytes(1, 16) > 0
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="seqlen"):
            ctx.compile_backward(spec, seqlen=bad)
    dev = FakeDevice()
    q, k, v, o, lse = dev.problem()
    dout, dq = dev.tensor((1, 4, 16, 128)), dev.tensor((1, 4, 16, 128))
    dk, dv = dev.tensor((1, 2, 16, 128)), dev.tensor((1, 2, 16, 128))
    words = backward.workspace_bytes(1, 16) // 4
    workspace = dev.tensor((words,), "f32")
    cases = [
        ((q, k, v, o, lse, dout, dq, dk, dev.tensor((1, 2, 15, 128))), workspace, "dv"),
        ((q, k, v, o, lse, dout, dq, dk, dv), dev.tensor((words // 2,), "f32"), "workspace"),
        ((q, k, v, o, lse, dout, q, dk, dv), workspace, "overlap"),
    ]
    for args, space, name in cases:
        with pytest.raises(flashjit.InvalidArgumentError) as info:
            backward.backward(*args, workspace=space)
        assert name in info.value.message, info.value.message
    if not has_gpu:
        with pytest.raises(flashjit.NoDeviceError):
            backward.backward(q, k, v, o, lse, dout, dq, dk, dv, workspace=workspace)
    backward.release()
    with pytest.raises(flashjit.InvalidArgumentError, match="released"):
        backward.workspace_bytes(1, 16)


def test_varlen_backward_checks_reach_python(ctx, has_gpu):
    spec = AttentionSpec(num_heads=4, num_kv_heads=2, causal=True, causal_align="bottom_right",
                         varlen=True)
    backward = ctx.compile_backward(spec)
    dev = FakeDevice()
    tq, tk = 40, 70
    q, o, dout, dq = (dev.tensor((tq, 4, 128)) for _ in range(4))
    k, v, dk, dv = (dev.tensor((tk, 2, 128)) for _ in range(4))
    lse = dev.tensor((4, tq), "f32")
    cu_q, cu_k = dev.tensor((4,), "i32"), dev.tensor((4,), "i32")
    words = backward.workspace_bytes(1, tq) // 4
    workspace = dev.tensor((words,), "f32")
    args = (q, k, v, o, lse, dout, dq, dk, dv, cu_q, cu_k)
    cases = [
        (args, 30, workspace, "max_seqlen_k"),
        (args[:9] + (cu_q, dev.tensor((3,), "i32")), 30, workspace, "cu_seqlens_k"),
        (args, 30, dev.tensor((words // 2,), "f32"), "workspace"),
        (args[:6] + (q,) + args[7:], 30, workspace, "overlap"),
    ]
    for i, (call, max_k, space, name) in enumerate(cases):
        with pytest.raises(flashjit.InvalidArgumentError) as info:
            backward.backward_varlen(*call, tk + 1 if i == 0 else max_k, workspace=space)
        assert name in info.value.message, info.value.message
    if not has_gpu:
        with pytest.raises(flashjit.NoDeviceError):
            backward.backward_varlen(*args, 30, workspace=workspace)
    # The dense call refuses the varlen kernels.
    dense = FakeDevice()
    grads = (dense.tensor((1, 4, 16, 128)), dense.tensor((1, 4, 16, 128)),
             dense.tensor((1, 2, 16, 128)), dense.tensor((1, 2, 16, 128)))
    with pytest.raises(flashjit.InvalidArgumentError, match="flashjit_backward_run_varlen"):
        backward.backward(*dense.problem(), *grads, workspace=workspace)


def test_backward_of_an_unsupported_spec_says_what(ctx):
    # Varlen: the wgmma_bwd kernels (sm_90a, head dims 64 and 128), not
    # the deterministic ones.
    ctx.compile_backward(AttentionSpec(varlen=True))
    with pytest.raises(flashjit.UnsupportedError) as info:
        ctx.compile_backward(AttentionSpec(varlen=True, head_dim=256))
    assert "wgmma_bwd kernels only" in info.value.message, info.value.message
    with pytest.raises(flashjit.UnsupportedError, match="varlen"):
        ctx.compile_backward(AttentionSpec(varlen=True), deterministic=True)
    # score_mod has a backward (its derivative is derived from its text),
    # and so do block masks, not deterministic ones.
    ctx.compile_backward(AttentionSpec(score_mod=flashjit.softcap_score_mod(30.0)))
    ctx.compile_backward(AttentionSpec(sparse_block=(128, 128)))
    with pytest.raises(flashjit.UnsupportedError, match="block masks"):
        ctx.compile_backward(AttentionSpec(sparse_block=(128, 128)), deterministic=True)
    # Windows have a backward, a deterministic one too.
    ctx.compile_backward(AttentionSpec(window=(64, 0), causal=True))
    ctx.compile_backward(AttentionSpec(window=(64, 0), causal=True), deterministic=True)
