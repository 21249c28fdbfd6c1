"""Chapter 7's tile schedule, allocation recorder and memory formulas (tritonforge.book.attention_figures)."""

from __future__ import annotations

import inspect
import itertools
import random
import types

import pytest
import torch

import tritonforge as tfg
from tritonforge import hardware, runtime
from tritonforge.book import attention_figures as af
from tritonforge.ops import attention, attention_prefill
from tritonforge.reference import flash_attention_bwd_ref, flash_attention_ref


@pytest.fixture
def plt():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    yield pyplot
    pyplot.close("all")


def brute_force_schedule(Nq, Nk, block_m, block_n, causal):
    """Each tile's class from the per-element mask: skipped iff no (query, key) of it is visible,
    unmasked iff every key of it is in range and visible to every (real) query, else masked."""
    i = torch.arange(Nq)[:, None]
    j = torch.arange(-(-Nk // block_n) * block_n)[None, :]  # keys past Nk included: out of range
    visible = (j < Nk) & ((j <= i + (Nk - Nq)) if causal else (i >= 0))  # [Nq, keys]
    schedule = []
    for start_m in range(0, Nq, block_m):
        row = []
        for start_n in range(0, j.shape[1], block_n):
            tile = visible[start_m : start_m + block_m, start_n : start_n + block_n]
            row.append(af.SKIPPED if not tile.any() else af.UNMASKED if tile.all() else af.MASKED)
        schedule.append(row)
    return schedule


SIZES = (1, 2, 15, 16, 17, 31, 32, 33, 48, 64, 100)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("blocks", [(16, 16), (16, 32), (32, 16), (64, 32), (128, 64)])
def test_schedule_matches_the_per_element_mask(causal, blocks):
    block_m, block_n = blocks
    for Nq, Nk in itertools.product(SIZES, SIZES):
        assert af.tile_schedule(Nq, Nk, block_m, block_n, causal) == brute_force_schedule(Nq, Nk, block_m, block_n, causal), (Nq, Nk)


def test_schedule_matches_the_per_element_mask_on_random_sizes():
    rng = random.Random(7)
    for _ in range(300):
        Nq, Nk = rng.randint(1, 300), rng.randint(1, 300)
        block_m, block_n = rng.choice((16, 32, 64, 128)), rng.choice((16, 32, 64))
        causal = rng.random() < 0.8
        assert af.tile_schedule(Nq, Nk, block_m, block_n, causal) == brute_force_schedule(Nq, Nk, block_m, block_n, causal), (
            Nq, Nk, block_m, block_n, causal)  # fmt: skip


def test_the_classes_on_a_known_case():
    # Nq = 64 queries on top of 86 cached keys (Nk = 150), tiles 16 x 16: u unmasked, m masked, s skipped.
    rows = ["".join(c[0] for c in row) for row in af.tile_schedule(64, 150, 16, 16, True)]
    assert rows == ["uuuuummsss", "uuuuuummss", "uuuuuuumms", "uuuuuuuumm"]
    assert af.schedule_counts(af.tile_schedule(64, 150, 16, 16, True)) == {"unmasked": 26, "masked": 8, "skipped": 6}
    # Nq > Nk: the first Nq - Nk = 48 queries see no key; their blocks are skipped entirely.
    schedule = af.tile_schedule(120, 72, 16, 16, True)
    assert all(cls == af.SKIPPED for row in schedule[:3] for cls in row)
    assert schedule[3][0] == af.MASKED


def _kernel_bound_expressions():
    """The kernel's own lines for causal_shift, whole, hi and unmasked (causal first, then not)."""
    source = inspect.getsource(attention_prefill._flash_attn_fwd_kernel.fn)
    found = {}
    for line in source.splitlines():
        text = line.split("  #")[0].strip()
        for name in ("causal_shift", "whole", "hi", "unmasked"):
            if text.startswith(f"{name} = "):
                found.setdefault(name, []).append(text[len(name) + 3 :])
    return found


def test_the_kernel_source_computes_the_same_bounds():
    found = _kernel_bound_expressions()
    assert len(found["hi"]) == 2 and len(found["unmasked"]) == 2, found  # the causal branch, then the other
    tl = types.SimpleNamespace(minimum=min, maximum=max)
    for Nq, Nk, block_m, block_n in itertools.product((1, 17, 64, 100), (1, 16, 33, 150), (16, 64), (16, 32)):
        for start_m in range(0, Nq, block_m):
            names = dict(tl=tl, Nq=Nq, Nk=Nk, BLOCK_M=block_m, BLOCK_N=block_n, start_m=start_m)
            names["causal_shift"] = eval(found["causal_shift"][0], names)
            names["whole"] = eval(found["whole"][0], names)
            for branch, causal in ((0, True), (1, False)):
                kernel = (eval(found["unmasked"][branch], names), eval(found["hi"][branch], names))
                assert kernel == af.kernel_bounds(start_m, Nq, Nk, block_m, block_n, causal), (Nq, Nk, block_m, block_n, start_m, causal)


@pytest.mark.filterwarnings("ignore:All-NaN slice:RuntimeWarning")  # the other query blocks do read the NaN
@pytest.mark.parametrize("Nq, Nk", [(40, 70), (70, 40), (48, 48)])
def test_the_kernel_never_loads_a_skipped_block(Nq, Nk):
    """Poison the keys and values of every key block the schedule skips for one query block: that
    block's output stays finite and right (a loaded NaN value would reach it through P @ V)."""
    if not hardware.interpreting():
        pytest.skip("runs the prefill kernel on the interpreter, whose tiles are 16 x 16")
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 1, Nq, 16), torch.randn(1, 1, Nk, 16), torch.randn(1, 1, Nk, 16)
    p = attention.plan(q.shape, k.shape, q.dtype, q.device)
    assert p.strategy == "prefill"
    schedule = af.tile_schedule(Nq, Nk, p.block_m, p.block_n, True)
    expected, _ = flash_attention_ref(q, k, v, True, upcast=True)
    assert any(af.SKIPPED in row for row in schedule)
    for i, row in enumerate(schedule):
        kp, vp = k.clone(), v.clone()
        for j, cls in enumerate(row):
            if cls == af.SKIPPED:
                kp[:, :, j * p.block_n : (j + 1) * p.block_n] = float("nan")
                vp[:, :, j * p.block_n : (j + 1) * p.block_n] = float("nan")
        with runtime.strict():
            out = tfg.flash_attention(q, kp, vp, causal=True)
        assert tfg.last_path("flash_attention") == "interpreter"
        rows = slice(i * p.block_m, (i + 1) * p.block_m)
        torch.testing.assert_close(out[:, :, rows].double(), expected[:, :, rows], atol=1e-5, rtol=1e-5)


def test_schedule_rejects_bad_sizes():
    for bad in ((0, 4, 16, 16), (4, 0, 16, 16), (4, 4, 0, 16), (4, 4, 16, -1), (4.0, 4, 16, 16)):
        with pytest.raises(ValueError):
            af.tile_schedule(*bad, True)


def test_record_allocations_sees_the_score_matrices():
    B, H, N, D = 1, 2, 64, 16
    q, k, v = (torch.randn(B, H, N, D) for _ in range(3))
    (o, lse), seen = af.record_allocations(flash_attention_ref, q, k, v, False)
    torch.testing.assert_close(o, flash_attention_ref(q, k, v, False)[0])
    scores = seen.of_shape((B, H, N, N))
    score_bytes = B * H * N * N * 4
    assert len(scores) >= 2 and all(t[3] == score_bytes for t in scores)  # S and P at least
    assert 2 * score_bytes <= seen.peak_bytes <= sum(t[3] for t in seen.tensors)


def test_record_allocations_does_not_count_views_and_frees_temporaries():
    x = torch.randn(1000)

    def fn(x):
        y = x.view(10, 100).t()  # views of the input: nothing allocated
        z = (y * 2).sum()  # a temporary of 4000 bytes, freed, then a scalar
        w = torch.empty(250)  # 1000 bytes, kept
        return z, w, w.view(25, 10)

    _, seen = af.record_allocations(fn, x)
    assert [t[0] for t in seen.tensors] == ["mul", "sum", "empty"]
    assert seen.peak_bytes == 4000 + 4  # the product and its sum alive at once, then the product freed


def test_memory_formulas():
    # B = 4, H = 32, N = 8192: S and P in float32 are 2 * 4*32*8192^2 * 4 bytes = 68.7 GB.
    assert af.naive_attention_bytes(4, 32, 8192) == 2 * 4 * 32 * 8192**2 * 4
    assert round(af.naive_attention_bytes(4, 32, 8192) / 1e9, 1) == 68.7
    assert af.naive_attention_bytes(1, 1, 3, 5, element_size=2) == 2 * 15 * 2
    assert af.flash_attention_bytes(4, 32, 8192, 128) == 4 * 4 * 32 * 8192 * 128 * 2 + 4 * 32 * 8192 * 4
    assert af.flash_attention_bytes(1, 32, 100, 128, 2, Hkv=8) == (2 * 32 + 2 * 8) * 100 * 128 * 2 + 32 * 100 * 4
    assert af.flash_attention_bytes(4, 32, 2 * 8192, 128) == 2 * af.flash_attention_bytes(4, 32, 8192, 128)  # linear in N


def test_figures_draw(plt):
    fig = af.tile_schedule_figure([(64, 150), (120, 72)], 16, 16)
    fig.canvas.draw()
    assert len(fig.axes) == 2
    tiles = [p for p in fig.axes[0].patches if p.get_width() == 16]
    assert len(tiles) == 4 * 10
    assert "6 of 40 tiles skipped" in fig.axes[0].get_title()
    af.tile_schedule_figure([(33, 33)], 16, 16, causal=False).canvas.draw()
    with pytest.raises(ValueError):
        af.tile_schedule_figure([], 16, 16)
    fig = af.memory_figure()
    fig.canvas.draw()
    assert "not measured" in fig.axes[0].get_title()


# ---- the backward's dK/dV schedule ---------------------------------------------------------------


def brute_force_dkdv_schedule(Nq, Nk, block_m, block_n):
    """Causal: tile (key block, query block) is skipped iff no real query of it sees the block's
    first key (then none sees any), unmasked iff every real query sees the block's last key index
    (``start + block_n − 1``, past Nk or not: the kernel masks a ragged block's diagonal too)."""
    schedule = []
    for start_n in range(0, Nk, block_n):
        row = []
        for start_m in range(0, Nq, block_m):
            queries = range(start_m, min(start_m + block_m, Nq))
            sees = [[j <= i + (Nk - Nq) for j in (start_n, start_n + block_n - 1)] for i in queries]
            row.append(af.SKIPPED if not any(s[0] for s in sees) else af.UNMASKED if all(s[1] for s in sees) else af.MASKED)
        schedule.append(row)
    return schedule


@pytest.mark.parametrize("blocks", [(16, 16), (16, 32), (32, 16), (32, 128), (64, 64)])
def test_dkdv_schedule_matches_the_per_element_mask(blocks):
    block_m, block_n = blocks
    for Nq, Nk in itertools.product(SIZES, SIZES):
        assert af.dkdv_schedule(Nq, Nk, block_m, block_n, True) == brute_force_dkdv_schedule(Nq, Nk, block_m, block_n), (Nq, Nk)
        assert all(c == af.UNMASKED for row in af.dkdv_schedule(Nq, Nk, block_m, block_n, False) for c in row)


def test_dkdv_loads_the_tiles_the_forward_loads():
    """With square tiles, the dK/dV programs load exactly the tiles the forward (and the dQ
    program) loads: the same grid, walked by columns instead of rows."""
    for Nq, Nk in itertools.product(SIZES, SIZES):
        forward = af.tile_schedule(Nq, Nk, 16, 16, True)
        backward = af.dkdv_schedule(Nq, Nk, 16, 16, True)
        assert [[forward[i][j] != af.SKIPPED for i in range(len(forward))] for j in range(len(backward))] == [
            [c != af.SKIPPED for c in row] for row in backward
        ], (Nq, Nk)


def _dkdv_bound_expressions():
    """The dK/dV kernel's own lines for causal_shift, q_end, lo and mid (causal, else, the empty block)."""
    from tritonforge.ops import attention_backward_kernels

    source = inspect.getsource(attention_backward_kernels._bwd_dkdv_kernel.fn)
    found = {}
    for line in source.splitlines():
        text = line.split("  #")[0].strip()
        for name in ("causal_shift", "q_end", "lo", "mid"):
            if text.startswith(f"{name} = "):
                found.setdefault(name, []).append(text[len(name) + 3 :])
    return found


def test_the_dkdv_kernel_source_computes_the_same_bounds():
    found = _dkdv_bound_expressions()
    assert len(found["lo"]) == 3 and len(found["mid"]) == 3, found  # causal, else, then the empty block
    tl = types.SimpleNamespace(minimum=min, maximum=max, cdiv=lambda a, b: -(-a // b), where=lambda c, a, b: a if c else b)
    for Nq, Nk, block_m, block_n in itertools.product((1, 17, 64, 100), (1, 16, 33, 150), (16, 32), (16, 64)):
        for start_n in range(0, Nk, block_n):
            names = dict(tl=tl, Nq=Nq, Nk=Nk, BLOCK_M=block_m, BLOCK_N=block_n, start_n=start_n, empty=start_n >= Nk)
            names["causal_shift"] = eval(found["causal_shift"][0], names)
            names["q_end"] = eval(found["q_end"][0], names)
            for branch, causal in ((0, True), (1, False)):
                names["lo"], names["mid"] = eval(found["lo"][branch], names), eval(found["mid"][branch], names)
                kernel = (eval(found["lo"][2], names), eval(found["mid"][2], names), names["q_end"])
                assert kernel == af.dkdv_bounds(start_n, Nq, Nk, block_m, block_n, causal), (Nq, Nk, block_m, block_n, start_n, causal)


@pytest.mark.parametrize("Nq, Nk", [(40, 70), (70, 40), (48, 48)])
def test_the_dkdv_kernel_never_loads_a_skipped_query_block(Nq, Nk):
    """Poison q and dO in the query blocks a key block's dK/dV program skips: that block's dk and
    dv stay finite and right (a loaded NaN would reach them through dSᵀ q and Pᵀ dO)."""
    from tritonforge.ops import attention_backward

    if not hardware.interpreting():
        pytest.skip("runs the backward kernels on the interpreter, whose tiles are 16 x 16")
    torch.manual_seed(0)
    q, k, v, do = torch.randn(1, 1, Nq, 16), torch.randn(1, 1, Nk, 16), torch.randn(1, 1, Nk, 16), torch.randn(1, 1, Nq, 16)
    p = attention_backward.plan(16, q.dtype, q.device)
    o, lse = flash_attention_ref(q, k, v, True)
    _, dk_ref, dv_ref = flash_attention_bwd_ref(do, q, k, v, True, upcast=True)
    schedule = af.dkdv_schedule(Nq, Nk, p.streamed, p.resident, True)
    assert any(af.SKIPPED in row for row in schedule)
    for j, row in enumerate(schedule):
        qp, dop = q.clone(), do.clone()
        for i, cls in enumerate(row):
            if cls == af.SKIPPED:
                qp[:, :, i * p.streamed : (i + 1) * p.streamed] = float("nan")
                dop[:, :, i * p.streamed : (i + 1) * p.streamed] = float("nan")
        _, dk, dv = attention_backward.flash_attention_bwd(dop, None, qp, k, v, o, lse, True, 16**-0.5, p)
        keys = slice(j * p.resident, (j + 1) * p.resident)
        torch.testing.assert_close(dk[:, :, keys].double(), dk_ref[:, :, keys], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(dv[:, :, keys].double(), dv_ref[:, :, keys], atol=1e-5, rtol=1e-5)


def test_schedule_text():
    text = af.schedule_text(af.dkdv_schedule(40, 40, 16, 16, True), label="keys ")
    assert text.splitlines() == ["keys 0  m##", "keys 1  .m#", "keys 2  ..m"]
