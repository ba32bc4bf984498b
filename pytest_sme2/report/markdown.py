"""The markdown report: the seeds' ``generate_report`` sections, filled from a results document.

Per test: metadata with the device and runner identity; latency comparison (median, mean, min,
max, std, p90, cold, speedup); the operator category breakdown with category speedups and the
bottleneck shift; bottlenecks above 5 % of E2E; acceleration analysis (top accelerated and not
accelerated operators); portable vs delegated; top operators; kernel insights (SME2 evidence, the two
builds side by side, operators by kernel kind, each build's kernel table); the regression verdict; and
the recommendations. The metadata says where each arm's latency, breakdown and kernels came from.

Each section adapts to what the test holds: an SME2 on/off pair, a measurement judged against a
baseline, a single profile, or a verdict alone. :func:`render_combined` puts several sessions
(devices) side by side for ``pytest-sme2 report --combine``. The tables come from
:mod:`.tables`; this module writes them as markdown and adds the prose around them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pytest_sme2.analysis.onoff import NOT_ACCELERATED
from pytest_sme2.analysis.run import BOTTLENECK_SHARE
from pytest_sme2.evidence.categories import CONVOLUTION, GEMM
from pytest_sme2.report import tables
from pytest_sme2.report.cells import Cell, Kind, Table, cell_text
from pytest_sme2.report.instructions import instructions_markdown
from pytest_sme2.report.memory import memory_markdown, memory_rows
from pytest_sme2.results import (
    BASELINE_WRITTEN,
    FAILED,
    MEASURED,
    STATUS_ICONS,
    SessionResults,
    TestResult,
    delta_text,
    median_text,
    speedup_text,
)
from pytest_sme2.units import fmt_ms, fmt_pct, fmt_range, fmt_x

#: What the seeds expect SME2 to do to matrix compute (generate_report: "GEMM and Convolution
#: should show 3-15x speedup with SME2").
EXPECTED_MATRIX_SPEEDUP = 3.0


# ------------------------------------------------------------------------------------ writing


def _escape(text: str) -> str:
    """Text safe inside a table cell: pipes escaped, line breaks as ``<br>``."""
    return text.replace("|", "\\|").replace("\n", "<br>")


def _code(name: str) -> str:
    return f"`{_escape(name)}`"


_STATUS_NOTES = {
    MEASURED: " (no baseline to judge against)",
    BASELINE_WRITTEN: " (measured and stored as the baseline; not judged)",
    FAILED: " (no verdict: see the note)",
}


def _status_badge(status: str, *, note: bool = True) -> str:
    icon = STATUS_ICONS.get(status, "")
    label = status.replace("-", " ").upper()
    return f"{icon} **{label}**{_STATUS_NOTES.get(status, '') if note else ''}".strip()


def _cell(cell: Cell) -> str:
    """One cell as markdown; a strong status is a test's verdict and reads as its badge."""
    if cell.kind is Kind.STATUS and cell.strong:
        return _status_badge(str(cell.value), note=False)
    value = cell_text(cell)
    out = _code(value) if cell.kind is Kind.CODE and cell.value else _escape(value)
    if cell.note:
        out += f" ({_escape(cell.note)})"
    return f"**{out}**" if cell.strong and out else out


def render_table(table: Table, *, notes: bool = True) -> list[str]:
    """The table's lines (numeric columns right-aligned), then its notes as italic paragraphs."""
    titles = ["" for _ in table.columns] if table.keyed else [_escape(col.title) for col in table.columns]
    marks = ["---:" if col.numeric else "---" for col in table.columns]
    out = ["| " + " | ".join(titles) + " |", "|" + "|".join(marks) + "|"]
    out += ["| " + " | ".join(_cell(x) for x in row) + " |" for row in table.rows]
    return [*out, *render_notes(table)] if notes else out


def render_notes(table: Table) -> list[str]:
    out = []
    for note in table.notes:
        out += ["", f"_{note}_"]
    return out


def _h(level: int, text: str) -> list[str]:
    return ["#" * min(level, 6) + " " + text, ""]


def _runs_text(test: TestResult, measured: int, per_arm: str) -> str:
    """How the measured runs were taken: blocks, warm-up left out per block, the cold first run."""
    blocks = test.profile.runs if test.profile is not None else ()
    if not blocks:
        return f"{measured} measured{per_arm}"
    warmup = blocks[0].warmup
    return (f"{measured} measured{per_arm} in {len(blocks)} block(s); the first {warmup} execution(s) of each "
            "block left out as warm-up (the first execution is cold)")


# ------------------------------------------------------------------------------------- sections


