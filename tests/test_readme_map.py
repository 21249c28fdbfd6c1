"""The README's "Map of the repository" stays true: it names every top-level folder and every
module of the package (``__init__.py`` and ``__main__.py`` aside), and every path it names exists.
The lists are read from the tree when the test runs, so a module or a folder added later fails
here until the map gains its row."""

import fnmatch
import pathlib
import re
import subprocess

import pytest

pytestmark = pytest.mark.version_free  # the README and the tree: the same on any Triton

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAP_HEADING = "## Map of the repository"


def map_paths(readme: str) -> list[str]:
    """The paths in the first column of the map's table (each in backticks; a cell may hold several)."""
    start = readme.index(MAP_HEADING)
    end = readme.find("\n## ", start + len(MAP_HEADING))
    section = readme[start : end if end != -1 else len(readme)]
    paths = []
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) < 3 or set(cells[1].strip()) <= set("-"):
            continue  # not a table row, or the header's rule
        paths += re.findall(r"`([^`]+)`", cells[1])
    return paths


def tracked_files() -> list[str]:
    """The files of the tree, relative to the root: those git tracks and the new ones it does not
    ignore (a module not yet committed counts); without git, the files on disk less build output."""
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        return [line for line in out.splitlines() if (ROOT / line).exists()]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: what is on disk, build output aside
        left_out = {".git", ".venv", "venv", "_build", "build", "__pycache__", ".pytest_cache", ".ipynb_checkpoints", ".jupyter_cache"}
        relative = (p.relative_to(ROOT) for p in ROOT.rglob("*") if p.is_file())
        return [str(r) for r in relative if not any(part in left_out or part.endswith(".egg-info") for part in r.parts)]


def package_modules(files: list[str]) -> list[str]:
    return sorted(f for f in files if fnmatch.fnmatch(f, "tritonforge/*.py") and pathlib.PurePath(f).name not in ("__init__.py", "__main__.py"))


def top_level_folders(files: list[str]) -> list[str]:
    return sorted({f.split("/")[0] + "/" for f in files if "/" in f})


def test_the_map_parses():
    readme = "| `z/` | before |\n## Map of the repository\n\n| path | what |\n|---|---|\n| `a/`, `b.py` | `not/a/path` |\n\n## Next\n| `c/` | y |"
    assert map_paths(readme) == ["a/", "b.py"]


def test_the_tree_is_read():
    files = tracked_files()
    assert "tritonforge/runtime.py" in package_modules(files)
    assert "tritonforge/exercise/registry.py" in package_modules(files)
    assert "tritonforge/ops/__init__.py" not in package_modules(files)
    assert {"tritonforge/", "tests/", "chapters/"} <= set(top_level_folders(files))


def test_every_package_module_has_a_row():
    named = set(map_paths((ROOT / "README.md").read_text(encoding="utf-8")))
    missing = [m for m in package_modules(tracked_files()) if m not in named]
    assert not missing, f"modules without a row in the README's map: {missing}"


def test_every_top_level_folder_has_a_row():
    named = set(map_paths((ROOT / "README.md").read_text(encoding="utf-8")))
    missing = [f for f in top_level_folders(tracked_files()) if f not in named]
    assert not missing, f"top-level folders without a row in the README's map: {missing}"


def test_every_path_in_the_map_exists():
    paths = map_paths((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(paths) > 40
    gone = [p for p in paths if not (list(ROOT.glob(p.rstrip("/"))) if "*" in p else (ROOT / p).exists())]
    assert not gone, f"the README's map names paths that do not exist: {gone}"
