"""A Llama decoder written out in full (chapter 9), runnable two ways over the same weights.

One decoder layer is

.. math::

    h = x + W_o\\,\\mathrm{attn}(\\mathrm{rope}(W_q n), \\mathrm{rope}(W_k n), W_v n), \\quad n = \\mathrm{rmsnorm}(x)

    y = h + W_\\text{down}\\big(\\mathrm{silu}(W_\\text{gate} m) \\odot W_\\text{up} m\\big), \\quad m = \\mathrm{rmsnorm}(h)

with grouped-query attention (``heads`` query heads over ``kv_heads`` key/value heads), causal,
and rotary position embeddings (the ``rotate_half`` form Hugging Face uses). :class:`Llama`
holds the weights once; ``forward(..., backend="torch")`` computes every step with PyTorch (the
Hugging Face formulas: the parity reference), ``backend="tritonforge"`` with the package's
kernels (:func:`tritonforge.rms_norm`, :func:`tritonforge.rope`, :func:`tritonforge.flash_attention`,
:func:`tritonforge.swiglu_mlp_front`; float32 or many rows on a GPU: cuBLAS then
:func:`tritonforge.swiglu`). The projections are PyTorch (cuBLAS) in both.

:class:`KVCache` keeps each layer's keys and values in one preallocated buffer; attention reads
the filled prefix ``[:, :, :length]`` in place (a strided view, no copy). :func:`generate` is
greedy decoding: one prefill call over the prompt, then one call per new token.

A decode step whose shapes change with the length cannot be replayed from a CUDA graph.
:meth:`Llama.decode_step` keeps every shape fixed: the position is a device tensor, the new key
and value go in with ``index_copy_`` at that position, and attention reads the whole buffer with
the filled length as ``kv_lens`` (a device tensor too). :class:`GraphedDecoder` captures that step
once and replays it for every token (``generate(..., cuda_graph=True)``): no Python, no launch
overhead per layer, the same kernels.

``backend="sdpa"`` is the torch backend with PyTorch's ``scaled_dot_product_attention`` (what a
Hugging Face model runs by default) instead of the naive attention formula.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from tritonforge.ops.attention import flash_attention
from tritonforge.ops.rmsnorm import rms_norm
from tritonforge.ops.rope import rope
from tritonforge.ops.swiglu import swiglu
from tritonforge.ops.swiglu_front import front_is_fused, swiglu_mlp_front
from tritonforge.reference import flash_attention_ref, rms_norm_ref, rope_ref, swiglu_mlp_front_ref

BACKENDS = ("torch", "sdpa", "tritonforge")


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Sizes of a Llama-family decoder. The defaults are a toy that runs on the interpreter;
    :meth:`llama3_8b` gives Llama-3-8B's layer sizes."""

    vocab_size: int = 128
    hidden_size: int = 64
    intermediate_size: int = 160
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    rope_theta: float = 500000.0
    eps: float = 1e-5
    max_positions: int = 256

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @classmethod
    def llama3_8b(cls, num_layers: int = 32, max_positions: int = 8192) -> LlamaConfig:
        return cls(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_layers=num_layers, num_heads=32,
                   num_kv_heads=8, max_positions=max_positions)  # fmt: skip


