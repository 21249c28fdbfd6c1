"""The results schema, provenance, and the loader that rejects what it cannot read (tritonforge.bench.results)."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest
import torch

from tritonforge import bench
from tritonforge.bench import results as results_module
from tritonforge.bench.results import AWAITING_FIRST_RECORD

from .fakes import recorded_files, synthetic_results

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a CUDA GPU")


def test_device_slug_and_default_path():
    assert bench.device_slug("NVIDIA H200") == "nvidia-h200"
    assert bench.device_slug("Tesla T4") == "tesla-t4"
    path = bench.default_results_path({"suite": "rmsnorm", "device": "NVIDIA H200", "date": "2026-11-29T10:00:00+00:00"})
    assert path == Path("benchmarks/results/rmsnorm-nvidia-h200-2026-11-29.json")


def test_metadata_has_the_schema(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    ceilings = bench.Ceilings(4150.0, {"bfloat16": 713.0})
    command = "python -m tritonforge.bench rmsnorm"
    metadata = bench.collect_metadata("rmsnorm", ceilings, bench.do_bench_timer(), quick=False, command=command)
    assert set(bench.METADATA_KEYS) <= set(metadata)
    assert metadata["compute_capability"] == "9.0" and metadata["suites"] == ["ceilings", "rmsnorm"]
    assert metadata["date"].endswith("+00:00") and "do_bench" in metadata["timer"]
    assert "do_bench_cudagraph" in metadata["device_timer"]
    assert metadata["tolerances"]["bfloat16"] == bench.TOLERANCE[torch.bfloat16]
    bench.validate_results(bench.Results(metadata, []).to_dict())


def test_results_round_trip_and_newest_wins(tmp_path):
    older = synthetic_results(date="2026-11-28T09:00:00+00:00")
    newer = synthetic_results(date="2026-11-29T09:00:00+00:00")
    newer.rows[0]["us"] = 12.345
    bench.write_results(newer, tmp_path / "b.json")
    bench.write_results(older, tmp_path / "a.json")  # written later, but measured earlier

    loaded = bench.load_results("rmsnorm", directory=tmp_path)
    assert loaded.path == str(tmp_path / "b.json") and not loaded.live
    assert loaded.rows[0]["us"] == 12.345
    assert {r["suite"] for r in loaded.rows} == {"rmsnorm"}  # filtered to the suite asked for
    assert loaded.ceilings == bench.Ceilings(4000.0, {"bfloat16": 700.0, "float16": 690.0})
    assert loaded.metadata["device"] == "NVIDIA H200"
    assert len(bench.load_results(None, directory=tmp_path).rows) == len(newer.rows)
    with pytest.raises(FileNotFoundError, match="axpy"):
        bench.load_results("axpy", directory=tmp_path)


def test_written_file_has_the_schema(tmp_path):
    results = synthetic_results()
    results.rows[0]["max_rel_err"] = math.inf  # JSON has no inf: written as null
    path = bench.write_results(results, tmp_path / "r.json")
    data = json.loads(path.read_text())
    bench.validate_results(data)
    assert data["schema"] == bench.SCHEMA
    assert set(bench.METADATA_KEYS) <= set(data["metadata"])
    assert all(set(bench.ROW_FIELDS) <= set(row) for row in data["rows"])
    assert data["rows"][0]["max_rel_err"] is None
    del data["rows"][1]["formula"]
    with pytest.raises(ValueError, match="formula"):
        bench.validate_results(data)


def test_files_recorded_before_device_us_still_read(tmp_path):
    data = synthetic_results().to_dict()
    for row in data["rows"]:
        del row["device_us"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(bench.json_safe(data)))
    rows = bench.read_results(path).rows
    assert rows and all(r["device_us"] is None for r in rows)
    del data["rows"][0]["us"]  # a required field missing is still an error
    path.write_text(json.dumps(bench.json_safe(data)))
    with pytest.raises(ValueError, match="lacks"):
        bench.read_results(path)


# ----------------------------------------------------------------------------------------------
# The loader is loud: a file it cannot read is an error naming it, never skipped
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, content, what",
    [
        ("notes.json", json.dumps({"not": "results"}), "no 'schema' key"),
        ("future.json", json.dumps({"schema": "tritonforge.bench/2", "metadata": {}, "rows": []}), "unknown schema"),
        ("broken.json", '{"schema": "tritonforge.bench/1", "rows": [', "Expecting"),
        ("list.json", "[1, 2]", "JSON object"),
        ("no-metadata.json", json.dumps({"schema": "tritonforge.bench/1", "rows": []}), "metadata"),
        ("bad-host.json", json.dumps({"schema": "tritonforge.host-overhead/1", "rows": [{"host_us": 1.0}]}), "lacks"),
    ],
)
def test_loader_rejects_an_unknown_or_malformed_file_by_name(tmp_path, name, content, what):
    bench.write_results(synthetic_results(), tmp_path / "good.json")
    (tmp_path / name).write_text(content)
    with pytest.raises(ValueError, match=what) as failure:
        bench.load_results("rmsnorm", directory=tmp_path)
    assert name in str(failure.value)  # the message names the file
    with pytest.raises(ValueError, match=name):
        bench.read_record(tmp_path / name)


def test_reading_another_tools_record_as_results_says_what_it_is(tmp_path):
    path = tmp_path / "inductor.json"
    path.write_text(json.dumps({"schema": "tritonforge.inductor-code/1", "device": "d", "torch": "t", "triton": "t",
                                "date": "2026-11-29", "kernels": []}))  # fmt: skip
    assert bench.read_record(path)[0] == "tritonforge.inductor-code/1"
    with pytest.raises(ValueError, match="not benchmark results"):
        bench.read_results(path)


RECORDED = recorded_files()


@pytest.mark.skipif(not RECORDED, reason="no recorded results in benchmarks/results yet")
@pytest.mark.parametrize("path", RECORDED, ids=[p.name for p in RECORDED])
def test_every_recorded_file_is_of_a_known_kind(path):
    kind, _ = bench.read_record(path)
    assert kind in bench.RECORD_KINDS
    if kind == bench.SCHEMA:
        assert bench.read_results(path).provenance().startswith("recorded on ")


def test_the_recorded_folder_loads_for_every_suite():
    for suite in bench.SUITES:
        if suite in AWAITING_FIRST_RECORD:
            with pytest.raises(FileNotFoundError):  # recorded at last? then empty AWAITING_FIRST_RECORD
                bench.load_results(suite)
        else:
            assert bench.load_results(suite).where(suite=suite)


# ----------------------------------------------------------------------------------------------
# Where the records are, and the commit they name
# ----------------------------------------------------------------------------------------------


@needs_no_gpu
def test_chapter_asking_for_live_results_gets_the_record_without_gpu(tmp_path):
    bench.write_results(synthetic_results(), tmp_path / "r.json")
    results = bench.results_for_chapter("rmsnorm", live=True, directory=tmp_path)
    assert not results.live and results.provenance().startswith("recorded on NVIDIA H200")


def _imported_modules(module) -> set[str]:
    """Every ``tritonforge`` module a module's source imports, at its top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(Path(module.__file__).read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in names if name.startswith("tritonforge")}


