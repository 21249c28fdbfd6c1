"""What a chapter plots: :func:`results_for_chapter`, live numbers on a GPU, the record elsewhere.

The one book-facing function of the harness, above both modules it joins: the results schema and
loader (:mod:`~tritonforge.bench.results`) and the suites that write results
(:mod:`~tritonforge.bench.suites`). It imports both; neither imports it, and the schema module
imports no suite.
"""

from __future__ import annotations

import torch

from tritonforge import simulation  # first: decides TRITON_INTERPRET before triton loads
from tritonforge.bench.results import DEFAULT_RESULTS_DIR, Results, load_results
from tritonforge.bench.suites import run_suite, simulated_run


def _only(suite: str, results: Results) -> Results:
    """A live run's rows of ``suite`` (a quick run measures the ceilings too; they stay in the
    metadata); a request for the ceilings keeps them."""
    if suite != "ceilings":
        results.rows = [row for row in results.rows if row["suite"] == suite]
    return results


def results_for_chapter(suite: str, *, live: bool = False, directory=DEFAULT_RESULTS_DIR) -> Results:
    """What a chapter plots: a live quick run if ``live`` and a CUDA GPU is here, else the record.

    The returned :class:`~tritonforge.bench.results.Results` knows which it is (``.live``), and
    the plots say so. Chapters pass ``live=env.benchmarks_live``. Under
    ``TRITONFORGE_SIMULATE_DEVICE`` a live request gets
    :func:`~tritonforge.bench.suites.simulated_run` instead: the rows, dtypes and ceilings a quick
    run on that GPU would produce, with made-up numbers, so that the chapter's live branch runs
    (and its dtype and key choices are tested) on a machine without one.
    """
    if live and simulation.simulated_device() is not None:
        return _only(suite, simulated_run(suite, simulation.simulated_device()))
    if live and torch.cuda.is_available():
        return _only(suite, run_suite(suite, quick=True, command=f"tritonforge.bench.results_for_chapter({suite!r}, live=True)"))
    return load_results(suite, directory)