class KVCache:
    """Keys and values of every layer, ``[B, kv_heads, max_positions, head_dim]`` each, and how
    many positions are filled (the same for every layer and row)."""

    def __init__(self, config: LlamaConfig, batch: int, dtype: torch.dtype, device):
        shape = (config.num_layers, batch, config.num_kv_heads, config.max_positions, config.head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.length = 0

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k, v [B, kv_heads, n, D]`` after the filled prefix; return the layer's keys and
        values so far (views of the buffers)."""
        start, n = self.length, k.shape[2]
        if start + n > self.keys.shape[3]:
            raise ValueError(f"the cache holds {self.keys.shape[3]} positions; {start} are filled and {n} more do not fit")
        self.keys[layer, :, :, start : start + n] = k
        self.values[layer, :, :, start : start + n] = v
        return self.keys[layer, :, :, : start + n], self.values[layer, :, :, : start + n]

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor, position: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write one position's ``k, v [B, kv_heads, 1, D]`` at ``position`` (a one-element int64
        device tensor: no host sync, fixed shapes); return the layer's whole buffers."""
        keys, values = self.keys[layer], self.values[layer]
        keys.index_copy_(2, position, k)
        values.index_copy_(2, position, v)
        return keys, values


def rotary_tables(config: LlamaConfig, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos, sin [n, head_dim]`` for the given positions (Hugging Face's layout: the frequency
    table repeated twice along the head dimension), computed in float32, returned in ``dtype``."""
    half = config.head_dim // 2
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(half, device=positions.device, dtype=torch.float32) / half))
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` with ``rotate_half(x) = cat(-x2, x1)``: x ``[B, H, n, D]``
    (:func:`tritonforge.reference.rope_ref`, Hugging Face's formula in x's dtype)."""
    return rope_ref(x, cos, sin)


class Llama(torch.nn.Module):
    """Embedding, ``num_layers`` decoder layers, final norm and LM head; weights ``[in, out]``
    (``x @ w``), initialised like a fresh model (normal, std ``0.02``; norms 1 plus noise, so that a
    missing multiply by the weight shows)."""

    def __init__(self, config: LlamaConfig, dtype: torch.dtype = torch.float32, device=None, seed: int = 0):
        super().__init__()
        self.config = config
        gen = torch.Generator().manual_seed(seed)
        H, F, V = config.hidden_size, config.intermediate_size, config.vocab_size
        q_out, kv_out = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim

        def weight(*shape, std=0.02):
            return torch.nn.Parameter((torch.randn(*shape, generator=gen) * std).to(dtype=dtype, device=device), requires_grad=False)

        def norm():
            return weight(H, std=0.1).add_(1.0)

        self.embed = weight(V, H, std=1.0)
        self.layers = torch.nn.ModuleList()
        for _ in range(config.num_layers):
            layer = torch.nn.Module()
            layer.attn_norm, layer.mlp_norm = norm(), norm()
            layer.wq, layer.wk, layer.wv, layer.wo = weight(H, q_out), weight(H, kv_out), weight(H, kv_out), weight(q_out, H)
            layer.w_gate, layer.w_up, layer.w_down = weight(H, F), weight(H, F), weight(F, H)
            self.layers.append(layer)
        self.norm = norm()
        self.lm_head = weight(H, V)

    def forward(self, ids: torch.Tensor, cache: Optional[KVCache] = None, backend: str = "tritonforge") -> torch.Tensor:
        """Logits ``[B, n, vocab]`` for token ids ``[B, n]`` that follow the ``cache.length``
        positions already in ``cache`` (None: a fresh sequence, no cache kept)."""
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        start = cache.length if cache is not None else 0
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)

        def attend(index, q, k, v):
            if cache is not None:
                k, v = cache.append(index, k, v)
            return self._attention(q, k, v, backend)

        logits = self._decoder(ids, positions, attend, backend)
        if cache is not None:
            cache.length += ids.shape[1]
        return logits

    def decode_step(self, ids: torch.Tensor, cache: KVCache, position: torch.Tensor, backend: str = "tritonforge") -> torch.Tensor:
        """Logits ``[B, 1, vocab]`` for one token per row, ``ids [B, 1]``, at ``position`` (a
        one-element int64 tensor on the device: the number of positions already in ``cache``).
        Every shape is fixed (attention reads the whole cache buffer, ``kv_lens = position + 1``),
        so the step can be captured in a CUDA graph. ``cache.length`` is the caller's to advance, and
        ``position`` must lie below ``max_positions`` (on the device, it is not checked here;
        :class:`GraphedDecoder` checks its host-side count)."""
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if ids.dim() != 2 or ids.shape[1] != 1:
            raise ValueError(f"decode_step takes ids of shape [B, 1], got {tuple(ids.shape)}")
        if position.shape != (1,) or position.dtype != torch.int64:
            raise ValueError(f"position must be a one-element int64 tensor, got {position.dtype} {tuple(position.shape)}")
        lens = (position + 1).to(torch.int32).repeat(ids.shape[0])  # [B], on the device

        def attend(index, q, k, v):
            keys, values = cache.write(index, k, v, position)
            return self._attention(q, keys, values, backend, kv_lens=lens)

        return self._decoder(ids, position, attend, backend)

    def _decoder(self, ids, positions, attend, backend):
        cfg = self.config
        B, n = ids.shape
        cos, sin = rotary_tables(cfg, positions, self.embed.dtype)
        x = self.embed[ids]  # [B, n, H]
        for index, layer in enumerate(self.layers):
            h = self._norm(x, layer.attn_norm, backend)
            q = (h @ layer.wq).view(B, n, cfg.num_heads, cfg.head_dim).transpose(1, 2)  # [B, Hq, n, D], a view
            k = (h @ layer.wk).view(B, n, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
            v = (h @ layer.wv).view(B, n, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
            q, k = self._rotary(q, k, cos, sin, backend)
            a = attend(index, q, k, v)  # [B, Hq, n, D]
            x = x + a.transpose(1, 2).reshape(B, n, -1) @ layer.wo
            m = self._norm(x, layer.mlp_norm, backend)
            x = x + self._mlp_front(m, layer.w_gate, layer.w_up, backend) @ layer.w_down
        return self._norm(x, self.norm, backend) @ self.lm_head

    def _rotary(self, q, k, cos, sin, backend):
        if backend == "tritonforge":
            return rope(q, cos, sin), rope(k, cos, sin)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)

    def _norm(self, x, weight, backend):
        if backend == "tritonforge":
            return rms_norm(x, weight, self.config.eps)
        return rms_norm_ref(x, weight, self.config.eps)

    def _attention(self, q, k, v, backend, kv_lens=None):
        if backend == "tritonforge":
            return flash_attention(q, k, v, causal=True, kv_lens=kv_lens)
        if backend == "sdpa":
            return sdpa_attention(q, k, v, kv_lens)
        return flash_attention_ref(q, k, v, True, kv_lens=kv_lens)[0]

    def _mlp_front(self, x, w_gate, w_up, backend):
        if backend == "tritonforge" and front_is_fused(x.dtype, x.numel() // x.shape[-1]):
            return swiglu_mlp_front(x, w_gate, w_up)
        if backend == "tritonforge":  # float32 or many rows on a GPU: cuBLAS's two GEMMs, then the fused elementwise kernel
            return swiglu(x @ w_gate, x @ w_up)
        return swiglu_mlp_front_ref(x, w_gate, w_up)


def sdpa_attention(q, k, v, kv_lens=None):
    """Causal grouped-query attention (bottom-right) with ``torch.nn.functional.scaled_dot_product_attention``,
    as a Hugging Face model runs it by default; ``kv_lens`` masks each batch row's keys past its length."""
    Nq, Nk = q.shape[2], k.shape[2]
    mask = torch.arange(Nk, device=q.device) <= torch.arange(Nq, device=q.device)[:, None] + (Nk - Nq)  # [Nq, Nk]
    if kv_lens is not None:
        mask = mask & (torch.arange(Nk, device=q.device) < kv_lens[:, None, None, None])  # [B, 1, Nq, Nk]
    elif Nq == Nk:
        mask = None  # plain causal: SDPA's own flag picks its flash kernel
    group = q.shape[1] != k.shape[1]
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=group)


class GraphedDecoder:
    """:meth:`Llama.decode_step` captured once in a CUDA graph (``torch.cuda.CUDAGraph``) for a
    batch of ``B`` rows over ``cache``; each call copies the new tokens and the position into the
    graph's static inputs and replays it: ``logits [B, 1, vocab]`` (the graph's own buffer,
    overwritten by the next call). Advances ``cache.length``."""

    def __init__(self, model: Llama, cache: KVCache, backend: str = "tritonforge", warmup: int = 2):
        device = cache.keys.device
        if device.type != "cuda":
            raise ValueError(f"a CUDA graph needs the cache on a CUDA device, got {device}")
        self.model, self.cache, self.backend = model, cache, backend
        self.ids = torch.zeros(cache.keys.shape[1], 1, dtype=torch.int64, device=device)
        self.position = torch.zeros(1, dtype=torch.int64, device=device)
        self.position.fill_(cache.length)
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream), torch.no_grad():  # warm-up off the capture: compiles, autotunes
            for _ in range(warmup):
                model.decode_step(self.ids, cache, self.position, backend)
        torch.cuda.current_stream(device).wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph), torch.no_grad():
            self.logits = model.decode_step(self.ids, cache, self.position, backend)

    @torch.no_grad()
    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        if self.cache.length >= self.cache.keys.shape[3]:
            raise ValueError(f"the cache holds {self.cache.keys.shape[3]} positions and all are filled")
        self.ids.copy_(ids)
        self.position.fill_(self.cache.length)
        self.graph.replay()
        self.cache.length += 1
        return self.logits


