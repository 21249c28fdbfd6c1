"""Every public op, once or twice per execution strategy, for ``compute-sanitizer`` to watch.

Run by ``scripts/sanitize.sh`` under ``compute-sanitizer --tool memcheck`` and ``--tool racecheck``
on a CUDA GPU (sizes chosen for an H200, 132 SMs: each shape is picked to reach one strategy of an
op's ``plan``), and by ``tests/test_sanitize_workload.py`` at toy sizes on the CPU interpreter.

Every call runs with strict routing (``TRITONFORGE_STRICT=1``): a fallback to the PyTorch reference
raises, so every call really launches the kernels. After each op call the device is synchronized
(an error the sanitizer reports lands between the ``start``/``ok`` lines of the case that caused it)
and the result is compared with the package's float64 reference, loosely (``max |out - ref| /
max |ref|`` under a per-dtype bound, NaN and inf patterns equal), so that a kernel that silently
did nothing is noticed: outputs are allocated NaN-filled (the ops' ``_empty`` is replaced, as the
op tests do). Output, one line per case::

    start <name>
    ok <name> <seconds>s <what ran: dtype, shape, strategy>
    WRONG <name>: <what differs>          (a result off the reference)
    FAIL <name>: <exception>              (anything raised)
    NOTE <name>: <...>                    (a shape reached another strategy than intended: the
                                           ops' heuristics changed; not a failure)

and a summary; the exit status is 1 if any case was WRONG or FAILed.

Usage::

    python scripts/sanitize_workload.py [--only NAME[,NAME...]] [--list] [--tune once|bench]

``--only`` takes case names or their prefix before ``/`` (``--only softmax`` runs every softmax case).
``--tune once`` (the default) replaces Triton's autotuning benchmark by one launch of each
configuration: under a sanitizer every configuration still runs (and is checked) once, instead of
for 125 ms of timing reps each; the configuration kept is then the first that compiled.

Environment: ``TRITONFORGE_SMOKE=1`` (or no CUDA GPU): toy sizes on the CPU interpreter, with the
ops' block limits lowered so that tiny rows still reach the long-row strategies (the cooperative
one needs a GPU: there it takes the interpreter's plan).

Not covered, on purpose: ``axpy``'s backward (plain PyTorch ops). The softmax "online" strategy only runs on a
GPU for rows over 1M elements with 264+ rows (~280M elements); the ``softmax/online`` case forces
that plan on a smaller shape instead (the same compiled kernel: BLOCK_N, ROW_FITS=False, warps).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import math
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Optional

SMOKE = os.environ.get("TRITONFORGE_SMOKE", "") == "1"
os.environ["TRITONFORGE_STRICT"] = "1"  # read by tritonforge.runtime on every call; strict() below too
if SMOKE:
    os.environ["TRITON_INTERPRET"] = "1"  # before tritonforge imports triton: the CPU interpreter even on a GPU machine

import torch  # noqa: E402

import tritonforge as tfg  # noqa: E402  (first: it decides the interpreter flag before triton loads)
from tritonforge import hardware, runtime  # noqa: E402
from tritonforge import reference as ref  # noqa: E402
from tritonforge.ops.gpu import attention as gpu_attention  # noqa: E402
from tritonforge.ops.gpu import softmax as gpu_softmax  # noqa: E402

SMALL = SMOKE or not torch.cuda.is_available() or hardware.interpreting()
DEVICE = torch.device("cpu" if SMALL else "cuda")

rms_mod = importlib.import_module("tritonforge.ops.rmsnorm")
rms_bwd_mod = importlib.import_module("tritonforge.ops.rmsnorm_backward")
gpu_softmax_mod = importlib.import_module("tritonforge.ops.gpu.softmax")
softmax_mod = importlib.import_module("tritonforge.ops.softmax")
swiglu_mod = importlib.import_module("tritonforge.ops.swiglu")
swiglu_front_mod = importlib.import_module("tritonforge.ops.swiglu_front")
attention_mod = importlib.import_module("tritonforge.ops.attention")
attention_prefill_mod = importlib.import_module("tritonforge.ops.attention_prefill")
attention_decode_mod = importlib.import_module("tritonforge.ops.attention_decode")
rope_mod = importlib.import_module("tritonforge.ops.rope")
rope_pair_mod = importlib.import_module("tritonforge.ops.rope_pair")

BF16, FP16, FP32, FP64 = torch.bfloat16, torch.float16, torch.float32, torch.float64

TOLERANCE = {BF16: 4e-2, FP16: 8e-3, FP32: 1e-4, FP64: 1e-9}
"""``max |out - ref| / max |ref|`` allowed, by the inputs' dtype: loose (a few roundings of the
dtype); the point is to notice a kernel that wrote nothing or garbage, not to grade accuracy."""

EPS = 1e-6


def pick(gpu, toy):
    """The GPU value of a size, or its toy value on the interpreter."""
    return toy if SMALL else gpu


# ----------------------------------------------------------------------------------------------
# Checks
# ----------------------------------------------------------------------------------------------


class Wrong(Exception):
    """A result that does not match the reference (printed as WRONG)."""


def sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def randn(*shape: int, dtype: torch.dtype = FP32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device=DEVICE, dtype=FP32) * scale).to(dtype)


def check(what: str, out: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    """Raise :class:`Wrong` unless ``out`` matches ``expected`` (NaN and inf where it has them, the
    rest within ``TOLERANCE[dtype]`` of its largest magnitude)."""
    if tuple(out.shape) != tuple(expected.shape):
        raise Wrong(f"{what}: shape {tuple(out.shape)}, expected {tuple(expected.shape)}")
    if not out.is_floating_point():
        if not torch.equal(out.cpu(), expected.to(out.dtype).cpu()):
            raise Wrong(f"{what}: {int((out.cpu() != expected.to(out.dtype).cpu()).sum())} elements differ")
        return
    o, e = out.detach().double(), expected.detach().double()
    nan_o, nan_e = torch.isnan(o), torch.isnan(e)
    if not torch.equal(nan_o, nan_e):
        raise Wrong(f"{what}: NaN at {int(nan_o.sum())} elements, the reference at {int(nan_e.sum())} (an element never written?)")
    inf_o, inf_e = torch.isinf(o), torch.isinf(e)
    if not torch.equal(inf_o, inf_e) or not torch.equal(o[inf_o], e[inf_e]):
        raise Wrong(f"{what}: inf at {int(inf_o.sum())} elements, the reference at {int(inf_e.sum())}")
    finite = torch.isfinite(e)
    if not bool(finite.any()):
        return
    err = (o[finite] - e[finite]).abs().max().item()
    scale = max(e[finite].abs().max().item(), 1e-30)
    if not err / scale <= TOLERANCE[dtype]:
        raise Wrong(f"{what}: max |out - ref| / max |ref| = {err / scale:.3e} > {TOLERANCE[dtype]:.0e}")


def kernel_ran(*ops: str) -> None:
    """Raise unless the latest call of each op was served by a kernel (strict routing raises on a
    fallback already; this also catches an 'empty' route)."""
    for op in ops:
        path = tfg.last_path(op)
        if path not in ("triton", "interpreter"):
            raise Wrong(f"{op} was served by {path} ({tfg.last_route(op).reason}), not a kernel")


def name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "").replace("bfloat16", "bf16").replace("float", "fp")


def shape_str(*dims: int) -> str:
    return "x".join(str(d) for d in dims)


class Case:
    """One case's record: what ran (for the ``ok`` line) and strategies other than intended."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ran: list[str] = []
        self.notes: list[str] = []

    def did(self, text: str, got: Optional[str] = None, expected: Optional[str] = None) -> None:
        self.ran.append(text if got is None else f"{text}: {got}")
        if expected is not None and got is not None and not SMALL and got != expected:
            self.notes.append(f"{text} ran {got!r}, meant to reach {expected!r}")


