"""Next steps derived from one measurement: what to fix first, and the numbers that say so.

:func:`recommend` reads an analysis (and, when there is one, the SME2-off arm, the on/off
comparison and the verdict) and returns :class:`Recommendation` values, most urgent first. Each
names the operator, category or build it is about; the sentence keeps identifiers in backticks,
which the markdown report shows as code and the HTML report turns into ``<code>``.

This is analysis, not presentation: the reports only choose how many to show and how.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_sme2.analysis.run import BOTTLENECK_SHARE, Analysis, OperatorDetail
from pytest_sme2.evidence.categories import CONVOLUTION, DATA_MOVEMENT, GEMM
from pytest_sme2.gate.verdict import Check, Status, Verdict
from pytest_sme2.units import fmt_change, fmt_interval, fmt_ms, fmt_pct, fmt_x

if TYPE_CHECKING:
    from pytest_sme2.analysis.onoff import OnOffComparison

#: What a recommendation is about (``Recommendation.topic``).
REGRESSION = "regression"
INVALID = "invalid"
INCONCLUSIVE = "inconclusive"
IMPROVEMENT = "improvement"
SPEEDUP_NOT_MET = "speedup-not-met"
NO_SME2_KERNEL = "no-sme2-kernel"
NO_KERNEL_LOG = "no-kernel-log"
MATRIX_NOT_ACCELERATED = "matrix-not-accelerated"
PORTABLE_OPERATOR = "portable-operator"
PORTABLE_TOTAL = "portable-total"
DATA_MOVEMENT_SHARE = "data-movement"
DOMINANT_OPERATOR = "dominant-operator"
E2E_ONLY = "e2e-only"
NOISY = "noisy"
NOTHING = "nothing"


@dataclass(frozen=True)
class Recommendation:
    """One next step: how urgent (0 first), what it is about, and the sentence a reader sees."""

    priority: int
    topic: str
    #: the operator, category or build the step names ("" when it is about the whole measurement)
    subject: str
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"priority": self.priority, "topic": self.topic, "subject": self.subject, "text": self.text}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Recommendation:
        return cls(int(d["priority"]), str(d["topic"]), str(d.get("subject", "")), str(d["text"]))


def _code(name: str) -> str:
    return f"`{name}`"


def _top_of(analysis: Analysis, category: str, n: int = 3) -> list[OperatorDetail]:
    return [o for o in analysis.operator_details if o.category == category][:n]


def _op_list(ops: Sequence[OperatorDetail]) -> str:
    return ", ".join(f"{_code(o.name)} ({fmt_ms(o.total_ms)} ms, {fmt_pct(o.share)})" for o in ops)


def _delta(check: Check | None) -> str:
    """``+2.3% (CI -0.4% .. +4.8%)``: the change of the median against the baseline, or ``—``."""
    iv = check.interval if check is not None else None
    if iv is None:
        return "—"
    return fmt_interval(iv.estimate, iv.low, iv.high, fmt_change, level="CI")


def _from_verdict(verdict: Verdict, analysis: Analysis | None) -> list[Recommendation]:
    e2e = verdict.e2e
    if verdict.status is Status.REGRESSION and e2e is not None:
        why = "; ".join(verdict.explanation) or "no per-category explanation available"
        return [Recommendation(0, REGRESSION, "e2e", (
            f"E2E latency regressed {_delta(e2e)} against the baseline. {why[:1].upper() + why[1:]}. "
            "Bisect the change with this test; if the slowdown is intended, accept it with --sme2-update-baseline."))]
    if verdict.status is Status.INVALID:
        why = "; ".join(c.message for c in verdict.checks if c.status is Status.INVALID)
        return [Recommendation(0, INVALID, "", (
            f"The measurement is invalid ({why}): fix the device state and measure again before reading any number "
            "in this report."))]
    if verdict.status is Status.INCONCLUSIVE:
        noisy = f" (CV {analysis.e2e.cv:.1%})" if analysis else ""
        return [Recommendation(1, INCONCLUSIVE, "e2e", (
            f"The comparison with the baseline is inconclusive{noisy}: the 95% interval ({_delta(e2e)}) straddles "
            "the margin. Measure more runs or blocks, use a quieter device, or widen the margin above this device's "
            "noise."))]
    if verdict.status is Status.IMPROVEMENT:
        return [Recommendation(6, IMPROVEMENT, "e2e", (
            f"E2E improved {_delta(e2e)} against the baseline: refresh it (--sme2-update-baseline) so later "
            "regressions are judged against the faster number."))]
    return []


def _from_comparison(cmp: OnOffComparison, analysis: Analysis | None) -> list[Recommendation]:
    out = []
    on_label, off_label = cmp.on_label, cmp.off_label
    if not cmp.speedup_check.advisory and cmp.speedup_check.status is not Status.PASS:
        out.append(Recommendation(0, SPEEDUP_NOT_MET, on_label,
                                  f"The SME2 speedup requirement is not met: {cmp.speedup_check.message}."))
    ev = cmp.kernels
    if ev is not None and ev.sme2_missing:
        isas_on = list(ev.isas("on"))
        extra = [i for i in isas_on if i not in ev.isas("off")] if ev.off is not None else []
        source = f"; the difference comes from the {', '.join(extra)} kernels only {on_label} selected" if extra else ""
        out.append(Recommendation(1, NO_SME2_KERNEL, on_label, (
            f"{on_label}'s XNNPACK log names no SME2 kernel (its kernels target {', '.join(isas_on[:5])}), so its "
            f"{fmt_x(cmp.speedup.estimate)} speedup is not SME2's{source}. On an SME2 device, build the runner with "
            "XNNPACK's SME2 kernels enabled and check that the CPU reports `sme2` (/proc/cpuinfo Features).")))
    elif (ev is None or ev.on is None) and not cmp.other_kernel_evidence:
        out.append(Recommendation(7, NO_KERNEL_LOG, on_label, (
            f"Record an XNNPACK debug log of {on_label} (a runner built with XNNPACK logging) to confirm which "
            "kernels ran; without it SME2 use is not proven.")))
    # Emulated time says nothing of which category a device speeds up: no acceleration advice from it.
    for cat in () if cmp.emulated else (CONVOLUTION, GEMM):
        c = cmp.category(cat)
        if c is not None and c.resolvable and c.off_share >= 0.10 and c.speedup < 1.5 and analysis is not None:
            out.append(Recommendation(2, MATRIX_NOT_ACCELERATED, cat, (
                f"{cat} sped up only {fmt_x(c.speedup)} ({fmt_ms(c.off_ms)} → {fmt_ms(c.on_ms)} ms per run) although "
                f"it was {fmt_pct(c.off_share)} of E2E with {off_label}: check that these operators are delegated and "
                f"use SME2 kernels — {_op_list(_top_of(analysis, cat))}.")))
    return out


def _from_operators(a: Analysis, off: Analysis | None, off_label: str) -> list[Recommendation]:
    out = []
    off_ops = {o.name: o for o in off.operator_details} if off is not None else {}
    portable = [o for o in a.operator_details if o.backend == "portable"]
    big = [o for o in portable if o.share > BOTTLENECK_SHARE]
    for o in big:
        before = off_ops.get(o.name)
        grew = (f", up from {fmt_pct(before.share)} with {off_label}: SME2 does not reach portable operators, so "
                "their share grows" if before is not None and o.share > before.share else "")
        out.append(Recommendation(2, PORTABLE_OPERATOR, o.name, (
            f"{_code(o.name)} runs on the portable kernels at {fmt_pct(o.share)} of E2E ({fmt_ms(o.total_ms)} ms per "
            f"run, {o.count:g} calls){grew}. Delegate it: check whether XNNPACK supports this operator, or change the "
            "model so the partitioner can take it.")))
    share_portable = a.portable_ms / a.e2e.mean if a.e2e.mean > 0 else 0.0
    if not big and share_portable > 0.10:
        out.append(Recommendation(3, PORTABLE_TOTAL, "portable", (
            f"Portable operators together take {fmt_pct(share_portable)} of E2E ({fmt_ms(a.portable_ms)} ms per run): "
            f"{_op_list(portable[:4])}. Delegating them is the cheapest win left.")))
    dm_share = a.category_share.get(DATA_MOVEMENT, 0.0)
    if dm_share >= 0.10 or (a.dominant_category == DATA_MOVEMENT and dm_share > BOTTLENECK_SHARE):
        out.append(Recommendation(3, DATA_MOVEMENT_SHARE, DATA_MOVEMENT, (
            f"Data Movement is {fmt_pct(dm_share)} of E2E ({fmt_ms(a.category_totals_ms[DATA_MOVEMENT])} ms per run), "
            f"led by {_op_list(_top_of(a, DATA_MOVEMENT))}. Remove layout churn: keep tensors channels-last between "
            "operators, fold transposes/permutes into the weights, and drop copies the graph does not need.")))
    top = a.operator_details[0] if a.operator_details else None
    if top is not None and top.share >= 0.40:
        kernel = f", kernel `{top.kernel_hint}`" if top.kernel_hint else ""
        if top.category in (GEMM, CONVOLUTION):
            lever = ("the next gains come from cheaper matrix math: a quantized variant (int8 or fp16 kernels), "
                     "fewer or narrower layers, or more threads")
        elif top.category == DATA_MOVEMENT:
            lever = "remove the layout conversions it performs"
        else:
            lever = "check whether a delegated or fused equivalent exists"
        out.append(Recommendation(4, DOMINANT_OPERATOR, top.name, (
            f"{_code(top.name)} alone is {fmt_pct(top.share)} of E2E ({fmt_ms(top.total_ms)} ms per run, "
            f"{top.count:g} calls{kernel}): the model is bound by this {top.category} operator; {lever}.")))
    return out


def _no_kernel_log(a: Analysis) -> Recommendation:
    """Ask for an XNNPACK log, saying what the trace's operator names already show (never SME2 from a QP8 name)."""
    ev = a.trace_evidence
    if ev is not None and ev.has_sme:
        return Recommendation(8, NO_KERNEL_LOG, "", (
            f"The trace's operator names already show XNNPACK's SME path ({ev.summary()}); an XNNPACK kernel log "
            "(a runner built with XNNPACK logging) would name the kernels, SME or SME2."))
    if ev is not None and ev.undetermined:
        return Recommendation(7, NO_KERNEL_LOG, "", (
            f"The trace cannot tell whether SME2 ran: {ev.summary()}. Record an XNNPACK kernel log (a runner built "
            "with XNNPACK logging) to see which kernels ran."))
    return Recommendation(7, NO_KERNEL_LOG, "", (
        "No XNNPACK kernel log: record one (a runner built with XNNPACK logging) to see which kernels ran and "
        "whether any is SME2."))


