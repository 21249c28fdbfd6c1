"""Where the book lives, and the install cell every chapter starts with.

The repository URL is kept in two places on purpose: ``_config.yml`` (for the book's launch and
repository buttons) and :data:`REPOSITORY_URL` here (for the Colab install cell, which runs
before tritonforge is importable). ``tests/test_book.py`` checks that they agree and that every
chapter's first code cell is exactly :func:`install_cell_source`.

``python -m tritonforge.book.colab chapters/*.ipynb`` (re)writes that first cell in the notebooks
given.
"""

from __future__ import annotations

import json
import sys

REPOSITORY_URL = "https://github.com/Gaurav711cgu/TritonForge"
BRANCH = "main"


def install_cell_source() -> str:
    """The guarded install cell: installs tritonforge in Colab, does nothing anywhere else.

    ``pip install`` of the package keeps Colab's own torch and triton: ``pyproject.toml`` asks
    only for loose ranges that Colab's versions already satisfy. Every line fits the book's page
    (``compile_ir.PAGE_WIDTH``): the source is a variable, which IPython expands in ``%pip``'s line.
    """
    return (
        "# Runs only in Google Colab: install tritonforge from the book's repository.\n"
        "# Anywhere else it does nothing (install with `pip install -e .` instead).\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        f'    SOURCE = "git+{REPOSITORY_URL}@{BRANCH}"\n'
        '    %pip install -q "tritonforge @ {SOURCE}"'
    )


def colab_url(notebook_path: str) -> str:
    """The Colab link that opens ``notebook_path`` (relative to the repository root)."""
    slug = REPOSITORY_URL.removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{slug}/blob/{BRANCH}/{notebook_path}"


def stamp(path: str) -> bool:
    """Make the first code cell of the notebook at ``path`` the install cell; True if changed."""
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    cell = {
        "cell_type": "code",
        "execution_count": None,
        "id": "colab-install",
        "metadata": {"tags": ["colab-install"]},
        "outputs": [],
        "source": install_cell_source().splitlines(keepends=True),
    }
    code_cells = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]
    if code_cells and "colab-install" in nb["cells"][code_cells[0]].get("metadata", {}).get("tags", []):
        if nb["cells"][code_cells[0]] == cell:
            return False
        nb["cells"][code_cells[0]] = cell
    else:
        # After the title cell when the notebook opens with markdown.
        at = 1 if nb["cells"] and nb["cells"][0]["cell_type"] == "markdown" else 0
        nb["cells"].insert(at, cell)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(nb, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return True


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(("stamped " if stamp(p) else "unchanged ") + p)
