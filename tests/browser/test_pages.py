"""The built book as its readers see it: every page of ``_build/html`` opened in a real browser.

The HTML is served on 127.0.0.1 (``http.server`` in a thread) and opened in headless Chromium
(Debian's ``/usr/bin/chromium``) driven by Playwright. Per page this checks that

- it has its title (the ``<title>`` starts with the page's heading);
- its math is rendered: every math element holds MathJax output, MathJax reported no TeX error,
  no raw TeX (``$$``, ``\\(``, ``\\[``, ``$x_i$``) is left in the text a reader sees, and a page whose
  source has math shows some;
- every ``<img>`` loaded (``naturalWidth > 0``);
- every link that stays in the book resolves to a built file, and its ``#anchor`` to an element;
- the browser logged no console error and no script error, and no request failed;
- nothing was requested from outside 127.0.0.1: the book is complete offline (MathJax ships in
  ``_vendor/mathjax``), and such requests are blocked, so the test never touches the network;
- no page shows an ipywidget: with no kernel and no widget JavaScript it would be an empty box
  (the convention: tag the widget cell ``remove-output`` and follow it with a static figure);
- a page built from a notebook links to Colab at exactly ``tritonforge.book.colab.colab_url(<notebook>)``;
- nothing in the content column (``article.bd-article``, 688 px wide in the 1280 px window) is
  wider than the column: no element hides part of itself behind a horizontal scroll bar (its
  ``scrollWidth`` more than 2 px past its ``clientWidth``), and none sticks out of the column.
  This covers outputs, tables, images, math and prose. Code a reader types is exempt: a code cell's
  input (``.cell_input``) and a literal code block in the text scroll sideways on a long line in
  every Jupyter Book, and what they hide is code, not a result the prose quotes. Everything a cell
  prints or shows is checked. ``WIDE_ALLOWED`` lists what may stay too wide, each with its reason
  (nothing now). The package code and compiler listings the chapters print are kept to
  ``compile_ir.PAGE_WIDTH`` characters a line; a test plants such a line, and one a few characters
  longer, in a built page and checks that the first fits and the second is reported.

Full-page screenshots go to ``artifacts/screenshots/`` and a summary to
``artifacts/browser-report.json`` (``TRITONFORGE_ARTIFACTS`` moves them).

Without a built book (``_build/html``), a stale one, Playwright or Chromium, the tests are skipped
with the reason; with ``TRITONFORGE_REQUIRE_BROWSER=1`` (set by ``.ci/run``) they fail instead.
"""

from __future__ import annotations

import fnmatch
import functools
import http.server
import json
import os
import posixpath
import re
import shutil
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from tritonforge.book.colab import colab_url
from tritonforge.book.compile_ir import PAGE_WIDTH

pytestmark = pytest.mark.slow  # reads the built book: not in the quick tier

