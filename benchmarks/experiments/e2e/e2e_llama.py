"""End to end: chapter 9's Llama decoder at Llama-3-8B layer sizes (hidden 4096, 32 query heads over
8 KV heads, MLP 14336, vocabulary 128256), bf16, random weights, run four ways over the same weights:

- ``sdpa``: PyTorch eager, attention by ``scaled_dot_product_attention`` (a Hugging Face model's
  default), ``Llama(..., backend="sdpa")``;
- ``liger``: the same with what Liger-Kernel's ``apply_liger_kernel_to_llama`` swaps in for
  inference (its RMSNorm, RoPE and SiLU·mul kernels; attention stays SDPA);
- ``torch.compile``: the ``sdpa`` model compiled by Inductor (default mode);
- ``tritonforge``: ``backend="tritonforge"`` (RMSNorm, RoPE, the fused MLP front up to 512 token
  rows, FlashAttention; the projections are cuBLAS in every variant).

Prefill: one sequence of 2048 tokens (a forward without a cache). Decode: one token per row at
B = 1 and 32 over a KV cache holding 1K, 4K or 8K positions, as ``Llama.decode_step`` (fixed
shapes: the whole preallocated cache, the filled length as a device tensor), the step a CUDA graph
replays. Each is timed twice: ``us`` with ``triton.testing.do_bench`` (the eager call, host
included) and ``device_us`` by CUDA-graph replay (``bench.device_time_us``: no host, what a
captured decode loop pays). The models have ``LAYERS`` layers and none (embedding, final norm and
LM head only); per layer = (t(LAYERS) - t(0)) / LAYERS, and a 32-layer step is extrapolated as
t(0) + 32 · per layer (Llama-3-8B's depth), tokens/s from it.

Before timing, each variant's logits are compared with a float32 copy of the same weights (the
``sdpa`` backend in float32): ``max_rel_err``; above ``WRONG`` the row is "wrong" and not timed.

Where the time goes: each op of one layer timed alone by CUDA-graph replay at the layer's shapes
(``op`` rows: norm, q/k/v projections, rotary, attention, output projection, MLP front, down
projection, residual adds), per variant, for prefill and for decode at B = 32, 4K.

Usage (CUDA GPU, repository root): python benchmarks/experiments/e2e/e2e_llama.py OUT.json
Toy run: TRITONFORGE_SMOKE=1 python benchmarks/experiments/e2e/e2e_llama.py OUT.json
"""

import datetime
import json
import os
import sys

import torch

import smoke  # first: imports tritonforge before triton
import tritonforge as tfg
from smoke import DEVICE, toy
from tritonforge import bench
from tritonforge.models.llama import KVCache, Llama, LlamaConfig, apply_rotary, rotary_tables, sdpa_attention
from tritonforge.ops.swiglu_front import front_is_fused
from tritonforge.reference import rms_norm_ref, swiglu_mlp_front_ref

LAYERS = toy(2, 2)
DEPTH = 32  # Llama-3-8B's layers, for the extrapolated step
PREFILL = toy((1, 2048), (1, 24))  # (batch, tokens)
DECODE = toy([(b, ctx) for b in (1, 32) for ctx in (1024, 4096, 8192)], [(1, 20), (2, 40)])  # (batch, cached positions)
BREAKDOWN_DECODE = toy((32, 4096), (2, 40))
DTYPE = toy(torch.bfloat16, torch.float32)
COMPILE = toy({}, {"backend": "aot_eager"})  # a toy run has no C++ compiler to count on
WRONG = 0.1  # max |logits - float32 model| / max |float32 logits| above which a variant is broken
IMPLS = ("sdpa", "liger", "torch.compile", "tritonforge")


def config(layers: int) -> LlamaConfig:
    if smoke.SMOKE:
        return LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_layers=layers, num_heads=4, num_kv_heads=2,
                           max_positions=64)  # fmt: skip
    return LlamaConfig.llama3_8b(num_layers=layers, max_positions=max(ctx for _, ctx in DECODE) + 16)


