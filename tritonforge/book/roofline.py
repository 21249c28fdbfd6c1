r"""The roofline model: predict an op's time from its bytes, its FLOPs and two ceilings.

An op that must move :math:`B` bytes through device memory and perform :math:`F` floating-point
operations cannot finish faster than either

.. math:: t_\text{mem} = \frac{B}{\beta} \qquad t_\text{math} = \frac{F}{\pi}

where :math:`\beta` is the memory bandwidth and :math:`\pi` the arithmetic rate. The larger of
the two is the prediction (the floor a perfect kernel reaches); which one is larger says whether
the op is **memory-bound** or **compute-bound**. Equivalently, with the *arithmetic intensity*
:math:`I = F / B` (FLOPs per byte), the attainable rate is :math:`\min(\pi, \beta I)`; the
*ridge point* :math:`\pi / \beta` is the intensity where the two roofs meet.

FLOP-counting convention used throughout the book: every add, multiply, max, exp, divide and
rsqrt on one element is one FLOP; per-row work (one rsqrt per row) is ignored next to per-element
work. Byte counts are the *minimum* traffic: each input read once, each output written once.

The device table holds datasheet numbers (cited in the book's references); the measured
ceilings of a real run come from :mod:`tritonforge.bench` and replace them when available. The
cost formulas and the time floor itself are :mod:`tritonforge.bench.costs`, shared with the
harness and the exercises; this module adds the ops a decoder has that the harness does not time
yet, the datasheets, and the prediction.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from tritonforge.bench.costs import Cost, elem_size, matmul_flops, rmsnorm_forward_cost, time_floor_us


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """Datasheet figures for one GPU (dense rates, no sparsity)."""

    name: str
    compute_capability: str
    sms: int
    hbm_gb: float  # device memory, GB
    hbm_gbps: float  # memory bandwidth, 1e9 B/s
    l2_mb: float  # L2 cache, MB
    smem_per_sm_kb: int  # largest shared memory one SM can give its blocks, KB
    registers_per_sm_kb: int  # register file per SM, KB
    fp32_tflops: float  # plain (non-tensor-core) fp32 rate
    fp16_tensor_tflops: float  # dense fp16 tensor-core rate with fp32 accumulation
    bf16_tensor_tflops: Optional[float]  # None where the GPU has no bf16
    source: str  # citation key in references.bib

    def peak_tflops(self, dtype: torch.dtype) -> float:
        """The compute roof for matmul-like work in ``dtype``."""
        if dtype == torch.float16:
            return self.fp16_tensor_tflops
        if dtype == torch.bfloat16:
            if self.bf16_tensor_tflops is None:
                raise ValueError(f"{self.name} has no bf16 support; use float16")
            return self.bf16_tensor_tflops
        return self.fp32_tflops

    @property
    def ridge_point_fp16(self) -> float:
        """FLOP/byte where the fp16 tensor-core roof meets the memory roof (matmul-like work)."""
        return self.fp16_tensor_tflops * 1e12 / (self.hbm_gbps * 1e9)

    @property
    def ridge_point_fp32(self) -> float:
        """FLOP/byte where the plain fp32 (CUDA-core) roof meets the memory roof: the ridge of
        elementwise and reduction ops, which compute in float32 without tensor cores."""
        return self.fp32_tflops * 1e12 / (self.hbm_gbps * 1e9)


# Datasheet values (NVIDIA product briefs/datasheets; see references.bib). The T4 "fp16 tensor"
# rate is NVIDIA's mixed-precision figure. SXM parts for A100, H100, H200.
DEVICES: dict[str, DeviceSpec] = {
    "T4": DeviceSpec("T4", "7.5", 40, 16, 320, 4, 64, 256, 8.1, 65, None, "nvidia2019t4"),
    "A100": DeviceSpec("A100 SXM 80GB", "8.0", 108, 80, 2039, 40, 164, 256, 19.5, 312, 312, "nvidia2022a100"),
    "H100": DeviceSpec("H100 SXM", "9.0", 132, 80, 3350, 50, 228, 256, 67, 989, 989, "nvidia2023h100"),
    "H200": DeviceSpec("H200 SXM", "9.0", 132, 141, 4800, 50, 228, 256, 67, 989, 989, "nvidia2023h200"),
}


def datasheet_key(device_name: Optional[str]) -> Optional[str]:
    """The :data:`DEVICES` key of a GPU named as the driver names it ("NVIDIA H200" -> "H200",
    "Tesla T4" -> "T4"), or ``None`` for a GPU the table does not hold (or no GPU)."""
    name = (device_name or "").upper()
    for key in DEVICES:
        if key in name.replace("-", " ").split() or f" {key}" in f" {name}":
            return key
    return None


def datasheet_for(device_name: Optional[str]) -> Optional[DeviceSpec]:
    """The datasheet of the GPU named ``device_name`` (a results file's ``metadata["device"]`` or
    ``environment().gpu``), or ``None``: a measurement is compared with its own device's
    datasheet, never with another's."""
    key = datasheet_key(device_name)
    return DEVICES[key] if key else None


