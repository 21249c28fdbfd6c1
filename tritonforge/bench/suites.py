"""The suites: the ceilings first, then each op's implementations checked and timed, from a spec.

An op's benchmark is an :class:`OpSpec`: its shapes, its inputs, how an implementation is called,
the float64 oracle, the cost formula, the implementations, and whether a row is a forward call
or a forward + backward step and gets device time. :func:`run_op_suite` runs any spec. Adding an
op's benchmark means writing its spec and naming it in :data:`SUITES`, not writing a runner.

The ceilings (copy bandwidth, matmul rate) and the kernel profile of one eager RMSNorm are not
op suites (they measure PyTorch itself) and keep their own small functions.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import math
import platform
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Optional

import torch

from tritonforge import hardware, runtime, simulation  # first: decides TRITON_INTERPRET before triton loads
from tritonforge.bench import peers
from tritonforge.bench.costs import (
    Ceilings,
    Cost,
    add_throughput,
    attention_decode_cost,
    attention_forward_backward_cost,
    attention_prefill_cost,
    axpy_cost,
    copy_cost,
    dtype_name,
    matmul_cost,
    rmsnorm_forward_backward_cost,
    rmsnorm_forward_cost,
    softmax_forward_backward_cost,
    softmax_forward_cost,
    swiglu_forward_backward_cost,
    swiglu_forward_cost,
    swiglu_front_cost,
    time_floor_us,
)
from tritonforge.bench.peers import AXPY_ALPHA, RMSNORM_EPS
from tritonforge.bench.results import SUITES, Results, collect_metadata, make_row, no_gpu_message
from tritonforge.bench.timing import (
    Timer,
    describe_exception,
    device_time_us,
    do_bench_timer,
    measure,
    relative_error,
)
from tritonforge.reference import axpy_ref, flash_attention_bwd_ref, flash_attention_ref, rms_norm_ref, softmax_ref, swiglu_mlp_front_ref, swiglu_ref

RMSNORM_SHAPES = ((4096, 512), (4096, 2048), (4096, 8192), (16384, 4096), (32768, 8192), (1, 8192), (64, 8192))
RMSNORM_QUICK_SHAPES = ((4096, 2048), (16384, 4096), (64, 8192))
AXPY_SIZES = ((2**20,), (2**24,), (2**26,), (2**28,))
AXPY_QUICK_SIZES = ((2**20,), (2**24,))
MATMUL_SIZE = 8192
COPY_BYTES, COPY_QUICK_BYTES = 2 * 2**30, 2**29  # 2 GiB (quick: 512 MiB), >> the 60 MB L2 of an H200
PROFILE_SHAPE = (4096, 4096)

MATMUL_TOLERANCE_SCALE = 4.0
"""Extra room for the fp32 matmul ceiling's check: an 8192-long fp32 dot product rounds about
√8192 times more than one fp32 operation; the H200 runs measured 4.4e-6 to 5.1e-6, half of
fp32's 1e-5, so a run must not fail the ceiling on that noise."""


def default_dtypes(device: str, quick: bool = False) -> list[torch.dtype]:
    """float32 and the GPU's 16-bit type (bfloat16 from sm_80, float16 before); quick: 16-bit."""
    half = torch.bfloat16 if hardware.supports_bf16(torch.device(device)) else torch.float16
    return [half] if quick else [torch.float32, half]


