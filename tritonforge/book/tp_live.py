"""Chapter 10's live run: a toy Llama served tensor-parallel by gloo ranks, beside the one-rank model.

:func:`serve_on_ranks` starts ``world`` Python processes (``python -m tritonforge.book.tp_live``,
one per rank, as ``torchrun`` would), each on the CPU with Triton's interpreter, whatever the
machine has: they join a gloo process group over a local TCP port, build the same
:class:`~tritonforge.models.llama.Llama` from the same seed, cut their shard
(:class:`~tritonforge.models.tensor_parallel.TensorParallelLlama`) and serve a prompt: one
prefill call, then greedy decode steps with :meth:`~tritonforge.models.llama.Llama.decode_step`
(the fixed-shape step a CUDA graph replays), with strict routing (a fallback would be an error).
Rank 0 also serves the whole model alone, the one-rank answer the ranks must give.

A notebook cannot hand a function it defines to a child process (the child imports functions by
module, and a notebook is no module), and a child's warnings would land in the cell: hence
processes started from this module's ``__main__``, their output captured, and results passed back
through files in a temporary folder. Each rank also counts its collectives and their sizes, so
the chapter can show the two all-reduces a layer that the math predicts.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

import torch

OPS = ("rms_norm", "rope", "flash_attention", "swiglu_mlp_front", "swiglu")
"""The ops a served layer calls through the package (the MLP front is one of the last two)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (a process group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_on_ranks(config, world: int = 2, prompt_shape=(2, 12), new_tokens: int = 5, seed: int = 3, timeout_s: float = 300.0) -> dict:
    """Serve ``config``'s Llama (float32, weights from ``seed``) over ``world`` gloo ranks, each a
    child process, and return what they found: ``"ranks"`` (per rank: its shard's shapes, the
    collectives it called, the ops' paths, its tokens and logits), ``"one_rank"`` (rank 0's run of
    the whole model), ``"seconds"`` (the wall time, process starts included). A rank that fails
    raises ``RuntimeError`` with its output."""
    import tritonforge

    root = pathlib.Path(tritonforge.__file__).resolve().parents[1]  # children import this same package
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", TRITONFORGE_STRICT="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        job = {"config": dataclasses.asdict(config), "world": world, "port": free_port(), "prompt_shape": list(prompt_shape),
               "new_tokens": new_tokens, "seed": seed, "out": out}  # fmt: skip
        ranks = [subprocess.Popen([sys.executable, "-m", "tritonforge.book.tp_live", json.dumps(job), str(rank)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in range(world)]  # fmt: skip
        outputs = []
        for proc in ranks:
            try:
                outputs.append(proc.communicate(timeout=timeout_s)[0])
            except subprocess.TimeoutExpired:
                for other in ranks:
                    other.kill()
                raise RuntimeError(f"a rank ran past {timeout_s} s") from None
        failed = [(r, p.returncode, o) for r, (p, o) in enumerate(zip(ranks, outputs)) if p.returncode != 0]
        if failed:
            raise RuntimeError("\n".join(f"rank {r} exited {code}:\n{text[-3000:]}" for r, code, text in failed))
        saved = [torch.load(os.path.join(out, f"rank{r}.pt")) for r in range(world)]
    return {"ranks": [s["served"] for s in saved], "one_rank": saved[0]["one_rank"], "seconds": time.perf_counter() - start}


def _serve(model, prompt: torch.Tensor, new_tokens: int) -> dict:
    """Prefill, then greedy decode with :meth:`~Llama.decode_step` over a fixed-shape cache."""
    from tritonforge.models.llama import greedy_steps

    tokens, prefill, steps = greedy_steps(model, prompt, new_tokens)
    return {"tokens": tokens, "prefill": prefill, "steps": steps}


def _rank(job: dict, rank: int) -> None:
    import torch.distributed as dist

    import tritonforge as tfg
    from tritonforge.models.llama import Llama, LlamaConfig
    from tritonforge.models.tensor_parallel import TensorParallelLlama

    class Counted(TensorParallelLlama):
        """The served model, counting its collectives (kind, shape of what each rank sends)."""

        calls: list = []

        def _all_reduce(self, partial):
            self.calls.append(("all_reduce", tuple(partial.shape), partial.numel() * partial.element_size()))
            return super()._all_reduce(partial)

        def _all_gather(self, logits):
            self.calls.append(("all_gather", tuple(logits.shape), logits.numel() * logits.element_size()))
            return super()._all_gather(logits)

    world, config = job["world"], LlamaConfig(**job["config"])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{job['port']}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))  # fmt: skip
    prompt = torch.randint(0, config.vocab_size, tuple(job["prompt_shape"]), generator=torch.Generator().manual_seed(job["seed"]))
    with torch.no_grad(), tfg.strict():
        model = Llama(config, seed=job["seed"])  # the same weights on every rank
        served = Counted(model)
        layer = served.layers[0]
        shard = {name: tuple(getattr(layer, name).shape) for name in ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")}
        shard["lm_head"] = tuple(served.lm_head.shape)
        Counted.calls.clear()
        result = _serve(served, prompt, job["new_tokens"])  # the prefill call's collectives first, then each step's
        counted = list(Counted.calls)
        paths = {}
        for op in OPS:
            try:
                paths[op] = tfg.last_path(op)
            except KeyError:  # the MLP front is one of two ops
                pass
        one_rank = _serve(model, prompt, job["new_tokens"]) if rank == 0 else None
    dist.destroy_process_group()
    plan = served.plan
    served_info = {"rank": rank, "shard": shard, "collectives": counted, "paths": paths, "prompt": prompt,
                   "query_heads": list(plan.query_heads(rank)), "kv_heads": list(plan.key_value_heads(rank)), **result}  # fmt: skip
    torch.save({"served": served_info, "one_rank": one_rank}, os.path.join(job["out"], f"rank{rank}.pt"))


if __name__ == "__main__":
    _rank(json.loads(sys.argv[1]), int(sys.argv[2]))
