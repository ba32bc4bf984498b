"""The session's tests together (pytest_sme2/gate/suite.py).

A stated suite-level false-alarm budget, checked on the project's real recorded A/A rounds (consecutive windows, as a
real measurement takes them); and stored comparisons that move together judged against the session's unchanged tests,
the controls that tell the machine from N regressions. The stored samples here are real recorded blocks
(``benchmarks/data/aa_toy_cnn_fp32_portable.json``); the machine's move between the sessions is a known factor
applied to every block of the later session, as ``benchmarks/gate_paired.py`` injects its drift.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from pytest_sme2.gate.decide import gate
from pytest_sme2.gate.suite import (
    MIN_CONTROLS,
    SUITE_FALSE_ALARM_BUDGET,
    Machine,
    as_machine,
    control_ratio,
    suite_false_alarm_bound,
    together,
    together_line,
)
from pytest_sme2.gate.verdict import Comparison, GateConfig, Samples, Status, Verdict

pytestmark = pytest.mark.fast

ROOT = Path(__file__).parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: the machine ran this much slower in the later session than when the baselines were recorded (this VM's largest
#: between-session move of one .pte was +53 %: benchmarks/README.md, "Sessions")
MOVED = 1.5


@pytest.fixture(scope="module")
def rounds() -> tuple[np.ndarray, np.ndarray]:
    from benchmarks.gate_paired import load_rounds

    return load_rounds(ROOT / "benchmarks" / "data" / "aa_toy_cnn_fp32_portable.json")


def _samples(arm: np.ndarray, start: int, factor: float, n: int = 15) -> Samples:
    values = arm[start:start + n] * factor
    return Samples(tuple(values.ravel().tolist()), (values.shape[1],) * n)


def _stored(rounds: tuple[np.ndarray, np.ndarray], start: int, factor: float, comparison: Comparison) -> Verdict:
    """A baseline recorded from rounds 0-14 (arm A), judged in a later session from round ``start`` on (arm B)."""
    a, b = rounds
    config = GateConfig(margin=0.10, drift_allowance=0.0)  # hand-set 0 %: the bare margin
    return gate(_samples(a, 0, 1.0), _samples(b, start, factor), config, comparison=comparison)


def test_the_suite_false_alarm_budget_holds_on_recorded_consecutive_windows() -> None:
    """The stated budget: the sum of the example suite's per-test A/A regression rates, same-session comparisons at
    its 10 % margin, measured on every recording in consecutive windows (benchmarks/ci_green.py)."""
    from benchmarks import ci_green

    per_test = []
    for recording in ci_green.RECORDINGS:
        if not (ci_green.DATA / recording.file).is_file():
            continue
        rows = ci_green.study_one(recording, margin=0.10, quick=True)
        aa = next(r for r in rows if r["kind"] == "session" and r["slowdown"] == 1.0)
        per_test += [aa["regression"]] * len(recording.tests)
    assert len(per_test) >= 12
    assert suite_false_alarm_bound(per_test) <= SUITE_FALSE_ALARM_BUDGET
    assert suite_false_alarm_bound([0.03, 0.04]) == pytest.approx(0.07)  # a union bound: it adds up


def test_a_stored_regression_that_the_unchanged_tests_moved_with_is_the_machine(rounds) -> None:
    """Stored comparisons of a session run 50 % slower, which the unchanged tests moved with, are the machine, not
    each its own regression."""
    a, b = rounds
    verdict = _stored(rounds, 100, MOVED, Comparison.STORED)
    assert verdict.status is Status.REGRESSION
    # Two unchanged tests measured in the same later session: their artifacts are their baselines', so they moved
    # with the machine (real recorded blocks of two other windows, the same factor).
    controls = [control_ratio(_stored(rounds, s, MOVED, Comparison.UNCHANGED)) for s in (150, 200)]
    assert all(c is not None and 1.4 < c < 1.6 for c in controls)
    machine = Machine(tuple(c for c in controls if c is not None))
    explained = as_machine(verdict, machine)
    assert explained.status is Status.DRIFT and not explained.failed
    assert "the machine: this stored comparison moved with the session's unchanged tests" in explained.summary()
    assert "the session's 2 unchanged test(s) moved +" in explained.summary()
    # A same-session comparison is never re-judged: its reference ran beside it.
    session = gate(_samples(a, 0, 1.0), _samples(b, 100, MOVED), GateConfig(margin=0.10, drift_allowance=0.0),
                   comparison=Comparison.SESSION)
    assert as_machine(session, machine) is session


def test_a_change_beyond_the_machines_move_still_fails_and_too_few_controls_decide_nothing(rounds) -> None:
    controls = tuple(c for s in (150, 200) if (c := control_ratio(_stored(rounds, s, MOVED, Comparison.UNCHANGED))))
    # The program itself got 30 % slower on top of the machine's move: a regression either way.
    slower = _stored(rounds, 100, MOVED * 1.3, Comparison.RUNTIME)
    kept = as_machine(slower, Machine(controls))
    assert kept.status is Status.REGRESSION and kept.failed
    assert "still beyond the margin with the machine's move divided out" in kept.summary()
    # Unchanged tests that did not move (a runtime upgrade slowed every changed test, not the machine): it fails.
    quiet = tuple(c for s in (150, 200) if (c := control_ratio(_stored(rounds, s, 1.0, Comparison.UNCHANGED))))
    moved = _stored(rounds, 100, MOVED, Comparison.RUNTIME)
    assert as_machine(moved, Machine(quiet)).status is Status.REGRESSION
    # Fewer controls than MIN_CONTROLS: nothing to call the machine.
    assert as_machine(moved, Machine(controls[:MIN_CONTROLS - 1])) is moved


def _record(verdict: Verdict) -> dict[str, object]:
    return {"outcome": "failed" if verdict.failed else "passed", "verdict": verdict.to_dict()}


def test_the_session_says_in_one_line_what_moved_together(rounds) -> None:
    stored = [_stored(rounds, s, MOVED, Comparison.STORED) for s in (30, 60, 90)]
    controls = [_stored(rounds, s, MOVED, Comparison.UNCHANGED) for s in (150, 200)]
    machine = Machine(tuple(c for v in controls if (c := control_ratio(v)) is not None))
    # No unchanged test in the session: three regressions, and one line saying why they still fail.
    alone = together([_record(v) for v in stored])
    assert alone is not None
    line = together_line(alone)
    assert line.startswith("sme2: 3 of 3 stored comparisons moved +") and "together" in line
    assert "no unchanged test in this session tells the machine from a change common to them" in line
    assert "they fail as 3 regressions" in line
    # With the controls: the machine, not 3 regressions.
    judged = [as_machine(v, machine) for v in stored]
    with_controls = together([_record(v) for v in (*judged, *controls)])
    assert with_controls is not None and with_controls.explained == 3
    line = together_line(with_controls)
    assert ": the machine, not 3 regressions (the session's 2 unchanged test(s) moved +" in line
    # Judged before the controls were measured (they ran later in the session): said, and they still fail.
    late = together([_record(v) for v in (*stored, *controls)])
    assert late is not None and late.late == 3 and late.explained == 0
    assert "3 ran before 2 unchanged tests had measured the machine" in together_line(late)
    # One stored comparison alone moving is no "together".
    assert together([_record(stored[0]), *(_record(v) for v in controls)]) is None


