"""What chapter 2's kernels compile to (tritonforge.book.compile_ir): IR cleaning, recordings,
the offline compiler and scripts/record_compile.py."""

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from tritonforge.book import compile_ir

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "record_compile.py"


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
    cleaned = compile_ir.clean_ir("ptx", PTX)
    assert ".loc" not in cleaned and "debug" not in cleaned
    assert compile_ir.memory_ops(cleaned) == {"ld.global.b32": 2, "ld.global.v4.b32": 1, "st.global.v2.b16": 1}
    assert compile_ir.vector_width_bytes("ld.global.v4.b32") == 16
    assert compile_ir.vector_width_bytes("ld.global.b32") == 4
    assert compile_ir.vector_width_bytes("st.global.v2.b16") == 4


def test_clean_ir_drops_mlir_locations():
    text = '#loc = loc("f.py":1:1)\n    %x = tt.load %p, %m : tensor<4xf32> loc(#loc12)\n  tt.func @k(%a: i32 loc("a"(#loc))) {\n'
    cleaned = compile_ir.clean_ir("ttir", text)
    assert "loc" not in cleaned
    assert "%x = tt.load %p, %m : tensor<4xf32>" in cleaned and "tt.func @k(%a: i32) {" in cleaned


# Lines as the compiler writes them, longer than the book's column.
TTGIR = """#blocked = #ttg.blocked<{sizePerThread = [4, 1], threadsPerWarp = [4, 8], warpsPerCTA = [1, 4], order = [0, 1]}>
module attributes {"ttg.num-warps" = 4 : i32} {
  tt.func public @k(%x_ptr: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %n_elements: i32 {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %x_39 = ttg.convert_layout %x_38 : tensor<16x64xf32, #blocked> -> tensor<16x64xf32, #blocked1>
    %offsets_2 = tt.make_range {end = 1024 : i32, start = 0 : i32} : tensor<1024xi32>
    tt.return
  }
}"""
INDUCTOR = """@triton.jit
def triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0(in_ptr0, in_ptr1, out_ptr1, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 4096
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        tmp0 = tl.load(in_ptr0 + (r0_1 + 8192*x0), r0_mask, eviction_policy='evict_last', other=0.0).to(tl.float32)
        tl.store(out_ptr1 + (tl.broadcast_to(r0_0, [XBLOCK, R0_BLOCK])), tmp13, r0_mask)
    x = "a string, with commas, that is long enough to pass the width of the page on its own"  # a comment
"""


def test_ir_is_wrapped_to_the_page_and_means_the_same():
    wrapped = compile_ir.wrap_ir(TTGIR, width=76)
    lines = wrapped.splitlines()
    assert lines[0] == compile_ir.IR_WRAPPED  # said, not silent
    assert max(len(line) for line in lines) <= 76
    assert wrapped.split()[len(compile_ir.IR_WRAPPED.split()) :] == TTGIR.split()  # the same IR, tokens in order
    assert "        : tensor<16x64xf32, #blocked> -> tensor<16x64xf32, #blocked1>" in lines  # before the type
    assert compile_ir.wrap_ir("module {\n}", width=76) == "module {\n}"  # nothing long: no note
    assert compile_ir.wrap_ir("x" * 90, width=76) == "x" * 90  # no space to break at: left long


def test_excerpt_fits_the_page():
    records = compile_ir.CompileRecords([{"kernel": "k", "name": "v", "ir": {"ttgir": TTGIR}}], {})
    text = records.excerpt("k", "v", "ttgir")
    assert max(len(line) for line in text.splitlines()) <= compile_ir.PAGE_WIDTH
    assert "  tt.func public @k(\n      %x_ptr: !tt.ptr<f32>" in text  # one argument per line
    assert "".join(text.split()) == "".join((compile_ir.IR_WRAPPED + TTGIR).split())  # only whitespace added
    assert records.excerpt("k", "v", "ttgir", width=None) == TTGIR  # as the compiler wrote it


def test_python_is_wrapped_inside_brackets_and_means_the_same():
    import ast

    wrapped = compile_ir.wrap_python(INDUCTOR, width=76)
    lines = wrapped.splitlines()
    assert lines[0] == compile_ir.PYTHON_WRAPPED
    assert ast.dump(ast.parse(wrapped)) == ast.dump(ast.parse(INDUCTOR))  # the same program
    long = [line for line in lines if len(line) > 76]
    assert long == [INDUCTOR.splitlines()[-1]]  # only the line with a comment (and no bracket) is left
    assert "                eviction_policy='evict_last', other=0.0).to(tl.float32)" in lines
    assert compile_ir.wrap_python("x = 1\n") == "x = 1\n"


def test_no_recording_is_a_note_not_an_error(tmp_path):
    records = compile_ir.load_compile_records(tmp_path)
    assert not records.available
    assert "scripts/record_compile.py" in records.provenance
    assert records.get("vector_add", "fp32, n % 16 == 0") is None
    assert "no reading" in records.excerpt("vector_add", "fp32, n % 16 == 0", "ptx")
    assert records.summary() == records.note


def _fake_variant(kernel, name, regs):
    ptx = "\t@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];\n"
    return {
        "kernel": kernel, "name": name, "description": "", "n_regs": regs, "n_spills": 0, "shared_bytes": 0,
        "num_warps": 4, "num_stages": 3, "memory_ops": compile_ir.memory_ops(ptx), "ir": {"ptx": ptx, "ttir": "module {\n}\n"},
    }  # fmt: skip


