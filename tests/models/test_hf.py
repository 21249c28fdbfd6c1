"""tfg.patch on Hugging Face models built from configs (random weights, nothing downloaded):
logits within the error budget of the float64 model, the same greedy tokens from generate, the
kernels (not the fallbacks) serving every call, and masks the kernel cannot serve routed loudly."""

from __future__ import annotations

import copy

import pytest
import torch

import tritonforge as tfg
from tritonforge.models.hf import patch
from tritonforge.ops import attention

from ..helpers import assert_within_budget, front_op

transformers = pytest.importorskip("transformers", reason="transformers is an optional extra (pip install transformers)")

TINY = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, attn_implementation="sdpa")  # fmt: skip
FAMILIES = {
    "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY)),
    "mistral": lambda: transformers.MistralForCausalLM(transformers.MistralConfig(**TINY, sliding_window=None)),
    "qwen2": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**TINY)),
}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _pair(family: str, device: str):
    reference = FAMILIES[family]().to(device).eval()
    ours = copy.deepcopy(reference)
    counts = patch(ours)
    assert counts == {"rms_norm": 5, "mlp": 2, "attention": 2}, counts
    return reference, ours


@pytest.mark.parametrize("family", list(FAMILIES))
def test_logits_within_budget_and_kernels_serve_every_call(family, device):
    reference, ours = _pair(family, device)
    ids = torch.randint(0, 97, (2, 37), device=device)
    with torch.no_grad():
        oracle = copy.deepcopy(reference).double()(ids).logits
        baseline = reference(ids).logits
        with tfg.strict():
            got = ours(ids).logits
    kernel = "triton" if device == "cuda" else "interpreter"
    for op in ("rms_norm", front_op(), "flash_attention"):
        assert tfg.last_path(op) == kernel, op
    assert_within_budget(got, oracle, baseline)
    assert ours.config._attn_implementation == "tritonforge" and reference.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_generate_gives_the_same_greedy_tokens(family, device):
    """Prefill through the tiled kernel, then one token at a time through the split-KV path."""
    reference, ours = _pair(family, device)
    ids = torch.randint(0, 97, (2, 19), device=device)
    mask = torch.ones_like(ids)  # all ones: transformers passes no mask to attention (plain causal)
    with torch.no_grad():
        expected = reference.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
        with tfg.strict():
            got = ours.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(got, expected)
    assert attention.last_plan().strategy == "decode"


def test_padding_mask_is_a_loud_fallback(device):
    _, ours = _pair("llama", device)
    ids = torch.randint(0, 97, (2, 9), device=device)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding: a mask the kernel cannot take
    with torch.no_grad():
        with tfg.strict(), pytest.raises(tfg.FallbackError, match="attention mask"):
            ours(ids, attention_mask=mask)
        with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="attention mask"):
            ours(ids, attention_mask=mask)
    assert tfg.last_route("flash_attention").reason == "unsupported"


def test_patch_changes_only_that_instance(device):
    reference, ours = _pair("llama", device)
    other = FAMILIES["llama"]().eval()
    assert type(other.model.norm).forward is type(ours.model.norm).forward  # the class is untouched
    assert "forward" in vars(ours.model.norm) and "forward" not in vars(other.model.norm)


def test_patch_refuses_a_model_it_cannot_serve():
    with pytest.raises(ValueError, match="no RMSNorm, SwiGLU MLP or attention"):
        patch(torch.nn.Sequential(torch.nn.Linear(4, 4)))


def test_chunked_prefill_on_a_filled_cache_is_right(device):
    """More queries than one on top of a filled DynamicCache: transformers passes a causal mask
    there (not None), which the patch routes to SDPA, loudly; logits equal the unpatched model's."""
    reference, ours = _pair("llama", device)
    ids = torch.randint(0, 97, (1, 30), device=device)
    caches = [transformers.DynamicCache(config=m.config) for m in (reference, ours)]
    with torch.no_grad(), tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="attention mask"):
        reference(ids[:, :20], past_key_values=caches[0])
        ours(ids[:, :20], past_key_values=caches[1])
        expected = reference(ids[:, 20:], past_key_values=caches[0]).logits
        got = ours(ids[:, 20:], past_key_values=caches[1]).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert tfg.last_route("flash_attention").reason == "unsupported"
