r"""Chapter 7's pictures of FlashAttention: the tile schedule, the memory the naive way allocates,
and the memory each way needs as the sequence grows.

**The tile schedule.** The prefill kernel (:func:`tritonforge.ops.attention_prefill._flash_attn_fwd_kernel`)
runs one program per block of ``block_m`` queries; the program walks the keys in blocks of
``block_n``. With causal masking aligned bottom-right, query ``i`` sees key ``j`` iff
``j <= i + Nk - Nq``. For the query block that starts at row ``start_m`` the kernel computes two
bounds (:func:`kernel_bounds`, the same expressions as the kernel's)::

    hi       = min(max(start_m + block_m + Nk - Nq, 0), Nk)          # causal; else Nk
    unmasked = min((max(start_m + Nk - Nq + 1, 0) // block_n) * block_n,
                   (Nk // block_n) * block_n)                        # causal; else the whole blocks

and sorts the key blocks into three classes (:func:`tile_schedule`):

- **unmasked**: the block starts below ``unmasked``: every key of it is in range and visible to
  every query of the block, so the scores need no mask;
- **masked**: it starts in ``[unmasked, hi)``: the diagonal (or the end of the keys) crosses it,
  so the kernel masks scores element by element;
- **skipped**: it starts at or after ``hi``: no query of the block sees any of its keys, and the
  kernel never loads it.

The backward's dK/dV program walks the same grid the other way: it owns a block of keys and
visits the query blocks, and :func:`dkdv_bounds` / :func:`dkdv_schedule` are its bounds, mirrored
(:func:`schedule_text` prints either schedule as a grid of characters).

The tests (``tests/book/test_attention_figures.py``) check this against a brute-force
per-element mask, against the kernel's own source lines, and against the kernel itself (keys of
skipped blocks poisoned with NaN do not reach the output).

**Memory.** :func:`record_allocations` runs a PyTorch function under a ``TorchDispatchMode`` and
records every tensor it allocates (views of existing memory are not allocations) and the peak of
the bytes alive at once: an observation on the CPU, not a formula. :func:`naive_attention_bytes`
and :func:`flash_attention_bytes` are the formulas; :func:`memory_figure` plots them against the
sequence length (computed, not measured).

matplotlib is imported inside the figure functions: importing this module costs nothing.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Sequence
from typing import Optional

import torch

SKIPPED, UNMASKED, MASKED = "skipped", "unmasked", "masked"
"""The three classes of a (query block, key block) tile."""

FIGURE_WIDTH_IN = 7.0
"""The figures' width: the book's content column is 688 px, drawn at 100 dpi."""

FONT_PT = 10

COLORS = {
    UNMASKED: "#4c72b0",  # loaded, no mask
    MASKED: "#dd8452",  # loaded, masked element by element
    SKIPPED: "#ececec",  # never loaded
}

GB = 1e9


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _check_sizes(Nq: int, Nk: int, block_m: int, block_n: int) -> None:
    for name, value in (("Nq", Nq), ("Nk", Nk), ("block_m", block_m), ("block_n", block_n)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def kernel_bounds(start_m: int, Nq: int, Nk: int, block_m: int, block_n: int, causal: bool) -> tuple[int, int]:
    """``(unmasked, hi)`` for the query block starting at row ``start_m``, as the prefill kernel
    computes them: key blocks starting below ``unmasked`` run without a mask, those starting in
    ``[unmasked, hi)`` with one, and the rest are never loaded."""
    causal_shift = Nk - Nq  # query i sees keys j <= i + causal_shift
    whole = (Nk // block_n) * block_n  # keys in whole blocks
    if causal:
        hi = min(max(start_m + block_m + causal_shift, 0), Nk)
        unmasked = min((max(start_m + causal_shift + 1, 0) // block_n) * block_n, whole)
    else:
        hi = Nk
        unmasked = whole
    return unmasked, hi


def tile_schedule(Nq: int, Nk: int, block_m: int, block_n: int, causal: bool) -> list[list[str]]:
    """The class of every tile: ``schedule[i][j]`` is ``"unmasked"``, ``"masked"`` or ``"skipped"``
    for query block ``i`` (rows ``i·block_m`` on) and key block ``j`` (keys ``j·block_n`` on), from
    the kernel's bounds (:func:`kernel_bounds`)."""
    _check_sizes(Nq, Nk, block_m, block_n)
    schedule = []
    for i in range(_cdiv(Nq, block_m)):
        unmasked, hi = kernel_bounds(i * block_m, Nq, Nk, block_m, block_n, causal)
        row = []
        for j in range(_cdiv(Nk, block_n)):
            start = j * block_n
            row.append(UNMASKED if start < unmasked else MASKED if start < hi else SKIPPED)
        schedule.append(row)
    return schedule


