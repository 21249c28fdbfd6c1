"""Chapter 10: the chapter-9 Llama served tensor-parallel on two GPUs, beside the same model on one.

The model: ``tritonforge.models.llama.Llama`` at Llama-3-8B sizes (hidden 4096, 32 query heads
over 8 KV heads, MLP 14336, vocabulary 128256, ``--layers`` layers, 32 by default), bf16, random
weights drawn on each rank's GPU from one seed (the same weights on every rank: Llama's own
initializer draws on the CPU, minutes for 8B parameters). Each rank cuts its shard with
``TensorParallelLlama`` (Megatron-style: two all-reduces a layer, one all-gather of the logits)
over NCCL. Cases: decode at B = 1 and 32 with ``--context`` cached positions (1024 by default;
the cache is filled with random keys and values, each rank holding its KV heads' part of the
one-GPU model's cache), and a prefill of 1 × 2048 tokens without a cache.

Setups, each captured in a CUDA graph and timed by replaying it (decode: ``GraphedDecoder``;
prefill: the forward captured the same way), milliseconds per step:

- ``tritonforge, 1 GPU``: the whole model on each rank's GPU alone (the ranks run it at the same
  time, each on its own GPU, with no collective: the slower rank's time is recorded);
- ``tritonforge, 2 GPUs``: the tensor-parallel step, its ``2 · layers`` all-reduces and its
  all-gather inside the graph;
- ``2 GPUs, collectives removed``: the same step with ``torch.distributed.all_reduce`` a no-op and
  ``all_gather`` a local copy while it is captured: the per-rank compute alone;
- ``collectives alone``: a graph of only the step's collectives, at its sizes (``2 · layers``
  all-reduces of ``[B, n, 4096]`` bf16, then the all-gather of ``[B, n, 128256 / 2]`` and its
  concatenation), back to back.

Before timing, the two-GPU logits are compared with the one-GPU model's (same bf16 weights):
``max_rel_err``; above ``WRONG`` the row is "wrong" and not timed. Timing: ``ROUNDS`` rounds, each
started by a barrier on every rank, of ``reps`` replays between CUDA events; the median round per
rank, then the slowest rank's. The record also keeps each rank's median, the NCCL version, the
``NCCL_*`` settings and ``nvidia-smi topo -m``.

Usage (2 CUDA GPUs, repository root; NVLink multicast off, as the machines require):
    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 benchmarks/experiments/tensor-parallel/tp_llama.py OUT.json
    [--layers N] [--context C]   (without torchrun the script starts its two ranks itself)
Toy run (the CPU, gloo, two ranks, the interpreter, float32, a tiny model, eager steps timed by
time.perf_counter): TRITONFORGE_SMOKE=1 python benchmarks/experiments/tensor-parallel/tp_llama.py OUT.json
(``--toy`` sets TRITONFORGE_SMOKE=1).
"""

import argparse
import contextlib
import datetime
import os
import socket
import statistics
import subprocess
import sys
import time

if "--toy" in sys.argv:  # before smoke reads it
    os.environ["TRITONFORGE_SMOKE"] = "1"
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off (before NCCL starts)

import torch
import torch.distributed as dist

import smoke  # first: imports tritonforge before triton
import tritonforge as tfg
from smoke import DEVICE, toy
from tritonforge import bench
from tritonforge.models.llama import GraphedDecoder, KVCache, Llama, LlamaConfig
from tritonforge.models.tensor_parallel import TensorParallelLlama

WORLD = 2
DTYPE = toy(torch.bfloat16, torch.float32)
PREFILL = toy(2048, 16)
BATCHES = toy((1, 32), (1, 2))
ROUNDS = toy(7, 1)
WRONG = 0.1  # max |2-GPU logits - 1-GPU logits| / max |1-GPU logits| above which the step is broken
SEED = 0
IMPLS = ("tritonforge, 1 GPU", "tritonforge, 2 GPUs", "2 GPUs, collectives removed", "collectives alone")


def config(layers: int, context: int) -> LlamaConfig:
    if smoke.SMOKE:
        return LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_layers=layers, num_heads=4, num_kv_heads=2,
                           max_positions=64)  # fmt: skip
    return LlamaConfig.llama3_8b(num_layers=layers, max_positions=max(context, PREFILL) + 8)


def random_llama(cfg: LlamaConfig, device) -> Llama:
    """A Llama of ``cfg``'s sizes in ``DTYPE`` whose weights are drawn on ``device`` from ``SEED``
    with Llama's distributions (normal, std 0.02; the embedding std 1; norms 1 plus std 0.1)."""
    with torch.device("meta"):  # the shapes, without drawing anything
        model = Llama(cfg, dtype=DTYPE)
    model = model.to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(SEED)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if name.endswith("norm"):
                weight.normal_(0.0, 0.1, generator=gen).add_(1.0)
            else:
                weight.normal_(0.0, 1.0 if name == "embed" else 0.02, generator=gen)
    return model


