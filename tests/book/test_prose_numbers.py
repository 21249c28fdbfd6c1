"""Numbers that agree: the prose of a checked chapter types no measurement by hand.

The rule (what counts as a *typed measurement* in a markdown cell, after code, math, links and
glued values are removed):

- a decimal number (``0.95``, ``1.49``, ``8.4``): in these chapters a decimal outside math is a
  measured time, rate, ratio or fraction, or arithmetic on one;
- a number, or a range or list of numbers, followed by a unit of speed: ``µs``, ``ms``, ``GB/s``,
  ``TB/s``, ``TFLOP/s``, ``tok/s``, ``tokens per second``, ``%``, or ``×`` as a ratio (``1.5×``;
  ``16,384 × 32K`` is a shape and passes);
- a change written with an arrow (``641 → 616``).

A version after the software's name (``Triton 3.9``) and a compute capability (``capability 8.0``)
are names, not measurements, and pass.

Each must instead be pasted from a value a code cell computed from the record when the chapter
ran (``{glue:text}`name```, :mod:`tritonforge.book.numbers`), or sit in :data:`ALLOWED`: the few
numbers that are not measurements of this project (a datasheet figure, a design constant), each
with its reason. Sizes (``436 MB``, ``64 KB``), counts and shapes carry no unit of speed and pass:
the chapters derive them in the open, and no two records can disagree about them.

Around the rule: every pasted name is glued by a cell of the same notebook, a glue never stores a
literal (that would be a typed number with extra steps), every :data:`ALLOWED` entry still matches
(the list only shrinks), and each quantity has one name: "of copy bandwidth" and "of a same-size
copy" (the glossary defines both), never "of a copy", "of its own copy" or "of the big copy".
"""

from __future__ import annotations

import ast
import json
import pathlib
import re

import pytest

pytestmark = pytest.mark.version_free

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHAPTERS = ROOT / "chapters"

CHECKED = (
    "00_how_to_use_this_book",
    "01_memory_hierarchy_and_roofline",
    "02_triton_in_one_sitting",
    "03_fused_rmsnorm_forward",
    "04_rmsnorm_backward",
    "05_fused_swiglu",
    "06_online_softmax",
    "07_flash_attention",
    "07b_flash_attention_backward",
    "08_fallback_routing",
    "09_llama_capstone",
    "10_tensor_parallel",
    "appendix_rmsnorm_measurements",
    "appendix_softmax_measurements",
)
"""The notebooks whose prose states recorded measurements and is held to the rule."""

NOT_YET_CHECKED: tuple[str, ...] = ()
"""Chapters written before the rule and not yet held to it (issue 32 covered chapters 5-9 and the
appendices, session 21 chapters 0-4): none left. A new chapter is checked unless it is added
here, and this list only shrinks."""

ALLOWED: dict[tuple[str, str], str] = {
    ("07_flash_attention", "95%"): "a design threshold of attention_decode._decode_splits (fill whole waves to 95% of the SMs), not a measurement",
    ("10_tensor_parallel", "900 GB/s"): "the H200 datasheet's NVLink 4 bandwidth per GPU, both directions together: a prediction's input",
    ("10_tensor_parallel", "450 GB/s"): "half the datasheet's 900 GB/s, one direction of NVLink: the prediction's beta",
    ("00_how_to_use_this_book", "0.1"): "a prediction of the interpreter's time on a CPU (0.1-0.3 s), which the next cell measures live",
    ("00_how_to_use_this_book", "0.3"): "the same prediction's upper end",
    ("01_memory_hierarchy_and_roofline", "4.8 TB/s"): "the H200 datasheet's memory bandwidth",
    ("01_memory_hierarchy_and_roofline", "65 TFLOP/s"): "the T4 datasheet's tensor-core rate",
    ("01_memory_hierarchy_and_roofline", "320 GB/s"): "the T4 datasheet's memory bandwidth",
    ("01_memory_hierarchy_and_roofline", "90 %"): "a prediction written before the ceilings were measured (the next cell measures them)",
    ("01_memory_hierarchy_and_roofline", "70–80 %"): "the same prediction, for cuBLAS's share of the datasheet rate",
    ("01_memory_hierarchy_and_roofline", "4.2–4.4 TB/s"): "the same prediction in bytes per second",
    ("01_memory_hierarchy_and_roofline", "700–800 TFLOP/s"): "the same prediction in FLOP/s",
    ("01_memory_hierarchy_and_roofline", "25 ms"): "do_bench's warmup setting, milliseconds of running (tritonforge/bench/timing.py)",
    ("01_memory_hierarchy_and_roofline", "100 ms"): "do_bench's rep setting, likewise",
    ("01_memory_hierarchy_and_roofline", "3.36 ms"): "a prediction: 1.07 GB over the T4 datasheet's 320 GB/s",
    ("01_memory_hierarchy_and_roofline", "1.1"): "the RMSNorm's FLOPs in billions (4 a element of 268M): a count",
    ("01_memory_hierarchy_and_roofline", "16 µs"): "a prediction: those FLOPs at the H200 datasheet's 67 TFLOP/s of fp32",
    ("01_memory_hierarchy_and_roofline", "9×"): "the ratio of byte counts, 36 over 4 bytes an element: arithmetic on the kernel table",
    ("01_memory_hierarchy_and_roofline", "8, 3.5×"): "the float32 byte counts, 28 against 8: arithmetic",
    ("03_fused_rmsnorm_forward", "320 GB/s"): "the T4 datasheet's memory bandwidth",
    ("03_fused_rmsnorm_forward", "3.5"): "eager's byte ratio in float32, 28 over 8 bytes an element: arithmetic (chapter 1's table)",
    ("03_fused_rmsnorm_forward", "3.5×"): "the same byte ratio",
    ("03_fused_rmsnorm_forward", "9×"): "eager's byte ratio in bfloat16, 36 over 4: arithmetic",
    ("03_fused_rmsnorm_forward", "1.0"): "the ratio column's meaning (measured over predicted time: 1.0 is copy bandwidth), a definition",
    ("04_rmsnorm_backward", "2.5"): "the ratio of the byte formulas, (5MN + 3N)e over (2MN + N)e: arithmetic",
}
"""(notebook, the matched text) -> why it is not a measurement of this project."""