CASES: dict[str, Callable[[Case], None]] = {}


def case(case_name: str):
    def register(fn: Callable[[Case], None]) -> Callable[[Case], None]:
        CASES[case_name] = fn
        return fn

    return register


# ----------------------------------------------------------------------------------------------
# RMSNorm
# ----------------------------------------------------------------------------------------------


def rms_strategy(M: int, N: int, dtype: torch.dtype) -> str:
    """What the forward and backward launchers will do for ``M x N`` (read from the op's own
    heuristics; ``?`` if they changed shape)."""
    try:
        splits = rms_mod.fwd_coop_splits(M, N, dtype, DEVICE)
        if splits:
            fwd = f"cooperative x{splits}"
        else:
            fwd = "one-pass" if rms_mod.fwd_config(M, N, dtype)[2] else "two-pass"
        block, _ = rms_mod.row_config(N, dtype, backward=True)
        bwd = "row-fits" if N <= block else "loop"
        if bwd == "row-fits":
            bwd += f"/stages={rms_bwd_mod.bwd_stages(block, dtype, DEVICE)}"
        return f"fwd {fwd}, bwd {bwd}"
    except Exception as exc:  # noqa: BLE001 - a description only
        return f"? ({type(exc).__name__})"


def run_rms_norm(c: Case, M: int, N: int, dtype: torch.dtype, *, expected: Optional[str] = None, weight_dtype=None,
                 grads: str = "xw", row_pad: int = 0) -> None:  # fmt: skip
    """Inference forward, then training forward + backward (gradients of ``grads``: x, w or both)."""
    base = randn(M, N + row_pad, dtype=dtype)
    x = base[:, :N]  # row_pad > 0: strided rows, read in place
    w = (1.0 + 0.1 * torch.randn(N, device=DEVICE)).to(weight_dtype or dtype)
    with torch.no_grad():
        y = tfg.rms_norm(x, w, EPS)
    sync()
    kernel_ran("rms_norm")
    check("rms_norm y (inference)", y, ref.rms_norm_ref(x, w, EPS, upcast=True), dtype)
    xg = x.detach().clone().requires_grad_("x" in grads)
    wg = w.detach().clone().requires_grad_("w" in grads)
    y = tfg.rms_norm(xg, wg, EPS)
    dy = torch.randn_like(y)
    y.backward(dy)
    sync()
    kernel_ran("rms_norm", "rms_norm_backward")
    check("rms_norm y (training)", y, ref.rms_norm_ref(x, w, EPS, upcast=True), dtype)
    dx_ref, dw_ref = ref.rms_norm_bwd_ref(dy, x, w, EPS, upcast=True)
    if "x" in grads:
        check("rms_norm dx", xg.grad, dx_ref, dtype)
    if "w" in grads:
        check("rms_norm dw", wg.grad, dw_ref, dtype)
    label = f"{name(dtype)}{'/w ' + name(weight_dtype) if weight_dtype else ''} {shape_str(M, N)}{' strided' if row_pad else ''} grad {grads}"
    c.did(label, rms_strategy(M, N, dtype), expected)


