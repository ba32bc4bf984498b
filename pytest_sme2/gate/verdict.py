"""The gate's values: what it judges (:class:`Samples` under a :class:`GateConfig` and its :class:`MemoryThresholds`)
and what it says (:class:`Status`, :class:`Comparison`, :class:`Check`, :class:`Verdict`, and :func:`overall`, a
verdict's status from its checks).

Plain frozen values with their JSON form; nothing here judges a measurement. The checks that produce a
:class:`Check` are :mod:`pytest_sme2.gate.checks`; the gate that runs them and the rule of measuring twice,
:mod:`pytest_sme2.gate.decide`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_sme2.evidence.categories import OTHER
from pytest_sme2.gate import rule as _rule
from pytest_sme2.gate.calibration import WHAT_TO_DO, DriftCalibration
from pytest_sme2.gate.rule import ComparisonRule
from pytest_sme2.gate.stats import Interval

SCHEMA_VERSION = 2
#: The verdict statuses and comparison kinds live with the rule (:mod:`pytest_sme2.gate.rule`); the gate's callers
#: name them from here too.
Status = _rule.Status
Comparison = _rule.Comparison
#: The check an invalid measurement gives (why its samples cannot be trusted).
VALIDITY = "validity"



#: Default relative margin for the peak of a runner process: its peak varied at most 1.7 % between the blocks of
#: a session and 0.4 % between the medians of 5 sessions on this VM (host runner; QEMU 0.1 %), so 5 % leaves ~3x
#: headroom (benchmarks/results/memory_noise.txt). The local runtime's rise is not gated (:data:`DELTA_NOT_GATED`).
PEAK_MARGIN = 0.05


#: How far a runner process' peak may move between sessions: memory's own allowance, added to the peak margin in a
#: comparison with stored samples (``stored``, ``runtime``) in place of the latency's ``--sme2-drift-allowance``
#: (this repository's 50 % would let a +50 % peak pass). The medians of 5 real sessions were at most 0.57 % apart (host
#: runner, toy_cnn: 0.42 % from their overall median; MobileNetV3-like 0.03 %, QEMU 0.0 %:
#: benchmarks/results/memory_noise.json), so 1 % is ~1.7x the largest move measured: a stored comparison gates the peak
#: at 5 % + 1 %.
PEAK_DRIFT_ALLOWANCE = 0.01


@dataclass(frozen=True)
class MemoryThresholds:
    """How memory is gated (``@pytest.mark.sme2_threshold(planned_pct=, peak_pct=, planned_mb=, peak_mb=)``)."""

    #: growth of the planned total allowed (relative): 0 = exact, any byte more fails
    planned_growth: float = 0.0
    #: relative margin of the peak's median (a change within it passes)
    peak_margin: float = PEAK_MARGIN
    #: added to ``peak_margin`` when the reference is another session's (stored samples): memory's own, measured
    peak_drift_allowance: float = PEAK_DRIFT_ALLOWANCE
    #: absolute budgets in MiB; None = none
    planned_mb: float | None = None
    peak_mb: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"planned_growth": self.planned_growth, "peak_margin": self.peak_margin,
                "peak_drift_allowance": self.peak_drift_allowance,
                "planned_mb": self.planned_mb, "peak_mb": self.peak_mb}


@dataclass(frozen=True)
class GateConfig:
    """How strict the gate is. Margins are relative (0.05 = 5 %)."""

    margin: float = 0.05
    confidence: float = 0.95
    #: invalid and inconclusive verdicts fail the test in strict mode
    strict: bool = False
    #: verdict statuses that fail the test besides a regression (``invalid``, ``inconclusive``, ``drift``)
    fail_on: tuple[str, ...] = ()
    #: per-category margins (relative); a category listed here is gated, not advisory
    category_margins: Mapping[str, float] = field(default_factory=dict)
    p50_ms: float | None = None
    p90_ms: float | None = None
    #: minimum SME2 speedup median(off)/median(on), judged on the interval's lower end
    min_speedup: float | None = None
    #: how much the machine may drift between sessions, set by hand (``--sme2-drift-allowance``): added to the margin
    #: of ``stored`` and ``runtime`` comparisons, said to be uncalibrated. None = calibrated from the history of the
    #: test on the device (:attr:`drift_calibration`), and without one such a comparison is not decided
    drift_allowance: float | None = None
    #: the measured between-session variation of this test on this device (:mod:`pytest_sme2.gate.calibration`)
    drift_calibration: DriftCalibration | None = None
    #: the measured arm must run SME2 kernels (its XNNPACK log must name one); unverifiable = inconclusive
    require_sme2_kernels: bool = False
    #: the device is emulated (QEMU): its time is not device time, so a speedup measured there is reported,
    #: never judged against ``min_speedup``
    emulated: bool = False
    #: the latency is judged against the baseline; False on an emulated device measured for its evidence only (one
    #: execution per arm, without ``--sme2-emulated-timing``): its time is reported, never compared, never recorded
    time_gated: bool = True
    #: memory thresholds (None = their defaults): judged by ``memory.with_memory``
    memory: MemoryThresholds | None = None
    #: instructions executed under emulation are gated against the count baseline, with this relative tolerance
    #: (0 = exact); None = not gated (:mod:`pytest_sme2.gate.instructions`)
    instructions: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "margin": self.margin, "confidence": self.confidence, "strict": self.strict, "fail_on": list(self.fail_on),
            "category_margins": dict(self.category_margins), "p50_ms": self.p50_ms, "p90_ms": self.p90_ms,
            "min_speedup": self.min_speedup, "drift_allowance": self.drift_allowance,
            "require_sme2_kernels": self.require_sme2_kernels, "emulated": self.emulated,
            "time_gated": self.time_gated,
            **({"memory": self.memory.to_dict()} if self.memory is not None else {}),
            **({"instructions": self.instructions} if self.instructions is not None else {}),
            **({"drift_calibration": self.drift_calibration.to_dict()} if self.drift_calibration is not None else {}),
        }

    def rule(self, comparison: Comparison) -> ComparisonRule:
        """The rule ``comparison`` is judged by: a cross-session one (stored, runtime) takes the hand-set allowance
        when there is one (said to be uncalibrated), else the calibrated one, else none: then it cannot be decided."""
        if not comparison.widened:
            return ComparisonRule.of(comparison)
        cal = self.drift_calibration
        if self.drift_allowance is not None:
            return ComparisonRule.of(comparison, self.drift_allowance, source="hand-set, not calibrated")
        if cal is not None and cal.allowance is not None:
            return ComparisonRule.of(comparison, cal.allowance,
                                     source=f"calibrated from {cal.sessions} sessions of this test on this device")
        return ComparisonRule.of(comparison, undecided=cal.why if cal is not None else (
            f"no history of this test on this device calibrates the drift between sessions: {WHAT_TO_DO}"))


#: What an emulated measurement made for its evidence says of its time (``GateConfig.time_gated`` False).
TIME_NOT_GATED = ("emulated time, not gated: measured for the kernel evidence and the outputs (by default one "
                  "execution per arm); --sme2-emulated-timing measures emulated time in full and gates it against the "
                  "emulated baseline")


@dataclass(frozen=True)
class Samples:
    """What the gate compares for one arm: E2E per run in blocks, and per-run category times of traced runs."""

    e2e_ms: tuple[float, ...]
    #: runs per block (program load / runner process), in order; () = one block
    block_sizes: tuple[int, ...] = ()
    category_per_run_ms: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    #: runs per block of the traced runs the categories come from (they may be other runs than e2e_ms)
    category_block_sizes: tuple[int, ...] = ()
    #: "" when valid; otherwise why these samples cannot be trusted (a busy machine, thermal throttling)
    invalid_reason: str = ""
    #: which measurement these are: "first measurement", "two measurements pooled", ...
    label: str = "first measurement"
    #: delegated operator events per run, by category (their times are whole µs: see :data:`TICK_MS`)
    category_operators: Mapping[str, float] = field(default_factory=dict)
    #: the round each block was measured in (one id per block, in order), when the arm was measured interleaved
    #: with another: blocks of two arms with the same rounds ran moments apart and are judged paired
    #: (:func:`paired`); () = no pairing (stored samples, a single-arm measurement)
    rounds: tuple[str, ...] = ()

    @property
    def blocks(self) -> tuple[int, ...]:
        return self.block_sizes or ((len(self.e2e_ms),) if self.e2e_ms else ())

    @property
    def median_ms(self) -> float:
        return float(np.median(self.e2e_ms)) if self.e2e_ms else float("nan")

    @property
    def has_categories(self) -> bool:
        return bool(self.category_per_run_ms) and any(
            any(v) for c, v in self.category_per_run_ms.items() if c != OTHER
        )

    def category_blocks(self, category: str) -> tuple[int, ...]:
        values = self.category_per_run_ms.get(category, ())
        sizes = self.category_block_sizes
        return sizes if sum(sizes) == len(values) else ((len(values),) if values else ())

    def pooled(self, other: Samples) -> Samples:
        cats = {c: tuple(self.category_per_run_ms.get(c, ())) + tuple(other.category_per_run_ms.get(c, ()))
                for c in set(self.category_per_run_ms) & set(other.category_per_run_ms)}
        cat_blocks = (self.category_block_sizes or ((len(next(iter(self.category_per_run_ms.values()), ())),)))
        cat_blocks = cat_blocks + (other.category_block_sizes
                                   or ((len(next(iter(other.category_per_run_ms.values()), ())),)))
        return Samples(
            self.e2e_ms + other.e2e_ms, self.blocks + other.blocks, cats,
            tuple(n for n in cat_blocks if n) if cats else (),
            self.invalid_reason or other.invalid_reason, "two measurements pooled",
            dict(self.category_operators) or dict(other.category_operators),
            self.rounds + other.rounds if (self.rounds and other.rounds) else (),
        )


@dataclass(frozen=True)
class Check:
    """One judged comparison (E2E, a category, a budget, or the SME2 speedup)."""

    name: str
    status: Status
    message: str
    interval: Interval | None = None
    margin: float | None = None
    p_value: float | None = None
    baseline: float | None = None
    candidate: float | None = None
    advisory: bool = False

    @property
    def delta_pct(self) -> float | None:
        """Change of the median in percent (candidate vs baseline), when this check compares two arms."""
        if self.baseline is None or self.candidate is None or not self.baseline:
            return None
        return (self.candidate / self.baseline - 1) * 100

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "status": self.status.value, "message": self.message,
            "interval": self.interval.to_dict() if self.interval else None, "margin": self.margin,
            "p_value": self.p_value, "baseline": self.baseline, "candidate": self.candidate,
            "advisory": self.advisory,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Check:
        iv = d.get("interval")
        return cls(
            name=str(d["name"]), status=Status(d["status"]), message=str(d["message"]),
            interval=Interval(**iv) if iv else None, margin=d.get("margin"), p_value=d.get("p_value"),
            baseline=d.get("baseline"), candidate=d.get("candidate"), advisory=bool(d.get("advisory", False)),
        )


@dataclass(frozen=True)
class Verdict:
    """The outcome for one test: an overall status, the checks behind it, and what explains it.

    ``samples`` names the candidate samples every number of this verdict comes from (the first
    measurement, a confirming one, or both pooled); ``median_ms`` is their median — the one current
    median of the result, shown everywhere.
    """

    status: Status
    checks: tuple[Check, ...]
    explanation: tuple[str, ...] = ()
    attempts: int = 1
    strict: bool = False
    comparison: Comparison | None = None
    #: statuses that fail besides a regression (``GateConfig.fail_on``)
    fail_on: tuple[str, ...] = ()
    samples: str = "first measurement"
    median_ms: float | None = None
    reference_median_ms: float | None = None
    notes: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        """Does this verdict fail the test? A regression always; invalid and inconclusive in strict mode; and
        whatever ``fail_on`` names (``--sme2-fail-on``): ``invalid`` and ``inconclusive`` there fail a verdict that
        left something undecided (:attr:`undecided`)."""
        if self.status in (Status.REGRESSION, Status.BUG):
            return True
        if self.strict and self.status in (Status.INVALID, Status.INCONCLUSIVE):
            return True
        if self.status.value not in self.fail_on:
            return False
        return self.undecided if self.status in (Status.INVALID, Status.INCONCLUSIVE) else True

    @property
    def undecided(self) -> bool:
        """Did this verdict leave undecided something a measurement could have failed the test on?

        Inconclusive always. Invalid (the measurement could not be trusted) too, except for an unchanged artifact
        whose only unjudged check is the latency's validity: its relative checks never gate (a slower median is
        the machine), so the measurement had nothing to decide that the artifact's hashes had not decided
        already. Its absolute checks (budgets, ``min_speedup``) and evidence do gate: when one of them is not
        judged, the unchanged artifact's invalid is undecided too.
        """
        if self.status is Status.INCONCLUSIVE:
            return True
        if self.status is not Status.INVALID:
            return False
        if self.comparison is not Comparison.UNCHANGED:
            return True
        return any(c.status in (Status.INVALID, Status.INCONCLUSIVE) and not c.advisory and c.name != VALIDITY
                   for c in self.checks)

    def undecided_text(self) -> str:
        """Why a failing undecided verdict fails and what to do ("" when this verdict is not that)."""
        if not self.undecided or self.status.value not in self.fail_on:
            return ""
        opt_out = ("--sme2-fail-on=missing reports it instead (a session that decided nothing still fails), "
                   "--sme2-fail-on=none reports everything but a regression")
        if self.status is Status.INVALID:
            return ("not decided: the measurement could not be trusted, so this change was neither passed nor failed; "
                    "with 'invalid' in --sme2-fail-on (the default where CI is set) that is not green. Run the job "
                    "again on a quiet runner (a dedicated or larger machine, no parallel jobs on its CPUs); "
                    f"--sme2-busy-limit sets what counts as busy; {opt_out}")
        return ("not decided: the change could not be shown to be within the margin, nor beyond it (measured twice "
                "unless --sme2-no-confirm); with 'inconclusive' in --sme2-fail-on (the default where CI is set) that "
                "is not green. Measure more (--sme2-blocks, --sme2-runs), give the baseline's artifact to the session "
                "(cache --sme2-artifact-dir) so it is compared in interleaved rounds, or set a margin this machine "
                f"can resolve (sme2_threshold(latency_pct=...)); {opt_out}")

    @property
    def e2e(self) -> Check | None:
        return next((c for c in self.checks if c.name == "e2e"), None)

    @property
    def speedup(self) -> Check | None:
        return next((c for c in self.checks if c.name in ("speedup", "min_speedup")), None)

    def summary(self) -> str:
        """A multi-line message: what regressed, by how much, the interval, and the explanation."""
        lines = list(self.notes)
        for c in self.checks:
            if c.advisory and c.status in (Status.PASS, Status.INCONCLUSIVE):
                continue
            lines.append(f"[{c.status.value}] {c.name}: {c.message}")
        lines.extend(self.explanation)
        if self.attempts > 1:
            lines.append(f"(measured {self.attempts} times: the numbers above are of the {self.samples})")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION, "status": self.status.value,
            "checks": [c.to_dict() for c in self.checks], "explanation": list(self.explanation),
            "attempts": self.attempts, "strict": self.strict, "fail_on": list(self.fail_on),
            "comparison": self.comparison.value if self.comparison else None, "samples": self.samples,
            "median_ms": self.median_ms, "reference_median_ms": self.reference_median_ms, "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Verdict:
        comparison = d.get("comparison")
        return cls(
            status=Status(d["status"]), checks=tuple(Check.from_dict(c) for c in d["checks"]),
            explanation=tuple(d.get("explanation", ())), attempts=int(d.get("attempts", 1)),
            strict=bool(d.get("strict", False)), fail_on=tuple(str(x) for x in d.get("fail_on", ())),
            comparison=Comparison(comparison) if comparison else None,
            samples=str(d.get("samples", "first measurement")), median_ms=d.get("median_ms"),
            reference_median_ms=d.get("reference_median_ms"), notes=tuple(d.get("notes", ())),
        )


def overall(checks: Sequence[Check]) -> Status:
    """The verdict's status from its checks: the worst gating check wins; advisory checks never decide.

    Order: regression (a real, confirmed slowdown is never hidden), bug, invalid, inconclusive, drift,
    improvement (of E2E), pass.
    """
    statuses = {c.status for c in checks if not c.advisory}
    for s in (Status.REGRESSION, Status.BUG, Status.INVALID, Status.INCONCLUSIVE, Status.DRIFT):
        if s in statuses:
            return s
    e2e = next((c for c in checks if c.name == "e2e"), None)
    if e2e is not None and e2e.status is Status.IMPROVEMENT:
        return Status.IMPROVEMENT
    return Status.PASS
