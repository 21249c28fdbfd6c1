"""Chapter 2's pictures of a launch: which program writes which element, in index order and in
memory order, and the source of a kernel for a chapter to show.

The program numbers in the picture are computed by a kernel (``tritonforge.ops.teaching.program_map``),
not by a formula here, so the picture shows what the index arithmetic of a real launch does.
"""

from __future__ import annotations

import inspect
from typing import Optional

import torch

from tritonforge._triton import triton
from tritonforge.ops.teaching import program_map

FONT_PT = 10
"""Every text in the figures, in points: the figure is 7 in wide (the book's content column at
100 dpi), so this is the size on the page."""


def kernel_source(kernel) -> str:
    """The Python source of a ``@triton.jit`` kernel (compiled or interpreted), for a chapter to show."""
    return inspect.getsource(getattr(kernel, "fn", kernel))


# ----------------------------------------------------------------------------------------------
# The picture of a launch: which program touches which element (chapter 2's figure)
# ----------------------------------------------------------------------------------------------


def storage_map(view: torch.Tensor, base: torch.Tensor, values: torch.Tensor, fill: int = -1) -> torch.Tensor:
    """Scatter ``values`` (one per element of the 2-D ``view``) to where those elements live in
    ``base``'s memory: returns a tensor of base's shape, ``fill`` where the view has no element.

    ``base`` must be contiguous and share its storage with ``view`` (``view = base.t()``,
    ``base[:, ::2]``, ...). Offsets are ``storage_offset + i * stride_m + j * stride_n``.
    """
    if not base.is_contiguous():
        raise ValueError("base must be contiguous: its memory order is the picture's reading order")
    if view.untyped_storage().data_ptr() != base.untyped_storage().data_ptr():
        raise ValueError("view must be a view of base (they share no storage)")
    M, N = view.shape
    rows = torch.arange(M)[:, None]
    cols = torch.arange(N)[None, :]
    offsets = view.storage_offset() - base.storage_offset() + rows * view.stride(0) + cols * view.stride(1)
    flat = torch.full((base.numel(),), fill, dtype=values.dtype)
    flat[offsets.reshape(-1)] = values.cpu().reshape(-1)
    return flat.view(base.shape)


def plot_program_map(
    M: int,
    N: int,
    block_m: int,
    block_n: int,
    *,
    device="cpu",
    view: Optional[torch.Tensor] = None,
    base: Optional[torch.Tensor] = None,
    ax=None,
    title: Optional[str] = None,
):
    """Draw which program writes each element of an ``[M, N]`` tensor (computed by the kernel).

    Each program's tile gets a colour and its number; the parts of tiles that stick out past the
    tensor (lanes the mask switches off) are hatched. With ``view`` and ``base`` a second panel
    shows the same programs in ``base``'s memory (grey: memory the view does not use). Returns
    the matplotlib figure (or ``ax``'s figure when ``ax`` is given).
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Rectangle

    pmap = program_map(M, N, block_m, block_n, device=device).cpu()
    grid_m, grid_n = triton.cdiv(M, block_m), triton.cdiv(N, block_n)
    programs = grid_m * grid_n
    colours = plt.get_cmap("tab10").colors
    cmap = ListedColormap([(0.85, 0.85, 0.85)] + [colours[p % len(colours)] for p in range(programs)])

    panels = 2 if view is not None else 1
    if ax is None:
        fig, axes = plt.subplots(1, panels, figsize=(7.0, 4.2 if panels == 2 else 3.6), squeeze=False)  # the column: 10 pt stays 10 pt
        axes = list(axes[0])
    else:
        axes = [ax] if panels == 1 else list(ax)
        fig = axes[0].figure

    def draw(a, data, subtitle):
        a.imshow((data + 1).numpy(), cmap=cmap, vmin=0, vmax=programs, interpolation="nearest")
        a.set_xticks(range(data.shape[1]))
        a.set_yticks(range(data.shape[0]))
        a.tick_params(labelsize=FONT_PT, length=0)
        a.set_xticks(range(0, data.shape[1], 2 if data.shape[1] > 10 else 1))
        a.set_title(subtitle, fontsize=FONT_PT)

    draw(axes[0], pmap, title or f"[{M}, {N}] in {block_m}×{block_n} tiles: {programs} programs")
    for pm in range(grid_m):
        for pn in range(grid_n):
            r0, c0 = pm * block_m, pn * block_n
            axes[0].add_patch(Rectangle((c0 - 0.5, r0 - 0.5), block_n, block_m, fill=False, lw=1.5, ec="black"))
            # the masked-off part of the tile, outside the tensor
            if r0 + block_m > M or c0 + block_n > N:
                for r in range(r0, r0 + block_m):
                    for c in range(c0, c0 + block_n):
                        if r >= M or c >= N:
                            axes[0].add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, hatch="///", lw=0, ec="0.5"))
            rm = (r0 + min(r0 + block_m, M)) / 2 - 0.5
            cm = (c0 + min(c0 + block_n, N)) / 2 - 0.5
            axes[0].text(cm, rm, f"P{pm * grid_n + pn}", ha="center", va="center", fontsize=FONT_PT, weight="bold")
    axes[0].set_xlim(-0.5, grid_n * block_n - 0.5)
    axes[0].set_ylim(grid_m * block_m - 0.5, -0.5)
    axes[0].set_xlabel("column j\n(hatched: masked off)", fontsize=FONT_PT)
    axes[0].set_ylabel("row i", fontsize=FONT_PT)
    if view is not None:
        if base is None:
            raise ValueError("pass base (the contiguous tensor the view looks into) with view")
        if tuple(view.shape) != (M, N):
            raise ValueError(f"view has shape {tuple(view.shape)}, expected ({M}, {N})")
        memory = storage_map(view, base, pmap)
        draw(axes[1], memory, f"the same elements in memory\n(base [{base.shape[0]}, {base.shape[1]}])")
        for p in range(programs):
            where = (memory == p).nonzero().float()
            if len(where):
                r, c = where.mean(0).tolist()
                axes[1].text(c, r, f"P{p}", ha="center", va="center", fontsize=FONT_PT, weight="bold")
        axes[1].set_xlabel(
            f"address order: along a row, then down\nview strides ({view.stride(0)}, {view.stride(1)})\ngrey: not in the view",
            fontsize=FONT_PT,
        )
    fig.tight_layout()
    return fig