@case("rms_norm/one-block")
def _(c: Case) -> None:
    # H200: rows of 4096 in one block (fewer than MANY_ROWS rows); backward row-fits, pipelined.
    run_rms_norm(c, pick(64, 5), pick(4096, 48), BF16, expected="fwd one-pass, bwd row-fits/stages=3")


@case("rms_norm/many-rows-4096")
def _(c: Case) -> None:
    # fwd_config's measured exception for >= MANY_ROWS rows of exactly 4096: two passes (in 16-bit
    # with blocks of 2048; before 13bf793 that made the row "longer than a block" and a one-program
    # cooperative row ran behind a barrier of one).
    run_rms_norm(c, pick(1024, 3), pick(4096, 100), BF16, expected="fwd two-pass, bwd row-fits/stages=3")
    run_rms_norm(c, pick(1024, 3), pick(4096, 100), FP32, expected="fwd two-pass, bwd row-fits/stages=3")


@case("rms_norm/wide-one-program")
def _(c: Case) -> None:
    # 16384 < N <= 32768: one program holds the row (GPU only); the backward loops over blocks.
    run_rms_norm(c, pick(8, 4), pick(20000, 200), FP32, expected="fwd one-pass, bwd loop")


@case("rms_norm/cooperative")
def _(c: Case) -> None:
    # N > 32768 with M * cdiv(N, chunk) >= 132 programs (chunks of 16384 in bf16, 8192 in float32:
    # gpu_rmsnorm.chunk): several programs per row meet at a barrier.
    run_rms_norm(c, pick(40, 20), pick(65536, 300), BF16, expected="fwd cooperative x4, bwd loop")
    run_rms_norm(c, pick(24, 3), pick(50000, 130), FP32, expected="fwd cooperative x7, bwd loop")  # a ragged last chunk
    run_rms_norm(c, pick(48, 3), pick(49152, 128), BF16, expected="fwd cooperative x3, bwd loop")  # whole chunks: no masks (EVEN_N)


@case("rms_norm/long-rows-few")
def _(c: Case) -> None:
    # N > 32768 with too few programs for the cooperative path (4 * 8 < 132): the two-pass loop.
    run_rms_norm(c, pick(4, 2), pick(65536, 300), FP32, expected="fwd two-pass, bwd loop")
    run_rms_norm(c, pick(2, 2), pick(40000, 150), BF16, expected="fwd two-pass, bwd loop")


@case("rms_norm/odd-sizes")
def _(c: Case) -> None:
    run_rms_norm(c, 37, pick(1000, 10), FP32, expected="fwd one-pass, bwd row-fits/stages=3")
    run_rms_norm(c, 3, pick(8192, 50), FP16, expected="fwd one-pass, bwd row-fits/stages=3", row_pad=7)
    run_rms_norm(c, pick(130, 9), pick(8192, 60), FP32, expected="fwd one-pass, bwd row-fits/stages=1")


@case("rms_norm/grad-subsets")
def _(c: Case) -> None:
    # fp32 weight beside a bf16 x (y in fp32); dx only (COMPUTE_DW off); dw only (COMPUTE_DX off).
    run_rms_norm(c, pick(128, 6), pick(2048, 20), BF16, weight_dtype=FP32)
    run_rms_norm(c, pick(128, 6), pick(2048, 20), BF16, grads="x")
    run_rms_norm(c, pick(128, 6), pick(20000, 100), BF16, grads="w")


# ----------------------------------------------------------------------------------------------
# Softmax
# ----------------------------------------------------------------------------------------------


def softmax_strategy(M: int, N: int, dtype: torch.dtype) -> str:
    try:
        p = softmax_mod.plan(M, N, dtype, DEVICE)
        return (p.strategy + (f" x{p.splits}" if p.splits > 1 else "")
                + (f" rows x{p.rows}" if p.rows > 1 else ""))  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - a description only
        return f"? ({type(exc).__name__})"


