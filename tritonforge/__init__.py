"""tritonforge: fused Triton kernels for LLM inference, built chapter by chapter in the book.

Import tritonforge *before* triton: on a machine without a CUDA GPU it switches Triton's CPU
interpreter on (``TRITON_INTERPRET=1``), which only works if it happens before ``import triton``.
"""

from tritonforge import _triton  # noqa: F401  (first: decides TRITON_INTERPRET, imports triton)
from tritonforge.environment import environment
from tritonforge.models.hf import patch
from tritonforge.ops.attention import flash_attention
from tritonforge.ops.fused_axpy import axpy
from tritonforge.ops.rmsnorm import rms_norm
from tritonforge.ops.rope import rope
from tritonforge.ops.rope_pair import rope_qk
from tritonforge.ops.softmax import softmax
from tritonforge.ops.swiglu import swiglu
from tritonforge.ops.swiglu_front import swiglu_mlp_front
from tritonforge.ops.teaching import add_2d, program_map, vector_add
from tritonforge.runtime import (
    FallbackError,
    FallbackWarning,
    Route,
    is_strict,
    last_path,
    last_route,
    strict,
)

__version__ = "0.1.0"

__all__ = [
    "axpy",
    "vector_add",
    "add_2d",
    "program_map",
    "rms_norm",
    "swiglu",
    "softmax",
    "flash_attention",
    "rope",
    "rope_qk",
    "patch",
    "swiglu_mlp_front",
    "environment",
    "last_path",
    "last_route",
    "strict",
    "is_strict",
    "Route",
    "FallbackError",
    "FallbackWarning",
]
