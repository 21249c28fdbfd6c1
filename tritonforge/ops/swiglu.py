r"""Fused SwiGLU: the elementwise op with its backward (autotuned), and the MLP front that computes
both projections and the activation in one matmul kernel.

Math. Llama's MLP is ``down(silu(x @ W_gate) * (x @ W_up))``. With :math:`g` the gate projection,
:math:`u` the up projection and :math:`s = \sigma(g) = 1 / (1 + e^{-g})`:

.. math::

    \operatorname{silu}(g) = g\, s, \qquad y = \operatorname{silu}(g) \odot u.

Backward. Given :math:`dy`, and :math:`\tfrac{d}{dg}(g s) = s + g s (1 - s) = s (1 + g (1 - s))`:

.. math::

    du = dy \odot \operatorname{silu}(g), \qquad dg = dy \odot u \odot s\,\big(1 + g (1 - s)\big).

Both gradients come from one kernel that reads ``dy``, ``g`` and ``u`` and recomputes ``s``
(one ``exp`` per element: far cheaper than storing ``s`` in the forward and reading it back).

Memory traffic. Eager PyTorch runs ``silu`` and the multiply as two kernels: it reads ``g``,
writes ``silu(g)``, reads it back with ``u`` and writes ``y``: 5 tensors' worth of bytes. The
fused forward reads ``g`` and ``u`` and writes ``y``: 3. The backward in eager autograd is
``dy*u``, ``silu_backward`` and ``dy*silu(g)`` (recomputed or saved): 9 or more tensors' worth;
fused it is 5 (read ``dy, g, u``, write ``dg, du``).

Dtypes and rounding (Hugging Face ``LlamaMLP``): arithmetic in float32 for 16-bit and float32
inputs (float64 for float64, so that gradcheck runs through the kernels); ``silu(g)`` is rounded
to the input dtype before the multiply by ``u``, and the product rounded again, as the two eager
ops round. ``tritonforge.reference.swiglu_ref`` implements the same and is the fallback.

Layouts. ``gate`` and ``up`` have the same shape; any leading shape is flattened to ``M`` rows of
``F``. Each may have its own row stride and must have unit stride along a row (else it is copied):
so the two halves of one packed ``[M, 2F]`` projection (Hugging Face's fused ``gate_up_proj``,
``h[..., :F]`` and ``h[..., F:]``) are read in place. Outputs are new contiguous tensors.

Autotuning. The elementwise kernels are memory-bound; how much of the copy bandwidth they reach
depends on the tile (rows × columns per program) and the warps that share it, and the best choice
depends on the row length and the device. On a GPU each kernel is wrapped in
:func:`triton.autotune` over :data:`ELEMENTWISE_CONFIGS`: the first call for a new key (the row
length ``F``, a size class of ``M``, the dtypes) times every configuration that survives pruning
(tiles wider than the row are pruned) and keeps the fastest for that key; later calls pay nothing.
Triton's interpreter cannot autotune (it cannot time anything), so it runs one configuration.

The fused MLP front. ``y = silu(x @ W_gate) * (x @ W_up)`` as one tiled matmul: each program owns
a ``[BLOCK_M, BLOCK_N]`` tile of ``y`` and accumulates two tiles, ``x @ W_gate`` and ``x @ W_up``,
over the same ``x`` tiles; the epilogue rounds both to the input dtype (as two eager matmuls
would), applies SiLU and the multiply, and stores only ``y``. The ``[M, 2F]`` intermediate never
reaches memory. Two regimes: decode (``M <= 64``) reads both weights once and is bound by that
stream (``2·D·F`` elements), so its tiles are short in ``M`` and long in ``K``, with deep
pipelining; prefill (large ``M``) is bound by the tensor cores, so its tiles are large and
square-ish. Configurations are pruned by the device's shared memory
(:func:`tritonforge.runtime.shared_memory_per_block`), so a T4's 64 KB gets configurations that fit.

How it meets PyTorch: the template of :mod:`tritonforge.ops.rmsnorm` (custom ops with fake
implementations, ``register_autograd``, a vmap rule, routed launches, the reference for
``create_graph`` and for forward-mode AD / ``torch.func`` transforms other than vmap).
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from tritonforge import runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_dtype, as_rows, cast_for_store, round_bf16_by_hand
from tritonforge.reference import swiglu_bwd_ref, swiglu_mlp_front_ref, swiglu_ref

SWIGLU_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
FRONT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _silu(g):
    """``g * sigmoid(g)`` in g's dtype; ``exp(-g)`` overflows to inf for g < -88 and gives -0."""
    return g / (1.0 + tl.exp(-g))


