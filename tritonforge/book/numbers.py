"""Numbers the prose quotes, computed from the records when the chapter runs.

A chapter's text never types a measured number. A code cell reads the record, computes the
number and *glues* it under a name; the markdown pastes it with ``{glue:text}`name```, so the page
and the record cannot disagree, and a new record changes the text with it. ``glue`` here writes the
same output as myst-nb's ``glue`` (the book's build reads it), without importing myst-nb, which
Colab does not have: there the cell runs, shows nothing, and the markdown shows the name.
``tests/book/test_prose_numbers.py`` fails on a measurement typed into the prose of a checked
chapter, on a pasted name that no cell glues, and on a glued literal.

Formatting is the cell's: :func:`glue` takes a number and a format spec (``glue("x", 0.953,
".2f")`` pastes ``0.95``), a string as it is, or a sequence of numbers, which it pastes as their
range (:func:`span`: ``0.94–0.98``, or one value when both ends print the same). A comparison the
prose makes in words ("ahead of `torch.compile`") is checked against the record with
:func:`claim`, which stops the chapter when a new record no longer bears it out.

The experiment records (``benchmarks/experiments/<topic>/*.json``) are read with
:func:`experiment`, in a checkout or from the copy a package install ships.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

GLUE_PREFIX = "application/papermill.record/"
"""The mime prefix myst-nb gives glued data that is not displayed (``glue(..., display=False)``)."""

EN_DASH = "\u2013"

Number = int | float


def span(values: Iterable[Number], spec: str = ".2f", sep: str = EN_DASH) -> str:
    """The range of ``values`` as text, each end formatted with ``spec``: ``"0.94–0.98"``, or a
    single value when both ends print the same (``"0.95"``); a percentage once, at the end
    (``"18–26%"``). Raises ``ValueError`` on no values."""
    values = list(values)
    if not values:
        raise ValueError("span() of no values")
    low, high = format(min(values), spec), format(max(values), spec)
    if low == high:
        return low
    if spec.endswith("%"):  # "18–26%", not "18%–26%"
        low = low[:-1]
    return f"{low}{sep}{high}"


def as_text(value, spec: str = "") -> str:
    """``value`` as the prose shows it: a string as it is, a number formatted with ``spec``, a
    sequence of numbers as its :func:`span`."""
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence) or hasattr(value, "__iter__"):
        return span(value, spec or ".2f")
    return format(value, spec)


def glue(name: str, value, spec: str = "") -> str:
    """Glue ``value`` (formatted by :func:`as_text`) under ``name`` for ``{glue:text}`name``` and
    return the text. Nothing is shown in the notebook; outside IPython nothing is stored."""
    if ":" in name:
        raise ValueError(f"a glue name cannot contain ':' (the role reads it as a format spec): {name!r}")
    text = as_text(value, spec)
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # plain Python: the text is the result
        return text
    if get_ipython() is not None:
        # myst-nb's glue(name, text, display=False): the text/plain repr, which the role
        # literal-evals back to the string.
        display({GLUE_PREFIX + "text/plain": repr(text)}, raw=True,
                metadata={"scrapbook": {"name": name, "mime_prefix": GLUE_PREFIX}})  # fmt: skip
    return text


class ClaimError(AssertionError):
    """The record no longer says what the chapter's text says."""


def claim(text: str, holds: bool) -> None:
    """Stop the chapter if ``holds`` is false: the prose states ``text`` about the record, and
    the record says otherwise (a new run changed the story; the text must change with it)."""
    if not holds:
        raise ClaimError(f"the text says {text!r}, and the record no longer does: update the prose")


EXPERIMENTS = Path(__file__).resolve().parents[2] / "benchmarks" / "experiments"
PACKAGED_EXPERIMENTS = Path(__file__).resolve().parents[1] / "recorded_experiments"


def experiments_directory() -> Path:
    """``benchmarks/experiments`` of the checkout, else the copy a package install ships."""
    return EXPERIMENTS if EXPERIMENTS.is_dir() else PACKAGED_EXPERIMENTS


def experiment(topic: str, name: str) -> dict:
    """The experiment record ``benchmarks/experiments/<topic>/<name>``, parsed."""
    path = experiments_directory() / topic / name
    return json.loads(path.read_text(encoding="utf-8"))
