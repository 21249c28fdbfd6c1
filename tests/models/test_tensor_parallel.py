"""The chapter-9 Llama served tensor-parallel: the sharding rule and its errors; on 1 rank the
served model is the model, bit for bit, with two all-reduces a layer; on 2 and 4 ranks (gloo,
processes spawned, the kernels through the interpreter, strict routing) its prefill and split-KV
decode logits are within the error budget of the float64 model and its greedy tokens are the
one-rank model's."""

from __future__ import annotations

import dataclasses
import datetime
import os
import pathlib

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import tritonforge as tfg
from tritonforge.book.tp_live import free_port
from tritonforge.models.llama import GraphedDecoder, KVCache, Llama, LlamaConfig, greedy_steps
from tritonforge.models.tensor_parallel import TensorParallelLlama, shard_plan
from tritonforge.ops import attention

from ..helpers import assert_within_budget, front_op

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=8, num_kv_heads=4, max_positions=32)
FEW_KV = dataclasses.replace(CONFIG, num_kv_heads=2)  # 4 ranks over 2 KV heads: each KV head on 2 ranks
PROMPT, NEW_TOKENS, SEED = (2, 11), 4, 7


@pytest.mark.parametrize(("heads", "kv_heads", "world", "held", "copies"), [
    (8, 4, 1, 4, 1), (8, 4, 2, 2, 1), (8, 4, 4, 1, 1), (8, 2, 4, 1, 2), (8, 2, 8, 1, 4), (8, 1, 2, 1, 2),
    (32, 8, 2, 4, 1), (32, 8, 8, 1, 1), (32, 8, 16, 1, 2),  # Llama-3-8B's heads
])  # fmt: skip
def test_each_rank_holds_the_kv_heads_its_query_heads_read(heads, kv_heads, world, held, copies):
    config = dataclasses.replace(CONFIG, hidden_size=8 * heads, num_heads=heads, num_kv_heads=kv_heads, intermediate_size=64, vocab_size=64)
    plan = shard_plan(config, world)
    assert (plan.heads, plan.kv_heads, plan.kv_copies, plan.intermediate, plan.vocab) == (heads // world, held, copies, 64 // world, 64 // world)
    group, local_group = heads // kv_heads, plan.heads // plan.kv_heads  # query heads per KV head: whole model, one rank
    for rank in range(world):
        queries, kvs = plan.query_heads(rank), plan.key_value_heads(rank)
        for i, h in enumerate(queries):  # the kernel's GQA mapping on the rank's heads reads the head the model's does
            assert kvs[i // local_group] == h // group
    assert sorted(h for r in range(world) for h in plan.query_heads(r)) == list(range(heads))
    assert sorted({h for r in range(world) for h in plan.key_value_heads(r)}) == list(range(kv_heads))


@pytest.mark.parametrize(("changes", "world", "names"), [
    ({}, 3, "num_heads"),
    ({"intermediate_size": 100}, 8, "intermediate_size"),
    ({"vocab_size": 100}, 8, "vocab_size"),
    ({"hidden_size": 48, "num_heads": 12, "num_kv_heads": 3}, 2, "num_kv_heads"),
    ({"hidden_size": 48, "num_heads": 12, "num_kv_heads": 6}, 4, "num_kv_heads"),
    ({}, 0, "world"),
])  # fmt: skip
def test_a_world_size_that_does_not_fit_names_the_size(changes, world, names):
    with pytest.raises(ValueError, match=names):
        shard_plan(dataclasses.replace(CONFIG, **changes), world)


def test_sharding_needs_a_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    with pytest.raises(ValueError, match="init_process_group"):
        TensorParallelLlama(Llama(CONFIG))


def _init(rank: int, world: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))  # fmt: skip


def _rank(rank: int, world: int, port: int, configs: list, out: str) -> None:
    """One spawned rank: every config's model served over ``world`` ranks, its results saved
    (rank 0 also serves the one-rank model, the comparison)."""
    _init(rank, world, port)
    prompt = torch.randint(0, CONFIG.vocab_size, PROMPT, generator=torch.Generator().manual_seed(SEED))
    results = {}
    with torch.no_grad(), tfg.strict():
        for config in configs:
            model = Llama(config, seed=SEED)  # the same weights on every rank
            results[config.num_kv_heads] = {"served": greedy_steps(TensorParallelLlama(model), prompt, NEW_TOKENS)}
            for op in ("rms_norm", "rope", "flash_attention", front_op()):
                assert tfg.last_path(op) == "interpreter", op
            assert attention.last_plan().strategy == "decode"
            if rank == 0:
                results[config.num_kv_heads]["one rank"] = greedy_steps(model, prompt, NEW_TOKENS)
    dist.destroy_process_group()
    torch.save({"prompt": prompt, "results": results}, os.path.join(out, f"rank{rank}.pt"))


def _spawn(world: int, configs: list, tmp_path, monkeypatch) -> list[dict]:
    # The children import Triton fresh: the interpreter and strict routing must be in their environment.
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("TRITONFORGE_STRICT", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    mp.spawn(_rank, args=(world, free_port(), configs, str(tmp_path)), nprocs=world, join=True)
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]


def _check_against_one_rank(saved: list[dict], config: LlamaConfig) -> None:
    """Every rank returns the same results; tokens equal the one-rank model's; logits are within
    the error budget of the float64 model, the one-rank float32 model's error setting the budget
    (a sum split over ranks is a float32 sum in another order)."""
    prompt, results = saved[0]["prompt"], [s["results"][config.num_kv_heads] for s in saved]
    tokens, prefill, steps = results[0]["served"]
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(other["served"], results[0]["served"]))
    one_tokens, one_prefill, one_steps = results[0]["one rank"]
    assert torch.equal(tokens, one_tokens)
    with torch.no_grad():
        oracle = Llama(config, dtype=torch.float64, seed=SEED)(tokens[:, :-1], backend="torch")  # every position at once
    n = prompt.shape[1]
    assert_within_budget(prefill, oracle[:, :n], one_prefill)
    assert_within_budget(steps, oracle[:, n:], one_steps)


