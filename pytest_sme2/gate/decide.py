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


The values are :mod:`pytest_sme2.gate.verdict`, the checks :mod:`pytest_sme2.gate.checks`; this module runs the checks
on one measurement (:func:`gate`) and decides, measuring once more when the first is not settled (:func:`decide`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from pytest_sme2.gate.checks import (
    EVIDENCE_CHECKS,
    Sme2Evidence,
    budget_check,
    category_checks,
    compare_e2e,
    explain,
    sme2_kernel_checks,
    speedup_check,
)
from pytest_sme2.gate.verdict import VALIDITY, Check, Comparison, GateConfig, Samples, Status, Verdict, overall


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