# -- Liger-Kernel's inference kernels, as its Llama patch uses them -----------------------------------


def load_liger():
    """(norm, rotary, mlp_front) from Liger-Kernel, or the reason it is unavailable."""
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
        from liger_kernel.transformers.rope import liger_rotary_pos_emb
    except Exception as exc:  # noqa: BLE001
        return f"liger-kernel not importable ({bench.describe_exception(exc)})"

    def norm(x, weight, eps):  # offset 0, Llama's casting, not in place (as LigerRMSNorm for Llama)
        return LigerRMSNormFunction.apply(x, weight, eps, 0.0, "llama", False)

    def rotary(q, k, cos, sin):
        return liger_rotary_pos_emb(q, k, cos[None], sin[None])

    def mlp_front(x, w_gate, w_up):  # LigerSwiGLUMLP: gate and up projections, then its SiLU·mul kernel
        return LigerSiLUMulFunction.apply(x @ w_gate, x @ w_up)

    return norm, rotary, mlp_front


class LigerLlama(Llama):
    """The ``sdpa`` model with Liger's RMSNorm, RoPE and SiLU·mul (its Llama patch for inference)."""

    liger = None

    def _norm(self, x, weight, backend):
        return self.liger[0](x, weight, self.config.eps)

    def _rotary(self, q, k, cos, sin, backend):
        return self.liger[1](q, k, cos, sin)

    def _mlp_front(self, x, w_gate, w_up, backend):
        return self.liger[2](x, w_gate, w_up)


# -- The variants ----------------------------------------------------------------------------------


def build(layers: int, liger):
    """{impl: (model, backend, compile?)} over one set of weights (same seed), plus the float32 oracle."""
    cfg = config(layers)
    model = Llama(cfg, dtype=DTYPE, device=DEVICE)
    variants = {"sdpa": (model, "sdpa", False), "torch.compile": (model, "sdpa", True), "tritonforge": (model, "tritonforge", False)}
    if not isinstance(liger, str):
        liger_model = LigerLlama(cfg, dtype=DTYPE, device=DEVICE)
        liger_model.liger = liger
        variants["liger"] = (liger_model, "sdpa", False)
    oracle = Llama(cfg, dtype=torch.float32, device=DEVICE)
    oracle.load_state_dict(model.state_dict())  # the bf16 weights, exactly, in float32
    return variants, oracle


def filled_cache(cfg: LlamaConfig, batch: int, ctx: int, dtype) -> KVCache:
    cache = KVCache(cfg, batch, dtype, DEVICE)
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    cache.keys.normal_(generator=gen)
    cache.values.normal_(generator=gen)
    cache.length = ctx
    return cache


def calls(model, backend, compiled, phase, shape):
    """A zero-argument call of one step (prefill forward or static decode step) and its inputs."""
    cfg = model.config
    gen = torch.Generator(device=DEVICE).manual_seed(2)
    if phase == "prefill":
        batch, n = shape
        ids = torch.randint(0, cfg.vocab_size, (batch, n), device=DEVICE, generator=gen)
        fn = (lambda ids: model(ids, None, backend)) if not compiled else torch.compile(lambda ids: model(ids, None, backend), **COMPILE)
        return lambda: fn(ids), (ids, None, None)
    batch, ctx = shape
    cache = filled_cache(cfg, batch, ctx, model.embed.dtype)
    ids = torch.randint(0, cfg.vocab_size, (batch, 1), device=DEVICE, generator=gen)
    position = torch.tensor([ctx], device=DEVICE)
    step = lambda ids, position: model.decode_step(ids, cache, position, backend)  # noqa: E731
    fn = torch.compile(step, **COMPILE) if compiled else step
    return lambda: fn(ids, position), (ids, cache, position)