def test_recordings_round_trip_and_the_newest_gpu_one_wins(tmp_path):
    h200 = dict(device_name="NVIDIA H200", compute_capability="9.0")
    old = compile_ir.CompileRecords([_fake_variant("vector_add", "v", 20)], compile_ir.compile_metadata(**h200))
    old.metadata.update(date="2026-01-01", created="2026-01-01T00:00:00+00:00")
    new = compile_ir.CompileRecords([_fake_variant("vector_add", "v", 30)], compile_ir.compile_metadata(**h200))
    new.metadata.update(date="2026-02-01", created="2026-02-01T00:00:00+00:00")
    offline_metadata = compile_ir.compile_metadata(device_name="x", compute_capability="9.0", offline=True)
    offline = compile_ir.CompileRecords([_fake_variant("vector_add", "v", 99)], offline_metadata)
    (path_old,) = compile_ir.write_compile_records(old, tmp_path)
    (path_new,) = compile_ir.write_compile_records(new, tmp_path)
    compile_ir.write_compile_records(offline, tmp_path)
    assert path_old.name == "compile-vector-add-nvidia-h200-2026-01-01.json"
    assert path_new.name == "compile-vector-add-nvidia-h200-2026-02-01.json"
    records = compile_ir.load_compile_records(tmp_path)
    assert records.available and not records.live
    assert records.get("vector_add", "v")["n_regs"] == 30
    assert records.provenance.startswith("recorded on NVIDIA H200, sm_90, 2026-02-01")
    assert "ld.global.v4.b32" in records.excerpt("vector_add", "v", "ptx", r"ld\.global")
    assert "1× ld.global.v4.b32" in records.summary()


def test_the_chapter_ignores_broken_files(tmp_path):
    (tmp_path / "compile-junk.json").write_text("{not json")
    (tmp_path / "compile-other.json").write_text(json.dumps({"metadata": {"kind": "bench"}, "variants": []}))
    assert not compile_ir.load_compile_records(tmp_path).available


@pytest.mark.skipif(torch.cuda.is_available(), reason="offline compilation is the CPU stand-in; the GPU test compiles for real")
def test_record_compile_script_offline_end_to_end(tmp_path):
    """scripts/record_compile.py compiles every variant for sm_90 without a GPU and writes JSON
    that the chapter's loader reads; the aligned fp32 vector add uses 16-byte vector loads."""
    env = dict(os.environ, TRITON_DEFAULT_FP_FUSION="1")
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--offline-arch", "90"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = sorted(p.name for p in tmp_path.glob("compile-*.json"))
    assert len(names) == 2 and names[0].startswith("compile-add-2d-") and names[1].startswith("compile-vector-add-")
    assert not compile_ir.load_compile_records(tmp_path).available  # offline files are not recordings
    records = compile_ir.load_compile_records(tmp_path, include_offline=True)
    assert records.metadata["offline"] is True
    assert {v["name"] for v in records.variants} == {v.name for v in compile_ir.compile_variants()}
    for v in records.variants:
        assert set(v["ir"]) == set(compile_ir.STAGES), v["name"]
        assert v["memory_ops"], v["name"]
        assert isinstance(v["n_regs"], int) and v["n_regs"] > 0, v["name"]
    aligned = records.get("vector_add", "fp32, n % 16 == 0")
    assert any(compile_ir.vector_width_bytes(op) == 16 for op in aligned["memory_ops"] if op.startswith("ld."))
    assert "tt.load" in aligned["ir"]["ttir"] and "#blocked" in aligned["ir"]["ttgir"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the chapter compiles live")
def test_chapter_compiles_offline_when_nothing_is_recorded(tmp_path):
    records = compile_ir.compile_records_for_chapter(live=False, directory=tmp_path)
    assert records.available and records.metadata["offline"], records.note
    assert records.provenance.startswith("compiled without a GPU for sm_90")
    assert "ld.global" in records.excerpt("vector_add", "fp32, n % 16 == 0", "ptx", r"ld\.global")


def test_record_compile_script_without_a_gpu_says_so():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = subprocess.run([sys.executable, str(SCRIPT), "/nonexistent"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "no CUDA GPU" in proc.stderr


@pytest.mark.gpu
def test_gpu_live_compile_records():
    records = compile_ir.record_compilation()
    assert records.live and records.available
    assert records.provenance.startswith("live:")
    for v in records.variants:
        assert isinstance(v["n_regs"], int) and v["n_regs"] > 0, v["name"]
        assert isinstance(v["n_spills"], int), v["name"]
        assert isinstance(v["shared_bytes"], int), v["name"]
        assert set(v["ir"]) == set(compile_ir.STAGES), v["name"]
    aligned = records.get("vector_add", "fp32, n % 16 == 0")
    assert any(compile_ir.vector_width_bytes(op) == 16 for op in aligned["memory_ops"] if op.startswith("ld."))


def test_summary_table_is_the_summary_as_a_table():
    records = compile_ir.compile_records_for_chapter(live=False)
    if not records.available:
        pytest.skip(records.note)
    table = records.summary_table("vector_add")
    assert table.header[:3] == ["kernel", "variant", "regs"] and len(table.rows) == len(records.summary("vector_add").splitlines()) - 1
    assert "4× ld.global.v4.b32<br>2× st.global.v4.b32" in table._repr_html_()  # one instruction per line


def test_offline_spills_are_read_from_the_stack_frame():
    """Offline there is no driver count: ptxas puts spilled registers in the thread's stack frame
    (``STACK`` in cuobjdump's resource usage) while ``LOCAL`` stays 0, so 0 local bytes alone must
    not read as "no spills" (the backward's dK/dV kernel: LOCAL 0, STACK 336 at D = 128)."""
    assert compile_ir._spills({"n_spills": 3}) == "3"
    assert compile_ir._spills({"local_bytes": 0, "stack_bytes": 0}) == "0"
    assert compile_ir._spills({"local_bytes": 0, "stack_bytes": 336}) == "336 B stack"
    assert compile_ir._spills({"local_bytes": 0}) == "-"
