"""Every table a report shows, built once from results values as :class:`~.cells.Table` data.

The markdown report, the HTML fragments and the terminal output render these; none of them
builds a table of its own. Builders take a :class:`~.results.TestResult` (or a session) and
return ``None`` when the test holds nothing for that table, so each format only decides where a
table goes and how it looks.

Also here: the few one-line texts several tables and formats share (:func:`device_summary`,
:func:`config_text`, :func:`analyzed_text`) and :func:`recommendations`, the test-level entry to
:func:`pytest_sme2.analysis.recommendations.recommend`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_sme2.analysis.onoff import NOT_ACCELERATED, OnOffComparison
from pytest_sme2.analysis.recommendations import Recommendation, recommend
from pytest_sme2.analysis.run import BOTTLENECK_SHARE, Analysis
from pytest_sme2.evidence.categories import CATEGORIES
from pytest_sme2.evidence.instructions import count_ratio
from pytest_sme2.evidence.kernels import KernelLog, is_sme2, isa_counts, operator_kernels
from pytest_sme2.gate.instructions import (
    INSTRUCTION_CHECKS,
    INSTRUCTIONS,
    INSTRUCTIONS_OFF,
    SME2_INSTRUCTIONS,
    SME2_OFF_INSTRUCTIONS,
)
from pytest_sme2.gate.memory import MEMORY_CHECKS, memory_change, memory_margin
from pytest_sme2.gate.stats import LatencyStats, summarize
from pytest_sme2.gate.verdict import Check
from pytest_sme2.measure.profile import Profile, source_head
from pytest_sme2.report import cells as c
from pytest_sme2.report.cells import Cell, Column, Table, plain_value
from pytest_sme2.report.kernel_view import (
    executed_kernels_table,
    kernel_table,
    side_by_side_table,
    trace_evidence_table,
)
from pytest_sme2.results import (
    EMULATED,
    STATUS_ORDER,
    SessionResults,
    TestResult,
    delta_text,
    median_text,
    speedup_text,
)
from pytest_sme2.units import fmt_change, fmt_interval, fmt_ms, fmt_x

TOP_OPERATORS = 10

_CATEGORY_NOTE = ("Mean per measured run. Other = E2E − the four named categories: pooling, norms, softmax, "
                  "unmatched operators and runtime overhead, so the rows add up to E2E exactly.")
_COARSE_NOTE = ("¹ under 2% of E2E in both builds: XNNPACK times operators in whole µs, so this ratio is "
                "coarse.")
_KERNEL_HINT_NOTE = ("Kernel hints are the widest kernel of the matching kind the XNNPACK log selected; the log proves "
                     "selection, not which tile ran each call.")
_OPERATOR_KERNEL_NOTE = ("Operators are the XNNPACK log's `running operator` lines (label = operator type + "
                         "micro-kernel type) joined to the trace's operator names (the label, or the label without its "
                         "micro-kernel type). — in the operator column: the trace has no event of that name (XNNPACK "
                         "can run several operators inside one traced event).")
_SOURCES_NOTE = ("Latency: the gate's samples. Breakdown: categories, operators and bottlenecks. Kernels: the micro-"
                 "kernels XNNPACK selected, from a logging build's log (run once per model and session). See "
                 "docs/run-modes.md for the three builds.")


def _num(title: str) -> Column:
    return Column(title, numeric=True)


def _cols(*titles: str, text: int = 1) -> tuple[Column, ...]:
    """The first ``text`` columns hold words, the rest numbers."""
    return tuple(Column(t) if i < text else _num(t) for i, t in enumerate(titles))


def _table(title: str, columns: Sequence[Column], rows: Sequence[Sequence[Cell]], notes: Sequence[str] = (),
           *, keyed: bool = False) -> Table:
    return Table(title, tuple(columns), tuple(tuple(r) for r in rows), tuple(notes), keyed)


def _code_or_dash(name: str | None) -> Cell:
    return c.code(name) if name else c.text("—")


# ------------------------------------------------------------------------------------------ arms


@dataclass(frozen=True)
class Arm:
    """One measured arm of a test: its label in the report and its profile."""

    label: str
    profile: Profile

    @property
    def analysis(self) -> Analysis:
        return self.profile.analysis


def arms(test: TestResult) -> list[Arm]:
    """The measured arms, SME2 off first; labelled as the on/off comparison names them."""
    cmp = test.comparison
    out = []
    if test.profile_off is not None:
        out.append(Arm(cmp.off_label if cmp else "SME2 off", test.profile_off))
    if test.profile is not None:
        out.append(Arm(cmp.on_label if cmp else (test.profile.variant or "measured"), test.profile))
    return out


def recommendations(test: TestResult) -> tuple[Recommendation, ...]:
    """:func:`~pytest_sme2.analysis.recommendations.recommend` for one test's measurement and judgement."""
    off = test.profile_off.analysis if test.profile_off is not None else None
    return recommend(test.analysis, off=off, comparison=test.comparison, verdict=test.verdict)


# ------------------------------------------------------------------------------------ one-liners


