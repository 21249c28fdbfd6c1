"""The chapter-9 decoder over one set of weights: the kernels' logits within the error budget of
the float64 model, the same greedy tokens as the PyTorch backend, and a KV cache that gives what
recomputing the whole sequence gives."""

from __future__ import annotations

import pytest
import torch

import tritonforge as tfg
from tritonforge.models.llama import KVCache, Llama, LlamaConfig, generate, greedy_steps
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


@pytest.mark.parametrize("backend", ["torch", "sdpa", "tritonforge"])
def test_static_decode_step_gives_what_the_growing_cache_gives(backend, device):
    """decode_step (fixed shapes: the whole cache buffer, kv_lens on the device) equals the
    growing-prefix decode call, step after step; the sdpa backend equals the naive one."""
    torch.manual_seed(4)
    model = Llama(CONFIG, device=device)
    ids = _ids(2, 16, device)
    with torch.no_grad(), tfg.strict():
        grow, static = KVCache(CONFIG, 2, torch.float32, device), KVCache(CONFIG, 2, torch.float32, device)
        model(ids[:, :10], grow, backend)
        model(ids[:, :10], static, backend)
        for i in range(10, 16):
            expected = model(ids[:, i : i + 1], grow, backend)
            position = torch.tensor([static.length], device=device)
            got = model.decode_step(ids[:, i : i + 1], static, position, backend)
            static.length += 1
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        if backend == "tritonforge":
            assert tfg.last_path("flash_attention") == ("triton" if device == "cuda" else "interpreter")
        torch.testing.assert_close(model(ids, backend="sdpa"), model(ids, backend="torch"), rtol=1e-5, atol=1e-5)


def test_decode_step_bad_inputs(device):
    model = Llama(CONFIG, device=device)
    cache = KVCache(CONFIG, 1, torch.float32, device)
    with pytest.raises(ValueError, match=r"ids of shape \[B, 1\]"):
        model.decode_step(_ids(1, 2, device), cache, torch.tensor([0], device=device))
    with pytest.raises(ValueError, match="position must be a one-element int64"):
        model.decode_step(_ids(1, 1, device), cache, torch.tensor(0, device=device))
    with pytest.raises(ValueError, match="backend"):
        model.decode_step(_ids(1, 1, device), cache, torch.tensor([0], device=device), backend="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["tritonforge", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gpu_cuda_graph_generation_gives_the_eager_tokens(dtype, backend):
    """generate(..., cuda_graph=True) replays one captured decode step: its tokens equal those of
    the same step run eagerly, and in float32 those of the growing-cache decode too."""
    torch.manual_seed(5)
    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_layers=2, num_heads=8, num_kv_heads=2, max_positions=128)
    model = Llama(config, dtype=dtype, device="cuda")
    prompt = torch.randint(0, 512, (3, 37), device="cuda")
    with tfg.strict(), torch.no_grad():
        graphed = generate(model, prompt, 20, backend, cuda_graph=True)
        assert torch.equal(graphed, greedy_steps(model, prompt, 20, backend)[0])
        if dtype == torch.float32:
            assert torch.equal(graphed, generate(model, prompt, 20, backend))
