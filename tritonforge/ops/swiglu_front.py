r"""The fused MLP front (chapter 5): ``y = silu(x @ W_gate) * (x @ W_up)``, both projections and
the SwiGLU activation (:mod:`tritonforge.ops.swiglu`) in one matmul kernel.

Math. With ``x [M, D]`` (M tokens) and ``W_gate, W_up [D, F]``:

.. math:: y = \operatorname{silu}(x W_{\text{gate}}) \odot (x W_{\text{up}}).

The kernel. ``y = silu(x @ W_gate) * (x @ W_up)`` as one tiled matmul: each program owns
a ``[BLOCK_M, BLOCK_N]`` tile of ``y`` and accumulates two tiles, ``x @ W_gate`` and ``x @ W_up``,
over the same ``x`` tiles; the epilogue rounds both to the input dtype (as two eager matmuls
would), applies SiLU and the multiply, and stores only ``y``. The ``[M, 2F]`` intermediate never
reaches memory. Two regimes: decode (``M <= 64``) reads both weights once and is bound by that
stream (``2·D·F`` elements), so its tiles are short in ``M`` and long in ``K``, with deep
pipelining; prefill (large ``M``) is bound by the tensor cores, so its tiles are large and
square-ish. Configurations are pruned by the device's shared memory
(:func:`tritonforge.hardware.shared_memory_per_block`), so a T4's 64 KB gets configurations that fit.

Backward: not a kernel of its own. The projections are recomputed (cuBLAS), the SwiGLU backward
kernel gives ``dg`` and ``du``, and the matmuls' gradients follow: ``dx = dg W_gateᵀ + du W_upᵀ``,
``dW_gate = xᵀ dg``, ``dW_up = xᵀ du``.
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from tritonforge import checks, hardware, launches, runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import as_rows, cast_for_store, round_bf16_by_hand
from tritonforge.ops.swiglu import _gradients, _launch_tuned, _silu, chosen_configs
from tritonforge.reference import swiglu_mlp_front_ref

FRONT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


# ----------------------------------------------------------------------------------------------
# The kernel
# ----------------------------------------------------------------------------------------------


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
# Heuristics: the two regimes' configurations
# ----------------------------------------------------------------------------------------------

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
# Launch
# ----------------------------------------------------------------------------------------------

_empty = torch.empty


def swiglu_mlp_front_fwd(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """Launch the fused MLP front: ``y [..., F]`` a new contiguous tensor in x's dtype."""
    D, F = w_gate.shape
    x_rows = as_rows(x, D)  # [M, D]
    M = x_rows.shape[0]
    y = _empty(*x.shape[:-1], F, dtype=x.dtype, device=x.device)
    args = (x_rows, w_gate, w_up, y, M, F, D, x_rows.stride(0), *w_gate.stride(), *w_up.stride(), min(M, 4096).bit_length())
    flags = dict(ACC_DTYPE=tl.float32, ROUND_BF16=round_bf16_by_hand(x.dtype))
    shared = hardware.shared_memory_per_block(x.device)
    if hardware.interpreting():  # one small configuration
        config = front_configs(None, 0, x.element_size())[0]
        grid = (triton.cdiv(M, config.kwargs["BLOCK_M"]) * triton.cdiv(F, config.kwargs["BLOCK_N"]),)
        _swiglu_mlp_front_kernel[grid](*args, **config.kwargs, **flags, num_warps=config.num_warps, num_stages=config.num_stages)
    else:
        block_m = front_block_m(M)
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(F, meta["BLOCK_N"]),)  # noqa: E731
        key = ("swiglu_mlp_front", shared, block_m, F, D, args[-1], x.dtype)
        _launch_tuned(front_tuner(shared, block_m, x.element_size()), _swiglu_mlp_front_kernel, key, grid, args, flags)
    return y



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
    if hardware.interpreting():
        config = front_configs(None, 0, x.element_size())[0]
    else:
        config = chosen_configs().get(("swiglu_mlp_front", hardware.shared_memory_per_block(x.device), front_block_m(M), F, D, bits, x.dtype))
        if config is None:
            return None
    grid = (triton.cdiv(M, config.kwargs["BLOCK_M"]) * triton.cdiv(F, config.kwargs["BLOCK_N"]),)
    kernel = launches.bound_launch(_swiglu_mlp_front_kernel, grid, **config.kwargs, ACC_DTYPE=tl.float32,
                                  ROUND_BF16=round_bf16_by_hand(x.dtype), num_warps=config.num_warps,
                                  num_stages=config.num_stages)  # fmt: skip
    scalars = (M, F, D, x_rows.stride(0), *w_gate.stride(), *w_up.stride(), bits)
    shape, dtype, device = (*x.shape[:-1], F), x.dtype, x.device

    def launch(x, w_gate, w_up):
        y = _empty(*shape, dtype=dtype, device=device)
        kernel(x, w_gate, w_up, y, *scalars)
        return y

    return launch


