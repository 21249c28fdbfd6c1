"""The peers: what a user would run instead of tritonforge, made the same way for every row.

- PyTorch eager: the Hugging Face ``LlamaRMSNorm.forward`` formula line for line
  (:func:`hf_llama_rms_norm`), and ``torch.nn.functional.rms_norm``;
- ``torch.compile`` of the eager formula, compiled afresh for every shape with ``dynamic=False``
  (:func:`compile_fresh`), and on a GPU also under CUDA graphs (``mode="reduce-overhead"``,
  :func:`compile_cuda_graphs`) beside our own op compiled the same way;
- Liger-Kernel, the library a user would pick for norms (:func:`load_liger_rms_norm`): a peer to
  measure against, never a dependency;
- for attention, SDPA's backends and Triton's own fused-attention tutorial
  (:func:`load_triton_tutorial_attention`), read from a file the bench machine is given, never
  copied into this repository.

Each ``*_implementations`` table maps a row name to a *maker* (a function returning ``fn`` for
one row, so that compilation happens per row) or to a string saying why it is unavailable here.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Optional

import torch

from tritonforge.bench.timing import NotServed, describe_exception

RMSNORM_EPS = 1e-6
AXPY_ALPHA = 1.5

COMPILED_CUDA_GRAPHS = "tritonforge (compiled, CUDA graphs)"
"""Row name: ``tfg.rms_norm`` inside ``torch.compile(mode="reduce-overhead", fullgraph=True,
dynamic=False)``: our kernel with its host time replaced by a CUDA-graph replay, the way a serving
engine would run it. GPU only."""

TORCH_COMPILE_CUDA_GRAPHS = "torch.compile (CUDA graphs)"
"""Row name: the HF formula compiled in the same mode (Inductor's kernel, replayed as a CUDA graph). GPU only."""

CUDA_GRAPH_IMPLS = (COMPILED_CUDA_GRAPHS, TORCH_COMPILE_CUDA_GRAPHS)

CUDA_GRAPH_WARMUP_CALLS = 3
"""Calls of a ``reduce-overhead`` function before it is timed: cudagraph trees run the first call
eagerly and record the graph on a later one (the 2nd or 3rd), then replay it."""


def hf_llama_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = RMSNORM_EPS) -> torch.Tensor:
    """``LlamaRMSNorm.forward`` from Hugging Face transformers, line for line: the eager peer.
    (The float64 oracle is :func:`tritonforge.reference.rms_norm_ref` with ``upcast=True``.)"""
    input_dtype = x.dtype
    hidden = x.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    hidden = hidden * torch.rsqrt(variance + eps)
    return weight * hidden.to(input_dtype)


def functional_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = RMSNORM_EPS) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)


def eager_axpy(alpha: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return alpha * x + y


def compile_fresh(fn: Callable) -> Callable:
    """``torch.compile(fn, dynamic=False)`` after forgetting earlier compilations.

    Each row compiles for its own shape: without the reset, dynamo's recompile limit (8 per
    function) would silently send later shapes back to eager.
    """
    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False)


def compile_cuda_graphs(fn: Callable) -> Callable:
    """``torch.compile(fn, mode="reduce-overhead", fullgraph=True, dynamic=False)``, afresh.

    ``reduce-overhead`` wraps the compiled code in CUDA graphs (cudagraph trees): after
    :data:`CUDA_GRAPH_WARMUP_CALLS` calls, a call is one graph replay, with no per-kernel launch
    from Python. Its output lives in the graph's memory pool and is overwritten by the next replay.
    """
    torch._dynamo.reset()
    return torch.compile(fn, mode="reduce-overhead", fullgraph=True, dynamic=False)


def load_tritonforge_rms_norm() -> tuple[Optional[Callable], Optional[str]]:
    """``tritonforge.ops.rmsnorm.rms_norm``, or None and the reason it cannot be imported."""
    try:
        from tritonforge.ops.rmsnorm import rms_norm
    except Exception as exc:  # noqa: BLE001 - a missing or broken module is a row, not a crash
        return None, f"tritonforge.ops.rmsnorm not importable ({describe_exception(exc)})"
    return rms_norm, None


