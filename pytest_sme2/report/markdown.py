"""The markdown report: the seeds' ``generate_report`` sections, filled from a results document.

Per test: metadata; latency comparison (median, mean, min, max, std, p90, cold, speedup); the
operator category breakdown with category speedups and the bottleneck shift; bottlenecks above 5 %
of E2E; acceleration analysis (top accelerated and not accelerated operators); portable vs
delegated; top operators; kernel insights (kernel table, SME2 evidence, the two builds side by
side); the regression verdict; and recommendations derived from the numbers above.

Each section adapts to what the test holds: an SME2 on/off pair, a measurement judged against a
baseline, a single profile, or a verdict alone. :func:`render_combined` puts several sessions
(devices) side by side for ``pytest-sme2 report --combine``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..analysis import BOTTLENECK_SHARE, Analysis, OperatorDetail
from ..categories import CATEGORIES, CONVOLUTION, DATA_MOVEMENT, GEMM, OTHER
from ..gate import Status
from ..stats import LatencyStats, summarize
from .comparison import NOT_ACCELERATED
from .kernel_view import kernel_log_from_dict, kernel_table_markdown, side_by_side_markdown
from .results import (
    BASELINE_WRITTEN,
    FAILED,
    MEASURED,
    STATUS_ICONS,
    STATUS_ORDER,
    SessionResults,
    TestResult,
    delta_text,
    speedup_text,
)

#: What the seeds expect SME2 to do to matrix compute (generate_report: "GEMM and Convolution
#: should show 3-15x speedup with SME2").
EXPECTED_MATRIX_SPEEDUP = 3.0
TOP_OPERATORS = 10


# ------------------------------------------------------------------------------------ formatting


def fmt_ms(x: float | None) -> str:
    """Milliseconds: 3 decimals, 4 below 0.1 ms (XNNPACK resolves 1 µs), ``—`` when unknown."""
    if x is None or not math.isfinite(x):
        return "—"
    return f"{x:.3f}" if abs(x) >= 0.1 or x == 0 else f"{x:.4f}"


def fmt_pct(share: float | None) -> str:
    """A share (0.082) as ``8.2%``."""
    return "—" if share is None or not math.isfinite(share) else f"{share * 100:.1f}%"


def fmt_x(ratio: float | None) -> str:
    """A ratio as ``2.59×``, ``—`` when unknown."""
    return "—" if ratio is None or not math.isfinite(ratio) else f"{ratio:.2f}×"


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _code(name: str) -> str:
    return f"`{_cell(name)}`"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> list[str]:
    """A markdown table; ``align`` holds one of ``l r c`` per column (default: first left, rest right)."""
    spec = align or "l" + "r" * (len(header) - 1)
    marks = {"l": "---", "r": "---:", "c": ":---:"}
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(marks[a] for a in spec) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def _runs_text(test: TestResult, measured: int, per_arm: str) -> str:
    """How the measured runs were taken: blocks, warm-up left out per block, the cold first run."""
    blocks = test.profile.runs if test.profile is not None else ()
    if not blocks:
        return f"{measured} measured{per_arm}"
    warmup = blocks[0].warmup
    return (f"{measured} measured{per_arm} in {len(blocks)} block(s); the first {warmup} execution(s) of each "
            "block left out as warm-up (the first execution is cold)")


def _h(level: int, text: str) -> list[str]:
    return ["#" * min(level, 6) + " " + text, ""]


_STATUS_NOTES = {
    MEASURED: " (no baseline to judge against)",
    BASELINE_WRITTEN: " (measured and stored as the baseline; not judged)",
    FAILED: " (no verdict: see the note)",
}


def _status_badge(status: str) -> str:
    icon = STATUS_ICONS.get(status, "")
    label = status.replace("-", " ").upper()
    return f"{icon} **{label}**{_STATUS_NOTES.get(status, '')}".strip()


# ------------------------------------------------------------------------------ recommendations


def _arms(test: TestResult) -> list[tuple[str, Analysis]]:
    """``(label, analysis)`` of each measured arm, SME2 off first."""
    cmp = test.comparison
    out = []
    if test.profile_off is not None:
        out.append((cmp.off_label if cmp else "SME2 off", test.profile_off.analysis))
    if test.profile is not None:
        label = cmp.on_label if cmp else (test.profile.variant or "measured")
        out.append((label, test.profile.analysis))
    return out


def _top_of(analysis: Analysis, category: str, n: int = 3) -> list[OperatorDetail]:
    return [o for o in analysis.operator_details if o.category == category][:n]


def _op_list(ops: Sequence[OperatorDetail]) -> str:
    return ", ".join(f"{_code(o.name)} ({fmt_ms(o.total_ms)} ms, {fmt_pct(o.share)})" for o in ops)


def recommendations(test: TestResult) -> list[str]:
    """Specific next steps derived from this test's numbers, most urgent first.

    Each names the operator, category or build it is about and the numbers behind it; the HTML
    section shows the first few.
    """
    recs: list[tuple[int, str]] = []
    a, cmp, verdict = test.analysis, test.comparison, test.verdict
    on_label = cmp.on_label if cmp else "this build"
    off_label = cmp.off_label if cmp else "SME2 off"

    if verdict is not None:
        e2e = verdict.e2e
        if verdict.status is Status.REGRESSION and e2e is not None:
            why = "; ".join(verdict.explanation) or "no per-category explanation available"
            recs.append((0, f"E2E latency regressed {delta_text(test.headline)} against the baseline. "
                            f"{why[:1].upper() + why[1:]}. "
                            "Bisect the change with this test; if the slowdown is intended, accept it with "
                            "--sme2-update-baseline."))
        elif verdict.status is Status.INVALID:
            why = "; ".join(c.message for c in verdict.checks if c.status is Status.INVALID)
            recs.append((0, f"The measurement is invalid ({why}): fix the device state and measure again before "
                            "reading any number in this report."))
        elif verdict.status is Status.INCONCLUSIVE:
            noisy = f" (CV {a.e2e.cv:.1%})" if a else ""
            recs.append((1, f"The comparison with the baseline is inconclusive{noisy}: the 95% interval "
                            f"({delta_text(test.headline)}) straddles the margin. Measure more runs or blocks, use "
                            "a quieter device, or widen the margin above this device's noise."))
        elif verdict.status is Status.IMPROVEMENT:
            recs.append((6, f"E2E improved {delta_text(test.headline)} against the baseline: refresh it "
                            "(--sme2-update-baseline) so later regressions are judged against the faster number."))
    if cmp is not None and not cmp.speedup_check.advisory and cmp.speedup_check.status is not Status.PASS:
        recs.append((0, f"The SME2 speedup requirement is not met: {cmp.speedup_check.message}."))

    if cmp is not None:
        ev = cmp.kernels
        if ev is not None and ev.sme2_missing:
            isas_on = list(ev.isas("on"))
            extra = [i for i in isas_on if i not in ev.isas("off")] if ev.off is not None else []
            source = (f"; the difference comes from the {', '.join(extra)} kernels only {on_label} selected"
                      if extra else "")
            recs.append((1, f"{on_label}'s XNNPACK log names no SME2 kernel (its kernels target "
                            f"{', '.join(isas_on[:5])}), so its {fmt_x(cmp.speedup.estimate)} speedup is not "
                            f"SME2's{source}. On an SME2 device, build the runner with XNNPACK's SME2 kernels "
                            "enabled and check that the CPU reports `sme2` (/proc/cpuinfo Features)."))
        elif ev is None or ev.on is None:
            recs.append((7, f"Record an XNNPACK debug log of {on_label} (a runner built with XNNPACK logging) "
                            "to confirm which kernels ran; without it SME2 use is not proven."))
        for cat in (CONVOLUTION, GEMM):
            c = cmp.category(cat)
            if c is not None and c.resolvable and c.off_share >= 0.10 and c.speedup < 1.5 and a is not None:
                recs.append((2, f"{cat} sped up only {fmt_x(c.speedup)} ({fmt_ms(c.off_ms)} → {fmt_ms(c.on_ms)} ms "
                                f"per run) although it was {fmt_pct(c.off_share)} of E2E with {off_label}: check "
                                f"that these operators are delegated and use SME2 kernels — "
                                f"{_op_list(_top_of(a, cat))}."))
    elif a is not None and a.per_operator and a.kernel_log is None:
        recs.append((7, "No XNNPACK kernel log: record one (a runner built with XNNPACK logging) to see which "
                        "kernels ran and whether any is SME2."))

    if a is not None and a.per_operator:
        off_ops = {o.name: o for o in test.profile_off.analysis.operator_details} if test.profile_off else {}
        portable = [o for o in a.operator_details if o.backend == "portable"]
        big = [o for o in portable if o.share > BOTTLENECK_SHARE]
        for o in big:
            before = off_ops.get(o.name)
            grew = (f", up from {fmt_pct(before.share)} with {off_label}: SME2 does not reach portable operators, so "
                    "their share grows" if before is not None and o.share > before.share else "")
            recs.append((2, f"{_code(o.name)} runs on the portable kernels at {fmt_pct(o.share)} of E2E "
                            f"({fmt_ms(o.total_ms)} ms per run, {o.count:g} calls){grew}. Delegate it: check whether "
                            "XNNPACK supports this operator, or change the model so the partitioner can take it."))
        share_portable = a.portable_ms / a.e2e.mean if a.e2e.mean > 0 else 0.0
        if not big and share_portable > 0.10:
            recs.append((3, f"Portable operators together take {fmt_pct(share_portable)} of E2E "
                            f"({fmt_ms(a.portable_ms)} ms per run): {_op_list(portable[:4])}. Delegating them is the "
                            "cheapest win left."))
        dm_share = a.category_share.get(DATA_MOVEMENT, 0.0)
        if dm_share >= 0.10 or (a.dominant_category == DATA_MOVEMENT and dm_share > BOTTLENECK_SHARE):
            dm_ms = fmt_ms(a.category_totals_ms[DATA_MOVEMENT])
            recs.append((3, f"Data Movement is {fmt_pct(dm_share)} of E2E ({dm_ms} ms per run), led by "
                            f"{_op_list(_top_of(a, DATA_MOVEMENT))}. Remove layout churn: keep tensors "
                            "channels-last between operators, fold transposes/permutes into the weights, and drop "
                            "copies the graph does not need."))
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
            recs.append((4, f"{_code(top.name)} alone is {fmt_pct(top.share)} of E2E ({fmt_ms(top.total_ms)} ms per "
                            f"run, {top.count:g} calls{kernel}): the model is bound by this {top.category} operator; "
                            f"{lever}."))
    elif a is not None:
        recs.append((3, "Only end-to-end latency was recorded (no per-operator trace), so categories, bottlenecks and "
                        "kernels are unknown: use a tracer-enabled executor_runner (--sme2-device=host or android) to "
                        "see them."))

    for arm_label, arm in _arms(test):
        s = arm.e2e
        if math.isfinite(s.cv) and s.cv > 0.10:
            label = arm_label if cmp is not None else "measured"
            recs.append((5, f"The {label} runs are noisy (CV {s.cv:.1%}; max {fmt_ms(s.max)} vs median "
                            f"{fmt_ms(s.median)} ms): pin the runner to the big cores, let the device cool down, and "
                            "use more runs or blocks before trusting differences below "
                            f"{max(5, round(s.cv * 100))}%."))
    if not recs:
        recs.append((9, "Nothing to act on: no bottleneck above 5% of E2E stands out and the measurement is stable."))
    return [text for _, text in sorted(recs, key=lambda r: r[0])]


# ------------------------------------------------------------------------------------- sections


def _device_text(device: Mapping[str, Any], fingerprint: Mapping[str, Any]) -> str:
    src = {**fingerprint, **{k: v for k, v in device.items() if v not in (None, "", [], {})}}
    parts = []
    for key in ("model", "name", "soc", "cpu_model", "arch", "os_version"):
        if src.get(key):
            parts.append(str(src[key]))
    if src.get("cores"):
        parts.append(f"{src['cores']} cores")
    if "sme2" in src and src["sme2"] is not None:
        parts.append("SME2: " + ("yes" if src["sme2"] else "no"))
    return ", ".join(dict.fromkeys(parts)) or "—"


def _metadata(test: TestResult, results: SessionResults | None) -> list[str]:
    info = test.model_info
    rows = [["Test", _code(test.test_id)]]
    if info:
        rows.append(["Model", " · ".join(_cell(info[k]) for k in ("name", "dtype", "backend") if info.get(k))])
        if info.get("pte_path"):
            rows.append(["Program (.pte)", _code(str(info["pte_path"]))])
    a = test.analysis
    if a is not None:
        per_arm = " per arm" if test.profile_off is not None else ""
        rows.append(["Runs", _runs_text(test, a.runs_measured, per_arm)])
    if results is not None:
        config_file = results.environment.get("config_file") or results.config.get("config_file")
        if config_file:
            rows.append(["Config File", _code(str(config_file))])  # the seed greps for this label
        if results.config:
            # Options left unset (None) say nothing about this run; listing them only hides the rest.
            rows.append(["Config", "; ".join(f"{_cell(k)}={_cell(v)}" for k, v in results.config.items()
                                             if k != "config_file" and v not in (None, (), []))])
    cmp = test.comparison
    for p in (test.profile_off, test.profile):
        if p is None:
            continue
        label = p.variant or ""
        if cmp is not None:
            label = cmp.off_label if p is test.profile_off else cmp.on_label
        runner_path = p.fingerprint.get("runner_path") or p.fingerprint.get("runner")
        where = f" ({_code(str(runner_path))})" if runner_path and runner_path != p.runner else ""
        rows.append([f"Runner ({_cell(label)})" if label else "Runner",
                     f"{_cell(p.runner)} · {_cell(p.build) or 'build unknown'}{where} · "
                                                 f"{p.threads} thread{'s' if p.threads != 1 else ''}"])
    if test.profile is not None:
        rows.append(["Device", _cell(_device_text(test.profile.device, test.profile.fingerprint))])
    et = info.get("executorch_version") or (results.environment.get("executorch_version") if results else None)
    rows.append(["ExecuTorch", _cell(et or "unknown")])
    if results is not None and results.created:
        rows.append(["Date (UTC)", _cell(results.created)])
    sources = []
    for _, arm in _arms(test):
        sources.append(_code(arm.source))
        if arm.kernel_log and arm.kernel_log.get("source"):
            sources.append(_code(str(arm.kernel_log["source"])))
    if sources:
        rows.append(["Analyzed", "<br>".join(dict.fromkeys(sources))])
    if test.baseline is not None:
        b = test.baseline
        where = f"{_code(test.baseline_path)}, " if test.baseline_path else ""
        rows.append(["Baseline", f"{where}{len(b.samples_ms)} samples, created {_cell(b.created or 'unknown')}"])
    if test.note:
        rows.append(["Note", _cell(test.note)])
    return _table(["", ""], rows, "ll")


_STAT_ROWS: tuple[tuple[str, str], ...] = (
    ("Median", "median"), ("Mean", "mean"), ("Min", "min"), ("Max", "max"), ("Std dev", "std"),
    ("P90", "p90"), ("P99", "p99"),
)


def _stat(s: LatencyStats, key: str) -> float:
    return float(getattr(s, key))


def _latency(test: TestResult, level: int) -> list[str]:
    out = _h(level, "Latency Comparison" if (test.comparison or test.baseline) else "Latency")
    cmp, a = test.comparison, test.analysis
    if cmp is not None:
        off, on = cmp.off_e2e, cmp.on_e2e
        rows = [[name, fmt_ms(_stat(off, k)), fmt_ms(_stat(on, k)),
                 fmt_x(_stat(off, k) / _stat(on, k)) if _stat(on, k) > 0 else "—"] for name, k in _STAT_ROWS]
        rows.append(["CV", fmt_pct(off.cv), fmt_pct(on.cv), ""])
        rows.append(["Cold (run 0)", fmt_ms(off.cold), fmt_ms(on.cold),
                     fmt_x(off.cold / on.cold) if off.cold and on.cold else "—"])
        rows.append(["Runs measured", str(off.count), str(on.count), ""])
        out += _table(["E2E (ms)", _cell(cmp.off_label), _cell(cmp.on_label), "off / on"], rows)
        iv = cmp.speedup
        out += ["", f"**Speedup: {fmt_x(iv.estimate)}** (95% CI {fmt_x(iv.low)}–{fmt_x(iv.high)}): median "
                f"{_cell(cmp.off_label)} / median {_cell(cmp.on_label)}, percentile bootstrap."]
    elif a is not None:
        s = a.e2e
        if test.baseline is not None:
            b = summarize(test.baseline.samples_ms)
            rows = [[name, fmt_ms(_stat(b, k)), fmt_ms(_stat(s, k)),
                     f"{(_stat(s, k) / _stat(b, k) - 1) * 100:+.1f}%" if _stat(b, k) > 0 else "—"]
                    for name, k in _STAT_ROWS]
            rows.append(["CV", fmt_pct(b.cv), fmt_pct(s.cv), ""])
            rows.append(["Cold (run 0)", "—", fmt_ms(s.cold), ""])
            rows.append(["Runs measured", str(b.count), str(s.count), ""])
            out += _table(["E2E (ms)", "baseline", "current", "change"], rows)
            out += ["", f"**Change of the median: {delta_text(test.headline)}** (95% bootstrap CI of "
                    "median current / median baseline)."]
        else:
            rows = [[name, fmt_ms(_stat(s, k))] for name, k in _STAT_ROWS]
            rows += [["CV", fmt_pct(s.cv)], ["Cold (run 0)", fmt_ms(s.cold)], ["Runs measured", str(s.count)]]
            out += _table(["E2E (ms)", "value"], rows)
    else:
        return []
    out += ["", "_E2E latency is the `Method::execute` duration of each run (never a sum of nested events); the "
            "cold first run is shown but left out of every statistic._"]
    for label, arm in _arms(test):
        s = arm.e2e
        if s.cold is not None and s.median > 0 and s.cold / s.median >= 1.5:
            out.append(f"_{_cell(label)}: the cold run took {fmt_x(s.cold / s.median)} the steady median "
                       "(first-run setup and allocation)._")
    return [*out, ""]


def _categories(test: TestResult, level: int) -> list[str]:
    cmp, a = test.comparison, test.analysis
    if a is None or not a.per_operator:
        if a is not None:
            return [*_h(level, "Operator Category Breakdown"),
                    "_No per-operator trace: every millisecond is counted as Other. Use a tracer-enabled "
                    "executor_runner to see categories._", ""]
        return []
    out = _h(level, "Operator Category Breakdown")
    if cmp is not None and cmp.per_operator:
        rows = []
        for c in cmp.categories:
            ci = (f"{fmt_x(c.speedup)} ({fmt_x(c.speedup_ci.low)}–{fmt_x(c.speedup_ci.high)})"
                  if c.speedup_ci else fmt_x(c.speedup))
            if not c.resolvable and math.isfinite(c.speedup):
                ci += " ¹"
            rows.append([c.category, fmt_ms(c.off_ms), fmt_pct(c.off_share), fmt_ms(c.on_ms), fmt_pct(c.on_share),
                         f"{c.share_change_pp:+.1f}", ci])
        rows.append(["**E2E (mean)**", f"**{fmt_ms(cmp.off_e2e.mean)}**", "100%", f"**{fmt_ms(cmp.on_e2e.mean)}**",
                     "100%", "", fmt_x(cmp.off_e2e.mean / cmp.on_e2e.mean) if cmp.on_e2e.mean > 0 else "—"])
        out += _table(["Category", f"{_cell(cmp.off_label)} ms", "%", f"{_cell(cmp.on_label)} ms", "%",
                       "Δ share (pp)", "speedup (95% CI)"], rows)
        if cmp.shift:
            out += ["", "**Bottleneck shift:** " + " ".join(cmp.shift)]
        if any(not c.resolvable and math.isfinite(c.speedup) for c in cmp.categories):
            out.append("¹ under 2% of E2E in both builds: XNNPACK times operators in whole µs, so this ratio is "
                       "coarse.")
    elif test.baseline is not None and test.baseline.per_operator and test.baseline.category_totals_ms:
        b = test.baseline.category_totals_ms
        b_mean = sum(b.values())
        rows = []
        for cat in CATEGORIES:
            was, now = b.get(cat, 0.0), a.category_totals_ms.get(cat, 0.0)
            rows.append([cat, fmt_ms(was), fmt_pct(was / b_mean if b_mean > 0 else None), fmt_ms(now),
                         fmt_pct(a.category_share.get(cat)), f"{now - was:+.3f}"])
        rows.append(["**E2E (mean)**", f"**{fmt_ms(b_mean)}**", "100%", f"**{fmt_ms(a.e2e.mean)}**", "100%",
                     f"{a.e2e.mean - b_mean:+.3f}"])
        out += _table(["Category", "baseline ms", "%", "current ms", "%", "Δ ms"], rows)
    else:
        rows = [[cat, fmt_ms(a.category_totals_ms.get(cat, 0.0)), fmt_pct(a.category_share.get(cat))]
                for cat in CATEGORIES]
        rows.append(["**E2E (mean)**", f"**{fmt_ms(a.e2e.mean)}**", "100%"])
        out += _table(["Category", "ms per run", "% of E2E"], rows)
    out += ["", f"_Mean per measured run. {OTHER} = E2E − the four named categories: pooling, norms, softmax, "
            "unmatched operators and runtime overhead, so the rows add up to E2E exactly._", ""]
    return out


def _bottlenecks(test: TestResult, level: int) -> list[str]:
    a = test.analysis
    if a is None or not a.per_operator:
        return []
    out = _h(level, f"Bottlenecks (> {BOTTLENECK_SHARE:.0%} of E2E)")
    if not a.bottlenecks:
        return [*out, f"No category or operator above {BOTTLENECK_SHARE:.0%} of E2E.", ""]
    off = test.profile_off.analysis if test.profile_off else None
    off_share: dict[str, float] = {}
    if off is not None:
        off_share.update({o.name: o.share for o in off.operator_details})
        off_share.update(off.category_share)
    rows = []
    for b in sorted(a.bottlenecks, key=lambda b: -b.share):
        row = [b.kind, _code(b.name) if b.kind != "category" else b.name, fmt_ms(b.total_ms), fmt_pct(b.share)]
        if off is not None:
            row.append(fmt_pct(off_share.get(b.name)))
        row.append(_cell(b.advice))
        rows.append(row)
    header = ["kind", "name", "ms per run", "% of E2E"]
    if off is not None and test.comparison is not None:
        header.append(f"% with {_cell(test.comparison.off_label)}")
    header.append("what to look at")
    out += _table(header, rows, "ll" + "r" * (len(header) - 3) + "l")
    return [*out, ""]


def _acceleration(test: TestResult, level: int) -> list[str]:
    cmp = test.comparison
    if cmp is None or not cmp.per_operator:
        return []
    out = _h(level, "Acceleration Analysis")
    for cat in (CONVOLUTION, GEMM):
        c = cmp.category(cat)
        if c is None or c.off_ms <= 0 or not c.resolvable:
            continue
        expect = ("within" if c.speedup >= EXPECTED_MATRIX_SPEEDUP else "below")
        ci = f" (95% CI {fmt_x(c.speedup_ci.low)}–{fmt_x(c.speedup_ci.high)})" if c.speedup_ci else ""
        out.append(f"- **{cat}**: {fmt_x(c.speedup)}{ci}, {fmt_ms(c.off_ms)} → {fmt_ms(c.on_ms)} ms per run — "
                   f"{expect} the {EXPECTED_MATRIX_SPEEDUP:.0f}–15× the SME2 guides expect for matrix compute.")
    for c in cmp.categories:
        if c.category in (CONVOLUTION, GEMM) or not c.resolvable or not math.isfinite(c.speedup):
            continue
        out.append(f"- {c.category}: {fmt_x(c.speedup)}, {fmt_ms(c.off_ms)} → {fmt_ms(c.on_ms)} ms per run.")
    top = cmp.top_accelerated(8)
    if top:
        out += ["", "**Top accelerated operators** (most time saved per run):", ""]
        rows = [[_code(o.name), o.category, fmt_ms(o.off_ms), fmt_ms(o.on_ms), fmt_x(o.speedup), fmt_ms(o.saved_ms),
                 _kernel_change(o.kernel_off, o.kernel_on)] for o in top]
        out += _table(["operator", "category", f"{_cell(cmp.off_label)} ms", f"{_cell(cmp.on_label)} ms", "speedup",
                       "saved ms", "kernel hint (off → on)"], rows, "llrrrrl")
    slow = cmp.not_accelerated()
    out += ["", f"**Not accelerated** (under {NOT_ACCELERATED:.2f}×, at least 1% of E2E with "
            f"{_cell(cmp.on_label)}):", ""]
    if slow:
        rows = [[_code(o.name), o.category, o.backend or "—", fmt_ms(o.off_ms), fmt_ms(o.on_ms), fmt_x(o.speedup),
                 fmt_pct(o.on_share)] for o in slow]
        out += _table(["operator", "category", "backend", f"{_cell(cmp.off_label)} ms", f"{_cell(cmp.on_label)} ms",
                       "speedup", f"% of E2E ({_cell(cmp.on_label)})"], rows, "lllrrrr")
    else:
        out.append("None: every operator above 1% of E2E sped up.")
    if cmp.only_off or cmp.only_on:
        out.append("")
        if cmp.only_off:
            out.append(f"Only in {_cell(cmp.off_label)}: " + ", ".join(_code(n) for n in cmp.only_off) + ".")
        if cmp.only_on:
            out.append(f"Only in {_cell(cmp.on_label)}: " + ", ".join(_code(n) for n in cmp.only_on) + ".")
    return [*out, ""]


def _kernel_change(before: str | None, after: str | None) -> str:
    if not before and not after:
        return "—"
    if before == after:
        return f"{_code(str(after))} (same)"
    return f"{_code(before) if before else '—'} → {_code(after) if after else '—'}"


def _portable(test: TestResult, level: int) -> list[str]:
    arms = [(label, arm) for label, arm in _arms(test) if arm.per_operator]
    if not arms:
        return []
    out = _h(level, "Portable vs Delegated")
    rows = []
    for what, key in (("Delegated (XNNPACK / backend)", "delegated"), ("Portable (not delegated)", "portable"),
                      ("Runtime overhead (E2E − operators)", "overhead")):
        row = [what]
        for _, arm in arms:
            mean = arm.e2e.mean
            ms = {"delegated": arm.delegated_ms, "portable": arm.portable_ms,
                  "overhead": mean - arm.delegated_ms - arm.portable_ms}[key]
            row += [fmt_ms(ms), fmt_pct(ms / mean if mean > 0 else None)]
        rows.append(row)
    header = [""]
    for label, _ in arms:
        header += [f"{_cell(label)} ms", "%"]
    out += _table(header, rows)
    current = arms[-1][1]
    portable = [o for o in current.operator_details if o.backend == "portable"]
    if portable:
        before = {o.name: o for o in arms[0][1].operator_details} if len(arms) > 1 else {}
        rows = []
        for o in portable:
            row = [_code(o.name), o.category, f"{o.count:g}", fmt_ms(o.total_ms), fmt_pct(o.share)]
            if before:
                row.append(fmt_pct(before[o.name].share) if o.name in before else "—")
            rows.append(row)
        header = ["portable operator", "category", "calls/run", "ms per run", f"% of E2E ({_cell(arms[-1][0])})"]
        if before:
            header.append(f"% ({_cell(arms[0][0])})")
        out += ["", *_table(header, rows, "ll" + "r" * (len(header) - 2))]
        heavy = [o for o in portable if o.share > BOTTLENECK_SHARE]
        if heavy:
            out += ["", "Above 5% of E2E on the portable kernels — delegate first: "
                    + ", ".join(f"{_code(o.name)} ({fmt_pct(o.share)})" for o in heavy) + "."]
    else:
        out += ["", "Every operator is delegated."]
    return [*out, ""]


def _operators(test: TestResult, level: int) -> list[str]:
    a = test.analysis
    if a is None or not a.operator_details:
        return []
    cmp = test.comparison
    off = {o.name: o for o in test.profile_off.analysis.operator_details} if test.profile_off else {}
    out = _h(level, f"Top Operators ({min(TOP_OPERATORS, len(a.operator_details))} of {len(a.operator_details)})")
    rows = []
    for o in a.operator_details[:TOP_OPERATORS]:
        row = [_code(o.name), o.category, o.backend or "—", f"{o.count:g}", fmt_ms(o.avg_ms), fmt_ms(o.total_ms),
               fmt_pct(o.share)]
        if off:
            before = off.get(o.name)
            row += [fmt_ms(before.total_ms) if before else "—",
                    fmt_x(before.total_ms / o.total_ms) if before and o.total_ms > 0 else "—"]
        row.append(_code(o.kernel_hint) if o.kernel_hint else "—")
        rows.append(row)
    header = ["operator", "category", "backend", "calls/run", "avg ms/call", "ms per run", "% of E2E"]
    if off and cmp is not None:
        header += [f"{_cell(cmp.off_label)} ms", "speedup"]
    header.append("kernel hint")
    out += _table(header, rows, "lll" + "r" * (len(header) - 4) + "l")
    out += ["", "_Kernel hints are the widest kernel of the matching kind the XNNPACK log selected; the log proves "
            "selection, not which tile ran each call._", ""]
    return out


def _kernels(test: TestResult, level: int) -> list[str]:
    cmp = test.comparison
    out = _h(level, "Kernel Insights")
    if cmp is not None and cmp.kernels is not None:
        ev = cmp.kernels
        off_log, on_log = ev.off_log, ev.on_log
        arms = ((cmp.off_label, off_log, ev.off_sme2_kernels), (cmp.on_label, on_log, ev.on_sme2_kernels))
        for label, log, sme2 in arms:
            if log is None:
                out.append(f"- **{_cell(label)}**: no XNNPACK log.")
                continue
            isas = ", ".join(f"{k} ({v})" for k, v in ev.isas("off" if log is off_log else "on").items())
            evidence = (f"**{len(sme2)} SME2 kernel(s)**, e.g. {_code(sme2[0])}" if sme2 else "**no SME2 kernel**")
            out.append(f"- **{_cell(label)}**: {len(log.kernels)} kernels selected; {evidence}; ISAs: {isas}.")
        if ev.sme2_missing:
            out += ["", f"> ⚠️ **{_cell(cmp.on_label)} with no SME2 kernel.** Its XNNPACK log selected no "
                    "`__neonsme2` / `kai_*sme2*` kernel, so SME2 did not run: the device lacks SME2, or the "
                    "runner was built without XNNPACK's SME2 kernels."]
        if off_log is not None and on_log is not None:
            out += ["", "**Side by side** (kernel kinds whose selection differs first):", "",
                    side_by_side_markdown(off_log, on_log, off_label=cmp.off_label, on_label=cmp.on_label)]
        for label, log in ((cmp.off_label, off_log), (cmp.on_label, on_log)):
            if log is not None:
                out += ["", f"<details><summary>All kernels selected by {_cell(label)} ({len(log.kernels)})</summary>",
                        "", kernel_table_markdown(log), "", "</details>"]
        return [*out, ""]
    a = test.analysis
    if a is not None and a.kernel_log:
        log = kernel_log_from_dict(a.kernel_log)
        sme2 = log.sme2_kernels
        out.append(f"{len(log.kernels)} kernels selected; " + (
            f"**{len(sme2)} SME2 kernel(s)**, e.g. {_code(sme2[0])}." if sme2 else "**no SME2 kernel**."))
        out += ["", kernel_table_markdown(log)]
        return [*out, ""]
    if a is None:
        return []
    return [*out, "_No XNNPACK kernel log for this test: kernel selection and SME2 use are not known._", ""]


def _verdict(test: TestResult, level: int) -> list[str]:
    v = test.verdict
    cmp = test.comparison
    enforced = cmp is not None and not cmp.speedup_check.advisory
    if v is None and not enforced:
        return []
    out = _h(level, "Regression Verdict")
    checks = list(v.checks) if v is not None else []
    if enforced and cmp is not None and all(c.name != cmp.speedup_check.name for c in checks):
        checks.append(cmp.speedup_check)
    status = v.status.value if v is not None else test.status
    out += [_status_badge(status), ""]
    rows = []
    for c in checks:
        iv = c.interval
        if c.name in ("speedup", "min_speedup") and iv is not None:
            change = f"{fmt_x(iv.estimate)} ({fmt_x(iv.low)}–{fmt_x(iv.high)})"
        elif iv is not None and c.name.endswith("_budget"):
            change = f"{fmt_ms(iv.estimate)} ms ({fmt_ms(iv.low)}–{fmt_ms(iv.high)})"
        elif iv is not None:
            change = f"{(iv.estimate - 1) * 100:+.1f}% ({(iv.low - 1) * 100:+.1f}%..{(iv.high - 1) * 100:+.1f}%)"
        else:
            change = "—"
        if c.name in ("speedup", "min_speedup"):
            margin = f"≥ {fmt_x(c.margin)}" if c.margin is not None else "—"
        elif c.name.endswith("_budget"):
            margin = f"≤ {fmt_ms(c.baseline)} ms"
        else:
            margin = f"±{c.margin * 100:.1f}%" if c.margin is not None else "—"
        rows.append([_code(c.name), c.status.value + (" (advisory)" if c.advisory else ""),
                     fmt_ms(c.baseline) if not c.name.endswith("_budget") else "—", fmt_ms(c.candidate), change,
                     margin, f"{c.p_value:.2g}" if c.p_value is not None else "—"])
    out += _table(["check", "status", "baseline ms", "current ms", "change (95% CI)", "margin", "p"], rows, "llrrrrr")
    if v is not None:
        if v.explanation:
            out += ["", *[f"- {_cell(line)}" for line in v.explanation]]
        if v.attempts > 1:
            out += ["", f"_Measured {v.attempts} times: a regression must be confirmed by a fresh measurement._"]
    return [*out, ""]


def _findings_block(test: TestResult) -> list[str]:
    h = test.headline
    bits = [_status_badge(h.status)]
    if h.median_ms is not None:
        bits.append(f"median {fmt_ms(h.median_ms)} ms")
    if h.delta_pct is not None:
        bits.append(f"{delta_text(h)} vs baseline")
    if h.speedup is not None:
        bits.append(f"SME2 speedup {speedup_text(h.speedup)}")
    out = [" · ".join(bits), ""]
    if test.comparison is not None and test.comparison.findings:
        out += [f"- {f}" for f in test.comparison.findings] + [""]
    return out


def render_test(test: TestResult, *, results: SessionResults | None = None, level: int = 2) -> str:
    """The full markdown section of one test; headings start at ``level``."""
    lines = _h(level, f"{_cell(test.label)} — {_code(test.test_id)}" if test.label != test.test_id
               else _code(test.test_id))
    lines += _findings_block(test)
    lines += _h(level + 1, "Metadata") + _metadata(test, results) + [""]
    for section in (_latency, _categories, _bottlenecks, _acceleration, _portable, _operators, _kernels, _verdict):
        lines += section(test, level + 1)
    lines += _h(level + 1, "Recommendations")
    lines += [f"{i}. {r}" for i, r in enumerate(recommendations(test), 1)] + [""]
    return "\n".join(lines)


def _summary_table(results: SessionResults) -> list[str]:
    order = {s: i for i, s in enumerate(STATUS_ORDER)}
    rows = []
    for t in sorted(results.tests, key=lambda t: (order.get(t.status, len(order)), t.test_id)):
        h = t.headline
        rows.append([_code(t.test_id), _cell(t.label), fmt_ms(h.median_ms), fmt_ms(h.p90_ms), delta_text(h),
                     speedup_text(h.speedup), _status_badge(h.status).split(" (")[0]])
    return _table(["test", "model", "median ms", "p90 ms", "vs baseline (95% CI)", "SME2 speedup (95% CI)", "verdict"],
                  rows, "llrrlll")


def render_markdown(results: SessionResults, *, title: str | None = None) -> str:
    """The report of one session: a summary table, then every test's sections."""
    counts = ", ".join(f"{v} {k}" for k, v in results.counts().items() if v) or "no tests"
    lines = _h(1, _cell(title or "pytest-sme2 performance report"))
    lines += [f"{len(results.tests)} test(s): {counts}. Generated by pytest-sme2 {_cell(results.tool_version)}"
              + (f" on {_cell(results.created)}" if results.created else "") + ".", ""]
    if not results.tests:
        return "\n".join([*lines, "_The session recorded no pytest-sme2 test._", ""])
    if len(results.tests) > 1:
        lines += _h(2, "Summary") + _summary_table(results) + [""]
    for t in results.tests:
        lines += [render_test(t, results=results, level=2)]
    return "\n".join(lines).rstrip() + "\n"


