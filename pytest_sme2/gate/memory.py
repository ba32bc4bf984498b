"""How memory and size of a program are judged (the numbers themselves are read in :mod:`pytest_sme2.evidence.memory`).

Four kinds of number, each with its own meaning and its own rule in the gate:

- **Planned memory** (``planned_bytes``): the buffers the program's memory plan asks the runtime to allocate, one
  size per planned buffer, as ``MethodMeta::memory_planned_buffer_size(i)`` reports them. They are read from the
  ``.pte`` itself (:func:`planned_buffers`: ``ExecutionPlan.non_const_buffer_sizes[1:]``, the field MethodMeta
  reads; the Python runtime's ``MethodMeta`` does not expose it), so they are exact and noise-free, the same on
  every runner; pytest-sme2's own runner prints what MethodMeta said (``sme2_runner planned_memory:``) and the
  profile keeps it as a cross-check. A change is judged exactly (default: 0 % growth allowed, every byte
  reported). An unchanged artifact cannot change it: if it does, that is a bug (:data:`Status.BUG`), not drift.
- **Program size** (:class:`ProgramSize`): the ``.pte`` in bytes, and how much of it is constant data (constant
  tensors and named data, e.g. XNNPACK's weights) and delegate payloads. Reported, not gated.
- **Load time** (``load_ms``): program + method load, once per block (every block is a new load: a runner process,
  or a fresh load on the local runtime), so it is a repeated metric with as many samples as blocks. Reported.
- **Peak memory** (``peak_kb``): the high-water mark of the process that ran the program, one per block. What it
  covers depends on the runner (:class:`PeakSource`): a runner process' own ``VmHWM`` / ``ru_maxrss`` (host,
  phone); the qemu-user process, emulator included (QEMU); the rise of this Python process' high-water mark over
  its resident set before the load, on the local runtime. It is noisy (allocator, page cache, the pages of the
  mmapped ``.pte`` touched), so it is judged with a relative margin (:data:`PEAK_MARGIN`, measured in
  ``benchmarks/memory_noise.py``) and by the comparison kind, as the latency is: an unchanged artifact whose peak
  moved is drift, never a regression. Between sessions (a ``stored`` or ``runtime`` comparison) its margin takes
  memory's own allowance (:data:`PEAK_DRIFT_ALLOWANCE`, measured), not the latency's ``--sme2-drift-allowance``:
  a peak moves 0.4 % between sessions where latency moves tens of percent. It is not measured again before a
  regression stands (latency is, :func:`pytest_sme2.gate.decide.decide`): the medians of a runner's block peaks were at
  most 0.57 % apart between sessions and its blocks 1.6 % within one, so a second measurement would repeat the first
  to well within the 5 % margin; it could only change a verdict whose true change lies within ~0.6 % of the margin.
  The local runtime's rise is reported, not gated: it is too noisy (:data:`DELTA_NOT_GATED`).

Absolute budgets (``planned_mb``, ``peak_mb``) are judged as ``p50_ms`` is for time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pytest_sme2.evidence.memory import MB, Memory, PeakSource
from pytest_sme2.gate.rule import ComparisonRule
from pytest_sme2.gate.verdict import (
    Check,
    Comparison,
    MemoryThresholds,
    Status,
    Verdict,
    overall,
)

#: Why the local runtime's peak is reported, not gated (measured: benchmarks/results/memory_noise.txt).
DELTA_NOT_GATED = ("the local runtime's rise of the Python process' high-water mark varied 6.6-20.2 MB for one "
                   "program across loads and sessions on this VM, as the allocator reuses memory freed by earlier "
                   "loads; gate peak memory on a runner process: --sme2-device=host, qemu or android")

# ------------------------------------------------------------------------------------ thresholds and checks


PLANNED = "planned_memory"
PEAK = "peak_memory"
PLANNED_BUDGET = "planned_budget"
PEAK_BUDGET = "peak_budget"
PROGRAM_SIZE = "program_size"
SME2_MEMORY = "sme2_memory"
MEMORY_CHECKS = (PLANNED, PEAK, PLANNED_BUDGET, PEAK_BUDGET, PROGRAM_SIZE, SME2_MEMORY)

#: Notes of the memory checks start with this (the terminal shows them under the test's line).
NOTE_PREFIX = "memory: "
NOT_STORED = (f"{NOTE_PREFIX}the baseline records no memory (written before pytest-sme2 measured it): planned and peak "
              "memory are not gated against it in this run; a valid run of its unchanged artifact adds them to the "
              "baseline file (its latency samples untouched), --sme2-update-baseline writes them too")
#: The note when that happened (followed by the file).
ADDED = f"{NOTE_PREFIX}added to the baseline (latency samples untouched; commit the file): "


def memory_notes(notes: Sequence[str]) -> list[str]:
    """The notes of a verdict that are about memory (for the terminal, which shows no other notes of a pass)."""
    return [n for n in notes if n.startswith(NOTE_PREFIX)]


def _b(n: float) -> str:
    return f"{int(n):,} B"


def _mb(kb: float) -> str:
    return f"{kb / 1024:.1f} MB"


def _buffers(ref: Sequence[int], cand: Sequence[int]) -> str:
    if len(ref) != len(cand):
        return f"{len(ref)} -> {len(cand)} buffers ({', '.join(map(str, ref))} -> {', '.join(map(str, cand))} B)"
    moved = [f"buffer {i}: {a:,} -> {b:,} B ({b - a:+,})" for i, (a, b) in enumerate(zip(ref, cand, strict=True))
             if a != b]
    return "; ".join(moved)


def planned_check(reference: Memory, candidate: Memory, thresholds: MemoryThresholds,
                  comparison: Comparison) -> Check:
    """Planned memory, exactly: growth beyond ``planned_growth`` is a regression; an unchanged artifact's a bug."""
    ref, cand = reference.planned_total, candidate.planned_total
    delta = cand - ref
    head = f"{_b(ref)} -> {_b(cand)} ({delta:+,} B"
    head += f", {delta / ref * 100:+.2f}%)" if ref else ")"
    detail = _buffers(reference.planned_bytes, candidate.planned_bytes)
    where = f"{head}; {detail}" if detail else head
    if comparison is Comparison.UNCHANGED:
        if reference.planned_bytes != candidate.planned_bytes:
            return Check(PLANNED, Status.BUG, (
                f"the unchanged artifact (same program, inputs and build) now plans {where}: a memory plan is part "
                "of the program, so this cannot be the machine; the baseline or this measurement is wrong (report "
                "it as a pytest-sme2 bug, with both files)"), baseline=ref, candidate=cand)
        return Check(PLANNED, Status.PASS, f"{_b(cand)} planned, as in the baseline", baseline=ref, candidate=cand)
    allowed = ref * thresholds.planned_growth
    if delta > allowed:
        limit = "no growth allowed" if not thresholds.planned_growth else (
            f"{thresholds.planned_growth * 100:g}% allowed = {int(allowed):,} B")
        return Check(PLANNED, Status.REGRESSION, f"grew: {where} ({limit})", margin=thresholds.planned_growth,
                     baseline=ref, candidate=cand)
    if delta < 0:
        return Check(PLANNED, Status.IMPROVEMENT, f"shrank: {where}", margin=thresholds.planned_growth,
                     baseline=ref, candidate=cand)
    same = "unchanged" if not delta and not detail else f"within the allowed growth: {where}"
    return Check(PLANNED, Status.PASS, f"{_b(cand)} planned, {same}" if same == "unchanged" else same,
                 margin=thresholds.planned_growth, baseline=ref, candidate=cand)


