"""The regression gate: samples in, verdict out. Pure functions, no pytest, no I/O.

Verdicts are ``pass``, ``regression``, ``improvement``, ``inconclusive`` and ``invalid``
(see ``docs``/README and ``../notes/statistics.md`` for the method):

- the effect is the ratio of medians, candidate / baseline, with a percentile-bootstrap 95 % CI;
- regression: the whole CI lies above ``1 + margin`` *and* a Mann-Whitney U test agrees (p < alpha);
- improvement: the whole CI lies below ``1 - margin`` (a pass that hints at refreshing the baseline);
- pass: the CI's upper bound lies below ``1 + margin``;
- otherwise inconclusive. A regression is confirmed by one fresh measurement before it counts;
  an inconclusive result is re-measured once with the samples pooled.
- "could not measure" (thermal throttling, no samples) is ``invalid``, never ``regression``.

Category checks use the per-run category totals, with Benjamini-Hochberg across categories; they are
advisory (they explain, they do not fail) unless the category has its own threshold.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

import numpy as np

from .categories import CATEGORIES
from .stats import (
    BOOTSTRAP_RESAMPLES,
    Interval,
    benjamini_hochberg,
    block_ratio_ci,
    mann_whitney_p,
    median_ci,
    min_mann_whitney_p,
    ratio_of_medians_ci,
)

SCHEMA_VERSION = 1
#: Categories below this share of baseline E2E are too small to judge (1 us resolution of XNNPACK).
MIN_CATEGORY_SHARE = 0.02


class Status(str, Enum):
    PASS = "pass"
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    INCONCLUSIVE = "inconclusive"
    INVALID = "invalid"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class GateConfig:
    """How strict the gate is. ``margin`` is relative (0.05 = 5 %)."""

    margin: float = 0.05
    confidence: float = 0.95
    alpha: float = 0.01
    resamples: int = BOOTSTRAP_RESAMPLES
    #: inconclusive fails the test in strict mode
    strict: bool = False
    #: per-category margins (relative); a category listed here is gated, not advisory
    category_margins: Mapping[str, float] = field(default_factory=dict)
    p50_ms: float | None = None
    p90_ms: float | None = None
    #: minimum SME2 speedup median(off)/median(on), judged on the CI's lower bound
    min_speedup: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "margin": self.margin, "confidence": self.confidence, "alpha": self.alpha,
            "resamples": self.resamples, "strict": self.strict,
            "category_margins": dict(self.category_margins), "p50_ms": self.p50_ms,
            "p90_ms": self.p90_ms, "min_speedup": self.min_speedup,
        }


@dataclass(frozen=True)
class Samples:
    """What the gate compares for one arm: measured E2E samples and, optionally, per-run categories."""

    e2e_ms: tuple[float, ...]
    category_per_run_ms: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    #: "" when valid; otherwise why these samples cannot be trusted (e.g. thermal throttling)
    invalid_reason: str = ""
    #: runs per block (runner process), in order; () = unknown, the runs are then resampled alone
    block_sizes: tuple[int, ...] = ()

    def blocks_of(self, values: Sequence[float]) -> tuple[int, ...]:
        """The block sizes, when ``values`` are per-run values of these runs (E2E or a category)."""
        return self.block_sizes if sum(self.block_sizes) == len(values) else ()

    @property
    def has_categories(self) -> bool:
        return bool(self.category_per_run_ms) and any(
            any(v) for c, v in self.category_per_run_ms.items() if c != "Other"
        )

    def pooled(self, other: Samples) -> Samples:
        cats = {
            c: tuple(self.category_per_run_ms.get(c, ())) + tuple(other.category_per_run_ms.get(c, ()))
            for c in set(self.category_per_run_ms) | set(other.category_per_run_ms)
        }
        reason = self.invalid_reason or other.invalid_reason
        # Two measurements are at least two blocks, even when one of them did not say how it was cut.
        blocks = (self.block_sizes or (len(self.e2e_ms),)) + (other.block_sizes or (len(other.e2e_ms),))
        return Samples(self.e2e_ms + other.e2e_ms, cats, reason, blocks)


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
        if self.interval is None:
            return None
        return (self.interval.estimate - 1) * 100

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
    """The outcome for one test: an overall status, the checks behind it, and what explains it."""

    status: Status
    checks: tuple[Check, ...]
    explanation: tuple[str, ...] = ()
    attempts: int = 1
    strict: bool = False

    @property
    def failed(self) -> bool:
        """Does this verdict fail the test? Regressions always; inconclusive in strict mode."""
        return self.status is Status.REGRESSION or (self.strict and self.status is Status.INCONCLUSIVE)

    @property
    def e2e(self) -> Check | None:
        return next((c for c in self.checks if c.name == "e2e"), None)

    def summary(self) -> str:
        """A multi-line message: what regressed, by how much, the interval, and the explanation."""
        lines = []
        for c in self.checks:
            if c.advisory and c.status in (Status.PASS, Status.INCONCLUSIVE):
                continue
            lines.append(f"[{c.status.value}] {c.name}: {c.message}")
        lines.extend(self.explanation)
        if self.attempts > 1:
            lines.append(f"(measured {self.attempts} times: a regression must be confirmed by a fresh measurement)")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION, "status": self.status.value,
            "checks": [c.to_dict() for c in self.checks], "explanation": list(self.explanation),
            "attempts": self.attempts, "strict": self.strict,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Verdict:
        return cls(
            status=Status(d["status"]), checks=tuple(Check.from_dict(c) for c in d["checks"]),
            explanation=tuple(d.get("explanation", ())), attempts=int(d.get("attempts", 1)),
            strict=bool(d.get("strict", False)),
        )


def _fmt_interval(iv: Interval) -> str:
    return f"{(iv.estimate - 1) * 100:+.1f}% (95% CI {(iv.low - 1) * 100:+.1f}% .. {(iv.high - 1) * 100:+.1f}%)"


def compare_samples(
    name: str,
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    margin: float,
    config: GateConfig,
    advisory: bool = False,
    p_value: float | None = None,
    baseline_blocks: Sequence[int] = (),
    candidate_blocks: Sequence[int] = (),
) -> Check:
    """Judge the ratio ``candidate / baseline`` against the margin (non-inferiority).

    The interval is the exact Hodges-Lehmann interval from block medians and the rank test is the
    exact Mann-Whitney test on the same block medians (:func:`pytest_sme2.stats.block_ratio_ci`):
    blocks, not runs, are the independent units. The headline number is
    ``median(candidate runs) / median(baseline runs)``. With ``m = margin``:

    - regression: the interval's lower bound is above ``1 + m`` and the rank test agrees (p < alpha);
    - improvement: its upper bound is below ``1 - m``;
    - pass: its upper bound is below ``1 + m`` (not slower by the margin; a large *speed-up* whose
      interval does not clear ``1 - m`` is still a pass);
    - inconclusive: the interval reaches above ``1 + m`` without lying wholly above it, or there are
      too few blocks for an interval at the asked confidence (unknown block sizes count as one).
    """
    a = np.asarray(baseline, dtype=float)
    b = np.asarray(candidate, dtype=float)
    if a.size == 0 or b.size == 0:
        return Check(name, Status.INVALID, "no samples to compare", margin=margin, advisory=advisory)
    if np.median(a) <= 0:
        return Check(name, Status.INCONCLUSIVE, "baseline median is 0: below the timer resolution",
                     margin=margin, advisory=True)
    effect = block_ratio_ci(a, b, baseline_blocks=baseline_blocks, candidate_blocks=candidate_blocks,
                            confidence=config.confidence)
    p = effect.p_value if p_value is None else p_value
    # A caller's p (categories: adjusted across categories) is named for what it is not known to be.
    test = "rank test on block medians" if p_value is None else "rank test (given)"
    base_med, cand_med = float(np.median(a)), float(np.median(b))
    limit = f"+{margin * 100:.1f}%"
    iv = effect.interval
    if iv is None:
        return Check(name, Status.INCONCLUSIVE,
                     f"no {config.confidence:.0%} interval, {effect.reason}: median {base_med:.4f} -> "
                     f"{cand_med:.4f} ms ({(effect.estimate - 1) * 100:+.1f}%), margin {limit}",
                     margin=margin, p_value=p, baseline=base_med, candidate=cand_med, advisory=advisory)
    where = f"median {base_med:.4f} -> {cand_med:.4f} ms, {_fmt_interval(iv)}"
    reachable = min_mann_whitney_p(effect.baseline_blocks, effect.candidate_blocks) < config.alpha
    if iv.low > 1 + margin:
        if p < config.alpha:
            status, msg = Status.REGRESSION, (
                f"slower by more than the {limit} margin (lower bound above it): {where}, "
                f"{test} p={p:.2g}")
        else:
            why = (f"{effect.baseline_blocks} vs {effect.candidate_blocks} blocks cannot reach p < {config.alpha:g}"
                   if not reachable else f"the {test} disagrees (p={p:.2g})")
            status, msg = Status.INCONCLUSIVE, f"looks slower than the {limit} margin but {why}: {where}"
    elif iv.high < 1 - margin:
        status, msg = Status.IMPROVEMENT, (
            f"faster by more than {margin * 100:.1f}% (upper bound below -{margin * 100:.1f}%): {where}; "
            "consider refreshing the baseline")
    elif iv.high < 1 + margin:
        status, msg = Status.PASS, f"not slower by the {limit} margin (upper bound below it): {where}"
    else:
        status, msg = Status.INCONCLUSIVE, (
            f"the interval reaches past the {limit} margin without lying above it: {where}; a pass needs the "
            "upper bound below the margin: more blocks, a larger margin, or a quieter device"
        )
    return Check(name, status, msg, interval=iv, margin=margin, p_value=p, baseline=base_med,
                 candidate=cand_med, advisory=advisory)


def _category_checks(baseline: Samples, candidate: Samples, config: GateConfig) -> list[Check]:
    if not (baseline.has_categories and candidate.has_categories):
        return []
    base_e2e = float(np.median(baseline.e2e_ms))
    eligible = []
    for cat in CATEGORIES:
        a = baseline.category_per_run_ms.get(cat, ())
        b = candidate.category_per_run_ms.get(cat, ())
        if not a or not b:
            continue
        if float(np.median(a)) < MIN_CATEGORY_SHARE * base_e2e and cat not in config.category_margins:
            continue
        eligible.append((cat, a, b))
    adjusted = benjamini_hochberg([mann_whitney_p(a, b) for _, a, b in eligible])
    checks = []
    for (cat, a, b), p in zip(eligible, adjusted, strict=True):
        own = cat in config.category_margins
        margin = config.category_margins[cat] if own else config.margin
        checks.append(compare_samples(f"category:{cat}", a, b, margin=margin, config=config,
                                      advisory=not own, p_value=p, baseline_blocks=baseline.blocks_of(a),
                                      candidate_blocks=candidate.blocks_of(b)))
    return checks


def _budget_check(name: str, samples: Sequence[float], budget: float, quantile: float,
                  config: GateConfig) -> Check:
    iv = median_ci(samples, quantile=quantile, confidence=config.confidence, resamples=config.resamples)
    where = f"p{quantile:.0f} {iv.estimate:.4f} ms (95% CI {iv.low:.4f} .. {iv.high:.4f}) vs budget {budget:.4f} ms"
    if iv.low > budget:
        status = Status.REGRESSION
    elif iv.high <= budget:
        status = Status.PASS
    else:
        status = Status.INCONCLUSIVE
    return Check(name, status, where, interval=iv, candidate=iv.estimate, baseline=budget)


def speedup_check(off: Sequence[float], on: Sequence[float], *, min_speedup: float | None,
                  config: GateConfig, off_blocks: Sequence[int] = (), on_blocks: Sequence[int] = ()) -> Check:
    """SME2 speedup median(off)/median(on) with its CI; judged on the lower bound when required."""
    iv = ratio_of_medians_ci(on, off, confidence=config.confidence, resamples=config.resamples,
                             baseline_blocks=on_blocks, candidate_blocks=off_blocks)
    where = f"speedup {iv.estimate:.2f}x (95% CI {iv.low:.2f}x .. {iv.high:.2f}x)"
    if min_speedup is None:
        return Check("speedup", Status.PASS, where, interval=iv, advisory=True)
    where += f", required >= {min_speedup:.2f}x"
    if iv.low >= min_speedup:
        status = Status.PASS
    elif iv.high < min_speedup:
        status = Status.REGRESSION
    else:
        status = Status.INCONCLUSIVE
    return Check("min_speedup", status, where, interval=iv, margin=min_speedup)


def explain(baseline: Samples, candidate: Samples) -> tuple[str, ...]:
    """Which categories account for the change in median E2E (ms and share of the change)."""
    if not (baseline.has_categories and candidate.has_categories):
        return ("operator categories: unavailable (no per-operator trace in one of the runs; "
                "the local runtime has no event tracer — use --sme2-device=host/android with a "
                "tracer-enabled executor_runner to see them)",)
    # Means, not medians: category means add up to the mean E2E exactly, so the parts sum to 100 %.
    delta_e2e = float(np.mean(candidate.e2e_ms) - np.mean(baseline.e2e_ms))
    rows = []
    for cat in CATEGORIES:
        a = baseline.category_per_run_ms.get(cat, ())
        b = candidate.category_per_run_ms.get(cat, ())
        if a and b:
            rows.append((cat, float(np.mean(b) - np.mean(a)), float(np.mean(a)), float(np.mean(b))))
    rows.sort(key=lambda r: -abs(r[1]))
    if not rows:
        return ()
    parts = []
    for cat, d, before, after in rows:
        share = f", {d / delta_e2e * 100:.0f}% of the change" if delta_e2e and math.isfinite(delta_e2e) else ""
        parts.append(f"{cat} {before:.3f} -> {after:.3f} ms ({d:+.3f}{share})")
    return ("categories explaining the change: " + "; ".join(parts),)


def gate(baseline: Samples, candidate: Samples, config: GateConfig) -> Verdict:
    """One comparison of candidate vs baseline, with every check the config asks for."""
    reason = candidate.invalid_reason or baseline.invalid_reason
    if reason:
        check = Check("validity", Status.INVALID, reason)
        return Verdict(Status.INVALID, (check,), strict=config.strict)
    checks = [compare_samples("e2e", baseline.e2e_ms, candidate.e2e_ms, margin=config.margin, config=config,
                              baseline_blocks=baseline.blocks_of(baseline.e2e_ms),
                              candidate_blocks=candidate.blocks_of(candidate.e2e_ms))]
    checks += _category_checks(baseline, candidate, config)
    if config.p50_ms is not None:
        checks.append(_budget_check("p50_budget", candidate.e2e_ms, config.p50_ms, 50, config))
    if config.p90_ms is not None:
        checks.append(_budget_check("p90_budget", candidate.e2e_ms, config.p90_ms, 90, config))
    return Verdict(_overall(checks), tuple(checks), explain(baseline, candidate), strict=config.strict)


def _overall(checks: Sequence[Check]) -> Status:
    gating = [c for c in checks if not c.advisory]
    statuses = {c.status for c in gating}
    for s in (Status.INVALID, Status.REGRESSION, Status.INCONCLUSIVE):
        if s in statuses:
            return s
    e2e = next((c for c in checks if c.name == "e2e"), None)
    if e2e is not None and e2e.status is Status.IMPROVEMENT:
        return Status.IMPROVEMENT
    return Status.PASS


def gate_confirmed(
    baseline: Samples,
    measure: Callable[[], Samples],
    config: GateConfig,
    *,
    first: Samples | None = None,
    confirm: bool = True,
) -> tuple[Verdict, Samples]:
    """Gate, and re-measure once when the first verdict is a regression or inconclusive.

    A regression stands only if an independent second measurement is also a regression (if they
    disagree the result is inconclusive). An inconclusive first result is re-judged on the pooled
    samples of both measurements. Returns the final verdict and the candidate samples it used.
    """
    cand = first if first is not None else measure()
    verdict = gate(baseline, cand, config)
    if not confirm or verdict.status not in (Status.REGRESSION, Status.INCONCLUSIVE):
        return verdict, cand
    second = measure()
    if verdict.status is Status.REGRESSION:
        again = gate(baseline, second, config)
        if again.status is Status.REGRESSION:
            return replace(again, attempts=2), second
        note = (f"first measurement said regression, the confirming one said {again.status.value}: "
                "not confirmed")
        checks = (*again.checks, Check("confirmation", Status.INCONCLUSIVE, note))
        return Verdict(Status.INCONCLUSIVE, checks, again.explanation, attempts=2, strict=config.strict), second
    pooled = cand.pooled(second)
    return replace(gate(baseline, pooled, config), attempts=2), pooled