def free_memory(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def unavailable(row: dict, reason: str) -> dict:
    row.update(status="unavailable", note=reason)
    return row


# ----------------------------------------------------------------------------------------------
# Ceilings
# ----------------------------------------------------------------------------------------------


def run_ceilings(*, dtypes=None, quick: bool = False, device: str = "cuda", timer: Timer) -> list[dict]:
    """Copy bandwidth and matmul rate, measured the way the ops are: do_bench, median."""
    rows = [measure_copy(COPY_QUICK_BYTES if quick else COPY_BYTES, device=device, timer=timer)]
    if dtypes is None:
        dtypes = default_dtypes(device, quick=True) if quick else [torch.bfloat16, torch.float16, torch.float32]
    for dtype in dtypes:
        if dtype == torch.bfloat16 and not hardware.supports_bf16(torch.device(device)):
            continue
        rows.append(measure_matmul(dtype, MATMUL_SIZE, device=device, timer=timer))
        free_memory(device)
    return rows


def measure_copy(nbytes: int, *, device: str, timer: Timer) -> dict:
    numel = nbytes // 4
    src = torch.randn(numel, device=device)
    dst = torch.empty_like(src)
    row = make_row("ceilings", "copy", "torch.Tensor.copy_", torch.float32, [numel])
    cost = copy_cost(numel, torch.float32)
    row.update(bytes=cost.bytes, formula=cost.formula)
    row = measure_copy_into(row, src, dst, timer=timer, ceilings=None)
    src = dst = None  # free the 2 GiB before empty_cache
    free_memory(device)
    return row


def measure_copy_into(row: dict, src: torch.Tensor, dst: torch.Tensor, *, timer: Timer, ceilings) -> dict:
    """Check, then time, ``dst.copy_(src)`` into ``row``: the ceiling row and the forward suite's
    same-size copy are measured the same way. ``dst`` is poisoned before the check."""

    def check() -> float:
        dst.fill_(math.nan)
        dst.copy_(src)
        return 0.0 if torch.equal(dst, src) else math.inf

    return measure(row, run=lambda: dst.copy_(src), check=check, timer=timer, ceilings=ceilings)


def measure_matmul(dtype: torch.dtype, size: int, *, device: str, timer: Timer) -> dict:
    """``torch.matmul`` on fresh random data; fp32 with TF32 off (so it is real fp32)."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    row = make_row("ceilings", "matmul", "torch.matmul", dtype, [size, size, size])
    cost = matmul_cost(size, size, size)
    row.update(flops=cost.flops, formula=cost.formula)
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # no TF32: an fp32 ceiling must be fp32
    try:
        row = measure(
            row,
            run=lambda: torch.matmul(a, b),
            check=lambda: relative_error(torch.matmul(a, b), a.double() @ b.double()),
            timer=timer,
            ceilings=None,
            tolerance_scale=MATMUL_TOLERANCE_SCALE,
        )
    finally:
        torch.set_float32_matmul_precision(previous)
    if dtype == torch.float32:
        row["note"] = "TF32 disabled (torch.set_float32_matmul_precision('highest'))"
    return row


# ----------------------------------------------------------------------------------------------
# Op suites: one spec each, one runner for all
# ----------------------------------------------------------------------------------------------

Inputs = dict  # name -> tensor (or a constant), made once per (dtype, shape) and shared by every row
Baseline = Callable[..., dict]  # baseline(spec, inputs, timer=, ceilings=) -> a measured row


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One op's benchmark: everything :func:`run_op_suite` needs to check and time its rows."""

    suite: str  # the suite's name: rows' "suite", the command line's argument
    op: str  # rows' "op"
    shapes: tuple  # default shapes; quick_shapes with --quick
    quick_shapes: tuple
    make_inputs: Callable[[tuple, torch.dtype, str], Inputs]  # (shape, dtype, device) -> fresh inputs
    call: Callable[[Callable, Inputs], torch.Tensor]  # how an implementation is called on the inputs
    reference: Callable  # the float64 oracle, called like an implementation (on float64 inputs)
    cost: Callable[[tuple, torch.dtype], Cost]  # (shape, dtype) -> bytes, FLOPs, formula, ceiling
    implementations: Callable[..., dict]  # (impls, cuda_graphs=bool) -> name -> maker of fn, or why not
    routed_op: str  # the tritonforge op whose path is checked: our row must not be a fallback
    ours: str = "tritonforge"  # the row checked under strict routing
    backward: bool = False  # rows time forward + backward: y = call(fn); y.backward(inputs["dy"])
    grads: tuple = ()  # with backward: the inputs whose gradients are checked against float64
    device_time: bool = False  # rows also get device_us (CUDA-graph replay)
    row_shape: Callable[[tuple], list] = list  # the shape written in the rows
    baselines: Mapping[str, Baseline] = dataclasses.field(default_factory=dict)  # extra rows per shape
    sixteen_bit_only: bool = False  # default dtypes: the device's 16-bit type only (no float32 rows)
    peak_memory: bool = False  # rows also get peak_bytes: memory one call allocates beyond its inputs

    def impl_table(self, impls: Optional[Sequence[str]] = None, device: str = "cuda") -> dict:
        """The implementations a run on ``device`` measures: the CUDA-graph rows only on a GPU."""
        return self.implementations(impls, cuda_graphs=torch.device(device).type == "cuda")


def run_op_suite(
    spec: OpSpec,
    ceilings: Optional[Ceilings],
    *,
    dtypes: Optional[Sequence[torch.dtype]] = None,
    shapes: Optional[Sequence[tuple]] = None,
    impls: Optional[Sequence[str]] = None,
    quick: bool = False,
    device: str = "cuda",
    timer: Timer,
    device_timer: Optional[Callable[..., float]] = None,
) -> list[dict]:
    """Every (dtype, shape, implementation) row of ``spec``: checked against float64, then timed.

    ``dtypes``, ``shapes`` and ``impls`` narrow the suite (None: its defaults). ``device_timer``
    fills ``device_us`` where ``spec.device_time`` asks for it. Rows of the implementations in
    :data:`~tritonforge.bench.peers.CUDA_GRAPH_IMPLS` are warmed up before timing and get no
    device time (a CUDA graph already: ``us`` is its replay).
    """
    dtypes = dtypes or default_dtypes(device, quick or spec.sixteen_bit_only)
    shapes = shapes or (spec.quick_shapes if quick else spec.shapes)
    implementations = spec.impl_table(impls, device)
    rows = []
    for dtype in dtypes:
        for shape in shapes:
            inputs = spec.make_inputs(tuple(shape), dtype, device)
            references = op_references(spec, inputs)
            cost = spec.cost(tuple(shape), dtype)
            for impl, make in implementations.items():
                row = make_row(spec.suite, spec.op, impl, dtype, spec.row_shape(tuple(shape)), bytes=cost.bytes,
                               flops=cost.flops, formula=cost.formula, ceiling=cost.ceiling)  # fmt: skip
                if isinstance(make, str):
                    rows.append(unavailable(row, make))
                    continue
                rows.append(measure_implementation(spec, row, make, inputs, references, ceilings=ceilings,
                                                   timer=timer, device_timer=device_timer))  # fmt: skip
            for name, baseline in spec.baselines.items():
                if impls is None or name in impls:
                    rows.append(baseline(spec, inputs, timer=timer, ceilings=ceilings))
            del inputs, references
            free_memory(device)
    return rows


def measure_implementation(spec: OpSpec, row: dict, make: Callable, inputs: Inputs, references, *, ceilings,
                           timer: Timer, device_timer=None) -> dict:  # fmt: skip
    """Check one implementation (strict routing for ours), then time it, into ``row``."""
    try:
        fn = make()
    except Exception as exc:  # noqa: BLE001 - e.g. torch.compile refusing the function
        row.update(status="error", note=describe_exception(exc))
        return row
    grad_inputs = [inputs[name] for name in spec.grads] if spec.backward else []
    if spec.backward:
        run = functools.partial(forward_backward_step, spec, fn, inputs)
    else:
        run = functools.partial(spec.call, fn, inputs)
    check = checked_step(spec, run, inputs, references, ours=row["impl"] == spec.ours)
    graphed = row["impl"] in peers.CUDA_GRAPH_IMPLS
    if graphed:
        timer = warm_then(timer)
    row = measure(row, run=run, check=check, timer=timer, ceilings=ceilings, grad_to_none=grad_to_none_of(grad_inputs),
                  device_timer=device_timer if spec.device_time and not graphed else None)  # fmt: skip
    if graphed and row["status"] == "ok":
        row["note"] = "a CUDA graph already (torch.compile mode='reduce-overhead'): us is its replay; no separate device_us"
    if spec.peak_memory and row["status"] == "ok":
        row["peak_bytes"] = peak_bytes_of(run)
    for tensor in grad_inputs:
        tensor.grad = None
    return row


def peak_bytes_of(run: Callable[[], object]) -> Optional[int]:
    """Bytes one call allocates beyond what was allocated before it, at its peak (the output
    included): ``torch.cuda.max_memory_allocated`` after a reset. None off a GPU."""
    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = run()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del out
    return int(peak)


def grad_to_none_of(tensors: list) -> Optional[list]:
    return tensors or None


def warm_then(timer: Timer, calls: int = peers.CUDA_GRAPH_WARMUP_CALLS) -> Timer:
    """``timer``, after ``calls`` calls of the function: cudagraph trees record on the 2nd or 3rd."""

    def time_us(fn, grad_to_none=None):
        for _ in range(calls):
            for tensor in grad_to_none or ():
                tensor.grad = None
            fn()
        return timer(fn, grad_to_none=grad_to_none)

    return time_us


def forward_backward_step(spec: OpSpec, fn: Callable, inputs: Inputs) -> torch.Tensor:
    """One training step of the layer: ``y = call(fn); y.backward(inputs["dy"])``."""
    y = spec.call(fn, inputs)
    y.backward(inputs["dy"])
    return y


def op_references(spec: OpSpec, inputs: Inputs) -> tuple:
    """(y,) or, for a forward + backward spec, (y, *gradients) in float64 through autograd."""
    as64 = {k: v.detach().double() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    if not spec.backward:
        return (spec.call(spec.reference, as64).detach(),)
    for name in spec.grads:
        as64[name].requires_grad_(True)
    y = spec.call(spec.reference, as64)
    y.backward(as64["dy"])
    references = (y.detach(), *(as64[name].grad for name in spec.grads))
    for name in spec.grads:  # the inputs the rows use get gradients; the float64 copies are dropped
        inputs[name].requires_grad_(True)
    return references


def checked_step(spec: OpSpec, run: Callable, inputs: Inputs, references: tuple, *, ours: bool) -> Callable[[], float]:
    """A check that runs one call (or step) and returns its worst error against float64: of y, and
    of every gradient for a backward spec. Ours runs under strict routing and must not fall back."""

    def check() -> float:
        grads = [inputs[name] for name in spec.grads] if spec.backward else []
        for tensor in grads:
            tensor.grad = None
        if ours:
            with runtime.strict():
                y = run()
            if runtime.last_path(spec.routed_op) == "torch":
                raise RuntimeError(f"tritonforge.{spec.routed_op} was served by the PyTorch fallback, not the kernel")
        else:
            y = run()
        if any(tensor.grad is None for tensor in grads):
            raise RuntimeError(f"backward produced no gradient for {', '.join(spec.grads)}")
        outputs = [y, *(tensor.grad for tensor in grads)]
        return max(relative_error(out, ref) for out, ref in zip(outputs, references))

    return check


def checked(fn: Callable[[], torch.Tensor], reference: torch.Tensor) -> Callable[[], float]:
    """A check that runs ``fn`` once and compares its output with the float64 reference."""
    return lambda: relative_error(fn(), reference)


# The specs ------------------------------------------------------------------------------------


def rmsnorm_inputs(m: int, n: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh non-zero random x [M, N] and weight [N] (a weight of ones would hide a missing multiply)."""
    x = torch.randn(m, n, device=device, dtype=dtype)
    weight = (1.0 + 0.5 * torch.randn(n, device=device)).to(dtype)
    return x, weight


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = RMSNORM_EPS) -> torch.Tensor:
    """The float64 oracle: the HF formula evaluated in float64."""
    return rms_norm_ref(x, weight, eps, upcast=True)


def rmsnorm_forward_inputs(shape: tuple, dtype: torch.dtype, device: str) -> Inputs:
    x, weight = rmsnorm_inputs(*shape, dtype, device)
    return {"x": x, "weight": weight}


def rmsnorm_forward_backward_inputs(shape: tuple, dtype: torch.dtype, device: str) -> Inputs:
    x, weight = rmsnorm_inputs(*shape, dtype, device)
    return {"x": x, "weight": weight, "dy": torch.randn(*shape, device=device, dtype=dtype)}


def call_rmsnorm(fn: Callable, inputs: Inputs) -> torch.Tensor:
    return fn(inputs["x"], inputs["weight"], RMSNORM_EPS)


SAME_SIZE_COPY = "copy_ (same bytes)"
"""The forward suite's baseline row at each shape: ``torch.Tensor.copy_`` of x into a tensor of x's
shape, timed like the implementations. It moves what a fused forward must move (x in, y out; less
the weight, one row), so its fraction is the most a kernel can show at that size under the timer."""


def measure_same_size_copy(x: torch.Tensor, *, timer: Timer, ceilings: Optional[Ceilings], suite: str = "rmsnorm") -> dict:
    """:data:`SAME_SIZE_COPY` for one input: copy ``x`` into a fresh tensor of its shape."""
    out = torch.empty_like(x)
    cost = copy_cost(x.numel(), x.dtype)
    row = make_row(suite, "copy", SAME_SIZE_COPY, x.dtype, list(x.shape),
                   bytes=cost.bytes, formula=cost.formula, ceiling="copy")  # fmt: skip
    # No device time: captured in a CUDA graph, a contiguous copy_ becomes a memcpy node, which ran
    # slower than the eager copy on the H200 (benchmarks/experiments/copy-baselines, copy-same-size-probe).
    return measure_copy_into(row, x, out, timer=timer, ceilings=ceilings)


def same_size_copy_baseline(spec: OpSpec, inputs: Inputs, *, timer: Timer, ceilings) -> dict:
    return measure_same_size_copy(inputs["x"], timer=timer, ceilings=ceilings, suite=spec.suite)


RMSNORM_FORWARD = OpSpec(
    suite="rmsnorm",
    op="rmsnorm",
    shapes=RMSNORM_SHAPES,
    quick_shapes=RMSNORM_QUICK_SHAPES,
    make_inputs=rmsnorm_forward_inputs,
    call=call_rmsnorm,
    reference=rmsnorm_reference,
    cost=lambda shape, dtype: rmsnorm_forward_cost(*shape, dtype),
    implementations=peers.rmsnorm_implementations,
    routed_op="rms_norm",
    device_time=True,  # small calls are host-bound under do_bench; device time says what the kernels cost
    baselines={SAME_SIZE_COPY: same_size_copy_baseline},
)
"""RMSNorm forward: tritonforge vs HF-eager, F.rms_norm, torch.compile(HF), Liger (and on a GPU
both compiled under CUDA graphs); at each shape a copy of the same bytes (:data:`SAME_SIZE_COPY`)."""

RMSNORM_FORWARD_BACKWARD = dataclasses.replace(
    RMSNORM_FORWARD,
    suite="rmsnorm-bwd",
    op="rmsnorm-fwd-bwd",
    make_inputs=rmsnorm_forward_backward_inputs,
    cost=lambda shape, dtype: rmsnorm_forward_backward_cost(*shape, dtype),
    backward=True,
    grads=("x", "weight"),
    baselines={},
)
"""RMSNorm forward + backward (one training step of the layer): y = f(x, w); y.backward(dy);
checked on y, dx and dweight."""


def axpy_implementations(impls: Optional[Sequence[str]] = None, *, cuda_graphs: bool = False) -> dict:
    """name -> a maker of ``fn(alpha, x, y)``: ours, eager ``alpha * x + y`` (two kernels), and
    torch.compile of the same (compiled afresh per row). No CUDA-graph rows: axpy is not host-bound."""
    from tritonforge.ops.fused_axpy import axpy

    table = {
        "tritonforge": lambda: axpy,
        "eager": lambda: peers.eager_axpy,
        "torch.compile": lambda: peers.compile_fresh(peers.eager_axpy),
    }
    return {name: maker for name, maker in table.items() if impls is None or name in impls}


def axpy_inputs(shape: tuple, dtype: torch.dtype, device: str) -> Inputs:
    numel = math.prod(shape)
    return {"x": torch.randn(numel, device=device, dtype=dtype), "y": torch.randn(numel, device=device, dtype=dtype)}


AXPY = OpSpec(
    suite="axpy",
    op="axpy",
    shapes=AXPY_SIZES,
    quick_shapes=AXPY_QUICK_SIZES,
    make_inputs=axpy_inputs,
    call=lambda fn, inputs: fn(AXPY_ALPHA, inputs["x"], inputs["y"]),
    reference=lambda alpha, x, y: axpy_ref(alpha, x, y, upcast=True),
    cost=lambda shape, dtype: axpy_cost(math.prod(shape), dtype),
    implementations=axpy_implementations,
    routed_op="axpy",
    row_shape=lambda shape: [math.prod(shape)],
)
"""tritonforge.ops.fused_axpy vs eager ``alpha * x + y`` (two kernels) vs torch.compile of the same."""

SWIGLU_SHAPES = ((1, 14336), (64, 14336), (1024, 14336), (4096, 14336), (8192, 14336), (16384, 4096))
SWIGLU_QUICK_SHAPES = ((64, 14336), (4096, 14336))
LLAMA3_8B_D, LLAMA3_8B_F = 4096, 14336
SWIGLU_FRONT_SHAPES = tuple((m, LLAMA3_8B_D, LLAMA3_8B_F) for m in (1, 16, 64, 4096))
SWIGLU_FRONT_QUICK_SHAPES = ((16, LLAMA3_8B_D, LLAMA3_8B_F), (4096, LLAMA3_8B_D, LLAMA3_8B_F))


def swiglu_inputs(shape: tuple, dtype: torch.dtype, device: str) -> Inputs:
    """Fresh gate and up [M, F], separate tensors (Llama's gate_proj and up_proj outputs)."""
    m, f = shape
    return {"gate": torch.randn(m, f, device=device, dtype=dtype), "up": torch.randn(m, f, device=device, dtype=dtype)}


def swiglu_forward_backward_inputs(shape: tuple, dtype: torch.dtype, device: str) -> Inputs:
    return {**swiglu_inputs(shape, dtype, device), "dy": torch.randn(*shape, device=device, dtype=dtype)}


def swiglu_same_size_copy(units: float) -> Baseline:
    """A copy of ``units·M·F`` elements' worth of bytes in all (read half, write half): the bytes the
    SwiGLU row must move (3 units forward; 8 forward + backward), timed like the implementations."""

    def baseline(spec: OpSpec, inputs: Inputs, *, timer: Timer, ceilings) -> dict:
        # From the inputs, not the RNG: after the reduce-overhead rows of a backward suite,
        # torch.randn raised "Offset increment outside graph capture" on the H200 (torch 2.11).
        # dy when there is one: Liger's backward has overwritten gate with gradients (NaN there
        # failed the copy's own check).
        data = inputs.get("dy", inputs["gate"]).detach()
        numel = int(units * data.numel() / 2)
        src = data.reshape(-1).repeat(-(-numel // data.numel()))[:numel].clone()
        return measure_same_size_copy(src, timer=timer, ceilings=ceilings, suite=spec.suite)

    return baseline


SWIGLU_FORWARD = OpSpec(
    suite="swiglu",
    op="swiglu",
    shapes=SWIGLU_SHAPES,
    quick_shapes=SWIGLU_QUICK_SHAPES,
    make_inputs=swiglu_inputs,
    call=lambda fn, inputs: fn(inputs["gate"], inputs["up"]),
    reference=lambda gate, up: swiglu_ref(gate, up, upcast=True),
    cost=lambda shape, dtype: swiglu_forward_cost(*shape, dtype),
    implementations=peers.swiglu_implementations,
    routed_op="swiglu",
    device_time=True,
    baselines={SAME_SIZE_COPY: swiglu_same_size_copy(3)},
)
"""SwiGLU forward ``silu(gate) * up``: tritonforge vs HF eager, torch.compile, Liger (and compiled
under CUDA graphs on a GPU); at each shape a copy of the same bytes."""

SWIGLU_FORWARD_BACKWARD = dataclasses.replace(
    SWIGLU_FORWARD,
    suite="swiglu-bwd",
    op="swiglu-fwd-bwd",
    make_inputs=swiglu_forward_backward_inputs,
    cost=lambda shape, dtype: swiglu_forward_backward_cost(*shape, dtype),
    # No reduce-overhead rows: the device_us column already times each step without host, and the
    # compiled-graph backward rows broke the RNG state for the rows after them (see the baseline).
    implementations=lambda impls=None, *, cuda_graphs=False: peers.swiglu_implementations(impls, cuda_graphs=False),
    backward=True,
    grads=("gate", "up"),
    baselines={SAME_SIZE_COPY: swiglu_same_size_copy(8)},
)
"""SwiGLU forward + backward (one training step of the activation), checked on y, dgate and dup."""


def swiglu_front_inputs(shape: tuple, dtype: torch.dtype, device: str) -> Inputs:
    """x [M, D] and the two weights [D, F], scaled by 1/sqrt(D) as an initialized layer's are."""
    m, d, f = shape
    scale = d**-0.5
    return {
        "x": torch.randn(m, d, device=device, dtype=dtype),
        "w_gate": (torch.randn(d, f, device=device) * scale).to(dtype),
        "w_up": (torch.randn(d, f, device=device) * scale).to(dtype),
    }


SWIGLU_FRONT = OpSpec(
    suite="swiglu-front",
    op="swiglu-mlp-front",
    shapes=SWIGLU_FRONT_SHAPES,
    quick_shapes=SWIGLU_FRONT_QUICK_SHAPES,
    make_inputs=swiglu_front_inputs,
    call=lambda fn, inputs: fn(inputs["x"], inputs["w_gate"], inputs["w_up"]),
    reference=lambda x, w_gate, w_up: swiglu_mlp_front_ref(x, w_gate, w_up, upcast=True),
    cost=lambda shape, dtype: swiglu_front_cost(*shape, dtype),
    implementations=peers.swiglu_front_implementations,
    routed_op="swiglu_mlp_front",
    device_time=True,
    sixteen_bit_only=True,
)
"""The fused MLP front ``silu(x @ w_gate) * (x @ w_up)`` at Llama-3-8B sizes (D = 4096, F = 14336),
decode (M = 1, 16, 64) and prefill (M = 4096): ours vs cuBLAS two-GEMM + eager elementwise, and
torch.compile of the same. 16-bit only (the GPU kernel's dtypes)."""

SOFTMAX_SHAPES = ((16384, 1024), (16384, 4096), (16384, 32768), (4096, 131072), (64, 131072), (8, 131072), (1, 131072),
                  (4, 262144), (1, 262144))  # fmt: skip
SOFTMAX_QUICK_SHAPES = ((16384, 4096), (1, 131072))


def softmax_inputs(shape: tuple, dtype: torch.dtype, device: str) -> Inputs:
    """Logits of a realistic spread (std 4: a softmax neither uniform nor one-hot)."""
    return {"x": (4 * torch.randn(*shape, device=device)).to(dtype)}


SOFTMAX_FORWARD = OpSpec(
    suite="softmax",
    op="softmax",
    shapes=SOFTMAX_SHAPES,
    quick_shapes=SOFTMAX_QUICK_SHAPES,
    make_inputs=softmax_inputs,
    call=lambda fn, inputs: fn(inputs["x"]),
    reference=lambda x: softmax_ref(x, upcast=True),
    cost=lambda shape, dtype: softmax_forward_cost(*shape, dtype),
    implementations=peers.softmax_implementations,
    routed_op="softmax",
    device_time=True,
    baselines={SAME_SIZE_COPY: same_size_copy_baseline},
)
"""Softmax over rows of 1K-256K: tritonforge vs torch.softmax, torch.compile, Liger (and under CUDA
graphs on a GPU); at each shape a copy of x (the same bytes: read N, write N per row)."""

SOFTMAX_FORWARD_BACKWARD = dataclasses.replace(
    SOFTMAX_FORWARD,
    suite="softmax-bwd",
    op="softmax-fwd-bwd",
    make_inputs=lambda shape, dtype, device: {**softmax_inputs(shape, dtype, device), "dy": torch.randn(*shape, device=device, dtype=dtype)},
    cost=lambda shape, dtype: softmax_forward_backward_cost(*shape, dtype),
    backward=True,
    grads=("x",),
    implementations=lambda impls=None, *, cuda_graphs=False: peers.softmax_implementations(impls, cuda_graphs=False),
    baselines={},
)
"""Softmax forward + backward (one training step), checked on y and dx; no reduce-overhead rows
(see SWIGLU_FORWARD_BACKWARD)."""

ATTENTION_HEADS, ATTENTION_KV_HEADS, ATTENTION_HEAD_DIM = 32, 8, 128  # Llama-3-8B
ATTENTION_SHAPES = tuple((4, ATTENTION_HEADS, n, ATTENTION_HEAD_DIM, causal) for causal in (0, 1)
                         for n in (1024, 2048, 4096, 8192, 16384))  # fmt: skip
ATTENTION_QUICK_SHAPES = ((4, ATTENTION_HEADS, 2048, ATTENTION_HEAD_DIM, 1),)
ATTENTION_DECODE_SHAPES = tuple((b, ATTENTION_HEADS, ATTENTION_KV_HEADS, nk, ATTENTION_HEAD_DIM)
                                for b in (1, 8, 32, 64) for nk in (1024, 4096, 8192, 32768))  # fmt: skip
ATTENTION_DECODE_QUICK_SHAPES = ((1, ATTENTION_HEADS, ATTENTION_KV_HEADS, 8192, ATTENTION_HEAD_DIM),)
ORACLE_CHUNK_BYTES = 2 * 2**30


def attention_oracle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """The float64 reference at model sizes, a chunk of queries at a time (all of S at N = 16K
    would take 275 GB in float64): the chunk ``[a, a + c)`` of ``Nq`` queries against the first
    ``a + c + Nk - Nq`` keys has the same bottom-right causal mask as the whole."""
    B, H, Nq, _ = q.shape
    Nk = k.shape[2]
    rows = max(1, ORACLE_CHUNK_BYTES // (8 * H * max(Nk, 1)))
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    for b in range(B):
        for a in range(0, Nq, rows):
            c = min(rows, Nq - a)
            keys = max(0, min(Nk, a + c + Nk - Nq)) if causal else Nk
            qs, ks, vs = q[b : b + 1, :, a : a + c], k[b : b + 1, :, :keys], v[b : b + 1, :, :keys]
            out[b : b + 1, :, a : a + c] = flash_attention_ref(qs, ks, vs, causal, q.shape[-1] ** -0.5, upcast=True)[0]
    return out


def attention_prefill_inputs(shape: tuple, dtype: torch.dtype, device: str) -> Inputs:
    """q, k, v [B, H, N, D] of unit variance, and the causal flag."""
    b, h, n, d, causal = shape
    return {**{name: torch.randn(b, h, n, d, device=device, dtype=dtype) for name in "qkv"}, "causal": bool(causal)}


def attention_decode_inputs(shape: tuple, dtype: torch.dtype, device: str) -> Inputs:
    """One query per head ``q [B, Hq, 1, D]`` against a KV cache ``[B, Hkv, Nk, D]``; not causal
    (a single last query sees every key under either alignment; SDPA's is_causal is top-left)."""
    b, hq, hkv, nk, d = shape
    return {"q": torch.randn(b, hq, 1, d, device=device, dtype=dtype), "k": torch.randn(b, hkv, nk, d, device=device, dtype=dtype),
            "v": torch.randn(b, hkv, nk, d, device=device, dtype=dtype), "causal": False}  # fmt: skip


ATTENTION_PREFILL = OpSpec(
    suite="attention",
    op="flash-attention",
    shapes=ATTENTION_SHAPES,
    quick_shapes=ATTENTION_QUICK_SHAPES,
    make_inputs=attention_prefill_inputs,
    call=lambda fn, inputs: fn(inputs["q"], inputs["k"], inputs["v"], inputs["causal"]),
    reference=attention_oracle,
    cost=lambda shape, dtype: attention_prefill_cost(*shape[:4], bool(shape[4]), dtype),
    implementations=peers.attention_implementations,
    routed_op="flash_attention",
    device_time=True,
    sixteen_bit_only=True,
    peak_memory=True,
)
"""FlashAttention-2 forward at prefill (B = 4, H = 32, D = 128, N = 1K-16K, causal and not; the
shape's last entry is the causal flag): ours vs HF's eager attention (where its scores fit) and
SDPA's FlashAttention-2 and cuDNN backends; TFLOP/s as a fraction of the matmul rate, and the
memory one call allocates."""

ATTENTION_DECODE = dataclasses.replace(
    ATTENTION_PREFILL,
    suite="attention-decode",
    op="flash-decoding",
    shapes=ATTENTION_DECODE_SHAPES,
    quick_shapes=ATTENTION_DECODE_QUICK_SHAPES,
    make_inputs=attention_decode_inputs,
    cost=lambda shape, dtype: attention_decode_cost(*shape, dtype),
)
"""Decode attention (one query per head, 32 query heads over 8 KV heads, D = 128, B = 1-64, a KV
cache of 1K-32K): ours (split-KV) vs eager and SDPA's backends; bytes are K and V read once, so
the fraction of the copy bandwidth is the fraction of a read-only stream's floor."""

ATTENTION_BWD_SHAPES = tuple((4, ATTENTION_HEADS, n, ATTENTION_HEAD_DIM, causal) for causal in (0, 1) for n in (1024, 2048, 4096, 8192))
ATTENTION_BWD_QUICK_SHAPES = ((4, ATTENTION_HEADS, 2048, ATTENTION_HEAD_DIM, 1),)


def attention_step_inputs(shape: tuple, dtype: torch.dtype, device: str) -> Inputs:
    """:func:`attention_prefill_inputs` and the output's gradient ``dy``."""
    return {**attention_prefill_inputs(shape, dtype, device), "dy": torch.randn(*shape[:4], device=device, dtype=dtype)}


class _AttentionOracle(torch.autograd.Function):
    """The float64 training step's oracle at model sizes: the forward is :func:`attention_oracle`
    (query chunks), the backward :func:`~tritonforge.reference.flash_attention_bwd_ref` a batch row
    at a time (it recomputes ``P``), so that no more than one row's ``Nq x Nk`` matrices are ever
    alive; autograd through the reference would keep every chunk's."""

    @staticmethod
    def forward(ctx, q, k, v, causal):
        ctx.save_for_backward(q, k, v)
        ctx.causal = causal
        return attention_oracle(q, k, v, causal)

    @staticmethod
    def backward(ctx, do):
        q, k, v = ctx.saved_tensors
        grads = [torch.empty_like(t) for t in (q, k, v)]
        for b in range(q.shape[0]):
            row = (t[b : b + 1] for t in (do, q, k, v))
            for grad, part in zip(grads, flash_attention_bwd_ref(*row, ctx.causal, q.shape[-1] ** -0.5, upcast=True)):
                grad[b : b + 1] = part
        return (*grads, None)


ATTENTION_FORWARD_BACKWARD = dataclasses.replace(
    ATTENTION_PREFILL,
    suite="attention-bwd",
    op="flash-attention-fwd-bwd",
    shapes=ATTENTION_BWD_SHAPES,
    quick_shapes=ATTENTION_BWD_QUICK_SHAPES,
    make_inputs=attention_step_inputs,
    reference=_AttentionOracle.apply,
    cost=lambda shape, dtype: attention_forward_backward_cost(*shape[:4], bool(shape[4]), dtype),
    backward=True,
    grads=("q", "k", "v"),
)
"""FlashAttention-2 forward + backward (one training step) at prefill (B = 4, H = 32, D = 128,
N = 1K-8K, causal and not), checked on O and dq, dk, dv against the float64 oracle: ours vs HF's
eager attention (where its scores fit) and SDPA's FlashAttention-2 and cuDNN backends; TFLOP/s
counted as FlashAttention's papers do (3.5 times the forward), and the memory one step allocates."""

OP_SPECS = {
    spec.suite: spec
    for spec in (AXPY, RMSNORM_FORWARD, RMSNORM_FORWARD_BACKWARD, SWIGLU_FORWARD, SWIGLU_FORWARD_BACKWARD, SWIGLU_FRONT,
                 SOFTMAX_FORWARD, SOFTMAX_FORWARD_BACKWARD, ATTENTION_PREFILL, ATTENTION_DECODE, ATTENTION_FORWARD_BACKWARD)
}  # fmt: skip
"""Every op suite, by name."""


# ----------------------------------------------------------------------------------------------
# Profile: which CUDA kernels one eager HF-Llama RMSNorm launches
# ----------------------------------------------------------------------------------------------

PROFILE_METHOD = (
    "torch.profiler (CPU + CUDA activities, record_shapes=True) around one call after a warm-up "
    "call. kernel_count = CUDA device events. hbm_passes = kernels launched by an aten op that "
    "has an M×N input (such a kernel reads the whole tensor from memory at least once, and the "
    "elementwise ones also write one); kernels not launched through an aten op (Triton kernels) "
    "are counted in kernel_count only."
)


def summarize_kernels(events: Iterable, tensor_numel: int) -> dict:
    """Count device kernels and estimate full-tensor memory passes from profiler events.

    ``events`` are ``torch.profiler`` FunctionEvents (or anything with ``name``,
    ``device_type``, ``kernels`` and ``input_shapes``).
    """
    events = list(events)
    device_types = (torch.autograd.DeviceType.CUDA,)
    kernels = [e.name for e in events if e.device_type in device_types]
    passes = mapped = 0
    for event in events:
        launched = getattr(event, "kernels", None) or []
        if event.device_type in device_types or not launched:
            continue
        mapped += len(launched)
        if any(shape_numel(shape) == tensor_numel for shape in (event.input_shapes or [])):
            passes += len(launched)
    return {
        "kernel_count": len(kernels),
        "kernels": kernels,
        "hbm_passes": passes if mapped else None,
        "kernels_mapped_to_aten_ops": mapped,
    }


def shape_numel(shape) -> Optional[int]:
    if isinstance(shape, (list, tuple)) and shape and all(isinstance(s, int) for s in shape):
        return math.prod(shape)
    return None


def profile_one_call(fn: Callable[[], object]) -> list:
    """The profiler events of one call of ``fn`` (CPU ops with their shapes, and CUDA kernels)."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    fn()  # warm-up: lazy initialisation and first-call allocations stay out of the trace
    if on_gpu:
        torch.cuda.synchronize()
    with profile(activities=activities, record_shapes=True) as prof:
        fn()
        if on_gpu:
            torch.cuda.synchronize()
    return list(prof.events())


def run_profile_eager_rmsnorm(ceilings, *, dtypes=None, shapes=None, impls=None, quick=False, device="cuda", timer=None) -> list[dict]:
    """Kernels launched by one RMSNorm forward (bf16, 4096×4096): HF eager, F.rms_norm, ours.

    ``impls`` may add torch.compile or liger; ``dtypes`` and ``shapes`` replace the defaults
    (only the first of each is profiled).
    """
    dtype = (dtypes or default_dtypes(device, quick=True))[0]
    m, n = (shapes or [PROFILE_SHAPE])[0]
    x, weight = rmsnorm_inputs(m, n, dtype, device)
    rows = []
    for impl, make in peers.rmsnorm_implementations(impls or ("tritonforge", "hf-eager", "F.rms_norm")).items():
        row = make_row("profile-eager-rmsnorm", "rmsnorm", impl, dtype, [m, n], method=PROFILE_METHOD)
        if isinstance(make, str):
            rows.append(unavailable(row, make))
            continue
        try:
            events = profile_one_call(functools.partial(make(), x, weight, RMSNORM_EPS))
        except Exception as exc:  # noqa: BLE001
            row.update(status="error", note=describe_exception(exc))
        else:
            row.update(status="ok", **summarize_kernels(events, m * n))
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------------
# A run: the ceilings, then the suites, with where and when they were measured
# ----------------------------------------------------------------------------------------------


def run_suite(
    suite: str,
    *,
    dtypes: Optional[Sequence[torch.dtype]] = None,
    shapes: Optional[Sequence[tuple]] = None,
    impls: Optional[Sequence[str]] = None,
    quick: bool = False,
    command: Optional[str] = None,
) -> Results:
    """Measure the ceilings, then ``suite`` (or every suite for ``"all"``), on the CUDA GPU.

    ``dtypes``, ``shapes`` and ``impls`` narrow the suite (None: its defaults); ``command`` is
    recorded in the metadata (default: this call, written out).
    """
    if not torch.cuda.is_available():
        raise RuntimeError(no_gpu_message())
    timer = do_bench_timer(quick)
    names = [name for name in SUITES if name != "ceilings"] if suite == "all" else [suite]
    ceiling_dtypes = dtypes if suite == "ceilings" else None
    rows = run_ceilings(dtypes=ceiling_dtypes, quick=quick, timer=timer)
    ceilings = Ceilings.from_rows(rows)
    narrowed = dict(dtypes=dtypes, shapes=shapes, impls=impls, quick=quick, timer=timer)
    for name in names:
        if name == "ceilings":
            continue
        if name == "profile-eager-rmsnorm":
            rows += run_profile_eager_rmsnorm(ceilings, **narrowed)
        else:
            rows += run_op_suite(OP_SPECS[name], ceilings, device_timer=device_time_us, **narrowed)
    command = command or f"tritonforge.bench.run_suite({suite!r}, quick={quick})"
    metadata = collect_metadata(suite, ceilings, timer, quick=quick, command=command)
    return Results(metadata=metadata, rows=rows, live=True)


# ----------------------------------------------------------------------------------------------
# The simulated run (tests only): the shape of a quick run on a GPU this machine does not have
# ----------------------------------------------------------------------------------------------

SIMULATED_SLOWDOWN = {"tritonforge": 1.2, "hf-eager": 6.0}
"""Made-up times of a simulated run: each row takes this multiple of its copy-bandwidth floor
(1.5 for an implementation not named here). Nothing reads meaning into them; they only have to be
positive and finite so that every plot and table of a chapter's live branch draws."""


def simulated_run(suite: str, sim: simulation.SimulatedDevice) -> Results:
    """What ``run_suite(suite, quick=True)`` would return on ``sim``'s GPU, with made-up numbers.

    The same rows as a real quick run there: the ceilings of :func:`run_ceilings` (the copy and the
    matmul of each dtype the device measures: float16 only on a T4), every (dtype, shape,
    implementation) of the op suites with the device's quick dtypes (:func:`default_dtypes`:
    float16 on a T4), the rows that are unavailable here marked so (Liger not installed), and
    metadata naming the device with ``simulated: True`` (the plots then say SIMULATED). The
    numbers come from ``sim.copy_gbps``/``sim.matmul_tflops`` and :data:`SIMULATED_SLOWDOWN`."""
    device = "cuda"  # what a real run would ask for; nothing is allocated
    with simulation.simulate(sim.key):
        half = default_dtypes(device, quick=True)
    copy = make_row("ceilings", "copy", "torch.Tensor.copy_", torch.float32, [COPY_QUICK_BYTES // 4])
    cost = copy_cost(COPY_QUICK_BYTES // 4, torch.float32)
    copy.update(bytes=cost.bytes, formula=cost.formula, status="ok", us=time_floor_us(cost.bytes, gbps=sim.copy_gbps))
    rows = [add_throughput(copy, None)]
    for dtype in half:
        matmul = make_row("ceilings", "matmul", "torch.matmul", dtype, [MATMUL_SIZE] * 3)
        flops = matmul_cost(MATMUL_SIZE, MATMUL_SIZE, MATMUL_SIZE).flops
        matmul.update(flops=flops, formula="FLOPs = 2·M·N·K", status="ok",
                      us=time_floor_us(flops=flops, tflops=sim.matmul_tflops[dtype_name(dtype)]))  # fmt: skip
        rows.append(add_throughput(matmul, None))
    ceilings = Ceilings.from_rows(rows)
    names = [name for name in SUITES if name != "ceilings"] if suite == "all" else [suite]
    for name in names:
        spec = OP_SPECS.get(name)
        if spec is None:
            continue  # ceilings (above) or the profile, which chapters read from the record
        for dtype in half:
            for shape in spec.quick_shapes:
                cost = spec.cost(tuple(shape), dtype)
                for impl, make in spec.impl_table(None, device).items():
                    row = make_row(spec.suite, spec.op, impl, dtype, spec.row_shape(tuple(shape)), bytes=cost.bytes,
                                   flops=cost.flops, formula=cost.formula, ceiling=cost.ceiling)  # fmt: skip
                    if isinstance(make, str):
                        rows.append(unavailable(row, make))
                        continue
                    us = time_floor_us(cost.bytes, gbps=sim.copy_gbps) * SIMULATED_SLOWDOWN.get(impl, 1.5)
                    row.update(status="ok", us=us, max_rel_err=0.0, note="simulated: made-up time")
                    if spec.device_time and impl not in peers.CUDA_GRAPH_IMPLS:
                        row["device_us"] = us * 0.9
                    rows.append(add_throughput(row, ceilings))
                for baseline in spec.baselines:  # the same-size copy
                    copied = copy_cost(math.prod(shape), dtype)
                    copy_row = make_row(spec.suite, "copy", baseline, dtype, list(shape), bytes=copied.bytes, formula=copied.formula,
                                        ceiling="copy", status="ok", us=time_floor_us(copied.bytes, gbps=sim.copy_gbps),
                                        note="simulated: made-up time")  # fmt: skip
                    rows.append(add_throughput(copy_row, ceilings))
    major, minor = sim.capability
    metadata = {
        "suite": suite,
        "suites": ["ceilings"] if suite == "ceilings" else ["ceilings", *names],
        "device": sim.name,
        "compute_capability": f"{major}.{minor}",
        "torch": torch.__version__,
        "triton": getattr(runtime._triton.triton, "__version__", None),
        "liger": peers.liger_version(),
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": f"tritonforge.bench.simulated_run({suite!r}) ({simulation.SIMULATE_ENV}={sim.key})",
        "git_commit": None,
        "quick": True,
        "simulated": True,
        "ceilings": ceilings.to_dict(),
    }
    return Results(metadata=metadata, rows=rows, live=True)
