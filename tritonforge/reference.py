"""PyTorch references: one per op, in one place.

Each function here is three things at once: the oracle the tests compare kernels against, the
``torch`` fallback the router runs when a kernel cannot, and the "naive" cell a chapter shows
before writing the kernel. ``upcast=True`` computes in float64 (the tests' oracle); the default
follows the kernel's own arithmetic (float32 math for 16-bit inputs, result in the input dtype)
so that the fallback returns what the kernel would.
"""

from __future__ import annotations

import torch


def _compute_dtype(dtype: torch.dtype, upcast: bool) -> torch.dtype:
    if upcast:
        return torch.float64
    return torch.float64 if dtype == torch.float64 else torch.float32


def axpy_ref(alpha: float, x: torch.Tensor, y: torch.Tensor, *, upcast: bool = False) -> torch.Tensor:
    """``alpha * x + y``, computed in float32 (float64 with ``upcast``), returned in x's dtype."""
    ct = _compute_dtype(x.dtype, upcast)
    out = alpha * x.to(ct) + y.to(ct)
    return out if upcast else out.to(x.dtype)


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                 *, upcast: bool = False) -> torch.Tensor:
    """RMSNorm over the last dim with Hugging Face ``LlamaRMSNorm`` casting.

    ``h = x.to(float32); h = h * rsqrt(mean(h**2, -1) + eps)``, then
    ``y = weight * h.to(x.dtype)``: the normalized row is rounded to x's
    dtype *before* the multiply by ``weight`` (float64 inputs stay in
    float64 throughout). With ``upcast`` everything is float64, nothing is
    rounded in between, and the result is float64 (the tests' oracle).
    """
    ct = _compute_dtype(x.dtype, upcast)
    h = x.to(ct)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    if upcast:
        return h * weight.to(ct)
    return weight * h.to(x.dtype)


def rms_norm_rstd_ref(x: torch.Tensor, eps: float = 1e-6, *, upcast: bool = False) -> torch.Tensor:
    """``1 / sqrt(mean(x**2, -1) + eps)`` per row, flattened to ``[M]``, in the accumulator dtype
    (float32, float64 for float64 inputs or with ``upcast``): what the forward kernel saves."""
    h = x.to(_compute_dtype(x.dtype, upcast))
    return torch.rsqrt(h.pow(2).mean(-1) + eps).reshape(-1)


