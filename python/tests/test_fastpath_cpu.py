"""flashjit._fastpath, the C++ eager path, without a GPU.

Why: the extension must do exactly what the Python plan path does or hand
the call back to it: reach the same C call with the plan's DLTensors
pointing at this call's tensors, raise the library's error through the same
check, and return None (the Python path runs the call) for another current
device, a misaligned pointer, a persistent kernel not primed on the stream,
a call without a plan or with an unhashable option. The device hooks are
replaced so CPU tensors stand in for CUDA ones; the library, finding no GPU,
refuses the launch after its checks. Skipped where a GPU is visible (the GPU
tests run the real thing there) and where the extension is not built.
"""

import contextlib
import ctypes
import math

import pytest

import flashjit


@pytest.fixture
def glue(torch, lib, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: test_gpu.py runs the C++ path on real tensors")
    # The plans and their torch hooks live in flashjit._torch_eager, which
    # looks these names up as its own globals: patch them there.
    from flashjit import _torch_eager as glue
    if glue._native is None:
        pytest.skip("flashjit._fastpath is not built (pip install --no-build-isolation with "
                    "torch and a C++ compiler builds it)")
    monkeypatch.setattr(glue, "_check_devices", lambda *args: 0)
    monkeypatch.setattr(glue, "_current_device", lambda: 0)
    monkeypatch.setattr(glue, "_raw_stream", lambda device: 0)
    monkeypatch.setattr(glue, "_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    flashjit.clear_cache()
    yield glue
    flashjit.clear_cache()


OPTIONS = (False, None, None, None, "top_left", None, None, None)


def _inputs(torch, bshd=False):
    """q, k, v [b, h, s, d]; bshd: seen over [b, s, h, d] memory."""
    if bshd:
        q = torch.randn(1, 64, 8, 128, dtype=torch.bfloat16).transpose(1, 2)
    else:
        q = torch.randn(1, 8, 64, 128, dtype=torch.bfloat16)
    k, v = (torch.randn(1, 2, 64, 128, dtype=torch.bfloat16) for _ in range(2))
    return q, k, v



def _plan(glue, q, k, v):
    """The thread's plans and the plan made by a first (refused) call."""
    with pytest.raises(flashjit.NoDeviceError) as first:
        flashjit.attention(q, k, v)
    plans = glue._tls.plans
    plan = plans[glue._native.key(q, k, v, OPTIONS)]
    assert isinstance(plan.native, glue._native.Plan)
    return plans, plan, str(first.value)


def _native_plan(glue, plan, q, tile_counter, check):
    """plan's C side again (q: its query), with the given tile-counter flag
    and check."""
    import torch
    return glue._native.Plan(
        ctypes.cast(plan.fn, ctypes.c_void_p).value, plan.handle.value,
        tuple(ctypes.addressof(t) for t in plan.tensors), plan.scale, plan.lse_shape,
        tuple(torch.empty_like(q).stride()), plan.device, tile_counter, check)


def _forward(glue, plans, q, k, v, options=OPTIONS, device=lambda: 0, primed=None):
    """native.forward on stream 0; primed: by default every plan's kernel
    counts as having run on it (whether or not it takes a tile counter)."""
    if primed is None:
        primed = {(plan.handle.value, 0) for plan in plans.values()}
    return glue._native.forward(plans, q, k, v, options, device, lambda d: 0, primed)


def test_calls_the_library_and_raises_its_error(torch, glue):
    q, k, v = _inputs(torch)
    plans, plan, message = _plan(glue, q, k, v)
    with pytest.raises(flashjit.NoDeviceError) as native:
        _forward(glue, plans, q, k, v)
    assert str(native.value) == message
    # This call's tensors went to the C call through the plan's DLTensors.
    assert [plan.tensors[i].data for i in range(3)] == [t.data_ptr() for t in (q, k, v)]
    with pytest.raises(flashjit.NoDeviceError) as again:  # the public call, second time
        flashjit.attention(q, k, v)
    assert str(again.value) == message


@pytest.mark.parametrize("bshd", [False, True], ids=["bhsd", "bshd-memory"])
def test_outputs_are_new_tensors_like_the_python_path(torch, glue, bshd):
    q, k, v = _inputs(torch, bshd)
    plans, plan, _ = _plan(glue, q, k, v)
    lib = plan.lib
    # The same plan with a check that lets the refused launch pass: what
    # forward returns and what the DLTensors point at.
    plan.native = _native_plan(glue, plan, q, False, lambda status: None)
    o, lse = _forward(glue, plans, q, k, v)
    assert o.shape == q.shape and o.stride() == torch.empty_like(q).stride() == q.stride()
    assert o.dtype == q.dtype and o.device == q.device
    assert lse.shape == (1, 8, 64) and lse.dtype == torch.float32 and lse.is_contiguous()
    assert not o.requires_grad and not lse.requires_grad
    assert plan.tensors[3].data == o.data_ptr() and plan.tensors[4].data == lse.data_ptr()
    assert lib.last_error()  # the library did run (and refused: no GPU)


def test_hands_back_what_it_does_not_handle(torch, glue):
    q, k, v = _inputs(torch)
    assert _forward(glue, {}, q, k, v) is None  # no plan
    plans, plan, _ = _plan(glue, q, k, v)
    assert _forward(glue, plans, q, k, v, device=lambda: 1) is None  # another device
    shifted = torch.empty(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape)
    assert glue._native.key(shifted, k, v, OPTIONS) == glue._native.key(q, k, v, OPTIONS)
    assert _forward(glue, plans, shifted, k, v) is None  # 2-byte aligned data pointer
    unhashable = OPTIONS[:2] + ([1, 2],) + OPTIONS[3:]
    assert _forward(glue, plans, q, k, v, options=unhashable) is None
    assert glue._native.key(q[0], k, v, OPTIONS) is None  # not 4-d: the Python key
    # An autograd graph to record: the op's path.
    with_grad = q.detach().clone().requires_grad_()
    assert _forward(glue, plans, with_grad, k, v) is None
    with torch.no_grad(), pytest.raises(flashjit.NoDeviceError):
        _forward(glue, plans, with_grad, k, v)
    # A persistent kernel runs here only on a stream it has run on before.
    plan.native = _native_plan(glue, plan, q, True, plan.lib.check)
    assert _forward(glue, plans, q, k, v, primed=set()) is None
    with pytest.raises(flashjit.NoDeviceError):
        _forward(glue, plans, q, k, v, primed={(plan.handle.value, 0)})


def test_errors_match_the_python_path(torch, glue, monkeypatch):
    # Bad calls raise the same exceptions with or without the extension.
    q, k, v = _inputs(torch)
    bad = [dict(causal_align="x"), dict(window=[1, 2, 3]), dict(scale=-1.0),
           dict(scale=math.nan), dict(softcap=0.0)]
    seen = []
    for native in (glue._native, None):
        monkeypatch.setattr(glue, "_native", native)
        flashjit.clear_cache()
        row = []
        for kwargs in bad + [{}]:
            with pytest.raises(Exception) as e:
                flashjit.attention(q, k, v, **kwargs)
            row.append((type(e.value), str(e.value)))
        with pytest.raises(Exception) as e:  # not 4-d
            flashjit.attention(q[0], k, v)
        row.append((type(e.value), str(e.value)))
        seen.append(row)
    assert seen[0] == seen[1]
    assert seen[0][len(bad)][0] is flashjit.NoDeviceError