@triton.jit
def _swiglu_fwd_kernel(
    gate_ptr,  # *gate [M, F]: row stride gate_row_stride, unit column stride
    up_ptr,  # *up [M, F]: row stride up_row_stride, unit column stride
    y_ptr,  # *y [M, F], contiguous
    gate_row_stride,  # elements between rows of gate (2F for the first half of a packed [M, 2F])
    up_row_stride,  # elements between rows of up
    M,  # rows
    F,  # columns (row length)
    rows_class,  # autotuning key only (a size class of M): not read
    BLOCK_M: tl.constexpr,  # rows per program
    BLOCK_F: tl.constexpr,  # columns per program (power of two)
    ACC_DTYPE: tl.constexpr,  # tl.float32, or tl.float64 for float64 inputs
    ROUND_BF16: tl.constexpr,  # interpreter + bf16: round the downcasts by hand
):
    """One program computes a ``[BLOCK_M, BLOCK_F]`` tile: ``y = (silu(g) rounded) * u``."""
    pid = tl.program_id(0)
    col_blocks = tl.cdiv(F, BLOCK_F)
    rows = (pid // col_blocks).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)  # int64: row * stride
    cols = (pid % col_blocks) * BLOCK_F + tl.arange(0, BLOCK_F)
    mask = (rows[:, None] < M) & (cols[None, :] < F)
    g = tl.load(gate_ptr + rows[:, None] * gate_row_stride + cols[None, :], mask=mask, other=0.0).to(ACC_DTYPE)
    u = tl.load(up_ptr + rows[:, None] * up_row_stride + cols[None, :], mask=mask, other=0.0).to(ACC_DTYPE)
    act = cast_for_store(_silu(g), gate_ptr.dtype.element_ty, ROUND_BF16).to(ACC_DTYPE)  # HF: silu rounded
    y = cast_for_store(act * u, y_ptr.dtype.element_ty, ROUND_BF16)
    tl.store(y_ptr + rows[:, None] * F + cols[None, :], y, mask=mask)


@triton.jit
def _swiglu_bwd_kernel(
    dy_ptr,  # *dy [M, F]: row stride dy_row_stride, unit column stride
    gate_ptr,  # *gate [M, F]: row stride gate_row_stride
    up_ptr,  # *up [M, F]: row stride up_row_stride
    dgate_ptr,  # *dgate [M, F], contiguous (unused without COMPUTE_DGATE)
    dup_ptr,  # *dup [M, F], contiguous (unused without COMPUTE_DUP)
    dy_row_stride,
    gate_row_stride,
    up_row_stride,
    M,
    F,
    rows_class,  # autotuning key only: not read
    BLOCK_M: tl.constexpr,
    BLOCK_F: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    ROUND_BF16: tl.constexpr,
    COMPUTE_DGATE: tl.constexpr,  # gate needs a gradient
    COMPUTE_DUP: tl.constexpr,  # up needs a gradient
):
    """``dgate = dy*u*s*(1 + g*(1-s))`` and ``dup = dy*silu(g)`` per element, ``s = sigmoid(g)`` recomputed."""
    pid = tl.program_id(0)
    col_blocks = tl.cdiv(F, BLOCK_F)
    rows = (pid // col_blocks).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % col_blocks) * BLOCK_F + tl.arange(0, BLOCK_F)
    mask = (rows[:, None] < M) & (cols[None, :] < F)
    dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(ACC_DTYPE)
    g = tl.load(gate_ptr + rows[:, None] * gate_row_stride + cols[None, :], mask=mask, other=0.0).to(ACC_DTYPE)
    s = 1.0 / (1.0 + tl.exp(-g))
    out = rows[:, None] * F + cols[None, :]
    if COMPUTE_DGATE:
        u = tl.load(up_ptr + rows[:, None] * up_row_stride + cols[None, :], mask=mask, other=0.0).to(ACC_DTYPE)
        dgate = dy * u * s * (1.0 + g * (1.0 - s))
        tl.store(dgate_ptr + out, cast_for_store(dgate, dgate_ptr.dtype.element_ty, ROUND_BF16), mask=mask)
    if COMPUTE_DUP:
        act = cast_for_store(g * s, gate_ptr.dtype.element_ty, ROUND_BF16).to(ACC_DTYPE)  # the forward's rounded silu
        tl.store(dup_ptr + out, cast_for_store(dy * act, dup_ptr.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _swiglu_mlp_front_kernel(
    x_ptr,  # *x [M, K]: row stride x_row_stride, unit column stride
    w_gate_ptr,  # *w_gate [K, N]: strides (w_gate_k_stride, w_gate_n_stride)
    w_up_ptr,  # *w_up [K, N]: strides (w_up_k_stride, w_up_n_stride)
    y_ptr,  # *y [M, N], contiguous
    M,  # tokens
    N,  # intermediate size F
    K,  # hidden size D
    x_row_stride,
    w_gate_k_stride,
    w_gate_n_stride,
    w_up_k_stride,
    w_up_n_stride,
    m_class,  # autotuning key only (a size class of M): not read
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,  # tiles of M walked together, so that a weight tile is reused from L2
    ACC_DTYPE: tl.constexpr,  # tl.float32 (the accumulator of tl.dot)
    ROUND_BF16: tl.constexpr,  # interpreter + bf16: fp32 dots, downcasts rounded by hand
):
    """One program: ``y[tile] = silu((x @ w_gate)[tile]) * (x @ w_up)[tile]``, two accumulators, one store."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    # Grouped order: GROUP_M consecutive programs share a column of weight tiles (L2 reuse).
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    group_size = tl.minimum(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % (GROUP_M * tiles_n)) % group_size
    tile_n = (pid % (GROUP_M * tiles_n)) // group_size
    rows = tile_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    x_tile = x_ptr + rows[:, None] * x_row_stride + ks[None, :]
    wg_tile = w_gate_ptr + ks[:, None] * w_gate_k_stride + cols[None, :] * w_gate_n_stride
    wu_tile = w_up_ptr + ks[:, None] * w_up_k_stride + cols[None, :] * w_up_n_stride
    acc_gate = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC_DTYPE)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC_DTYPE)
    for k in range(0, K, BLOCK_K):
        k_left = K - k
        a = tl.load(x_tile, mask=(rows[:, None] < M) & (ks[None, :] < k_left), other=0.0)
        w_mask = (ks[:, None] < k_left) & (cols[None, :] < N)
        wg = tl.load(wg_tile, mask=w_mask, other=0.0)
        wu = tl.load(wu_tile, mask=w_mask, other=0.0)
        if ROUND_BF16:  # the interpreter's bf16 tl.dot is wrong: multiply the (exact) fp32 upcasts
            a, wg, wu = a.to(tl.float32), wg.to(tl.float32), wu.to(tl.float32)
        acc_gate = tl.dot(a, wg, acc_gate)
        acc_up = tl.dot(a, wu, acc_up)
        x_tile += BLOCK_K
        wg_tile += BLOCK_K * w_gate_k_stride
        wu_tile += BLOCK_K * w_up_k_stride
    # Epilogue, Hugging Face's rounding: both projections rounded to x's dtype, silu rounded, product rounded.
    dtype = x_ptr.dtype.element_ty
    gate = cast_for_store(acc_gate, dtype, ROUND_BF16).to(tl.float32)
    up = cast_for_store(acc_up, dtype, ROUND_BF16).to(tl.float32)
    act = cast_for_store(_silu(gate), dtype, ROUND_BF16).to(tl.float32)
    y = cast_for_store(act * up, y_ptr.dtype.element_ty, ROUND_BF16)
    tl.store(y_ptr + rows[:, None] * N + cols[None, :], y, mask=(rows[:, None] < M) & (cols[None, :] < N))


# ----------------------------------------------------------------------------------------------
# Heuristics: configurations, pruning and size classes, in one place
# ----------------------------------------------------------------------------------------------

ELEMENTWISE_CONFIGS = [
    triton.Config({"BLOCK_M": block_m, "BLOCK_F": block_f}, num_warps=warps)
    for block_m, block_f, warps in (
        (1, 1024, 4), (1, 2048, 4), (1, 4096, 8), (2, 2048, 8), (4, 1024, 4), (4, 1024, 8),
        (8, 512, 4), (16, 256, 4), (32, 128, 4), (64, 64, 4),
    )
]  # fmt: skip
"""What the elementwise autotuner tries on a GPU: tiles of 1K–8K elements, rows × columns, with 4
or 8 warps. Wide tiles suit long rows; tall ones short rows (where a wide tile would be masked)."""


def rows_class(M: int) -> int:
    """A size class of M for the autotuning keys: tuned once per power-of-four range of M rather
    than once per M (serving sees every M from 1 to thousands); above 4096 rows, one class."""
    return min(M, 4096).bit_length() // 2


def prune_elementwise(configs, named_args, **kwargs):
    """Drop tiles wider than the row (they would be mostly masked); keep at least the narrowest."""
    F = named_args["F"]
    width = max(64, triton.next_power_of_2(F))
    kept = [c for c in configs if c.kwargs["BLOCK_F"] <= width]
    return kept or [min(configs, key=lambda c: c.kwargs["BLOCK_F"])]


def interpreter_elementwise_config(F: int) -> dict:
    """The one configuration the interpreter runs: tiles of up to 1024 elements (fewer programs
    means less Python per element there), a whole row of up to 1024 columns at a time."""
    block_f = min(triton.next_power_of_2(max(F, 1)), 1024)
    return {"BLOCK_M": max(1, 1024 // block_f), "BLOCK_F": block_f}


@functools.cache
def elementwise_tuner(kernel):
    """``kernel`` under :func:`triton.autotune` over :data:`ELEMENTWISE_CONFIGS`, keyed on the row
    length and :func:`rows_class` (Triton adds the dtype of every tensor argument to the key).
    Made on the first GPU call, not at import: an autotuner asks for the GPU driver's benchmarker
    when it is built, which Triton 3.3 cannot give without a GPU."""
    return triton.autotune(ELEMENTWISE_CONFIGS, key=["F", "rows_class"], prune_configs_by={"early_config_prune": prune_elementwise})(kernel)


DECODE_ROWS = 64
"""The MLP front's decode regime: ``M <= 64`` tokens (a decode batch). There the two weights are
read once and nothing else is large, so time is ``2·D·F`` elements at the copy bandwidth."""


def front_block_m(M: int) -> int:
    """The decode regime's tile height: the next power of two of M, at least 16 (``tl.dot``'s
    minimum), so that every weight tile is read by one program (one tile of M) and streamed once;
    0 for the prefill regime (M > :data:`DECODE_ROWS`), whose configurations choose it."""
    return max(16, triton.next_power_of_2(M)) if M <= DECODE_ROWS else 0


@functools.cache
def front_configs(shared_memory: Optional[int], block_m: int, element_size: int) -> tuple:
    """The MLP front's configurations for a device with ``shared_memory`` bytes per block (None:
    the interpreter, one small configuration), for decode tiles of ``block_m`` rows (0: prefill).

    A software-pipelined loop keeps ``num_stages`` copies of the x tile and both weight tiles in
    shared memory: ``stages · (BLOCK_M·BLOCK_K + 2·BLOCK_K·BLOCK_N) · element_size`` bytes;
    configurations that do not fit are dropped here, so that a T4 (64 KB) is never offered an
    H200's (227 KB)."""
    if shared_memory is None:
        return (triton.Config({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}, num_warps=4, num_stages=1),)
    if block_m:  # decode: one tile of M, long in K, deep pipelines: a stream of weight tiles
        shapes = [(block_m, bn, bk, 4, stages) for bn in (64, 128) for bk in (64, 128) for stages in (2, 3, 4, 5)]
    else:  # prefill: tensor-core tiles; two [BLOCK_M, BLOCK_N] fp32 accumulators live in registers
        shapes = [(128, 128, 64, 8, s) for s in (3, 4)] + [(128, 64, 64, 4, s) for s in (3, 4, 5)]
        shapes += [(64, 128, 64, 4, s) for s in (3, 4, 5)] + [(128, 128, 32, 8, s) for s in (4, 5)] + [(64, 64, 64, 4, 4)]
        shapes += [(128, 64, 32, 4, 3), (64, 64, 32, 4, 3), (64, 128, 32, 4, 2)]  # small shared memory (a T4's 64 KB)
    configs = []
    for block_m_, block_n, block_k, warps, stages in shapes:
        need = stages * (block_m_ * block_k + 2 * block_k * block_n) * element_size
        if need <= shared_memory:
            configs.append(triton.Config({"BLOCK_M": block_m_, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": 8},
                                         num_warps=warps, num_stages=stages))  # fmt: skip
    return tuple(configs)


@functools.cache
def front_tuner(shared_memory: int, block_m: int, element_size: int):
    """The autotuned MLP front for one device limit and regime (key: N, K and a size class of M)."""
    return triton.autotune(list(front_configs(shared_memory, block_m, element_size)), key=["N", "K", "m_class"])(_swiglu_mlp_front_kernel)


# ----------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------

_empty = torch.empty


_CHOSEN: dict = {}
"""Tuning key -> the configuration the autotuner chose for it. After the first call of a key, calls
launch the plain kernel with that configuration rather than through ``Autotuner.run``. Host time of
one ``tfg.swiglu`` call (bf16, 1×14336) on the H200's host, three runs of 3000 calls each
(``.gpu``-style probe, 2026-11-30): 37.0–58.5 µs this way, 48.2–58.8 µs through the autotuner,
32.2–52.2 µs for ``tfg.rms_norm`` (1×8192) and 13.2–16.8 µs for eager ``silu(g) * u``: about
10 µs saved, and the op's host path (checks, routing, Triton's launch) still costs 2–3× eager's;
under CUDA graphs (decode), host time is gone."""


def chosen_configs() -> dict:
    """What the autotuners chose so far, by key (kernel, sizes, dtype, flags): what the chapter prints."""
    return dict(_CHOSEN)


def _launch_tuned(tuner, kernel, key: tuple, grid, args: tuple, flags: dict) -> None:
    """Launch ``kernel`` with the configuration chosen for ``key``; on a new key, let ``tuner`` (the
    same kernel under :func:`triton.autotune`) time its configurations first and remember its choice.
    ``grid(meta)`` gives the launch grid from a configuration's meta-parameters."""
    config = _CHOSEN.get(key)
    if config is None:
        tuner[grid](*args, **flags)
        _CHOSEN[key] = tuner.best_config
        return
    kernel[grid(config.kwargs)](*args, **config.kwargs, **flags, num_warps=config.num_warps, num_stages=config.num_stages)


def _elementwise_launch(name: str, kernel, M: int, F: int, args: tuple, **flags) -> None:
    """Launch an elementwise kernel: autotuned on a GPU, one configuration in the interpreter."""
    if runtime.interpreting():
        config = interpreter_elementwise_config(F)
        grid = (triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(F, config["BLOCK_F"]),)
        kernel[grid](*args, M, F, rows_class(M), **config, **flags, num_warps=4)
        return
    key = (name, F, rows_class(M), args[0].dtype, *flags.values())
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(F, meta["BLOCK_F"]),)  # noqa: E731
    _launch_tuned(elementwise_tuner(kernel), kernel, key, grid, (*args, M, F, rows_class(M)), flags)


def swiglu_fwd(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Launch the forward kernel: ``y`` a new contiguous tensor of gate's shape and dtype."""
    F = gate.shape[-1]
    gate_rows, up_rows = as_rows(gate, F), as_rows(up, F)  # [M, F] each
    M = gate_rows.shape[0]
    y = _empty(*gate.shape, dtype=gate.dtype, device=gate.device)
    flags = dict(ACC_DTYPE=acc_dtype(gate.dtype), ROUND_BF16=round_bf16_by_hand(gate.dtype))
    _elementwise_launch("swiglu_fwd", _swiglu_fwd_kernel, M, F,
                        (gate_rows, up_rows, y, gate_rows.stride(0), up_rows.stride(0)), **flags)  # fmt: skip
    return y


def swiglu_bwd(
    dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, *, compute_dgate: bool = True, compute_dup: bool = True
) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """Launch the backward kernel: ``(dgate, dup)``, new contiguous tensors (None if not asked)."""
    F = gate.shape[-1]
    dy_rows, gate_rows, up_rows = as_rows(dy, F), as_rows(gate, F), as_rows(up, F)
    M = gate_rows.shape[0]
    dgate = _empty(*gate.shape, dtype=gate.dtype, device=gate.device) if compute_dgate else None
    dup = _empty(*up.shape, dtype=up.dtype, device=up.device) if compute_dup else None
    flags = dict(ACC_DTYPE=acc_dtype(gate.dtype), ROUND_BF16=round_bf16_by_hand(gate.dtype),
                 COMPUTE_DGATE=compute_dgate, COMPUTE_DUP=compute_dup)  # fmt: skip
    args = (dy_rows, gate_rows, up_rows, dgate if compute_dgate else dy_rows, dup if compute_dup else dy_rows,
            dy_rows.stride(0), gate_rows.stride(0), up_rows.stride(0))  # fmt: skip
    _elementwise_launch("swiglu_bwd", _swiglu_bwd_kernel, M, F, args, **flags)
    return dgate, dup


def swiglu_mlp_front_fwd(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """Launch the fused MLP front: ``y [..., F]`` a new contiguous tensor in x's dtype."""
    D, F = w_gate.shape
    x_rows = as_rows(x, D)  # [M, D]
    M = x_rows.shape[0]
    y = _empty(*x.shape[:-1], F, dtype=x.dtype, device=x.device)
    args = (x_rows, w_gate, w_up, y, M, F, D, x_rows.stride(0), *w_gate.stride(), *w_up.stride(), min(M, 4096).bit_length())
    flags = dict(ACC_DTYPE=tl.float32, ROUND_BF16=round_bf16_by_hand(x.dtype))
    shared = runtime.shared_memory_per_block(x.device)
    if runtime.interpreting():  # one small configuration
        config = front_configs(None, 0, x.element_size())[0]
        grid = (triton.cdiv(M, config.kwargs["BLOCK_M"]) * triton.cdiv(F, config.kwargs["BLOCK_N"]),)
        _swiglu_mlp_front_kernel[grid](*args, **config.kwargs, **flags, num_warps=config.num_warps, num_stages=config.num_stages)
    else:
        block_m = front_block_m(M)
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(F, meta["BLOCK_N"]),)  # noqa: E731
        key = ("swiglu_mlp_front", shared, block_m, F, D, args[-1], x.dtype)
        _launch_tuned(front_tuner(shared, block_m, x.element_size()), _swiglu_mlp_front_kernel, key, grid, args, flags)
    return y


# ----------------------------------------------------------------------------------------------
# Routing
# ----------------------------------------------------------------------------------------------

OP = "swiglu"
BACKWARD_OP = "swiglu_backward"
FRONT_OP = "swiglu_mlp_front"


def _forward_routed(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    if gate.numel() == 0:
        runtime.record_empty(OP)
        return swiglu_ref(gate, up).contiguous()
    return runtime.dispatch(OP, device=gate.device, dtype=gate.dtype, kernel=lambda: swiglu_fwd(gate, up),
                            reference=lambda: swiglu_ref(gate, up).contiguous())  # fmt: skip


def _backward_routed(dy, gate, up, need_dgate: bool, need_dup: bool):
    if gate.numel() == 0:
        runtime.record_empty(BACKWARD_OP)
        return (torch.zeros_like(gate) if need_dgate else None), (torch.zeros_like(up) if need_dup else None)

    def reference():
        dgate, dup = swiglu_bwd_ref(dy, gate, up)
        return (dgate if need_dgate else None), (dup if need_dup else None)

    return runtime.dispatch(
        BACKWARD_OP, device=gate.device, dtype=gate.dtype,
        kernel=lambda: swiglu_bwd(dy, gate, up, compute_dgate=need_dgate, compute_dup=need_dup),
        reference=reference,
    )  # fmt: skip


FUSED_FRONT_MAX_ROWS = 512
"""Most token rows for which a model calls the fused front on a GPU; more rows take cuBLAS's two
GEMMs and :func:`swiglu`. H200, bf16, D = 4096, F = 14336: at 1-64 rows (decode) the fused kernel
streams the weights once, 54-57 us where two GEMMs and the elementwise op take 64-67 (the
swiglu-front record); at 2048 rows (prefill) cuBLAS + a fused SiLU-mul took 732 us and the fused
kernel 770 (benchmarks/results/e2e/, the op breakdown); at 4096 the two were level (1544 us). The
cut-off between 64 and 2048 rows is not measured."""


def front_is_fused(dtype: torch.dtype, rows: Optional[int] = None) -> bool:
    """Whether :func:`swiglu_mlp_front` runs its fused kernel for ``dtype`` (rather than routing to
    the reference): 16-bit inputs on a GPU (tensor cores), any supported dtype on the interpreter.
    A model with float32 weights on a GPU calls cuBLAS and :func:`swiglu` instead (``models``), and
    so does a model with more than :data:`FUSED_FRONT_MAX_ROWS` token ``rows`` (when given) on a GPU."""
    if runtime.interpreting():
        return True
    return dtype in (torch.float16, torch.bfloat16) and (rows is None or rows <= FUSED_FRONT_MAX_ROWS)


def _front_routed(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    if x.numel() == 0 or w_gate.numel() == 0:
        runtime.record_empty(FRONT_OP)
        return swiglu_mlp_front_ref(x, w_gate, w_up).contiguous()
    unsupported = None
    if x.dtype == torch.float32 and not front_is_fused(x.dtype):
        unsupported = "float32 MLP front: the GPU kernel is written for 16-bit tensor-core inputs; float32 takes the reference"
    return runtime.dispatch(FRONT_OP, device=x.device, dtype=x.dtype, unsupported=unsupported,
                            kernel=lambda: swiglu_mlp_front_fwd(x, w_gate, w_up),
                            reference=lambda: swiglu_mlp_front_ref(x, w_gate, w_up).contiguous())  # fmt: skip


# ----------------------------------------------------------------------------------------------
# The PyTorch operators
# ----------------------------------------------------------------------------------------------


@torch.library.custom_op("tritonforge::swiglu", mutates_args=())
def swiglu_op(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up``, routed; differentiable through :func:`backward`."""
    return _forward_routed(gate, up)


@swiglu_op.register_fake
def _(gate, up):
    return gate.new_empty(gate.shape)


@torch.library.custom_op("tritonforge::swiglu_backward", mutates_args=())
def swiglu_backward_op(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, need_dgate: bool, need_dup: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The backward, routed: ``(dgate, dup)``; a gradient not asked for is an empty tensor."""
    dgate, dup = _backward_routed(dy, gate, up, need_dgate, need_dup)
    return (dgate if dgate is not None else gate.new_empty(0)), (dup if dup is not None else up.new_empty(0))


@swiglu_backward_op.register_fake
def _(dy, gate, up, need_dgate, need_dup):
    return gate.new_empty(gate.shape if need_dgate else (0,)), up.new_empty(up.shape if need_dup else (0,))


def setup_context(ctx, inputs, output):
    """The backward needs only the inputs: the sigmoid is recomputed, nothing else is saved."""
    gate, up = inputs
    ctx.save_for_backward(gate, up)


def backward(ctx, dy):
    """``(dgate, dup)``: the backward operator, or the differentiable reference under ``create_graph``."""
    gate, up = ctx.saved_tensors
    need_dgate, need_dup = ctx.needs_input_grad
    if not (need_dgate or need_dup):
        return None, None
    dgate, dup = _gradients(dy, gate, up, need_dgate, need_dup)
    return (dgate if need_dgate else None), (dup if need_dup else None)


def _gradients(dy, gate, up, need_dgate: bool, need_dup: bool):
    """``(dgate, dup)`` inside a backward: the backward operator (routed), or, when autograd builds
    a graph of the gradient (``create_graph=True``), the differentiable reference backward (a
    routed fallback, so second derivatives are exact, never zeros)."""
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():
        return runtime.dispatch_reference(
            BACKWARD_OP, "autograd", "create_graph=True: the backward kernel is not differentiable; "
            "the PyTorch reference backward is, so double backward is exact",
            lambda: swiglu_bwd_ref(dy, gate, up),
        )  # fmt: skip
    return swiglu_backward_op(dy, gate, up, need_dgate, need_dup)


swiglu_op.register_autograd(backward, setup_context=setup_context)


def _vmap_rule(info, in_dims, gate, up):
    """``vmap``: elementwise, so both batch dimensions move to the front (an unbatched input is
    broadcast to the batch) and the op runs once on the batched tensors."""
    gate_dim, up_dim = in_dims
    size = info.batch_size
    gate = gate.movedim(gate_dim, 0) if gate_dim is not None else gate.expand(size, *gate.shape)
    up = up.movedim(up_dim, 0) if up_dim is not None else up.expand(size, *up.shape)
    return swiglu_op(gate, up), 0


swiglu_op.register_vmap(_vmap_rule)


@torch.library.custom_op("tritonforge::swiglu_mlp_front", mutates_args=())
def swiglu_mlp_front_op(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """``silu(x @ w_gate) * (x @ w_up)`` in one kernel, routed; differentiable through :func:`front_backward`."""
    return _front_routed(x, w_gate, w_up)


@swiglu_mlp_front_op.register_fake
def _(x, w_gate, w_up):
    return x.new_empty(*x.shape[:-1], w_gate.shape[1])


def front_setup_context(ctx, inputs, output):
    x, w_gate, w_up = inputs
    ctx.save_for_backward(x, w_gate, w_up)


def front_backward(ctx, dy):
    """Recompute the two projections (cuBLAS), take the SwiGLU backward through the elementwise
    op's backward, then the matmuls' gradients: ``dx = dg @ w_gateᵀ + du @ w_upᵀ``,
    ``dw_gate = xᵀ @ dg``, ``dw_up = xᵀ @ du``. Written with differentiable ops, so double
    backward follows (through the elementwise op's reference under ``create_graph``)."""
    x, w_gate, w_up = ctx.saved_tensors
    gate, up = x @ w_gate, x @ w_up
    need_x, need_wg, need_wu = ctx.needs_input_grad
    dgate, dup = _gradients(dy, gate, up, True, True)
    x2, dg2, du2 = x.reshape(-1, x.shape[-1]), dgate.reshape(-1, gate.shape[-1]), dup.reshape(-1, up.shape[-1])
    dx = (dgate @ w_gate.mT + dup @ w_up.mT) if need_x else None
    dw_gate = (x2.mT @ dg2) if need_wg else None
    dw_up = (x2.mT @ du2) if need_wu else None
    return dx, dw_gate, dw_up


swiglu_mlp_front_op.register_autograd(front_backward, setup_context=front_setup_context)


# ----------------------------------------------------------------------------------------------
# The public functions
# ----------------------------------------------------------------------------------------------


def _check_swiglu(gate: object, up: object) -> None:
    runtime.check_tensor("gate", gate, dtypes=SWIGLU_DTYPES)
    runtime.check_tensor("up", up, dtypes=SWIGLU_DTYPES)
    runtime.check_same_device(gate=gate, up=up)
    runtime.check_same_dtype(gate=gate, up=up)
    runtime.check_same_shape(gate=gate, up=up)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up``, elementwise, in one pass over memory (the activation of Llama's MLP).

    Hugging Face's rounding (``silu(gate)`` rounded to the input dtype, then the product);
    differentiable with respect to both inputs, twice too (the second derivative through the
    PyTorch reference), and usable under ``torch.compile(fullgraph=True)``, CUDA graphs and
    ``torch.func.vmap`` through the kernels. Forward-mode AD and ``torch.func.grad``/``jvp`` take
    the PyTorch reference (a routed fallback).

    Args:
        gate: float16, bfloat16, float32 or float64 tensor ``[..., F]``, any leading shape; rows may
            be strided (e.g. ``h[..., :F]`` of a packed ``[..., 2F]`` projection, read in place).
        up: a tensor of gate's shape, dtype and device (e.g. ``h[..., F:]``).

    Returns:
        A new contiguous tensor of gate's shape and dtype. ``tfg.last_path("swiglu")`` tells which
        path computed it; ``tfg.last_path("swiglu_backward")`` the latest backward's.
    """
    _check_swiglu(gate, up)
    if gate.dim() == 0:  # a scalar: the kernels work on rows [..., F]; one row of one element
        return swiglu(gate.reshape(1), up.reshape(1)).reshape(())
    needs_grad = torch.is_grad_enabled() and (gate.requires_grad or up.requires_grad)
    if torch.compiler.is_compiling():
        return swiglu_op(gate, up)
    if gate.numel() == 0:
        runtime.record_empty(OP)
        return swiglu_ref(gate, up).contiguous()
    mode = runtime.autograd_mode_unsupported(gate, up, vmap_ok=not needs_grad)
    if mode is not None:
        return runtime.dispatch_reference(OP, "autograd", mode, lambda: swiglu_ref(gate, up).contiguous())
    if needs_grad or torch._C._functorch.peek_interpreter_stack() is not None:
        return swiglu_op(gate, up)
    return _forward_routed(gate, up)  # eager inference: skip the dispatcher's ~10 µs


def _check_front(x: object, w_gate: object, w_up: object) -> None:
    runtime.check_tensor("x", x, dtypes=FRONT_DTYPES, ndim_min=1)
    runtime.check_tensor("w_gate", w_gate, dtypes=FRONT_DTYPES)
    runtime.check_tensor("w_up", w_up, dtypes=FRONT_DTYPES)
    runtime.check_same_device(x=x, w_gate=w_gate, w_up=w_up)
    runtime.check_same_dtype(x=x, w_gate=w_gate, w_up=w_up)
    if w_gate.dim() != 2:
        raise ValueError(f"w_gate must be 2-D [D, F], got shape {tuple(w_gate.shape)}")
    runtime.check_same_shape(w_gate=w_gate, w_up=w_up)
    if w_gate.shape[0] != x.shape[-1]:
        raise ValueError(
            f"w_gate has {w_gate.shape[0]} rows but x.shape[-1] is {x.shape[-1]}; weights are [D, F] with D = x.shape[-1] "
            "(an nn.Linear's weight is [F, D]: pass linear.weight.T)"
        )


def swiglu_mlp_front(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """``silu(x @ w_gate) * (x @ w_up)`` in one matmul kernel: the front of Llama's MLP, with no
    ``[M, 2F]`` intermediate in memory.

    Hugging Face's rounding (each projection rounded to x's dtype, as two eager matmuls give;
    then :func:`swiglu`'s). Differentiable (the backward recomputes the projections with cuBLAS
    and takes the SwiGLU backward kernel); usable under ``torch.compile(fullgraph=True)`` and CUDA
    graphs. On a GPU float16 and bfloat16 run the kernel; float32 takes the reference there (a
    routed fallback); the interpreter runs all three.

    Args:
        x: ``[..., D]`` tensor, any leading shape (M tokens after flattening).
        w_gate: ``[D, F]`` tensor of x's dtype and device; any strides (``linear.weight.T`` of an
            ``nn.Linear(D, F)`` is read in place).
        w_up: ``[D, F]``, like w_gate.

    Returns:
        A new contiguous ``[..., F]`` tensor in x's dtype; ``tfg.last_path("swiglu_mlp_front")``
        tells which path computed it.
    """
    key = _front_signature(x, w_gate, w_up) if runtime.eager_fast_path() else None
    y = runtime.run_remembered(key, x, w_gate, w_up)  # this signature, checked and served by the kernel before
    if y is not runtime.MISS:
        return y
    _check_front(x, w_gate, w_up)
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (x, w_gate, w_up))
    if torch.compiler.is_compiling():
        return swiglu_mlp_front_op(x, w_gate, w_up)
    mode = runtime.autograd_mode_unsupported(x, w_gate, w_up, vmap_ok=False)
    if mode is not None:
        return runtime.dispatch_reference(FRONT_OP, "autograd", mode, lambda: swiglu_mlp_front_ref(x, w_gate, w_up))
    if needs_grad:
        return swiglu_mlp_front_op(x, w_gate, w_up)
    y = _front_routed(x, w_gate, w_up)
    runtime.remember_served(FRONT_OP, key, lambda: _front_launcher(x, w_gate, w_up))
    return y


def _front_signature(x, w_gate, w_up):
    try:
        return (FRONT_OP, x.shape, x.stride(), x.dtype, x.device, w_gate.shape, w_gate.stride(), w_gate.dtype, w_gate.device,
                w_up.shape, w_up.stride(), w_up.dtype, w_up.device)  # fmt: skip
    except (AttributeError, TypeError):
        return None


def _front_launcher(x, w_gate, w_up):
    """The launch :func:`swiglu_mlp_front_fwd` made for this signature, with its configuration
    (the one the tuner chose) and grid fixed: a function of ``(x, w_gate, w_up)``; ``None`` where x's
    rows need a copy or no configuration was chosen yet."""
    D, F = w_gate.shape
    x_rows = as_rows(x, D)
    if x_rows.data_ptr() != x.data_ptr() or x_rows.stride(-1) != 1:
        return None
    M = x_rows.shape[0]
    bits = min(M, 4096).bit_length()
    if runtime.interpreting():
        config = front_configs(None, 0, x.element_size())[0]
    else:
        config = _CHOSEN.get(("swiglu_mlp_front", runtime.shared_memory_per_block(x.device), front_block_m(M), F, D, bits, x.dtype))
        if config is None:
            return None
    kernel = _swiglu_mlp_front_kernel[(triton.cdiv(M, config.kwargs["BLOCK_M"]) * triton.cdiv(F, config.kwargs["BLOCK_N"]),)]
    scalars = (M, F, D, x_rows.stride(0), *w_gate.stride(), *w_up.stride(), bits)
    flags = dict(**config.kwargs, ACC_DTYPE=tl.float32, ROUND_BF16=round_bf16_by_hand(x.dtype), num_warps=config.num_warps,
                 num_stages=config.num_stages)  # fmt: skip
    shape, dtype, device = (*x.shape[:-1], F), x.dtype, x.device

    def launch(x, w_gate, w_up):
        y = _empty(*shape, dtype=dtype, device=device)
        kernel(x, w_gate, w_up, y, *scalars, **flags)
        return y

    return launch