SPEED_UNIT = r"(?:µs|us\b|ms\b|GB/s|TB/s|TFLOP/s|tok/s|tokens/s|tokens per second|%|×(?!\s*\d))"
NUMBER = r"\d[\d,]*(?:\.\d+)?"
JOIN = r"\s*(?:–|-|→|/|to|and|or|against|,)\s*"
TYPED = re.compile(
    rf"(?<![\w.]){NUMBER}(?:{JOIN}{NUMBER})*\s*{SPEED_UNIT}"  # with a unit of speed
    rf"|(?<![\w.]){NUMBER}\s*→\s*{NUMBER}"  # a change
    rf"|(?<![\w.\\])\d+\.\d+(?![\w.])"  # a decimal
)
VERSION = re.compile(r"\b(?:Triton|PyTorch|torch|Python|CUDA|transformers|[Cc]apability)\s+\d+(?:\.\d+)+")
GLUE_ROLE = re.compile(r"\{glue(?::text)?\}`([^`]+)`")
OLD_BASELINE_NAMES = re.compile(r"\bof (?:a|its own|the big|its) copy\b(?! of\b)|\bof copy\b(?!\s+bandwidth)", re.I)


def _prose(markdown: str) -> str:
    """What a reader reads as words: no code, math, link targets, roles' targets or glued values."""
    text = re.sub(r"^(```|~~~).*?^\1", " ", markdown, flags=re.S | re.M)  # fenced blocks
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)  # display math
    text = re.sub(r"\\begin\{(\w+\*?)\}.*?\\end\{\1\}", " ", text, flags=re.S)
    text = GLUE_ROLE.sub(" VALUE ", text)  # pasted values (a word, so "batch 1 {glue} µs" is not "1 µs")
    text = re.sub(r"\{\w+(?::\w+)*\}`[^`]*`", " ", text)  # other roles: {cite}, {term}, {doc}
    text = re.sub(r"`[^`]*`", " ", text)  # inline code
    text = re.sub(r"(?<![\\$])\$[^$\n]+?\$", " ", text)  # inline math
    text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets
    text = VERSION.sub(" ", text)  # "Triton 3.9", "compute capability 8.0": names, not measurements
    return re.sub(r"<!--.*?-->", " ", text, flags=re.S)


def typed_measurements(markdown: str) -> list[str]:
    """The typed measurements in ``markdown``, by the rule of this module, whitespace collapsed."""
    return [" ".join(m.group(0).split()) for m in TYPED.finditer(_prose(markdown))]


def _cells(name: str) -> list[dict]:
    return json.loads((CHAPTERS / f"{name}.ipynb").read_text(encoding="utf-8"))["cells"]


def _markdown(name: str) -> list[str]:
    return ["".join(c["source"]) for c in _cells(name) if c["cell_type"] == "markdown"]


def _code(name: str) -> str:
    """The notebook's code cells as one module, each IPython magic a ``pass``."""
    sources = ["".join(c["source"]) for c in _cells(name) if c["cell_type"] == "code"]
    return "\n".join(re.sub(r"^(\s*)[%!].*$", r"\1pass", s, flags=re.M) for s in sources)


def _glue_calls(name: str) -> list[ast.Call]:
    return [node for node in ast.walk(ast.parse(_code(name)))
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "glue"]  # fmt: skip


def _glued_names(name: str) -> list[re.Pattern]:
    """A pattern per glue call's name: a literal matches itself, an f-string any filling."""
    patterns = []
    for call in _glue_calls(name):
        key = call.args[0] if call.args else None
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            patterns.append(re.compile(re.escape(key.value)))
        elif isinstance(key, ast.JoinedStr):
            parts = [re.escape(v.value) if isinstance(v, ast.Constant) else r"[^`]+" for v in key.values]
            patterns.append(re.compile("".join(parts)))
    return patterns


