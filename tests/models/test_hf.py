"""tfg.patch on Hugging Face models built from configs (random weights, nothing downloaded):
logits within the error budget of the float64 model, the same greedy tokens from generate (eager,
static cache, compiled), the kernels (not the fallbacks) serving every call under the masks
transformers builds (padding, a static cache, packed sequences), and a mask the kernels cannot
serve routed loudly, also under torch.compile."""

from __future__ import annotations

import copy

import pytest
import torch

import tritonforge as tfg
from tritonforge import runtime
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
    assert counts == {"rms_norm": 5, "mlp": 2, "attention": 2, "rope": 2}, counts
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
    for op in ("rms_norm", front_op(), "flash_attention", "rope_qk"):
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


def _padded(device, B=3, N=11, side="left"):
    """Token ids with padding (pad id 0) at the front (left) or back (right) of some rows."""
    ids = torch.randint(1, 97, (B, N), device=device)
    mask = torch.ones_like(ids)
    for b, cut in enumerate([4, 1, 0, 6][:B]):
        if cut:
            mask[b, :cut] = 0 if side == "left" else 1
            if side == "right":
                mask[b, N - cut :] = 0
    ids[mask == 0] = 0
    return ids, mask


def _poison_padding(model) -> None:
    """NaN embeddings for the pad token: any padded key or value that reached a valid position
    would turn it NaN (the unpatched reference keeps clean embeddings)."""
    with torch.no_grad():
        model.get_input_embeddings().weight[0] = float("nan")


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_padded_batch_is_served_by_the_kernels(family, side, device):
    """A padding mask goes to the kernels (no fallback in strict mode); the valid positions'
    logits match the unpatched model's, with NaN in every padded key and value."""
    reference, ours = _pair(family, device)
    _poison_padding(ours)
    ids, mask = _padded(device, side=side)
    with torch.no_grad():
        expected = reference(ids, attention_mask=mask).logits
        with tfg.strict():
            got = ours(ids, attention_mask=mask).logits
    assert tfg.last_path("flash_attention") == ("triton" if device == "cuda" else "interpreter")
    valid = mask.bool()
    assert not got[valid].isnan().any()
    torch.testing.assert_close(got[valid], expected[valid], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_left_padded_generate_matches_unpatched(family, cache, device):
    """generate on a left-padded batch, with a DynamicCache and with a static cache (its mask over
    the filled prefix, its lengths on the device): the same greedy tokens, every call on a kernel."""
    reference, ours = _pair(family, device)
    _poison_padding(ours)
    ids, mask = _padded(device)
    args = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0, disable_compile=True)
    if cache == "static":
        args["cache_implementation"] = "static"
    with torch.no_grad():
        expected = reference.generate(ids, **args)
        with tfg.strict():
            got = ours.generate(ids, **args)
    assert torch.equal(got, expected)
    assert attention.last_plan().strategy == "decode"


def test_compiled_static_cache_generate(device):
    """transformers' compiled route: a static cache makes generate compile the decode step
    (fullgraph here; aot_eager on the CPU, which has no CUDA graphs). One graph for every step, no
    recompilation, the kernels serving it (strict), the same tokens as the unpatched model."""
    from torch._dynamo.utils import counters

    reference, ours = _pair("llama", device)
    ids, mask = _padded(device)
    config = transformers.CompileConfig(fullgraph=True, backend="inductor" if device == "cuda" else "aot_eager",
                                        mode="reduce-overhead" if device == "cuda" else None)  # fmt: skip
    config._compile_all_devices = True  # transformers compiles on CUDA only unless told
    args = dict(attention_mask=mask, max_new_tokens=7, do_sample=False, pad_token_id=0, cache_implementation="static")
    with torch.no_grad():
        expected = reference.generate(ids, **args, disable_compile=True)
        torch._dynamo.reset()
        counters.clear()
        with torch._dynamo.config.patch(error_on_recompile=True), tfg.strict():
            got = ours.generate(ids, **args, compile_config=config)
    assert torch.equal(got, expected)
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    assert not counters["graph_break"], dict(counters["graph_break"])
    torch._dynamo.reset()


def test_packed_sequences_are_served_by_the_kernels(device):
    """Padding-free batches: sequences packed in one row with position ids restarting at 0 (no
    cache, as in training); each sequence sees only itself, as if run alone."""
    reference, ours = _pair("llama", device)
    lengths = (5, 9, 4)
    ids = torch.randint(1, 97, (1, sum(lengths)), device=device)
    positions = torch.cat([torch.arange(n, device=device) for n in lengths])[None]
    with torch.no_grad():
        alone = torch.cat([reference(part).logits for part in ids.split(lengths, dim=1)], dim=1)
        expected = reference(ids, position_ids=positions, use_cache=False).logits
        with tfg.strict():
            got = ours(ids, position_ids=positions, use_cache=False).logits
    torch.testing.assert_close(expected, alone, rtol=1e-4, atol=1e-4)  # transformers itself unpacks them
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_a_dense_mask_is_a_loud_fallback_also_under_compile(device):
    """A 4-D mask passed by hand (any pattern, an additive bias): SDPA serves it, loudly. Under
    torch.compile(fullgraph=True) the fallback is traced (no graph break, no crash), warned when
    traced, and strict routing raises FallbackError while tracing."""
    reference, ours = _pair("llama", device)
    ids = torch.randint(1, 97, (2, 9), device=device)
    dense = torch.rand(2, 1, 9, 9, device=device) > 0.3
    dense |= torch.eye(9, dtype=torch.bool, device=device)  # every query sees itself
    with torch.no_grad():
        expected = reference(ids, attention_mask=dense).logits
        with tfg.strict(), pytest.raises(tfg.FallbackError, match="dense attention mask"):
            ours(ids, attention_mask=dense)
        with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="dense attention mask"):
            got = ours(ids, attention_mask=dense).logits
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        assert tfg.last_route("flash_attention").reason == "unsupported"
        runtime.reset_routing_state()  # the warning is once per (op, reason): shown again when traced
        torch._dynamo.reset()
        compiled = torch.compile(ours, fullgraph=True, backend="aot_eager")
        with tfg.strict(False), pytest.warns(tfg.FallbackWarning, match="dense attention mask"):
            torch.testing.assert_close(compiled(ids, attention_mask=dense).logits, expected, rtol=1e-5, atol=1e-5)
        assert tfg.last_route("flash_attention").reason == "unsupported"
        torch._dynamo.reset()
        with tfg.strict(), pytest.raises(Exception, match="FallbackError.*dense attention mask.*while torch.compile traced"):
            torch.compile(ours, fullgraph=True, backend="aot_eager")(ids, attention_mask=dense)
    torch._dynamo.reset()


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
    there (not None), which the mask function turns into the bottom-right causal kernel call;
    logits equal the unpatched model's, the kernels serving every call."""
    reference, ours = _pair("llama", device)
    ids = torch.randint(0, 97, (1, 30), device=device)
    caches = [transformers.DynamicCache(config=m.config) for m in (reference, ours)]
    with torch.no_grad(), tfg.strict():
        reference(ids[:, :20], cache=caches[0])
        ours(ids[:, :20], cache=caches[1])
        expected = reference(ids[:, 20:], cache=caches[0]).logits
        got = ours(ids[:, 20:], cache=caches[1]).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert tfg.last_path("flash_attention") == ("triton" if device == "cuda" else "interpreter")
