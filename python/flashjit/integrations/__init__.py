"""Integrations of flashjit with other libraries.

Why: a framework's registry is the one-line way in for its users
(attn_implementation="FlashJIT" for Hugging Face transformers). Each
integration imports its framework only when called, so this package imports
without them.
"""


DEFAULT_NAME = "FlashJIT"


def register_transformers(name: str = DEFAULT_NAME, *, fallback: str = "sdpa") -> str:
    """Registers flashjit as a transformers attention implementation.

    After this, ``AutoModelForCausalLM.from_config(cfg,
    attn_implementation="FlashJIT")`` (or ``from_pretrained``) runs its
    attention layers on flashjit. The name is capitalised on purpose:
    transformers takes any attn_implementation containing "flash" as a
    FlashAttention request (it would look for FlashAttention kernels), so
    "flashjit" cannot be used; a name transformers would misread is refused
    with ValueError. flashjit handles causal and bidirectional
    attention without a mask tensor, GQA, and Gemma-style soft-capping; a
    call that needs a mask tensor (padding in a batch, packed sequences, a
    sliding window shorter than the keys, chunked prefill), a position bias
    or a paged cache is handed to transformers' SDPA attention with a
    one-time warning (fallback="sdpa", the default) or refused with
    flashjit.UnsupportedError (fallback="error"). Returns `name`.
    """
    from ._transformers import register
    return register(name, fallback=fallback)


__all__ = ["DEFAULT_NAME", "register_transformers"]