def filled_cache(cfg: LlamaConfig, batch: int, context: int, device) -> KVCache:
    """The one-GPU model's cache with ``context`` positions of random keys and values."""
    cache = KVCache(cfg, batch, DTYPE, device)
    gen = torch.Generator(device=device).manual_seed(SEED + 1)
    cache.keys.normal_(generator=gen)
    cache.values.normal_(generator=gen)
    cache.length = context
    return cache


def rank_cache(served: TensorParallelLlama, full: KVCache) -> KVCache:
    """This rank's cache: the KV heads it holds, copied from the one-GPU model's cache."""
    heads = list(served.plan.key_value_heads(served.rank))
    cache = KVCache(served.config, full.keys.shape[1], DTYPE, full.keys.device)
    cache.keys.copy_(full.keys[:, :, heads])
    cache.values.copy_(full.values[:, :, heads])
    cache.length = full.length
    return cache


@contextlib.contextmanager
def collectives_removed():
    """``torch.distributed``'s all-reduce a no-op and its all-gather a local copy (what each rank
    would write, without the other ranks' data), while the block runs."""
    saved = dist.all_reduce, dist.all_gather

    def gather_locally(pieces, tensor, group=None, async_op=False):
        for piece in pieces:
            piece.copy_(tensor)

    dist.all_reduce, dist.all_gather = (lambda tensor, *args, **kwargs: None), gather_locally
    try:
        yield
    finally:
        dist.all_reduce, dist.all_gather = saved