def config_text(config: Mapping[str, Any]) -> str:
    """The user-facing options of a session on one line: ``device=host · runs=30 × blocks=5 · ...``.

    Only what decides how the numbers were taken and judged (device, runs and blocks, warm-up,
    threads, margin, strict, update-baseline); runner paths, output files and other settings stay
    in the results JSON. Options the session did not record are left out.
    """

    def get(key: str) -> Any:
        return config.get(key, config.get(key.replace("_", "-")))

    def show(value: Any) -> str:
        return "yes" if value is True else "no" if value is False else str(value)

    parts = [f"device={get('device')}"] if get("device") is not None else []
    size = [f"{key}={get(key)}" for key in ("runs", "blocks") if get(key) is not None]
    if size:
        parts.append(" × ".join(size))
    parts += [f"{key}={get(key)}" for key in ("warmup", "threads") if get(key) is not None]
    margin = get("margin")  # in percent, as --sme2-margin takes it
    if isinstance(margin, (int, float)) and not isinstance(margin, bool):
        parts.append(f"margin={margin:g}%")
    elif margin is not None:
        parts.append(f"margin={margin}")
    parts += [f"{key.replace('_', '-')}={show(get(key))}" for key in ("strict", "update_baseline")
              if get(key) is not None]
    return " · ".join(parts)


