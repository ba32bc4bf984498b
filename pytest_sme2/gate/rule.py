"""What a comparison means: the margin each kind of comparison gets and how an interval becomes a status.

One rule per :class:`Comparison`, applied to every check that compares the candidate with a reference
(E2E, the operator categories, memory): before, the E2E check widened its margin in a stored comparison
and the category checks did not, so a session that ran 30 % slower with no model change passed E2E and
failed Convolution at 15 % (issue 18, defect 2). A check computes its interval of the change and asks its
:class:`ComparisonRule` for the status; nothing else decides what ``stored`` or ``unchanged`` means.

- ``session``: the baseline's artifact re-measured now, interleaved with the candidate: drift hits both
  arms, so the margin is the margin; re-measuring separates the model from the session.
- ``stored``: a changed artifact against samples stored by an earlier session: the machine may have moved
  between the sessions, so every relative margin is widened by the drift allowance; re-measuring repeats
  this session's state, so it cannot separate the model from the session. The allowance is calibrated from the
  history of the test on the device (:mod:`pytest_sme2.gate.calibration`) or set by hand (``--sme2-drift-allowance``,
  said to be uncalibrated); with neither, the comparison cannot be decided: every status is ``inconclusive``,
  never ``pass`` (:attr:`ComparisonRule.undecided` says why and what to do).
- ``runtime``: as ``stored`` (the runtime changed, so the baseline's artifact cannot be re-measured here).
- ``unchanged``: the same artifact as the baseline's: nothing under test changed, so a change beyond the
  margin is ``drift`` (reported, never failed) and relative checks never gate.

Absolute checks (latency budgets, ``min_speedup`` of one interleaved on/off pair) compare with a number, not
with a reference of another session, so they take no rule: they gate the same in every comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_sme2.units import TextEnum


class Status(TextEnum):
    PASS = "pass"
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    INCONCLUSIVE = "inconclusive"
    INVALID = "invalid"
    #: an unchanged artifact ran slower or faster than its baseline: the machine, not the model
    DRIFT = "drift"
    #: something that cannot change did (an unchanged artifact's memory plan): the tool or its data is wrong
    BUG = "bug"


class Comparison(TextEnum):
    """What the candidate is compared with (see the module docstring)."""

    SESSION = "session"
    STORED = "stored"
    UNCHANGED = "unchanged"
    #: the stored samples because the *runtime* changed (another executorch on the local runtime, other shared
    #: libraries under a runner): the baseline's runtime cannot run here, so its artifact cannot be re-measured.
    #: Judged by the ``stored`` rule (margin + drift allowance); named apart so CI sees that an upgrade was gated
    #: this weakly
    RUNTIME = "runtime"
    #: a runtime change measured in this session: the baseline's runtime (its executorch, installed beside this one,
    #: :mod:`pytest_sme2.measure.runtimes`) running the baseline's artifact, interleaved with the change on this runtime
    RUNTIME_SESSION = "runtime-session"

    @property
    def description(self) -> str:
        return {
            Comparison.SESSION: "the baseline's artifact re-measured in this session, interleaved",
            Comparison.STORED: "the stored baseline samples (the baseline's artifact is not available here)",
            Comparison.UNCHANGED: "the stored baseline samples of the same artifact (only the machine can differ)",
            Comparison.RUNTIME: ("the stored baseline samples: the runtime changed and the baseline's runtime cannot "
                                 "run here, so only a slowdown beyond the margin plus the drift allowance is caught"),
            Comparison.RUNTIME_SESSION: ("a runtime change: the baseline's artifact on the baseline's runtime, "
                                         "installed beside this one and re-measured in this session, interleaved"),
        }[self]

    @property
    def in_session(self) -> bool:
        """Whether the reference is measured in this session, interleaved with the candidate."""
        return self in (Comparison.SESSION, Comparison.RUNTIME_SESSION)

    @property
    def widened(self) -> bool:
        """Whether the reference is from another session, so every relative margin takes the drift allowance."""
        return self in (Comparison.STORED, Comparison.RUNTIME)


@dataclass(frozen=True)
class ComparisonRule:
    """The rule of one comparison kind: how wide a margin is, and what an interval of the change means.

    Use: ``rule = ComparisonRule.of(comparison, config.drift_allowance)``; then for a check whose margin is
    ``m`` (relative, 0.05 = 5 %) and whose interval of the change is ``[low, high]`` (0 = no change, above 0 =
    slower or bigger; a ratio's interval minus 1, or a difference in ms), ``allowed = rule.margin(m)`` (times
    the reference's size for a difference) and ``status = rule.status(low, high, allowed)``.
    ``rule.margin_text(m)`` says the margin in words; ``rule.gates`` whether a relative check may fail.
    """

    comparison: Comparison
    #: how far the machine may drift between sessions (relative): widens every margin of a stored comparison
    drift_allowance: float = 0.0
    #: where the allowance came from, in a few words ("calibrated from 12 sessions ...", "hand-set, not calibrated")
    allowance_source: str = ""
    #: a widened comparison without any allowance (no calibration, none set): why, and what to do. Such a comparison
    #: cannot be decided: :meth:`status` is inconclusive whatever the interval
    undecided: str = ""

    @classmethod
    def of(cls, comparison: Comparison, drift_allowance: float = 0.0, *, source: str = "",
           undecided: str = "") -> ComparisonRule:
        if not comparison.widened:
            return cls(comparison)
        return cls(comparison, drift_allowance, source, undecided)

    @property
    def gates(self) -> bool:
        """Can a relative check fail the test? Not for an unchanged artifact (only the machine changed)."""
        return self.comparison is not Comparison.UNCHANGED

    @property
    def separates_session(self) -> bool:
        """Does measuring again separate the model from this session's state? Only with a reference measured
        in the same session: against stored samples, a second measurement repeats the session's drift."""
        return self.comparison.in_session

    def margin(self, asked: float) -> float:
        """The relative margin a check gets under this rule: ``asked`` + the drift allowance when stored."""
        return asked + self.drift_allowance

    def margin_text(self, asked: float) -> str:
        """``+15.0% margin``, ``+55.0% margin (5% + 50% drift allowance, hand-set, not calibrated)``."""
        return f"+{self.margin(asked) * 100:.1f}% margin{self._detail(asked)}"

    def share_text(self, asked: float) -> str:
        """The margin as a share without the sign: ``15%`` or ``11% (5% + 6.1% drift allowance, calibrated ...)``."""
        return f"{self.margin(asked) * 100:.0f}%{self._detail(asked)}"

    def _detail(self, asked: float) -> str:
        if self.undecided:
            return " (no calibrated drift allowance between sessions)"
        if not self.drift_allowance and not self.allowance_source:
            return ""
        if not self.allowance_source:
            return f" ({asked * 100:.0f}% + {self.drift_allowance * 100:.0f}% allowed drift between sessions)"
        return f" ({asked * 100:.0f}% + {self.drift_allowance * 100:.3g}% drift allowance, {self.allowance_source})"

    def status(self, low: float, high: float, allowed: float) -> Status:
        """The status of a change with interval ``[low, high]`` against ``allowed`` (same unit, > 0 is worse).

        One-sided against the margin (non-inferiority): regression when the whole interval lies above
        ``+allowed``, improvement when it lies below ``-allowed``, pass when its upper end is at or below
        ``+allowed``, else inconclusive. For an unchanged artifact a change beyond the margin either way is
        ``drift`` and anything else passes. A comparison with another session and no allowance (:attr:`undecided`)
        is inconclusive: the machine's move between the sessions is unknown, so no interval decides it.
        """
        if self.comparison is Comparison.UNCHANGED:
            return Status.DRIFT if (low > allowed or high < -allowed) else Status.PASS
        if self.undecided:
            return Status.INCONCLUSIVE
        if low > allowed:
            return Status.REGRESSION
        if high < -allowed:
            return Status.IMPROVEMENT
        if high <= allowed:
            return Status.PASS
        return Status.INCONCLUSIVE


__all__ = ["Comparison", "ComparisonRule", "Status"]
