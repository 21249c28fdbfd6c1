r"""Fused SwiGLU (chapter 5): the elementwise op with its backward, autotuned. The MLP front that
computes both projections and the activation in one matmul kernel is :mod:`tritonforge.ops.swiglu_front`.

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

How it meets PyTorch: the template of :mod:`tritonforge.ops.rmsnorm` (custom ops with fake
implementations, ``register_autograd``, a vmap rule, routed launches, the reference for
``create_graph`` and for forward-mode AD / ``torch.func`` transforms other than vmap).
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from tritonforge import checks, hardware, launches, runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_dtype, as_rows, cast_for_store, round_bf16_by_hand
from tritonforge.reference import swiglu_bwd_ref, swiglu_ref

SWIGLU_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


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


# ----------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------

_empty = torch.empty


_CHOSEN: dict = {}
"""Tuning key -> the configuration the autotuner chose for it. After the first call of a key, calls
launch the plain kernel with that configuration rather than through ``Autotuner.run``, whose host
path measured slower per call (benchmarks/NOTES.md, "2026-12-04 (session 17), issue 31", its attention
and SwiGLU numbers); under CUDA graphs (decode), host time is gone. Shared with the MLP front
(:mod:`tritonforge.ops.swiglu_front`), whose choices are kept here too."""


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
    if hardware.interpreting():
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


def _swiglu_launcher(gate: torch.Tensor, up: torch.Tensor):
    """The launch :func:`swiglu_fwd` makes for this signature, its configuration (the one the tuner
    chose) and grid fixed: a function of ``(gate, up)``; ``None`` where a row view is not the
    tensor itself or no configuration was chosen yet."""
    F = gate.shape[-1]
    gate_rows, up_rows = as_rows(gate, F), as_rows(up, F)
    if gate_rows.data_ptr() != gate.data_ptr() or up_rows.data_ptr() != up.data_ptr():
        return None
    M = gate_rows.shape[0]
    flags = dict(ACC_DTYPE=acc_dtype(gate.dtype), ROUND_BF16=round_bf16_by_hand(gate.dtype))
    if hardware.interpreting():
        meta, options = interpreter_elementwise_config(F), dict(num_warps=4)
    else:
        config = _CHOSEN.get(("swiglu_fwd", F, rows_class(M), gate.dtype, *flags.values()))
        if config is None:
            return None
        meta, options = config.kwargs, dict(num_warps=config.num_warps, num_stages=config.num_stages)
    grid = (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(F, meta["BLOCK_F"]),)
    kernel = launches.bound_launch(_swiglu_fwd_kernel, grid, **meta, **flags, **options)
    scalars = (gate_rows.stride(0), up_rows.stride(0), M, F, rows_class(M))
    shape, dtype, device = gate.shape, gate.dtype, gate.device

    def launch(gate, up):
        y = _empty(*shape, dtype=dtype, device=device)
        kernel(gate, up, y, *scalars)
        return y

    return launch


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


# ----------------------------------------------------------------------------------------------
# Routing
# ----------------------------------------------------------------------------------------------

OP = "swiglu"
BACKWARD_OP = "swiglu_backward"


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


# ----------------------------------------------------------------------------------------------
# The public function
# ----------------------------------------------------------------------------------------------


def _check_swiglu(gate: object, up: object) -> None:
    checks.check_tensor("gate", gate, dtypes=SWIGLU_DTYPES)
    checks.check_tensor("up", up, dtypes=SWIGLU_DTYPES)
    checks.check_same_device(gate=gate, up=up)
    checks.check_same_dtype(gate=gate, up=up)
    checks.check_same_shape(gate=gate, up=up)


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
    key = launches.signature(OP, (gate, up))
    y = launches.run_remembered(key, gate, up)  # this signature, checked and served by the kernel before
    if y is not launches.MISS:
        return y
    _check_swiglu(gate, up)
    if gate.dim() == 0:  # a scalar: the kernels work on rows [..., F]; one row of one element
        return swiglu(gate.reshape(1), up.reshape(1)).reshape(())
    return ENTRY.serve((gate, up), (), key)


ENTRY = launches.OpEntry(OP, op=swiglu_op, eager=_forward_routed, reference=lambda gate, up: swiglu_ref(gate, up).contiguous(),
                        launch=_swiglu_launcher)  # fmt: skip
