"""HTML fragments for pytest-html: a per-test extras section, results-table cells, a summary block.

The plugin calls these from pytest-html's hooks; they take results values and return HTML strings:

- :func:`html_section` (an ``extras.html`` item): verdict with its CI, category chart (current vs
  baseline, or SME2 off vs on), latency samples in run order with the cold run, speedups, the top
  operators, the kernel evidence (SME2 kernels per arm, the on/off kernel diff, operators by kernel kind,
  each build's kernel table), where the numbers came from, the device and runner identity, and the
  first recommendations;
- :func:`header_cells` / :func:`row_cells`: extra results-table columns (median, p90, change vs
  baseline, its interval, SME2 speedup, verdict), keyed by :data:`COLUMNS`;
- :func:`summary_block`: counts of regressions, improvements, inconclusive, invalid and passes.

pytest-html inserts extras without running scripts, so everything is static HTML + inline SVG with
``sme2-``-prefixed CSS classes. Its own ``#results-table td`` rule outranks a class selector, so every
rule is emitted twice, once scoped under ``#results-table``; row cells use inline styles because no
stylesheet of ours is guaranteed to be on the page when the table renders.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from html import escape

import numpy as np

from pytest_sme2.gate.verdict import Check, Status
from pytest_sme2.report import tables
from pytest_sme2.report.cells import Cell, Kind, Table, cell_text
from pytest_sme2.report.charts import (
    SERIES_COLORS,
    SampleSeries,
    SpeedupBar,
    category_color,
    category_stacked_bars,
    latency_series_chart,
    operator_bars,
    speedup_bars,
)
from pytest_sme2.report.instructions import instructions_chart
from pytest_sme2.report.memory import memory_chart
from pytest_sme2.results import (
    BASELINE_WRITTEN,
    FAILED,
    MEASURED,
    RECORDED,
    SKIPPED,
    STATUS_ORDER,
    SessionResults,
    TestResult,
    delta_text,
    speedup_text,
)
from pytest_sme2.units import fmt_change, fmt_interval, fmt_ms, fmt_range, fmt_signed_pct, fmt_x

BASELINE_SAMPLES_COLOR = "#8C959F"
#: Keys of :func:`row_cells` / :func:`header_cells`, in column order.
COLUMNS: tuple[str, ...] = ("median", "p90", "delta", "interval", "speedup", "verdict")

_STATUS_COLORS: Mapping[str, tuple[str, str]] = {  # status -> (text/border, background)
    Status.PASS.value: ("#1A7F37", "#DAFBE1"),
    Status.REGRESSION.value: ("#CF222E", "#FFEBE9"),
    Status.BUG.value: ("#CF222E", "#FFEBE9"),
    Status.IMPROVEMENT.value: ("#0969DA", "#DDF4FF"),
    Status.INCONCLUSIVE.value: ("#9A6700", "#FFF8C5"),
    Status.INVALID.value: ("#57606A", "#EAEEF2"),
    Status.DRIFT.value: ("#9A6700", "#FFF8C5"),
    RECORDED: ("#6639BA", "#FBEFFF"),
    MEASURED: ("#6639BA", "#FBEFFF"),
    BASELINE_WRITTEN: ("#6639BA", "#FBEFFF"),
    FAILED: ("#CF222E", "#FFEBE9"),
    SKIPPED: ("#57606A", "#F6F8FA"),
}

_RULES: tuple[tuple[str, str], ...] = (
    (".sme2-section", "font-family:system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;"
                      "color:#1F2328;font-size:13px;line-height:1.45;margin:4px 0 14px;max-width:1320px"),
    (".sme2-section h4", "font-size:14px;margin:14px 0 6px;color:#1F2328"),
    (".sme2-head", "border-left:5px solid;border-radius:6px;padding:8px 12px;margin:6px 0"),
    (".sme2-head b", "color:#1F2328"),
    (".sme2-pill", "display:inline-block;border-radius:10px;padding:1px 8px;font-weight:700;font-size:11px;"
                   "letter-spacing:.04em;text-transform:uppercase;margin-right:6px"),
    (".sme2-emulated", "display:inline-block;border-radius:8px;padding:0 6px;font-size:11px;font-weight:700;"
                       "background:#FFF8C5;color:#7D4E00;border:1px solid #D4A72C"),
    (".sme2-findings", "margin:6px 0 6px 18px;padding:0"),
    (".sme2-charts", "display:flex;flex-wrap:wrap;gap:10px;align-items:flex-start"),
    (".sme2-card", "border:1px solid #D0D7DE;border-radius:6px;background:#FFFFFF;padding:2px;"
                   "flex:1 1 480px;max-width:652px"),
    (".sme2-table", "border-collapse:collapse;font-size:12px;margin:4px 0;color:#1F2328"),
    (".sme2-table th", "text-align:left;background:#F6F8FA;border:1px solid #D0D7DE;padding:3px 8px;"
                       "font-weight:600;color:#1F2328"),
    (".sme2-table td", "border:1px solid #D0D7DE;padding:3px 8px;text-align:left;color:#1F2328;"
                       "vertical-align:top"),
    (".sme2-table td.sme2-num", "text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap"),
    (".sme2-table code, .sme2-section code", "font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;"
                                             "font-size:11px"),
    (".sme2-swatch", "display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px;"
                     "vertical-align:-1px"),
    (".sme2-tag", "display:inline-block;border-radius:8px;padding:0 6px;font-size:11px"),
    (".sme2-tag-portable", "background:#FFEBE9;color:#A40E26;font-weight:600"),
    (".sme2-tag-delegated", "background:#DDF4FF;color:#0550AE"),
    (".sme2-share", "display:inline-block;height:8px;background:#8C959F;border-radius:2px;margin-left:6px;"
                    "vertical-align:0"),
    (".sme2-grid", "display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start"),
    (".sme2-grid > div", "flex:0 1 auto;min-width:0"),
    (".sme2-grid > div.sme2-grow", "flex:1 1 420px"),
    (".sme2-nowrap", "white-space:nowrap"),
    (".sme2-recs", "margin:4px 0 4px 18px;padding:0"),
    (".sme2-muted", "color:#57606A"),
    (".sme2-note", "color:#57606A;font-size:11px;margin:2px 0 6px;max-width:640px"),
    (".sme2-summary", "font-family:system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;"
                      "color:#1F2328;font-size:13px;margin:8px 0"),
)


def _css() -> str:
    out = []
    for selector, body in _RULES:
        scoped = ", ".join(f"#results-table {s.strip()}" for s in selector.split(","))
        out.append(f"{selector}, {scoped} {{{body}}}")
    return "<style>" + "\n".join(out) + "</style>"


def _e(value: object) -> str:
    return escape(str(value), quote=True)


_BACKTICKS = re.compile(r"`([^`]+)`")


def _text(value: str) -> str:
    """Escape a sentence shared with the markdown report, keeping its `code` spans as <code>."""
    return _BACKTICKS.sub(r"<code>\1</code>", _e(value))


def _pill(status: str) -> str:
    fg, bg = _STATUS_COLORS.get(status, ("#57606A", "#EAEEF2"))
    return f'<span class="sme2-pill sme2-status-{_e(status)}" style="color:{fg};background:{bg}">{_e(status)}</span>'


def _swatch(category: str) -> str:
    return (f'<span class="sme2-nowrap"><span class="sme2-swatch" style="background:{category_color(category)}">'
            f"</span>{_e(category)}</span>")


def _tag(backend: str) -> str:
    if backend == "portable":
        return '<span class="sme2-tag sme2-tag-portable">portable</span>'
    if not backend or backend == "—":
        return '<span class="sme2-muted">—</span>'
    return f'<span class="sme2-tag sme2-tag-delegated">{_e(backend)}</span>'


def _cell(cell: Cell) -> str:
    """One cell as HTML: categories get their swatch, backends a tag, statuses a pill, shares a bar."""
    value = cell_text(cell)
    if cell.kind is Kind.TEXT:
        out = _text(value).replace("\n", "<br>")
    elif cell.kind is Kind.CODE:
        out = f"<code>{_e(value)}</code>" if cell.value else '<span class="sme2-muted">—</span>'
    elif cell.kind is Kind.CATEGORY:
        out = _swatch(value)
    elif cell.kind is Kind.BACKEND:
        out = _tag(value)
    elif cell.kind is Kind.STATUS:
        out = _pill(value)
    elif cell.kind is Kind.SHARE and cell.bar and isinstance(cell.value, float) and math.isfinite(cell.value):
        out = (f'{_e(value)}<span class="sme2-share" style="width:{max(1.0, cell.value * 80):.0f}px;'
               f'background:{category_color(cell.bar)}"></span>')
    else:
        out = _e(value)
    if cell.note:
        out += f' <span class="sme2-muted">{_e(cell.note)}</span>'
    return f"<b>{out}</b>" if cell.strong and out else out


def render_table(table: Table, *, title: bool = True) -> str:
    """A table as HTML (numeric columns right-aligned), its title as ``<h4>``, its notes below it.

    A keyed table has no header row; its first column is written as row headers.
    """
    numeric = {i for i, col in enumerate(table.columns) if col.numeric}
    body = []
    for row in table.rows:
        cells = "".join(
            f"<th>{_cell(x)}</th>" if table.keyed and i == 0
            else f'<td class="sme2-num">{_cell(x)}</td>' if i in numeric else f"<td>{_cell(x)}</td>"
            for i, x in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    head = "" if table.keyed else "<thead><tr>" + "".join(f"<th>{_e(c.title)}</th>" for c in table.columns) + \
        "</tr></thead>"
    notes = "".join(f'<p class="sme2-note">{_text(n)}</p>' for n in table.notes)
    heading = f"<h4>{_e(table.title)}</h4>" if title else ""
    return f'{heading}<table class="sme2-table">{head}<tbody>{"".join(body)}</tbody></table>{notes}'


def _card(svg: str) -> str:
    return f'<div class="sme2-card">{svg}</div>'


# ------------------------------------------------------------------------------------- headline


def _check_text(c: Check) -> str:
    iv = c.interval
    if iv is None:
        return c.message
    level = f"{iv.confidence * 100:.4g}% CI"  # 95 %, or a sequential look's level (the gate's interval as judged)
    fmt = fmt_x if c.name in ("speedup", "min_speedup") else fmt_change
    return fmt_interval(iv.estimate, iv.low, iv.high, fmt, level=level)


def _headline(test: TestResult) -> str:
    h = test.headline
    fg, bg = _STATUS_COLORS.get(h.status, ("#57606A", "#EAEEF2"))
    bits = [f"<b>{_e(test.label)}</b>"]
    if h.median_ms is not None:
        bits.append(f"median <b>{fmt_ms(h.median_ms)} ms</b>" + (
            ' <span class="sme2-emulated" title="measured under QEMU: emulated time is not device time">EMULATED'
            "</span>" if h.emulated else ""))
    v = test.verdict
    e2e = v.e2e if v else None
    if e2e is not None and e2e.interval is not None:
        margin = f", margin ±{e2e.margin * 100:.1f}%" if e2e.margin is not None else ""
        p = f", Mann-Whitney p={e2e.p_value:.2g}" if e2e.p_value is not None else ""
        bits.append(f"vs baseline {fmt_ms(e2e.baseline)} ms: <b>{_e(_check_text(e2e))}</b>{_e(margin)}{_e(p)}")
    elif v is not None and v.checks:
        bits.append(_e(v.checks[0].message))
    if test.comparison is not None:
        cmp = test.comparison
        if h.emulated:
            bits.append(f"{_e(h.speedup_label)} {_e(_check_text(cmp.speedup_check))} — emulated time, not a "
                        "speedup: not gated")
        else:
            bits.append(f"{_e(cmp.on_label)} speedup <b>{_e(_check_text(cmp.speedup_check))}</b>")
    return (f'<div class="sme2-head" style="border-color:{fg};background:{bg}">{_pill(h.status)}'
            + " · ".join(bits) + "</div>")


def _findings(test: TestResult) -> str:
    lines: list[str] = []
    if test.comparison is not None:
        lines += list(test.comparison.findings)
    if test.verdict is not None:
        lines += [c.message for c in test.verdict.checks if not c.advisory and c.name != "e2e"]
        lines += list(test.verdict.explanation)
        if test.verdict.attempts > 1:
            lines.append(f"Measured {test.verdict.attempts} times: a regression must be confirmed by a fresh "
                         "measurement.")
    for p in (test.profile_off, test.profile):
        if p is not None and p.invalid_reason:
            lines.append(f"Invalid measurement: {p.invalid_reason}")
        if p is not None and p.note:
            lines.append(p.note)
    if not lines:
        return ""
    return '<ul class="sme2-findings">' + "".join(f"<li>{_text(x)}</li>" for x in dict.fromkeys(lines)) + "</ul>"


# --------------------------------------------------------------------------------------- charts


def _charts(test: TestResult) -> str:
    cmp, a = test.comparison, test.analysis
    cards: list[str] = []
    emulated = " (EMULATED time, not device time)" if test.emulated else ""
    if cmp is not None and test.profile_off is not None and a is not None:
        off = test.profile_off.analysis
        if cmp.per_operator:
            cards.append(category_stacked_bars(
                [(cmp.off_label, off.category_totals_ms), (cmp.on_label, a.category_totals_ms)],
                title=f"Where the time goes: {cmp.off_label} vs {cmp.on_label}{emulated}",
                compare_to_first=not test.emulated))  # emulated time: no "faster than"
        cards.append(latency_series_chart(
            [SampleSeries(cmp.off_label, off.measured_ms, off.e2e.cold, SERIES_COLORS[1]),
             SampleSeries(cmp.on_label, a.measured_ms, a.e2e.cold, SERIES_COLORS[0])],
            title=f"E2E latency per run: {cmp.off_label} vs {cmp.on_label}{emulated}"))
        bars = [SpeedupBar("E2E", cmp.speedup.estimate, cmp.speedup.low, cmp.speedup.high, SERIES_COLORS[0])]
        for c in cmp.categories:
            if c.off_ms <= 0 or not math.isfinite(c.speedup):
                continue
            ci = c.speedup_ci
            bars.append(SpeedupBar(c.category, c.speedup, ci.low if ci else None, ci.high if ci else None,
                                   category_color(c.category), "" if c.resolvable else "< 2% of E2E"))
        if test.emulated:
            cards.append(speedup_bars(
                bars, title=f"Emulated time ratio {cmp.off_label} / {cmp.on_label} (95% CI): not a speedup",
                axis_label="ratio of emulated times (×): not device time"))
        else:
            cards.append(speedup_bars(bars, title=f"Speedup {cmp.off_label} / {cmp.on_label} (95% CI)"))
    elif a is not None:
        b = test.baseline
        if a.per_operator:
            bars_in = [("current", a.category_totals_ms)]
            if b is not None and b.per_operator and b.category_totals_ms:
                bars_in.insert(0, ("baseline", b.category_totals_ms))
            cards.append(category_stacked_bars(bars_in, title="Where the time goes" + (
                ": baseline vs current" if len(bars_in) > 1 else "") + emulated))
        series = [SampleSeries("current", a.measured_ms, a.e2e.cold, SERIES_COLORS[0])]
        base_median = None
        if b is not None and b.samples_ms:
            base_median = float(np.median(b.samples_ms))
            # The baseline's own samples, muted, show whether the two distributions overlap at all.
            series.append(SampleSeries("baseline samples", b.samples_ms, None, BASELINE_SAMPLES_COLOR,
                                       show_median=False))
        cards.append(latency_series_chart(series, baseline_ms=base_median, title="E2E latency per run" + emulated))
    if a is not None and a.operator_details:
        cards.append(operator_bars(a.operator_details, 10))
    memory = memory_chart(test)
    if memory:
        cards.append(memory)
    counted = instructions_chart(test)
    if counted:
        cards.append(counted)
    if not cards:
        return ""
    return '<div class="sme2-charts">' + "".join(_card(c) for c in cards) + "</div>"


# --------------------------------------------------------------------------------------- tables


def _table_html(table: Table | None) -> str:
    return render_table(table) if table is not None else ""


def _kernels(test: TestResult) -> str:
    """SME2 kernel evidence per arm, then (folded) the on/off diff, operators by kernel kind, each build's kernels."""
    lines = tables.kernel_evidence_lines(test)
    if not lines:
        return ""
    parts = ["<h4>Kernels (XNNPACK log, trace, emulator): what ran</h4>",
             '<ul class="sme2-findings">' + "".join(f"<li>{_text(x)}</li>" for x in lines) + "</ul>"]
    # The evidence lines above say whether SME2 ran; the tables behind them are folded, so the section
    # stays as short as the ones before it.
    diff = tables.kernel_diff_table(test)
    if diff is not None:
        parts.append(f"<details><summary>{_e(diff.title)}</summary>{render_table(diff, title=False)}</details>")
    ops = tables.operator_kernel_table(test)
    if ops is not None:
        parts.append(f"<details><summary>{_e(ops.title)} ({len(ops.rows)})</summary>"
                     f"{render_table(ops, title=False)}</details>")
    for arm, log, table in tables.arm_kernel_tables(test):
        body = render_table(table, title=False) if table is not None else (
            f'<p class="sme2-note">No <code>Using ... microkernel</code> lines in {_e(log.source)}: was it written by '
            "a debug-logging build?</p>")
        parts.append(f"<details><summary>All kernels selected by {_e(arm.label)} ({len(log.kernels)})</summary>"
                     f"{body}</details>")
    for table in tables.arm_evidence_tables(test):
        parts.append(f"<details><summary>{_e(table.title)} ({len(table.rows)})</summary>"
                     f"{render_table(table, title=False)}</details>")
    return "".join(parts)