def recommend(
    analysis: Analysis | None,
    *,
    off: Analysis | None = None,
    comparison: OnOffComparison | None = None,
    verdict: Verdict | None = None,
) -> tuple[Recommendation, ...]:
    """Specific next steps for one measurement, most urgent first (stable within a priority).

    ``analysis`` is the measurement (the SME2-on arm of an on/off test), ``off`` the SME2-off arm,
    ``comparison`` their on/off comparison and ``verdict`` the judgement against a baseline; any of
    them may be missing (a verdict-only result has no analysis). There is at least one when anything was measured or
    judged; none for a test that measured nothing (skipped), whose "nothing to act on, the measurement is stable"
    would speak of a measurement that never ran.
    """
    if analysis is None and off is None and comparison is None and verdict is None:
        return ()
    a, cmp = analysis, comparison
    off_label = cmp.off_label if cmp else "SME2 off"
    recs: list[Recommendation] = []
    if verdict is not None:
        recs += _from_verdict(verdict, a)
    if cmp is not None:
        recs += _from_comparison(cmp, a)
    elif a is not None and a.per_operator and a.kernel_log is None:
        recs.append(_no_kernel_log(a))
    if a is not None and a.per_operator:
        recs += _from_operators(a, off, off_label)
    elif a is not None:
        recs.append(Recommendation(3, E2E_ONLY, "", (
            "Only end-to-end latency was recorded (no per-operator trace), so categories, bottlenecks and kernels are "
            "unknown: use a tracer-enabled executor_runner (--sme2-device=host or android) to see them.")))
    arms = [(cmp.off_label if cmp else off_label, off), (cmp.on_label if cmp else "measured", a)]
    for label, arm in arms:
        if arm is None:
            continue
        s = arm.e2e
        if math.isfinite(s.cv) and s.cv > 0.10:
            who = label if cmp is not None else "measured"
            recs.append(Recommendation(5, NOISY, who, (
                f"The {who} runs are noisy (CV {s.cv:.1%}; max {fmt_ms(s.max)} vs median {fmt_ms(s.median)} ms): pin "
                "the runner to the big cores, let the device cool down, and use more runs or blocks before trusting "
                f"differences below {max(5, round(s.cv * 100))}%.")))
    if not recs:
        recs.append(Recommendation(9, NOTHING, "", (
            "Nothing to act on: no bottleneck above 5% of E2E stands out and the measurement is stable.")))
    return tuple(sorted(recs, key=lambda r: r.priority))
