#!/usr/bin/env python3
"""What PyTorch's SDPA backends do with a NaN in V (the reference for the
semantics flashjit documents in docs/rules.md): a NaN at key j, column c of
one head; which rows, columns, heads come out NaN, with and without the
causal mask. Needs PyTorch and a GPU; prints one line per backend."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def ranges(rows):
    """[3, 4, 5, 9] -> '3..5, 9'."""
    out, start, prev = [], None, None
    for r in rows:
        if start is None:
            start = prev = r
        elif r == prev + 1:
            prev = r
        else:
            out.append(f"{start}..{prev}" if prev > start else f"{start}")
            start = prev = r
    if start is not None:
        out.append(f"{start}..{prev}" if prev > start else f"{start}")
    return ", ".join(out) or "none"


def main():
    torch.manual_seed(0)
    b, h, s, d, j, c = 1, 2, 1000, 128, 300, 5
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    v[0, 0, j, c] = float("nan")
    # Head 1's first key follows head 0's last one in memory.
    v[0, 1, 0, 9] = float("nan")
    backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    print(f"torch {torch.__version__}, NaN at V[0, 0, {j}, {c}] and "
          f"V[0, 1, 0, 9], seqlen {s}")
    for causal in (False, True):
        for backend in backends:
            try:
                with sdpa_kernel([backend]):
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            except RuntimeError as e:
                print(f"causal={causal} {backend.name}: unavailable ({str(e).splitlines()[0][:80]})")
                continue
            nan = o.isnan()
            head0 = nan[0, 0]
            rows = head0.any(-1).nonzero().flatten().tolist()
            cols = head0.any(0).nonzero().flatten().tolist()
            head1_rows = nan[0, 1].any(-1).nonzero().flatten().tolist()
            head1_cols = nan[0, 1].any(0).nonzero().flatten().tolist()
            early = [r for r in rows if r < j]
            print(f"causal={causal} {backend.name}: head 0 NaN rows "
                  f"{ranges(rows)} (columns {cols}); of rows < {j} (hidden "
                  f"when causal): {ranges(early)}; head 1 NaN rows "
                  f"{ranges(head1_rows)} (columns {head1_cols})")


if __name__ == "__main__":
    main()
