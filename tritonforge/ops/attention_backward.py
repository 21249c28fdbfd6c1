"""FlashAttention's backward (chapter 7): not a kernel here. The gradient is the hand-derived
FlashAttention backward written in PyTorch ops (:func:`tritonforge.reference.flash_attention_bwd_ref`:
it recomputes ``P`` from the saved ``lse``), a routed fallback (warned; an error in strict mode)
with ``Nq·Nk`` memory.

Autograd: the forward (``tritonforge::flash_attention``) saves q, k, v and the masks;
:func:`backward` calls the backward operator ``tritonforge::flash_attention_backward``, or, when
autograd builds a graph of the gradient (``create_graph=True``), the differentiable reference
itself, so that second derivatives are exact. Importing this module registers the autograd
(``tritonforge.ops`` imports it).
"""

from __future__ import annotations

from typing import Optional

import torch

from tritonforge import runtime
from tritonforge.kernel_utils import acc_torch_dtype
from tritonforge.ops.attention import flash_attention_op
from tritonforge.reference import flash_attention_bwd_ref

BACKWARD_OP = "flash_attention_backward"
"""The name :func:`tritonforge.last_path` knows for the backward."""


def _backward_reference(do, dlse, q, k, v, causal, sm_scale, kv_lens=None, key_ids=None, query_ids=None):
    return runtime.dispatch_reference(
        BACKWARD_OP, "no-kernel", "FlashAttention's backward has no Triton kernel here: the hand-derived "
        "backward in PyTorch ops recomputes P from lse (memory B*Hq*Nq*Nk)",
        lambda: flash_attention_bwd_ref(do, q, k, v, causal, sm_scale, dlse=dlse, kv_lens=kv_lens, key_ids=key_ids,
                                        query_ids=query_ids),
    )  # fmt: skip


@torch.library.custom_op("tritonforge::flash_attention_backward", mutates_args=())
def flash_attention_backward_op(do: torch.Tensor, dlse: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                causal: bool, sm_scale: float,
                                kv_lens: Optional[torch.Tensor] = None, key_ids: Optional[torch.Tensor] = None,
                                query_ids: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(dq, dk, dv)``, through the routed reference backward."""
    return tuple(g.contiguous() for g in _backward_reference(do, dlse, q, k, v, causal, sm_scale, kv_lens, key_ids, query_ids))


@flash_attention_backward_op.register_fake
def _(do, dlse, q, k, v, causal, sm_scale, kv_lens=None, key_ids=None, query_ids=None):
    return torch.empty_like(q, memory_format=torch.contiguous_format), k.new_empty(k.shape), v.new_empty(v.shape)


def setup_context(ctx, inputs, output):
    q, k, v, causal, sm_scale, kv_lens, key_ids, query_ids = inputs
    ctx.save_for_backward(q, k, v, kv_lens, key_ids, query_ids)
    ctx.causal, ctx.sm_scale = causal, sm_scale


def backward(ctx, do, dlse):
    q, k, v, *masks = ctx.saved_tensors
    do = torch.zeros_like(q) if do is None else do
    dlse = torch.zeros(q.shape[:3], dtype=acc_torch_dtype(q.dtype), device=q.device) if dlse is None else dlse
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():  # create_graph: differentiable ops
        dq, dk, dv = _backward_reference(do, dlse, q, k, v, ctx.causal, ctx.sm_scale, *masks)
    else:
        dq, dk, dv = flash_attention_backward_op(do, dlse, q, k, v, ctx.causal, ctx.sm_scale, *masks)
    return dq, dk, dv, None, None, None, None, None


flash_attention_op.register_autograd(backward, setup_context=setup_context)