def nested_device_identity(facts: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``device_identity`` (or ``identity``) mapping nested in a profile's identity or device facts; a bare
    string is its summary. (Not :func:`pytest_sme2.device.identity.identity_of`, which builds an identity.)"""
    for key in ("device_identity", "identity"):
        value = facts.get(key)
        if isinstance(value, Mapping):
            return value
        if isinstance(value, str) and value:
            return {"summary": value}
    return None


def device_summary(device: Mapping[str, Any], identity: Mapping[str, Any]) -> str:
    """One line naming the device: the device identity's own summary when the profile's identity has one."""
    src = {**identity, **{k: v for k, v in device.items() if v not in (None, "", [], {})}}
    identity = nested_device_identity(src) or {}
    sme2 = src.get("sme2")
    sme2_text = "" if sme2 is None else "SME2: " + ("yes" if sme2 else "no")
    summary = identity.get("summary") or identity.get("description")
    if summary:
        known = "sme2" in str(summary).lower()
        return ", ".join(p for p in (str(summary), "" if known else sme2_text) if p)
    parts = [str(identity[k]) for k in ("vendor", "family", "model", "stepping") if identity.get(k)]
    for key in ("product", "model", "name", "soc", "cpu_name", "cpu_model", "arch", "os_version"):
        if src.get(key):
            parts.append(str(src[key]))
    cores = src.get("logical_cpus") or src.get("cores")
    if cores:
        parts.append(f"{cores} cores")
    if sme2_text:
        parts.append(sme2_text)
    return ", ".join(dict.fromkeys(parts)) or "—"


def _looks_like_path(source: str) -> bool:
    return "/" in source or "\\" in source or source.endswith((".etdump", ".etdp", ".bin"))


def _arm_sources(arm: Arm) -> str:
    """What one arm's numbers were read from: its trace(s) and XNNPACK log, or the runner's timings."""
    p, a = arm.profile, arm.analysis
    traces = [str(r.trace_path) for r in p.runs if r.trace_path is not None]
    pte_name = str(p.model.get("pte_path", "")).replace("\\", "/").rsplit("/", 1)[-1]
    if not traces and a.source and a.source != pte_name and _looks_like_path(a.source):
        traces = [a.source]
    if traces:
        what = f"trace `{traces[0]}`"
        if len(traces) > 1:
            what += f" and {len(traces) - 1} more block(s)"
    elif a.per_operator:
        what = f"trace of {a.source or 'unknown source'}"
    else:
        what = f"E2E times measured by the {p.runner} runner (no trace)"
    log = a.kernel_log.get("source") if a.kernel_log else None
    if log:
        what += f", XNNPACK log `{log}`"
    return what


def analyzed_text(test: TestResult) -> str:
    """What was analyzed: the model and its ``.pte``, then each arm's trace (or timings) and log.

    Lines are separated by newlines; paths are ```code``` spans.
    """
    info = test.model_info
    head = test.label if test.label != test.test_id else ""
    pte = info.get("pte_path")
    if pte:
        head = f"{head}, `{pte}`" if head else f"`{pte}`"
    lines = [head] if head else []
    measured = arms(test)
    for arm in measured:
        prefix = f"{arm.label}: " if len(measured) > 1 or test.comparison is not None else ""
        lines.append(prefix + _arm_sources(arm))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- sources

_SOURCE_ROWS: tuple[tuple[str, str], ...] = (
    ("Latency", "latency_source"), ("Breakdown", "breakdown_source"), ("Kernels", "kernel_source"),
)


def sources_table(test: TestResult) -> Table | None:
    """Where each arm's latency, breakdown and kernel table came from (which build, which runs, which log)."""
    measured = arms(test)
    if not measured:
        return None
    rows = [[c.text(title), *[c.text(getattr(arm.profile, attr) or "—") for arm in measured]]
            for title, attr in _SOURCE_ROWS]
    # How the runs were blocked: "Runs measured" alone reads as 10 per block where a portable program's blocks after
    # the first ran 3, or a measurement stopped early once precise or settled.
    rows.append([c.text("Blocks"), *[c.text(blocks_text(arm.profile) or "—") for arm in measured]])
    columns = [Column(""), *[Column(arm.label) for arm in measured]]
    return _table("Where the numbers come from", columns, rows, (_SOURCES_NOTE,))


def blocks_text(profile: Profile | None) -> str:
    """The blocks a measurement ran, against what was asked: ``"6 of up to 15: runs 10, 3 × 5 (10 asked)"`` (it
    stopped early, and its blocks after the first were sized to the model), ``"15: 10 runs each"``; "" when the
    profile does not say."""
    if profile is None or not profile.block_sizes:
        return ""
    sizes, asked = profile.block_sizes, profile.measurement
    head = f"{len(sizes)}"
    if asked is not None and len(sizes) < asked.blocks:
        head += f" of up to {asked.blocks}"
    groups = [(n, len(list(same))) for n, same in itertools.groupby(sizes)]
    if len(groups) == 1:
        runs = f"{sizes[0]} runs each"
    else:
        runs = "runs " + ", ".join(f"{n} × {k}" if k > 1 else f"{n}" for n, k in groups)
    if asked is not None and any(n != asked.runs for n in sizes):
        runs += f" ({asked.runs} asked)"
    return f"{head}: {runs}"


def source_summary(profile: Profile) -> str:
    """One short line: ``latency: timing build · breakdown: trace build · kernels: log build``."""
    parts = [(name, getattr(profile, attr)) for name, attr in (("latency", "latency_source"),
                                                                ("breakdown", "breakdown_source"),
                                                                ("kernels", "kernel_source"))]
    return " · ".join(f"{name}: {source_head(value)}" for name, value in parts if value)


# ------------------------------------------------------------------------------------- kernels


def arm_kernel_logs(test: TestResult) -> list[tuple[Arm, KernelLog]]:
    """The measured arms that have an XNNPACK kernel log, with it."""
    return [(arm, KernelLog.from_dict(arm.analysis.kernel_log)) for arm in arms(test) if arm.analysis.kernel_log]


def kernel_evidence_lines(test: TestResult, *, trace: bool = True, missing: bool = True) -> list[str]:
    """One line per arm: kernels selected, SME2 kernels (or none), ISAs; or, with ``missing``, why it has no log.
    ``trace``: with the trace's SME evidence lines (see :func:`evidence_lines`)."""
    lines = []
    for arm in arms(test):
        if not arm.analysis.kernel_log:
            if arm.analysis.executed_kernels is not None or not missing:
                continue  # its kernels are the ones QEMU saw executing (their line follows), or not asked for
            lines.append(f"{arm.label}: no XNNPACK log ({arm.profile.no_kernel_log or 'not recorded'}).")
            continue
        log = KernelLog.from_dict(arm.analysis.kernel_log)
        sme2 = log.sme2_kernels
        isas = ", ".join(f"{k} ({v})" for k, v in isa_counts(log).items()) or "none"
        evidence = (f"{len(sme2)} SME2 kernel{'s' if len(sme2) != 1 else ''}, e.g. `{sme2[0]}`" if sme2
                    else "no SME2 kernel")
        lines.append(f"{arm.label}: {len(log.kernels)} kernels selected; {evidence}; ISAs: {isas}.")
    return lines + evidence_lines(test, trace=trace)


def evidence_lines(test: TestResult, *, trace: bool = True) -> list[str]:
    """One line per arm and source beyond the XNNPACK log: the trace's operator names (unless ``trace`` is False),
    the kernels QEMU saw run."""
    lines = []
    for arm in arms(test):
        ev, ek = arm.analysis.trace_evidence, arm.analysis.executed_kernels
        if ev is not None and trace:
            lines.append(f"{arm.label}: trace: {ev.summary()}.")
        if ek is not None:
            sme2 = ek.sme2_functions
            ran = (f"{len(sme2)} SME2 function{'s' if len(sme2) != 1 else ''} ran, e.g. `{sme2[0].name}`" if sme2
                   else "no exported SME2 function ran")
            lines.append(f"{arm.label}: executed under QEMU: {ran} ({len(ek.functions)} exported functions in all).")
    return lines


def arm_evidence_tables(test: TestResult) -> list[Table]:
    """Per arm, its trace-evidence and executed-kernel tables (titled with the arm), those it has."""
    out = []
    for arm in arms(test):
        ev, ek = arm.analysis.trace_evidence, arm.analysis.executed_kernels
        table = trace_evidence_table(ev, title=f"Operators and the SME path, {arm.label} (trace)") if ev else None
        if table is not None:
            out.append(table)
        table = executed_kernels_table(ek, title=f"Kernels that ran, {arm.label} (QEMU)") if ek else None
        if table is not None:
            out.append(table)
    return out


def arm_kernel_tables(test: TestResult) -> list[tuple[Arm, KernelLog, Table | None]]:
    """Every arm with a log, its log and its selected kernels (kind, kernel, ISA, SME2 marked); the table is
    None when the log names no kernel (not a debug-logging build)."""
    out: list[tuple[Arm, KernelLog, Table | None]] = []
    for arm, log in arm_kernel_logs(test):
        table = kernel_table(log)
        out.append((arm, log, None if table is None else Table(
            f"Kernels selected by {arm.label} ({log.source})", table.columns, table.rows, table.notes)))
    return out


def kernel_diff_table(test: TestResult) -> Table | None:
    """Per kernel kind, what only the SME2-off arm selected, only the SME2-on arm, and both (on/off tests)."""
    logs = arm_kernel_logs(test)
    if test.profile_off is None or len(logs) != 2:
        return None
    (off_arm, off), (on_arm, on) = logs
    return side_by_side_table(off, on, off_label=off_arm.label, on_label=on_arm.label)


def _kernel_cell(kernel: str | None) -> Cell:
    if not kernel:
        return c.text("—")
    sme2 = is_sme2(kernel)
    return c.text(f"`{kernel}`" + (" (SME2)" if sme2 else ""), strong=sme2)


def operator_kernel_table(test: TestResult) -> Table | None:
    """Which operator ran under which kernel kind, and the kernel that kind selected, per arm with a log.

    Rows are the log's ``running operator`` labels (union over the arms, in log order) joined to the trace's
    operator names, with calls per execution from the log and from the trace, and the trace's time per run.
    None when no arm's log has ``running operator`` lines.
    """
    logs = [(arm, log) for arm, log in arm_kernel_logs(test) if log.operator_calls]
    if not logs:
        return None
    joined = {arm.label: {k.label: k for k in operator_kernels(log, [o.name for o in arm.analysis.operator_details])}
              for arm, log in logs}
    details = {arm.label: {o.name: o for o in arm.analysis.operator_details} for arm, _ in logs}
    labels = list(dict.fromkeys(label for _, log in logs for label, _ in log.operator_calls))
    rows = []
    for label in labels:
        first = next(joined[arm.label][label] for arm, _ in logs if label in joined[arm.label])
        trace_name = next((joined[arm.label][label].etdump for arm, _ in logs
                           if label in joined[arm.label] and joined[arm.label][label].etdump), None)
        row = [_code_or_dash(trace_name), c.code(label), c.text(first.kind or "—"), c.count(first.calls_per_execution)]
        for arm, _ in logs:
            k = joined[arm.label].get(label)
            op = details[arm.label].get(k.etdump) if k is not None and k.etdump else None
            row += [_kernel_cell(k.kernel if k else None), c.count(op.count if op else None),
                    c.ms(op.total_ms if op else None)]
        rows.append(row)
    columns = [Column("operator (trace)"), Column("XNNPACK label"), Column("kernel kind"), _num("calls/exec (log)")]
    for arm, _ in logs:
        columns += [Column(f"{arm.label} kernel"), _num("calls/run (trace)"), _num("ms per run")]
    return _table("Operators by kernel kind", columns, rows, (_OPERATOR_KERNEL_NOTE, _KERNEL_HINT_NOTE))


# ------------------------------------------------------------------------------------- latency


_STAT_ROWS: tuple[tuple[str, str], ...] = (
    ("Median", "median"), ("Mean", "mean"), ("Min", "min"), ("Max", "max"), ("Std dev", "std"),
    ("P90", "p90"), ("P99", "p99"),
)


def _stat(s: LatencyStats, key: str) -> float:
    return float(getattr(s, key))


def latency_table(test: TestResult) -> Table | None:
    """E2E statistics: SME2 off vs on, baseline vs current, or one measurement."""
    cmp, a = test.comparison, test.analysis
    if cmp is not None:
        off, on = cmp.off_e2e, cmp.on_e2e
        rows = [[c.text(name), c.ms(_stat(off, k)), c.ms(_stat(on, k)),
                 c.ratio(_stat(off, k) / _stat(on, k) if _stat(on, k) > 0 else None)] for name, k in _STAT_ROWS]
        rows += [[c.text("CV"), c.share(off.cv), c.share(on.cv), c.EMPTY],
                 [c.text("Cold (run 0)"), c.ms(off.cold), c.ms(on.cold),
                  c.ratio(off.cold / on.cold if off.cold and on.cold else None)],
                 [c.text("Runs measured"), c.count(off.count), c.count(on.count), c.EMPTY]]
        return _table("E2E latency", _cols("E2E (ms)", cmp.off_label, cmp.on_label, "off / on"), rows)
    if a is None:
        return None
    s = a.e2e
    if test.baseline is not None:
        b = summarize(test.baseline.samples_ms)
        rows = [[c.text(name), c.ms(_stat(b, k)), c.ms(_stat(s, k)),
                 c.change(_stat(s, k) / _stat(b, k) if _stat(b, k) > 0 else None)] for name, k in _STAT_ROWS]
        rows += [[c.text("CV"), c.share(b.cv), c.share(s.cv), c.EMPTY],
                 [c.text("Cold (run 0)"), c.ms(None), c.ms(s.cold), c.EMPTY],
                 [c.text("Runs measured"), c.count(b.count), c.count(s.count), c.EMPTY]]
        return _table("E2E latency", _cols("E2E (ms)", "baseline", "current", "change"), rows)
    rows = [[c.text(name), c.ms(_stat(s, k))] for name, k in _STAT_ROWS]
    rows += [[c.text("CV"), c.share(s.cv)], [c.text("Cold (run 0)"), c.ms(s.cold)],
             [c.text("Runs measured"), c.count(s.count)]]
    return _table("E2E latency", _cols("E2E (ms)", "value"), rows)


# ---------------------------------------------------------------------------------- categories


def _e2e_row(*cells: Cell) -> list[Cell]:
    return [c.text("E2E (mean)", strong=True), *cells]


def analysis_category_table(a: Analysis) -> Table:
    """One measurement's categories: ms per run and share of E2E, with the E2E total."""
    rows = [[c.category(cat), c.ms(a.category_totals_ms.get(cat, 0.0)), c.share(a.category_share.get(cat))]
            for cat in CATEGORIES]
    rows.append(_e2e_row(c.ms(a.e2e.mean, strong=True), c.share(1.0)))
    return _table("Operator categories", _cols("category", "ms per run", "% of E2E"), rows, (_CATEGORY_NOTE,))


def category_table(test: TestResult) -> Table | None:
    """Operator categories: SME2 off vs on with speedups, baseline vs current, or one measurement.

    ``None`` without a per-operator trace (every millisecond would be Other).
    """
    cmp, a = test.comparison, test.analysis
    if a is None or not a.per_operator:
        return None
    if cmp is not None and cmp.per_operator:
        rows = []
        coarse = False
        for s in cmp.categories:
            mark = ""
            if not s.resolvable and math.isfinite(s.speedup):
                mark, coarse = "¹", True
            ci = s.speedup_ci
            rows.append([c.category(s.category), c.ms(s.off_ms), c.share(s.off_share), c.ms(s.on_ms),
                         c.share(s.on_share), c.delta_pp(s.share_change_pp),
                         c.ratio(s.speedup, ci.low if ci else None, ci.high if ci else None, mark=mark)])
        off_mean, on_mean = cmp.off_e2e.mean, cmp.on_e2e.mean
        rows.append(_e2e_row(c.ms(off_mean, strong=True), c.share(1.0), c.ms(on_mean, strong=True), c.share(1.0),
                             c.EMPTY, c.ratio(off_mean / on_mean if on_mean > 0 else None)))
        notes = (_CATEGORY_NOTE, _COARSE_NOTE) if coarse else (_CATEGORY_NOTE,)
        return _table("Operator categories",
                      _cols("category", f"{cmp.off_label} ms", "%", f"{cmp.on_label} ms", "%", "Δ share (pp)",
                            "emulated ratio (95% CI)" if cmp.emulated else "speedup (95% CI)"), rows, notes)
    b = test.baseline
    if b is not None and b.per_operator and b.category_totals_ms:
        b_mean = sum(b.category_totals_ms.values())
        rows = []
        for cat in CATEGORIES:
            was, now = b.category_totals_ms.get(cat, 0.0), a.category_totals_ms.get(cat, 0.0)
            rows.append([c.category(cat), c.ms(was), c.share(was / b_mean if b_mean > 0 else None), c.ms(now),
                         c.share(a.category_share.get(cat)), c.delta_ms(now - was)])
        rows.append(_e2e_row(c.ms(b_mean, strong=True), c.share(1.0), c.ms(a.e2e.mean, strong=True), c.share(1.0),
                             c.delta_ms(a.e2e.mean - b_mean)))
        return _table("Operator categories", _cols("category", "baseline ms", "%", "current ms", "%", "Δ ms"), rows,
                      (_CATEGORY_NOTE,))
    return analysis_category_table(a)


# ----------------------------------------------------------------------------------- operators


def analysis_operator_table(a: Analysis, top: int = TOP_OPERATORS, *, off: Analysis | None = None,
                            off_label: str = "") -> Table | None:
    """The ``top`` operators by time per run; with ``off``, that arm's time and the speedup too."""
    if not a.operator_details:
        return None
    before = {o.name: o for o in off.operator_details} if off is not None and off_label else {}
    rows = []
    for o in a.operator_details[:top]:
        row = [c.code(o.name), c.category(o.category), c.backend(o.backend or "—"), c.count(o.count), c.ms(o.avg_ms),
               c.ms(o.total_ms), c.share(o.share, bar=o.category)]
        if before:
            was = before.get(o.name)
            row += [c.ms(was.total_ms if was else None),
                    c.ratio(was.total_ms / o.total_ms if was and o.total_ms > 0 else None)]
        row.append(_code_or_dash(o.kernel_hint))
        rows.append(row)
    titles = ["operator", "category", "backend", "calls/run", "avg ms/call", "ms per run", "% of E2E"]
    if before:
        titles += [f"{off_label} ms", "speedup"]
    columns = [*_cols(*titles, text=3), Column("kernel hint")]
    shown = min(top, len(a.operator_details))
    return _table(f"Top operators ({shown} of {len(a.operator_details)}), mean per measured run", columns, rows,
                  (_KERNEL_HINT_NOTE,))


def operator_table(test: TestResult, top: int = TOP_OPERATORS) -> Table | None:
    """The test's top operators; an on/off test also shows the SME2-off time and the speedup."""
    a = test.analysis
    if a is None:
        return None
    off = test.profile_off.analysis if test.profile_off is not None else None
    label = test.comparison.off_label if test.comparison is not None else ""
    return analysis_operator_table(a, top, off=off, off_label=label)


def bottleneck_table(test: TestResult) -> Table | None:
    """Categories and operators above 5 % of E2E, with the SME2-off share when there is one."""
    a = test.analysis
    if a is None or not a.per_operator or not a.bottlenecks:
        return None
    off = test.profile_off.analysis if test.profile_off is not None and test.comparison is not None else None
    off_share: dict[str, float] = {}
    if off is not None:
        off_share.update({o.name: o.share for o in off.operator_details})
        off_share.update(off.category_share)
    rows = []
    for b in sorted(a.bottlenecks, key=lambda b: -b.share):
        row = [c.text(b.kind), c.code(b.name) if b.kind != "category" else c.text(b.name), c.ms(b.total_ms),
               c.share(b.share)]
        if off is not None:
            row.append(c.share(off_share.get(b.name)))
        row.append(c.text(b.advice))
        rows.append(row)
    titles = ["kind", "name", "ms per run", "% of E2E"]
    if off is not None and test.comparison is not None:
        titles.append(f"% with {test.comparison.off_label}")
    columns = [*_cols(*titles, text=2), Column("what to look at")]
    return _table(f"Bottlenecks (> {BOTTLENECK_SHARE:.0%} of E2E)", columns, rows)


def _kernel_change(before: str | None, after: str | None) -> Cell:
    if not before and not after:
        return c.text("—")
    if before == after:
        return c.text(f"`{after}` (same)")
    return c.text(f"{f'`{before}`' if before else '—'} → {f'`{after}`' if after else '—'}")


def accelerated_table(cmp: OnOffComparison, n: int = 8) -> Table | None:
    """Operators that saved the most time per run (at least 1.10× faster)."""
    top = cmp.top_accelerated(n)
    if not top:
        return None
    rows = [[c.code(o.name), c.category(o.category), c.ms(o.off_ms), c.ms(o.on_ms), c.ratio(o.speedup),
             c.ms(o.saved_ms), _kernel_change(o.kernel_off, o.kernel_on)] for o in top]
    columns = [*_cols("operator", "category", f"{cmp.off_label} ms", f"{cmp.on_label} ms", "speedup", "saved ms",
                      text=2), Column("kernel hint (off → on)")]
    return _table("Top accelerated operators", columns, rows)


def not_accelerated_table(cmp: OnOffComparison) -> Table | None:
    """Operators under 1.10× that still weigh at least 1 % of E2E with SME2 on."""
    slow = cmp.not_accelerated()
    if not slow:
        return None
    rows = [[c.code(o.name), c.category(o.category), c.backend(o.backend or "—"), c.ms(o.off_ms), c.ms(o.on_ms),
             c.ratio(o.speedup), c.share(o.on_share)] for o in slow]
    return _table(f"Not accelerated (under {NOT_ACCELERATED:.2f}×)",
                  _cols("operator", "category", "backend", f"{cmp.off_label} ms", f"{cmp.on_label} ms", "speedup",
                        f"% of E2E ({cmp.on_label})", text=3), rows)


def portable_split_table(test: TestResult) -> Table | None:
    """Time per run on delegated and portable operators and in the runtime, per arm."""
    measured = [arm for arm in arms(test) if arm.analysis.per_operator]
    if not measured:
        return None
    rows = []
    for what, key in (("Delegated (XNNPACK / backend)", "delegated"), ("Portable (not delegated)", "portable"),
                      ("Runtime overhead (E2E − operators)", "overhead")):
        row = [c.text(what)]
        for arm in measured:
            a = arm.analysis
            mean = a.e2e.mean
            value = {"delegated": a.delegated_ms, "portable": a.portable_ms,
                     "overhead": mean - a.delegated_ms - a.portable_ms}[key]
            row += [c.ms(value), c.share(value / mean if mean > 0 else None)]
        rows.append(row)
    titles = [""]
    for arm in measured:
        titles += [f"{arm.label} ms", "%"]
    return _table("Portable vs delegated", _cols(*titles), rows)


def portable_operator_table(test: TestResult) -> Table | None:
    """Every operator on the portable kernels, with its share in both arms of an on/off test."""
    measured = [arm for arm in arms(test) if arm.analysis.per_operator]
    if not measured:
        return None
    current = measured[-1]
    portable = [o for o in current.analysis.operator_details if o.backend == "portable"]
    if not portable:
        return None
    before = {o.name: o for o in measured[0].analysis.operator_details} if len(measured) > 1 else {}
    rows = []
    for o in portable:
        row = [c.code(o.name), c.category(o.category), c.count(o.count), c.ms(o.total_ms), c.share(o.share)]
        if before:
            was = before.get(o.name)
            row.append(c.share(was.share if was else None))
        rows.append(row)
    titles = ["portable operator", "category", "calls/run", "ms per run", f"% of E2E ({current.label})"]
    if before:
        titles.append(f"% ({measured[0].label})")
    return _table("Portable operators", _cols(*titles, text=2), rows)


# -------------------------------------------------------------------------------------- verdict


def _check_change(check: Check) -> str:
    iv = check.interval
    if iv is None:
        return "—"
    if check.name in ("speedup", "min_speedup"):
        return fmt_interval(iv.estimate, iv.low, iv.high, fmt_x)
    if check.name.endswith("_budget"):
        return fmt_interval(iv.estimate, iv.low, iv.high, fmt_ms, unit=" ms")
    return fmt_interval(iv.estimate, iv.low, iv.high, fmt_change)


def _check_margin(check: Check) -> str:
    if check.name in ("speedup", "min_speedup"):
        return f"≥ {fmt_x(check.margin)}" if check.margin is not None else "—"
    if check.name.endswith("_budget"):
        return f"≤ {fmt_ms(check.baseline)} ms"
    return f"±{check.margin * 100:.1f}%" if check.margin is not None else "—"


def _count_change(check: Check) -> str:
    """``1,673,616 -> 767,054 instructions`` (executed under emulation; a count, never ms)."""
    if check.baseline is None or check.candidate is None:
        return "—"
    base, cur = round(check.baseline), round(check.candidate)
    if check.name == SME2_OFF_INSTRUCTIONS:
        return f"{cur:,} SME instructions in the SME2-off arm"
    if check.name == SME2_INSTRUCTIONS:
        ratio = count_ratio(base, cur)
        return f"off {base:,} -> on {cur:,} instructions" + (f" ({ratio:.3f}×)" if ratio is not None else "")
    return f"{base:,} -> {cur:,} instructions" + (f" ({(cur - base) / base * 100:+.3f}%)" if base else "")


def _count_margin(check: Check) -> str:
    if check.name not in (INSTRUCTIONS, INSTRUCTIONS_OFF):
        return "—"
    return f"+{check.margin * 100:g}%" if check.margin else "exact"


def all_checks(test: TestResult) -> list[Check]:
    """The verdict's checks, plus the on/off speedup check when the verdict does not hold it."""
    checks = list(test.verdict.checks) if test.verdict is not None else []
    cmp = test.comparison
    if cmp is not None and all(x.name != cmp.speedup_check.name for x in checks):
        checks.append(cmp.speedup_check)
    return checks


def checks_table(test: TestResult) -> Table | None:
    """One row per check: status, baseline and current value, the change with its CI, the margin."""
    checks = all_checks(test)
    if not checks:
        return None
    rows = []
    for x in checks:
        budget = x.name.endswith("_budget")
        if x.name in MEMORY_CHECKS:  # bytes, not ms: the change column says it with its units
            rows.append([c.code(x.name), c.status(x.status.value, note="advisory" if x.advisory else ""),
                         c.ms(None), c.ms(None), c.text(memory_change(x)), c.text(memory_margin(x)), c.text("—")])
            continue
        if x.name in INSTRUCTION_CHECKS:  # counts, not ms: the change column says them as counts
            rows.append([c.code(x.name), c.status(x.status.value, note="advisory" if x.advisory else ""),
                         c.ms(None), c.ms(None), c.text(_count_change(x)), c.text(_count_margin(x)), c.text("—")])
            continue
        rows.append([c.code(x.name), c.status(x.status.value, note="advisory" if x.advisory else ""),
                     c.ms(None if budget else x.baseline), c.ms(x.candidate), c.text(_check_change(x)),
                     c.text(_check_margin(x)), c.text(f"{x.p_value:.2g}" if x.p_value is not None else "—")])
    columns = [Column("check"), Column("status"), *_cols("baseline ms", "current ms", "change (95% CI)", "margin", "p",
                                                         text=0)]
    return _table("Verdict checks", columns, rows)


# ----------------------------------------------------------------------------------- identity

#: Identity keys the runner rows already show.
_SHOWN_WITH_RUNNER = frozenset({"runner", "runner_path", "variant", "threads", "extra"})


def _runner_line(p: Profile) -> str:
    runner_path = p.identity.get("runner_path")
    where = f" (`{runner_path}`)" if runner_path and runner_path != p.runner else ""
    return f"{p.runner} · {p.build or 'build unknown'}{where} · {p.threads} thread{'s' if p.threads != 1 else ''}"


def identity_table(test: TestResult) -> Table | None:
    """Device and runner facts: a one-line device summary, each arm's runner, then every identity key.

    Keys are whatever the profile's ``device`` and ``identity`` mappings carry (nothing is
    assumed present); nested values are written on one line (:func:`~.cells.plain_value`), and a
    ``device_identity`` mapping is summarized on top and listed without its summary below.
    """
    rows: list[list[Cell]] = []
    p = test.profile or test.profile_off
    if p is not None:
        rows.append([c.text("Device"), c.text(device_summary(p.device, p.identity), strong=True)])
    for arm in arms(test):
        name = f"Runner ({arm.label})" if (test.comparison is not None or arm.profile.variant) else "Runner"
        rows.append([c.text(name), c.text(_runner_line(arm.profile))])
    if p is not None:
        seen: set[str] = set()
        for key, value in [*p.device.items(), *p.identity.items()]:
            if key in seen or key in _SHOWN_WITH_RUNNER or value in (None, "", [], {}):
                continue
            seen.add(key)
            shown = value
            if key in ("device_identity", "identity"):
                # The Device row above carries its summary; the rest of the identity is listed here.
                if isinstance(value, str):
                    continue
                if isinstance(value, Mapping):
                    shown = {k: v for k, v in value.items() if k not in ("summary", "description")}
                if not shown:
                    continue
            rows.append([c.text(str(key)), c.text(plain_value(shown))])
    b = test.baseline
    if b is not None:
        rows.append([c.text("Baseline"), c.text(f"{len(b.samples_ms)} samples in {len(b.block_sizes)} blocks, "
                                                   f"created {b.created or 'unknown'}")])
        if test.baseline_path:
            rows.append([c.text("Baseline file"), c.code(test.baseline_path)])
    if not rows:
        return None
    return _table("Device and runner identity", (Column(""), Column("")), rows, keyed=True)


# ------------------------------------------------------------------------------ session tables


def summary_table(results: SessionResults) -> Table:
    """One row per test, problems first: median, p90, change vs baseline, SME2 speedup, verdict."""
    order = {s: i for i, s in enumerate(STATUS_ORDER)}
    rows = []
    for t in sorted(results.tests, key=lambda t: (order.get(t.status, len(order)), t.test_id)):
        h = t.headline
        median = c.Cell(c.Kind.MS, h.median_ms, note=EMULATED if h.emulated else "")
        rows.append([c.code(t.test_id), c.text(t.label), median, c.ms(h.p90_ms), c.text(delta_text(h)),
                     c.text(speedup_text(h.speedup, emulated=h.emulated)), c.Cell(c.Kind.STATUS, h.status,
                                                                                  strong=True)])
    columns = [Column("test"), Column("model"), _num("median ms"), _num("p90 ms"), Column("vs baseline (95% CI)"),
               Column("speedup off → on (95% CI)"), Column("verdict")]
    return _table("Summary", columns, rows)


def session_names(sessions: Sequence[SessionResults]) -> list[str]:
    """A column name per session: its device, numbered when two sessions share one."""
    names: list[str] = []
    for i, r in enumerate(sessions, 1):
        name = r.device_label
        names.append(f"{name} #{i}" if name in names else name)
    return names


def devices_table(sessions: Sequence[SessionResults], names: Sequence[str]) -> Table:
    rows = []
    for name, r in zip(names, sessions, strict=True):
        p = next((t.profile for t in r.tests if t.profile is not None), None)
        dev = device_summary(p.device, p.identity) if p is not None else "—"
        et = r.environment.get("executorch_version") or next(
            (t.model_info.get("executorch_version") for t in r.tests if t.model_info.get("executorch_version")), "—")
        rows.append([c.text(name), c.text(dev), c.count(len(r.tests)), c.text(r.created or "—"), c.text(str(et))])
    return _table("Devices", _cols("device", "details", "tests", "date (UTC)", "ExecuTorch", text=5), rows)


def results_matrix(sessions: Sequence[SessionResults], names: Sequence[str]) -> Table:
    """One row per test, one column per session: median, SME2 speedup, change and status."""
    test_ids = list(dict.fromkeys(t.test_id for r in sessions for t in r.tests))
    rows = []
    for tid in test_ids:
        label = next(t.label for r in sessions for t in r.tests if t.test_id == tid)
        row = [c.code(tid), c.text(label)]
        for r in sessions:
            t = next((t for t in r.tests if t.test_id == tid), None)
            if t is None:
                row.append(c.text("—"))
                continue
            h = t.headline
            parts = [median_text(h)]
            if h.speedup is not None:
                parts.append(f"{fmt_x(h.speedup.estimate)} {'emulated ratio' if h.emulated else 'SME2'}")
            if h.delta_pct is not None:
                parts.append(f"{h.delta_pct:+.1f}%")
            parts.append(h.status)
            row.append(c.text(" · ".join(parts)))
        rows.append(row)
    return _table("Results across devices", _cols("test", "model", *names, text=2 + len(names)), rows)


def category_shares_table(sessions: Sequence[SessionResults], names: Sequence[str]) -> Table | None:
    """Category shares of each test on each device (tests with a per-operator trace only)."""
    test_ids = list(dict.fromkeys(t.test_id for r in sessions for t in r.tests))
    rows = []
    for tid in test_ids:
        for name, r in zip(names, sessions, strict=True):
            t = next((t for t in r.tests if t.test_id == tid), None)
            a = t.analysis if t is not None else None
            if t is None or a is None or not a.per_operator:
                continue
            rows.append([c.text(t.label), c.text(name), c.ms(a.e2e.mean),
                         *[c.share(a.category_share.get(cat)) for cat in CATEGORIES], c.text(a.dominant_category)])
    if not rows:
        return None
    columns = [Column("model"), Column("device"), _num("E2E mean ms"), *[_num(cat) for cat in CATEGORIES],
               Column("largest")]
    return _table("Where the time goes on each device", columns, rows)


def _without_device(test_id: str, device: str) -> str:
    """``t.py::test_a[toy-EmuPhone_SME2]`` -> ``t.py::test_a[toy]``: a matrix test's id without its device."""
    head, bracket, params = test_id.partition("[")
    if not bracket or not device:
        return test_id
    kept = [p for p in params.removesuffix("]").split("-") if p != device]
    return f"{head}[{'-'.join(kept)}]" if kept else head


def device_matrix(results: SessionResults) -> Table | None:
    """The lab's tests by device (``--sme2-pool``): one row per test (a matrix test's devices in one row), one column
    per device of the pool that ran one; a cell gives the median, the SME2 speedup where the test measured SME2 on and
    off, and the status. None when no test ran on a pool device."""
    tests = [t for t in results.tests if t.device]
    if not tests:
        return None
    devices = sorted({t.device for t in tests})
    sme2: dict[str, Any] = {}
    for t in tests:
        if t.profile is not None and t.device not in sme2:
            sme2[t.device] = t.profile.device.get("sme2")
    has: dict[Any, str] = {True: "SME2", False: "no SME2"}
    titles = [f"{d} ({has.get(sme2.get(d), 'SME2 unknown')})" for d in devices]
    rows_by_test: dict[str, dict[str, TestResult]] = {}
    for t in tests:
        rows_by_test.setdefault(_without_device(t.test_id, t.device), {})[t.device] = t
    rows = []
    for tid, by_device in rows_by_test.items():
        row = [c.code(tid)]
        for d in devices:
            ran = by_device.get(d)
            if ran is None:
                row.append(c.text("—"))
                continue
            h = ran.headline
            parts = [median_text(h)] if h.median_ms is not None else []
            if h.speedup is not None:
                parts.append(f"SME2 {fmt_x(h.speedup.estimate)}" + (" emulated" if h.emulated else ""))
            parts.append(h.status)
            row.append(c.text(" · ".join(parts)))
        rows.append(row)
    return _table("Tests by device", _cols("test", *titles, text=1 + len(devices)), rows)
