"""Chapter 2's kernels (vector_add, add_2d, program_map) and the compiled-kernel readings."""

import json
import os
import subprocess
import sys

import pytest
import torch

import tritonforge as tfg
from tritonforge import basics

from .helpers import assert_within_budget

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _randn(shape, dtype, device, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(device=device, dtype=dtype)


# ----------------------------------------------------------------------------------------------
# vector_add
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (7,), (1023,), (1025,), (3, 7, 5), (5, 123, 123)])
def test_vector_add_matches_float64(shape, dtype, device):
    x, y = _randn(shape, dtype, device, 1), _randn(shape, dtype, device, 2)
    out = basics.vector_add(x, y)
    assert tfg.last_path("vector_add") in ("triton", "interpreter")
    assert out.dtype == dtype and out.shape == x.shape and out.is_contiguous()
    assert_within_budget(out, basics.add_ref(x, y, upcast=True), x + y)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rounds_once_to_nearest(dtype, device):
    """float32 sum, rounded once to nearest-even: bit-equal to the reference that does that."""
    x, y = _randn((70, 90), dtype, device, 12), _randn((90, 70), dtype, device, 13).t()
    assert torch.equal(basics.vector_add(x, y), basics.add_ref(x, y))
    assert torch.equal(basics.add_2d(x, y), basics.add_ref(x, y))


def test_vector_add_writes_every_element(device):
    x, y = _randn((3001,), torch.float32, device, 3), _randn((3001,), torch.float32, device, 4)
    out = torch.full_like(x, float("nan"))
    basics.vector_add_fwd(x, y, out=out)
    torch.testing.assert_close(out, x + y)


def test_vector_add_on_a_strided_view(device):
    base = _randn((40, 50), torch.float32, device, 5)
    x, y = base[:, ::2], base.t()[::2, :40].t()
    out = basics.vector_add(x, y)
    assert tfg.last_path("vector_add") in ("triton", "interpreter")
    torch.testing.assert_close(out, x + y)


# ----------------------------------------------------------------------------------------------
# add_2d: strides are passed, nothing is copied
# ----------------------------------------------------------------------------------------------


def _layouts(M, N, dtype, device, seed):
    """[M, N] tensors with different strides and storage offsets."""
    return {
        "contiguous": _randn((M, N), dtype, device, seed),
        "transposed": _randn((N, M), dtype, device, seed + 1).t(),
        "every-other-column": _randn((M, 2 * N), dtype, device, seed + 2)[:, ::2],
        "every-third-row": _randn((3 * M, N), dtype, device, seed + 3)[::3],
        "interior-slice": _randn((M + 5, N + 9), dtype, device, seed + 4)[2 : 2 + M, 7 : 7 + N],
    }


@pytest.mark.parametrize("shape", [(1, 1), (1, 300), (300, 1), (37, 203), (129, 65)])
@pytest.mark.parametrize("x_layout", ["contiguous", "transposed", "every-other-column", "every-third-row", "interior-slice"])
def test_add_2d_on_views_matches_float64(shape, x_layout, device):
    M, N = shape
    x = _layouts(M, N, torch.float32, device, 10)[x_layout]
    y = _layouts(M, N, torch.float32, device, 20)["transposed"]
    out = basics.add_2d(x, y)
    assert tfg.last_path("add_2d") in ("triton", "interpreter")
    assert out.shape == (M, N) and out.is_contiguous()
    assert_within_budget(out, basics.add_ref(x, y, upcast=True), x + y)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_2d_dtypes(dtype, device):
    layouts = _layouts(45, 301, dtype, device, 30)
    x, y = layouts["transposed"], layouts["interior-slice"]
    out = basics.add_2d(x, y)
    assert out.dtype == dtype
    assert_within_budget(out, basics.add_ref(x, y, upcast=True), x + y)


def test_add_2d_awkward_large_shape(device):
    x = _randn((781, 523), torch.float32, device, 40).t()  # [523, 781], transposed
    y = _randn((523, 781), torch.float32, device, 41)
    out = basics.add_2d(x, y)
    assert_within_budget(out, basics.add_ref(x, y, upcast=True), x + y)


