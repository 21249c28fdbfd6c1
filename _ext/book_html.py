"""The book's HTML hooks (loaded via _config.yml, ``sphinx.local_extensions``): a fix to the HTML
that Jupyter Book 1.0 writes with Sphinx 7.4, and the book's CSS (``static/tritonforge.css``:
error text and the output of cells tagged ``wrap-output`` wrap at the content column).

sphinx-thebe registers an inline ``<script>`` (``const THEBE_JS_URL = ...``) after the HTML
builder has started; Sphinx 7.4 then puts it on every page twice (once as registered, once
re-added from its registry with the file name ``None`` turned into ``""``, so its own duplicate
check misses it), and the second copy throws "Identifier 'THEBE_JS_URL' has already been
declared" in every reader's console. This drops exact duplicates from each page's scripts.
tests/browser/test_pages.py fails on any console error, so it notices if this stops working.
"""

from __future__ import annotations

from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen, unique = set(), []
    for script in scripts:
        filename = getattr(script, "filename", script) or ""
        attributes = getattr(script, "attributes", {})
        key = (filename, tuple(sorted((k, str(v)) for k, v in attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


def _add_static(app):
    app.config.html_static_path.append(str(STATIC))


def setup(app):
    app.connect("builder-inited", _add_static)
    app.add_css_file("tritonforge.css")
    # Late, after the extensions that add per-page scripts in the same event (MathJax, myst-nb).
    app.connect("html-page-context", _drop_duplicate_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
