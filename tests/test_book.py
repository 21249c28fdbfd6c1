"""The book's structure: clean notebooks, a consistent table of contents, the Colab install cell,
and one repository URL."""

import ast
import json
import pathlib
import re

import pytest
import yaml

from tritonforge.book.colab import REPOSITORY_URL, colab_url, install_cell_source
from tritonforge.book.compile_ir import PAGE_WIDTH

pytestmark = pytest.mark.version_free  # the book's structure and text: the same on any Triton (the lowest-Triton pass of .ci/run leaves it out)

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb")) + sorted((ROOT / "exercises").rglob("*.ipynb"))
CHAPTERS = sorted(p for p in (ROOT / "chapters").glob("*.ipynb") if re.match(r"\d\d[a-z]?_", p.name))  # 07b too
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())


def _toc_files(node):
    if isinstance(node, dict):
        if "file" in node:
            yield node["file"]
        if "root" in node:
            yield node["root"]
        for value in node.values():
            yield from _toc_files(value)
    elif isinstance(node, list):
        for item in node:
            yield from _toc_files(item)


def _load(path):
    return json.loads(path.read_text(encoding="utf-8"))


def test_there_are_chapters():
    assert CHAPTERS, "no chapter notebooks found"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_committed_clean(path):
    nb = _load(path)
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"cell {i} has outputs: commit notebooks cleared"
            assert cell.get("execution_count") is None, f"cell {i} has an execution count"
    assert set(nb["metadata"]) <= {"kernelspec", "language_info"}, f"extra notebook metadata: {set(nb['metadata'])}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_starts_with_the_colab_install_cell(path):
    code_cells = [c for c in _load(path)["cells"] if c["cell_type"] == "code"]
    assert "".join(code_cells[0]["source"]) == install_cell_source(), "run: python -m tritonforge.book.colab " + str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_imports_tritonforge_before_triton(path):
    sources = ["".join(c["source"]) for c in _load(path)["cells"] if c["cell_type"] == "code"]
    code = "\n".join(sources)
    first_tfg = code.find("import tritonforge")
    assert first_tfg >= 0, "a chapter imports tritonforge"
    first_triton = min((m.start() for m in re.finditer(r"^\s*(import|from) triton\b(?!forge)", code, re.M)), default=len(code))
    assert first_tfg < first_triton, "import tritonforge must come before import triton (interpreter flag)"


@pytest.mark.parametrize("path", sorted((ROOT / "chapters").glob("*.ipynb")), ids=lambda p: p.name)
def test_the_cells_every_page_opens_with_fit_the_page(path):
    """Issue 32: the install and import cells scrolled sideways on every page, their long lines cut
    at the box's edge. A page's first two code cells (the Colab install cell, the imports) and every
    import statement anywhere fit in ``compile_ir.PAGE_WIDTH`` characters a line, the width the
    content column shows without scrolling (``tests/browser`` measures it). Code cells further down
    may still scroll: the browser test exempts code a reader types."""
    code_cells = ["".join(c["source"]) for c in _load(path)["cells"] if c["cell_type"] == "code"]
    too_wide = [f"cell {i}: {line!r}" for i, source in enumerate(code_cells[:2])
                for line in source.splitlines() if len(line) > PAGE_WIDTH]  # fmt: skip
    for i, source in enumerate(code_cells):
        lines = source.splitlines()
        tree = ast.parse(re.sub(r"^(\s*)[%!].*$", r"\1pass", source, flags=re.M))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                too_wide += [f"cell {i}: {line!r}" for line in lines[node.lineno - 1 : node.end_lineno] if len(line) > PAGE_WIDTH]
    assert not too_wide, f"lines wider than PAGE_WIDTH = {PAGE_WIDTH}: " + "; ".join(dict.fromkeys(too_wide))


def _title(entry: str) -> str:
    """The first heading of a table-of-contents entry: what the sidebar shows for it."""
    path = next(p for p in (ROOT / (entry + ".md"), ROOT / (entry + ".ipynb")) if p.is_file())
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "markdown")
    return re.search(r"^# (.+)$", text, re.M).group(1).strip()


def test_no_page_repeats_its_parts_caption():
    """Issue 32: "Kernels" appeared twice in the sidebar, as a part's caption and as the title of
    the part's first page. A page under a caption says something the caption does not."""
    for part in TOC["parts"]:
        for chapter in part["chapters"]:
            title = chapter.get("title") or _title(chapter["file"])  # _toc.yml may name the entry itself
            assert title.casefold() != part["caption"].casefold(), f"{chapter['file']} repeats '{part['caption']}'"


def test_repository_url_agrees_with_the_package():
    assert CONFIG["repository"]["url"] == REPOSITORY_URL
    assert REPOSITORY_URL in install_cell_source()
    assert CONFIG["launch_buttons"]["colab_url"] == "https://colab.research.google.com"


def test_colab_url_points_at_the_notebook():
    url = colab_url("chapters/00_how_to_use_this_book.ipynb")
    assert url == "https://colab.research.google.com/github/Gaurav711cgu/TritonForge/blob/main/chapters/00_how_to_use_this_book.ipynb"


def test_toc_lists_existing_files_and_every_chapter():
    listed = set(_toc_files(TOC))
    for entry in listed:
        candidates = [ROOT / (entry + ext) for ext in ("", ".md", ".ipynb")]
        assert any(c.is_file() for c in candidates), f"_toc.yml lists {entry}, which does not exist"
    for chapter in CHAPTERS:
        assert str(chapter.relative_to(ROOT).with_suffix("")) in listed, f"{chapter.name} is not in _toc.yml"
    captions = [part["caption"] for part in TOC["parts"]]
    assert captions == ["Foundations", "Kernels", "Production", "Exercises", "Back matter"]


def test_build_executes_notebooks_and_fails_on_errors():
    assert CONFIG["execute"]["execute_notebooks"] == "force"
    assert CONFIG["execute"]["allow_errors"] is False
    assert CONFIG["execute"]["timeout"] > 0
    assert CONFIG["sphinx"]["config"]["nb_execution_raise_on_error"] is True


def test_every_subpackage_is_packaged():
    """pyproject.toml lists the packages a non-editable install (Colab's pip install from git)
    ships: every folder of tritonforge with an __init__.py must be there, or an import fails there
    while the editable checkout still works."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    root = pathlib.Path(__file__).resolve().parent.parent
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {
        ".".join(init.parent.relative_to(root).parts) for init in (root / "tritonforge").rglob("__init__.py")
    }
    assert on_disk <= listed, f"not packaged: {sorted(on_disk - listed)}"
