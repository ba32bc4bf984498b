"""The ``sme2 performance`` section at the end of the terminal output: one line per test, then the counts."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_sme2.plugin.records import RESULTS_KEY
from pytest_sme2.plugin.session import worker_id


def write_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line per test (status, the one current median, change vs baseline, SME2 speedup), then why."""
    records = config.stash.get(RESULTS_KEY, [])
    if not records or worker_id(config) is not None:
        return
    from pytest_sme2.gate.memory import memory_notes
    from pytest_sme2.gate.verdict import TIME_NOT_GATED, Status
    from pytest_sme2.report.instructions import instruction_notes, instructions_line
    from pytest_sme2.report.memory import memory_line
    from pytest_sme2.results import (
        BASELINE_WRITTEN,
        FAILED,
        RECORDED,
        SKIPPED,
        TestResult,
        delta_text,
        median_text,
        speedup_text,
    )

    tr = terminalreporter
    tr.write_sep("=", "sme2 performance")
    tests = [TestResult.from_dict(r) for r in records]
    for t in tests:
        h = t.headline
        line = f"{h.status.upper():<16} {t.test_id}" + (f" on {t.device}" if t.device else "")
        if h.median_ms is not None:
            line += f"  median {median_text(h, 4)}"
            if t.samples_label != "first measurement":
                line += f" ({t.samples_label})"
        if h.delta_pct is not None:
            line += f"  delta {delta_text(h)}"
        if h.speedup is not None:
            line += f"  {h.speedup_label} {speedup_text(h.speedup, emulated=h.emulated)}"
        bad = (Status.REGRESSION.value, Status.BUG.value, FAILED)
        markup = {"red": True} if h.status in bad or t.outcome == FAILED else (
            {"yellow": True} if h.status in (Status.INCONCLUSIVE.value, Status.INVALID.value, Status.DRIFT.value,
                                             SKIPPED)
            else {"green": True})
        tr.write_line(line, **markup)
        memory = memory_line(t)
        if memory:
            tr.write_line(f"    {memory}")
        for note in memory_notes(t.verdict.notes if t.verdict else ()):
            tr.write_line(f"    {note}", yellow=True)
        counted = instructions_line(t)
        if counted:
            tr.write_line(f"    {counted}")
        for note in instruction_notes(t.verdict.notes if t.verdict else ()):
            tr.write_line(f"    {note}", yellow=True)
        for warning in t.warnings:
            tr.write_line(f"    warning: {warning}", yellow=True)
        for detail in _details(t, h.status, (BASELINE_WRITTEN, RECORDED, SKIPPED), verbose=config.get_verbosity() > 0):
            tr.write_line(f"    {detail}")
    counts: dict[str, int] = {}
    for t in tests:
        counts[t.status] = counts.get(t.status, 0) + 1
    tr.write_line("sme2 verdicts: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    _device_matrix(tr, config, records)
    from pytest_sme2.options import Sme2Options
    from pytest_sme2.plugin.records import EXPORT_POOL_KEY, OPTIONS_KEY
    from pytest_sme2.plugin.reports import nothing_gated

    exports = [r["model_override"] for r in records if "export_cached" in (r.get("model_override") or {})]
    fresh = [m for m in exports if not m["export_cached"]]
    pool = config.stash.get(EXPORT_POOL_KEY, None)
    if exports:
        # Not shown while it happened on a non-terminal (a CI log): exports are where a first run spends its time.
        earlier = [m for m in exports if m["export_cached"] and not m.get("export_pool")]
        in_tests = f"{len(fresh)} exported in {sum(m['export_seconds'] for m in fresh):.1f} s"
        if pool is not None:
            in_tests = f"{pool.summary()} before measuring, {in_tests} by the tests"
        tr.write_line(f"sme2 exports: {in_tests}, {len(earlier)} from the cache")
        for line in pool.left() if pool is not None else ():
            tr.write_line(f"    left to its tests by the export pool: {line}", yellow=True)

    opts = config.stash.get(OPTIONS_KEY, Sme2Options())
    from pytest_sme2.gate.suite import together, together_line

    moved = together(records)
    if moved is not None:
        tr.write_line(together_line(moved), **({"yellow": True} if moved.explained == len(moved.moved)
                                               else {"red": True}))
    why = nothing_gated(records, opts)
    if why:
        tr.write_line(why, red=True)
    for line in new_device_lines(tests, counts.get(RECORDED, 0)):
        tr.write_line(line, yellow=True)
    if any(t.verdict is not None and TIME_NOT_GATED in t.verdict.notes for t in tests):
        tr.write_line(f"sme2: {TIME_NOT_GATED}", yellow=True)


def new_device_lines(tests: list[Any], recorded: int) -> list[str]:
    """Once per session: the devices without baselines, the devices that have them (in short), how many recorded.

    A first run on a new CPU records every test; naming the other devices under each test in full made a wall of
    text. Each test's result keeps the full differences (``other_baselines`` in the JSON; ``-v`` shows them).
    """
    from pytest_sme2.device.identity import short_name

    here: dict[str, None] = {}
    others: dict[str, set[str]] = {}
    for t in tests:
        if t.recorded or t.other_baselines:
            if t.profile is not None:
                here[short_name(t.profile.identity)] = None
            for o in t.other_baselines:
                others.setdefault(o.describe(), set()).add(t.test_id)
    if not recorded and not others:
        return []
    head = f"sme2: no baselines for this device ({', '.join(here) or 'this device'})"
    if others:
        head += "; baselines exist for: " + ", ".join(
            f"{what} [{len(ids)} test(s)]" for what, ids in sorted(others.items(), key=lambda kv: -len(kv[1])))
    if not recorded:
        return [head + " (differences in full: -v, or other_baselines in the JSON results)"]
    return [f"{head}; {recorded} test(s) recorded, not gated: the next run gates them (--sme2-fail-on=missing, the "
            "default where CI is set, makes a missing baseline fail; differences in full: -v, or other_baselines "
            "in the JSON results)"]


def _details(t: Any, status: str, noted: tuple[str, ...], *, verbose: bool = False) -> list[str]:
    """The lines under a test's summary line: what was compared with what, and why it is not a pass."""
    from pytest_sme2.gate.verdict import Status
    from pytest_sme2.store.baseline import NO_BASELINE_RECORDED

    if t.recorded and not verbose:
        # One short sentence: the session's line names the other devices (-v: the file and every difference).
        return [NO_BASELINE_RECORDED, *_sources(t)]
    if status in noted:
        full = [f"a baseline exists for {o.device} ({o.file}); differs in: {'; '.join(o.differences)}"
                for o in t.other_baselines] if verbose else []
        return (t.note.splitlines() if t.note else []) + full + _sources(t)
    v = t.verdict
    if v is None:
        return _sources(t)
    lines = []
    if v.comparison is not None:
        lines.append(f"compared with {v.comparison.description}{_blocks_text(t)}")
    if status in (Status.INCONCLUSIVE.value, Status.INVALID.value, Status.DRIFT.value):
        # Not always a failure (--sme2-fail-on, --sme2-strict), so say why here: it must not read as a pass.
        lines += [f"{c.name}: {c.message}" for c in v.checks if c.status.value == status and not c.advisory]
    return lines + _sources(t)


def _blocks_text(t: Any) -> str:
    """``"; measured in 6 blocks of up to 15"`` when the measurement took fewer blocks than asked (its median was
    precise or its verdict settled, :mod:`measure.sequential`; or a time budget: the profile's ``disturbance``
    note says which), and ``"; 3 runs per block after the first (10 asked)"`` when its blocks were sized to the
    model (``--sme2-min-block-ms`` / ``--sme2-max-block-ms``, or a time budget), else ""."""
    p = t.profile
    if p is None or p.measurement is None:
        return ""
    sizes, asked = p.block_sizes, p.measurement
    text = f"; measured in {len(sizes)} blocks of up to {asked.blocks}" if 0 < len(sizes) < asked.blocks else ""
    later = set(sizes[1:])
    if len(later) == 1 and (runs := later.pop()) != asked.runs:
        text += f"; {runs} runs per block after the first ({asked.runs} asked)"
    return text


def _sources(t: Any) -> list[str]:
    """Where each arm's latency, breakdown and kernels came from, and what its XNNPACK log says about SME2."""
    from pytest_sme2.report.tables import arms, kernel_evidence_lines, source_summary

    measured = arms(t)
    # One build per arm, traced (the local runtime, or a traced runner alone): the same line on every test, which
    # the reports carry; the terminal names the sources only when extra builds (timing, log) took part.
    extra = any(arm.profile.extra_builds for arm in measured)
    lines = [f"{arm.label + ': ' if len(measured) > 1 else ''}{source_summary(arm.profile)}" for arm in measured
             if extra and source_summary(arm.profile)]
    # The trace's SME evidence matters where SME can run: a device that reports SME2, or a trace with SME
    # operators. On an x86 host it would only repeat "0 of N on the SME path" under every test (the reports keep it).
    from pytest_sme2.device.identity import reports_sme2

    sme_relevant = any(reports_sme2(arm.profile.identity) or (arm.analysis.trace_evidence is not None
                                                                 and arm.analysis.trace_evidence.has_sme)
                       for arm in measured)
    # An arm without a log is said in the reports; under every test in the terminal it would only repeat itself.
    return lines + kernel_evidence_lines(t, trace=sme_relevant, missing=False)


def _device_matrix(tr: Any, config: pytest.Config, records: list[dict[str, Any]]) -> None:
    """With a pool (``--sme2-pool``): the tests by device, when a test ran on more than one (a matrix run)."""
    from pytest_sme2.plugin.records import OPTIONS_KEY
    from pytest_sme2.plugin.reports import results_from_records
    from pytest_sme2.report.tables import device_matrix
    from pytest_sme2.report.text import render_table

    table = device_matrix(results_from_records(records, config.stash[OPTIONS_KEY]))
    if table is not None and len(table.columns) > 2:
        tr.write_line(render_table(table))
