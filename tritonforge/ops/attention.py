r"""``tfg.flash_attention`` (chapter 7): attention without the ``Nq x Nk`` score matrix in memory,
``O = softmax(c · q kᵀ) v`` per (batch, query head), in two paths, each in its module:

- **prefill** (:mod:`tritonforge.ops.attention_prefill`): FlashAttention-2, a program per block of
  queries walking the keys with the online softmax in registers; the math, causal block skipping
  and grouped-query heads are explained there;
- **decode** (:mod:`tritonforge.ops.attention_decode`), up to ``DECODE_MAX_QUERIES`` queries per
  head: the keys split into chunks over many programs, their partial results merged;
- **Hopper prefill** (:mod:`tritonforge.ops.gpu.attention`), on an sm_90 GPU with 16-bit inputs and
  a head dim of its ``HOPPER_TILES`` (64): the prefill algorithm with its tiles brought by the copy
  engine (TMA).

:func:`plan` picks the path and its tiles; :func:`launcher` binds its kernels once per call
signature. The backward is :mod:`tritonforge.ops.attention_backward`.

Masks beyond causal. A preallocated KV cache (``kv_lens``): batch row b holds ``kv_lens[b]`` valid
keys at the front of a longer buffer. Both paths' kernels load the length on the device and treat
it as that row's ``Nk`` (key tail masked, causal diagonal ending at the last valid key; a decode
split past the length walks nothing). No shape depends on the length, so a decode step over a fixed
buffer can be replayed from a CUDA graph while the length grows (chapter 9). A key-padding mask and
packed sequences' segment ids reach the kernels as int32 ids (:func:`mask_ids`).

Dtypes: float16 and bfloat16 (bf16 from compute capability 8.0), float32; float64 on the
interpreter (a GPU routes it to the reference). ``O`` in q's dtype, ``lse`` in float32 (float64 for
float64). Layouts: any strides with a unit-stride head dimension (else copied), so ``[B, H, N, D]``
and ``[B, N, H, D]`` (``x.transpose(1, 2)``) memory are both read in place; the output takes q's
layout when q is one of these two, else ``[B, Hq, Nq, D]`` contiguous.

How it meets PyTorch: the template of :mod:`tritonforge.ops.rmsnorm`: a custom op
``tritonforge::flash_attention`` with a fake and a vmap rule, routed launches, and the decision each
call makes (compile, empty, autograd mode, vmap, eager) taken by :class:`tritonforge.launches.OpEntry`.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Optional

import torch

from tritonforge import checks, hardware, launches, runtime
from tritonforge._triton import tl, triton
from tritonforge.kernel_utils import acc_torch_dtype
from tritonforge.ops.attention_decode import decode_launcher, decode_plan, is_decode
from tritonforge.ops.attention_prefill import Plan, _new_output, kernel_args, prefill_launcher, prefill_plan
from tritonforge.ops.gpu import attention as gpu_attention
from tritonforge.reference import flash_attention_ref

ATTENTION_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@triton.jit
def _fp64_dot_probe_kernel(x_ptr):
    x = tl.load(x_ptr + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :])
    tl.store(x_ptr + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :], tl.dot(x, x))


@functools.cache
def fp64_dot_supported() -> bool:
    """Whether this Triton's interpreter takes a float64 ``tl.dot`` (3.9's does; 3.3's asserts):
    asked once, by running a 16 x 16 product."""
    x = torch.eye(16, dtype=torch.float64)
    try:
        _fp64_dot_probe_kernel[(1,)](x)
    except Exception:  # noqa: BLE001 - any failure means: not supported here
        return False
    return bool((x == torch.eye(16, dtype=torch.float64)).all())


# ----------------------------------------------------------------------------------------------
# Heuristics: prefill or decode
# ----------------------------------------------------------------------------------------------

MAX_HEAD_DIM = 256

INTERPRETER_SMS = 4


def plan(q_shape, k_shape, dtype: torch.dtype, device: torch.device) -> Optional[Plan]:
    """The path and tiles for ``q [B, Hq, Nq, D]`` against ``k [B, Hkv, Nk, D]``; ``None`` when no
    tile fits the device's shared memory (the call then takes the reference)."""
    B, Hq, Nq, D = q_shape
    Hkv, Nk = k_shape[1], k_shape[2]
    interpreting = hardware.interpreting() or device.type != "cuda"
    shared = None if interpreting else hardware.shared_memory_per_block(device)
    sms = hardware.gpu_sm_count(device) or INTERPRETER_SMS
    hopper = not interpreting and dtype.itemsize == 2 and D in gpu_attention.HOPPER_TILES and gpu_attention.available(device)
    return _plan_cached(B, Hq, Nq, D, Hkv, Nk, dtype.itemsize, shared, sms, hopper)