@torch.no_grad()
def generate(model: Llama, prompt: torch.Tensor, max_new_tokens: int, backend: str = "tritonforge",
             cuda_graph: bool = False) -> torch.Tensor:  # fmt: skip
    """Greedy decoding with a KV cache: ``[B, prompt + max_new_tokens]`` token ids. With
    ``cuda_graph``, the decode steps replay one captured :class:`GraphedDecoder` step (CUDA only)."""
    cache = KVCache(model.config, prompt.shape[0], model.embed.dtype, prompt.device)
    logits = model(prompt, cache, backend)  # prefill
    step_fn = GraphedDecoder(model, cache, backend) if cuda_graph and max_new_tokens > 1 else None
    tokens = [prompt]
    for step in range(max_new_tokens):
        token = logits[:, -1].argmax(-1, keepdim=True)
        tokens.append(token)
        if step + 1 < max_new_tokens:  # decode: one position per call
            logits = step_fn(token) if step_fn is not None else model(token, cache, backend)
    return torch.cat(tokens, dim=1)


@torch.no_grad()
def greedy_steps(model: Llama, prompt: torch.Tensor, new_tokens: int, backend: str = "tritonforge"):
    """Greedy decoding through :meth:`Llama.decode_step` over a fixed-shape cache (the shapes a
    CUDA graph replays), keeping the logits: ``(tokens [B, prompt + new_tokens], the prefill's
    logits, the decode steps' logits [B, new_tokens - 1, vocab])``."""
    cache = KVCache(model.config, prompt.shape[0], model.embed.dtype, prompt.device)
    prefill = model(prompt, cache, backend)
    tokens, steps = [prompt, prefill[:, -1:].argmax(-1)], []
    for _ in range(new_tokens - 1):
        position = torch.tensor([cache.length], device=prompt.device)
        steps.append(model.decode_step(tokens[-1], cache, position, backend))
        cache.length += 1
        tokens.append(steps[-1][:, -1:].argmax(-1))
    return torch.cat(tokens, dim=1), prefill, torch.cat(steps, dim=1)
