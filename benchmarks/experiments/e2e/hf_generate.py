"""End to end through Hugging Face, as a kernel engineer meets the package: ``tfg.patch(model)`` and
``model.generate(...)``, beside the unpatched model and Liger-Kernel's patch, over the same weights.

The model: ``transformers``' ``LlamaForCausalLM`` at Llama-3-8B layer sizes (hidden 4096, 32 query
heads over 8 KV heads, MLP 14336, vocabulary 128256), ``LAYERS`` layers, random weights, bf16,
SDPA attention when unpatched. Variants:

- ``unpatched``: the model as ``transformers`` runs it (SDPA attention, its own RMSNorm, RoPE, MLP);
- ``tritonforge``: ``tfg.patch(model)`` (RMSNorm, the fused MLP front, attention through the
  ``"tritonforge"`` implementation and its mask function);
- ``liger``: ``apply_liger_kernel_to_llama(model=...)`` with its inference kernels (RMSNorm, RoPE,
  SiLU·mul; the loss kernels off). Liger swaps RoPE module-wide, so its RoPE is swapped in only
  while its rows run.

Cases (greedy, exactly ``new`` tokens each, prompts of random token ids):

- ``eager``: ``generate`` with the default DynamicCache, every step in eager PyTorch (the host pays
  every op of every step); B = 1 and 16; ``padded``: left-padded prompts of random lengths between
  half and all of the prompt (B = 8 and 16);
- ``static``: ``generation_config.cache_implementation = "static"``: ``generate`` compiles the
  forward itself (``CompileConfig`` defaults: Inductor, ``reduce-overhead``, CUDA graphs), B = 1 and 16;
- ``prefill``: one forward of 1 × ``PREFILL`` tokens, no cache (``triton.testing.do_bench``).

Each generate is timed by the wall clock around the call (``torch.cuda.synchronize`` on both sides)
after one warm-up call (two for ``static``: the compile, then the CUDA graphs' recording), median of
``REPEATS``: tokens per second (``B · new / seconds``) and milliseconds per step. One more call runs
under ``torch.profiler``, in a second process once every row is timed (profiled in the same process,
the rows timed after a profiler session came out slower: on the H200 the patched model's eager
B = 1 fell from 308-329 tok/s in runs without a profiler to 189):
the GPU's busy time (the sum of every device-side event, kernels and
copies, CUDA-graph replays included) over the new tokens is ``device_ms_per_step``, the part of a
step the kernels set (the prefill included, spread over the steps); ``matmul_ms_per_step`` is the
part of it in cuBLAS's kernels (the projections and the LM head, which no patch replaces but the
fused MLP front). The rest of ``ms_per_step`` is the host (``generate``'s loop, the model's Python,
the launches) while the GPU waits. Each row also
says how many of its tokens equal the unpatched model's (bf16 greedy decoding of random weights can
part ways at a near tie) and, for ``tritonforge``, every fallback warning the case raised and the
route of the last attention call.

Usage (CUDA GPU, repository root): python benchmarks/experiments/e2e/hf_generate.py OUT.json [eager|static|prefill ...]
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/e2e/hf_generate.py OUT.json
"""

import copy
import json
import os
import statistics
import sys
import time
import warnings

import torch

import smoke  # first: imports tritonforge before triton
import tritonforge as tfg
from smoke import DEVICE, toy
from tritonforge import bench, runtime

LAYERS = toy(4, 2)
PROMPT = toy(512, 12)
PREFILL = toy(2048, 24)
REPEATS = toy(5, 1)
PROFILE = os.environ.get("HF_GENERATE_PROFILE") == "1"
"""Set by :func:`add_device_time` for the second process, which profiles instead of timing."""
CASES = {  # kind -> [(batch, new tokens, padded)]
    "eager": toy([(1, 64, False), (16, 32, False), (8, 32, True), (16, 32, True)], [(1, 4, False), (3, 3, True)]),
    "static": toy([(1, 64, False), (16, 32, False)], [(2, 3, True)]),
}
VARIANTS = ("unpatched", "tritonforge", "liger")
DTYPE = toy(torch.bfloat16, torch.float32)


