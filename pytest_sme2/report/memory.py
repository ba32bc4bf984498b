"""Memory beside latency in every report: one row per arm (baseline, reference, current; SME2 off and on).

Each row is a :class:`~pytest_sme2.evidence.memory.Memory` with a label; the terminal gets one line
(:func:`memory_line`), markdown a table (:func:`memory_markdown`), HTML a chart (:func:`memory_chart`: planned vs
peak per arm) and the JSON a derived view (``TestResult.memory_view``). What each number is: :mod:`evidence.memory`;
how it is judged: :mod:`gate.memory`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from pytest_sme2.evidence.memory import MB, Memory, PeakSource
from pytest_sme2.gate.memory import DELTA_NOT_GATED
from pytest_sme2.results import TestResult


@dataclass(frozen=True)
class MemoryRow:
    label: str
    memory: Memory


def memory_rows(test: TestResult) -> list[MemoryRow]:
    """Baseline (or the baseline's artifact re-measured), then the arms as measured (SME2 off before on)."""
    rows: list[MemoryRow] = []
    if test.reference is not None and test.reference.memory is not None:
        rows.append(MemoryRow("baseline (re-measured)", test.reference.memory))
    elif (test.baseline is not None and test.baseline.memory is not None and not test.baseline_written
          and not test.recorded):
        rows.append(MemoryRow("baseline", test.baseline.memory))
    cmp = test.comparison
    if test.profile_off is not None and test.profile_off.memory is not None:
        rows.append(MemoryRow(cmp.off_label if cmp else "SME2 off", test.profile_off.memory))
    if test.profile is not None and test.profile.memory is not None:
        label = cmp.on_label if cmp else ("current" if rows else (test.profile.variant or "measured"))
        rows.append(MemoryRow(label, test.profile.memory))
    return rows


def _bytes(n: int) -> str:
    return f"{n:,} B"


def _mb(kb: float | None) -> str:
    return "—" if kb is None else f"{kb / 1024:.1f} MB"


def on_off_lines(rows: list[MemoryRow]) -> list[str]:
    """SME2 off vs on (the last two rows of an on/off pair): same program and plan, other kernels and packed weights."""
    arms = [r for r in rows if not r.label.startswith("baseline")]
    if len(arms) != 2:
        return []
    (off_label, off), (on_label, on) = ((r.label, r.memory) for r in arms)
    parts = [f"planned memory {'identical' if off.planned_bytes == on.planned_bytes else 'differs'} "
             f"({_bytes(off.planned_total)} vs {_bytes(on.planned_total)}: the plan is the program's)"]
    a, b = off.peak_median_kb, on.peak_median_kb
    if a is not None and b is not None:
        parts.append(f"peak {_mb(a)} → {_mb(b)} ({b - a:+,.0f} KiB, {(b / a - 1) * 100:+.1f}%): XNNPACK packs the "
                     "weights for the kernels it picks, so the SME2 arm's packed weights and workspace differ")
        added_a, added_b = off.added_median_kb, on.added_median_kb
        if added_a is not None and added_b is not None:
            parts.append(f"above the process' start: {_mb(added_a)} → {_mb(added_b)} ({added_b - added_a:+,.0f} KiB)")
    return ["", f"**{off_label} → {on_label}:** " + "; ".join(parts) + "."]


def memory_line(test: TestResult) -> str:
    """``memory: planned 606,464 B (+0 B), peak 45.1 MB (runner process), .pte 10.2 MB, load 12.3 ms`` or ""."""
    rows = memory_rows(test)
    current = next((r.memory for r in reversed(rows)), None)
    if current is None:
        return ""
    base = rows[0].memory if len(rows) > 1 and rows[0].label.startswith("baseline") else None
    planned = f"planned {_bytes(current.planned_total)}"
    if base is not None:
        planned += f" ({current.planned_total - base.planned_total:+,} B)"
    bits = [planned]
    if current.peak_median_kb is not None:
        peak = f"peak {_mb(current.peak_median_kb)}"
        if base is not None and base.peak_median_kb:
            peak += f" ({(current.peak_median_kb / base.peak_median_kb - 1) * 100:+.1f}%)"
        bits.append(f"{peak} ({_source(current.peak_source)})")
    if current.size is not None:
        bits.append(f".pte {current.size.pte_bytes / MB:.2f} MB")
    if current.load_median_ms is not None:
        bits.append(f"load {current.load_median_ms:.2f} ms")
    return "memory: " + ", ".join(bits)


def _source(source: PeakSource | None) -> str:
    return {PeakSource.PROCESS: "runner process", PeakSource.EMULATOR: "qemu-user process, emulator included",
            PeakSource.DELTA: "rise in this process, not gated", None: "not measured"}[source]


def memory_markdown(rows: list[MemoryRow]) -> list[str]:
    """The memory table: planned (total and per buffer), .pte, constant data, load and peak medians per arm."""
    if not rows:
        return []
    out = ["| arm | planned memory | buffers | .pte | constant data | delegate payloads | load (median) | "
           "peak memory (median) | peak above start |", "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        m = r.memory
        size = m.size
        out.append(
            f"| {r.label} | {_bytes(m.planned_total)} | {', '.join(f'{b:,}' for b in m.planned_bytes)} | "
            f"{_bytes(size.pte_bytes) if size else '—'} | {_bytes(size.constant_bytes) if size else '—'} | "
            f"{_bytes(size.delegate_bytes) if size else '—'} | "
            f"{f'{m.load_median_ms:.2f} ms ({len(m.load_ms)} loads)' if m.load_median_ms is not None else '—'} | "
            f"{_mb(m.peak_median_kb)}{f' ({len(m.peak_kb)} blocks)' if m.peak_kb else ''} | "
            f"{_mb(m.added_median_kb)} |")
    out += on_off_lines(rows)
    sources = {r.memory.peak_source for r in rows if r.memory.peak_source is not None}
    out += [""] + [f"_Peak memory: {s.description}"
                   + (f". Reported, not gated: {DELTA_NOT_GATED}" if s is PeakSource.DELTA else "") + "._"
                   for s in sorted(sources, key=str)]
    out += ["_Planned memory is the program's memory plan (exact: it changes only with the program); load time is one "
            "sample per block (each block loads the program anew)._"]
    return out


def memory_chart(test: TestResult) -> str:
    """The HTML chart: planned vs peak per arm (baseline vs current; SME2 off vs on), or "" without memory."""
    from pytest_sme2.report.charts import MemoryBar, memory_bars

    rows = memory_rows(test)
    if not rows:
        return ""
    bars = [MemoryBar(r.label, r.memory.planned_total / MB,
                      r.memory.peak_median_kb / 1024 if r.memory.peak_median_kb is not None else None,
                      (min(r.memory.peak_kb) / 1024, max(r.memory.peak_kb) / 1024) if r.memory.peak_kb else None,
                      float(statistics.median(r.memory.start_kb)) / 1024 if r.memory.start_kb else None)
            for r in rows]
    source = next((r.memory.peak_source for r in reversed(rows) if r.memory.peak_source is not None), None)
    note = {PeakSource.EMULATOR: "peak: the qemu-user process, emulator included (not device memory)",
            PeakSource.DELTA: "peak: the rise of the Python process running the runtime",
            PeakSource.PROCESS: "peak: the runner process (VmHWM)"}.get(source, "") if source else ""
    return memory_bars(bars, note=note)