# ----------------------------------------------------------------------------------------------
# Routing
# ----------------------------------------------------------------------------------------------

FRONT_OP = "swiglu_mlp_front"

FUSED_FRONT_MAX_ROWS = 512
"""Most token rows for which a model calls the fused front on a GPU; more rows take cuBLAS's two
GEMMs and :func:`tritonforge.ops.swiglu.swiglu`. At decode sizes the fused kernel, streaming the
weights once, measured faster than two GEMMs and the elementwise op on the H200; at prefill sizes
cuBLAS's GEMMs were faster or level. The cut-off in between is not measured (benchmarks/NOTES.md,
"2026-12-04 (session 17), issue 31", its attention and SwiGLU numbers)."""


def front_is_fused(dtype: torch.dtype, rows: Optional[int] = None) -> bool:
    """Whether :func:`swiglu_mlp_front` runs its fused kernel for ``dtype`` (rather than routing to
    the reference): 16-bit inputs on a GPU (tensor cores), any supported dtype on the interpreter.
    A model with float32 weights on a GPU calls cuBLAS and :func:`~tritonforge.ops.swiglu.swiglu` instead (``models``), and
    so does a model with more than :data:`FUSED_FRONT_MAX_ROWS` token ``rows`` (when given) on a GPU."""
    if hardware.interpreting():
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
# The PyTorch operator
# ----------------------------------------------------------------------------------------------


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
# The public function
# ----------------------------------------------------------------------------------------------


def _check_front(x: object, w_gate: object, w_up: object) -> None:
    checks.check_tensor("x", x, dtypes=FRONT_DTYPES, ndim_min=1)
    checks.check_tensor("w_gate", w_gate, dtypes=FRONT_DTYPES)
    checks.check_tensor("w_up", w_up, dtypes=FRONT_DTYPES)
    checks.check_same_device(x=x, w_gate=w_gate, w_up=w_up)
    checks.check_same_dtype(x=x, w_gate=w_gate, w_up=w_up)
    if w_gate.dim() != 2:
        raise ValueError(f"w_gate must be 2-D [D, F], got shape {tuple(w_gate.shape)}")
    checks.check_same_shape(w_gate=w_gate, w_up=w_up)
    if w_gate.shape[0] != x.shape[-1]:
        raise ValueError(
            f"w_gate has {w_gate.shape[0]} rows but x.shape[-1] is {x.shape[-1]}; weights are [D, F] with D = x.shape[-1] "
            "(an nn.Linear's weight is [F, D]: pass linear.weight.T)"
        )


def swiglu_mlp_front(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """``silu(x @ w_gate) * (x @ w_up)`` in one matmul kernel: the front of Llama's MLP, with no
    ``[M, 2F]`` intermediate in memory.

    Hugging Face's rounding (each projection rounded to x's dtype, as two eager matmuls give;
    then :func:`~tritonforge.ops.swiglu.swiglu`'s). Differentiable (the backward recomputes the projections with cuBLAS
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
    key = launches.signature(FRONT_OP, (x, w_gate, w_up))
    y = launches.run_remembered(key, x, w_gate, w_up)  # this signature, checked and served by the kernel before
    if y is not launches.MISS:
        return y
    _check_front(x, w_gate, w_up)
    return FRONT_ENTRY.serve((x, w_gate, w_up), (), key)


FRONT_ENTRY = launches.OpEntry(FRONT_OP, op=swiglu_mlp_front_op, eager=_front_routed, reference=swiglu_mlp_front_ref,
                              launch=_front_launcher, vmap=False, empty=False)  # fmt: skip