def rms_norm_bwd_ref(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, upcast: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The hand-derived backward of :func:`rms_norm_ref` (chapter 4), in PyTorch ops:
    ``dx = r * (dy*w - xhat * mean(dy*w*xhat))`` and ``dweight = sum over rows of dy * xhat``,
    with ``r`` recomputed from x. Written in differentiable ops, so autograd can differentiate it
    again: it is the double-backward path as well as the fallback and the tests' oracle. Returns
    ``(dx, dweight)`` in x's and weight's dtypes (float64 with ``upcast``)."""
    ct = _compute_dtype(x.dtype, upcast)
    h = x.to(ct)
    r = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    x_hat = h * r
    g = dy.to(ct) * weight.to(ct)
    dx = r * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))
    dweight = (dy.to(ct) * x_hat).reshape(-1, x.shape[-1]).sum(0)
    if upcast:
        return dx, dweight
    return dx.to(x.dtype), dweight.to(weight.dtype)


def swiglu_ref(gate: torch.Tensor, up: torch.Tensor, *, upcast: bool = False) -> torch.Tensor:
    """``silu(gate) * up`` in Hugging Face Llama's rounding order: ``act = silu(gate)`` computed in
    float32 and rounded to the input dtype, then ``act * up`` computed in float32 and rounded again
    (``LlamaMLP``: ``act_fn(gate_proj(x)) * up_proj(x)``, two eager ops). Float64 inputs stay in
    float64; with ``upcast`` everything is float64 and nothing is rounded (the tests' oracle)."""
    ct = _compute_dtype(gate.dtype, upcast)
    g = gate.to(ct)
    act = g * torch.sigmoid(g)
    if not upcast:
        act = act.to(gate.dtype).to(ct)
    y = act * up.to(ct)
    return y if upcast else y.to(gate.dtype)


def swiglu_bwd_ref(
    dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, *, upcast: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The hand-derived backward of :func:`swiglu_ref` (chapter 5), with ``s = sigmoid(gate)``:
    ``dgate = dy * up * s * (1 + gate * (1 - s))`` and ``dup = dy * silu(gate)`` (the rounded
    ``silu(gate)`` of the forward). Differentiable PyTorch ops: the double-backward path, the
    fallback and the tests' oracle. Returns ``(dgate, dup)`` in the inputs' dtype (float64 with
    ``upcast``)."""
    ct = _compute_dtype(gate.dtype, upcast)
    g, u, d = gate.to(ct), up.to(ct), dy.to(ct)
    s = torch.sigmoid(g)
    act = g * s
    if not upcast:
        act = act.to(gate.dtype).to(ct)
    dgate = d * u * s * (1 + g * (1 - s))
    dup = d * act
    if upcast:
        return dgate, dup
    return dgate.to(gate.dtype), dup.to(up.dtype)


def swiglu_mlp_front_ref(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, *, upcast: bool = False) -> torch.Tensor:
    """``silu(x @ w_gate) * (x @ w_up)``, the front of Llama's MLP, as Hugging Face computes it:
    two matmuls in the input dtype (each rounded to it), then :func:`swiglu_ref`. With ``upcast``
    everything is float64. x ``[..., D]``, w_gate and w_up ``[D, F]``."""
    if upcast:
        x, w_gate, w_up = x.double(), w_gate.double(), w_up.double()
    return swiglu_ref(x @ w_gate, x @ w_up, upcast=upcast)


def rope_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, upcast: bool = False) -> torch.Tensor:
    """Rotary embeddings as Hugging Face Llama computes them, ``x * cos + rotate_half(x) * sin``
    with ``rotate_half(x) = cat(-x2, x1)`` (x's halves), every step in x's dtype (cos and sin cast
    to it). ``x [..., N, D]``, ``cos, sin [N, D]``. With ``upcast`` everything is float64."""
    ct = torch.float64 if upcast else x.dtype
    x, cos, sin = x.to(ct), cos.to(ct), sin.to(ct)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def rope_bwd_ref(dy: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, upcast: bool = False) -> torch.Tensor:
    """The hand-derived backward of :func:`rope_ref` in x: the transposed rotation,
    ``dx1 = dy1 cos1 + dy2 sin2``, ``dx2 = dy2 cos2 - dy1 sin1`` (halves of dy, cos, sin), in dy's
    dtype (float64 with ``upcast``). Differentiable PyTorch ops."""
    ct = torch.float64 if upcast else dy.dtype
    dy, cos, sin = dy.to(ct), cos.to(ct), sin.to(ct)
    (d1, d2), (c1, c2), (s1, s2) = dy.chunk(2, dim=-1), cos.chunk(2, dim=-1), sin.chunk(2, dim=-1)
    return torch.cat([d1 * c1 + d2 * s2, d2 * c2 - d1 * s1], dim=-1)


def softmax_ref(x: torch.Tensor, *, upcast: bool = False) -> torch.Tensor:
    """Softmax over the last dim, computed in float32 (float64 for float64 inputs, or everything in
    float64 with ``upcast``) and returned in x's dtype (float64 with ``upcast``). A row of all
    ``-inf`` gives NaN, as ``torch.softmax`` does."""
    y = torch.softmax(x.to(_compute_dtype(x.dtype, upcast)), dim=-1)
    return y if upcast else y.to(x.dtype)


def softmax_bwd_ref(dy: torch.Tensor, y: torch.Tensor, *, upcast: bool = False) -> torch.Tensor:
    """The hand-derived backward of softmax (chapter 6): ``dx = y * (dy - sum(dy * y, -1))``. It
    needs only the output ``y``, never x. Differentiable PyTorch ops (the double-backward path, the
    fallback, the tests' oracle); returns dx in y's dtype (float64 with ``upcast``)."""
    ct = _compute_dtype(y.dtype, upcast)
    y_, dy_ = y.to(ct), dy.to(ct)
    dx = y_ * (dy_ - (dy_ * y_).sum(-1, keepdim=True))
    return dx if upcast else dx.to(y.dtype)


def _attention_probabilities(q, k, v, causal, sm_scale, ct, kv_lens=None, key_ids=None, query_ids=None):
    """``(P, lse, k, v)`` of naive attention in ``ct``: k and v repeated to the query heads, the
    scaled scores masked bottom-right when causal, ``lse = logsumexp(S, -1)`` (``-inf`` where a
    query sees no key) and ``P = exp(S - lse)`` (0 on such rows). ``kv_lens [B]``: batch b has
    only its first ``kv_lens[b]`` keys (clamped to ``[0, Nk]``; causal aligns with the last of
    them). ``key_ids [B, Nk]``, ``query_ids [B, Nq]`` (None: 0): query i sees key j only where the
    ids are equal and the key's is not negative (a padded key: its k and v are taken as 0, so that a
    NaN there reaches nothing). Shared by the forward and the backward reference."""
    group = q.shape[1] // k.shape[1]
    scale = q.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    q_, k_, v_ = q.to(ct), k.to(ct).repeat_interleave(group, dim=1), v.to(ct).repeat_interleave(group, dim=1)
    B, Nq, Nk = q.shape[0], q.shape[-2], k.shape[-2]
    i = torch.arange(Nq, device=q.device)[:, None]
    j = torch.arange(Nk, device=q.device)[None, :]
    n = torch.full((B, 1, 1, 1), Nk, device=q.device, dtype=torch.int64)  # each row's keys: [0, n)
    if kv_lens is not None:
        n = kv_lens.to(device=q.device, dtype=torch.int64).clamp(0, Nk)[:, None, None, None]
    kept = torch.arange(Nk, device=q.device)[:, None] < n  # [B, 1, Nk, 1]: what lies past a length never counts
    hidden = j >= n  # [B, 1, Nq, Nk]
    if causal:
        hidden = hidden | (j > i + (n - Nq))
    if key_ids is not None:
        kid = key_ids.to(device=q.device, dtype=torch.int64)[:, None, None, :]  # [B, 1, 1, Nk]
        qid = 0 if query_ids is None else query_ids.to(device=q.device, dtype=torch.int64)[:, None, :, None]
        kept = kept & (kid >= 0).transpose(-1, -2)
        hidden = hidden | (kid != qid) | (kid < 0)
    k_, v_ = torch.where(kept, k_, 0.0), torch.where(kept, v_, 0.0)  # a NaN in a hidden key reaches nothing
    s = (q_ @ k_.transpose(-1, -2) * scale).masked_fill(hidden, float("-inf"))  # [B, Hq, Nq, Nk]
    lse = torch.logsumexp(s, dim=-1)
    seen = torch.isfinite(lse)[..., None]
    p = torch.where(seen, torch.exp(s - torch.where(seen, lse[..., None], 0.0)), 0.0)
    return p, lse, k_, v_


def flash_attention_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    *,
    upcast: bool = False,
    kv_lens: torch.Tensor | None = None,
    key_ids: torch.Tensor | None = None,
    query_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention the naive way (chapter 7's starting point): every score in memory.

    ``q [B, Hq, Nq, D]``, ``k`` and ``v [B, Hkv, Nk, D]`` with ``Hq % Hkv == 0`` (query head ``h``
    reads key/value head ``h // (Hq // Hkv)``). ``S = q @ k^T * sm_scale`` (``sm_scale`` defaults
    to ``D ** -0.5``); causal keeps key ``j`` for query ``i`` when ``j <= i + Nk - Nq`` (the last
    query sees the last key); ``P = softmax(S)``; ``O = P @ v``. A query that sees no key (causal
    with ``Nq > Nk``) gets ``O = 0`` and ``lse = -inf``, as FlashAttention-2 does. With
    ``kv_lens [B]`` (a static KV cache), batch b has only its first ``kv_lens[b]`` keys and
    ``Nk`` above means that length. With ``key_ids [B, Nk]`` (and ``query_ids [B, Nq]``, 0 when
    None), query i sees key j only where ``key_ids[b, j] == query_ids[b, i] >= 0``: a key-padding
    mask or packed sequences (``tritonforge.ops.attention.mask_ids`` builds them).

    Returns ``(O, lse)``: O in q's dtype, ``lse = logsumexp(S, -1)`` ``[B, Hq, Nq]`` in float32
    (float64 for float64 inputs; everything float64 with ``upcast``, the tests' oracle). Memory is
    ``B * Hq * Nq * Nk`` scores: this is the fallback, not the fast path."""
    p, lse, _, v_ = _attention_probabilities(q, k, v, causal, sm_scale, _compute_dtype(q.dtype, upcast), kv_lens, key_ids,
                                             query_ids)  # fmt: skip
    o = p @ v_
    return (o, lse) if upcast else (o.to(q.dtype), lse)


def flash_attention_bwd_ref(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    *,
    dlse: torch.Tensor | None = None,
    upcast: bool = False,
    kv_lens: torch.Tensor | None = None,
    key_ids: torch.Tensor | None = None,
    query_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The hand-derived backward of :func:`flash_attention_ref` (chapter 7), FlashAttention's way:
    ``P`` is recomputed from q and k (never saved), then

    ``dV = P^T dO``, ``dP = dO V^T``, ``dS = P * (dP - rowsum(P * dP))`` (``rowsum(P * dP)`` is
    ``rowsum(dO * O)``), plus ``P * dlse`` when the logsumexp has a gradient too,
    ``dQ = c dS K``, ``dK = c dS^T Q`` (``c = sm_scale``); a grouped KV head sums the gradients
    of the query heads that read it. Differentiable PyTorch ops (the double-backward path, the
    fallback, the tests' oracle). Returns ``(dq, dk, dv)`` in q's dtype (float64 with ``upcast``)."""
    ct = _compute_dtype(q.dtype, upcast)
    B, Hq, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    group = Hq // Hkv
    scale = D**-0.5 if sm_scale is None else sm_scale
    p, _, k_, v_ = _attention_probabilities(q, k, v, causal, sm_scale, ct, kv_lens, key_ids, query_ids)
    q_, do_ = q.to(ct), do.to(ct)
    dv = p.transpose(-1, -2) @ do_  # [B, Hq, Nk, D]
    dp = do_ @ v_.transpose(-1, -2)
    ds = p * (dp - (p * dp).sum(-1, keepdim=True))
    if dlse is not None:
        ds = ds + p * dlse.to(ct)[..., None]
    dq = ds @ k_ * scale
    dk = ds.transpose(-1, -2) @ q_ * scale
    dk = dk.reshape(B, Hkv, group, Nk, D).sum(2)
    dv = dv.reshape(B, Hkv, group, Nk, D).sum(2)
    if upcast:
        return dq, dk, dv
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def add_ref(x: torch.Tensor, y: torch.Tensor, *, upcast: bool = False) -> torch.Tensor:
    """``x + y`` in float32 (float64 with ``upcast``), returned in x's dtype (float64 if upcast)."""
    ct = torch.float64 if upcast else torch.float32
    out = x.to(ct) + y.to(ct)
    return out if upcast else out.to(x.dtype)


def program_map_ref(M: int, N: int, block_m: int, block_n: int, *, device="cpu") -> torch.Tensor:
    """Which program owns each element of an ``[M, N]`` tensor tiled by ``block_m × block_n``."""
    rows = torch.arange(M, device=device)[:, None] // block_m
    cols = torch.arange(N, device=device)[None, :] // block_n
    tiles_across = -(-N // block_n)  # ceil(N / block_n), no Triton needed for the reference
    return (rows * tiles_across + cols).to(torch.int32)


TOLERANCE = {
    torch.float64: 1e-12,
    torch.float32: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}
"""The one table of relative tolerances (``max |out - ref| / max |ref|``) by output dtype: a few
roundings of each dtype (bf16 keeps 8 significant bits, 2**-8 = 3.9e-3; fp16 11, 4.9e-4; fp32
24, 6e-8, with room for a different summation order). The exercise checks and the benchmark's
correctness column use it; unit tests use the error budget of ``tests/helpers.py`` instead."""