def _recommendations(test: TestResult, n: int = 4) -> str:
    recs = tables.recommendations(test)[:n]
    if not recs:
        return ""
    return ("<h4>Recommendations</h4><ol class=\"sme2-recs\">" + "".join(f"<li>{_text(r.text)}</li>" for r in recs)
            + "</ol>")


# ---------------------------------------------------------------------------------- public API


def html_section(test_result: TestResult, *, top: int = 10) -> str:
    """The pytest-html extras fragment of one test (self-contained: it carries its own CSS)."""
    t = test_result
    parts = [_css(), _headline(t), _findings(t), _charts(t)]
    side = [x for x in (_table_html(tables.category_table(t)), _table_html(tables.checks_table(t))) if x]
    if side:
        parts.append('<div class="sme2-grid">' + "".join(f"<div>{x}</div>" for x in side) + "</div>")
    parts.append(_table_html(tables.operator_table(t, top)))
    parts.append(_kernels(t))
    parts.append(_table_html(tables.sources_table(t)))
    parts.append('<div class="sme2-grid"><div>' + _table_html(tables.identity_table(t))
                 + '</div><div class="sme2-grow">' + _recommendations(t) + "</div></div>")
    return f'<div class="sme2-section" data-test-id="{_e(t.test_id)}">' + "".join(p for p in parts if p) + "</div>"


