"""The chapter-9 decoder over one set of weights: the kernels' logits within the error budget of
the float64 model, the same greedy tokens as the PyTorch backend, and a KV cache that gives what
recomputing the whole sequence gives."""

from __future__ import annotations

import pytest
import torch

import tritonforge as tfg
from tritonforge.models.llama import KVCache, Llama, LlamaConfig, generate
from tritonforge.ops import attention

from ..helpers import assert_within_budget, front_op

CONFIG = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_layers=2, num_heads=4, num_kv_heads=2, max_positions=64)


def _ids(batch, n, device):
    return torch.randint(0, CONFIG.vocab_size, (batch, n), device=device)


def test_logits_within_budget_of_the_float64_model(device):
    torch.manual_seed(0)
    ids = _ids(2, 29, device)
    model, model64 = Llama(CONFIG, device=device), Llama(CONFIG, dtype=torch.float64, device=device)  # same seed: same weights
    with torch.no_grad():
        oracle = model64(ids, backend="torch")
        baseline = model(ids, backend="torch")
        with tfg.strict():
            got = model(ids, backend="tritonforge")
    kernel = "triton" if device == "cuda" else "interpreter"
    for op in ("rms_norm", "flash_attention", front_op()):
        assert tfg.last_path(op) == kernel, op
    assert_within_budget(got, oracle, baseline)


def test_generate_matches_the_torch_backend(device):
    """Greedy tokens from a prefill and five decode steps (the split-KV path) equal the PyTorch
    backend's, row by row."""
    torch.manual_seed(1)
    model = Llama(CONFIG, device=device, seed=3)
    prompt = _ids(3, 17, device)
    expected = generate(model, prompt, 6, backend="torch")
    with tfg.strict():
        got = generate(model, prompt, 6, backend="tritonforge")
    assert attention.last_plan().strategy == "decode"
    assert torch.equal(got, expected)
    assert got.shape == (3, 23) and torch.equal(got[:, :17], prompt)


@pytest.mark.parametrize("backend", ["torch", "tritonforge"])
def test_cache_gives_what_recomputing_gives(backend, device):
    torch.manual_seed(2)
    model = Llama(CONFIG, device=device)
    ids = _ids(2, 21, device)
    with torch.no_grad(), tfg.strict():
        full = model(ids, backend=backend)
        cache = KVCache(CONFIG, 2, torch.float32, device)
        pieces = [model(ids[:, :13], cache, backend)] + [model(ids[:, i : i + 1], cache, backend) for i in range(13, 21)]
    assert cache.length == 21
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-5, atol=1e-5)


def test_bad_backend_and_a_full_cache(device):
    model = Llama(CONFIG, device=device)
    with pytest.raises(ValueError, match="backend"):
        model(_ids(1, 3, device), backend="cuda")
    cache = KVCache(CONFIG, 1, torch.float32, device)
    cache.length = CONFIG.max_positions - 1
    with pytest.raises(ValueError, match="cache holds 64 positions"):
        model(_ids(1, 2, device), cache, "torch")