def test_add_2d_writes_every_element_of_a_strided_output(device):
    x, y = _randn((37, 70), torch.float32, device, 50), _randn((70, 37), torch.float32, device, 51).t()
    buffer = torch.full((40, 90), float("nan"), device=device)
    out = buffer[1:38, 3:73]  # strided output inside a NaN margin
    basics.add_2d_fwd(x, y, out=out)
    torch.testing.assert_close(out, x + y)
    margin = buffer.clone()
    margin[1:38, 3:73] = float("nan")
    assert torch.isnan(margin).all(), "the kernel wrote outside its output view"


def test_add_2d_does_not_write_inputs(device):
    x, y = _randn((20, 30), torch.float32, device, 60).t(), _randn((30, 20), torch.float32, device, 61)
    x0, y0 = x.clone(), y.clone()
    basics.add_2d(x, y)
    assert torch.equal(x, x0) and torch.equal(y, y0)


def test_empty_inputs(device):
    assert basics.vector_add(torch.empty(0, 3, device=device), torch.empty(0, 3, device=device)).shape == (0, 3)
    assert basics.add_2d(torch.empty(4, 0, device=device), torch.empty(4, 0, device=device)).shape == (4, 0)


def test_nan_propagates(device):
    x, y = _randn((9, 70), torch.float32, device, 70), _randn((9, 70), torch.float32, device, 71)
    x[3, 5] = float("nan")
    out = basics.add_2d(x, y)
    torch.testing.assert_close(out, x + y, equal_nan=True)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda x, y: basics.vector_add(x.to(torch.int32), y), TypeError, "x has dtype int32"),
        (lambda x, y: basics.vector_add(x, y.double()), TypeError, "y has dtype float64"),
        (lambda x, y: basics.vector_add(x, y[:-1]), ValueError, "y has shape"),
        (lambda x, y: basics.vector_add(x.tolist(), y), TypeError, "x must be a torch.Tensor"),
        (lambda x, y: basics.add_2d(x, y.half()), TypeError, "y has dtype float16"),
        (lambda x, y: basics.add_2d(x, y.t()), ValueError, "y has shape"),
        (lambda x, y: basics.add_2d(x[None], y[None]), ValueError, "x must be 2-D"),
        (lambda x, y: basics.add_2d(x, y.to("meta")), ValueError, "y is on meta"),
    ],
)
def test_bad_input_names_the_argument(call, error, match, device):
    x, y = _randn((6, 9), torch.float32, device, 80), _randn((6, 9), torch.float32, device, 81)
    with pytest.raises(error, match=match):
        call(x, y)


# ----------------------------------------------------------------------------------------------
# program_map and the picture
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, block", [((10, 12), (4, 8)), ((1, 1), (1, 1)), ((37, 53), (8, 16)), ((5, 100), (16, 2))])
def test_program_map_matches_the_index_arithmetic(shape, block, device):
    out = basics.program_map(*shape, *block, device=device)
    assert tfg.last_path("program_map") in ("triton", "interpreter")
    assert torch.equal(out.cpu(), basics.program_map_ref(*shape, *block))


@pytest.mark.parametrize(
    "args, match",
    [((0, 4, 2, 2), "M must be a positive int"), ((4, 4, 3, 2), "block_m must be a power of two"), ((4, 4, 2, 2.0), "block_n")],
)
def test_program_map_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        basics.program_map(*args)


def test_storage_map_places_a_transposed_view():
    base = torch.zeros(3, 4)
    values = torch.arange(12, dtype=torch.int32).view(4, 3)  # one value per element of base.t()
    mapped = basics.storage_map(base.t(), base, values)
    assert torch.equal(mapped, values.t())  # element (i, j) of the view is base[j, i]
    sliced = basics.storage_map(base[:, ::2], base, torch.ones(3, 2, dtype=torch.int32))
    assert sliced[:, 1::2].eq(-1).all() and sliced[:, ::2].eq(1).all()


def test_plot_program_map_draws_two_panels():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    base = torch.zeros(6, 16, device="cuda" if torch.cuda.is_available() else "cpu")  # where kernels run
    fig = basics.plot_program_map(6, 8, 4, 4, view=base[:, ::2], base=base, device=base.device)
    assert len(fig.axes) == 2
    import matplotlib.pyplot as plt

    plt.close(fig)


