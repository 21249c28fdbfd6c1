"""The exercise mechanism (tritonforge.exercise.core): a check never raises and says why a case
failed, reports render as text and HTML, seeds replay, guarded views count writes outside them,
pictures of an output mark each element (and fold long rows). (That the registry, the notebooks
and the solutions agree is test_registry.py's.)"""

from __future__ import annotations

import pytest
import torch

import tritonforge  # noqa: F401  (before triton: the interpreter flag)
from tritonforge import exercise

import triton
import triton.language as tl

from .test_ch01 import intensity_counts_macs


@pytest.mark.parametrize(
    "fn, message",
    [
        (lambda *a: 1 / 0, "ZeroDivisionError"),
        (lambda *a: None, "return a tuple"),
        (lambda *a: ("1", 2, 3.0), "should be a number"),
    ],
)
def test_check_never_raises_and_reports_why(fn, message):
    report = exercise.check_arithmetic_intensity(fn)
    assert not report.passed
    assert all(message in r.detail for r in report.rows)


def test_a_kernel_check_rejects_a_plain_function():
    def not_a_kernel(x_ptr, out_ptr, N, stride_xm, BLOCK_N):
        pass

    report = exercise.check_row_max(not_a_kernel)
    assert not report.passed
    assert "@triton.jit" in report.rows[0].detail


def test_a_kernel_that_fails_to_run_is_a_failed_case():
    @triton.jit
    def bad(x_ptr, out_ptr, N, stride_xm, BLOCK_N: tl.constexpr):
        tl.store(out_ptr + tl.arange(0, N), tl.load(x_ptr + tl.arange(0, N)))  # N is not constexpr

    report = exercise.check_row_max(bad)
    assert report.n_passed == 0
    # The compiler's complaint reaches the learner (its wording differs between the interpreter
    # and the GPU compiler, and between Triton versions).
    words = ("arange", "constexpr", "CompilationError")
    assert any(any(w in r.detail for w in words) for r in report.rows), [r.detail[:200] for r in report.rows]