def build_model():
    import transformers

    if smoke.SMOKE:
        sizes = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2)
    else:
        sizes = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                     rope_theta=500000.0)  # fmt: skip
    config = transformers.LlamaConfig(**sizes, num_hidden_layers=LAYERS, max_position_embeddings=4096, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = transformers.LlamaForCausalLM(config).to(DTYPE).eval()
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = None  # random weights: every case runs its full length
    return model


def transformers_version() -> str:
    import transformers

    return transformers.__version__


def load_liger(model):
    """``(model, rope)``: a copy patched by Liger-Kernel and its RoPE function, or ``(None, reason)``."""
    try:
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        from transformers.models.llama import modeling_llama
    except Exception as exc:  # noqa: BLE001
        return None, f"liger-kernel not importable ({bench.describe_exception(exc)})"
    original = modeling_llama.apply_rotary_pos_emb
    liger = copy.deepcopy(model)
    try:
        apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True, cross_entropy=False, fused_linear_cross_entropy=False,
                                    model=liger)  # fmt: skip
        rope = modeling_llama.apply_rotary_pos_emb
    except Exception as exc:  # noqa: BLE001
        return None, f"apply_liger_kernel_to_llama failed ({bench.describe_exception(exc)})"
    finally:
        modeling_llama.apply_rotary_pos_emb = original
    return liger, rope


class Swapped:
    """Liger's RoPE in ``modeling_llama`` for the duration of a ``with`` block (nothing else)."""

    def __init__(self, rope):
        self.rope = rope

    def __enter__(self):
        from transformers.models.llama import modeling_llama

        self.original = modeling_llama.apply_rotary_pos_emb
        if self.rope is not None:
            modeling_llama.apply_rotary_pos_emb = self.rope

    def __exit__(self, *exc):
        from transformers.models.llama import modeling_llama

        modeling_llama.apply_rotary_pos_emb = self.original