@functools.lru_cache(maxsize=4096)
def _plan_cached(B, Hq, Nq, D, Hkv, Nk, element_size, shared, sms, hopper=False) -> Optional[Plan]:
    head_d = max(16, triton.next_power_of_2(D))
    rows = (Hq // Hkv) * Nq
    if is_decode(Nq, rows):
        return decode_plan(B * Hkv, rows, Nk, head_d, element_size, shared, sms)
    return (gpu_attention.hopper_plan(D) if hopper else None) or prefill_plan(head_d, element_size, shared)


_LAST_PLAN: dict = {}


def last_plan() -> Optional[Plan]:
    """The plan of the latest call served by a kernel (``None`` before any)."""
    return _LAST_PLAN.get("plan")


# ----------------------------------------------------------------------------------------------
# Launch
# ----------------------------------------------------------------------------------------------


def _unit_head_stride(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


def flash_attention_fwd(q, k, v, causal: bool, sm_scale: float, p: Plan, kv_lens=None, key_ids=None,
                        query_ids=None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Launch the forward for plan ``p``: ``(O, lse)``; ``kv_lens [B]``: batch b attends to its
    first ``kv_lens[b]`` keys only (None: all ``Nk``); ``key_ids [B, Nk]`` and ``query_ids [B, Nq]``
    (int32, unit stride along the sequence): query i sees key j only where their ids are equal
    (no query ids: 0), and a negative key id is padding, seen by no query. :func:`last_plan` then
    says which plan ran (:func:`served_plan`)."""
    q, k, v = (_unit_head_stride(t) for t in (q, k, v))
    kv_lens, key_ids, query_ids = (None if t is None else t.contiguous() for t in (kv_lens, key_ids, query_ids))
    p = served_plan(p, q, k, v)
    out = launcher(q, k, v, causal, sm_scale, p, kv_lens, key_ids, query_ids)(q, k, v, kv_lens, key_ids, query_ids)
    _LAST_PLAN["plan"] = p
    return out


def served_plan(p: Plan, q, k, v) -> Plan:
    """``p``, or where it names the Hopper kernel and the copy engine cannot read these strides, the
    portable kernel's plan."""
    if p.strategy.startswith("hopper") and not gpu_attention.eligible(q, k, v):
        return prefill_plan(q.shape[-1], q.element_size(), hardware.shared_memory_per_block(q.device))
    return p


def launcher(q, k, v, causal: bool, sm_scale: float, p: Plan, kv_lens=None, key_ids=None, query_ids=None):
    """The launches of plan ``p`` for tensors of these shapes, strides, dtypes and device (unit
    stride along the head dimension), every decision taken now: a function of ``(q, k, v, kv_lens,
    key_ids, query_ids)`` that allocates the outputs and launches the kernels. Eager inference
    keeps it for the next call of the same signature (:func:`attend`). A Hopper plan must be one
    these tensors can take (:func:`served_plan`)."""
    args = kernel_args(q, k, v, causal, sm_scale, p, kv_lens, key_ids, query_ids)
    if p.strategy.startswith("hopper"):
        return gpu_attention.hopper_launcher(q, k, p, args)
    return (decode_launcher if p.strategy == "decode" else prefill_launcher)(q, k, p, args)


# ----------------------------------------------------------------------------------------------
# Routing
# ----------------------------------------------------------------------------------------------

OP = "flash_attention"


def _reference(q, k, v, causal, sm_scale, kv_lens=None, key_ids=None, query_ids=None):
    o, lse = flash_attention_ref(q, k, v, causal, sm_scale, kv_lens=kv_lens, key_ids=key_ids, query_ids=query_ids)
    out = _new_output(q) if q.numel() else torch.empty_like(q)
    out.copy_(o)
    return out, lse.to(acc_torch_dtype(q.dtype))


def refusal(q: torch.Tensor, p, registers: str, no_tile: str) -> Optional[str]:
    """Why the attention kernels (forward or backward) cannot serve q's dtype, head dim and
    device, or None: float64 outside the interpreter or without its float64 ``tl.dot``, a head
    dim past :data:`MAX_HEAD_DIM` (``registers`` says what would not fit), no plan ``p``
    (``no_tile``: none fits the device's shared memory)."""
    if q.dtype == torch.float64 and (q.device.type != "cpu" or not hardware.interpreting()):
        return "float64 attention runs on the interpreter only (its tests' oracle path); on a GPU, the reference"
    if q.dtype == torch.float64 and not fp64_dot_supported():
        return f"this Triton ({triton.__version__}) has no float64 tl.dot in its interpreter"
    if q.shape[-1] > MAX_HEAD_DIM:
        return f"head dim {q.shape[-1]} > {MAX_HEAD_DIM}: {registers}"
    if p is None:
        return f"{no_tile} this device's shared memory for head dim {q.shape[-1]}"
    return None


def _forward_routed(q, k, v, causal: bool, sm_scale: float, kv_lens=None, key_ids=None, query_ids=None):
    if q.numel() == 0 or k.shape[2] == 0:
        runtime.record_empty(OP)
        return _reference(q, k, v, causal, sm_scale, kv_lens, key_ids, query_ids)
    p = plan(q.shape, k.shape, q.dtype, q.device)
    unsupported = refusal(q, p, "the kernel keeps a [BLOCK_M, D] tile in registers", "no tile fits")

    return runtime.dispatch(OP, device=q.device, dtype=q.dtype,
                            kernel=lambda: flash_attention_fwd(q, k, v, causal, sm_scale, p, kv_lens, key_ids, query_ids),
                            reference=lambda: _reference(q, k, v, causal, sm_scale, kv_lens, key_ids, query_ids),
                            unsupported=unsupported)  # fmt: skip


# ----------------------------------------------------------------------------------------------
# The PyTorch operators
# ----------------------------------------------------------------------------------------------


@torch.library.custom_op("tritonforge::flash_attention", mutates_args=())
def flash_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, sm_scale: float,
                       kv_lens: Optional[torch.Tensor] = None, key_ids: Optional[torch.Tensor] = None,
                       query_ids: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(O, lse)``, routed; differentiable through :mod:`tritonforge.ops.attention_backward`."""
    return _forward_routed(q, k, v, causal, sm_scale, kv_lens, key_ids, query_ids)


@flash_attention_op.register_fake
def _(q, k, v, causal, sm_scale, kv_lens=None, key_ids=None, query_ids=None):
    B, Hq, Nq, D = q.shape
    return _new_output(q, q.new_empty), q.new_empty(B, Hq, Nq, dtype=acc_torch_dtype(q.dtype))


def _vmap_rule(info, in_dims, q, k, v, causal, sm_scale, kv_lens=None, key_ids=None, query_ids=None):
    """``vmap``: the mapped dimension joins the batch dimension."""
    size = info.batch_size

    def fold(t, dim):
        t = t.unsqueeze(0).expand(size, *t.shape) if dim is None else t.movedim(dim, 0)
        return t.reshape(size * t.shape[1], *t.shape[2:])

    masks = [None if t is None else fold(t, dim) for t, dim in zip((kv_lens, key_ids, query_ids), in_dims[5:])]
    o, lse = flash_attention_op(fold(q, in_dims[0]), fold(k, in_dims[1]), fold(v, in_dims[2]), causal, sm_scale, *masks)
    return (o.reshape(size, -1, *o.shape[1:]), lse.reshape(size, -1, *lse.shape[1:])), (0, 0)


flash_attention_op.register_vmap(_vmap_rule)


# ----------------------------------------------------------------------------------------------
# The public function
# ----------------------------------------------------------------------------------------------


def _check_kv_lens(kv_lens, q, k) -> None:
    """``kv_lens``: a 1-D integer tensor of q's batch size on q's device, each value in
    ``[0, Nk]``. The values are checked on the host (one sync) except while compiling, capturing a
    CUDA graph or under a functorch transform, where reading them is impossible; the kernels
    clamp them to ``[0, Nk]`` so that no access leaves the buffer."""
    if not isinstance(kv_lens, torch.Tensor):
        raise TypeError(f"kv_lens must be a tensor or None, got {type(kv_lens).__name__}")
    if kv_lens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"kv_lens must be int32 or int64, got {kv_lens.dtype}")
    if tuple(kv_lens.shape) != (q.shape[0],):
        raise ValueError(f"kv_lens must have shape [B] = [{q.shape[0]}] (one length per batch row), got {tuple(kv_lens.shape)}")
    if kv_lens.device != q.device:
        raise ValueError(f"kv_lens is on {kv_lens.device} but q is on {q.device}")
    if torch.compiler.is_compiling() or torch._C._functorch.peek_interpreter_stack() is not None:
        return  # (first: Dynamo cannot trace is_current_stream_capturing)
    if kv_lens.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    if kv_lens.numel() and not bool(((kv_lens >= 0) & (kv_lens <= k.shape[2])).all()):
        bad = kv_lens[(kv_lens < 0) | (kv_lens > k.shape[2])]
        raise ValueError(f"kv_lens must lie in [0, {k.shape[2]}] (the keys k holds), got {bad[:4].tolist()}")


def _check(q, k, v, causal, sm_scale, return_lse) -> tuple[float, bool, bool]:
    for name, t in (("q", q), ("k", k), ("v", v)):
        checks.check_tensor(name, t, dtypes=ATTENTION_DTYPES)
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [B, H, N, D], got shape {tuple(t.shape)}")
    checks.check_same_device(q=q, k=k, v=v)
    checks.check_same_dtype(q=q, k=k, v=v)
    for name, t in (("k", k), ("v", v)):  # the odd one out is named, q being the reference
        if t.shape[0] != q.shape[0]:
            raise ValueError(f"{name} has batch {t.shape[0]} but q has batch {q.shape[0]}")
        if t.shape[3] != q.shape[3]:
            raise ValueError(f"{name} has head dim {t.shape[3]} but q has {q.shape[3]}")
    checks.check_same_shape(k=k, v=v)
    if k.shape[1] == 0 or q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"q has {q.shape[1]} heads and k {k.shape[1]}: the KV heads must divide the query heads (GQA)")
    causal, return_lse = checks.check_bool("causal", causal), checks.check_bool("return_lse", return_lse)
    if sm_scale is None:
        return (q.shape[3] ** -0.5 if q.shape[3] else 1.0), causal, return_lse
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, numbers.Real):
        raise TypeError(f"sm_scale must be a real number or None, got {checks.type_name(sm_scale)}")
    if not (math.isfinite(sm_scale) and sm_scale > 0):
        raise ValueError(f"sm_scale must be a finite number > 0 (the scores' scale; None: D ** -0.5), got {sm_scale}")
    return float(sm_scale), causal, return_lse


def _check_mask_args(key_padding_mask, segment_ids, q, k) -> None:
    """``key_padding_mask [B, Nk]`` bool and ``segment_ids [B, N]`` int32/int64 (``Nq == Nk == N``),
    on q's device. Only shapes, dtypes and devices are checked: nothing is read on the host."""
    B, Nq, Nk = q.shape[0], q.shape[2], k.shape[2]
    if key_padding_mask is not None:
        if not isinstance(key_padding_mask, torch.Tensor):
            raise TypeError(f"key_padding_mask must be a tensor or None, got {type(key_padding_mask).__name__}")
        if key_padding_mask.dtype != torch.bool:
            raise TypeError(f"key_padding_mask must be bool (True: the key may be attended), got {key_padding_mask.dtype}")
        if tuple(key_padding_mask.shape) != (B, Nk):
            raise ValueError(f"key_padding_mask must have shape [B, Nk] = [{B}, {Nk}], got {tuple(key_padding_mask.shape)}")
        if key_padding_mask.device != q.device:
            raise ValueError(f"key_padding_mask is on {key_padding_mask.device} but q is on {q.device}")
    if segment_ids is not None:
        if not isinstance(segment_ids, torch.Tensor):
            raise TypeError(f"segment_ids must be a tensor or None, got {type(segment_ids).__name__}")
        if segment_ids.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"segment_ids must be int32 or int64, got {segment_ids.dtype}")
        if Nq != Nk:
            raise ValueError(f"segment_ids needs as many queries as keys (packed sequences), got Nq = {Nq} and Nk = {Nk}")
        if tuple(segment_ids.shape) != (B, Nq):
            raise ValueError(f"segment_ids must have shape [B, N] = [{B}, {Nq}], got {tuple(segment_ids.shape)}")
        if segment_ids.device != q.device:
            raise ValueError(f"segment_ids is on {segment_ids.device} but q is on {q.device}")


def mask_ids(key_padding_mask=None, segment_ids=None):
    """``(key_ids, query_ids)``, the kernels' form of a key-padding mask and of packed sequences'
    segment ids (int32, each ``None`` when not needed): query i sees key j only where
    ``key_ids[b, j] == query_ids[b, i]`` (no query ids: 0) and ``key_ids[b, j] >= 0``."""
    ids = None if segment_ids is None else segment_ids.to(torch.int32)
    if key_padding_mask is None:
        return ids, ids
    key_ids = torch.where(key_padding_mask, 0 if ids is None else ids, -1).to(torch.int32)
    return key_ids, ids


def attend(q, k, v, causal: bool, scale: float, kv_lens=None, key_ids=None, query_ids=None):
    """``(O, lse)`` for checked arguments: the routed op (a custom op under autograd, compile and
    functorch; the routed kernel directly in eager inference). :func:`flash_attention` calls it
    after its checks; ``tritonforge.models.hf`` calls it with masks it built itself."""
    key = launches.signature(OP, (q, k, v, kv_lens, key_ids, query_ids), (causal, scale))
    out = launches.run_remembered(key, q, k, v, kv_lens, key_ids, query_ids)  # this signature, served by the kernels before
    if out is not launches.MISS:
        return out
    return ENTRY.serve((q, k, v, kv_lens, key_ids, query_ids), (causal, scale), key)


def _remembered_launch(q, k, v, kv_lens, key_ids, query_ids, causal, scale):
    """:func:`launcher` for this signature, or ``None`` where a call needs more than the launch (a
    copy of an input, a mask that is not contiguous)."""
    masks = (kv_lens, key_ids, query_ids)
    if any(t.stride(-1) != 1 and t.shape[-1] != 1 for t in (q, k, v)):
        return None
    if any(t is not None and not t.is_contiguous() for t in masks):
        return None
    p = plan(q.shape, k.shape, q.dtype, q.device)
    if p is None or p.strategy.startswith("hopper"):  # the copy engine needs aligned pointers: decided at each call
        return None
    launch = launcher(q, k, v, causal, scale, p, *masks)

    def remembered(*args):
        out = launch(*args)
        _LAST_PLAN["plan"] = p
        return out

    return remembered


def _reference_graph(q, k, v, causal, scale, kv_lens, key_ids, query_ids):
    return flash_attention_ref(q, k, v, causal, scale, kv_lens=kv_lens, key_ids=key_ids, query_ids=query_ids)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    sm_scale: Optional[float] = None, *, return_lse: bool = False,
                    kv_lens: Optional[torch.Tensor] = None, key_padding_mask: Optional[torch.Tensor] = None,
                    segment_ids: Optional[torch.Tensor] = None):  # fmt: skip
    """Attention without the ``Nq x Nk`` score matrix in memory: ``softmax(q k^T * sm_scale) v``.

    Causal masking aligns the last query with the last key (query ``i`` sees key ``j`` iff
    ``j <= i + Nk - Nq``); a query that sees no key gets zeros. Grouped-query and multi-query
    attention read key/value head ``h // (Hq // Hkv)`` for query head ``h``. Up to
    ``DECODE_MAX_QUERIES`` queries per head take the split-KV decode path (:func:`plan`;
    :func:`last_plan` says which ran). Usable under ``torch.compile(fullgraph=True)``, CUDA graphs
    and ``torch.func.vmap``; differentiable through FlashAttention-2's backward kernels
    (:mod:`tritonforge.ops.attention_backward`; ``tfg.last_path("flash_attention_backward")``).

    Args:
        q: ``[B, Hq, Nq, D]`` float16, bfloat16, float32 (float64: interpreter); any strides with a unit-stride last
            dimension (a ``[B, Nq, Hq, D]`` tensor's ``transpose(1, 2)`` is read in place).
        k: ``[B, Hkv, Nk, D]``, q's dtype and device, ``Hkv`` dividing ``Hq``.
        v: like k.
        causal: bottom-right causal mask.
        sm_scale: the score scale; ``D ** -0.5`` when None.
        return_lse: also return ``lse [B, Hq, Nq]`` (float32; float64 for float64), each row's logsumexp of the scaled
            scores (``-inf`` for a row with no key).
        kv_lens: ``[B]`` int32/int64 on q's device, or None: batch row b has only its first ``kv_lens[b]`` keys (a
            preallocated KV cache; the causal diagonal ends at the last of them). The lengths live on the device, so a
            decode step over a fixed-size cache keeps its shapes and can be captured in a CUDA graph.
        key_padding_mask: ``[B, Nk]`` bool on q's device, or None: key j of batch row b is attended only where True
            (left or right padding, a hole anywhere). The causal diagonal does not move. A padded key's value is
            never read into the output, NaN included; a query that sees no key gets zeros.
        segment_ids: ``[B, N]`` int32/int64 with ``Nq == Nk == N``, or None: packed sequences, query i sees key j only
            where their segment ids are equal (a negative id: padding, seen by no query).

    Returns:
        ``O [B, Hq, Nq, D]`` in q's dtype (in q's memory layout when q is ``[B, H, N, D]`` or
        ``[B, N, H, D]`` memory), or ``(O, lse)``. ``tfg.last_path("flash_attention")`` tells which
        path computed it.
    """
    key = None
    if kv_lens is None and key_padding_mask is None and segment_ids is None:  # no mask: the signature decides everything
        key = launches.signature(OP, (q, k, v), (causal, sm_scale, return_lse, "public"))
        out = launches.run_remembered(key, q, k, v)
        if out is not launches.MISS:
            return out
    scale, causal, return_lse = _check(q, k, v, causal, sm_scale, return_lse)
    if kv_lens is not None:
        _check_kv_lens(kv_lens, q, k)
    key_ids = query_ids = None
    if key_padding_mask is not None or segment_ids is not None:
        _check_mask_args(key_padding_mask, segment_ids, q, k)
        key_ids, query_ids = mask_ids(key_padding_mask, segment_ids)
    o, lse = attend(q, k, v, causal, scale, kv_lens, key_ids, query_ids)
    if key is not None:
        launches.remember_served(OP, key, lambda: _public_launch(q, k, v, causal, scale, return_lse))
    return (o, lse) if return_lse else o


def _public_launch(q, k, v, causal, scale, return_lse):
    launch = _remembered_launch(q, k, v, None, None, None, causal, scale)
    if launch is None:
        return None
    if return_lse:
        return launch
    return lambda q, k, v: launch(q, k, v)[0]


ENTRY = launches.OpEntry(
    OP,
    op=lambda q, k, v, kv_lens, key_ids, query_ids, causal, scale: flash_attention_op(q, k, v, causal, scale, kv_lens, key_ids,
                                                                                      query_ids),
    eager=lambda q, k, v, kv_lens, key_ids, query_ids, causal, scale: _forward_routed(q, k, v, causal, scale, kv_lens, key_ids,
                                                                                      query_ids),
    reference=lambda q, k, v, kv_lens, key_ids, query_ids, causal, scale: _reference_graph(q, k, v, causal, scale, kv_lens, key_ids,
                                                                                           query_ids),
    launch=_remembered_launch, grad_inputs=3, empty=False,
)  # fmt: skip