def test_a_kernel_that_writes_its_input_fails():
    @triton.jit
    def writes_x(x_ptr, out_ptr, N, stride_xm, BLOCK_N: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK_N)
        acc = tl.full([BLOCK_N], float("-inf"), tl.float32)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = tl.load(x_ptr + row * stride_xm + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
            acc = tl.maximum(acc, x)
            tl.store(x_ptr + row * stride_xm + start + cols, tl.zeros([BLOCK_N], tl.float32), mask=mask)
        tl.store(out_ptr + row, tl.max(acc, axis=0))

    report = exercise.check_row_max(writes_x)
    assert report.n_passed == 0
    assert all("changed an input" in r.detail for r in report.rows)


def test_report_renders_as_text_and_html():
    report = exercise.check_arithmetic_intensity(intensity_counts_macs, seed=3)
    text, page = str(report), report._repr_html_()
    assert "of 7 cases pass (seed 3)" in text
    for row in report.rows:
        assert row.case in text
    assert page.count("<tr>") == len(report.rows) + 1
    assert "✘ fail" in page and "✔ pass" in page
    with pytest.raises(AssertionError, match="cases pass"):
        report.assert_passed()


def test_seed_replays_the_same_inputs():
    cases = exercise.row_max_cases()
    a = cases[0].inputs(torch.Generator().manual_seed(5)).view
    b = cases[0].inputs(torch.Generator().manual_seed(5)).view
    assert torch.equal(a, b)


def test_guarded_view_counts_writes_outside():
    g = exercise.guarded(torch.randn(3, 4), (1, 3), margin=(2, 2))
    assert g.view.stride() == (1, 3)
    assert g.outside_written() == 0
    g.buffer[-1] = 1.0
    assert g.outside_written() == 1


def test_check_itself_failing_is_reported_not_raised():
    broken = exercise.Case("broken", inputs=lambda g: 1 / 0, run=lambda fn, i: None, expected=lambda i: None, compare=None)
    report = exercise.check(lambda: None, [broken], title="t")
    assert not report.passed
    assert "error in the check itself" in report.rows[0].detail



def test_a_check_gives_the_same_verdict_on_every_run():
    """No seed given: the default one, so a verdict (and its numbers) never changes between runs."""
    first, second = (exercise.check_arithmetic_intensity(intensity_counts_macs) for _ in range(2))
    assert first.seed == second.seed == exercise.core.DEFAULT_SEED
    assert first.rows == second.rows


def test_a_trial_never_raises_and_says_why():
    def not_a_kernel(x_ptr, out_ptr, N, stride_xm, BLOCK_N):
        pass

    trial = exercise.try_row_max(not_a_kernel, -torch.rand(2, 40) - 0.5)
    assert not trial.passed
    assert str(trial).startswith("row_max_kernel on x [2, 40]: not right yet: TypeError") and "@triton.jit" in str(trial)


# Pictures of an output (core.element_map, core.with_picture) ----------------------------------


def _drawn(picture: str) -> list[str]:
    """The picture's lines between its heading and its legend."""
    return picture.splitlines()[1:-1]


def test_element_map_marks_each_element_and_the_frame():
    """One character per element: right, wrong, NaN; ``!`` where the margin was written, in a
    frame right of the rows and below them, closed by ``|``, ``-`` and ``+``."""
    g = exercise.guarded(torch.full((3, 5), float("nan")), (8, 1), margin=(2, 3))
    expected = torch.arange(15.0).reshape(3, 5)
    g.view.copy_(expected)
    g.view[1, 2] = -1.0  # wrong
    g.view[1, 4] = float("nan")  # never written
    g.buffer[g.view.storage_offset() + 5] = 0.0  # row 0, one past its end
    g.buffer[g.view.storage_offset() + 3 * 8 + 1] = 0.0  # one row below, column 1
    picture = exercise.element_map(g, expected, rtol=0.0, name="out")
    assert picture.splitlines()[0] == "out [3, 5]:"
    assert _drawn(picture) == ["·····|!", "··x·?|", "·····|", "-----+", " !"]
    assert picture.splitlines()[-1] == exercise.core.PICTURE_LEGEND


def test_element_map_folds_long_rows_draws_strips_and_plain_tensors():
    """A row longer than the limit is folded, a power of two of columns to a character showing the
    worst of them; a 1-D output is a strip with its frame on the right; a tensor that is not a
    guard has no frame, and one of three dimensions is drawn as rows of its last."""
    g = exercise.poisoned_output((2, 130), torch.float32, margin=(1, 40), device="cpu")
    expected = torch.randn(2, 130)
    g.view[:, :100] = expected[:, :100]  # columns 100-129 never written
    g.view[1, 5] = 99.0  # wrong, in the group of columns 4-7
    g.buffer[g.view.storage_offset() + 131] = 1.0  # row 0, two past its end: the first group of the frame
    picture = exercise.element_map(g, expected, rtol=1e-5, name="y")
    assert picture.splitlines()[0] == "y [2, 130] (4 columns to a character):"
    assert _drawn(picture) == ["·" * 25 + "?" * 8 + "|!", "·x" + "·" * 23 + "?" * 8 + "|", "-" * 33 + "+"]

    strip = exercise.poisoned_output((7,), torch.float32, margin=(32,), device="cpu")
    values = torch.randn(7)
    strip.view.copy_(values)
    strip.view[3] = values[3] + 1.0
    strip.buffer[8] = 0.0  # two past the end
    assert _drawn(exercise.element_map(strip, values, rtol=0.0, name="out")) == ["···x···| !"]

    grads = torch.randn(2, 3, 4)
    wrong = grads.clone()
    wrong[1, 2] += 1.0  # the last of the six rows
    plain = exercise.element_map(wrong, grads, rtol=1e-10, name="dx")
    assert plain.splitlines()[0] == "dx [2, 3, 4] (as 6 rows of 4):"
    assert _drawn(plain) == ["····"] * 5 + ["xxxx"]
    assert plain.splitlines()[-1] == exercise.core.PLAIN_PICTURE_LEGEND


def test_a_picture_only_for_a_failure_with_something_written():
    """A passed verdict has no picture, nor does a kernel that wrote nothing at all (the detail
    already says every element is NaN); a picture that cannot be drawn says so."""
    g = exercise.poisoned_output((2, 3), torch.float32, margin=(1, 2), device="cpu")

    def draw():
        return exercise.element_map(g, torch.zeros(2, 3), rtol=0.0)

    failed = exercise.Verdict(False, None, "6 of 6 elements are NaN")
    assert exercise.core.with_picture(exercise.Verdict(True, 0.0, ""), draw, g).picture == ""
    assert exercise.core.with_picture(failed, draw, g).picture == ""
    g.view[0, 0] = 1.0
    assert _drawn(exercise.core.with_picture(failed, draw, g).picture) == ["x??|", "???|", "---+"]
    assert exercise.core.with_picture(failed, lambda: 1 / 0, g).picture.startswith("(no picture: ZeroDivisionError")
    hinted = exercise.core.with_hint(exercise.core.with_picture(exercise.Verdict(False, 1.0, "wrong values"), draw, g), "a hint")
    assert hinted.detail == "wrong values. a hint" and hinted.picture, "a hint keeps the picture"


def test_describe_exception_gives_a_compilation_errors_cause():
    """Triton's CompilationError is "at L:C:", the source line, a caret, and (when the error rose
    inside a call it points at) the cause chained as __cause__: the verdict shows the location
    and the cause, never the bare caret."""
    from tritonforge.exercise.core import describe_exception

    try:
        try:
            raise ValueError("float16 accumulator is not supported")
        except ValueError as cause:
            raise RuntimeError("at 5:4:\n    acc = tl.dot(x, w, acc)\n    ^") from cause
    except RuntimeError as exc:
        text = describe_exception(exc)
    assert text == "RuntimeError: at 5:4: ValueError: float16 accumulator is not supported", text
    assert describe_exception(RuntimeError("one line")) == "RuntimeError: one line"
    assert describe_exception(RuntimeError("at 1:2:\n  x = y\n  ^\nNameError: y")) == "RuntimeError: at 1:2: NameError: y"


def test_until_first_failure_stops_a_check_at_its_first_failed_case_and_says_so():
    from tritonforge.exercise.core import Case, Verdict, check, until_first_failure

    ran = []

    def case(name: str, ok: bool) -> Case:
        def run(fn, inputs):
            ran.append(name)
            return fn(inputs)

        def compare(got, expected, inputs):
            return Verdict(got == expected, None, "" if got else "wrong")

        return Case(name, lambda gen: ok, run, lambda inputs: True, compare)

    cases = [case("a", True), case("b", False), case("c", True)]
    with until_first_failure():
        early = check(lambda ok: ok, cases, title="t")
    assert ran == ["a", "b"] and early.stopped_early and not early.passed
    assert "stopped at the first failure" in early.summary()
    ran.clear()
    whole = check(lambda ok: ok, cases, title="t")  # outside the block: every case runs
    assert ran == ["a", "b", "c"] and not whole.stopped_early and not whole.passed
    ran.clear()
    with until_first_failure():
        passing = check(lambda ok: True, cases, title="t")  # nothing fails: every case still runs
    assert ran == ["a", "b", "c"] and passing.passed and not passing.stopped_early
