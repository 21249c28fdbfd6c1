"""The package states reasons; the measurements live in benchmarks/NOTES.md. Every threshold of the
GPU fast paths sits in one table (``tritonforge.ops.gpu.thresholds``) with a reason and the NOTES.md
section that holds its numbers; no docstring or comment in the package names a benchmark record."""

from __future__ import annotations

import pathlib
import re

from tritonforge.ops.gpu import softmax as gpu_softmax
from tritonforge.ops.gpu import thresholds

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTES = (ROOT / "benchmarks" / "NOTES.md").read_text(encoding="utf-8")
HEADINGS = {line[3:].strip() for line in NOTES.splitlines() if line.startswith("## ")}


def test_every_threshold_names_a_section_of_the_notes_and_a_reason():
    assert thresholds.THRESHOLDS
    for name, t in thresholds.THRESHOLDS.items():
        assert t.notes in HEADINGS, f"{name}: no section {t.notes!r} in benchmarks/NOTES.md"
        assert len(t.reason.split()) >= 5, f"{name}: a reason, not a label"
        assert isinstance(t.value, int) and t.value > 0, name


def test_the_fast_paths_read_the_table():
    for name in ("COOP_FWD_WARPS", "SHORT_COOP_CHUNK", "ROWS_PER_PROGRAM", "ROWS_MIN_WIDTH", "ROWS_MAX_WIDTH"):
        assert getattr(gpu_softmax, name) == thresholds.THRESHOLDS[name].value


def test_no_package_docstring_names_a_record():
    """A record's file name (``*-nvidia-h200-*.json``) belongs in NOTES.md or an experiment's README."""
    record = re.compile(r"[\w.-]+-nvidia-[\w-]+\d{4}-\d\d-\d\d[\w.-]*\.(json|txt)")
    found = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "tritonforge").rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if record.search(line)]  # fmt: skip
    assert not found, found


def test_the_notes_sections_the_package_names_exist():
    """Docstrings point to ``benchmarks/NOTES.md, "<heading>"``: each quoted heading must be one (or
    begin one: a long heading may be quoted by its start)."""
    quoted = re.compile(r'NOTES\.md,\s*"([^"]+)"')
    for path in sorted((ROOT / "tritonforge").rglob("*.py")):
        text = " ".join(path.read_text(encoding="utf-8").split())  # a heading may wrap across lines
        for heading in quoted.findall(text):
            assert any(h.startswith(heading.rstrip(".")) for h in HEADINGS), f"{path.relative_to(ROOT)}: no NOTES.md section {heading!r}"