def prompts(batch: int, padded: bool, vocab: int):
    torch.manual_seed(batch * 2 + padded)
    ids = torch.randint(1, vocab, (batch, PROMPT), device=DEVICE)
    mask = torch.ones_like(ids)
    if padded:
        lengths = torch.randint(PROMPT // 2, PROMPT + 1, (batch,))
        lengths[0] = PROMPT
        for b, n in enumerate(lengths.tolist()):
            mask[b, : PROMPT - n] = 0
        ids[mask == 0] = 0
    return ids, mask


MATMUL_KERNELS = ("gemv", "gemm", "cutlass", "xmma", "nvjet", "cublas")
"""Substrings of cuBLAS's kernel names (and CUTLASS's, which cuBLAS uses on Hopper): the matmuls
that no patch replaces (q, k, v, o, down and the LM head; the MLP front too, unless fused)."""


def device_busy_ms(call) -> dict:
    """Milliseconds of the GPU's work during ``call()`` (``torch.profiler``: the device-side events,
    kernels and copies, CUDA-graph replays included): ``all``, and ``matmul``, cuBLAS's kernels."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        call()
        smoke.synchronize()
    kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    total = sum(e.time_range.elapsed_us() for e in kernels)
    matmul = sum(e.time_range.elapsed_us() for e in kernels if any(k in e.name.lower() for k in MATMUL_KERNELS))
    return {"all": total / 1e3, "matmul": matmul / 1e3}


def timed_generate(model, ids, mask, new: int, static: bool, warmups: int, repeats: int = REPEATS) -> tuple[list, torch.Tensor]:
    args = dict(attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False)
    if static:
        args["cache_implementation"] = "static"
    else:
        args["disable_compile"] = True
    times = []
    out = ids
    for i in range(warmups + repeats):
        smoke.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, **args)
        smoke.synchronize()
        if i >= warmups:
            times.append(time.perf_counter() - start)
    return times, out[:, ids.shape[1] :]


def generate_row(kind, variant, model, rope, batch, new, padded, baseline):
    static = kind == "static"
    ids, mask = prompts(batch, padded, model.config.vocab_size)
    row = {"case": f"{kind}{' padded' if padded else ''}", "variant": variant, "batch": batch, "prompt": PROMPT, "new_tokens": new,
           "padded": padded}  # fmt: skip
    runtime.reset_routing_state()
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    if PROFILE:  # the second process: the GPU's work in one call, after the same warm-up
        with Swapped(rope if variant == "liger" else None):
            timed_generate(model, ids, mask, new, static, warmups=2 if static else 1, repeats=0)
            busy = device_busy_ms(lambda: timed_generate(model, ids, mask, new, static, warmups=0, repeats=1))
        row.update(device_ms_per_step=busy["all"] / new, matmul_ms_per_step=busy["matmul"] / new)
        print(row, flush=True)
        return row, None
    try:
        with warnings.catch_warnings(record=True) as caught, Swapped(rope if variant == "liger" else None):
            warnings.simplefilter("always", tfg.FallbackWarning)
            times, tokens = timed_generate(model, ids, mask, new, static, warmups=2 if static else 1)
    except Exception as exc:  # noqa: BLE001 - a variant that fails is a result too
        row["error"] = bench.describe_exception(exc)
        print(row, flush=True)
        return row, None
    seconds = statistics.median(times)
    row.update(seconds=seconds, times=times, tokens_per_s=batch * new / seconds, ms_per_step=seconds / new * 1e3)
    if baseline is not None:
        row["same_tokens"] = float((tokens == baseline).float().mean())
    if variant == "tritonforge":
        row["fallbacks"] = sorted({str(w.message)[:300] for w in caught if issubclass(w.category, tfg.FallbackWarning)})
        try:
            row["attention_route"] = str(tfg.last_route("flash_attention"))
        except KeyError:
            row["attention_route"] = "never called"
    if static:
        row["graph_breaks"] = sum(counters["graph_break"].values())
        row["unique_graphs"] = counters["stats"]["unique_graphs"]
    print({k: v for k, v in row.items() if k != "times"}, flush=True)
    return row, tokens


def prefill_row(variant, model, rope):
    ids = torch.randint(1, model.config.vocab_size, (1, PREFILL), device=DEVICE)
    row = {"case": "prefill", "variant": variant, "batch": 1, "tokens": PREFILL}
    try:
        with torch.no_grad(), Swapped(rope if variant == "liger" else None):
            row["us"] = smoke.do_bench_us(lambda: model(ids, use_cache=False))
    except Exception as exc:  # noqa: BLE001
        row["error"] = bench.describe_exception(exc)
    print(row, flush=True)
    return row


def save(out: str, kinds: list, counts: dict, rows: list) -> None:
    """Write what was measured so far (after every row: a run stopped early keeps it)."""
    data = {
        "schema": "tritonforge.bench/1",
        "metadata": {
            "suite": "hf-generate", "device": smoke.device_name(), "torch": torch.__version__, "triton": tfg.environment().triton_version,
            "transformers": transformers_version(), "liger": bench.liger_version(), "python": sys.version.split()[0],
            "command": "python benchmarks/experiments/e2e/hf_generate.py " + " ".join([out, *kinds]), "layers": LAYERS, "prompt": PROMPT,
            "dtype": str(DTYPE).removeprefix("torch."), "patched": counts, "date": None, "git_commit": None,
        },
        "rows": rows,
        **smoke.meta(),
    }  # fmt: skip
    smoke.write_record(out, data)


def add_device_time(out: str, kinds: list, rows: list) -> None:
    """Run this script again in a fresh process that profiles each generate case (``PROFILE``) and
    copy its device times into ``rows``."""
    import subprocess

    profiled = out + ".device.json"
    cases = [k for k in kinds if k in CASES]
    subprocess.run([sys.executable, __file__, profiled, *cases], env={**os.environ, "HF_GENERATE_PROFILE": "1"}, check=True)
    with open(profiled) as f:
        found = {(r["case"], r["variant"], r["batch"]): r for r in json.load(f)["rows"]}
    os.remove(profiled)
    for row in rows:
        busy = found.get((row["case"], row["variant"], row["batch"]), {})
        row.update({k: busy[k] for k in ("device_ms_per_step", "matmul_ms_per_step") if k in busy})


def main(out: str, kinds: list) -> int:
    base = build_model()
    models = {"unpatched": (base, None)}
    ours = copy.deepcopy(base)
    counts = tfg.patch(ours)
    models["tritonforge"] = (ours, None)
    liger, rope = load_liger(base)
    if liger is not None:
        models["liger"] = (liger, rope)
    rows = []
    for kind in [k for k in ("eager", "static") if k in kinds]:
        for batch, new, padded in CASES[kind]:
            baseline = None
            for variant in VARIANTS:
                if variant not in models:
                    rows.append({"case": kind, "variant": variant, "batch": batch, "status": "unavailable", "note": rope})
                    continue
                row, tokens = generate_row(kind, variant, *models[variant], batch, new, padded, baseline)
                baseline = tokens if variant == "unpatched" else baseline
                rows.append(row)
                save(out, kinds, counts, rows)
    if PROFILE:
        save(out, kinds, counts, rows)
        return 0
    if "prefill" in kinds:
        rows += [prefill_row(v, *models[v]) for v in VARIANTS if v in models]
    if not smoke.SMOKE:
        add_device_time(out, kinds, rows)
    save(out, kinds, counts, rows)
    bad = [r for r in rows if r["variant"] == "tritonforge" and ("error" in r or r.get("fallbacks"))]
    print(f"wrote {out}: {len(rows)} rows; tritonforge rows failing or falling back: {len(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:] or ["eager", "static", "prefill"]))
