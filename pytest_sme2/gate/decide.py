"""The regression gate: samples in, verdict out. Pure functions, no pytest, no I/O.

Verdicts are ``pass``, ``regression``, ``improvement``, ``inconclusive``, ``invalid`` and ``drift``
(the method and its references: README "Baselines and the gate", ``benchmarks/README.md``):

- The effect is ``median(candidate runs) / median(reference runs)``; its 95 % interval comes from the
  *blocks* (one program load or runner process each), which are the independent units of evidence: runs
  of one block share the machine's state of that moment.
- Decisions are one-sided against the margin ``m`` (non-inferiority, as in TOST):
  regression when the whole interval lies above ``+m``; improvement when it lies below ``-m``; pass when
  its upper end is at or below ``+m`` ("not slower by more than the margin" — a faster-but-uncertain
  result passes); otherwise inconclusive.
- What the reference is decides what a slowdown means (:class:`Comparison`; the rule, applied alike to E2E,
  categories and every other relative check, is :class:`~pytest_sme2.gate.rule.ComparisonRule`):
  ``session`` — the baseline's own artifact re-measured in this session, interleaved with the candidate:
  drift hits both arms, the margin is the margin; ``stored`` — a changed artifact against the stored
  samples of an earlier session (its reference artifact was not available): the margin is widened by the
  configured drift allowance (every relative margin, categories included); ``unchanged`` — the same
  artifact as the baseline's: nothing under test changed, so a slower median is the machine drifting:
  reported as ``drift``, never a failure.
- Arms measured in the same interleaved rounds (a same-session reference and its candidate, SME2 off and
  on) carry their rounds (:attr:`Samples.rounds`) and are judged paired: the signed-rank interval of the
  per-round ratios (:func:`pytest_sme2.gate.stats.paired_ratio_ci`), in which drift between rounds cancels.
  Stored samples pair with nothing: the unpaired block interval (:func:`pytest_sme2.gate.stats.block_ratio_ci`).
- "Could not measure" (a busy machine, thermal throttling, no samples) is ``invalid``, never a regression.
- A regression or an inconclusive result is measured once more and decided once, on the pooled
  blocks of both measurements (:func:`decide`).

Per-category checks compare the per-run category times of the traced runs; a category with its own
threshold gates (Bonferroni across the gated categories), the others are advisory. A category whose
baseline is below the trace's resolution is judged on its absolute change in ms.

Evidence checks (:func:`sme2_kernel_checks`) judge what the XNNPACK logs of the arms' log builds say
about SME2, not timings: on a device that reports SME2, an SME2-on arm whose log names no SME2 kernel
is a ``regression`` of the build (it was built, or runs, without SME2); an SME2-off arm whose log names
SME2 kernels makes the on/off comparison ``invalid``. A requirement that cannot be checked (no log
build) is said, never passed silently. Evidence does not change with re-measuring, so it never
triggers the confirming measurement.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_sme2.evidence.categories import CATEGORIES, OTHER
from pytest_sme2.evidence.kernels import KernelLog, isa_suffix
from pytest_sme2.evidence.numerics import NumericsComparison
from pytest_sme2.evidence.sme import TraceEvidence
from pytest_sme2.gate import rule as _rule
from pytest_sme2.gate.calibration import WHAT_TO_DO, DriftCalibration
from pytest_sme2.gate.rule import ComparisonRule
from pytest_sme2.gate.stats import (
    BlockEffect,
    Interval,
    block_difference_ci,
    block_medians,
    block_ratio_ci,
    median_interval,
    paired_difference_ci,
    paired_ratio_ci,
)

if TYPE_CHECKING:
    from pytest_sme2.gate.memory import MemoryThresholds

SCHEMA_VERSION = 2
#: The verdict statuses and comparison kinds live with the rule (:mod:`pytest_sme2.gate.rule`); the gate's callers
#: name them from here too.
Status = _rule.Status
Comparison = _rule.Comparison
#: Categories below this share of the reference E2E median are below XNNPACK's 1 µs resolution for
#: small models; a gated category is judged as if it were this large (so 0 ms -> 0.03 ms is visible).
MIN_CATEGORY_SHARE = 0.02
#: XNNPACK's operator events are whole microseconds (checked on every recorded trace: every delegated event's
#: duration is a multiple of 1 µs, portable ones are not), so a category of n delegated operators moves by a
#: tick per operator between runs with nothing changed. A category's allowance is at least this many ticks per
#: delegated operator of the category: a 1 µs category that reads 2 µs is not a 100 % regression.
TICK_MS = 0.001
TICKS_PER_OPERATOR = 2
#: The check an invalid measurement gives (why its samples cannot be trusted).
VALIDITY = "validity"


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
    #: memory thresholds (a ``memory.MemoryThresholds``; None = its defaults): judged by ``memory.with_memory``
    memory: MemoryThresholds | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "margin": self.margin, "confidence": self.confidence, "strict": self.strict, "fail_on": list(self.fail_on),
            "category_margins": dict(self.category_margins), "p50_ms": self.p50_ms, "p90_ms": self.p90_ms,
            "min_speedup": self.min_speedup, "drift_allowance": self.drift_allowance,
            "require_sme2_kernels": self.require_sme2_kernels, "emulated": self.emulated,
            "time_gated": self.time_gated,
            **({"memory": self.memory.to_dict()} if self.memory is not None else {}),
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


def paired(a: Samples, b: Samples, blocks_a: Sequence[int] | None = None,
           blocks_b: Sequence[int] | None = None) -> bool:
    """Were the two arms measured in the same interleaved rounds, block i of each in round i?

    ``blocks_a``/``blocks_b``: the block sizes of the values judged (default: the E2E blocks; a category's traced
    runs have their own); each must have one block per round.
    """
    sizes_a = a.blocks if blocks_a is None else tuple(blocks_a)
    sizes_b = b.blocks if blocks_b is None else tuple(blocks_b)
    return bool(a.rounds) and a.rounds == b.rounds and len(sizes_a) == len(sizes_b) == len(a.rounds)


def _effect(a: Samples, b: Samples, *, confidence: float, scale: str, category: str | None = None) -> BlockEffect:
    """The interval of ``b`` against ``a`` (E2E, or ``category``'s traced runs): paired by round when both were
    measured in the same rounds, else the unpaired block interval (also when the rounds are too few for a paired
    interval at ``confidence``)."""
    if category is None:
        a_values, a_blocks, b_values, b_blocks = a.e2e_ms, a.blocks, b.e2e_ms, b.blocks
    else:
        a_values, a_blocks = a.category_per_run_ms[category], a.category_blocks(category)
        b_values, b_blocks = b.category_per_run_ms[category], b.category_blocks(category)
    unpaired, by_round = ((block_ratio_ci, paired_ratio_ci) if scale == "ratio"
                          else (block_difference_ci, paired_difference_ci))
    if paired(a, b, a_blocks, b_blocks):
        effect = by_round(a_values, b_values, baseline_blocks=a_blocks, candidate_blocks=b_blocks,
                          confidence=confidence)
        if effect.interval is not None:
            return effect
        fallback = unpaired(a_values, b_values, baseline_blocks=a_blocks, candidate_blocks=b_blocks,
                            confidence=confidence)
        return fallback if fallback.interval is not None else effect
    return unpaired(a_values, b_values, baseline_blocks=a_blocks, candidate_blocks=b_blocks, confidence=confidence)


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


# ------------------------------------------------------------------------------------------ checks


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def _design_text(effect: BlockEffect) -> str:
    return f", paired over {effect.baseline_blocks} interleaved rounds" if effect.paired else ""


def _ratio_text(iv: Interval) -> str:
    return f"{_pct(iv.estimate - 1)} ({_ci(iv)} {_pct(iv.low - 1)} .. {_pct(iv.high - 1)})"


def _ci(iv: Interval) -> str:
    """``95% CI``, or the level actually used (``98.75% CI`` at a look of a sequential plan)."""
    return f"{iv.confidence * 100:.4g}% CI"


def compare_e2e(reference: Samples, candidate: Samples, config: GateConfig, comparison: Comparison) -> Check:
    """The end-to-end check: ratio of medians with its block interval, judged by ``comparison``'s rule."""
    if not reference.e2e_ms or not candidate.e2e_ms:
        return Check("e2e", Status.INVALID, "no samples to compare")
    ref_med, cand_med = reference.median_ms, candidate.median_ms
    if ref_med <= 0:
        return Check("e2e", Status.INVALID, "the reference median is 0 ms: below the timer's resolution")
    effect = _effect(reference, candidate, confidence=config.confidence, scale="ratio")
    rule = config.rule(comparison)
    margin = rule.margin(config.margin)
    head = f"median {ref_med:.4f} -> {cand_med:.4f} ms"
    if effect.interval is None:
        return Check("e2e", Status.INCONCLUSIVE,
                     f"{head} ({_pct(cand_med / ref_med - 1)}); not judged: {effect.reason}", margin=margin,
                     p_value=effect.p_value, baseline=ref_med, candidate=cand_med)
    iv = effect.interval
    where = f"{head}, {_ratio_text(iv)}{_design_text(effect)}"
    m = rule.margin_text(config.margin)
    status = rule.status(iv.low - 1, iv.high - 1, margin)
    if status is Status.DRIFT:
        way = "slower" if iv.low > 1 else "faster"
        msg = (f"the unchanged artifact ran {way} than its baseline: {where}, beyond the {m}. Nothing under test "
               "changed: this is the machine, not gated")
    elif comparison is Comparison.UNCHANGED:
        msg = f"unchanged artifact, not slower by the {m} (upper bound below it): {where}"
    elif status is Status.REGRESSION:
        msg = f"slower: {where}, lower bound above the {m} ({effect.test_text})"
    elif status is Status.IMPROVEMENT:
        msg = f"faster: {where}, upper bound below -{margin * 100:.1f}%; consider refreshing the baseline"
    elif status is Status.PASS:
        msg = f"not slower by the {m} (upper bound below it): {where}"
    elif rule.undecided:
        msg = (f"not decided: {where}, against samples of another session with no calibrated drift allowance, so "
               f"the machine's move between the sessions is unknown; {rule.undecided}")
    else:
        msg = (f"the interval reaches past the {m}: {where}; a pass needs its upper bound below the margin, so "
               "the measurement is not precise enough for it (more blocks, a larger margin, or a quieter device)")
    return Check("e2e", status, msg, interval=iv, margin=margin, p_value=effect.p_value, baseline=ref_med,
                 candidate=cand_med)


def _category_check(cat: str, reference: Samples, candidate: Samples, *, asked: float, confidence: float,
                    gated: bool, rule: ComparisonRule) -> Check:
    a = reference.category_per_run_ms[cat]
    b = candidate.category_per_run_ms[cat]
    a_med = float(np.median(block_medians(a, reference.category_blocks(cat))))
    b_med = float(np.median(block_medians(b, candidate.category_blocks(cat))))
    floor = MIN_CATEGORY_SHARE * reference.median_ms
    operators = max(reference.category_operators.get(cat, 0.0), candidate.category_operators.get(cat, 0.0))
    ticks = TICKS_PER_OPERATOR * TICK_MS * operators
    margin = rule.margin(asked)  # widened like every relative check of this comparison (defect 2 of issue 18)
    allowance = max(margin * max(a_med, floor), ticks)
    name = f"category:{cat}"
    effect = _effect(reference, candidate, confidence=confidence, scale="difference", category=cat)
    head = f"median {a_med:.4f} -> {b_med:.4f} ms"
    share = rule.share_text(asked)
    basis = (f"{share} of {a_med:.4f} ms" if a_med >= floor else
             f"{share} of {floor:.4f} ms: the baseline is below {MIN_CATEGORY_SHARE:.0%} of E2E, so the "
             "change is judged in ms")
    if ticks > margin * max(a_med, floor):
        basis = (f"{TICKS_PER_OPERATOR} ticks of {TICK_MS * 1000:g} µs for each of its {operators:g} XNNPACK "
                 f"operator(s), whose times are whole µs: more than {basis}")
    if effect.interval is None:
        return Check(name, Status.INCONCLUSIVE, f"{head}; not judged: {effect.reason}", margin=margin,
                     p_value=effect.p_value, baseline=a_med, candidate=b_med, advisory=not gated)
    iv = effect.interval
    where = (f"{head}, change {iv.estimate:+.4f} ms ({_ci(iv)} {iv.low:+.4f} .. {iv.high:+.4f}{_design_text(effect)}), "
             f"allowed +{allowance:.4f} ms ({basis})")
    status = rule.status(iv.low, iv.high, allowance)
    msg = {Status.REGRESSION: f"slower: {where}", Status.IMPROVEMENT: f"faster: {where}",
           Status.PASS: f"within: {where}", Status.INCONCLUSIVE: (
               f"not decided: {where}; no calibrated drift allowance between sessions" if rule.undecided else
               f"the interval reaches past the allowance: {where}"),
           Status.DRIFT: f"unchanged artifact: {where}"}[status]
    if rule.comparison is Comparison.UNCHANGED:
        msg = f"unchanged artifact: {where}"
    rel = Interval(b_med / a_med if a_med > 0 else float("nan"), 1 + iv.low / a_med if a_med > 0 else float("nan"),
                   1 + iv.high / a_med if a_med > 0 else float("nan"), iv.confidence, iv.coverage)
    return Check(name, status, msg, interval=rel if a_med > 0 else None, margin=margin, p_value=effect.p_value,
                 baseline=a_med, candidate=b_med, advisory=not gated)


def category_checks(reference: Samples, candidate: Samples, config: GateConfig, comparison: Comparison) -> list[Check]:
    """Per-category checks; a threshold that cannot be checked (no per-operator trace) says so."""
    gated = [c for c in CATEGORIES if c in config.category_margins]
    if not (reference.has_categories and candidate.has_categories):
        if not gated:
            return []
        which = "the baseline" if not reference.has_categories else "this measurement"
        return [Check(f"category:{c}", Status.INCONCLUSIVE,
                      f"cannot check the {c} threshold: {which} has no per-operator trace (a runtime or "
                      "runner without the event tracer records end-to-end time only)",
                      margin=config.category_margins[c])
                for c in gated]
    checks = []
    rule = config.rule(comparison)
    # Bonferroni across the categories that gate: a few hard gates, each must hold.
    gated_conf = 1 - (1 - config.confidence) / max(1, len(gated))
    for cat in CATEGORIES:
        if cat not in reference.category_per_run_ms or cat not in candidate.category_per_run_ms:
            continue
        own = cat in config.category_margins
        a_med = float(np.median(reference.category_per_run_ms[cat]))
        if not own and a_med < MIN_CATEGORY_SHARE * reference.median_ms:
            continue  # too small to say anything about, and nobody asked
        checks.append(_category_check(
            cat, reference, candidate, asked=config.category_margins[cat] if own else config.margin,
            confidence=gated_conf if own else config.confidence, gated=own and rule.gates, rule=rule))
    return checks


def budget_check(name: str, candidate: Samples, budget: float, quantile: float, config: GateConfig) -> Check:
    """An absolute latency budget (p50 or p90 in ms) on the candidate's runs, with the blocks' interval."""
    values = np.asarray(candidate.e2e_ms, dtype=float)
    estimate = float(np.percentile(values, quantile))
    per_block = [float(np.percentile(values[s:e], quantile)) for s, e in _bounds(candidate.blocks)]
    iv, why = median_interval(per_block, confidence=config.confidence)
    if iv is None:
        # Without an interval only a unanimous verdict of the blocks stands (5 blocks: 1 - 2/32 = 93.8 %).
        where = f"p{quantile:.0f} {estimate:.4f} ms vs budget {budget:.4f} ms (per-block p{quantile:.0f}: {why})"
        status = Status.REGRESSION if min(per_block) > budget else (
            Status.PASS if max(per_block) <= budget else Status.INCONCLUSIVE)
        return Check(name, status, where, candidate=estimate, baseline=budget)
    where = (f"p{quantile:.0f} {estimate:.4f} ms (95% CI of the blocks' p{quantile:.0f} {iv.low:.4f} .. {iv.high:.4f}) "
             f"vs budget {budget:.4f} ms")
    status = Status.REGRESSION if iv.low > budget else (Status.PASS if iv.high <= budget else Status.INCONCLUSIVE)
    return Check(name, status, where, interval=Interval(estimate, iv.low, iv.high, iv.confidence, iv.coverage),
                 candidate=estimate, baseline=budget)


def _bounds(blocks: Sequence[int]) -> list[tuple[int, int]]:
    ends = np.cumsum(blocks).tolist()
    return list(zip([0, *ends[:-1]], ends, strict=True))


def speedup_check(off: Samples, on: Samples, config: GateConfig) -> Check:
    """SME2 speedup median(off)/median(on) with its block interval; gated on the lower end when required."""
    name = "min_speedup" if config.min_speedup is not None else "speedup"
    if not off.e2e_ms or not on.e2e_ms:
        return Check(name, Status.INVALID, "no samples to compare", advisory=config.min_speedup is None)
    # speedup = off / on: the "candidate" of the ratio is the off arm
    effect = _effect(on, off, confidence=config.confidence, scale="ratio")
    estimate = off.median_ms / on.median_ms
    if config.emulated:
        # Emulated time never gates, whatever the number of blocks: a speedup too uncertain to judge is as
        # ungated as a certain one.
        iv = effect.interval
        ratio = (f"SME2 off/on ratio {iv.estimate:.2f}x (95% CI {iv.low:.2f}x .. {iv.high:.2f}x)" if iv is not None
                 else f"SME2 off/on ratio {estimate:.2f}x ({effect.reason})")
        required = f"; min_speedup {config.min_speedup:.2f}x applies on a device" if config.min_speedup else ""
        return Check(name, Status.INCONCLUSIVE, f"not a device: not gated. The emulated {ratio} is of emulated time, "
                     f"not device time (QEMU emulates SME more slowly than NEON){required}", interval=iv,
                     advisory=True, baseline=off.median_ms, candidate=on.median_ms)
    if effect.interval is None:
        return Check(name, Status.INCONCLUSIVE, f"speedup {estimate:.2f}x; not judged: {effect.reason}",
                     advisory=config.min_speedup is None, baseline=off.median_ms, candidate=on.median_ms)
    iv = effect.interval
    where = f"speedup {iv.estimate:.2f}x ({_ci(iv)} {iv.low:.2f}x .. {iv.high:.2f}x{_design_text(effect)})"
    if config.min_speedup is None:
        return Check(name, Status.PASS, where, interval=iv, advisory=True, p_value=effect.p_value,
                     baseline=off.median_ms, candidate=on.median_ms)
    where += f", required >= {config.min_speedup:.2f}x"
    if iv.low >= config.min_speedup:
        status = Status.PASS
    elif iv.high < config.min_speedup:
        status = Status.REGRESSION
    else:
        status = Status.INCONCLUSIVE
    return Check(name, status, where, interval=iv, margin=config.min_speedup, p_value=effect.p_value,
                 baseline=off.median_ms, candidate=on.median_ms)


def explain(reference: Samples, candidate: Samples) -> tuple[str, ...]:
    """Which categories account for the change in median E2E (block medians, ms and share of the change)."""
    if not (reference.has_categories and candidate.has_categories):
        return ()
    delta_e2e = candidate.median_ms - reference.median_ms
    rows = []
    for cat in CATEGORIES:
        a = reference.category_per_run_ms.get(cat, ())
        b = candidate.category_per_run_ms.get(cat, ())
        if a and b:
            before = float(np.median(block_medians(a, reference.category_blocks(cat))))
            after = float(np.median(block_medians(b, candidate.category_blocks(cat))))
            rows.append((cat, after - before, before, after))
    rows.sort(key=lambda r: -abs(r[1]))
    parts = []
    for cat, d, before, after in rows:
        share = f", {d / delta_e2e * 100:.0f}% of the E2E change" if abs(delta_e2e) > 1e-12 else ""
        parts.append(f"{cat} {before:.3f} -> {after:.3f} ms ({d:+.3f}{share})")
    return ("categories explaining the change (medians of the traced runs): " + "; ".join(parts),) if parts else ()


# ------------------------------------------------------------------------------------------ evidence

#: The check that the SME2-on (or required) arm ran SME2 kernels, and that the SME2-off arm ran none.
SME2_KERNELS = "sme2_kernels"
SME2_OFF_KERNELS = "sme2_off_kernels"
#: The check that the two arms of a pair compute the same outputs (within the dtype's tolerance).
NUMERICS = "numerics"
EVIDENCE_CHECKS = (SME2_KERNELS, SME2_OFF_KERNELS, NUMERICS)
#: ``Sme2Evidence.required_by`` of an on/off test and of ``sme2_threshold(require_sme2_kernels=True)``.
REQUIRED_BY_ON_OFF = "the SME2-on arm of an on/off comparison"
REQUIRED_BY_MARKER = "sme2_threshold(require_sme2_kernels=True)"


@dataclass(frozen=True)
class Sme2Evidence:
    """What the gate knows about SME2 kernel use: who requires it, what the device reports, what the logs say.

    ``log``/``off_log`` are the XNNPACK logs of the measured (SME2-on) arm and of the SME2-off arm, None
    when that arm had no log build (``missing_log`` then says why). ``trace``/``off_trace`` are what the arms'
    ETDump operator names say (:mod:`.sme_evidence`), None when not computed. ``enforced``: the test itself
    asked for SME2 kernels (the marker), so a requirement that cannot be checked is inconclusive, not advisory.
    """

    required_by: str = ""
    enforced: bool = False
    device_sme2: bool | None = None
    device: str = "the device"
    log: KernelLog | None = None
    off_log: KernelLog | None = None
    missing_log: str = "no XNNPACK-logging build for this arm (--sme2-runner-log)"
    trace: TraceEvidence | None = None
    off_trace: TraceEvidence | None = None
    #: the two arms' outputs compared (:mod:`pytest_sme2.evidence.numerics`); None when a runner wrote none
    numerics: NumericsComparison | None = None


def _isas(log: KernelLog) -> str:
    """The ISAs the log's kernels target, most kernels first (``avx512f (23), scalar (8), ...``)."""
    counts = Counter(isa_suffix(k.name) for k in log.kernels)
    return ", ".join(f"{isa} ({n})" for isa, n in counts.most_common(5)) or "none"


def _on_check(ev: Sme2Evidence) -> Check:
    if ev.device_sme2 is False:
        return Check(SME2_KERNELS, Status.INCONCLUSIVE, f"not applicable: {ev.device} reports no SME2, so no SME2 "
                     "kernel can run there", advisory=True)
    log_check = _log_check(ev)
    if ev.trace is None:
        return log_check
    trace_check = _trace_check(ev, ev.trace)
    if ev.log is None:
        return trace_check
    # Both sources: a source showing SME2 absent decides (a regression), else one showing it present passes;
    # the message carries both findings so a disagreement is visible.
    order = (Status.REGRESSION, Status.PASS, Status.INCONCLUSIVE)
    first, second = sorted((log_check, trace_check), key=lambda c: order.index(c.status))
    return replace(first, message=f"{first.message}. Also: {second.message}")


def _trace_check(ev: Sme2Evidence, trace: TraceEvidence) -> Check:
    advisory = not ev.enforced
    where = f"the trace ({trace.source})" if trace.source else "the trace"
    if trace.has_sme:
        n = len(trace.sme)
        return Check(SME2_KERNELS, Status.PASS, f"{where} names {n} operator{'s' if n != 1 else ''} on XNNPACK's "
                     f"SME packed-LHS path, e.g. {trace.sme[0]}")
    if not trace.not_sme:
        what = (f"its {len(trace.undetermined)} GEMM-like operator(s) are QP8 ones, named alike with and without "
                "SME2" if trace.undetermined else "it has no GEMM-like operator")
        return Check(SME2_KERNELS, Status.INCONCLUSIVE, f"not checked by {where}: {what}", advisory=advisory)
    if ev.device_sme2 is None:
        return Check(SME2_KERNELS, Status.INCONCLUSIVE, f"{where} names no operator on the SME path, but "
                     f"{ev.device} does not say whether it has SME2", advisory=advisory)
    shown = ", ".join(trace.not_sme[:3]) + (f" and {len(trace.not_sme) - 3} more" if len(trace.not_sme) > 3 else "")
    return Check(SME2_KERNELS, Status.REGRESSION, (
        f"no SME operator: {ev.required_by} must run SME2 kernels on {ev.device}, which reports SME2, but {where} "
        f"names no operator on XNNPACK's SME packed-LHS path (PF32, PF16, PQS8, Pack LH); its GEMMs ran off it: "
        f"{shown}. The runner's XNNPACK was built without KleidiAI/SME (XNNPACK_ENABLE_KLEIDIAI and "
        "XNNPACK_ENABLE_ARM_SME2 ON, arm64), or the device hides SME from the process"))


def _log_check(ev: Sme2Evidence) -> Check:
    advisory = not ev.enforced
    log = ev.log
    if log is None:
        return Check(SME2_KERNELS, Status.INCONCLUSIVE, f"not checked: {ev.missing_log}; without an XNNPACK log "
                     f"nothing shows whether {ev.required_by} ran SME2 kernels", advisory=advisory)
    if log.sme2_kernels:
        n = len(log.sme2_kernels)
        return Check(SME2_KERNELS, Status.PASS, f"the XNNPACK log ({log.source}) names {n} SME2 kernel"
                     f"{'s' if n != 1 else ''}, e.g. {log.sme2_kernels[0]}")
    if not log.kernels:
        return Check(SME2_KERNELS, Status.INCONCLUSIVE, f"not checked: the XNNPACK log ({log.source}) names no "
                     "selected kernel at all: was it written by a debug-logging build (Debug, XNN_LOG_LEVEL=5)? "
                     "On Android, XNNPACK logs to logcat (tag XNNPACK)", advisory=advisory)
    if ev.device_sme2 is None:
        return Check(SME2_KERNELS, Status.INCONCLUSIVE, f"the XNNPACK log ({log.source}) names no SME2 kernel, "
                     f"but {ev.device} does not say whether it has SME2", advisory=advisory)
    return Check(SME2_KERNELS, Status.REGRESSION, (
        f"no SME2 kernel: {ev.required_by} must run SME2 kernels on {ev.device}, which reports SME2, but the XNNPACK "
        f"log of its build ({log.source}) names none (its {len(log.kernels)} kernels target {_isas(log)}; SME2 ones "
        "end in __neonsme2 or are kai_*sme2* routines). The runner was built without XNNPACK's SME2 kernels "
        "(XNNPACK_ENABLE_ARM_SME2=OFF, or a compiler without SME2 support: Clang 18+ / GCC 10+ for arm64)"))


def sme2_kernel_checks(evidence: Sme2Evidence | None) -> list[Check]:
    """The evidence checks: SME2 kernels in the required arm's log or trace, none in the SME2-off arm's."""
    if evidence is None:
        return []
    checks = [_on_check(evidence)] if evidence.required_by else []
    num = evidence.numerics
    if num is not None:
        checks.append(Check(NUMERICS, Status.PASS if num.agree else Status.REGRESSION, (
            f"SME2 off and on agree: {num.describe()}" if num.agree else
            f"SME2 off and on compute different outputs: {num.describe()}. One arm's kernels compute something "
            "else (a wrong packing or fallback); the latency of a wrong result means nothing")))
    off = evidence.off_log
    found = []
    if off is not None and off.sme2_kernels:
        found.append(f"the SME2-off arm's XNNPACK log ({off.source}) names {len(off.sme2_kernels)} SME2 kernel(s), "
                     f"e.g. {off.sme2_kernels[0]}: that build has SME2 (build it with XNNPACK_ENABLE_ARM_SME2=OFF)")
    off_trace = evidence.off_trace
    if off_trace is not None and off_trace.has_sme:
        found.append(f"the SME2-off arm's trace{f' ({off_trace.source})' if off_trace.source else ''} names "
                     f"{len(off_trace.sme)} operator(s) on the SME packed-LHS path, e.g. {off_trace.sme[0]}: that "
                     "arm ran SME kernels (turn SME off in the CPU, e.g. -cpu max,sme=off, or in the build)")
    if found:
        checks.append(Check(SME2_OFF_KERNELS, Status.INVALID, "; ".join(found) + ", so this is not an SME2 on/off "
                            "comparison"))
    return checks


# ------------------------------------------------------------------------------------------ verdicts


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


def gate(reference: Samples | None, candidate: Samples, config: GateConfig, *,
         comparison: Comparison = Comparison.SESSION, off: Samples | None = None,
         notes: Sequence[str] = (), evidence: Sme2Evidence | None = None) -> Verdict:
    """Every check the config asks for, on one measurement.

    ``reference`` None = nothing to compare with (a first run): only the absolute checks (budgets, the
    SME2 speedup of an on/off pair, whose ``off`` arm is given) are judged. ``evidence``: the SME2 kernel
    checks (:func:`sme2_kernel_checks`), judged even when the measurement is invalid (a log is no timing).
    """
    reason = candidate.invalid_reason or (reference.invalid_reason if reference else "") or (
        off.invalid_reason if off else "")
    common = {"strict": config.strict, "fail_on": config.fail_on,
              "comparison": comparison if reference is not None else None,
              "samples": candidate.label, "median_ms": candidate.median_ms if candidate.e2e_ms else None,
              "reference_median_ms": reference.median_ms if reference is not None and reference.e2e_ms else None,
              "notes": tuple(notes)}
    proofs = sme2_kernel_checks(evidence)
    if reason:
        # What the measurement could not judge is listed: a budget or min_speedup left unjudged is undecided even
        # for an unchanged artifact (Verdict.undecided).
        unjudged = [Check(name, Status.INVALID, f"not judged: {reason}") for name, asked in (
            ("p50_budget", config.p50_ms), ("p90_budget", config.p90_ms),
            ("min_speedup", config.min_speedup if off is not None and not config.emulated else None))
            if asked is not None]
        invalid = (Check(VALIDITY, Status.INVALID, reason), *unjudged, *proofs)
        return Verdict(overall(invalid), invalid, **common)  # type: ignore[arg-type]
    checks: list[Check] = []
    explanation: tuple[str, ...] = ()
    if reference is not None:
        checks.append(compare_e2e(reference, candidate, config, comparison))
        checks += category_checks(reference, candidate, config, comparison)
        explanation = explain(reference, candidate)
    if config.p50_ms is not None:
        checks.append(budget_check("p50_budget", candidate, config.p50_ms, 50, config))
    if config.p90_ms is not None:
        checks.append(budget_check("p90_budget", candidate, config.p90_ms, 90, config))
    if off is not None:
        checks.append(speedup_check(off, candidate, config))
    checks += proofs
    return Verdict(overall(checks), tuple(checks), explanation, **common)  # type: ignore[arg-type]


def measured_status(verdict: Verdict) -> Status:
    """The verdict's status from its measured checks only (evidence checks left out): what re-measuring can change."""
    return overall([c for c in verdict.checks if c.name not in EVIDENCE_CHECKS])


Measure = Callable[[], tuple["Samples | None", Samples, "Samples | None"]]


def decide(
    first: tuple[Samples | None, Samples, Samples | None],
    measure: Measure | None,
    config: GateConfig,
    *,
    comparison: Comparison = Comparison.SESSION,
    notes: Sequence[str] = (),
    evidence: Sme2Evidence | None = None,
) -> Verdict:
    """Gate ``first`` = (reference, candidate, off); when its measured checks are not settled, measure once more
    and decide once, on the pooled blocks of both measurements.

    ``measure`` returns a fresh (reference, candidate, off) triple — the reference is re-measured too in
    a same-session comparison, the stored one is returned unchanged otherwise. A first regression and a first
    inconclusive are treated alike: the second measurement is pooled with the first and the pooled verdict
    stands (a regression then needs the pooled interval past the margin, which holds its false-alarm rate at the
    interval's: the pooled interval is the only one that can fail the test). Only the measured checks decide whether
    to measure again (:func:`measured_status`): evidence does not change. For an unchanged artifact the relative
    checks never gate, so only the absolute ones (budgets, ``min_speedup``) can ask for the second measurement.
    Invalid measurements are not re-measured here (the measurement itself re-runs disturbed blocks).
    In a stored comparison the second measurement repeats this session's state: it can rule out a transient, not
    separate the model from the session, and the verdict says so.
    """
    ref, cand, off = first
    verdict = gate(ref, cand, config, comparison=comparison, off=off, notes=notes, evidence=evidence)
    first_status = asks = measured_status(verdict)
    rule = config.rule(comparison) if ref is not None else None
    if rule is not None and rule.undecided:
        # No allowance decides a relative check against another session, so measuring again cannot either: only an
        # absolute check (a budget, min_speedup) is worth a second measurement.
        asks = overall([c for c in verdict.checks if c.name not in EVIDENCE_CHECKS
                        and c.name != "e2e" and not c.name.startswith("category:")])
    if measure is None or asks not in (Status.REGRESSION, Status.INCONCLUSIVE):
        return verdict
    ref2, cand2, fresh_off = measure()
    pooled_ref = ref.pooled(ref2) if (ref is not None and ref2 is not None and ref2 is not ref) else ref
    pooled_off = off.pooled(fresh_off) if (off is not None and fresh_off is not None) else off
    pooled = gate(pooled_ref, cand.pooled(cand2), config, comparison=comparison, off=pooled_off, notes=notes,
                  evidence=evidence)
    again = gate(ref2 if ref2 is not None else ref, replace(cand2, label="second measurement"), config,
                 comparison=comparison, off=fresh_off if fresh_off is not None else off, notes=notes,
                 evidence=evidence)
    said = (f"measured twice: the first measurement said {first_status.value}, the second alone "
            f"{measured_status(again).value}; the verdict is that of both pooled ({measured_status(pooled).value})")
    extra = [said]
    if rule is not None and rule.comparison.widened and measured_status(pooled) is Status.REGRESSION:
        extra.append("re-measuring cannot separate the model from this session: both measurements ran in this "
                     "session against samples stored by another, so a machine that drifted since then looks the same; "
                     "the baseline's artifact in the artifact store (--sme2-artifact-dir) gives a same-session "
                     "comparison that can")
    return replace(pooled, attempts=2, explanation=(*pooled.explanation, *extra))
