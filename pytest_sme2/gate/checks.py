"""The gate's checks: each judges one thing of a measurement and returns a :class:`~pytest_sme2.gate.verdict.Check`.

The end-to-end check (:func:`compare_e2e`) and every other relative check are judged by the comparison's rule
(:class:`~pytest_sme2.gate.rule.ComparisonRule`); budgets and the SME2 speedup are absolute. Pure functions, no I/O.

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
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from pytest_sme2.evidence.categories import CATEGORIES
from pytest_sme2.evidence.kernels import KernelLog, isa_suffix
from pytest_sme2.evidence.numerics import NumericsComparison
from pytest_sme2.evidence.sme import TraceEvidence
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
from pytest_sme2.gate.verdict import Check, Comparison, GateConfig, Samples, Status
from pytest_sme2.units import fixed, fmt_change, fmt_interval

#: Categories below this share of the reference E2E median are below XNNPACK's 1 µs resolution for
#: small models; a gated category is judged as if it were this large (so 0 ms -> 0.03 ms is visible).
MIN_CATEGORY_SHARE = 0.02
#: XNNPACK's operator events are whole microseconds (checked on every recorded trace: every delegated event's
#: duration is a multiple of 1 µs, portable ones are not), so a category of n delegated operators moves by a
#: tick per operator between runs with nothing changed. A category's allowance is at least this many ticks per
#: delegated operator of the category: a 1 µs category that reads 2 µs is not a 100 % regression.
TICK_MS = 0.001
TICKS_PER_OPERATOR = 2


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



# ------------------------------------------------------------------------------------------ checks


def _design_text(effect: BlockEffect) -> str:
    return f", paired over {effect.baseline_blocks} interleaved rounds" if effect.paired else ""


def _ratio_text(iv: Interval) -> str:
    return fmt_interval(iv.estimate, iv.low, iv.high, fmt_change, level=_ci(iv))


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
                     f"{head} ({fmt_change(cand_med / ref_med)}); not judged: {effect.reason}", margin=margin,
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
    change = fmt_interval(iv.estimate, iv.low, iv.high, fixed(4, signed=True), level=_ci(iv), unit=" ms",
                          note=_design_text(effect))
    where = f"{head}, change {change}, allowed +{allowance:.4f} ms ({basis})"
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
    p_ms = fmt_interval(estimate, iv.low, iv.high, fixed(4), level=f"95% CI of the blocks' p{quantile:.0f}", unit=" ms")
    where = f"p{quantile:.0f} {p_ms} vs budget {budget:.4f} ms"
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
        ratio = (f"SME2 off/on ratio {fmt_interval(iv.estimate, iv.low, iv.high, level='95% CI')}" if iv is not None
                 else f"SME2 off/on ratio {estimate:.2f}x ({effect.reason})")
        required = f"; min_speedup {config.min_speedup:.2f}x applies on a device" if config.min_speedup else ""
        return Check(name, Status.INCONCLUSIVE, f"not a device: not gated. The emulated {ratio} is of emulated time, "
                     f"not device time (QEMU emulates SME more slowly than NEON){required}", interval=iv,
                     advisory=True, baseline=off.median_ms, candidate=on.median_ms)
    if effect.interval is None:
        return Check(name, Status.INCONCLUSIVE, f"speedup {estimate:.2f}x; not judged: {effect.reason}",
                     advisory=config.min_speedup is None, baseline=off.median_ms, candidate=on.median_ms)
    iv = effect.interval
    where = f"speedup {fmt_interval(iv.estimate, iv.low, iv.high, level=_ci(iv), note=_design_text(effect))}"
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