def run_softmax(c: Case, M: int, N: int, dtype: torch.dtype, *, expected: Optional[str] = None, masked: bool = False) -> None:
    """Forward (inference), then forward + backward; ``masked``: row 0's first half is -inf and
    the last row is all -inf (NaN out, as torch.softmax)."""
    x = randn(M, N, scale=3.0)
    if masked:
        x[0, : N // 2] = -math.inf
        if M > 1:
            x[-1] = -math.inf
    x = x.to(dtype)
    strategy = softmax_strategy(M, N, dtype)  # before the calls: a forced plan (online) shows here too
    with torch.no_grad():
        y = tfg.softmax(x)
    sync()
    kernel_ran("softmax")
    y_ref = ref.softmax_ref(x, upcast=True)
    check("softmax y (inference)", y, y_ref, dtype)
    xg = x.detach().clone().requires_grad_(True)
    y = tfg.softmax(xg)
    dy = torch.randn_like(y)
    y.backward(dy)
    sync()
    kernel_ran("softmax", "softmax_backward")
    check("softmax y (training)", y, y_ref, dtype)
    check("softmax dx", xg.grad, ref.softmax_bwd_ref(dy, y_ref, upcast=True), dtype)
    c.did(f"{name(dtype)} {shape_str(M, N)}{' -inf rows' if masked else ''}", strategy, expected)


@contextlib.contextmanager
def softmax_plan_rewritten(rewrite: Callable[[softmax_mod.Plan, int, torch.dtype, bool], softmax_mod.Plan]) -> Iterator[None]:
    """Serve every softmax plan through ``rewrite(plan, N, dtype, backward)`` while the block runs.
    The rewritten plan is one the op could build, so the launch compiles the kernel a real call does."""
    original = softmax_mod.plan

    def rewritten(M, N, dtype, device, backward=False):
        return rewrite(original(M, N, dtype, device, backward), N, dtype, backward)

    softmax_mod.plan = rewritten
    try:
        yield
    finally:
        softmax_mod.plan = original


def softmax_online_plan() -> contextlib.AbstractContextManager:
    """On a GPU, serve the shapes that would run cooperative or split with the online plan instead
    (the op reaches it by itself only for rows over 1M elements with >= 264 rows)."""
    if SMALL:  # the interpreter reaches the online loop by itself (no cooperative path, few SMs)
        return contextlib.nullcontext()

    def online(p, N, dtype, backward):
        if p.strategy in ("cooperative", "split"):
            block = softmax_mod.LOOP_BLOCK_N // (2 if dtype == torch.float64 else 1)
            return softmax_mod.Plan("online", block, softmax_mod._warps(block))
        return p

    return softmax_plan_rewritten(online)


@case("softmax/one-pass")
def _(c: Case) -> None:
    run_softmax(c, pick(64, 5), pick(1000, 37), FP32, expected="one-pass", masked=True)
    run_softmax(c, pick(300, 3), pick(4096, 64), BF16, expected="one-pass")
    run_softmax(c, 4, pick(32768, 64), BF16, expected="one-pass")  # ROW_FIT_LIMIT itself: 16 warps (too few rows to be cooperative)


@case("softmax/rows")
def _(c: Case) -> None:
    # 16-bit rows of 512-2K on a GPU: two rows a program, one [2, BLOCK_N] block; an odd row count
    # leaves the last program a row past M.
    run_softmax(c, pick(301, 5), pick(1000, 37), BF16, expected=f"one-pass rows x{gpu_softmax.ROWS_PER_PROGRAM}", masked=True)
    run_softmax(c, pick(33, 3), pick(2048, 64), FP16, expected=f"one-pass rows x{gpu_softmax.ROWS_PER_PROGRAM}")


@case("softmax/cooperative")
def _(c: Case) -> None:
    # Rows over ROW_FIT_LIMIT, cdiv(N, 8192) programs each, M * that >= 132: the row barrier. bf16 rows of
    # even length: the backward reads them as 32-bit words (_softmax_bwd_coop_packed_kernel); float32 not.
    run_softmax(c, pick(24, 8), pick(100000, 100), BF16, expected="cooperative x13")
    run_softmax(c, pick(300, 9), pick(40000, 90), FP32, expected="cooperative x5", masked=True)  # more programs than fit at once
    run_softmax(c, pick(24, 8), pick(65536, 128), FP32, expected="cooperative x8", masked=True)  # whole chunks: no masks (EVEN_N)
    # Rows of 16K-32K, cooperative in chunks of SHORT_COOP_CHUNK (4096): a ragged last chunk.
    run_softmax(c, pick(300, 9), pick(20001, 90), FP16, expected="cooperative x5", masked=True)


@case("softmax/split")
def _(c: Case) -> None:
    # A few long rows: two kernels (chunk states, then merge + write); trailing chunks empty.
    run_softmax(c, 2, pick(100000, 100), BF16, expected="split x16", masked=True)
    run_softmax(c, 1, pick(300000, 150), FP32, expected="split x64")


@case("softmax/online")
def _(c: Case) -> None:
    with softmax_online_plan():
        run_softmax(c, pick(300, 8), pick(40000, 100), BF16, expected="online", masked=True)
        run_softmax(c, pick(8, 9), pick(100000, 70), FP32, expected="online")


# ----------------------------------------------------------------------------------------------
# SwiGLU
# ----------------------------------------------------------------------------------------------


def run_swiglu(c: Case, shape: tuple[int, ...], dtype: torch.dtype, *, packed: bool = False, grads: str = "gu") -> None:
    """``packed``: gate and up are the two halves of one ``[..., 2F]`` tensor (strided rows)."""
    F = shape[-1]
    if packed:
        h = randn(*shape[:-1], 2 * F, dtype=dtype, scale=2.0)
        g, u = h[..., :F], h[..., F:]
    else:
        g, u = randn(*shape, dtype=dtype, scale=2.0), randn(*shape, dtype=dtype)
    with torch.no_grad():
        y = tfg.swiglu(g, u)
    sync()
    kernel_ran("swiglu")
    check("swiglu y (inference)", y, ref.swiglu_ref(g, u, upcast=True), dtype)
    if packed:
        hg = h.detach().clone().requires_grad_(True)
        gg, ug = hg[..., :F], hg[..., F:]
    else:
        gg = g.detach().clone().requires_grad_("g" in grads)
        ug = u.detach().clone().requires_grad_("u" in grads)
    y = tfg.swiglu(gg, ug)
    dy = torch.randn_like(y)
    y.backward(dy)
    sync()
    kernel_ran("swiglu", "swiglu_backward")
    dg_ref, du_ref = ref.swiglu_bwd_ref(dy, g, u, upcast=True)
    if packed:
        check("swiglu d[gate, up]", hg.grad, torch.cat([dg_ref, du_ref], dim=-1), dtype)
    else:
        if "g" in grads:
            check("swiglu dgate", gg.grad, dg_ref, dtype)
        if "u" in grads:
            check("swiglu dup", ug.grad, du_ref, dtype)
    c.did(f"{name(dtype)} {shape_str(*shape)}{' packed' if packed else ''} grad {grads}")


@case("rope/fwd-bwd")
def _(c: Case) -> None:
    # Llama's queries at prefill as a projection's transpose view (bf16), and decode-sized fp32 rows.
    for B, H, N, D, dtype in (pick((1, 32, 300, 128), (1, 2, 5, 16)) + (BF16,), pick((32, 8, 1, 128), (3, 2, 1, 16)) + (FP32,)):
        x = randn(B, N, H, D, dtype=dtype).transpose(1, 2).requires_grad_()
        cos, sin = randn(N, D, dtype=dtype), randn(N, D, dtype=dtype)
        y = tfg.rope(x, cos, sin)
        dy = randn(B, H, N, D, dtype=dtype)
        (dx,) = torch.autograd.grad(y, x, dy)
        sync()
        kernel_ran("rope", "rope_backward")
        check("rope y", y, ref.rope_ref(x.detach(), cos, sin, upcast=True), dtype)
        check("rope dx", dx, ref.rope_bwd_ref(dy, cos, sin, upcast=True), dtype)
        c.did(f"{name(dtype)} {shape_str(B, H, N, D)}")


@case("swiglu/elementwise")
def _(c: Case) -> None:
    run_swiglu(c, pick((4, 77, 1376), (2, 3, 40)), BF16, packed=True)
    run_swiglu(c, pick((3, 5000), (3, 50)), FP32, grads="g")  # COMPUTE_DUP off


def run_front(c: Case, M: int, D: int, F: int, dtype: torch.dtype, *, linear_layout: bool = False) -> None:
    """Forward (inference), then forward + backward through x and both weights. ``linear_layout``:
    the weights are ``nn.Linear`` weights ``[F, D]`` seen through ``.T`` (strided, read in place)."""
    x = randn(M, D, dtype=dtype)
    if linear_layout:
        wg_store, wu_store = randn(F, D, dtype=dtype, scale=D**-0.5), randn(F, D, dtype=dtype, scale=D**-0.5)
        wg, wu = wg_store.T, wu_store.T
    else:
        wg, wu = randn(D, F, dtype=dtype, scale=D**-0.5), randn(D, F, dtype=dtype, scale=D**-0.5)
    with torch.no_grad():
        y = tfg.swiglu_mlp_front(x, wg, wu)
    sync()
    kernel_ran("swiglu_mlp_front")
    check("swiglu_mlp_front y (inference)", y, ref.swiglu_mlp_front_ref(x, wg, wu, upcast=True), dtype)
    xg = x.detach().clone().requires_grad_(True)
    wgg, wug = wg.detach().clone().requires_grad_(True), wu.detach().clone().requires_grad_(True)
    y = tfg.swiglu_mlp_front(xg, wgg, wug)
    dy = torch.randn_like(y)
    y.backward(dy)
    sync()
    kernel_ran("swiglu_mlp_front", "swiglu_backward")
    x64, wg64, wu64 = (t.detach().double().requires_grad_(True) for t in (x, wg, wu))
    ref.swiglu_mlp_front_ref(x64, wg64, wu64, upcast=True).backward(dy.double())
    check("swiglu_mlp_front y (training)", y, ref.swiglu_mlp_front_ref(x, wg, wu, upcast=True), dtype)
    check("swiglu_mlp_front dx", xg.grad, x64.grad, dtype)
    check("swiglu_mlp_front dw_gate", wgg.grad, wg64.grad, dtype)
    check("swiglu_mlp_front dw_up", wug.grad, wu64.grad, dtype)
    regime = "decode" if M <= swiglu_front_mod.DECODE_ROWS else "prefill"
    c.did(f"{name(dtype)} M={M} D={D} F={F}{' linear-layout' if linear_layout else ''}: {regime}")


@case("swiglu_mlp_front/decode")
def _(c: Case) -> None:
    # M <= 64: tiles of next_power_of_2(M) rows, long in K (every decode configuration runs once).
    run_front(c, pick(16, 5), pick(512, 32), pick(1376, 48), BF16)


@case("swiglu_mlp_front/prefill")
def _(c: Case) -> None:
    run_front(c, pick(300, 70), pick(512, 32), pick(1376, 48), BF16)
    run_front(c, pick(200, 66), pick(256, 32), pick(700, 40), FP16, linear_layout=True)


# ----------------------------------------------------------------------------------------------
# Attention: forward, and forward + backward (the three backward kernels)
# ----------------------------------------------------------------------------------------------

HAS_KV_LENS = "kv_lens" in inspect.signature(tfg.flash_attention).parameters and "kv_lens" in inspect.signature(ref.flash_attention_ref).parameters


def run_attention(c: Case, B: int, Hq: int, Hkv: int, Nq: int, Nk: int, D: int, dtype: torch.dtype, *, causal: bool,
                  heads_inner: bool = False, kv_lens: Optional[list[int]] = None, expected: Optional[str] = None,
                  backward: bool = False) -> None:  # fmt: skip
    """``heads_inner``: q, k, v are ``[B, N, H, D]`` buffers seen through ``transpose(1, 2)``.
    ``backward``: also the gradients through O and lse (the backward kernels)."""

    def make(H: int, N: int) -> torch.Tensor:
        return randn(B, N, H, D, dtype=dtype).transpose(1, 2) if heads_inner else randn(B, H, N, D, dtype=dtype)

    q, k, v = make(Hq, Nq), make(Hkv, Nk), make(Hkv, Nk)
    extra = {}
    if kv_lens is not None:
        extra["kv_lens"] = torch.tensor(kv_lens, dtype=torch.int32, device=DEVICE)
    if backward:
        q, k, v = (t.requires_grad_() for t in (q, k, v))
    o, lse = tfg.flash_attention(q, k, v, causal=causal, return_lse=True, **extra)
    sync()
    kernel_ran("flash_attention")
    o_ref, lse_ref = ref.flash_attention_ref(q.detach(), k.detach(), v.detach(), causal, upcast=True, **extra)
    check("flash_attention O", o, o_ref, dtype)
    check("flash_attention lse", lse, lse_ref, FP16)  # float32 state; a bf16-sized bound would hide little
    if backward:
        do, dlse = randn(*o.shape, dtype=dtype), randn(*lse.shape, dtype=lse.dtype)
        grads = torch.autograd.grad((o, lse), (q, k, v), (do, dlse))
        sync()
        kernel_ran("flash_attention_backward")
        expected_grads = ref.flash_attention_bwd_ref(do, q.detach(), k.detach(), v.detach(), causal, dlse=dlse, upcast=True, **extra)
        for what, g, e in zip(("dq", "dk", "dv"), grads, expected_grads):
            check(f"flash_attention {what}", g, e, dtype)
    p = attention_mod.last_plan()
    got = "?" if p is None else p.strategy + (f" x{p.splits}" if p.splits > 1 else "")
    tiles = "" if p is None else f" {p.block_m}x{p.block_n}"
    label = (f"{name(dtype)} B={B} Hq={Hq} Hkv={Hkv} Nq={Nq} Nk={Nk} D={D}{' causal' if causal else ''}"
             f"{' [B,N,H,D]' if heads_inner else ''}{f' kv_lens={kv_lens}' if kv_lens is not None else ''}")  # fmt: skip
    c.did(label + tiles + (" + backward" if backward else ""), got, expected)


@case("flash_attention/prefill")
def _(c: Case) -> None:
    n = pick(1000, 40)
    run_attention(c, 2, pick(8, 2), pick(8, 2), n, n, pick(128, 32), BF16, causal=False, expected="prefill")
    run_attention(c, 2, pick(8, 2), pick(8, 2), n, n, pick(128, 32), BF16, causal=True, expected="prefill")


@case("flash_attention/prefill-gqa")
def _(c: Case) -> None:
    # 8 query heads over 2 KV heads, [B, N, H, D] memory read in place.
    n = pick(1000, 40)
    run_attention(c, 2, pick(8, 4), 2, n, n, pick(128, 32), BF16, causal=True, heads_inner=True, expected="prefill")


@case("flash_attention/prefill-shapes")
def _(c: Case) -> None:
    # Nq < Nk (queries on top of a cache), Nq > Nk causal (rows that see no key), odd and large head dims, fp32 (IEEE dot).
    # D = 64 in 16 bits: the Hopper kernel on an sm_90 GPU (tritonforge.ops.gpu.attention), else the portable one
    on_hopper = gpu_attention.available(torch.device(DEVICE))
    run_attention(c, 1, 4, 4, pick(300, 20), pick(1000, 50), 64, FP16, causal=True, expected="hopper" if on_hopper else "prefill")
    run_attention(c, 1, 4, 2, pick(200, 40), pick(77, 23), 64, FP32, causal=True, expected="prefill")
    run_attention(c, 2, 2, 1, pick(333, 35), pick(333, 35), pick(80, 24), BF16, causal=False, expected="prefill")
    run_attention(c, 1, 2, 2, pick(300, 33), pick(300, 33), pick(256, 48), BF16, causal=True, expected="prefill")


@case("flash_attention/decode-split")
def _(c: Case) -> None:
    # Few queries: the keys split across programs (B * Hkv < 132), then the merge kernel.
    run_attention(c, 1, pick(32, 8), pick(8, 2), 1, pick(5000, 200), pick(128, 32), BF16, causal=False, expected="decode x16")
    run_attention(c, 2, 8, 2, 4, pick(3000, 150), 64, BF16, causal=True, expected="decode x24")  # 4 queries (speculative)


@case("flash_attention/decode-one-split")
def _(c: Case) -> None:
    # B * Hkv >= 132 programs already: one split, straight into O (no merge).
    run_attention(c, pick(64, 40), pick(32, 4), pick(8, 1), 1, pick(777, 40), pick(128, 32), BF16, causal=False, expected="decode")


@case("flash_attention/kv-lens")
def _(c: Case) -> None:
    if not HAS_KV_LENS:
        c.did("kv_lens not in this tritonforge's flash_attention: skipped")
        return
    nk = pick(5000, 200)
    run_attention(c, 3, pick(32, 8), pick(8, 2), 1, nk, pick(128, 32), BF16, causal=False, kv_lens=[nk, nk // 3 + 1, 0])
    n = pick(600, 40)
    run_attention(c, 2, 4, 2, n, n, 64, BF16, causal=True, kv_lens=[n - 17, 5])


@case("flash_attention/backward")
def _(c: Case) -> None:
    # The backward kernels: GQA with [B, N, H, D] memory, Nq > Nk causal (rows that see no key), a
    # padded head dim in fp32 (IEEE dots), a static cache's lengths.
    n = pick(1000, 40)
    run_attention(c, 2, pick(8, 4), 2, n, n, pick(128, 32), BF16, causal=True, heads_inner=True, backward=True)
    run_attention(c, 1, 4, 4, pick(300, 37), pick(200, 21), 64, FP16, causal=True, backward=True)
    run_attention(c, 2, 2, 1, pick(333, 35), pick(333, 35), pick(80, 24), FP32, causal=False, backward=True)
    run_attention(c, 2, 4, 2, n, n, 64, BF16, causal=True, kv_lens=[n - 17, 5], backward=True)


# ----------------------------------------------------------------------------------------------
# The teaching ops and axpy (forward only: axpy's backward is plain PyTorch)
# ----------------------------------------------------------------------------------------------


@case("axpy")
def _(c: Case) -> None:
    for shape, dtype in ((pick((1_000_003,), (1003,)), FP32), (pick((333, 777), (33, 7)), BF16), (pick((4097,), (97,)), FP64)):
        x, y = randn(*shape, dtype=dtype), randn(*shape, dtype=dtype)
        out = tfg.axpy(0.37, x, y)
        sync()
        kernel_ran("axpy")
        check("axpy", out, ref.axpy_ref(0.37, x, y, upcast=True), dtype)
        c.did(f"{name(dtype)} {shape_str(*shape)}")


@case("vector_add")
def _(c: Case) -> None:
    for shape, dtype in ((pick((1_000_003,), (1003,)), FP32), (pick((257, 1000), (9, 100)), FP16)):
        x, y = randn(*shape, dtype=dtype), randn(*shape, dtype=dtype)
        if len(shape) == 2:
            x = x.T  # non-contiguous: copied by the launcher
            y = y.T
        out = tfg.vector_add(x, y)
        sync()
        kernel_ran("vector_add")
        check("vector_add", out, ref.add_ref(x, y, upcast=True), dtype)
        c.did(f"{name(dtype)} {shape_str(*x.shape)}")


@case("add_2d")
def _(c: Case) -> None:
    M, N = pick(1000, 37), pick(777, 70)
    x = randn(N, M).T  # transposed view
    y = randn(M, N + 9)[:, :N]  # sliced rows
    out = tfg.add_2d(x, y)
    sync()
    kernel_ran("add_2d")
    check("add_2d", out, ref.add_ref(x, y, upcast=True), FP32)
    xb, yb = randn(M, N, dtype=BF16), randn(M, N, dtype=BF16)
    out = tfg.add_2d(xb, yb)
    sync()
    check("add_2d bf16", out, ref.add_ref(xb, yb, upcast=True), BF16)
    c.did(f"fp32 {M}x{N} transposed + sliced; bf16 {M}x{N}")


@case("program_map")
def _(c: Case) -> None:
    for M, N, bm, bn in ((pick(1000, 37), pick(777, 70), 16, 64), (37, 5, 8, 4)):
        out = tfg.program_map(M, N, bm, bn, device=DEVICE)
        sync()
        kernel_ran("program_map")
        check("program_map", out, ref.program_map_ref(M, N, bm, bn, device=DEVICE), FP32)
        c.did(f"{M}x{N} tiles {bm}x{bn}")


# ----------------------------------------------------------------------------------------------
# Setup and the driver
# ----------------------------------------------------------------------------------------------


def poison_outputs() -> None:
    """Every op module's ``_empty`` (where its launchers allocate buffers a kernel must overwrite
    completely) returns NaN-filled float buffers: an element a kernel never writes shows as NaN."""

    def nan_empty(*shape, dtype=None, device=None, **kwargs):
        t = torch.empty(*shape, dtype=dtype, device=device, **kwargs)
        if t.is_floating_point():
            t.fill_(math.nan)
        return t

    for module in (rms_mod, rms_bwd_mod, softmax_mod, gpu_softmax_mod, swiglu_mod, swiglu_front_mod, attention_prefill_mod,
                   attention_decode_mod, rope_mod, rope_pair_mod):  # fmt: skip
        if hasattr(module, "_empty"):
            module._empty = nan_empty


def shrink_blocks() -> None:
    """Toy runs: lower the block limits (as the op tests do) so that tiny rows reach the long-row
    strategies in the interpreter; decode with several splits needs more pretend SMs."""
    for module, attr, value in (
        (softmax_mod, "ROW_FIT_LIMIT", 64),
        (softmax_mod, "LOOP_BLOCK_N", 16),
        (rms_mod, "MAX_BLOCK_N", 64),
        (attention_mod, "INTERPRETER_SMS", 16),
    ):
        if hasattr(module, attr):
            setattr(module, attr, value)


def one_shot_autotuning() -> None:
    """Triton's autotuner times each configuration for ~125 ms of reps with an L2 flush between
    them; under a sanitizer that is slow and measures nothing. Instead, launch each configuration
    once (each is still compiled, run and checked) and report equal times: the first one is kept."""
    from triton.runtime import autotuner

    def once(kernel_call, quantiles=None):
        kernel_call()
        sync()
        return [1.0, 1.0, 1.0]

    autotuner.Autotuner.do_bench = property(lambda self: once)


def selected(only: Optional[str]) -> list[str]:
    if not only:
        return list(CASES)
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    names = [n for n in CASES if any(n == w or n.startswith(w + "/") for w in wanted)]
    unknown = [w for w in wanted if not any(n == w or n.startswith(w + "/") for n in CASES)]
    if unknown:
        sys.exit(f"unknown case(s): {', '.join(unknown)}; --list prints the names")
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated case names or prefixes (e.g. softmax,axpy)")
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    parser.add_argument("--tune", choices=("once", "bench"), default="once",
                        help="autotuning on a GPU: each configuration launched once (default) or Triton's timing")  # fmt: skip
    args = parser.parse_args()
    if args.list:
        print("\n".join(CASES))
        return 0
    names = selected(args.only)
    env = tfg.environment()
    print(f"sanitize workload: {'toy sizes, CPU interpreter' if SMALL else 'GPU sizes'}; path {env.path}, device {env.device}, "
          f"torch {env.torch_version}, triton {env.triton_version}, strict {runtime.is_strict()}", flush=True)  # fmt: skip
    if SMALL:
        shrink_blocks()
        warnings.filterwarnings("ignore", category=RuntimeWarning)  # the interpreter's numpy on -inf rows (NaN is expected there)
    elif args.tune == "once":
        one_shot_autotuning()
    poison_outputs()
    torch.manual_seed(0)
    wrong, failed = [], []
    start_all = time.perf_counter()
    with tfg.strict(True):
        for case_name in names:
            c = Case(case_name)
            print(f"start {case_name}", flush=True)
            start = time.perf_counter()
            try:
                CASES[case_name](c)
                sync()
            except Wrong as exc:
                wrong.append(case_name)
                print(f"WRONG {case_name}: {exc} (after: {'; '.join(c.ran) or 'nothing'})", flush=True)
                continue
            except Exception as exc:  # noqa: BLE001 - reported, and the next case still runs
                failed.append(case_name)
                print(f"FAIL {case_name}: {type(exc).__name__}: {exc}", flush=True)
                traceback.print_exc(file=sys.stdout)
                sys.stdout.flush()
                continue
            for note in c.notes:
                print(f"NOTE {case_name}: {note}", flush=True)
            print(f"ok {case_name} {time.perf_counter() - start:.2f}s [{'; '.join(c.ran)}]", flush=True)
    total = time.perf_counter() - start_all
    ok = len(names) - len(wrong) - len(failed)
    print(f"summary: {ok} ok, {len(wrong)} wrong, {len(failed)} failed of {len(names)} cases in {total:.1f}s"
          + (f"; wrong: {', '.join(wrong)}" if wrong else "") + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)  # fmt: skip
    return 1 if wrong or failed else 0


if __name__ == "__main__":
    sys.exit(main())