def test_one_rank_is_the_model_with_two_all_reduces_a_layer(monkeypatch):
    """World size 1 in this process: the served model's logits are the model's, bit for bit
    (slicing and the decoder loop lose nothing), and a call makes ``2 x num_layers`` all-reduces
    and one all-gather."""
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    calls = {"all_reduce": 0, "all_gather": 0}
    for name in calls:
        real = getattr(dist, name)
        monkeypatch.setattr(dist, name, lambda *a, _real=real, _name=name, **k: calls.__setitem__(_name, calls[_name] + 1) or _real(*a, **k))
    _init(0, 1, free_port())
    try:
        model = Llama(CONFIG, seed=SEED)
        served = TensorParallelLlama(model)
        ids = torch.randint(0, CONFIG.vocab_size, PROMPT, generator=torch.Generator().manual_seed(SEED))
        with torch.no_grad():
            got, expected = served(ids, backend="torch"), model(ids, backend="torch")
    finally:
        dist.destroy_process_group()
    assert calls == {"all_reduce": 2 * CONFIG.num_layers, "all_gather": 1}
    assert served.config.num_heads == CONFIG.num_heads and served.config.head_dim == CONFIG.head_dim
    assert torch.equal(got, expected)


@pytest.mark.slow
def test_two_ranks_serve_the_model(tmp_path, monkeypatch):
    """2 ranks over 8 query heads and 4 KV heads: 4 and 2 each."""
    _check_against_one_rank(_spawn(2, [CONFIG], tmp_path, monkeypatch), CONFIG)


@pytest.mark.slow
def test_four_ranks_serve_the_model_with_divided_and_with_replicated_kv_heads(tmp_path, monkeypatch):
    """4 ranks over 4 KV heads (one each) and over 2 KV heads (each on two ranks)."""
    saved = _spawn(4, [CONFIG, FEW_KV], tmp_path, monkeypatch)
    for config in (CONFIG, FEW_KV):
        _check_against_one_rank(saved, config)


def _graphed_rank(rank: int, world: int, port: int, out: str) -> None:
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_layers=2, num_heads=8, num_kv_heads=2, max_positions=128)
    served = TensorParallelLlama(Llama(config, seed=SEED), device=f"cuda:{rank}")
    prompt = torch.randint(0, config.vocab_size, (3, 37), generator=torch.Generator().manual_seed(SEED)).cuda()
    with torch.no_grad(), tfg.strict():
        eager = greedy_steps(served, prompt, 20)[0]
        cache = KVCache(served.config, 3, torch.float32, prompt.device)
        tokens = [prompt, served(prompt, cache, "tritonforge")[:, -1:].argmax(-1)]
        step = GraphedDecoder(served, cache)  # the all-reduces and the all-gather captured in the graph
        for _ in range(19):
            tokens.append(step(tokens[-1])[:, -1:].argmax(-1))
    dist.destroy_process_group()
    torch.save({"eager": eager.cpu(), "graphed": torch.cat(tokens, dim=1).cpu()}, os.path.join(out, f"rank{rank}.pt"))


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (NCCL)")
def test_gpu_cuda_graph_decode_with_the_collectives_inside(tmp_path):
    """2 GPUs over NCCL: a decode step replayed from a CUDA graph, its collectives captured, gives
    the tokens of the same step run eagerly, on both ranks."""
    mp.spawn(_graphed_rank, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    saved = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert torch.equal(saved[0]["graphed"], saved[0]["eager"]) and torch.equal(saved[1]["graphed"], saved[0]["graphed"])