def _metadata(test: TestResult, results: SessionResults | None) -> list[str]:
    info = test.model_info
    rows = [["Test", _code(test.test_id)]]
    if test.device:
        rows.append(["Device (pool)", _code(test.device)])
    if info:
        rows.append(["Model", " · ".join(_escape(str(info[k])) for k in ("name", "dtype", "backend") if info.get(k))])
    analyzed = tables.analyzed_text(test)
    if analyzed:
        rows.append(["Analyzed", _escape(analyzed)])
    a = test.analysis
    if a is not None:
        per_arm = " per arm" if test.profile_off is not None else ""
        rows.append(["Runs", _runs_text(test, a.runs_measured, per_arm)])
    if results is not None:
        config_file = results.environment.get("config_file") or results.config.get("config_file")
        if config_file:
            rows.append(["Config File", _code(str(config_file))])  # the seed greps for this label
        config = tables.config_text(results.config)
        if config:
            rows.append(["Config", _escape(config)])
    et = info.get("executorch_version") or (results.environment.get("executorch_version") if results else None)
    rows.append(["ExecuTorch", _escape(str(et or "unknown"))])
    if results is not None and results.created:
        rows.append(["Date (UTC)", _escape(results.created)])
    if test.note:
        rows.append(["Note", _escape(test.note)])
    out = ["|  |  |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows]]
    sources = tables.sources_table(test)
    if sources is not None:
        out += ["", "**Where the numbers come from**", "", *render_table(sources)]
    identity = tables.identity_table(test)
    if identity is not None:
        out += ["", "**Device and runner**", "", *render_table(identity)]
    return out


def _latency(test: TestResult, level: int) -> list[str]:
    table = tables.latency_table(test)
    if table is None:
        return []
    out = _h(level, "Latency Comparison" if (test.comparison or test.baseline) else "Latency")
    out += render_table(table)
    cmp = test.comparison
    if cmp is not None:
        iv = cmp.speedup
        what = "Emulated time ratio (not a speedup: emulated time is not device time)" if cmp.emulated else "Speedup"
        out += ["", f"**{what}: {fmt_x(iv.estimate)}** (95% CI {fmt_range(iv.low, iv.high)}): median "
                f"{_escape(cmp.off_label)} / median {_escape(cmp.on_label)}, block interval."]
    elif test.baseline is not None:
        e2e = test.verdict.e2e if test.verdict is not None else None
        ci_level = f"{e2e.interval.confidence * 100:.4g}%" if e2e is not None and e2e.interval is not None else "95%"
        out += ["", f"**Change of the median: {delta_text(test.headline)}** (the gate's {ci_level} interval of "
                "median current / median baseline: see its E2E check for how it was computed)."]
    out += ["", "_E2E latency is the `Method::execute` duration of each run (never a sum of nested events); the "
            "cold first run is shown but left out of every statistic._"]
    for arm in tables.arms(test):
        s = arm.analysis.e2e
        if s.cold is not None and s.median > 0 and s.cold / s.median >= 1.5:
            out.append(f"_{_escape(arm.label)}: the cold run took {fmt_x(s.cold / s.median)} the steady median "
                       "(first-run setup and allocation)._")
    return [*out, ""]


def _categories(test: TestResult, level: int) -> list[str]:
    a = test.analysis
    if a is None:
        return []
    out = _h(level, "Operator Category Breakdown")
    table = tables.category_table(test)
    if table is None:
        return [*out, "_No per-operator trace: every millisecond is counted as Other. Use a tracer-enabled "
                "executor_runner to see categories._", ""]
    out += render_table(table, notes=False)
    cmp = test.comparison
    if cmp is not None and cmp.per_operator and cmp.shift:
        out += ["", "**Bottleneck shift:** " + " ".join(cmp.shift)]
    return [*out, *render_notes(table), ""]


def _bottlenecks(test: TestResult, level: int) -> list[str]:
    a = test.analysis
    if a is None or not a.per_operator:
        return []
    out = _h(level, f"Bottlenecks (> {BOTTLENECK_SHARE:.0%} of E2E)")
    table = tables.bottleneck_table(test)
    if table is None:
        return [*out, f"No category or operator above {BOTTLENECK_SHARE:.0%} of E2E.", ""]
    return [*out, *render_table(table), ""]


def _acceleration(test: TestResult, level: int) -> list[str]:
    cmp = test.comparison
    if cmp is None or not cmp.per_operator:
        return []
    out = _h(level, "Acceleration Analysis")
    for cat in (CONVOLUTION, GEMM):
        s = cmp.category(cat)
        if s is None or s.off_ms <= 0 or not s.resolvable:
            continue
        expect = "within" if s.speedup >= EXPECTED_MATRIX_SPEEDUP else "below"
        ci = f" (95% CI {fmt_range(s.speedup_ci.low, s.speedup_ci.high)})" if s.speedup_ci else ""
        out.append(f"- **{cat}**: {fmt_x(s.speedup)}{ci}, {fmt_ms(s.off_ms)} → {fmt_ms(s.on_ms)} ms per run — "
                   f"{expect} the {EXPECTED_MATRIX_SPEEDUP:.0f}–15× the SME2 guides expect for matrix compute.")
    for s in cmp.categories:
        if s.category in (CONVOLUTION, GEMM) or not s.resolvable or not math.isfinite(s.speedup):
            continue
        out.append(f"- {s.category}: {fmt_x(s.speedup)}, {fmt_ms(s.off_ms)} → {fmt_ms(s.on_ms)} ms per run.")
    top = tables.accelerated_table(cmp)
    if top is not None:
        out += ["", "**Top accelerated operators** (most time saved per run):", "", *render_table(top)]
    out += ["", f"**Not accelerated** (under {NOT_ACCELERATED:.2f}×, at least 1% of E2E with "
            f"{_escape(cmp.on_label)}):", ""]
    slow = tables.not_accelerated_table(cmp)
    out += render_table(slow) if slow is not None else ["None: every operator above 1% of E2E sped up."]
    if cmp.only_off or cmp.only_on:
        out.append("")
        if cmp.only_off:
            out.append(f"Only in {_escape(cmp.off_label)}: " + ", ".join(_code(n) for n in cmp.only_off) + ".")
        if cmp.only_on:
            out.append(f"Only in {_escape(cmp.on_label)}: " + ", ".join(_code(n) for n in cmp.only_on) + ".")
    return [*out, ""]


def _portable(test: TestResult, level: int) -> list[str]:
    split = tables.portable_split_table(test)
    if split is None:
        return []
    out = [*_h(level, "Portable vs Delegated"), *render_table(split)]
    ops = tables.portable_operator_table(test)
    if ops is None:
        return [*out, "", "Every operator is delegated.", ""]
    out += ["", *render_table(ops)]
    current = [arm for arm in tables.arms(test) if arm.analysis.per_operator][-1].analysis
    heavy = [o for o in current.operator_details if o.backend == "portable" and o.share > BOTTLENECK_SHARE]
    if heavy:
        out += ["", "Above 5% of E2E on the portable kernels — delegate first: "
                + ", ".join(f"{_code(o.name)} ({fmt_pct(o.share)})" for o in heavy) + "."]
    return [*out, ""]


def _operators(test: TestResult, level: int) -> list[str]:
    table = tables.operator_table(test)
    a = test.analysis
    if table is None or a is None:
        return []
    shown = min(tables.TOP_OPERATORS, len(a.operator_details))
    return [*_h(level, f"Top Operators ({shown} of {len(a.operator_details)})"), *render_table(table), ""]


def _kernels(test: TestResult, level: int) -> list[str]:
    """SME2 evidence per arm, the on/off kernel diff, operators by kernel kind, then each build's kernel table."""
    if test.analysis is None:
        return []
    out = _h(level, "Kernel Insights")
    logs = tables.arm_kernel_logs(test)
    evidence = [line for t in tables.arm_evidence_tables(test) for line in ("", f"**{_escape(t.title)}**", "",
                                                                             *render_table(t))]
    if not logs:
        why = [f"- {_escape(line)}" for line in tables.kernel_evidence_lines(test)]
        unknown = "kernel selection is not known" if evidence else "kernel selection and SME2 use are not known"
        return [*out, f"_No XNNPACK kernel log for this test: {unknown}._", "", *why, *evidence, ""]
    out += [f"- {_escape(line)}" for line in tables.kernel_evidence_lines(test)]
    cmp = test.comparison
    if cmp is not None and cmp.kernels is not None and cmp.kernels.sme2_missing:
        out += ["", f"> ⚠️ **{_escape(cmp.on_label)} with no SME2 kernel.** Its XNNPACK log selected no "
                "`__neonsme2` / `kai_*sme2*` kernel, so SME2 did not run: the device lacks SME2, or the "
                "runner was built without XNNPACK's SME2 kernels."]
    if test.profile_off is not None and len(logs) == 2:
        sbs = tables.kernel_diff_table(test)
        out += ["", "**Side by side** (kernel kinds whose selection differs first):", "",
                *(render_table(sbs) if sbs is not None else ["_Neither log names a selected kernel._"])]
    ops = tables.operator_kernel_table(test)
    if ops is not None:
        out += ["", "**Operators by kernel kind** (the log's `running operator` lines, joined to the trace):", "",
                *render_table(ops)]
    for arm, log, table in tables.arm_kernel_tables(test):
        summary = f"All kernels selected by {_escape(arm.label)} ({len(log.kernels)})"
        body = render_table(table) if table is not None else [
            f"_No `Using ... microkernel` lines in {_escape(log.source)}: was it written by a debug-logging build?_"]
        out += ["", f"<details><summary>{summary}</summary>", "", *body, "", "</details>"]
    return [*out, *evidence, ""]


def _verdict(test: TestResult, level: int) -> list[str]:
    v = test.verdict
    cmp = test.comparison
    enforced = cmp is not None and not cmp.speedup_check.advisory
    table = tables.checks_table(test)
    if (v is None and not enforced) or table is None:
        return []
    out = _h(level, "Regression Verdict")
    status = v.status.value if v is not None else test.status
    out += [_status_badge(status), "", *render_table(table)]
    if v is not None:
        if v.explanation:
            out += ["", *[f"- {_escape(line)}" for line in v.explanation]]
        if v.attempts > 1:
            out += ["", f"_Measured {v.attempts} times: a regression must be confirmed by a fresh measurement._"]
    return [*out, ""]


def _findings_block(test: TestResult) -> list[str]:
    h = test.headline
    bits = [_status_badge(h.status)]
    if h.median_ms is not None:
        bits.append(f"median {median_text(h)}")
    if h.delta_pct is not None:
        bits.append(f"{delta_text(h)} vs baseline")
    if h.speedup is not None:
        bits.append(f"{h.speedup_label} {speedup_text(h.speedup, emulated=h.emulated)}")
    out = [" · ".join(bits), ""]
    if test.comparison is not None and test.comparison.findings:
        out += [f"- {f}" for f in test.comparison.findings] + [""]
    return out


def _memory(test: TestResult, level: int) -> list[str]:
    table = memory_markdown(memory_rows(test))
    return [*_h(level, "Memory and Size"), *table, ""] if table else []


def _instructions(test: TestResult, level: int) -> list[str]:
    table = instructions_markdown(test)
    return [*_h(level, "Instructions Executed Under Emulation"), *table, ""] if table else []


def render_test(test: TestResult, *, results: SessionResults | None = None, level: int = 2) -> str:
    """The full markdown section of one test; headings start at ``level``."""
    lines = _h(level, f"{_escape(test.label)} — {_code(test.test_id)}" if test.label != test.test_id
               else _code(test.test_id))
    lines += _findings_block(test)
    lines += _h(level + 1, "Metadata") + _metadata(test, results) + [""]
    for section in (_latency, _memory, _instructions, _categories, _bottlenecks, _acceleration, _portable, _operators,
                    _kernels, _verdict):
        lines += section(test, level + 1)
    lines += _h(level + 1, "Recommendations")
    lines += [f"{i}. {r.text}" for i, r in enumerate(tables.recommendations(test), 1)] + [""]
    return "\n".join(lines)


def render_markdown(results: SessionResults, *, title: str | None = None) -> str:
    """The report of one session: a summary table, then every test's sections."""
    counts = ", ".join(f"{v} {k}" for k, v in results.counts().items() if v) or "no tests"
    lines = _h(1, _escape(title or "pytest-sme2 performance report"))
    lines += [f"{len(results.tests)} test(s): {counts}. Generated by pytest-sme2 {_escape(results.tool_version)}"
              + (f" on {_escape(results.created)}" if results.created else "") + ".", ""]
    if results.interrupted:
        lines += [f"**Interrupted:** {_escape(results.interrupted)}; the other tests were not run.", ""]
    if not results.tests:
        return "\n".join([*lines, "_The session recorded no pytest-sme2 test._", ""])
    if len(results.tests) > 1:
        lines += _h(2, "Summary") + render_table(tables.summary_table(results)) + [""]
    by_device = tables.device_matrix(results)
    if by_device is not None:
        lines += _h(2, "Tests by device") + render_table(by_device) + [""]
    for t in results.tests:
        lines += [render_test(t, results=results, level=2)]
    return "\n".join(lines).rstrip() + "\n"


def render_combined(results_list: Sequence[SessionResults], *, title: str | None = None) -> str:
    """One report across several sessions (devices): devices, a results matrix, category shares, details."""
    sessions = list(results_list)
    lines = _h(1, _escape(title or f"pytest-sme2 combined report: {len(sessions)} session(s)"))
    if not sessions:
        return "\n".join([*lines, "_No results to combine._", ""])
    names = tables.session_names(sessions)
    lines += [*_h(2, "Devices"), *render_table(tables.devices_table(sessions, names)), ""]
    lines += [*_h(2, "Results across devices"), *render_table(tables.results_matrix(sessions, names)), ""]
    shares = tables.category_shares_table(sessions, names)
    if shares is not None:
        lines += [*_h(2, "Where the time goes on each device"), *render_table(shares), ""]
    for name, r in zip(names, sessions, strict=True):
        lines += _h(2, f"Device: {_escape(name)}")
        for t in r.tests:
            lines += [render_test(t, results=r, level=3)]
    return "\n".join(lines).rstrip() + "\n"