def peak_check(reference: Memory, candidate: Memory, thresholds: MemoryThresholds,
               comparison: Comparison) -> Check | None:
    """The peak's median against the reference's, with a relative margin, judged by ``comparison``'s rule.

    As for latency: an ``unchanged`` artifact whose peak moved beyond the margin is drift (the machine), never a
    regression; a ``stored`` comparison widens the margin, by memory's own between-session allowance
    (``thresholds.peak_drift_allowance``), not the latency's. None when either arm has no peak, or the two are
    different kinds of peak (they cannot be compared).
    """
    ref, cand = reference.peak_median_kb, candidate.peak_median_kb
    if ref is None or cand is None or not ref:
        return None
    if reference.peak_source is not candidate.peak_source:
        return Check(PEAK, Status.PASS, (
            f"not compared: the baseline's peak is the {reference.peak_source} kind, this one the "
            f"{candidate.peak_source} kind"), advisory=True, baseline=ref * 1024, candidate=cand * 1024)
    # The latency's rule (pytest_sme2.gate.rule), not a copy of it, with memory's own allowance between sessions.
    rule = ComparisonRule.of(comparison, thresholds.peak_drift_allowance)
    margin = rule.margin(thresholds.peak_margin)
    ratio = cand / ref
    widened = (f" ({thresholds.peak_margin * 100:g}% + {rule.drift_allowance * 100:g}% a peak may move between "
               "sessions)") if rule.drift_allowance else ""
    where = (f"median {_mb(ref)} -> {_mb(cand)} ({(ratio - 1) * 100:+.1f}%; {int(cand - ref):+,} KiB) over "
             f"{len(reference.peak_kb)} and {len(candidate.peak_kb)} blocks, margin ±{margin * 100:.1f}%{widened}")
    b, c = ref * 1024, cand * 1024  # checks carry bytes
    if candidate.peak_source is PeakSource.DELTA:
        return Check(PEAK, Status.PASS, f"{where}: reported, not gated ({DELTA_NOT_GATED})", advisory=True,
                     margin=margin, baseline=b, candidate=c)
    # A runner's peak is the median of its blocks, stable to ~1.7 % (benchmarks/memory_noise.py): judged as a point.
    status = rule.status(ratio - 1, ratio - 1, margin)
    msg = {
        Status.DRIFT: (f"the unchanged artifact peaked {'higher' if ratio > 1 else 'lower'}: {where}. Nothing under "
                       "test changed: this is the machine, not gated"),
        Status.REGRESSION: f"grew: {where}",
        Status.IMPROVEMENT: f"shrank: {where}",
    }.get(status, f"unchanged artifact: {where}" if not rule.gates else f"within the margin: {where}")
    return Check(PEAK, status, msg, margin=margin, baseline=b, candidate=c)


