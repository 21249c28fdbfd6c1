"""Swap tritonforge's kernels into a Hugging Face ``transformers`` model of the Llama family.

:func:`patch` changes one model instance (no class is touched, so other models stay as they were):

- every ``*RMSNorm`` module (``weight``, ``variance_epsilon``) computes :func:`tritonforge.rms_norm`;
- the attention modules of Llama, Mistral and Qwen2 (without a sliding window) rotate q and k with
  :func:`tritonforge.rope_qk`, one launch for both;
- every ``*MLP`` with ``gate_proj``, ``up_proj``, ``down_proj`` (no bias) and a SiLU activation
  computes ``down_proj(swiglu_mlp_front(x, gate_proj.weight.T, up_proj.weight.T))``: both
  projections and the activation in one kernel, the weights read in place;
- attention runs :func:`tritonforge.flash_attention`'s kernels, registered with ``transformers`` as
  the attention implementation ``"tritonforge"`` (prefill: the tiled kernel; decode: the split-KV
  path), with a mask function of its own (:func:`mask_function`) that hands the layers the mask's
  structure instead of a dense mask: a key-padding mask (left or right padding), a static cache's
  filled length, packed sequences. A call the kernels cannot serve (a sliding window, a custom
  mask pattern, a dense mask passed by hand, dropout, softcapping) takes ``transformers``' SDPA
  implementation as a routed fallback: warned once, an error in strict mode.

Tested with Llama, Mistral and Qwen2 models built from configs (nothing downloaded). ``transformers``
is an optional dependency: importing this module does not import it; :func:`patch` does.
"""

from __future__ import annotations

import types
from typing import NamedTuple, Optional

import torch

from tritonforge import runtime
from tritonforge.ops.attention import attend, mask_ids
from tritonforge.ops.rmsnorm import rms_norm
from tritonforge.ops.rope_pair import rope_qk
from tritonforge.ops.swiglu import swiglu
from tritonforge.ops.swiglu_front import front_is_fused, swiglu_mlp_front

ATTN_IMPLEMENTATION = "tritonforge"
ATTENTION_OP = "flash_attention"


def _rms_norm_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    return rms_norm(hidden_states, self.weight, self.variance_epsilon)