def header_cells() -> dict[str, str]:
    """``<th>`` cells for the extra results-table columns, keyed like :data:`COLUMNS`."""
    names = {"median": "median ms", "p90": "p90 ms", "delta": "vs baseline", "interval": "95% CI",
             "speedup": "speedup off → on", "verdict": "perf verdict"}
    return {k: f'<th class="sme2-col-{k}">{_e(names[k])}</th>' for k in COLUMNS}


def row_cells(test_result: TestResult) -> dict[str, str]:
    """``<td>`` cells for one test's results-table row, keyed like :data:`COLUMNS` (``—`` when unknown)."""
    h = test_result.headline
    fg, _ = _STATUS_COLORS.get(h.status, ("#57606A", "#EAEEF2"))
    num = "text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap"
    delta = fmt_signed_pct(h.delta_pct)
    interval = "—"
    if h.delta_ci_pct is not None:
        margin = f" (±{h.margin * 100:.0f}%)" if h.margin is not None else ""
        interval = fmt_range(*h.delta_ci_pct, fmt_signed_pct) + margin
    speedup = "—" if h.speedup is None else fmt_interval(h.speedup.estimate, h.speedup.low, h.speedup.high)
    if h.emulated and h.speedup is not None:
        speedup += " emulated, not gated"
    values = {
        "median": (fmt_ms(h.median_ms) + (" emulated" if h.emulated else ""), num), "p90": (fmt_ms(h.p90_ms), num),
        "delta": (delta, num + (f";color:{fg};font-weight:600" if h.delta_pct is not None else "")),
        "interval": (interval, "white-space:nowrap"), "speedup": (speedup, "white-space:nowrap"),
        "verdict": (h.status, f"color:{fg};font-weight:700;text-transform:uppercase"),
    }
    return {k: f'<td class="sme2-col-{k}" style="{v[1]}">{_e(v[0])}</td>' for k, v in values.items()}