def render_combined(results_list: Sequence[SessionResults], *, title: str | None = None) -> str:
    """One report across several sessions (devices): devices, a results matrix, category shares, details."""
    sessions = list(results_list)
    lines = _h(1, _cell(title or f"pytest-sme2 combined report: {len(sessions)} session(s)"))
    if not sessions:
        return "\n".join([*lines, "_No results to combine._", ""])
    names: list[str] = []
    for i, r in enumerate(sessions, 1):
        name = r.device_label
        names.append(f"{name} #{i}" if name in names else name)
    lines += _h(2, "Devices")
    rows = []
    for name, r in zip(names, sessions, strict=True):
        p = next((t.profile for t in r.tests if t.profile is not None), None)
        dev = _device_text(p.device, p.fingerprint) if p is not None else "—"
        et = r.environment.get("executorch_version") or next(
            (t.model_info.get("executorch_version") for t in r.tests if t.model_info.get("executorch_version")), "—")
        rows.append([_cell(name), _cell(dev), str(len(r.tests)), _cell(r.created or "—"), _cell(et)])
    lines += [*_table(["device", "details", "tests", "date (UTC)", "ExecuTorch"], rows, "lllll"), ""]

    test_ids = list(dict.fromkeys(t.test_id for r in sessions for t in r.tests))
    lines += _h(2, "Results across devices")
    rows = []
    for tid in test_ids:
        label = next(t.label for r in sessions for t in r.tests if t.test_id == tid)
        row = [_code(tid), _cell(label)]
        for r in sessions:
            t = next((t for t in r.tests if t.test_id == tid), None)
            if t is None:
                row.append("—")
                continue
            h = t.headline
            parts = [f"{fmt_ms(h.median_ms)} ms"]
            if h.speedup is not None:
                parts.append(f"{fmt_x(h.speedup.estimate)} SME2")
            if h.delta_pct is not None:
                parts.append(f"{h.delta_pct:+.1f}%")
            parts.append(h.status)
            row.append(" · ".join(parts))
        rows.append(row)
    lines += [*_table(["test", "model", *[_cell(n) for n in names]], rows, "ll" + "l" * len(names)), ""]

    share_rows = []
    for tid in test_ids:
        for name, r in zip(names, sessions, strict=True):
            t = next((t for t in r.tests if t.test_id == tid), None)
            a = t.analysis if t is not None else None
            if a is None or not a.per_operator:
                continue
            share_rows.append([_cell(t.label if t else tid), _cell(name), fmt_ms(a.e2e.mean),
                               *[fmt_pct(a.category_share.get(c)) for c in CATEGORIES], a.dominant_category])
    if share_rows:
        lines += _h(2, "Where the time goes on each device")
        align = "llr" + "r" * len(CATEGORIES) + "l"
        lines += [*_table(["model", "device", "E2E mean ms", *CATEGORIES, "largest"], share_rows, align), ""]
    for name, r in zip(names, sessions, strict=True):
        lines += _h(2, f"Device: {_cell(name)}")
        for t in r.tests:
            lines += [render_test(t, results=r, level=3)]
    return "\n".join(lines).rstrip() + "\n"
