r"""Exercise checks: run a learner's function on a list of cases and show a verdict per case.

The learner edits a stub in an exercise notebook, tries it with ``exercise.try_<exercise>(fn, ...)``
and runs ``exercise.check_<exercise>(fn)``; both run the learner's code guarded (NaN-padded,
NaN-poisoned buffers) and never raise (an exception from the learner's code is a failed case that
says why). A check returns a :class:`Report` that renders as a table in the notebook and has
``assert_passed()`` for pytest. Checks are deterministic: inputs come from a fixed seed
(``core.DEFAULT_SEED``; ``seed=`` picks another), and the cases are built so that each known
mistake fails whatever the seed. ``python -m tritonforge.exercise grade`` grades the learner's
notebooks from the command line (:mod:`tritonforge.exercise.grade`).

============  =======================================================================
module        what it holds
============  =======================================================================
``core``      the mechanism: :class:`Case`, :func:`check`, :class:`Report`, the guarded
              (NaN-margined, NaN-poisoned) tensors every kernel exercise uses, and the
              run and verdict the kernel exercises share
``registry``  the one table of exercises (:data:`REGISTRY`): a row per exercise, from which
              the checks, this package's names, :data:`EXERCISES` and the grader's list come
``ch01`` …    one module per chapter: per exercise, a float64 reference (``*_ref``), the
``ch09``      launcher the notebook hands the learner (``launch_*``), the cases (``*_cases``)
              and the guarded run of the notebook's "try it" cell (``try_*``)
``stubs``     each exercise's stub as shipped, read from its committed notebook
``grade``     the grading command: reads each notebook's stub cell, runs its check
============  =======================================================================

Every exercise's names (``check_<name>``, made from its row, ``try_<name>``, ``<name>_cases``,
its reference and ``launch_<name>``) and every chapter module's ``__all__`` are names of this
package. Tolerances come from ``tritonforge.reference.TOLERANCE``.
"""

from tritonforge.exercise.core import (
    Case,
    CaseTemplate,
    Guarded,
    Report,
    Row,
    Trial,
    Verdict,
    case_unsupported,
    check,
    compare_tensors,
    describe_exception,
    element_map,
    guarded,
    half_dtype,
    kernel_device,
    poisoned_output,
    run_trial,
)
from tritonforge.exercise.registry import CHAPTERS, EXERCISES, REGISTRY


def _exercise_names() -> dict:
    """Every exercise's names, from its row (its check, cases, try, reference and launcher), and
    the constants and helpers the chapter modules export besides (their ``__all__``)."""
    names = {name: getattr(module, name) for module in CHAPTERS for name in module.__all__}
    for exercise in REGISTRY:
        names.update(exercise.public())
    return names


_EXERCISE_NAMES = _exercise_names()
globals().update(_EXERCISE_NAMES)

__all__ = [
    # the mechanism
    "Case",
    "CaseTemplate",
    "Guarded",
    "Report",
    "Row",
    "Trial",
    "Verdict",
    "check",
    "compare_tensors",
    "describe_exception",
    "element_map",
    "guarded",
    "case_unsupported",
    "half_dtype",
    "kernel_device",
    "poisoned_output",
    "run_trial",
    # the registry, and what the exercises export
    "EXERCISES",
    "REGISTRY",
    *_EXERCISE_NAMES,
]