def budget_checks(candidate: Memory, thresholds: MemoryThresholds, *, emulated: bool = False) -> list[Check]:
    """The absolute budgets: planned total and the peak's median, each in MiB."""
    out: list[Check] = []
    if thresholds.planned_mb is not None:
        budget = thresholds.planned_mb * MB
        total = candidate.planned_total
        status = Status.REGRESSION if total > budget else Status.PASS
        out.append(Check(PLANNED_BUDGET, status, f"{_b(total)} ({total / MB:.3f} MB) planned vs budget "
                         f"{thresholds.planned_mb:g} MB", baseline=budget, candidate=total))
    if thresholds.peak_mb is not None:
        peak = candidate.peak_median_kb
        if peak is None:
            out.append(Check(PEAK_BUDGET, Status.INCONCLUSIVE, "this runner reported no peak memory: the budget "
                             f"{thresholds.peak_mb:g} MB cannot be judged"))
        elif candidate.peak_source is PeakSource.DELTA:
            out.append(Check(PEAK_BUDGET, Status.PASS, (
                f"not judged: {_mb(peak)} is the rise of this Python process, not a process' peak ({DELTA_NOT_GATED})"),
                advisory=True, candidate=peak * 1024))
        elif emulated or candidate.peak_source is PeakSource.EMULATOR:
            out.append(Check(PEAK_BUDGET, Status.PASS, (
                f"not judged: {_mb(peak)} is the emulator's process (qemu-user), not a device's; the budget "
                f"{thresholds.peak_mb:g} MB is for a device"), advisory=True, candidate=peak * 1024))
        else:
            worst, best = max(candidate.peak_kb), min(candidate.peak_kb)
            budget_kb = thresholds.peak_mb * 1024
            # Every block over the budget: a regression; every block under it: a pass; split: not settled.
            status = (Status.REGRESSION if best > budget_kb else Status.PASS if worst <= budget_kb
                      else Status.INCONCLUSIVE)
            out.append(Check(PEAK_BUDGET, status, (
                f"peak median {_mb(peak)} (blocks {_mb(best)} .. {_mb(worst)}) vs budget {thresholds.peak_mb:g} MB "
                f"({candidate.peak_source})"), baseline=budget_kb * 1024, candidate=peak * 1024))
    return out


def _size(n: float) -> str:
    return f"{n:,.0f} B" if abs(n) < MB else f"{n / MB:.2f} MB"


def memory_change(check: Check) -> str:
    """A memory check's change for a table (its values are bytes): ``16,896 B -> 21,120 B (+4,224 B)``."""
    b, c = check.baseline, check.candidate
    if check.name in (PLANNED_BUDGET, PEAK_BUDGET):
        return f"{_size(c)} of {_size(b)}" if b is not None and c is not None else "—"
    if b is None or c is None:
        return "—"
    return f"{_size(b)} → {_size(c)} ({c - b:+,.0f} B)" if abs(c - b) < MB else f"{_size(b)} → {_size(c)}"