ROOT = Path(__file__).resolve().parents[2]
HTML = Path(os.environ.get("TRITONFORGE_BOOK_HTML", ROOT / "_build" / "html"))
ARTIFACTS = Path(os.environ.get("TRITONFORGE_ARTIFACTS", ROOT / "artifacts"))
SCREENSHOTS = ARTIFACTS / "screenshots"
REQUIRE = os.environ.get("TRITONFORGE_REQUIRE_BROWSER") == "1"
COLAB = "https://colab.research.google.com/"
# Flags for Debian's Chromium on a machine with a closed network (no first-run, sync or
# component-update traffic); Playwright adds --headless, --no-sandbox and a fresh profile.
CHROMIUM_ARGS = [
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
NOT_PAGES = {"_static", "_sources", "_images", "_downloads", "jupyter_execute"}
WIDGET_CONVENTION = (
    "shows an ipywidget, which the static book cannot run (no kernel, no widget JavaScript): "
    "tag that cell `remove-output` and show the same thing as a static figure in the next cell"
)


def _pages() -> list[str]:
    if not (HTML / "index.html").is_file():
        return []
    return sorted(
        p.relative_to(HTML).as_posix()
        for p in HTML.rglob("*.html")
        if p.relative_to(HTML).parts[0] not in NOT_PAGES
    )


def _toc_files(node):
    if isinstance(node, dict):
        for key in ("root", "file"):
            if key in node:
                yield node[key]
        for value in node.values():
            yield from _toc_files(value)
    elif isinstance(node, list):
        for item in node:
            yield from _toc_files(item)


def _source_of(page: str) -> Path | None:
    """The repository file a page was built from (chapters/x.html -> chapters/x.ipynb or .md)."""
    stem = ROOT / page.removesuffix(".html")
    for suffix in (".ipynb", ".md"):
        if stem.with_suffix(suffix).is_file():
            return stem.with_suffix(suffix)
    return None


def _stale_sources() -> list[str]:
    """Book sources newer than the page built from them: the build is out of date."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    stale = []
    for entry in dict.fromkeys(_toc_files(toc)):
        page = HTML / (entry + ".html")
        source = _source_of(entry + ".html")
        if source is None:
            continue
        if not page.is_file():
            stale.append(f"{entry} (listed in _toc.yml, not built)")
        elif source.stat().st_mtime > page.stat().st_mtime:
            stale.append(f"{source.relative_to(ROOT)} (edited after the build)")
    return stale


def _unavailable(reason: str):
    if REQUIRE:
        pytest.fail(f"{reason} -- TRITONFORGE_REQUIRE_BROWSER=1 says this test must run here")
    pytest.skip(reason)


def _chromium() -> str | None:
    """Debian's Chromium, or the browser TRITONFORGE_CHROMIUM names (then only that one)."""
    if os.environ.get("TRITONFORGE_CHROMIUM"):
        candidates = [os.environ["TRITONFORGE_CHROMIUM"]]
    else:
        candidates = ["/usr/bin/chromium"]
        candidates += [shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")]
    return next((c for c in candidates if c and Path(c).is_file()), None)


PAGES = _pages()
REPORT: dict[str, dict] = {}
ALLOWED_WIDE_SEEN: set[tuple[str, str]] = set()


# --- math in a page's source -----------------------------------------------------------------
# Code fences (```python, ``` ...) are not math; directive fences (```{note}, ```{glossary}) hold
# MyST text that may be.
_CODE_FENCE = re.compile(r"^(`{3,}|~{3,})(?!\{)[^\n]*\n.*?^\1[ \t]*$", re.M | re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_SOURCE_MATH = re.compile(r"\$\$|\\begin\{|(?<![\\$])\$[^$\s][^$\n]*?(?<![\\\s])\$")
# Raw TeX left in the text a reader sees (code blocks and MathJax output removed first).
_RAW_TEX = re.compile(r"\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\$[^$\n]*[\\^_{}][^$\n]*\$")


# --- too wide for the content column -------------------------------------------------------------
# What may stay wider than the column, and why: (page pattern, fnmatch) and (text pattern, a regex
# matched at the start of the element's text) -> reason. Everything else that is too wide fails the
# test. An entry that matches nothing on any page it names fails too, so the list only shrinks.
# Empty: every output fits. The package functions the chapters print are kept in lines of at most
# compile_ir.PAGE_WIDTH = 76 characters (77 fit the 688 px column in the theme's 14 px monospace;
# test_page_width_fits_a_built_page checks it), and compiler output (Triton IR, PTX, Inductor's
# kernel) is printed through tritonforge.book.compile_ir (excerpt, wrap_python), which breaks long
# lines only where the language reads a line break as a space, and says so in the first line.
WIDE_ALLOWED: dict[tuple[str, str], str] = {}


def _markdown_has_math(text: str) -> bool:
    if re.search(r"^(`{3,}|~{3,})\{math\}|\{math\}`", text, re.M):
        return True
    text = _INLINE_CODE.sub("", _CODE_FENCE.sub("", text))
    return bool(_SOURCE_MATH.search(text))


def _source_has_math(source: Path | None) -> bool:
    if source is None:
        return False
    if source.suffix == ".ipynb":
        cells = json.loads(source.read_text(encoding="utf-8"))["cells"]
        return any(_markdown_has_math("".join(c["source"])) for c in cells if c["cell_type"] == "markdown")
    return _markdown_has_math(source.read_text(encoding="utf-8"))


@functools.cache
def _anchors(path: Path) -> frozenset[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    return frozenset(re.findall(r"""\b(?:id|name)=["']([^"']+)["']""", text))


# --- the server and the browser ---------------------------------------------------------------
class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no request log on stderr
        pass


@pytest.fixture(scope="module")
def book_url():
    if not PAGES:
        _unavailable(f"no built book at {HTML} (build it first: the README's build command)")
    stale = _stale_sources()
    if stale:
        _unavailable("the built book is older than its sources, rebuild it: " + "; ".join(stale[:5]))
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -r requirements.txt)")
    executable = _chromium()
    if executable is None:
        _unavailable("no Chromium (Debian: apt-get install chromium; or set TRITONFORGE_CHROMIUM)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def browser_context(book_url, browser):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    yield context
    context.close()
    (ARTIFACTS / "browser-report.json").write_text(json.dumps(REPORT, indent=1, sort_keys=True) + "\n")


# --- what the page shows, read in the page --------------------------------------------------------
_READ_PAGE = """async () => {
  const within = (ms, promise) => Promise.race([promise, new Promise(done => setTimeout(done, ms))]);
  // Let lazy images load and wait for every image to finish, loaded or broken.
  document.querySelectorAll('img[loading="lazy"]').forEach(img => { img.loading = 'eager'; });
  await within(20000, Promise.all([...document.images].map(img => img.complete ? null :
      new Promise(done => { img.addEventListener('load', done); img.addEventListener('error', done); }))));
  // MathJax typesets after load; its startup promise resolves when the page's math is done.
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await within(20000, MathJax.startup.promise); }
  const heading = document.querySelector('article h1') || document.querySelector('main h1');
  const text = (el) => (el ? el.textContent.replace(/[#\\u00b6]\\s*$/, '').trim() : '');
  const visible = document.body.cloneNode(true);
  visible.querySelectorAll('pre, code, script, style, textarea, mjx-container, .highlight')
         .forEach(el => el.remove());
  return {
    title: document.title,
    heading: text(heading),
    images: [...document.images].map(img => ({src: img.currentSrc || img.src,
                                              ok: img.complete && img.naturalWidth > 0})),
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    scripts: [...document.scripts].map(s => s.src).filter(Boolean),
    mathUnrendered: [...document.querySelectorAll('.math')]
        .filter(el => !el.querySelector('mjx-container')).map(el => el.textContent.trim().slice(0, 80)),
    mathRendered: document.querySelectorAll('mjx-container').length,
    // TeX that MathJax could not parse becomes <merror>; an undefined macro is set in red.
    mathErrors: window.MathJax && MathJax.startup && MathJax.startup.document
        ? Array.from(MathJax.startup.document.math)
            .filter(item => /<merror|<mtext mathcolor="red">\\\\/.test(MathJax.startup.toMML(item.root)))
            .map(item => item.math.slice(0, 80))
        : [],
    widgets: document.querySelectorAll(
        'script[type="application/vnd.jupyter.widget-view+json"], .jupyter-widgets').length,
    visibleText: visible.textContent,
  };
}"""


# Elements of the content column wider than it, in reading order: {kind, text (its first 300
# characters; a problem names the first 60), width, column}.
# Reported: an element that hides part of its content behind a horizontal scroll (overflow-x not
# visible, scrollWidth > clientWidth + 2), or the outermost element that sticks out of the column
# by more than 2 px (inline math: 4 px). Exempt: code cell inputs and literal code blocks outside outputs (see the
# module docstring); MathJax's internals (its container is checked).
_WIDE = """() => {
  const column = document.querySelector('article.bd-article');
  if (!column) return [];
  const box = column.getBoundingClientRect(), style = getComputedStyle(column);
  const left = box.left + parseFloat(style.paddingLeft), right = box.right - parseFloat(style.paddingRight);
  const outside = (el) => { const r = el.getBoundingClientRect();
                            return r.width > 0 && (r.right > right + 2 || r.left < left - 2); };
  const wide = [], reported = [];
  for (const el of column.querySelectorAll('*')) {
    if (reported.some(outer => outer.contains(el))) continue;
    if (el.closest('.cell_input')) continue;
    if (el.closest('div[class*="highlight-"]') && !el.closest('.cell_output')) continue;
    if (el.parentElement.closest('mjx-container')) continue;
    const css = getComputedStyle(el);
    // Inline math scrolls by the 3 px its last italic glyph overhangs its box: not a hidden part.
    const slack = el.matches('span.math, mjx-container:not([display="true"])') ? 4 : 2;
    const hides = css.display !== 'inline' && css.overflowX !== 'visible' && el.scrollWidth > el.clientWidth + slack;
    const sticksOut = outside(el) && (el.parentElement === column || !outside(el.parentElement));
    if (!hides && !sticksOut) continue;
    reported.push(el);
    const kind = (el.closest('.cell_output') ? 'output ' : '')
        + (el.matches('table') || el.querySelector('table') ? 'table'
           : el.matches('img, svg') || el.querySelector('img') ? 'image'
           : el.closest('mjx-container, .math') || el.querySelector('mjx-container') ? 'math'
           : el.closest('pre') || el.querySelector('pre') ? 'text' : el.tagName.toLowerCase());
    const text = el.matches('img') ? (el.getAttribute('alt') || el.getAttribute('src')) : el.textContent;
    wide.push({kind, text: (text || '').replace(/\\s+/g, ' ').trim().slice(0, 300),
               width: Math.round(Math.max(el.scrollWidth, el.getBoundingClientRect().width)),
               column: Math.round(right - left)});
  }
  return wide;
}"""


def _allowed_wide(page: str) -> list[tuple[str, str]]:
    return [key for key in WIDE_ALLOWED if fnmatch.fnmatch(page, key[0])]


def _too_wide(tab, page: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Problems for the elements of ``page`` wider than its content column, and the allowed ones seen."""
    problems, allowed = [], []
    for el in tab.evaluate(_WIDE):
        key = next((k for k in _allowed_wide(page) if re.match(k[1], el["text"])), None)
        if key:
            allowed.append(key)
        else:
            problems.append(f"{el['kind']} {el['width']} px wide in a {el['column']} px column: {el['text'][:60]!r}")
    return problems, allowed


def _check_link(href: str, base: str) -> str | None:
    """Why a same-site link is broken, or None when it resolves."""
    parts = urlsplit(href)
    path = posixpath.normpath(unquote(parts.path))
    if path.endswith("/") or parts.path.endswith("/"):
        path = posixpath.join(path, "index.html")
    target = HTML / path.lstrip("/")
    if not target.resolve().is_relative_to(HTML.resolve()):
        return f"link leaves the book: {href}"
    if not target.is_file():
        return f"broken link: {href.removeprefix(base)} (no {target.relative_to(HTML)} in the build)"
    fragment = unquote(parts.fragment)
    if fragment and target.suffix == ".html" and fragment not in _anchors(target):
        return f"broken anchor: {href.removeprefix(base)} (no id {fragment!r} in {target.relative_to(HTML)})"
    return None


def test_every_toc_entry_is_a_built_page(book_url):
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    missing = [entry for entry in _toc_files(toc) if entry + ".html" not in PAGES]
    assert not missing, f"in _toc.yml but not in {HTML}: {missing}"


_REDIRECT = re.compile(r"""^\s*<meta http-equiv="Refresh" content="0; url=([^"]+)" />\s*$""", re.I)


@pytest.mark.parametrize("page", PAGES or ["(no built book)"])
def test_page_as_a_reader_sees_it(page, book_url, browser_context):
    redirect = _REDIRECT.match((HTML / page).read_text(encoding="utf-8")) if PAGES else None
    if redirect:  # index.html: Jupyter Book's bare redirect to the root page
        target = posixpath.join(posixpath.dirname(page), redirect.group(1))
        assert _check_link(book_url + target, book_url) is None, f"{page} redirects to a missing {target}"
        REPORT[page] = {"redirect": target}
        return
    started = time.perf_counter()
    problems: list[str] = []
    outside: list[str] = []

    def route(route_):
        url = route_.request.url
        if url.startswith(book_url) or url.startswith(("data:", "blob:", "about:")):
            route_.continue_()
        else:
            outside.append(url)
            route_.abort()

    tab = browser_context.new_page()
    tab.route("**/*", route)
    console_errors: list[tuple[str, str]] = []  # (text, url of the resource it is about)
    tab.on("console", lambda msg: console_errors.append((msg.text, msg.location.get("url", "")))
           if msg.type == "error" else None)
    tab.on("pageerror", lambda error: console_errors.append((f"script error: {error}", "")))
    tab.on("requestfailed", lambda req: None if req.url in outside else
           problems.append(f"request failed: {req.url.removeprefix(book_url)} ({req.failure})"))
    tab.on("response", lambda res: problems.append(f"HTTP {res.status}: {res.url.removeprefix(book_url)}")
           if res.status >= 400 else None)
    try:
        tab.goto(book_url + page, wait_until="load")
        seen = tab.evaluate(_READ_PAGE)
        wide, allowed_wide = _too_wide(tab, page)
        tab.screenshot(path=str(SCREENSHOTS / (page.replace("/", "__").removesuffix(".html") + ".png")),
                       full_page=True)
    finally:
        tab.close()

    # Title: every page has one, and it starts with the page's heading.
    if not seen["heading"]:
        problems.append("no <h1> heading")
    if not seen["title"].strip():
        problems.append("empty <title>")
    elif seen["heading"] and not seen["title"].startswith(seen["heading"]):
        problems.append(f"<title> {seen['title']!r} does not start with the heading {seen['heading']!r}")

    # Math: rendered by MathJax, without errors, nothing left raw; present where the source has it.
    source = _source_of(page)
    if seen["mathUnrendered"]:
        problems.append(f"math not rendered by MathJax: {seen['mathUnrendered'][:3]}")
    if seen["mathErrors"]:
        problems.append(f"MathJax errors: {seen['mathErrors'][:3]}")
    raw = sorted({m.group(0)[:40] for m in _RAW_TEX.finditer(seen["visibleText"])})
    if raw:
        problems.append(f"raw TeX in the page's text: {raw[:5]}")
    if _source_has_math(source) and seen["mathRendered"] == 0:
        problems.append(f"{source.relative_to(ROOT)} has math but the page shows none")

    # Images, links, scripts.
    problems += [f"image did not load: {img['src'].removeprefix(book_url)}" for img in seen["images"] if not img["ok"]]
    links = list(dict.fromkeys(seen["links"]))
    for href in links:
        if href.startswith(book_url):
            problem = _check_link(href, book_url)
            if problem:
                problems.append(problem)
        elif href.startswith("file:"):
            problems.append(f"link to a local file: {href}")
    scripts = [s.split("?")[0] for s in seen["scripts"]]
    problems += [f"script loaded twice: {s.removeprefix(book_url)}" for s in sorted({s for s in scripts if scripts.count(s) > 1})]

    # Console, network, widgets.
    problems += [f"console error: {text} ({url.removeprefix(book_url)})" for text, url in console_errors if url not in outside]
    problems += [f"requested from outside the book (blocked): {url}" for url in dict.fromkeys(outside)]
    if seen["widgets"]:
        problems.append(f"page {WIDGET_CONVENTION}")

    # Width: everything a reader should see fits in the content column (WIDE_ALLOWED: known, with reasons).
    problems += wide
    ALLOWED_WIDE_SEEN.update(allowed_wide)

    # Colab: a page built from a notebook opens exactly that notebook in Colab.
    colab_links = sorted({href for href in links if href.startswith(COLAB)})
    if source is not None and source.suffix == ".ipynb":
        expected = colab_url(source.relative_to(ROOT).as_posix())
        if expected not in colab_links:
            problems.append(f"no Colab launch link to {expected} (found {colab_links})")
        problems += [f"Colab link to another notebook: {href}" for href in colab_links if href != expected]
    elif colab_links:
        problems.append(f"Colab link on a page that is not a notebook: {colab_links}")

    REPORT[page] = {
        "seconds": round(time.perf_counter() - started, 2),
        "title": seen["title"],
        "images": len(seen["images"]),
        "math_rendered": seen["mathRendered"],
        "external_links": sorted({h for h in links if not h.startswith(book_url) and "://" in h}),
        "colab": colab_links,
        "too_wide_allowed": [key[1] for key in dict.fromkeys(allowed_wide)],
        "problems": list(dict.fromkeys(problems)),
    }
    assert not problems, f"{page}:\n  " + "\n  ".join(problems)


def test_every_allowed_wide_entry_is_still_needed(book_url, browser_context):
    """WIDE_ALLOWED shrinks as the book is fixed: an entry no page matched is stale (runs after the
    per-page test, which records what each entry matched)."""
    if any(page not in REPORT for page in PAGES):
        pytest.skip("the per-page test did not run on every page (run the whole file)")
    stale = [key for key in WIDE_ALLOWED if key not in ALLOWED_WIDE_SEEN]
    assert not stale, f"WIDE_ALLOWED entries that match nothing in the book any more, remove them: {stale}"


# A page shaped like the theme's (the same column and cell markup), with one too-wide thing of each
# kind beside a long code input, which is exempt.
_PLANTED = """<!doctype html><html><body style="margin:0"><main><div style="width:800px">
<article class="bd-article" style="width:688px; padding: 0 20px">
  <div class="cell"><div class="cell_input"><div class="highlight"><pre style="overflow:auto">
x = 1  # an input line longer than the column: {pad}
</pre></div></div>
  <div class="cell_output"><div class="output stream"><pre style="overflow:auto">
wide output: {pad}
</pre></div></div></div>
  <div style="overflow-x:auto"><table><tr><td>a wide table</td><td style="min-width:900px">x</td></tr></table></div>
  <p>some prose</p>
  <img alt="a wide figure" src="data:image/gif;base64,R0lGODlhAQABAAAAACwAAAAAAQABAAA=" width="900" height="10">
  <pre style="overflow:auto; width: 200px">{short}</pre>
</article></div></main></body></html>"""


def test_too_wide_is_caught_on_a_planted_page(browser):
    """The width check on a planted page: the wide output, table and image are reported by name;
    the long code input and a narrow block that fits are not."""
    tab = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        tab.set_content(_PLANTED.format(pad="word " * 60, short="fits"))
        problems, allowed = _too_wide(tab, "planted.html")
    finally:
        tab.close()
    assert allowed == []
    assert len(problems) == 3, problems
    output, table, image = problems
    assert output.startswith("output text ") and "in a 688 px column: 'wide output: word word" in output
    assert table.startswith("table ") and "'a wide tablex'" in table
    assert image.startswith("image 900 px wide") and "'a wide figure'" in image


# Two copies of the first unwrapped output of a built page, holding the given lines of text.
_PLANT_OUTPUT = """(lines) => {
  const pre = [...document.querySelectorAll('article.bd-article .cell_output pre')]
      .find(el => getComputedStyle(el).whiteSpace === 'pre');
  if (!pre) return false;
  const output = pre.closest('.output') || pre;
  for (const text of lines) {
    const copy = output.cloneNode(true);
    (copy.matches('pre') ? copy : copy.querySelector('pre')).textContent = text;
    output.after(copy);
  }
  return true;
}"""


def test_page_width_fits_a_built_page(book_url, browser_context):
    """With the theme's own CSS, on a built page: an output line of ``PAGE_WIDTH`` characters (what
    the printed package code and compiler listings are kept to) fits the content column, and the
    width check reports a line a few characters longer."""
    page = next((p for p in PAGES if "cell_output" in (HTML / p).read_text(encoding="utf-8")), None)
    if page is None:
        pytest.skip("no built page has a cell output")
    tab = browser_context.new_page()
    try:
        tab.goto(book_url + page, wait_until="load")
        assert tab.evaluate(_PLANT_OUTPUT, ["a" * PAGE_WIDTH, "b" * (PAGE_WIDTH + 4)]), f"{page}: no unwrapped output"
        problems, _ = _too_wide(tab, page)
    finally:
        tab.close()
    assert not [p for p in problems if "aaaa" in p], f"a line of PAGE_WIDTH = {PAGE_WIDTH} characters is too wide: {problems}"
    assert len([p for p in problems if "bbbb" in p]) == 1, f"a line of {PAGE_WIDTH + 4} characters was not reported: {problems}"
