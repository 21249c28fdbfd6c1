"""Swap tritonforge's kernels into a Hugging Face ``transformers`` model of the Llama family.

:func:`patch` changes one model instance (no class is touched, so other models stay as they were):

- every ``*RMSNorm`` module (``weight``, ``variance_epsilon``) computes :func:`tritonforge.rms_norm`;
- every ``*MLP`` with ``gate_proj``, ``up_proj``, ``down_proj`` (no bias) and a SiLU activation
  computes ``down_proj(swiglu_mlp_front(x, gate_proj.weight.T, up_proj.weight.T))``: both
  projections and the activation in one kernel, the weights read in place;
- attention runs :func:`tritonforge.flash_attention`, registered with ``transformers`` as the
  attention implementation ``"tritonforge"`` (prefill: the tiled kernel, bottom-right causal;
  decode: the split-KV path). A call the kernel cannot serve (an attention mask with padding,
  dropout, softcapping, a sliding window) takes ``transformers``' SDPA implementation as a routed
  fallback: warned once, an error in strict mode.

Tested with Llama, Mistral and Qwen2 models built from configs (nothing downloaded). ``transformers``
is an optional dependency: importing this module does not import it; :func:`patch` does.
"""

from __future__ import annotations

import types
from typing import Optional

import torch

from tritonforge import runtime
from tritonforge.ops.attention import flash_attention
from tritonforge.ops.rmsnorm import rms_norm
from tritonforge.ops.swiglu import front_is_fused, swiglu, swiglu_mlp_front

ATTN_IMPLEMENTATION = "tritonforge"
ATTENTION_OP = "flash_attention"


def _rms_norm_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    return rms_norm(hidden_states, self.weight, self.variance_epsilon)


def _mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
    if x.dtype == self.gate_proj.weight.dtype and front_is_fused(x.dtype, x.numel() // x.shape[-1]):
        return self.down_proj(swiglu_mlp_front(x, self.gate_proj.weight.T, self.up_proj.weight.T))
    # float32 or many rows on a GPU, autocast and mixed dtypes: cuBLAS, then ours
    return self.down_proj(swiglu(self.gate_proj(x), self.up_proj(x)))


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: Optional[torch.Tensor], dropout: float = 0.0, scaling: Optional[float] = None,
                      is_causal: Optional[bool] = None, **kwargs):  # fmt: skip
    """The ``"tritonforge"`` attention implementation: ``transformers``' attention interface
    (``query [B, Hq, Nq, D]``, ``key``/``value [B, Hkv, Nk, D]``; returns ``([B, Nq, Hq, D], None)``)."""
    reason = _unsupported(module, attention_mask, dropout, kwargs)
    if reason is not None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return runtime.dispatch_reference(
            ATTENTION_OP, "unsupported", f"transformers attention: {reason}; transformers' SDPA implementation serves it",
            lambda: sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                           is_causal=is_causal, **kwargs),
        )  # fmt: skip
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    q_len, kv_len = query.shape[2], key.shape[2]
    if causal and q_len > 1 and kv_len > q_len:
        # What transformers' SDPA does here: without a mask, more keys than queries at prefill means a
        # static cache's buffer, whose valid keys are the first q_len (top-left causal on those). Queries
        # on top of a filled cache come with a mask instead (tested): the SDPA fallback above serves them.
        key, value = key[:, :, :q_len], value[:, :, :q_len]
    out = flash_attention(query, key, value, causal=causal and q_len > 1, sm_scale=scaling)
    return out.transpose(1, 2), None  # [B, Nq, Hq, D]: a view of q's [B, N, H, D] layout when q is one


def _unsupported(module, attention_mask, dropout, kwargs) -> Optional[str]:
    if attention_mask is not None:
        return "an attention mask (padding, or a pattern other than plain causal)"
    if dropout:
        return "attention dropout"
    for name in ("softcap", "sliding_window", "position_bias", "s_aux"):
        if kwargs.get(name) is not None:
            return name
    if getattr(module, "sliding_window", None):
        return "a sliding window"
    if kwargs.get("output_attentions"):
        return "output_attentions (the kernel never forms the attention weights)"
    return None


def register() -> None:
    """Register ``"tritonforge"`` with ``transformers``' attention and mask interfaces (idempotent).
    Its masks are SDPA's: ``None`` where plain causal attention needs none."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTN_IMPLEMENTATION, attention_forward)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, sdpa_mask)


def patch(model: torch.nn.Module) -> dict:
    """Run ``model`` (a ``transformers`` Llama, Mistral or Qwen2 model) through tritonforge's kernels.

    Changes this instance only: its RMSNorm and MLP modules' ``forward`` and its attention
    implementation. Weights are shared, nothing is copied. Returns how many modules of each kind
    were patched (``{"rms_norm": ..., "mlp": ..., "attention": ...}``); a model with none of them
    is an error.
    """
    register()
    counts = {"rms_norm": 0, "mlp": 0, "attention": 0}
    for module in model.modules():
        name = type(module).__name__
        if name.endswith("RMSNorm") and hasattr(module, "weight") and hasattr(module, "variance_epsilon"):
            module.forward = types.MethodType(_rms_norm_forward, module)
            counts["rms_norm"] += 1
        elif name.endswith("MLP") and _is_swiglu_mlp(module):
            module.forward = types.MethodType(_mlp_forward, module)
            counts["mlp"] += 1
        elif name.endswith("Attention") and hasattr(module, "q_proj"):
            counts["attention"] += 1
    if not any(counts.values()):
        raise ValueError(f"model ({type(model).__name__}) has no RMSNorm, SwiGLU MLP or attention module that tritonforge knows")
    if counts["attention"]:
        model.set_attn_implementation(ATTN_IMPLEMENTATION)
    return counts


def _is_swiglu_mlp(module: torch.nn.Module) -> bool:
    projections = [getattr(module, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    if not all(isinstance(p, torch.nn.Linear) for p in projections):
        return False
    if projections[0].bias is not None or projections[1].bias is not None:
        return False
    act = getattr(module, "act_fn", None)
    return isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation"  # transformers' own SiLU module