def liger_version() -> Optional[str]:
    for name in ("liger-kernel", "liger_kernel", "liger-kernel-nightly"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def load_liger_rms_norm() -> tuple[Optional[Callable], Optional[str]]:
    """Liger-Kernel's RMSNorm as ``fn(x, weight, eps)``, or None and why not.

    Newer Liger versions take ``in_place`` (overwrite dy with dx in backward); we pass False so
    that repeated backward calls see the same dy. It changes no traffic.
    """
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    except Exception as exc:  # noqa: BLE001
        return None, f"liger-kernel not importable ({describe_exception(exc)})"
    params = inspect.signature(LigerRMSNormFunction.forward).parameters
    extra = (0.0, "llama", False) if "in_place" in params else ()

    def liger_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return LigerRMSNormFunction.apply(x, weight, eps, *extra)

    return liger_rms_norm, None


def rmsnorm_implementations(impls: Optional[Sequence[str]] = None, *, cuda_graphs: bool = False) -> dict:
    """name -> a maker that returns ``fn(x, weight, eps)`` for one row, or why it is unavailable.

    Makers rather than functions so that torch.compile compiles afresh for every row. Ours first.
    ``cuda_graphs`` (a GPU run) adds the two ``reduce-overhead`` rows, :data:`CUDA_GRAPH_IMPLS`;
    they compile with eps fixed, as a model's norm layer would.
    """
    ours, ours_missing = load_tritonforge_rms_norm()
    liger, liger_missing = load_liger_rms_norm()
    table = {
        "tritonforge": (lambda: ours) if ours else ours_missing,
        "hf-eager": lambda: hf_llama_rms_norm,
        "F.rms_norm": lambda: functional_rms_norm,
        "torch.compile": lambda: compile_fresh(hf_llama_rms_norm),
        "liger": (lambda: liger) if liger else liger_missing,
    }
    if cuda_graphs:
        table[COMPILED_CUDA_GRAPHS] = (lambda: graphed_rms_norm(ours)) if ours else ours_missing
        table[TORCH_COMPILE_CUDA_GRAPHS] = lambda: graphed_rms_norm(hf_llama_rms_norm)
    return {name: maker for name, maker in table.items() if impls is None or name in impls}


def graphed_rms_norm(rms_norm: Callable) -> Callable:
    """``fn(x, weight, eps)`` calling ``rms_norm`` through :func:`compile_cuda_graphs`; the
    compiled function is made on the first call, with that call's eps fixed in it."""
    compiled = {}

    def fn(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        if eps not in compiled:
            compiled[eps] = compile_cuda_graphs(lambda x, w: rms_norm(x, w, eps))
        return compiled[eps](x, weight)

    return fn


# ----------------------------------------------------------------------------------------------
# SwiGLU: the elementwise op and the fused MLP front
# ----------------------------------------------------------------------------------------------


def eager_swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Hugging Face ``LlamaMLP``'s activation: ``act_fn(gate) * up`` (two eager kernels)."""
    return torch.nn.functional.silu(gate) * up


def eager_swiglu_front(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """``silu(x @ w_gate) * (x @ w_up)``: two cuBLAS matmuls, then the two elementwise kernels."""
    return eager_swiglu(x @ w_gate, x @ w_up)


def load_liger_swiglu() -> tuple[Optional[Callable], Optional[str]]:
    """Liger-Kernel's ``LigerSiLUMulFunction`` as ``fn(gate, up)``, or None and why not. Its
    backward writes the gradients into the saved inputs' storage (in place): rows that time
    forward + backward run on inputs that change from call to call (same traffic)."""
    try:
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    except Exception as exc:  # noqa: BLE001
        return None, f"liger-kernel not importable ({describe_exception(exc)})"
    return LigerSiLUMulFunction.apply, None


def _graphed(fn: Callable) -> Callable:
    """``fn`` compiled with :func:`compile_cuda_graphs` on its first call."""
    compiled = []

    def call(*args):
        if not compiled:
            compiled.append(compile_cuda_graphs(fn))
        return compiled[0](*args)

    return call


def _standard_rows(ours: Callable, eager: Callable, cuda_graphs: bool) -> dict:
    """Ours, the eager formula and torch.compile of it; on a GPU both under CUDA graphs."""
    table = {"tritonforge": lambda: ours, "hf-eager": lambda: eager, "torch.compile": lambda: compile_fresh(eager)}
    if cuda_graphs:
        table[COMPILED_CUDA_GRAPHS] = lambda: _graphed(ours)
        table[TORCH_COMPILE_CUDA_GRAPHS] = lambda: _graphed(eager)
    return table


def swiglu_implementations(impls: Optional[Sequence[str]] = None, *, cuda_graphs: bool = False) -> dict:
    """name -> a maker of ``fn(gate, up)``: ours, HF eager, torch.compile of it, Liger; on a GPU
    also ours and the eager formula under ``torch.compile(mode="reduce-overhead")``."""
    from tritonforge.ops.swiglu import swiglu

    liger, liger_missing = load_liger_swiglu()
    table = _standard_rows(swiglu, eager_swiglu, cuda_graphs)
    # Last: Liger's backward overwrites gate and up with the gradients, so every row after it at
    # the same shape would run on (and be checked against) inputs that are no longer the suite's.
    table["liger"] = (lambda: liger) if liger else liger_missing
    return {name: maker for name, maker in table.items() if impls is None or name in impls}


def swiglu_front_implementations(impls: Optional[Sequence[str]] = None, *, cuda_graphs: bool = False) -> dict:
    """name -> a maker of ``fn(x, w_gate, w_up)``: our fused kernel, eager (cuBLAS two-GEMM +
    elementwise), torch.compile of it; on a GPU both under CUDA graphs."""
    from tritonforge.ops.swiglu_front import swiglu_mlp_front

    table = _standard_rows(swiglu_mlp_front, eager_swiglu_front, cuda_graphs)
    return {name: maker for name, maker in table.items() if impls is None or name in impls}


# ----------------------------------------------------------------------------------------------
# Softmax
# ----------------------------------------------------------------------------------------------


def eager_softmax(x: torch.Tensor) -> torch.Tensor:
    """``torch.softmax(x, -1)``: PyTorch's own fused softmax kernel."""
    return torch.softmax(x, dim=-1)


def load_liger_softmax() -> tuple[Optional[Callable], Optional[str]]:
    """Liger-Kernel's ``LigerSoftmaxFunction`` as ``fn(x)``, or None and why not."""
    try:
        from liger_kernel.ops.softmax import LigerSoftmaxFunction
    except Exception as exc:  # noqa: BLE001
        return None, f"liger-kernel not importable ({describe_exception(exc)})"
    return LigerSoftmaxFunction.apply, None


def softmax_implementations(impls: Optional[Sequence[str]] = None, *, cuda_graphs: bool = False) -> dict:
    """name -> a maker of ``fn(x)``: ours, ``torch.softmax``, torch.compile of it, Liger; on a GPU
    ours and torch.compile under CUDA graphs."""
    from tritonforge.ops.softmax import softmax

    liger, liger_missing = load_liger_softmax()
    table = _standard_rows(softmax, eager_softmax, cuda_graphs)
    table["liger"] = (lambda: liger) if liger else liger_missing
    return {name: maker for name, maker in table.items() if impls is None or name in impls}


# ----------------------------------------------------------------------------------------------
# Attention
# ----------------------------------------------------------------------------------------------

NAIVE_ATTENTION_MEMORY_FRACTION = 0.8
"""The naive path runs only where its scores and probabilities fit in this fraction of free memory."""


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Hugging Face's eager attention (``eager_attention_forward``): scores ``q kᵀ·c`` in the input
    dtype, softmax in float32 rounded back, ``P v``; K and V repeated for grouped heads. Every score
    is in memory: it refuses, with the number, a size whose scores would not fit."""
    B, Hq, Nq, D = q.shape
    Nk = k.shape[2]
    need = B * Hq * Nq * Nk * (2 * q.element_size() + 4)  # scores, float32 softmax, probabilities
    if q.is_cuda:
        free = torch.cuda.mem_get_info(q.device)[0]
        if need > NAIVE_ATTENTION_MEMORY_FRACTION * free:
            raise MemoryError(f"naive attention needs {need / 1e9:.1f} GB for its scores here; {free / 1e9:.1f} GB free")
    group = Hq // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) * D**-0.5
    if causal:
        keep = torch.ones(Nq, Nk, dtype=torch.bool, device=q.device).tril(Nk - Nq)
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype) @ v


def _sdpa_with(backend_name: str) -> Callable:
    """``F.scaled_dot_product_attention`` restricted to one backend (``sdpa_kernel``); GQA through
    ``enable_gqa``; causal as a bottom-right mask unless ``Nq == Nk`` (where ``is_causal`` is the same)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    backend = getattr(SDPBackend, backend_name)

    def fn(q, k, v, causal):
        gqa = q.shape[1] != k.shape[1]
        with sdpa_kernel(backend):
            if causal and q.shape[2] != k.shape[2]:
                mask = causal_lower_right(q.shape[2], k.shape[2])
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    return fn


TRITON_TUTORIAL_ENV = "TRITONFORGE_TRITON_TUTORIAL"
"""The environment variable naming the file of Triton's tutorial ``06-fused-attention.py``."""

TRITON_TUTORIAL_DEFAULT = Path(__file__).resolve().parents[2] / ".peers" / "06-fused-attention.py"
"""Where :func:`load_triton_tutorial_attention` looks when the variable is unset (ignored by git;
``scripts/fetch_peers.sh`` downloads it there at the Triton tag the GPU machine runs)."""


def load_triton_tutorial_attention(path: Optional[str] = None) -> tuple[Optional[Callable], Optional[str]]:
    """Triton's fused-attention tutorial (``python/tutorials/06-fused-attention.py``, FlashAttention-2
    with TMA on Hopper, autotuned, with its own backward) as ``fn(q, k, v, causal)``, or None and why not.

    The module is imported from ``path`` (default: :data:`TRITON_TUTORIAL_ENV`, else
    :data:`TRITON_TUTORIAL_DEFAULT`) and must define ``attention(q, k, v, causal, sm_scale)``. It is
    a peer as written upstream, so ``fn`` raises :class:`~tritonforge.bench.timing.NotServed` for what
    that kernel was not written for: a dtype other than float16 (it casts P to ``tl.float16``),
    grouped heads, ``Nq != Nk`` (decode), or N not a multiple of 128 (its backward's block)."""
    path = Path(path or os.environ.get(TRITON_TUTORIAL_ENV) or TRITON_TUTORIAL_DEFAULT)
    if not path.is_file():
        return None, f"Triton's tutorial kernel not given (no {path}; scripts/fetch_peers.sh downloads it)"
    try:
        spec = importlib.util.spec_from_file_location("triton_tutorial_fused_attention", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        attention = module.attention
    except Exception as exc:  # noqa: BLE001 - any failure to import the file is the row's reason
        return None, f"Triton's tutorial kernel did not import from {path} ({describe_exception(exc, limit=200)})"

    def tutorial_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
        if q.dtype != torch.float16:
            raise NotServed(f"the tutorial kernel computes in float16 only (P is cast to tl.float16), not {q.dtype}")
        if q.shape[1] != k.shape[1]:
            raise NotServed(f"the tutorial kernel has no grouped heads ({q.shape[1]} query heads over {k.shape[1]})")
        if q.shape[2] != k.shape[2] or q.shape[2] % 128:
            raise NotServed(f"the tutorial kernel needs Nq == Nk, a multiple of 128 (Nq={q.shape[2]}, Nk={k.shape[2]})")
        return attention(q, k, v, causal, q.shape[-1] ** -0.5)

    return tutorial_attention, None


def attention_implementations(impls: Optional[Sequence[str]] = None, *, cuda_graphs: bool = False) -> dict:
    """name -> a maker of ``fn(q, k, v, causal)``: ours, HF's eager attention (every score in
    memory), SDPA pinned to its FlashAttention-2 and its cuDNN backend, and Triton's tutorial
    kernel where the machine was given it (float16 only). No CUDA-graph rows: the suites'
    device_us column is the time without host."""
    from tritonforge.ops.attention import flash_attention

    table = {
        "tritonforge": lambda: lambda q, k, v, causal: flash_attention(q, k, v, causal=causal),
        "naive (eager)": lambda: eager_attention,
        "sdpa-flash": lambda: _sdpa_with("FLASH_ATTENTION"),
        "sdpa-cudnn": lambda: _sdpa_with("CUDNN_ATTENTION"),
    }
    if impls is None or "triton-tutorial" in impls:  # imports the file only when the row is asked for
        tutorial, tutorial_missing = load_triton_tutorial_attention()
        table["triton-tutorial"] = (lambda: tutorial) if tutorial else tutorial_missing
    return {name: maker for name, maker in table.items() if impls is None or name in impls}
