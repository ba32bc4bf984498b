"""The session's tests together: their false-alarm budget, and stored comparisons that move as one (the machine).

Two questions no single test's verdict answers (issue 28 item 8).

**How many false alarms may a session raise?** :data:`SUITE_FALSE_ALARM_BUDGET`: at most 5 % of sessions whose
changed programs did not get slower may fail on a ``regression``. A union bound holds whatever the tests' dependence:
the session's false-alarm rate is at most the sum of its tests' (:func:`suite_false_alarm_bound`), so the budget is
kept when every test's rate is at most 5 % / N. For a same-session comparison the rate is measured on the project's
real recorded A/A rounds in consecutive windows (``benchmarks/ci_green.py``): 0 regressions in 3,330 windows across
five programs at the example suite's 10 % margin, so its 12 changed-program tests stay inside the budget
(``tests/gate/test_suite.py`` checks it on the recordings). A stored comparison (another session's samples) is where the
budget breaks: one machine state moves every test together, so N tests share one false alarm. Hence the second rule.

**N regressions, or the machine?** A comparison with stored samples (``stored``, ``runtime``) cannot tell a slower
program from a slower machine. The session's **unchanged** tests can: their artifacts are their baselines', so how
far they moved is how far the machine moved since the baselines were recorded (:class:`Machine`). A stored
comparison's relative checks are judged again with that move divided out (:func:`as_machine`):

- with at least :data:`MIN_CONTROLS` unchanged tests measured (validly) earlier in the session, and the change
  within the rule's margin once their median move is divided out: the machine. The verdict becomes ``drift``
  (reported, not failed, as an unchanged artifact's drift is) and says so;
- the change still beyond the margin: a ``regression`` (the machine moved, but not that far);
- still not decided: ``inconclusive`` (which fails in CI);
- fewer controls: nothing changes, and the regression fails. A runtime-wide slowdown (an executorch or library
  upgrade) moves every changed test together too, and an unchanged artifact measured in the same session is the only
  evidence that tells it from the machine: without one, N tests moving together still fail, and the session says
  why in one line (:func:`together_line`): "N of M stored comparisons moved +x % together ...".

A same-session comparison needs none of this: its reference ran beside it, so the machine's move cancels.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_sme2.gate.rule import ComparisonRule
from pytest_sme2.gate.verdict import Check, Comparison, Status, Verdict, overall
from pytest_sme2.units import fmt_change, fmt_range, fmt_signed_pct

#: The share of sessions without a real slowdown that may fail on a ``regression`` (union bound over the tests).
SUITE_FALSE_ALARM_BUDGET = 0.05
#: Unchanged tests a session must have measured before their move may explain a stored comparison's.
MIN_CONTROLS = 2


def suite_false_alarm_bound(per_test: Iterable[float]) -> float:
    """The session's false-alarm rate bound from its tests' (union bound: it holds whatever their dependence)."""
    return min(1.0, sum(per_test))


@dataclass(frozen=True)
class Machine:
    """How far the machine moved since the baselines were recorded: the session's unchanged tests' median ratios
    (this session's median over the baseline's), one per control."""

    ratios: tuple[float, ...]

    @property
    def ratio(self) -> float:
        return float(statistics.median(self.ratios))

    @property
    def enough(self) -> bool:
        return len(self.ratios) >= MIN_CONTROLS

    def describe(self) -> str:
        lo, hi = min(self.ratios), max(self.ratios)
        return (f"the session's {len(self.ratios)} unchanged test(s) moved {(self.ratio - 1) * 100:+.1f}% "
                f"(median; {fmt_range(lo, hi, fmt_change)}) against their baselines")


def control_ratio(verdict: Verdict) -> float | None:
    """This verdict's move as a control of the machine: an unchanged artifact, validly measured, with both medians
    (None otherwise)."""
    if verdict.comparison is not Comparison.UNCHANGED or verdict.status in (Status.INVALID, Status.BUG):
        return None
    if not verdict.median_ms or not verdict.reference_median_ms:
        return None
    return verdict.median_ms / verdict.reference_median_ms


#: The relative checks a machine's move can explain (budgets, memory and evidence are not relative to a session).
def _relative(check: Check) -> bool:
    return check.name == "e2e" or check.name.startswith("category:")


def as_machine(verdict: Verdict, machine: Machine) -> Verdict:
    """``verdict`` of a stored comparison judged again with the machine's move divided out (see the module).

    Only a widened comparison with a relative regression and enough controls changes: its regressed relative checks
    become ``drift`` when the move explains them (inconclusive when it half does); anything else is returned as is.
    """
    if verdict.comparison is None or not verdict.comparison.widened or not machine.enough:
        return verdict
    if not any(c.status is Status.REGRESSION and _relative(c) for c in verdict.checks):
        return verdict
    rule = ComparisonRule(verdict.comparison)  # the allowance is already in each check's margin
    checks = []
    for c in verdict.checks:
        if c.status is not Status.REGRESSION or not _relative(c) or c.interval is None or c.margin is None:
            checks.append(c)
            continue
        low, high = c.interval.low / machine.ratio - 1, c.interval.high / machine.ratio - 1
        status = rule.status(low, high, c.margin)
        divided = fmt_range(low * 100, high * 100, fmt_signed_pct)
        if status is Status.REGRESSION:
            checks.append(replace(c, message=f"{c.message}; still beyond the margin with the machine's move divided "
                                             f"out ({machine.describe()}): {divided}"))
            continue
        said = ("the machine, not a regression" if status in (Status.PASS, Status.IMPROVEMENT)
                else "not decided once the machine's move is divided out")
        checks.append(replace(c, status=Status.DRIFT if status in (Status.PASS, Status.IMPROVEMENT)
                              else Status.INCONCLUSIVE,
                              message=f"{c.message}; {said}: {machine.describe()}, and with that divided out the "
                                      f"change is {divided}"))
    status = overall(checks)
    if status is verdict.status:
        return replace(verdict, checks=tuple(checks))
    note = (f"the machine: this stored comparison moved with the session's unchanged tests ({machine.describe()}); "
            "judged with that move divided out, it is not a regression" if status is Status.DRIFT else
            f"the session's unchanged tests moved too ({machine.describe()}); with that divided out the change is "
            f"{status.value}")
    return replace(verdict, checks=tuple(checks), status=status, notes=(*verdict.notes, note))


@dataclass(frozen=True)
class Together:
    """The session's stored comparisons that moved beyond their margins in the same direction."""

    moved: tuple[float, ...]
    compared: int
    machine: Machine
    #: of the moved, how many the controls explained (their verdicts became drift)
    explained: int
    #: of the others, how many the session's controls would have explained had they been measured before them
    late: int = 0