def _mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
    if x.dtype == self.gate_proj.weight.dtype and front_is_fused(x.dtype, x.numel() // x.shape[-1]):
        return self.down_proj(swiglu_mlp_front(x, self.gate_proj.weight.T, self.up_proj.weight.T))
    # float32 or many rows on a GPU, autocast and mixed dtypes: cuBLAS, then ours
    return self.down_proj(swiglu(self.gate_proj(x), self.up_proj(x)))


class Mask(NamedTuple):
    """What the ``"tritonforge"`` mask function hands every attention layer in place of a dense
    ``[B, 1, Nq, Nk]`` mask: the pattern's structure, built once per forward on the device.

    ``kv_lens [B]`` (or None: every key of the buffer) ends each row's keys, and the causal diagonal
    ends at its last key (a static cache's filled prefix); ``key_ids [B, Nk]`` and ``query_ids
    [B, Nq]`` (int32, or None) are the kernels' padding and packed-sequence ids
    (:func:`tritonforge.ops.attention.mask_ids`). ``unsupported`` names a pattern the kernels cannot
    serve (a sliding window, a custom ``and``/``or`` mask, bidirectional attention): then
    ``sdpa_kwargs`` rebuilds the mask ``transformers``' SDPA implementation would have had."""

    kv_lens: Optional[torch.Tensor]
    key_ids: Optional[torch.Tensor]
    query_ids: Optional[torch.Tensor]
    unsupported: Optional[str]
    sdpa_kwargs: Optional[dict]

    @property
    def ndim(self) -> int:
        """Not 2, so that ``transformers`` takes a built mask for a prepared one: ``generate`` builds
        the masks of a static cache before the (compiled) forward and passes them in, and the
        forward's ``create_causal_mask`` hands them to :func:`mask_function`, which returns them."""
        return 4


def mask_function(batch_size: int, q_length: int, kv_length: int, q_offset=0, kv_offset: int = 0, mask_function=None,
                  attention_mask: Optional[torch.Tensor] = None, **kwargs) -> Optional[Mask]:  # fmt: skip
    """The ``"tritonforge"`` entry of ``transformers``' mask interface (called once per forward by
    ``create_causal_mask`` and its kin). Plain causal attention with no padding: ``None``, as SDPA's.
    Otherwise a :class:`Mask`; nothing is read back to the host while compiling."""
    from transformers.masking_utils import causal_mask_function

    if isinstance(attention_mask, Mask):  # built before this forward (generate with a static cache)
        return attention_mask
    sdpa_kwargs = dict(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset, kv_offset=kv_offset,
                       mask_function=mask_function, attention_mask=attention_mask, **kwargs)  # fmt: skip
    segments = None
    if mask_function is not causal_mask_function:
        segments = _packed_segments(mask_function)
        if segments is None:
            return Mask(None, None, None, "a mask pattern other than causal, padding and packed sequences", sdpa_kwargs)
    device = kwargs.get("device") or (attention_mask.device if attention_mask is not None else None)
    kv_end = q_offset + q_length - kv_offset  # the last query's position + 1, counted from key 0 of the buffer
    kv_lens = None
    if isinstance(kv_end, torch.Tensor) or kv_end != kv_length:  # a static cache: its buffer is longer than what is filled
        kv_lens = torch.as_tensor(kv_end, device=device).to(torch.int32).reshape(1).repeat(batch_size)
    keep = None
    if attention_mask is not None:
        keep = attention_mask[:, kv_offset : kv_offset + kv_length].to(torch.bool)
        if keep.shape[1] < kv_length:  # a static cache's mask covers what is filled: the rest is no key
            keep = torch.nn.functional.pad(keep, (0, kv_length - keep.shape[1]))
        if not _tracing() and bool(keep.all()):  # eager: one read per forward (transformers' SDPA mask reads it too)
            keep = None
    if keep is None and segments is None:
        return None if kv_lens is None else Mask(kv_lens, None, None, None, None)
    key_ids, query_ids = mask_ids(keep, segments)
    return Mask(kv_lens, key_ids, query_ids, None, None)


def _tracing() -> bool:
    if torch.compiler.is_compiling():
        return True
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _packed_segments(fn) -> Optional[torch.Tensor]:
    """Packed sequences' ids ``[B, N]`` when ``fn`` is what ``create_causal_mask`` builds for them
    (causal on positions remapped per sequence, and the sequences' ids equal), else ``None``."""
    if getattr(fn, "__qualname__", "") != "and_masks.<locals>.and_mask":
        return None
    parts = _closure(fn).get("mask_functions", ())
    names = sorted(getattr(part, "__qualname__", "") for part in parts)
    if names != ["packed_sequence_mask_function.<locals>.inner_mask", "remap_positions_for_packed_sequence.<locals>.inner_mask"]:
        return None
    from transformers.masking_utils import causal_mask_function

    remap = next(p for p in parts if p.__qualname__.startswith("remap"))
    if _closure(remap).get("mask_function") is not causal_mask_function:
        return None
    ids = _closure(next(p for p in parts if p.__qualname__.startswith("packed"))).get("packed_sequence_mask")
    return ids if isinstance(ids, torch.Tensor) else None


def _closure(fn) -> dict:
    cells = getattr(fn, "__closure__", None) or ()
    return {name: cell.cell_contents for name, cell in zip(fn.__code__.co_freevars, cells)}


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask, dropout: float = 0.0, scaling: Optional[float] = None,
                      is_causal: Optional[bool] = None, **kwargs):  # fmt: skip
    """The ``"tritonforge"`` attention implementation: ``transformers``' attention interface
    (``query [B, Hq, Nq, D]``, ``key``/``value [B, Hkv, Nk, D]``; returns ``([B, Nq, Hq, D], None)``).
    ``attention_mask``: what :func:`mask_function` built (``None`` or a :class:`Mask`); any other
    mask (a 4-D tensor passed by hand, an additive bias) goes to SDPA, loudly."""
    mask = attention_mask if isinstance(attention_mask, Mask) else None
    reason = _unsupported(module, attention_mask, dropout, kwargs)
    if reason is not None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        if mask is not None:  # the dense mask SDPA would have had
            from transformers.masking_utils import sdpa_mask

            attention_mask = None if mask.sdpa_kwargs is None else sdpa_mask(**mask.sdpa_kwargs)
        return runtime.dispatch_reference(
            ATTENTION_OP, "unsupported", f"transformers attention: {reason}; transformers' SDPA implementation serves it",
            lambda: sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                           is_causal=is_causal, **kwargs),
        )  # fmt: skip
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    q_len = query.shape[2]
    scale = query.shape[-1] ** -0.5 if scaling is None else float(scaling)
    if mask is not None:
        o, _ = attend(query, key, value, causal and q_len > 1, scale, mask.kv_lens, mask.key_ids, mask.query_ids)
        return o.transpose(1, 2), None
    # No mask: plain causal attention, bottom-right (queries on top of a DynamicCache see every cached key).
    # A static cache always comes with a Mask (its filled length), so the buffer's empty tail is never read.
    o, _ = attend(query, key, value, causal and q_len > 1, scale)
    return o.transpose(1, 2), None  # [B, Nq, Hq, D]: a view of q's [B, N, H, D] layout when q is one