def test_the_schema_module_imports_no_suite():
    """No import cycle in the harness: the results schema and loader stand below the suites (which
    write results) and the book-facing ``results_for_chapter`` (which runs them or loads the record)."""
    from tritonforge.bench import book, suites

    assert not {"tritonforge.bench.suites", "tritonforge.bench.book", "tritonforge.bench.cli"} & _imported_modules(results_module)
    assert "tritonforge.bench.results" in _imported_modules(suites)
    assert {"tritonforge.bench.results", "tritonforge.bench.suites"} <= _imported_modules(book)
    assert bench.results_for_chapter is book.results_for_chapter


def test_recorded_results_ship_with_the_package(tmp_path, monkeypatch):
    """Outside a checkout (Colab's pip install) the default folder resolves to the packaged copy."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    config = tomllib.loads((bench.REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["package-dir"]["tritonforge.recorded"] == bench.DEFAULT_RESULTS_DIR
    assert "*.json" in config["package-data"]["tritonforge.recorded"]
    packaged = tmp_path / "site" / "tritonforge" / "recorded"
    packaged.mkdir(parents=True)
    monkeypatch.setattr(results_module, "REPO_ROOT", tmp_path / "no-checkout")
    monkeypatch.setattr(results_module, "PACKAGED_RESULTS", packaged)
    monkeypatch.chdir(tmp_path)
    assert bench.results_directory() == packaged
    assert bench.results_directory("elsewhere") == tmp_path / "no-checkout" / "elsewhere"


def test_packaged_results_folder_is_beside_the_package():
    assert results_module.PACKAGED_RESULTS == Path(bench.__file__).resolve().parents[1] / "recorded"
    assert (bench.REPO_ROOT / "benchmarks" / "results").is_dir()


def test_git_commit_can_be_declared_for_a_copied_tree(monkeypatch):
    """A working tree copied to a GPU machine may carry stale git metadata: a declared full hash
    wins (dirty unknown); anything that is not a full hash is ignored."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setenv(bench.GIT_COMMIT_ENV, sha.upper())
    assert bench.git_state() == (sha, None)
    monkeypatch.setenv(bench.GIT_COMMIT_ENV, "HEAD")
    assert bench.git_state()[0] != "HEAD"


def test_every_results_folder_a_chapter_reads_ships_with_the_package():
    """A chapter that reads a subfolder of benchmarks/results (chapter 9 e2e/, chapter 3 long-rows/)
    must find it in a pip install too: the folder is in the package data."""
    import json

    tomllib = pytest.importorskip("tomllib")
    packaged = tomllib.loads((bench.REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["tritonforge.recorded"]
    folders = [p.name for p in (bench.REPO_ROOT / "benchmarks" / "results").iterdir() if p.is_dir() and any(p.glob("*.json"))]
    for notebook in sorted((bench.REPO_ROOT / "chapters").glob("*.ipynb")):
        code = "".join("".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code")
        for folder in folders:
            if f'"{folder}"' in code or f"/{folder}/" in code:
                assert f"{folder}/*.json" in packaged, f"{notebook.name} reads benchmarks/results/{folder}/, which pyproject.toml does not package"