def together(results: Sequence[Mapping[str, Any]]) -> Together | None:
    """What moved together in a session's results (each a record with a ``verdict`` dict); None when fewer than 2
    stored comparisons moved beyond their margins the same way."""
    verdicts = [Verdict.from_dict(r["verdict"]) for r in results if r.get("verdict") and r["verdict"].get("checks")]
    controls = tuple(x for v in verdicts if (x := control_ratio(v)) is not None)
    stored = [v for v in verdicts if v.comparison is not None and v.comparison.widened
              and v.status is not Status.INVALID and v.median_ms and v.reference_median_ms]
    machine = Machine(controls)
    moved, explained, late = [], 0, 0
    for v in stored:
        # Beyond its margin: a regression, or the drift the controls made of one (as_machine).
        if v.e2e is not None and v.e2e.status in (Status.REGRESSION, Status.DRIFT):
            ratio = v.median_ms / v.reference_median_ms  # type: ignore[operator]
            if ratio <= 1:
                continue
            moved.append(ratio - 1)
            explained += v.e2e.status is Status.DRIFT
            # Judged before enough controls had been measured: would the session's controls have explained it?
            late += v.e2e.status is Status.REGRESSION and as_machine(v, machine).status is Status.DRIFT
    if len(moved) < 2:
        return None
    return Together(tuple(moved), len(stored), machine, explained, late)


def together_line(t: Together) -> str:
    """The one session-level line for stored comparisons that moved together (:func:`together`)."""
    n, x = len(t.moved), statistics.median(t.moved) * 100
    head = f"sme2: {n} of {t.compared} stored comparisons moved {x:+.1f}% together"
    if not t.machine.ratios:
        return (f"{head}; no unchanged test in this session tells the machine from a change common to them (a runtime "
                f"or library upgrade), so they fail as {n} regressions. Keep unchanged tests in the session, or cache "
                "--sme2-artifact-dir so changed programs are measured beside their baselines'")
    if not t.machine.enough:
        return (f"{head}; {t.machine.describe()}: fewer than {MIN_CONTROLS} controls, too few to call it the "
                f"machine, so they fail as {n} regressions")
    if t.explained == n:
        return f"{head}: the machine, not {n} regressions ({t.machine.describe()})"
    parts = [f"the machine explains {t.explained} of them"]
    if t.late:
        parts.append(f"{t.late} ran before {MIN_CONTROLS} unchanged tests had measured the machine, which would have "
                     "explained them: they fail (run the unchanged tests first)")
    if n - t.explained - t.late:
        parts.append(f"{n - t.explained - t.late} moved further (a change common to them, e.g. a runtime upgrade): "
                     "they fail")
    return f"{head}; {t.machine.describe()}: " + "; ".join(parts)


__all__ = ["MIN_CONTROLS", "SUITE_FALSE_ALARM_BUDGET", "Machine", "Together", "as_machine", "control_ratio",
           "suite_false_alarm_bound", "together", "together_line"]
