r"""Fused softmax over the last dimension, forward and backward, for rows of any length.

Math. For a row :math:`x \in \mathbb{R}^N`, with :math:`m = \max_j x_j`:

.. math:: y_i = \frac{e^{x_i - m}}{s}, \qquad s = \sum_j e^{x_j - m}.

Subtracting the max changes nothing mathematically and keeps every exponent <= 0, so nothing
overflows. The textbook way needs three passes over the row: the max, the sum, the output.

Online normalizer (Milakov & Gimelshein, 2018). A running state ``(m, s)`` over a prefix of the
row is updated block by block: when a block raises the max from ``m`` to ``m'``, the sum so far is
rescaled by ``exp(m - m')``, so that after every block ``s = sum_{j seen} exp(x_j - m)`` exactly.
Two states of disjoint parts merge the same way:

.. math:: m = \max(m_1, m_2), \qquad s = s_1 e^{m_1 - m} + s_2 e^{m_2 - m}.

An empty part has the state ``(-inf, 0)`` and contributes nothing (the kernels test for it:
``exp(-inf - (-inf))`` would be NaN).

The backward (``dx = y * (dy - <dy, y>)``, from the output alone) is
:mod:`tritonforge.ops.softmax_backward`.

Three strategies, chosen per call by :func:`plan`, run everywhere (the interpreter included):

- **one pass** (``N <= ROW_FIT_LIMIT``): one program per row holds the row in registers: read
  once, write once (the least traffic, 2 tensors' worth);
- **online** (longer rows): one program per row, pass 1 the online state block by block
  (lane-wise: each lane keeps its own running max and sum, combined once at the end, so the loop
  has no cross-lane reduction), pass 2 the output: 2 reads + 1 write instead of the safe
  softmax's 3 + 1;
- **split** (long rows, too few to fill the GPU, e.g. one vocabulary-sized row per token at
  decode): each row is cut into ``SPLITS`` chunks, one program each; a first kernel writes every
  chunk's state, a second merges the row's states and writes its chunk of ``y``.

On a GPU the plan takes two more where they measured faster, from the module beside this one
(:mod:`tritonforge.ops.gpu.softmax`): **cooperative rows**, a long row held by several programs
at once that meet at a barrier and merge their states (read once, like one pass), and several
short 16-bit rows a program. The backward follows the same shapes with the dot product
``<dy, y>`` in place of the state.

Dtypes: arithmetic in float32 for 16-bit and float32 inputs, float64 for float64 (gradcheck
through the kernels); the output in x's dtype. Fully masked rows (all ``-inf``) give NaN, as
``torch.softmax`` does. For 16-bit outputs the exponential is ``tl.exp2`` of ``(x - m) log2 e``
(``ex2.approx.ftz.f32`` on a GPU): a bf16 probability below 2^-126 (a bf16 subnormal, about
1e-38) may come out 0 where ``torch.softmax`` keeps it. Layouts: any leading shape; rows may be strided; a last dimension without
unit stride is copied. Outputs are new contiguous tensors.

How it meets PyTorch: the template of :mod:`tritonforge.ops.rmsnorm` (custom ops with fake
implementations, ``register_autograd`` saving the output, a vmap rule, routed launches, the
reference for ``create_graph`` and for forward-mode AD / ``torch.func`` transforms other than vmap).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from tritonforge import checks, hardware, launches, runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_dtype, as_rows, cast_for_store, exp_shifted, round_bf16_by_hand
from tritonforge.ops.gpu import softmax as gpu
from tritonforge.reference import softmax_ref

SOFTMAX_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


@triton.jit
def _online_state(
    x_row,  # pointer to the row's first element
    start,  # the part of the row to reduce: [start, end)
    end,
    BLOCK_N: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
):
    """``(m, s)`` of ``x_row[start:end]`` in one pass; ``(-inf, 0)`` for an empty or all -inf part."""
    cols = tl.arange(0, BLOCK_N)
    m_lane = tl.full([BLOCK_N], -float("inf"), ACC_DTYPE)  # each lane's running max
    s_lane = tl.zeros([BLOCK_N], dtype=ACC_DTYPE)  # each lane's sum of exp(x - m_lane)
    for off in range(start, end, BLOCK_N):
        idx = off + cols
        x = tl.load(x_row + idx, mask=idx < end, other=-float("inf"), eviction_policy="evict_last").to(ACC_DTYPE)
        m_new = tl.maximum(m_lane, x)
        # A lane that has seen only -inf keeps (m, s) = (-inf, 0): subtract 0 there, not -inf.
        m_ref = tl.where(m_new == -float("inf"), 0.0, m_new)
        s_lane = s_lane * exp_shifted(m_lane, m_ref, x_row.dtype.element_ty) + exp_shifted(x, m_ref, x_row.dtype.element_ty)
        m_lane = m_new
    m = tl.max(m_lane, axis=0)
    s = tl.sum(tl.where(m_lane == -float("inf"), 0.0, s_lane * tl.exp(m_lane - m)), axis=0)
    return m, s


@triton.jit
def _write_softmax(x_row, y_row, start, end, m, s, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr, ROUND_BF16: tl.constexpr):
    """``y[start:end] = exp(x - m) / s``: the second pass (x again, from L2 where it still is)."""
    cols = tl.arange(0, BLOCK_N)
    inv_s = 1.0 / s  # all -inf row: s = 0, exp(x - m) = NaN: NaN, as torch.softmax
    for off in range(start, end, BLOCK_N):
        idx = off + cols
        mask = idx < end
        x = tl.load(x_row + idx, mask=mask, other=0.0, eviction_policy="evict_first").to(ACC_DTYPE)
        tl.store(y_row + idx, cast_for_store(exp_shifted(x, m, y_row.dtype.element_ty) * inv_s, y_row.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _softmax_row(x_row, y_row, N, BLOCK_N: tl.constexpr, ACC_DTYPE: tl.constexpr, ROUND_BF16: tl.constexpr, FTZ_EXP: tl.constexpr = True):
    """One row held in registers (``BLOCK_N >= N``): read once, written once. ``FTZ_EXP``: the
    exponential as :func:`~tritonforge.kernel_utils.exp_shifted` takes it for the row's dtype, else ``tl.exp``."""
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(ACC_DTYPE)
    if FTZ_EXP:
        e = exp_shifted(x, tl.max(x, axis=0), y_row.dtype.element_ty)  # masked lanes: exp(-inf) = 0
    else:
        e = tl.exp(x - tl.max(x, axis=0))
    y = e * (1.0 / tl.sum(e, axis=0))
    tl.store(y_row + cols, cast_for_store(y, y_row.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _softmax_fwd_kernel(
    x_ptr,  # *x [M, N]: row stride x_row_stride, unit column stride
    y_ptr,  # *y [M, N], contiguous, x's dtype
    x_row_stride,
    N,
    BLOCK_N: tl.constexpr,  # one pass: >= N (the whole row); online: the loop's block
    ROW_FITS: tl.constexpr,  # one pass, the row in registers
    ACC_DTYPE: tl.constexpr,
    ROUND_BF16: tl.constexpr,
):
    """One program per row: one pass when the row fits, else the online state then the output."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * N
    if ROW_FITS:
        _softmax_row(x_row, y_row, N, BLOCK_N, ACC_DTYPE, ROUND_BF16)
    else:
        m, s = _online_state(x_row, 0, N, BLOCK_N, ACC_DTYPE)
        _write_softmax(x_row, y_row, 0, N, m, s, BLOCK_N, ACC_DTYPE, ROUND_BF16)






@triton.jit
def _softmax_split_state_kernel(
    x_ptr,  # *x [M, N]
    m_ptr,  # *[M, SPLITS] ACC_DTYPE: each chunk's max
    s_ptr,  # *[M, SPLITS] ACC_DTYPE: each chunk's sum of exp(x - max)
    x_row_stride,
    N,
    chunk,  # elements per chunk (a multiple of BLOCK_N); trailing chunks may be empty
    SPLITS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
):
    """Program (row, split): the online state of one chunk of one row."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    start = split * chunk
    m, s = _online_state(x_ptr + row * x_row_stride, start, tl.minimum(start + chunk, N), BLOCK_N, ACC_DTYPE)
    tl.store(m_ptr + row * SPLITS + split, m)
    tl.store(s_ptr + row * SPLITS + split, s)


@triton.jit
def _softmax_split_write_kernel(
    x_ptr,
    y_ptr,  # *y [M, N], contiguous
    m_ptr,
    s_ptr,
    x_row_stride,
    N,
    chunk,
    SPLITS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    ROUND_BF16: tl.constexpr,
):
    """Program (row, split): merge the row's SPLITS states, then write this chunk of y."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    parts = tl.arange(0, SPLITS)
    ms = tl.load(m_ptr + row * SPLITS + parts)
    ss = tl.load(s_ptr + row * SPLITS + parts)
    m = tl.max(ms, axis=0)
    s = tl.sum(tl.where(ms == -float("inf"), 0.0, ss * tl.exp(ms - m)), axis=0)  # the merge rule
    start = split * chunk
    _write_softmax(x_ptr + row * x_row_stride, y_ptr + row * N, start, tl.minimum(start + chunk, N), m, s, BLOCK_N, ACC_DTYPE, ROUND_BF16)


# ----------------------------------------------------------------------------------------------
# Heuristics: which strategy, block sizes, splits
# ----------------------------------------------------------------------------------------------

ROW_FIT_LIMIT = 32768
"""Longest row kept whole in registers (elements; float64 rows: half): read once, written once."""

LOOP_BLOCK_N = 4096
"""The block of the online and split loops (elements; float64: half)."""

MAX_SPLITS = 64
"""Most chunks a row is cut into (a power of two: the merge loads all states of a row at once)."""

INTERPRETER_SMS = 4
"""What the heuristics take as the SM count in the interpreter (it has none): few splits."""

class Plan(NamedTuple):
    """How one call runs: ``strategy`` is "one-pass", "cooperative", "online" or "split"; ``rows``
    > 1: one pass, that many whole rows a program (the forward only, on a GPU)."""

    strategy: str
    block_n: int
    num_warps: int
    splits: int = 1
    chunk: int = 0
    rows: int = 1


def _warps(block_n: int) -> int:
    return 4 if block_n <= 1024 else (8 if block_n <= 8192 else 16)


def plan(M: int, N: int, dtype: torch.dtype, device: torch.device, backward: bool = False) -> Plan:
    """The strategy for ``M`` rows of ``N``; ``backward``: the backward's (one pass is always a
    program per row there).

    Rows that fit (:data:`ROW_FIT_LIMIT`) take one pass. On a GPU, rows whose chunks give every SM
    a program are cooperative (:func:`tritonforge.ops.gpu.softmax.cooperative`). Otherwise longer
    rows take the online loop when there are at least two rows per SM; fewer rows are split into
    chunks so that about four programs per SM work (a power of two of chunks, each a whole number
    of loop blocks)."""
    sms = hardware.gpu_sm_count(device)
    return _plan_cached(M, N, dtype, sms or INTERPRETER_SMS, ROW_FIT_LIMIT, LOOP_BLOCK_N, MAX_SPLITS, sms is not None, backward)


@functools.lru_cache(maxsize=4096)
def _plan_cached(M: int, N: int, dtype: torch.dtype, sms: int, fit: int, loop_block: int, max_splits: int,
                 on_gpu: bool = False, backward: bool = False) -> Plan:  # fmt: skip
    if dtype == torch.float64:
        fit, loop_block = fit // 2, loop_block // 2
    width = triton.next_power_of_2(max(N, 1))
    coop = gpu.cooperative(M, N, dtype, sms, fit, backward) if on_gpu else None
    if coop:
        splits, chunk, warps = coop
        return Plan("cooperative", chunk, warps, splits, chunk)
    if width <= fit:
        rows = gpu.rows_per_program(width, dtype) if on_gpu and not backward else 1
        return Plan("one-pass", width, max(2, rows * width // 1024) if rows > 1 else _warps(width), rows=rows)
    if M >= 2 * sms:
        return Plan("online", loop_block, _warps(loop_block))
    blocks = triton.cdiv(N, loop_block)
    splits = min(max_splits, blocks, triton.next_power_of_2(triton.cdiv(4 * sms, M)))
    splits = 1 << (splits.bit_length() - 1)  # a power of two, <= the bound
    if splits < 2:
        return Plan("online", loop_block, _warps(loop_block))
    chunk = triton.cdiv(blocks, splits) * loop_block
    return Plan("split", loop_block, _warps(loop_block), splits, chunk)


# ----------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------

_empty = torch.empty


def softmax_fwd(x: torch.Tensor) -> torch.Tensor:
    """Launch the forward: ``y`` a new contiguous tensor of x's shape and dtype."""
    x_rows = as_rows(x, x.shape[-1])
    return forward_launcher(x_rows, x.shape)(x_rows)


def forward_launcher(x_rows: torch.Tensor, shape: torch.Size):
    """The launches of the forward for rows of this shape, stride, dtype and device (``x_rows
    [M, N]`` with a unit stride along the row), every decision (plan, grid, flags) taken now: a
    function of the rows that allocates ``y`` of ``shape`` and launches the kernels. Eager inference
    keeps it for the next call of the same signature (:func:`softmax`)."""
    M, N = x_rows.shape
    stride, dtype, device = x_rows.stride(0), x_rows.dtype, x_rows.device
    p = plan(M, N, dtype, device)
    flags = dict(ACC_DTYPE=acc_dtype(dtype))
    rounding = round_bf16_by_hand(dtype)

    def new_y():
        return _empty(*shape, dtype=dtype, device=device)

    if p.strategy == "cooperative" or p.rows > 1:  # the GPU's strategies
        return gpu.forward_launcher(p, M, N, stride, shape, dtype, device)
    if p.strategy != "split":
        kernel = launches.bound_launch(_softmax_fwd_kernel, (M,), BLOCK_N=p.block_n, ROW_FITS=p.strategy == "one-pass",
                                       ROUND_BF16=rounding, num_warps=p.num_warps, **flags)  # fmt: skip

        def launch(x):
            y = new_y()
            kernel(x, y, stride, N)
            return y

        return launch
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    state = launches.bound_launch(_softmax_split_state_kernel, (M, p.splits), SPLITS=p.splits, BLOCK_N=p.block_n,
                                 num_warps=p.num_warps, **flags)  # fmt: skip
    write = launches.bound_launch(_softmax_split_write_kernel, (M, p.splits), SPLITS=p.splits, BLOCK_N=p.block_n,
                                 ROUND_BF16=rounding, num_warps=p.num_warps, **flags)  # fmt: skip

    def launch(x):
        y = new_y()
        m, s = _empty(M, p.splits, dtype=acc, device=device), _empty(M, p.splits, dtype=acc, device=device)
        state(x, m, s, stride, N, p.chunk)
        write(x, y, m, s, stride, N, p.chunk)
        return y

    return launch


def _remembered_launch(x: torch.Tensor):
    """:func:`forward_launcher` for x's signature, or ``None`` where x's rows are not x itself (a
    last dimension without unit stride is copied first)."""
    x_rows = as_rows(x, x.shape[-1])
    if x_rows.data_ptr() != x.data_ptr() or x_rows.stride(-1) != 1:
        return None
    return forward_launcher(x_rows, x.shape)


# ----------------------------------------------------------------------------------------------
# Routing
# ----------------------------------------------------------------------------------------------

OP = "softmax"


def _forward_routed(x: torch.Tensor) -> torch.Tensor:
    if x.numel() == 0:
        runtime.record_empty(OP)
        return softmax_ref(x).contiguous()
    return runtime.dispatch(OP, device=x.device, dtype=x.dtype, kernel=lambda: softmax_fwd(x), reference=lambda: softmax_ref(x).contiguous())


# ----------------------------------------------------------------------------------------------
# The PyTorch operators
# ----------------------------------------------------------------------------------------------


@torch.library.custom_op("tritonforge::softmax", mutates_args=())
def softmax_op(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim, routed; differentiable (:mod:`tritonforge.ops.softmax_backward`)."""
    return _forward_routed(x)


@softmax_op.register_fake
def _(x):
    return x.new_empty(x.shape)




def _vmap_rule(info, in_dims, x):
    """``vmap``: row-wise over the last dimension, so the batch dimension moves to the front."""
    (x_dim,) = in_dims
    return softmax_op(x.movedim(x_dim, 0)), 0


softmax_op.register_vmap(_vmap_rule)


# ----------------------------------------------------------------------------------------------
# The public function
# ----------------------------------------------------------------------------------------------


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax over dimension ``dim`` (the last by default): ``exp(x - max) / sum(exp(x - max))``.

    Arithmetic in float32 (float64 for float64 inputs), the result in x's dtype; a row of all
    ``-inf`` gives NaN, as ``torch.softmax``; a bf16 probability below 2^-126 (about 1e-38) may
    come out 0 rather than a bf16 subnormal. Differentiable (the backward needs only the output),
    twice too (through the PyTorch reference), and usable under ``torch.compile(fullgraph=True)``,
    CUDA graphs and ``torch.func.vmap`` through the kernels. Forward-mode AD and
    ``torch.func.grad``/``jvp`` take the PyTorch reference (a routed fallback).

    Args:
        x: float16, bfloat16, float32 or float64 tensor ``[..., N]``, any leading shape; rows may
            be strided; a last dimension without unit stride is copied.
        dim: the dimension to normalize, as ``torch.softmax``'s ``dim`` (negative counts from the
            end). Another dimension than the last is moved last, its rows copied, and the result
            moved back (contiguous in x's layout).

    Returns:
        A new contiguous tensor of x's shape and dtype. ``tfg.last_path("softmax")`` tells which
        path computed it, ``tfg.last_path("softmax_backward")`` the latest backward's;
        :func:`plan` which strategy (one pass, cooperative, online, split) a shape takes.
    """
    key = launches.signature(OP, (x,)) if dim == -1 else None
    y = launches.run_remembered(key, x)  # this signature, checked and served by the kernels before
    if y is not launches.MISS:
        return y
    checks.check_tensor("x", x, dtypes=SOFTMAX_DTYPES, ndim_min=1)
    dim = checks.check_dim("dim", dim, x.dim())
    if dim != x.dim() - 1:
        return ENTRY.serve((x.movedim(dim, -1),), ()).movedim(-1, dim).contiguous()
    return ENTRY.serve((x,), (), key)


ENTRY = launches.OpEntry(OP, op=softmax_op, eager=_forward_routed, reference=lambda x: softmax_ref(x).contiguous(),
                        launch=_remembered_launch)  # fmt: skip
