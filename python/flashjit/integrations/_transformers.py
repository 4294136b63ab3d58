"""flashjit as a Hugging Face transformers attention implementation.

Why: transformers picks each model's attention function by name from its
AttentionInterface registry, and builds masks for it through a matching
AttentionMaskInterface entry. flashjit registers both: the attention
function (query/key/value [batch, heads, seqlen, head_dim] in, output
[batch, seqlen, heads, head_dim] out, as the models expect) and, for
masks, transformers' own SDPA mask builder, which returns no mask at all
when the pattern is plain causal or full with no padding. Those calls run
on flashjit with causal=True/False. Without a mask entry, transformers
would pass no mask even when a batch has padding, and padded keys would
be attended silently; with it, a call that does carry a mask tensor is
visible here and goes to SDPA (or is refused) instead.
"""

import warnings
from typing import Any, Optional

from ..errors import UnsupportedError

_FALLBACKS = ("sdpa", "error")
_warned: set = set()
_fallback_mode = {"value": "sdpa"}


def _run(query, key, value, *, causal: bool, scale: Optional[float],
         softcap: Optional[float]):
    """The flashjit call: [B, H, S, D] in, [B, H, S, D] out (the tests
    replace it to check the glue on machines without a GPU)."""
    from .._torch import attention
    return attention(query, key, value, causal=causal, scale=scale, softcap=softcap)


def _unsupported(attention_mask, dropout, kwargs) -> Optional[str]:
    """Why this call cannot run on flashjit, or None."""
    if attention_mask is not None:
        return ("an attention mask tensor (padding in the batch, packed sequences, a sliding "
                "window shorter than the keys, or chunked prefill)")
    if kwargs.get("position_bias") is not None:
        return "a position bias"
    if kwargs.get("s_aux") is not None:
        return "attention sinks (s_aux)"
    if kwargs.get("cache") is not None:
        return "a paged attention cache"
    if dropout:
        return f"attention dropout ({dropout}) in training mode"
    return None


def flashjit_attention_forward(module: Any, query: Any, key: Any, value: Any,
                               attention_mask: Optional[Any],
                               dropout: float = 0.0, scaling: Optional[float] = None,
                               is_causal: Optional[bool] = None, softcap: Optional[float] = None,
                               **kwargs):
    """The attention function transformers calls: returns (output [B, S, H,
    D], None) (flashjit does not materialise attention weights)."""
    reason = _unsupported(attention_mask, dropout, kwargs)
    if reason is not None:
        if _fallback_mode["value"] == "error":
            raise UnsupportedError(
                f"flashjit cannot run this attention call: it has {reason}. Register with "
                "register_transformers(fallback='sdpa') to hand such calls to SDPA, or use "
                "attn_implementation='sdpa'")
        if reason not in _warned:
            _warned.add(reason)
            warnings.warn(f"flashjit: a call with {reason} runs on transformers' SDPA "
                          "attention instead (warned once per reason)", stacklevel=2)
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, softcap=softcap,
                                      **kwargs)
    if kwargs.get("output_attentions") and "output_attentions" not in _warned:
        _warned.add("output_attentions")
        warnings.warn("flashjit does not return attention weights (output_attentions=True gives "
                      "None); use attn_implementation='eager' for them", stacklevel=2)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    q_len, kv_len = query.shape[2], key.shape[2]
    # One query token sees every cached key (bottom-right alignment); with
    # no mask and more keys than queries, transformers means the empty
    # static-cache prefill, where the keys past q_len are unused slots that
    # a top-left causal mask never reaches, so they are cut off here.
    causal = bool(causal) and q_len > 1
    if causal and kv_len > q_len:
        key = key[:, :, :q_len]
        value = value[:, :, :q_len]
    out = _run(query, key, value, causal=causal, scale=scaling, softcap=softcap)
    return out.transpose(1, 2).contiguous(), None


def _misrouted(name: str) -> Optional[str]:
    """Why transformers would not call a function registered as `name`
    (None when it would). transformers 5 treats every implementation whose
    name contains "flash" as a FlashAttention request and tries to load
    FlashAttention kernels for it, and an "org/repo" name as a hub kernel."""
    if not isinstance(name, str) or not name:
        return "the name must be a non-empty string"
    try:
        from transformers.utils.generic import is_flash_attention_requested
    except ImportError:
        flash = False
    else:
        flash = is_flash_attention_requested(requested_attention_implementation=name)
    if flash:
        return ("transformers reads an attn_implementation containing 'flash' as a "
                "FlashAttention request and would look for FlashAttention kernels instead")
    if "/" in name or ":" in name or name.startswith("paged|"):
        return "transformers reads names with '/', ':' or 'paged|' as hub kernels or paged variants"
    if name in ("eager", "sdpa", "flex_attention"):
        return f"{name!r} is one of transformers' own implementations"
    return None


def register(name: str, *, fallback: str = "sdpa") -> str:
    if fallback not in _FALLBACKS:
        raise ValueError(f"fallback {fallback!r}: expected 'sdpa' or 'error'")
    try:
        from transformers import AttentionInterface
    except ImportError as e:
        raise ImportError(
            "flashjit.integrations.register_transformers needs transformers (4.53 or later, "
            "with AttentionInterface): pip install transformers") from e
    problem = _misrouted(name)
    if problem is not None:
        raise ValueError(f"cannot register flashjit as attn_implementation={name!r}: {problem}; "
                         "choose another name (the default is 'FlashJIT')")
    _fallback_mode["value"] = fallback
    AttentionInterface.register(name, flashjit_attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:
        warnings.warn("this transformers has no AttentionMaskInterface (4.53 added it): every "
                      "call will carry a mask and go to the fallback", stacklevel=3)
    else:
        AttentionMaskInterface.register(name, sdpa_mask)
    return name
