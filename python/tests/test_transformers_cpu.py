"""The transformers glue without a GPU: registration, masks, fallbacks.

Why: the glue decides, per call, whether flashjit may run (no mask tensor)
and with which causality, and reshapes the output the way the models
expect. On CPU the flashjit call itself is replaced by PyTorch's SDPA with
the same arguments, so a tiny Llama's logits must equal the "sdpa"
implementation's exactly, and the recorded calls show what flashjit would
have been asked. The GPU test runs the real kernels.
"""

import copy
import warnings

import pytest

import flashjit
from flashjit.integrations import _transformers as glue


@pytest.fixture
def recorded(torch, transformers, monkeypatch):
    """Registers "FlashJIT", with the kernel call replaced by SDPA."""
    calls = []

    def stand_in(query, key, value, *, causal, scale, softcap):
        assert softcap is None
        calls.append({"q": tuple(query.shape), "k": tuple(key.shape), "causal": causal,
                      "scale": scale})
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, is_causal=causal, scale=scale,
            enable_gqa=key.shape[1] != query.shape[1])

    monkeypatch.setattr(glue, "_run", stand_in)
    monkeypatch.setattr(glue, "_warned", set())
    flashjit.integrations.register_transformers()
    yield calls
    flashjit.integrations.register_transformers()  # back to the default fallback


def _models(transformers, torch):
    config = transformers.LlamaConfig(
        vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    # Each model gets its own config: from_config records the implementation in it.
    ours = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                                         attn_implementation="FlashJIT")
    sdpa = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                                         attn_implementation="sdpa")
    sdpa.load_state_dict(ours.state_dict())
    return ours.eval(), sdpa.eval()


def test_registration(recorded, transformers):
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    assert "FlashJIT" in AttentionInterface._global_mapping
    assert "FlashJIT" in AttentionMaskInterface._global_mapping
    with pytest.raises(ValueError, match="fallback"):
        flashjit.integrations.register_transformers(fallback="maybe")


def test_tiny_llama_matches_sdpa(recorded, transformers, torch):
    ours, sdpa = _models(transformers, torch)
    ids = torch.randint(0, 1000, (2, 37))
    with torch.no_grad():
        a = ours(ids).logits
        b = sdpa(ids).logits
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert len(recorded) == 2  # one call per layer, on flashjit
    assert all(c["causal"] and c["q"] == (2, 4, 37, 64) and c["k"] == (2, 2, 37, 64)
               for c in recorded)
    assert recorded[0]["scale"] == pytest.approx(64 ** -0.5)


def test_generation_decodes_without_mask(recorded, transformers, torch):
    ours, sdpa = _models(transformers, torch)
    ids = torch.randint(0, 1000, (1, 9))
    with torch.no_grad():
        a = ours.generate(ids, max_new_tokens=5, do_sample=False)
        b = sdpa.generate(ids, max_new_tokens=5, do_sample=False)
    assert torch.equal(a, b)
    decode = [c for c in recorded if c["q"][2] == 1]
    assert decode and not any(c["causal"] for c in decode)  # one query sees every cached key


def test_padding_falls_back_to_sdpa_once(recorded, transformers, torch):
    ours, sdpa = _models(transformers, torch)
    ids = torch.randint(0, 1000, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, :3] = 0  # left padding
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            a = ours(ids, attention_mask=mask).logits
            ours(ids, attention_mask=mask)
    with torch.no_grad():
        b = sdpa(ids, attention_mask=mask).logits
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not recorded  # nothing reached flashjit
    texts = [str(w.message) for w in caught if "flashjit" in str(w.message)]
    assert len(texts) == 1 and "attention mask" in texts[0]


def test_fallback_error_refuses_masks(recorded, transformers, torch):
    flashjit.integrations.register_transformers(fallback="error")
    ours, _ = _models(transformers, torch)
    ids = torch.randint(0, 1000, (2, 6))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, :2] = 0
    with pytest.raises(flashjit.UnsupportedError, match="attention mask"):
        with torch.no_grad():
            ours(ids, attention_mask=mask)
    with torch.no_grad():  # no padding: no mask, so flashjit runs
        ours(ids, attention_mask=torch.ones(2, 6, dtype=torch.long))
    assert recorded


def test_unmasked_padding_free_batch_stays_on_flashjit(recorded, transformers, torch):
    ours, _ = _models(transformers, torch)
    with torch.no_grad():
        ours(torch.randint(0, 1000, (3, 8)), attention_mask=torch.ones(3, 8, dtype=torch.long))
    assert len(recorded) == 2


def test_names_transformers_would_misread_are_refused(transformers):
    for name in ("flashjit", "flash_attention_2", "org/repo", "sdpa", ""):
        with pytest.raises(ValueError, match="cannot register"):
            flashjit.integrations.register_transformers(name)
    assert flashjit.integrations.register_transformers("my_fjit") == "my_fjit"