def captured(fn):
    """``fn`` captured in a CUDA graph after two warm-up calls on a side stream (compiles, autotunes):
    (replay, the output of the captured call, overwritten by each replay)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        out = fn()
    return graph.replay, out


def step(model, case: tuple, ids: torch.Tensor, cache, local: bool = False):
    """(call, logits) of one step of ``model``: on a GPU a graph replay (decode: ``GraphedDecoder``;
    the logits are the graph's buffer), in a toy run the eager call (the logits of a first call).
    ``local``: with the collectives removed (while capturing, or around every eager call)."""
    phase = case[0]
    removed = collectives_removed if local else contextlib.nullcontext
    if DEVICE == "cuda":
        with removed():
            if phase == "decode":
                decoder = GraphedDecoder(model, cache)
                decoder.ids.copy_(ids)
                replay, logits = decoder.graph.replay, decoder.logits
            else:
                replay, logits = captured(lambda: model(ids, None, "tritonforge"))
        replay()
        return replay, logits
    position = torch.tensor([cache.length]) if phase == "decode" else None

    def call():
        with removed(), torch.no_grad(), tfg.strict():
            return model.decode_step(ids, cache, position, "tritonforge") if phase == "decode" else model(ids, None, "tritonforge")

    return call, call()


def collectives(served: TensorParallelLlama, batch: int, n: int):
    """A call of only the collectives of one step of ``served`` on ``batch x n`` tokens, at their
    sizes, captured on a GPU."""
    cfg = served.full_config
    partial = torch.randn(batch, n, cfg.hidden_size, device=served.embed.device).to(DTYPE)
    logits = torch.randn(batch, n, served.plan.vocab, device=served.embed.device).to(DTYPE)
    pieces = [torch.empty_like(logits) for _ in range(WORLD)]

    def call():
        for _ in range(2 * cfg.num_layers):
            dist.all_reduce(partial)
        dist.all_gather(pieces, logits)
        return torch.cat(pieces, dim=-1)

    if DEVICE == "cuda":
        replay, _ = captured(call)
        return replay
    return call


def timed_us(call, reps: int) -> dict:
    """Median over ``ROUNDS`` rounds of the mean time of ``reps`` calls (µs), every rank starting
    each round at a barrier: ``{"us": the slowest rank's median, "rank_us": each rank's}``."""
    rounds = []
    if DEVICE == "cuda":
        call()  # one more warm-up (a toy run's first call was step()'s)
    for _ in range(ROUNDS):
        smoke.synchronize()
        dist.barrier()
        if DEVICE == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                call()
            end.record()
            end.synchronize()
            rounds.append(start.elapsed_time(end) * 1e3 / reps)
        else:
            begin = time.perf_counter()
            for _ in range(reps):
                call()
            rounds.append((time.perf_counter() - begin) * 1e6 / reps)
    mine = torch.tensor([statistics.median(rounds)], dtype=torch.float64, device=DEVICE)
    every = [torch.zeros_like(mine) for _ in range(WORLD)]
    dist.all_gather(every, mine)
    rank_us = [t.item() for t in every]
    return {"us": max(rank_us), "rank_us": rank_us}


def run_case(full: Llama, served: TensorParallelLlama, case: tuple, layers: int) -> list:
    """The four setups' rows for one case: ("decode", B, context) or ("prefill", 1, tokens)."""
    phase, batch, n = case
    device = served.embed.device
    gen = torch.Generator().manual_seed(SEED + 2)  # the same ids on every rank
    ids = torch.randint(0, full.config.vocab_size, (batch, 1 if phase == "decode" else n), generator=gen).to(device)
    tokens = 1 if phase == "decode" else n
    reps = toy(20 if phase == "decode" else 5, 1)
    base = dict(world=WORLD, layers=layers, allreduce_bytes=batch * tokens * full.config.hidden_size * torch.finfo(DTYPE).bits // 8,
                allreduces=2 * layers, tokens_per_step=batch * tokens)  # fmt: skip

    def row(impl, **fields):
        return bench.make_row("tp-llama", phase, impl, DTYPE, [batch, n, layers], **base, **fields)

    rows = []
    full_cache = filled_cache(full.config, batch, n, device) if phase == "decode" else None
    cache = rank_cache(served, full_cache) if phase == "decode" else None
    one_call, one_logits = step(full, case, ids, full_cache)
    reference = one_logits.float().clone()
    rows.append(row(IMPLS[0], status="ok", device_us=timed_us(one_call, reps)["us"]))
    del one_call, one_logits
    tp_call, tp_logits = step(served, case, ids, cache)
    err = torch.tensor([bench.relative_error(tp_logits.float(), reference)], dtype=torch.float64, device=device)
    dist.all_reduce(err, op=dist.ReduceOp.MAX)  # one verdict for every rank: all time the step, or none
    err = err.item()
    if not err <= WRONG:
        rows.append(row(IMPLS[1], status="wrong", max_rel_err=err, tolerance=WRONG, note=f"logits off by {err:.3g} of the one-GPU model's"))
    else:
        timing = timed_us(tp_call, reps)
        rows.append(row(IMPLS[1], status="ok", max_rel_err=err, tolerance=WRONG, device_us=timing["us"], rank_us=timing["rank_us"]))
    del tp_call, tp_logits
    local_call, _ = step(served, case, ids, cache, local=True)
    timing = timed_us(local_call, reps)
    rows.append(row(IMPLS[2], status="ok", device_us=timing["us"], rank_us=timing["rank_us"]))
    del local_call
    timing = timed_us(collectives(served, batch, tokens), reps)
    rows.append(row(IMPLS[3], status="ok", device_us=timing["us"], rank_us=timing["rank_us"]))
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    if dist.get_rank() == 0:
        for r in rows:
            print(f"{phase:8s} B={batch:<3d} n={n:<5d} {r['impl']:28s} {r['status']:5s} us={r['device_us']} err={r['max_rel_err']}", flush=True)
    return rows


def topology() -> str:
    try:
        return subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unavailable: {exc}"


def rank_main(out: str, layers: int, context: int) -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != WORLD:
        sys.exit(f"tp_llama.py runs on {WORLD} ranks, got WORLD_SIZE={world}")
    if DEVICE == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device, timeout=datetime.timedelta(minutes=10))
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=5))
    cfg = config(layers, context)
    with torch.no_grad():
        full = random_llama(cfg, device)
        served = TensorParallelLlama(full, device=device)
    cases = [("decode", b, toy(context, 20)) for b in BATCHES] + [("prefill", 1, PREFILL)]
    rows = []
    for case in cases:
        rows += run_case(full, served, case, layers)
    if rank == 0:
        data = {
            "schema": "tritonforge.bench/1",
            "metadata": {
                "suite": "tp-llama", "device": smoke.device_name(), "compute_capability": None, "torch": torch.__version__,
                "triton": tfg.environment().triton_version, "liger": None, "python": sys.version.split()[0], "date": None,
                "command": "torchrun --nproc-per-node 2 benchmarks/experiments/tensor-parallel/tp_llama.py " + " ".join(sys.argv[1:]),
                "git_commit": None, "world": WORLD, "layers": layers, "context": toy(context, 20), "prefill": PREFILL,
                "dtype": str(DTYPE).removeprefix("torch."), "backend": dist.get_backend(),
                "nccl": ".".join(map(str, torch.cuda.nccl.version())) if DEVICE == "cuda" else None,
                "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
                "topology": topology() if DEVICE == "cuda" else None,
            },
            "rows": rows,
            **smoke.meta(),
        }  # fmt: skip
        if DEVICE == "cuda":
            major, minor = torch.cuda.get_device_capability()
            data["metadata"]["compute_capability"] = f"{major}.{minor}"
        smoke.write_record(out, data)
        bad = [r for r in rows if r["status"] != "ok"]
        print(f"wrote {out}: {len(rows)} rows; wrong or failing: {len(bad)}", flush=True)
    dist.destroy_process_group()
    return 1 if any(r["status"] != "ok" for r in rows) else 0


def start_ranks(argv: list) -> int:
    """Without torchrun: start the ranks as torchrun would (environment variables, a local port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(WORLD):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv], env=env))
    codes = [p.wait() for p in procs]
    return max(codes, key=abs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the record to write (JSON)")
    parser.add_argument("--layers", type=int, default=toy(32, 2), help="decoder layers (Llama-3-8B has 32)")
    parser.add_argument("--context", type=int, default=1024, help="cached positions at decode")
    parser.add_argument("--toy", action="store_true", help="the toy run (TRITONFORGE_SMOKE=1)")
    args = parser.parse_args()
    if "RANK" not in os.environ:
        return start_ranks(sys.argv[1:])
    return rank_main(args.out, args.layers, args.context)


if __name__ == "__main__":
    sys.exit(main())