# --- the rule itself, on the sentences issue 32 found ------------------------------------------------
@pytest.mark.parametrize(
    "typed",
    [
        "In bfloat16 a program per row made 0.77 of a copy",
        "That is 1.29–1.49× SDPA's FlashAttention-2 backend",
        "SDPA's rate is 282–360 TFLOP/s",
        "took 770 µs in a first run, where cuBLAS took 721",
        "chapter 7 measured ours 1.3–1.5× SDPA's flash backend",
        "this run's unpatched eager B = 1, 185 tok/s, ran faster",
        "the GPU busy for 8% less",
        "bfloat16 4,096 × 128K 641 → 616, and 86 → 82",
        "ours 189, 276, 392 µs",
    ],
)
def test_the_rule_catches_a_typed_measurement(typed):
    assert typed_measurements(typed), f"not caught: {typed!r}"


@pytest.mark.parametrize(
    "prose",
    [
        "rows of 16,384 × 32K and 64 × 256K, 4,096 of them",
        "a predicted $5/3 \\approx 1.67\\times$ and $$x = 1.75$$",
        "ours ran at {glue:text}`fit-fp32` of copy bandwidth, {glue:text}`x-us` µs",
        "decode at batch 1 {glue:text}`b1-ours` µs a layer",
        "the `0.95` in `SHORT_COOP_CHUNK = 4096` and [the record](rows-1.5.json)",
        "436 MB of weights, 64 KB of shared memory, 2,048 keys in blocks of 128",
        "Triton 3.9's interpreter, on a GPU of compute capability 7.5",
    ],
)
def test_the_rule_passes_what_is_not_typed(prose):
    assert typed_measurements(prose) == []


# --- the chapters -----------------------------------------------------------------------------
def test_every_chapter_is_checked_or_listed():
    on_disk = {p.stem for p in CHAPTERS.glob("*.ipynb")}
    assert on_disk == set(CHECKED) | set(NOT_YET_CHECKED), "a notebook is in neither list, or a listed one is gone"
    assert not set(CHECKED) & set(NOT_YET_CHECKED)


@pytest.mark.parametrize("name", CHECKED)
def test_prose_types_no_measurement(name):
    typed = [(i, t) for i, cell in enumerate(_markdown(name)) for t in typed_measurements(cell)]
    found = [f"markdown cell {i}: {t!r}" for i, t in typed if (name, t) not in ALLOWED]
    assert not found, (
        "measurements typed into the prose: glue each from its record "
        "(tritonforge.book.numbers.glue, then {glue:text}`name`), or allow one that is not a "
        "measurement in ALLOWED with its reason:\n  " + "\n  ".join(found)
    )


def test_every_allowed_entry_still_matches():
    stale = [key for key in ALLOWED if key[1] not in {t for cell in _markdown(key[0]) for t in typed_measurements(cell)}]
    assert not stale, f"ALLOWED entries that match nothing (remove them): {stale}"


@pytest.mark.parametrize("name", CHECKED)
def test_every_pasted_name_is_glued(name):
    glued = _glued_names(name)
    pasted = {key.rsplit(":", 1)[0] for cell in _markdown(name) for key in GLUE_ROLE.findall(cell)}
    missing = sorted(key for key in pasted if not any(p.fullmatch(key) for p in glued))
    assert not missing, f"pasted but glued by no code cell: {missing}"


@pytest.mark.parametrize("name", CHECKED)
def test_glue_stores_computed_values(name):
    literal = [ast.unparse(call) for call in _glue_calls(name)
               if len(call.args) > 1 and isinstance(call.args[1], (ast.Constant, ast.List, ast.Tuple))
               and all(isinstance(e, ast.Constant) for e in getattr(call.args[1], "elts", [call.args[1]]))]  # fmt: skip
    assert not literal, f"glue of a typed literal is a typed number: {literal}"


@pytest.mark.parametrize("name", sorted(p.stem for p in CHAPTERS.glob("*.ipynb")))
def test_one_name_per_baseline(name):
    old = [m.group(0) for cell in _markdown(name) for m in OLD_BASELINE_NAMES.finditer(_prose(cell))]
    assert not old, (f"{old}: say 'of copy bandwidth' (the measured ceiling, on the bytes the kernel must move) or "
                     "'of a same-size copy' (a copy of the same bytes, timed the same way); glossary.md defines both")  # fmt: skip


def test_glossary_defines_the_baselines():
    glossary = (ROOT / "glossary.md").read_text(encoding="utf-8")
    for term in ("copy bandwidth", "same-size copy"):
        assert re.search(rf"^{term}$", glossary, re.M), f"glossary.md has no entry '{term}'"


def test_chapter_8_names_every_routing_reason():
    """Chapter 8 counts the router's checks; every reason a route can record is named there."""
    runtime = (ROOT / "tritonforge" / "runtime.py").read_text(encoding="utf-8")
    reasons = re.findall(r'"([a-z-]+)"', re.search(r"reason: Optional\[str\] = None\s*#(.*)", runtime).group(1))
    assert len(reasons) >= 4
    prose = "\n".join(_markdown("08_fallback_routing"))
    missing = [r for r in reasons if f"`{r}`" not in prose]
    assert not missing, f"chapter 8 never names these reasons, which tfg.last_route can report: {missing}"