# ----------------------------------------------------------------------------------------------
# Compiled-kernel readings
# ----------------------------------------------------------------------------------------------

PTX = """
\t.loc 1 2 3
\t@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
\t@%p2 ld.global.b32 { %r5 }, [ %rd2 + 0 ];
\t@%p2 ld.global.b32 { %r6 }, [ %rd2 + 4 ];
\t@%p1 st.global.v2.b16 [ %rd3 + 0 ], { %rs1, %rs2 };
\t.section\t.debug_abbrev
\t@%p1 ld.global.v4.b32 { %r1 }, [ %rd1 + 0 ];
"""


def test_memory_ops_and_widths():
    cleaned = basics.clean_ir("ptx", PTX)
    assert ".loc" not in cleaned and "debug" not in cleaned
    assert basics.memory_ops(cleaned) == {"ld.global.b32": 2, "ld.global.v4.b32": 1, "st.global.v2.b16": 1}
    assert basics.vector_width_bytes("ld.global.v4.b32") == 16
    assert basics.vector_width_bytes("ld.global.b32") == 4
    assert basics.vector_width_bytes("st.global.v2.b16") == 4


def test_clean_ir_drops_mlir_locations():
    text = '#loc = loc("f.py":1:1)\n    %x = tt.load %p, %m : tensor<4xf32> loc(#loc12)\n  tt.func @k(%a: i32 loc("a"(#loc))) {\n'
    cleaned = basics.clean_ir("ttir", text)
    assert "loc" not in cleaned
    assert "%x = tt.load %p, %m : tensor<4xf32>" in cleaned and "tt.func @k(%a: i32) {" in cleaned


def test_no_recording_is_a_note_not_an_error(tmp_path):
    records = basics.load_compile_records(tmp_path)
    assert not records.available
    assert "scripts/record_compile.py" in records.provenance
    assert records.get("vector_add", "fp32, n % 16 == 0") is None
    assert "no reading" in records.excerpt("vector_add", "fp32, n % 16 == 0", "ptx")
    assert records.summary() == records.note


def _fake_variant(kernel, name, regs):
    ptx = "\t@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];\n"
    return {
        "kernel": kernel, "name": name, "description": "", "n_regs": regs, "n_spills": 0, "shared_bytes": 0,
        "num_warps": 4, "num_stages": 3, "memory_ops": basics.memory_ops(ptx), "ir": {"ptx": ptx, "ttir": "module {\n}\n"},
    }  # fmt: skip


def test_recordings_round_trip_and_the_newest_gpu_one_wins(tmp_path):
    old = basics.CompileRecords([_fake_variant("vector_add", "v", 20)], basics.compile_metadata(device_name="NVIDIA H200", compute_capability="9.0"))
    old.metadata.update(date="2026-01-01", created="2026-01-01T00:00:00+00:00")
    new = basics.CompileRecords([_fake_variant("vector_add", "v", 30)], basics.compile_metadata(device_name="NVIDIA H200", compute_capability="9.0"))
    new.metadata.update(date="2026-02-01", created="2026-02-01T00:00:00+00:00")
    offline = basics.CompileRecords([_fake_variant("vector_add", "v", 99)], basics.compile_metadata(device_name="x", compute_capability="9.0", offline=True))
    (path_old,) = basics.write_compile_records(old, tmp_path)
    (path_new,) = basics.write_compile_records(new, tmp_path)
    basics.write_compile_records(offline, tmp_path)
    assert path_old.name == "compile-vector-add-nvidia-h200-2026-01-01.json"
    assert path_new.name == "compile-vector-add-nvidia-h200-2026-02-01.json"
    records = basics.load_compile_records(tmp_path)
    assert records.available and not records.live
    assert records.get("vector_add", "v")["n_regs"] == 30
    assert records.provenance.startswith("recorded on NVIDIA H200, sm_90, 2026-02-01")
    assert "ld.global.v4.b32" in records.excerpt("vector_add", "v", "ptx", r"ld\.global")
    assert "1× ld.global.v4.b32" in records.summary()