def memory_margin(check: Check) -> str:
    if check.name == PLANNED:
        return "exact (0 B)" if not check.margin else f"+{check.margin * 100:g}%"
    if check.name == PEAK and check.margin is not None:
        return f"±{check.margin * 100:.1f}%"
    if check.name in (PLANNED_BUDGET, PEAK_BUDGET) and check.baseline is not None:
        return f"≤ {_size(check.baseline)}"
    return "—"


def size_check(reference: Memory, candidate: Memory) -> Check | None:
    """The ``.pte``'s size against the reference's: reported (advisory), never gated."""
    if reference.size is None or candidate.size is None:
        return None
    r, c = reference.size, candidate.size
    if r == c:
        return None
    return Check(PROGRAM_SIZE, Status.PASS, (
        f".pte {_b(r.pte_bytes)} -> {_b(c.pte_bytes)} ({c.pte_bytes - r.pte_bytes:+,} B); constant data "
        f"{c.constant_bytes - r.constant_bytes:+,} B, delegate payloads {c.delegate_bytes - r.delegate_bytes:+,} B"
        " (reported, not gated)"), advisory=True, baseline=r.pte_bytes, candidate=c.pte_bytes)


def on_off_check(off: Memory, on: Memory) -> Check:
    """SME2 on vs off: same program, two runner builds; XNNPACK packs weights for its SME2 kernels differently."""
    parts = [f"planned {_b(on.planned_total)} both" if on.planned_bytes == off.planned_bytes
             else f"planned off {_b(off.planned_total)}, on {_b(on.planned_total)}"]
    a, b = off.peak_median_kb, on.peak_median_kb
    if a is not None and b is not None:
        parts.append(f"peak off {_mb(a)}, on {_mb(b)} ({b - a:+,.0f} KiB, {(b / a - 1) * 100:+.1f}%: packed weights "
                     "and workspace of the SME2 kernels vs the others)")
    return Check(SME2_MEMORY, Status.PASS, "; ".join(parts) + " (reported, not gated)", advisory=True,
                 baseline=a * 1024 if a is not None else None, candidate=b * 1024 if b is not None else None)


def memory_checks(reference: Memory | None, candidate: Memory | None, thresholds: MemoryThresholds,
                  comparison: Comparison | None, *, emulated: bool = False,
                  off: Memory | None = None) -> tuple[list[Check], list[str]]:
    """(checks, notes) for ``candidate`` against ``reference`` (None = nothing stored: budgets only)."""
    notes: list[str] = []
    if candidate is None:
        return [], notes
    checks = budget_checks(candidate, thresholds, emulated=emulated)
    if comparison is not None:
        if reference is None:
            notes.append(NOT_STORED)
        else:
            checks.append(planned_check(reference, candidate, thresholds, comparison))
            peak = peak_check(reference, candidate, thresholds, comparison)
            if peak is not None:
                checks.append(peak)
            size = size_check(reference, candidate)
            if size is not None:
                checks.append(size)
    if candidate.runner_planned_bytes is not None and candidate.runner_planned_bytes != candidate.planned_bytes:
        checks.append(Check(PLANNED, Status.BUG, (
            f"the runner's MethodMeta says {list(candidate.runner_planned_bytes)} B, the .pte's memory plan "
            f"{list(candidate.planned_bytes)} B: one of the two readers is wrong (report it as a pytest-sme2 bug)")))
    if off is not None:
        checks.append(on_off_check(off, candidate))
    return checks, notes


def with_memory(verdict: Verdict, reference: Memory | None, candidate: Memory | None, thresholds: MemoryThresholds,
                *, emulated: bool = False, off: Memory | None = None) -> Verdict:
    """``verdict`` with the memory checks added (and its status recomputed): the one call the judge makes.

    The comparison kind is the verdict's own (None = a first run: budgets only). An invalid latency measurement
    does not make planned memory invalid: it is read from the program, so it is judged all the same.
    """
    checks, notes = memory_checks(reference, candidate, thresholds, verdict.comparison,
                                  emulated=emulated, off=off)
    if not checks and not notes:
        return verdict
    all_checks = (*verdict.checks, *checks)
    return replace(verdict, checks=all_checks, status=overall(all_checks), notes=(*verdict.notes, *notes))
