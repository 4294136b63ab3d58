"""Argument checks and conversions for flashjit's PyTorch layer.

Why: a bad call must raise the same flashjit exception with the same
message whichever path runs it (the custom op, its fake implementation
while torch.compile traces, or an eager plan: test_fastpath_cpu.py compares
them), so every check and conversion lives once, here. The checks on the
op's arguments read only metadata, so they run on fake tensors too;
_kernel_strides is the one place that decides which memory layouts the
library takes.
"""

import math
from typing import List, Optional, Tuple

import torch

from .errors import InvalidArgumentError
from .spec import AttentionSpec, Capture, softcap_score_mod


_DTYPES = {torch.float16: "f16", torch.bfloat16: "bf16"}
_CAPTURE_DTYPES = {torch.float32: "f32", torch.int32: "i32"}
_ALIGN = {"top_left": 0, "bottom_right": 1}
_ALIGN_NAMES = {0: "top_left", 1: "bottom_right"}


def _shape(t) -> list:
    return list(t.shape)


def _check_inputs(q, k, v, scale, causal_align, softcap, score_mod, captures, capture_dims,
                  sparse_block_m, sparse_block_n, block_mask) -> None:
    """Checks that read only metadata, so they run on fake tensors too (the
    error then surfaces while torch.compile traces)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise InvalidArgumentError(
                f"{name} has {t.dim()} dimensions (shape {_shape(t)}): flashjit takes "
                "[batch, heads, seqlen, head_dim] tensors (flashjit.attention(..., "
                "layout='bshd') takes [batch, seqlen, heads, head_dim])")
        if t.dtype not in _DTYPES:
            raise InvalidArgumentError(
                f"{name} is {t.dtype}: flashjit kernels take torch.float16 or torch.bfloat16; "
                f"convert with {name}.to(torch.bfloat16)")
    if not (q.dtype == k.dtype == v.dtype):
        raise InvalidArgumentError(
            f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    if k.shape[3] != q.shape[3] or v.shape[3] != q.shape[3]:
        raise InvalidArgumentError(
            f"q, k and v must have the same head_dim (last dimension), got {q.shape[3]}, "
            f"{k.shape[3]} and {v.shape[3]}")
    if k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0]:
        raise InvalidArgumentError(
            f"q, k and v must have the same batch size, got {q.shape[0]}, {k.shape[0]} and "
            f"{v.shape[0]}")
    if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        raise InvalidArgumentError(
            f"k and v must have the same heads and seqlen: k is {_shape(k)}, v is {_shape(v)}")
    if k.shape[1] == 0 and q.shape[1] != 0 or k.shape[1] != 0 and q.shape[1] % k.shape[1] != 0:
        raise InvalidArgumentError(
            f"q has {q.shape[1]} heads, which is not a multiple of k/v's {k.shape[1]}: "
            "grouped-query attention needs heads = kv_heads x group size")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise InvalidArgumentError(f"scale must be a positive finite number or None, got {scale}")
    if causal_align not in _ALIGN_NAMES:
        raise InvalidArgumentError(f"causal_align code {causal_align}: expected 0 or 1")
    if softcap is not None:
        if score_mod is not None:
            raise InvalidArgumentError(
                "softcap and score_mod both given: softcap is a score_mod; write the cap into "
                "your score_mod instead")
        if not (math.isfinite(softcap) and softcap > 0):
            raise InvalidArgumentError(f"softcap must be a positive finite number, got {softcap}")
    if sum(c.dim() for c in captures) != len(capture_dims):
        raise InvalidArgumentError(
            f"capture_dims lists {len(capture_dims)} dims for captured tensors of ranks "
            f"{[c.dim() for c in captures]}")
    for i, c in enumerate(captures):
        if c.dtype not in _CAPTURE_DTYPES:
            raise InvalidArgumentError(
                f"captures[{i}] is {c.dtype}: flashjit's mods read torch.float32 or torch.int32 "
                "tensors; convert it with .to(torch.float32) or .to(torch.int32)")
    if (sparse_block_m == 0) != (sparse_block_n == 0):
        raise InvalidArgumentError(
            f"sparse block ({sparse_block_m}, {sparse_block_n}): give both sizes, or neither")
    if block_mask and len(block_mask) not in (2, 4, 8):
        raise InvalidArgumentError(
            f"block_mask has {len(block_mask)} tensors: give (kv_num_blocks, kv_indices) or "
            "those and (full_kv_num_blocks, full_kv_indices), then optionally the four "
            "transposed lists (q_num_blocks, q_indices, full_q_num_blocks, full_q_indices)")
    if bool(block_mask) != (sparse_block_m != 0):
        raise InvalidArgumentError(
            "a block mask needs its block size and a block size needs a block mask: pass "
            "block_mask with sparse_block=(m, n), or a FlexAttention BlockMask")
    for i, t in enumerate(block_mask):
        if t.dtype != torch.int32:
            raise InvalidArgumentError(
                f"block mask tensor {i} is {t.dtype}: block masks are torch.int32 (as "
                "FlexAttention's BlockMask)")


def _check_devices(q, k, v, captures, block_mask) -> int:
    if q.device.type != "cuda":
        raise InvalidArgumentError(
            f"q is on {q.device}: flashjit runs on CUDA tensors; move q, k and v with .cuda()")
    named = [("k", k), ("v", v)] + [(f"captures[{i}]", c) for i, c in enumerate(captures)] \
        + [(f"block mask tensor {i}", t) for i, t in enumerate(block_mask)]
    for name, t in named:
        if t.device != q.device:
            raise InvalidArgumentError(
                f"{name} is on {t.device} but q is on {q.device}: put every tensor on q's device")
    return q.device.index if q.device.index is not None else torch.cuda.current_device()


def _kernel_strides(name: str, t) -> Optional[List[int]]:
    """Checks the memory layout the library takes and returns the strides to
    hand it (None: the tensor's own). A dimension of extent 1 is never
    stepped, so where PyTorch left an unusable stride on one (any value is
    legal there), a valid one is put in its place."""
    strides = list(t.stride())
    shape = list(t.shape)
    if strides[3] != 1 and shape[3] != 1:
        raise InvalidArgumentError(
            f"{name} has strides {strides}: its last dimension (head_dim) must be contiguous "
            f"(stride 1); call {name}.contiguous()")
    changed = strides[3] != 1
    strides[3] = 1
    for d in range(3):
        if shape[d] == 1 and (strides[d] <= 0 or strides[d] % 8 != 0):
            span = max([shape[e] * abs(strides[e]) for e in range(4) if e != d] + [8])
            strides[d] = -(-span // 8) * 8
            changed = True
    if any(s < 0 or s % 8 != 0 for s in strides[:3]):
        raise InvalidArgumentError(
            f"{name} has strides {list(t.stride())}: flashjit needs the batch, head and seqlen "
            "strides to be non-negative multiples of 8 elements (16-byte aligned rows); call "
            f"{name}.contiguous()")
    if t.data_ptr() % 16 != 0:
        raise InvalidArgumentError(
            f"{name}'s data pointer {t.data_ptr():#x} is not 16-byte aligned (a slice at an odd "
            f"offset?): call {name}.contiguous()")
    return strides if changed else None


def _spec_of(q, k, causal, causal_align, window_left, window_right, softcap, score_mod,
             mask_mod, captures, capture_dims, sparse_block_m, sparse_block_n) -> AttentionSpec:
    dims, at = [], 0
    for c in captures:
        dims.append(tuple(capture_dims[at:at + c.dim()]))
        at += c.dim()
    declared = tuple(Capture(_CAPTURE_DTYPES[c.dtype], d) for c, d in zip(captures, dims))
    return AttentionSpec(
        head_dim=q.shape[3], dtype=_DTYPES[q.dtype], causal=causal,
        num_heads=q.shape[1], num_kv_heads=k.shape[1], causal_align=_ALIGN_NAMES[causal_align],
        window=(window_left, window_right),
        score_mod=softcap_score_mod(softcap, declared) if softcap is not None else score_mod,
        mask_mod=mask_mod, captures=declared, sparse_block=(sparse_block_m, sparse_block_n))


def _gradient_input(name: str, t: torch.Tensor) -> Tuple[torch.Tensor, Optional[List[int]]]:
    """dO as the kernel takes it: its own layout where that one works (an
    expanded gradient, stride 0, is read as it is), else a contiguous copy."""
    try:
        return t, _kernel_strides(name, t)
    except InvalidArgumentError:
        t = t.contiguous()
        return t, _kernel_strides(name, t)


# attention()'s friendly arguments, turned into the op's.

def _as_tensor(name: str, x):
    if isinstance(x, torch.Tensor):
        return x
    if hasattr(x, "__dlpack__"):
        return torch.from_dlpack(x)
    raise TypeError(f"{name} must be a torch.Tensor or an array with __dlpack__, got "
                    f"{type(x).__name__}")


def _pair(name: str, value, default: Tuple[int, int]) -> Tuple[int, int]:
    if value is None:
        return default
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise InvalidArgumentError(f"{name} must be a pair of ints, got {value!r}")
    return int(value[0]), int(value[1])


def _block_mask_args(block_mask, sparse_block) -> Tuple[int, int, List[torch.Tensor]]:
    if block_mask is None:
        if sparse_block is not None:
            raise InvalidArgumentError("sparse_block given without block_mask")
        return 0, 0, []
    if hasattr(block_mask, "kv_num_blocks") and hasattr(block_mask, "kv_indices"):
        # FlexAttention's BlockMask: its block size and its four lists.
        size = getattr(block_mask, "BLOCK_SIZE", None)
        if sparse_block is None:
            if size is None:
                raise InvalidArgumentError("the block mask has no BLOCK_SIZE: pass sparse_block")
            sparse_block = (size, size) if isinstance(size, int) else tuple(size)
        lists = [block_mask.kv_num_blocks, block_mask.kv_indices]
        full = getattr(block_mask, "full_kv_num_blocks", None)
        if full is not None:
            lists += [full, block_mask.full_kv_indices]
            # Its transposed lists too, for the backward (which otherwise
            # transposes the forward's on the GPU at each call).
            transposed = [getattr(block_mask, name, None) for name in (
                "q_num_blocks", "q_indices", "full_q_num_blocks", "full_q_indices")]
            if all(t is not None for t in transposed):
                lists += transposed
    else:
        lists = list(block_mask)
        if sparse_block is None:
            raise InvalidArgumentError(
                "block_mask given as tensors needs sparse_block=(m, n), its block size")
    m, n = _pair("sparse_block", sparse_block, (0, 0))
    return m, n, lists
