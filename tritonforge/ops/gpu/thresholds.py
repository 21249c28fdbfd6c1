"""The one table of the GPU fast paths' thresholds: each number, why it is what it is, and where the
measurements behind it are (a section of ``benchmarks/NOTES.md``; the records are named there).

The ops' plans read these names (``softmax.plan``, ``rmsnorm.fwd_coop_splits``); nothing else in the
package states a measured number. A test checks that every section named here exists in NOTES.md.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Threshold:
    value: int
    reason: str  # one sentence: what the number trades off
    notes: str  # the heading of the benchmarks/NOTES.md section with the measurements


_WING = "2026-12-04 (session 17), issue 31: the GPU fast paths in their own wing, their numbers here"
_COOP = _WING
_ROWS = "2026-12-01 (later), issue 13: what a cooperative program holds across its barrier"
_FLOOR = "2026-12-02 (later), issue 13: what a cooperative row costs before any softmax"
_SHORT = "2026-12-02 (session 15), issue 13: rows of 32K split after all; what a wait costs at 64 rows"

THRESHOLDS = {
    "COOP_CHUNK": Threshold(
        8192,
        "elements of a row each cooperative program holds (float64: half): fewer make too many partials to "
        "combine, more too few programs to fill the GPU",
        _COOP,
    ),
    "COOP_WARPS": Threshold(8, "warps of a cooperative program (the backward's, RMSNorm's): 32 elements a thread", _COOP),
    "COOP_MAX_SPLITS": Threshold(
        128,
        "most programs one row is cut into (rows up to 1M elements); longer rows take the learner's two-pass loop",
        _COOP,
    ),
    "COOP_FWD_WARPS": Threshold(
        4,
        "warps of a cooperative softmax forward program: more registers a thread, but more programs an SM "
        "and so more rows in flight to cover the wait",
        _FLOOR,
    ),
    "SHORT_COOP_CHUNK": Threshold(
        4096,
        "rows of 16K-32K elements (one block of the learner's one-pass kernel) go cooperative in chunks of "
        "this many where they fill the GPU: one program a row left bandwidth unused",
        _SHORT,
    ),
    "SHORT_COOP_FP32_ROWS_PER_SM": Threshold(
        32,
        "float32 rows of 16K-32K go cooperative only below this many rows an SM: with many rows the one-program "
        "waves are full and the wait costs more than it gives",
        _SHORT,
    ),
    "ROWS_PER_PROGRAM": Threshold(
        2,
        "whole 16-bit rows of ROWS_MIN_WIDTH-ROWS_MAX_WIDTH a softmax forward program takes: two short rows "
        "keep more bytes in flight than one",
        _ROWS,
    ),
    "ROWS_MIN_WIDTH": Threshold(512, "the narrowest 16-bit row taken two a program", _ROWS),
    "ROWS_MAX_WIDTH": Threshold(2048, "the widest 16-bit row taken two a program (wider rows fill a program alone)", _ROWS),
}