def _unsupported(module, attention_mask, dropout, kwargs) -> Optional[str]:
    if isinstance(attention_mask, Mask):
        if attention_mask.unsupported:
            return attention_mask.unsupported
    elif attention_mask is not None:
        return "a dense attention mask (a 4-D tensor or an additive bias, not built by the tritonforge mask function)"
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
    """Register ``"tritonforge"`` with ``transformers``' attention and mask interfaces (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTN_IMPLEMENTATION, attention_forward)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, mask_function)


ROTARY_ATTENTION = ("LlamaAttention", "MistralAttention", "Qwen2Attention")
"""Attention classes whose ``forward`` the patch replaces (projections, RoPE, cache, attention,
output projection, as ``transformers`` 5 writes them), so that RoPE rotates q and k in one launch
(:func:`tritonforge.rope_qk`). Others (extra norms on q and k, a sliding window) keep theirs,
with the ``"tritonforge"`` attention implementation inside."""


def _rotary_attention_forward(self, hidden_states: torch.Tensor, position_embeddings=None, attention_mask=None, cache=None,
                              **kwargs):  # fmt: skip
    """``LlamaAttention.forward`` with :func:`tritonforge.rope_qk` for ``apply_rotary_pos_emb`` and
    :func:`attention_forward` called directly (the same steps, one launch for the rotations)."""
    cache = kwargs.pop("past_key_values", None) if cache is None else cache
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    query = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    key = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    value = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    cos, sin = position_embeddings
    query, key = rope_qk(query, key, cos, sin)
    if cache is not None:
        key, value = cache.update(key, value, self.layer_idx, kwargs=kwargs)
    out, _ = attention_forward(self, query, key, value, attention_mask, dropout=self.attention_dropout if self.training else 0.0,
                               scaling=self.scaling, **kwargs)  # fmt: skip
    return self.o_proj(out.reshape(*input_shape, -1).contiguous()), None


def _rotary_attention(module: torch.nn.Module) -> bool:
    if type(module).__name__ not in ROTARY_ATTENTION or hasattr(module, "q_norm") or hasattr(module, "k_norm"):
        return False
    if getattr(module, "sliding_window", None) or getattr(getattr(module, "config", None), "sliding_window", None):
        return False
    return all(hasattr(module, name) for name in ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling", "layer_idx"))


def patch(model: torch.nn.Module) -> dict:
    """Run ``model`` (a ``transformers`` Llama, Mistral or Qwen2 model) through tritonforge's kernels.

    Changes this instance only: its RMSNorm and MLP modules' ``forward``, its attention modules'
    ``forward`` where RoPE can be fused (:data:`ROTARY_ATTENTION`) and its attention
    implementation. Weights are shared, nothing is copied. Returns how many modules of each kind
    were patched (``{"rms_norm": ..., "mlp": ..., "attention": ..., "rope": ...}``); a model with
    none of them is an error.
    """
    register()
    counts = {"rms_norm": 0, "mlp": 0, "attention": 0, "rope": 0}
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
            if _rotary_attention(module):
                module.forward = types.MethodType(_rotary_attention_forward, module)
                counts["rope"] += 1
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