def expected_logits(oracle, phase, inputs):
    ids, cache, position = inputs
    with torch.no_grad():
        if phase == "prefill":
            return oracle(ids, None, "sdpa")
        cache32 = KVCache(oracle.config, cache.keys.shape[1], torch.float32, DEVICE)
        cache32.keys.copy_(cache.keys)
        cache32.values.copy_(cache.values)
        return oracle.decode_step(ids, cache32, position, "sdpa")


def measure(impl, variant, oracle, phase, shape, layers) -> dict:
    model, backend, compiled = variant
    row = bench.make_row("llama-e2e", phase, impl, DTYPE, [*shape, layers], layers=layers)
    try:
        with torch.no_grad(), tfg.strict(impl == "tritonforge"):
            call, inputs = calls(model, backend, compiled, phase, shape)
            err = bench.relative_error(call().float(), expected_logits(oracle, phase, inputs))
            row["max_rel_err"], row["tolerance"] = err, WRONG
            if not err <= WRONG:
                row.update(status="wrong", note=f"logits off by {err:.3g} of the float32 model's")
                return row
            row["us"] = smoke.do_bench_us(call)
            row["device_us"] = smoke.device_us(call)
        row["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - a variant that fails is a row that says why
        row.update(status="error", note=bench.describe_exception(exc))
    print(f"{impl:14s} {phase:8s} {str(shape):12s} L={layers}: {row['status']} us={row['us']} device_us={row['device_us']} "
          f"err={row['max_rel_err']}", flush=True)  # fmt: skip
    return row


# -- Where the time goes: one layer's ops, alone --------------------------------------------------


def front(x, w_gate, w_up):
    """The tritonforge model's MLP front: the fused kernel for few rows, cuBLAS + tfg.swiglu for many."""
    if front_is_fused(x.dtype, x.numel() // x.shape[-1]):
        return tfg.swiglu_mlp_front(x, w_gate, w_up)
    return tfg.swiglu(x @ w_gate, x @ w_up)


def op_table(impl, liger):
    """(norm, rotary, attention, mlp_front) of a variant, as its model calls them."""
    if impl == "tritonforge":
        return (tfg.rms_norm, lambda q, k, cos, sin: (tfg.rope(q, cos, sin), tfg.rope(k, cos, sin)),
                lambda q, k, v, n: tfg.flash_attention(q, k, v, causal=True, kv_lens=n), front)  # fmt: skip
    norm = liger[0] if impl == "liger" else rms_norm_ref
    mlp = liger[2] if impl == "liger" else swiglu_mlp_front_ref
    rotary = liger[1] if impl == "liger" else lambda q, k, cos, sin: (apply_rotary(q, cos, sin), apply_rotary(k, cos, sin))
    return norm, rotary, sdpa_attention, mlp


def breakdown(impl, liger, model, phase, shape) -> list[dict]:
    """Each op of layer 0 timed alone (device time), with the inputs it meets in the step."""
    cfg = model.config
    layer = model.layers[0]
    norm, rotary, attention, mlp = op_table(impl, liger)
    gen = torch.Generator(device=DEVICE).manual_seed(3)
    batch, n = shape if phase == "prefill" else (shape[0], 1)
    x = torch.randn(batch, n, cfg.hidden_size, device=DEVICE, dtype=DTYPE, generator=gen)
    positions = torch.arange(n, device=DEVICE) + (0 if phase == "prefill" else shape[1])
    cos, sin = rotary_tables(cfg, positions, DTYPE)
    q = (x @ layer.wq).view(batch, n, cfg.num_heads, cfg.head_dim).transpose(1, 2)
    k = (x @ layer.wk).view(batch, n, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
    v = (x @ layer.wv).view(batch, n, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
    lens = None
    if phase == "decode":
        cache = filled_cache(cfg, batch, shape[1], DTYPE)
        k_all, v_all, lens = cache.keys[0], cache.values[0], torch.full((batch,), shape[1] + 1, device=DEVICE, dtype=torch.int32)
    else:
        k_all, v_all = k, v
    attn = attention(q, k_all, v_all, lens) if impl == "tritonforge" or phase == "decode" else sdpa_attention(q, k, v)
    flat = attn.transpose(1, 2).reshape(batch, n, -1)
    front = mlp(x, layer.w_gate, layer.w_up)
    ops = {
        "rms_norm (x2)": lambda: norm(x, layer.attn_norm, cfg.eps),
        "q, k, v projections": lambda: (x @ layer.wq, x @ layer.wk, x @ layer.wv),
        "rotary": lambda: rotary(q, k, cos, sin),
        "attention": lambda: attention(q, k_all, v_all, lens) if phase == "decode" else (
            tfg.flash_attention(q, k, v, causal=True) if impl == "tritonforge" else sdpa_attention(q, k, v)),
        "output projection": lambda: flat @ layer.wo,
        "MLP front": lambda: mlp(x, layer.w_gate, layer.w_up),
        "down projection": lambda: front @ layer.w_down,
        "residual adds (x2)": lambda: x + x,
    }  # fmt: skip
    if phase == "decode":
        ops["KV cache write"] = lambda: cache.write(0, k, v, positions)
    rows = []
    with torch.no_grad(), tfg.strict(impl == "tritonforge"):
        for name, fn in ops.items():
            row = bench.make_row("llama-e2e", f"{phase}-op", impl, DTYPE, list(shape), stage=name)
            try:
                us = smoke.device_us(fn)
                row.update(status="ok", device_us=us * (2 if "(x2)" in name else 1))
            except Exception as exc:  # noqa: BLE001
                row.update(status="error", note=bench.describe_exception(exc))
            rows.append(row)
    return rows


def main(out: str) -> int:
    liger = load_liger()
    rows = []
    ceilings = [smoke.copy_ceiling()]
    for layers in (LAYERS, 0):
        variants, oracle = build(layers, liger)
        for impl in IMPLS:
            if impl not in variants:
                rows.append(bench.make_row("llama-e2e", "all", impl, DTYPE, [layers], status="unavailable", note=liger, layers=layers))
                continue
            rows.append(measure(impl, variants[impl], oracle, "prefill", PREFILL, layers))
            rows += [measure(impl, variants[impl], oracle, "decode", shape, layers) for shape in DECODE]
        if layers:
            for impl in ("sdpa", "liger", "tritonforge"):
                if impl in variants:
                    rows += breakdown(impl, liger, variants[impl][0], "prefill", PREFILL)
                    rows += breakdown(impl, liger, variants[impl][0], "decode", BREAKDOWN_DECODE)
        del variants, oracle
        torch.cuda.empty_cache() if DEVICE == "cuda" else None
    data = {
        "schema": "tritonforge.bench/1",
        "metadata": {
            "suite": "llama-e2e", "device": smoke.device_name(), "compute_capability": None, "torch": torch.__version__,
            "triton": tfg.environment().triton_version, "liger": bench.liger_version(), "python": sys.version.split()[0],
            "date": None, "command": "python benchmarks/experiments/e2e/e2e_llama.py " + out, "git_commit": None,
            "layers": LAYERS, "depth": DEPTH, "dtype": str(DTYPE).removeprefix("torch."), "ceilings_rows": ceilings,
        },
        "rows": rows,
        **smoke.meta(),
    }  # fmt: skip
    if DEVICE == "cuda":
        major, minor = torch.cuda.get_device_capability()
        commit, _ = bench.git_state()
        data["metadata"].update(compute_capability=f"{major}.{minor}", git_commit=os.environ.get("TRITONFORGE_GIT_COMMIT", commit),
                                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))  # fmt: skip
    with open(out, "w") as f:
        json.dump(bench.json_safe(data), f, indent=1)
        f.write("\n")
    bad = [r for r in rows if r["status"] in ("wrong", "error") and r["impl"] == "tritonforge"]
    print(f"wrote {out}: {len(rows)} rows; tritonforge rows wrong or failing: {len(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