def test_the_chapter_ignores_broken_files(tmp_path):
    (tmp_path / "compile-junk.json").write_text("{not json")
    (tmp_path / "compile-other.json").write_text(json.dumps({"metadata": {"kind": "bench"}, "variants": []}))
    assert not basics.load_compile_records(tmp_path).available


@pytest.mark.skipif(torch.cuda.is_available(), reason="offline compilation is the CPU stand-in; the GPU test compiles for real")
def test_record_compile_script_offline_end_to_end(tmp_path):
    """scripts/record_compile.py compiles every variant for sm_90 without a GPU and writes JSON
    that the chapter's loader reads; the aligned fp32 vector add uses 16-byte vector loads."""
    env = dict(os.environ, TRITON_DEFAULT_FP_FUSION="1")
    env.pop("TRITON_INTERPRET", None)
    script = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts", "record_compile.py")
    proc = subprocess.run([sys.executable, script, str(tmp_path), "--offline-arch", "90"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = sorted(p.name for p in tmp_path.glob("compile-*.json"))
    assert len(names) == 2 and names[0].startswith("compile-add-2d-") and names[1].startswith("compile-vector-add-")
    assert not basics.load_compile_records(tmp_path).available  # offline files are not recordings
    records = basics.load_compile_records(tmp_path, include_offline=True)
    assert records.metadata["offline"] is True
    assert {v["name"] for v in records.variants} == {v.name for v in basics.compile_variants()}
    for v in records.variants:
        assert set(v["ir"]) == set(basics.STAGES), v["name"]
        assert v["memory_ops"], v["name"]
        assert isinstance(v["n_regs"], int) and v["n_regs"] > 0, v["name"]
    aligned = records.get("vector_add", "fp32, n % 16 == 0")
    assert any(basics.vector_width_bytes(op) == 16 for op in aligned["memory_ops"] if op.startswith("ld."))
    assert "tt.load" in aligned["ir"]["ttir"] and "#blocked" in aligned["ir"]["ttgir"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the chapter compiles live")
def test_chapter_compiles_offline_when_nothing_is_recorded(tmp_path):
    records = basics.compile_records_for_chapter(live=False, directory=tmp_path)
    assert records.available and records.metadata["offline"], records.note
    assert records.provenance.startswith("compiled without a GPU for sm_90")
    assert "ld.global" in records.excerpt("vector_add", "fp32, n % 16 == 0", "ptx", r"ld\.global")


def test_record_compile_script_without_a_gpu_says_so():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    script = os.path.join(os.path.dirname(os.path.dirname(__file__)), "scripts", "record_compile.py")
    proc = subprocess.run([sys.executable, script, "/nonexistent"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "no CUDA GPU" in proc.stderr


@pytest.mark.gpu
def test_gpu_kernels_take_the_triton_path():
    x = _randn((4096, 1000), torch.bfloat16, "cuda", 90).t()
    y = _randn((1000, 4096), torch.bfloat16, "cuda", 91)
    out = basics.add_2d(x, y)
    assert tfg.last_path("add_2d") == "triton"
    assert_within_budget(out, basics.add_ref(x, y, upcast=True), x + y)
    v = _randn((2**24 + 3,), torch.float16, "cuda", 92)
    assert_within_budget(basics.vector_add(v, v), basics.add_ref(v, v, upcast=True), v + v)
    assert tfg.last_path("vector_add") == "triton"


@pytest.mark.gpu
def test_gpu_live_compile_records():
    records = basics.record_compilation()
    assert records.live and records.available
    assert records.provenance.startswith("live:")
    for v in records.variants:
        assert isinstance(v["n_regs"], int) and v["n_regs"] > 0, v["name"]
        assert isinstance(v["n_spills"], int), v["name"]
        assert isinstance(v["shared_bytes"], int), v["name"]
        assert set(v["ir"]) == set(basics.STAGES), v["name"]
    aligned = records.get("vector_add", "fp32, n % 16 == 0")
    assert any(basics.vector_width_bytes(op) == 16 for op in aligned["memory_ops"] if op.startswith("ld."))