def percent_of_datasheet(value: float, device_name: Optional[str], what: str, dtype: str = "float32") -> str:
    """"(93% of the H200 SXM datasheet)" for a copy (``what="bandwidth"``) or matmul rate
    (``what="matmul"``, in ``dtype``) measured on ``device_name``; says so when the book has no
    datasheet for that GPU or the datasheet has no rate for the dtype."""
    spec = datasheet_for(device_name)
    if spec is None:
        return f"(no datasheet for {device_name or 'this device'} in the book's table)"
    if what == "bandwidth":
        roof = spec.hbm_gbps
    else:
        dt = getattr(torch, dtype)
        if dt == torch.bfloat16 and spec.bf16_tensor_tflops is None:
            return f"(the {spec.name} has no bf16 rate)"
        roof = spec.peak_tflops(dt)
    return f"({value / roof:.0%} of the {spec.name} datasheet)"


# ----------------------------------------------------------------------------------------------
# What each op of a decoder must move and compute
# ----------------------------------------------------------------------------------------------


def rmsnorm_cost(m: int, n: int, dtype: torch.dtype) -> Cost:
    """RMSNorm forward over an [M, N] activation (shared with the benchmark harness)."""
    return rmsnorm_forward_cost(m, n, dtype)


def swiglu_cost(m: int, n: int, dtype: torch.dtype) -> Cost:
    """silu(gate) * up on [M, N]: sigmoid (exp, add, divide) + 2 multiplies = 5 FLOPs/element."""
    e = elem_size(dtype)
    return Cost(3 * m * n * e, 5 * m * n, "bytes = 3·M·N·elem (read gate, read up, write out); FLOPs = 5·M·N", "copy")


def softmax_cost(m: int, n: int, dtype: torch.dtype) -> Cost:
    """Row softmax on [M, N]: max, subtract, exp, sum, divide = 5 FLOPs/element."""
    e = elem_size(dtype)
    return Cost(2 * m * n * e, 5 * m * n, "bytes = 2·M·N·elem (read x, write y); FLOPs = 5·M·N", "copy")


def attention_cost(batch_heads: int, seq: int, head_dim: int, dtype: torch.dtype, *, fused: bool = True) -> Cost:
    """Non-causal attention forward, per (batch·heads): S = QKᵀ, P = softmax(S), O = PV.

    FLOPs = 4·BH·N²·D (two matmuls; the softmax's 5·N² is small next to them when D ≥ 64).
    Fused (FlashAttention): bytes = 4·BH·N·D·elem (read Q, K, V; write O).
    Unfused: also write S, read S, write P, read P: + 4·BH·N²·elem.
    """
    e = elem_size(dtype)
    flops = 4 * batch_heads * seq * seq * head_dim
    qkvo = 4 * batch_heads * seq * head_dim * e
    if fused:
        return Cost(qkvo, flops, "bytes = 4·BH·N·D·elem (Q, K, V, O); FLOPs = 4·BH·N²·D", "matmul")
    return Cost(qkvo + 4 * batch_heads * seq * seq * e, flops, "bytes = (4·BH·N·D + 4·BH·N²)·elem; FLOPs = 4·BH·N²·D", "matmul")


def matmul_cost(m: int, n: int, k: int, dtype: torch.dtype) -> Cost:
    """[M, K] @ [K, N]: read A and B once, write C once."""
    e = elem_size(dtype)
    return Cost((m * k + k * n + m * n) * e, matmul_flops(m, n, k), "bytes = (M·K + K·N + M·N)·elem; FLOPs = 2·M·N·K", "matmul")


def intensity(cost: Cost) -> float:
    """Arithmetic intensity, FLOPs per byte."""
    return cost.flops / cost.bytes


@dataclasses.dataclass(frozen=True)
class Prediction:
    """The roofline's answer for one op on one device."""

    memory_us: float
    math_us: float
    intensity: float
    ridge: float

    @property
    def us(self) -> float:
        return max(self.memory_us, self.math_us)

    @property
    def bound(self) -> str:
        return "memory-bound" if self.memory_us >= self.math_us else "compute-bound"


def predict(cost: Cost, *, gbps: float, tflops: float) -> Prediction:
    """Time floor of ``cost`` on a device with memory roof ``gbps`` and compute roof ``tflops``."""
    return Prediction(
        memory_us=time_floor_us(cost.bytes, gbps=gbps),
        math_us=time_floor_us(flops=cost.flops, tflops=tflops),
        intensity=intensity(cost),
        ridge=tflops * 1e12 / (gbps * 1e9),
    )


def predict_on(cost: Cost, device: str, dtype: torch.dtype, *, matmul_like: bool) -> Prediction:
    """:func:`predict` with datasheet roofs: tensor-core rate for matmul-like ops, else plain fp32.

    Elementwise and reduction ops run on the ordinary fp32 units (kernels upcast to fp32), so
    their compute roof is the fp32 rate; only matmul-like work reaches the tensor cores.
    """
    spec = DEVICES[device]
    tflops = spec.peak_tflops(dtype) if matmul_like else spec.fp32_tflops
    return predict(cost, gbps=spec.hbm_gbps, tflops=tflops)