def dkdv_bounds(start_n: int, Nq: int, Nk: int, block_m: int, block_n: int, causal: bool) -> tuple[int, int, int]:
    """``(lo, mid, q_end)`` for the backward's dK/dV program of the key block at ``start_n``, as
    :func:`tritonforge.ops.attention_backward_kernels._bwd_dkdv_kernel` computes them (``block_n``
    keys a program, queries walked ``block_m`` at a time): query blocks starting below ``lo`` are
    skipped (no query there sees the block's first key), those in ``[lo, mid)`` masked (the
    diagonal crosses them), those in ``[mid, q_end)`` unmasked (every query sees the block's last
    key)."""
    causal_shift = Nk - Nq
    q_end = _cdiv(Nq, block_m) * block_m
    if causal:
        lo = min((max(start_n - causal_shift, 0) // block_m) * block_m, q_end)
        mid = min(_cdiv(max(start_n + block_n - 1 - causal_shift, 0), block_m) * block_m, q_end)
    else:
        lo = mid = 0
    if start_n >= Nk:  # no key of this block exists: nothing to walk
        lo = mid = q_end
    return lo, mid, q_end


def dkdv_schedule(Nq: int, Nk: int, block_m: int, block_n: int, causal: bool) -> list[list[str]]:
    """The class of every tile as the backward's dK/dV programs walk them: ``schedule[j][i]`` for
    key block ``j`` (one program, keys ``j·block_n`` on) and query block ``i`` (a step of its
    walk, rows ``i·block_m`` on), from :func:`dkdv_bounds`."""
    _check_sizes(Nq, Nk, block_m, block_n)
    schedule = []
    for j in range(_cdiv(Nk, block_n)):
        lo, mid, _ = dkdv_bounds(j * block_n, Nq, Nk, block_m, block_n, causal)
        schedule.append([SKIPPED if i * block_m < lo else MASKED if i * block_m < mid else UNMASKED for i in range(_cdiv(Nq, block_m))])
    return schedule


def schedule_text(schedule: Sequence[Sequence[str]], *, label: str = "") -> str:
    """A schedule as text, one line per row of tiles: ``#`` unmasked, ``m`` masked, ``.`` skipped
    (never loaded); each line starts with ``label`` and the row's number."""
    marks = {UNMASKED: "#", MASKED: "m", SKIPPED: "."}
    width = len(str(len(schedule) - 1))
    return "\n".join(f"{label}{i:>{width}}  " + "".join(marks[c] for c in row) for i, row in enumerate(schedule))


def schedule_counts(schedule: Sequence[Sequence[str]]) -> dict[str, int]:
    """How many tiles of each class: ``{"unmasked": ..., "masked": ..., "skipped": ...}``."""
    counts = dict.fromkeys((UNMASKED, MASKED, SKIPPED), 0)
    for row in schedule:
        for cls in row:
            counts[cls] += 1
    return counts


def tile_schedule_figure(cases: Sequence[tuple[int, int]], block_m: int, block_n: int, *, causal: bool = True,
                         title: Optional[str] = None):  # fmt: skip
    """One panel per ``(Nq, Nk)`` case: the grid of (query block × key block) tiles, colored
    unmasked / masked / skipped (:func:`tile_schedule`), with the causal diagonal (the last key
    each query sees) drawn over it and the ends of the queries and keys marked where a block
    runs past them.

    Returns:
        The matplotlib ``Figure``, 7 in wide (the book's column), 10 pt text.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    if not cases:
        raise ValueError("cases must name at least one (Nq, Nk)")
    widths = [_cdiv(nk, block_n) * block_n for _, nk in cases]
    heights = [_cdiv(nq, block_m) * block_m for nq, _ in cases]
    fig, axes = plt.subplots(1, len(cases), figsize=(FIGURE_WIDTH_IN, 3.9), squeeze=False, layout="constrained",
                             gridspec_kw={"width_ratios": widths})  # fmt: skip
    for ax, (Nq, Nk), width, height in zip(axes[0], cases, widths, heights):
        schedule = tile_schedule(Nq, Nk, block_m, block_n, causal)
        for i, row in enumerate(schedule):
            for j, cls in enumerate(row):
                ax.add_patch(Rectangle((j * block_n, i * block_m), block_n, block_m, facecolor=COLORS[cls], edgecolor="white", linewidth=1.2))
        if causal:  # the last key query i sees: j = i + Nk - Nq (drawn over the real queries)
            shift = Nk - Nq
            rows = [max(0, -shift), Nq]
            ax.plot([r + shift + 1 for r in rows], rows, color="black", linewidth=1.5)
        if width > Nk:
            ax.axvline(Nk, color="0.3", linestyle="--", linewidth=1)
        if height > Nq:
            ax.axhline(Nq, color="0.3", linestyle="--", linewidth=1)
        ax.set_xlim(0, width)
        ax.set_ylim(height, 0)  # query 0 at the top, as a matrix is written
        ax.set_aspect("equal")
        ax.set_xlabel("key index", fontsize=FONT_PT)
        ax.set_ylabel("query index", fontsize=FONT_PT)
        ax.tick_params(labelsize=FONT_PT - 1)
        counts = schedule_counts(schedule)
        ax.set_title(f"Nq = {Nq}, Nk = {Nk}\n{counts[SKIPPED]} of {sum(counts.values())} tiles skipped", fontsize=FONT_PT)
    key = [Patch(color=COLORS[UNMASKED], label="unmasked"), Patch(color=COLORS[MASKED], label="masked"),
           Patch(facecolor=COLORS[SKIPPED], edgecolor="0.6", label="skipped (never loaded)")]  # fmt: skip
    if causal:
        key.append(Line2D([], [], color="black", linewidth=1.5, label="causal edge"))
    fig.legend(handles=key, loc="outside lower center", ncol=len(key), fontsize=FONT_PT, frameon=False)
    mode = "causal, bottom-right" if causal else "not causal"
    fig.suptitle(title or f"Tiles of {block_m} queries × {block_n} keys ({mode})", fontsize=FONT_PT)
    return fig


# ----------------------------------------------------------------------------------------------
# Memory
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Allocations:
    """What :func:`record_allocations` saw: each new tensor ``(op, shape, dtype, bytes)`` in
    order, and the most bytes alive at once."""

    tensors: list[tuple[str, tuple[int, ...], torch.dtype, int]]
    peak_bytes: int

    def of_shape(self, shape: Sequence[int]) -> list[tuple[str, tuple[int, ...], torch.dtype, int]]:
        """The allocations whose shape is ``shape``."""
        return [t for t in self.tensors if t[1] == tuple(shape)]


def record_allocations(fn: Callable, *args, **kwargs) -> tuple[object, Allocations]:
    """Run ``fn(*args, **kwargs)`` and record the tensors it allocates: ``(result, Allocations)``.

    Every PyTorch operator's outputs pass through a ``TorchDispatchMode``; an output whose storage
    is new (not the storage of one of the operator's inputs, i.e. not a view) is an allocation.
    A storage counts as alive while any tensor created on it during the call is alive (weak
    references tell), so ``peak_bytes`` is the most bytes held at once by tensors the call made:
    its inputs, and memory the operators use inside without returning it, are not counted.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    tensors: list = []
    alive: dict[int, list] = {}  # storage address -> [bytes, number of live tensors on it]
    state = {"live": 0, "peak": 0}

    def release(ptr: int) -> None:
        entry = alive.get(ptr)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            state["live"] -= entry[0]
            del alive[ptr]

    class _Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            inputs = {a.untyped_storage().data_ptr() for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)}
            for t in torch.utils._pytree.tree_leaves(out):
                if not isinstance(t, torch.Tensor):
                    continue
                ptr = t.untyped_storage().data_ptr()
                if ptr in alive:  # a view of memory made during the call
                    alive[ptr][1] += 1
                elif ptr in inputs:  # a view of memory from outside the call
                    continue
                else:
                    size = t.untyped_storage().nbytes()
                    alive[ptr] = [size, 1]
                    state["live"] += size
                    state["peak"] = max(state["peak"], state["live"])
                    tensors.append((str(func.overloadpacket.__name__), tuple(t.shape), t.dtype, size))
                weakref.finalize(t, release, ptr)
            return out

    with _Recorder():
        result = fn(*args, **kwargs)
    return result, Allocations(tensors, state["peak"])


def naive_attention_bytes(B: int, H: int, Nq: int, Nk: Optional[int] = None, element_size: int = 4) -> int:
    """The bytes of the score matrix ``S`` and the probabilities ``P`` of naive attention:
    ``2 · B·H·Nq·Nk · element_size`` (float32 by default)."""
    Nk = Nq if Nk is None else Nk
    return 2 * B * H * Nq * Nk * element_size


def flash_attention_bytes(B: int, H: int, N: int, D: int, element_size: int = 2, Hkv: Optional[int] = None) -> int:
    """The bytes FlashAttention keeps in memory: q and O (``B·H·N·D`` each), k and v
    (``B·Hkv·N·D`` each) in the input dtype, and lse (``B·H·N`` float32). Linear in ``N``."""
    Hkv = H if Hkv is None else Hkv
    return (2 * B * H * N * D + 2 * B * Hkv * N * D) * element_size + B * H * N * 4


DEVICE_MEMORY_GB = {"H200": 141.0, "T4": 16.0}
"""The devices' memory from their datasheets, in 10^9 bytes."""


def memory_figure(B: int = 4, H: int = 32, D: int = 128, lengths: Optional[Sequence[int]] = None, *, element_size: int = 2):
    """Memory against the sequence length ``N`` (``Nq = Nk = N``): naive attention's ``S`` and
    ``P`` in float32 beside FlashAttention's inputs, output and lse (``element_size`` bytes per
    element), on log-log axes, with each device's memory as a horizontal line. Computed from
    :func:`naive_attention_bytes` and :func:`flash_attention_bytes`, not measured.

    Returns:
        The matplotlib ``Figure``, 7 in wide, 10 pt text.
    """
    import matplotlib.pyplot as plt

    lengths = list(lengths or [2**p for p in range(9, 18)])
    naive = [naive_attention_bytes(B, H, n) / GB for n in lengths]
    flash = [flash_attention_bytes(B, H, n, D, element_size) / GB for n in lengths]
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 4.0), layout="constrained")
    ax.loglog(lengths, naive, "o-", color=COLORS[MASKED], label="naive: S and P, float32 (N²)")
    ax.loglog(lengths, flash, "s-", color=COLORS[UNMASKED], label=f"FlashAttention: q, k, v, O ({8 * element_size}-bit), lse (N)")
    for (name, gb), style in zip(DEVICE_MEMORY_GB.items(), ("-", "--")):
        ax.axhline(gb, color="0.35", linestyle=style, linewidth=1)
        ax.text(lengths[0], gb * 1.12, f"{name}: {gb:.0f} GB", fontsize=FONT_PT - 1, color="0.25")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length N", fontsize=FONT_PT)
    ax.set_ylabel("GB (10⁹ bytes)", fontsize=FONT_PT)
    ax.tick_params(labelsize=FONT_PT - 1)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=FONT_PT - 1, loc="lower right")
    ax.set_title(f"Attention memory, B = {B}, H = {H}, D = {D}: computed from the formulas, not measured", fontsize=FONT_PT)
    return fig