def summary_block(results: SessionResults) -> str:
    """Counts per status and the tests that need attention, for pytest-html's summary section."""
    counts = results.counts()
    pills = []
    for status in STATUS_ORDER:
        fg, bg = _STATUS_COLORS[status]
        n = counts.get(status, 0)
        style = f"color:{fg};background:{bg}" + ("" if n else ";opacity:.45")
        pills.append(f'<span class="sme2-pill sme2-count-{_e(status)}" data-count="{n}" style="{style}">'
                     f"{n} {_e(status)}</span>")
    attention = [t for t in results.tests if t.status in (Status.REGRESSION.value, FAILED, Status.INVALID.value,
                                                          Status.INCONCLUSIVE.value)]
    items = "".join(
        f"<li>{_pill(t.status)}<code>{_e(t.test_id)}</code> — {_e(delta_text(t.headline))}"
        + (f", {_e(t.headline.speedup_label)} {_e(speedup_text(t.headline.speedup, emulated=t.headline.emulated))}"
           if t.headline.speedup else "") + "</li>"
        for t in attention
    )
    return (f'{_css()}<div class="sme2-summary"><b>pytest-sme2</b>: {len(results.tests)} performance '
            f"test{'s' if len(results.tests) != 1 else ''} " + "".join(pills)
            + (f'<ul class="sme2-findings">{items}</ul>' if items else "") + _table_html(tables.device_matrix(results))
            + "</div>")


def render_html(results: SessionResults, *, title: str | None = None) -> str:
    """A standalone HTML page: the summary block, then every test's section (no pytest-html needed)."""
    heading = title or "pytest-sme2 performance report"
    sections = "".join(f"<h2 style=\"font-family:system-ui,sans-serif\">{_e(t.test_id)}</h2>{html_section(t)}"
                       for t in results.tests)
    meta = f"pytest-sme2 {results.tool_version}" + (f", {results.created}" if results.created else "")
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(heading)}</title></head><body style=\"background:#F6F8FA;margin:16px\">"
            f"<h1 style=\"font-family:system-ui,sans-serif\">{_e(heading)}</h1>"
            f"<p class=\"sme2-muted\" style=\"font-family:system-ui,sans-serif\">{_e(meta)}</p>"
            f"{summary_block(results)}{sections}</body></html>\n")
