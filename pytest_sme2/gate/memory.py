"""Memory and size of a program: what it plans, what its file holds, how long it loads, how high its process peaks.

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

import os
import re
import statistics
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

from pytest_sme2.errors import ExportError
from pytest_sme2.gate.rule import ComparisonRule
from pytest_sme2.gate.verdict import Check, Comparison, Status, Verdict, overall

#: Keys of ``RunResult.metadata`` a runner fills in (all optional: an absent key is "not measured").
PEAK_KB = "peak_rss_kb"
PEAK_SOURCE = "peak_source"
#: resident memory of a runner process before it opened the program (KiB): the runner and its libraries
START_KB = "rss_start_kb"
#: a reaped runner's ``ru_maxrss`` (KiB), kept for reference only: Linux carries the high-water mark of the process
#: that exec'd it into it (a runner started from a 400 MB Python process says 400 MB), so it is never the peak
RU_MAXRSS_KB = "ru_maxrss_kb"
LOAD_MS = "load_ms"
RUNNER_PLANNED = "runner_planned_bytes"

MB = 1024 * 1024

#: Default relative margin for the peak of a runner process: its peak varied at most 1.7 % between the blocks of
#: a session and 0.4 % between the medians of 5 sessions on this VM (host runner; QEMU 0.1 %), so 5 % leaves ~3x
#: headroom (benchmarks/results/memory_noise.txt). The local runtime's rise is not gated (:data:`DELTA_NOT_GATED`).
PEAK_MARGIN = 0.05

#: How far a runner process' peak may move between sessions: memory's own allowance, added to the peak margin in a
#: comparison with stored samples (``stored``, ``runtime``) in place of the latency's ``--sme2-drift-allowance``
#: (this repository's 50 % would let a +50 % peak pass). The medians of 5 real sessions were at most 0.57 % apart (host
#: runner, toy_cnn: 0.42 % from their overall median; MobileNetV3-like 0.03 %, QEMU 0.0 %:
#: benchmarks/results/memory_noise.json), so 1 % is ~1.7x the largest move measured: a stored comparison gates the peak
#: at 5 % + 1 %.
PEAK_DRIFT_ALLOWANCE = 0.01

#: Why the local runtime's peak is reported, not gated (measured: benchmarks/results/memory_noise.txt).
DELTA_NOT_GATED = ("the local runtime's rise of the Python process' high-water mark varied 6.6-20.2 MB for one "
                   "program across loads and sessions on this VM, as the allocator reuses memory freed by earlier "
                   "loads; gate peak memory on a runner process: --sme2-device=host, qemu or android")

#: ``sme2_runner planned_memory: buffers=2 total_bytes=1024 sizes=512,512`` (pytest-sme2's own runner)
RUNNER_PLANNED_LINE = re.compile(r"^sme2_runner planned_memory: buffers=(\d+) total_bytes=(\d+) sizes=([\d,]*)$", re.M)
#: ``sme2_runner vmhwm_kb: 12345`` (pytest-sme2's own runner: VmHWM of its /proc/self/status at exit)
RUNNER_PEAK_LINE = re.compile(r"^sme2_runner vmhwm_kb: (\d+)$", re.M)
#: ``sme2_runner rss_start_kb: 6000`` (its VmRSS before it opened the program)
RUNNER_START_LINE = re.compile(r"^sme2_runner rss_start_kb: (\d+)$", re.M)
#: ``Model loaded in 1.23 ms.`` (pytest-sme2's own runner)
RUNNER_LOAD_LINE = re.compile(r"Model loaded in ([0-9.eE+-]+) ms")


class PeakSource(str, Enum):
    """Which process' high-water mark a peak is, and so what it includes."""

    #: a runner process of its own: Linux ``VmHWM`` (``ru_maxrss`` is the same counter)
    PROCESS = "process"
    #: the qemu-user process running an aarch64 runner: the emulator and its translation cache are included
    EMULATOR = "emulator"
    #: the local runtime in this Python process: ``VmHWM`` after load + runs minus ``VmRSS`` before the load
    DELTA = "delta"

    def __str__(self) -> str:
        return self.value

    @property
    def description(self) -> str:
        return {
            PeakSource.PROCESS: ("peak resident memory (VmHWM) of the runner process, as it printed it: program "
                                 "load, planned arena, XNNPACK's packed weights and workspace, its libraries, the "
                                 "pages of the .pte it read"),
            PeakSource.EMULATOR: ("peak resident memory of the qemu-user process: the runner's memory plus the "
                                  "emulator and its translation cache (tens of MB): compare it only with the same "
                                  "emulated device, never with a phone"),
            PeakSource.DELTA: ("rise of this Python process' resident high-water mark (VmHWM, reset before the load) "
                               "over its resident memory before the load, through load + runs: the program load, "
                               "planned arena, XNNPACK's packed weights and workspace, input/output tensors and the "
                               ".pte pages touched; excludes the interpreter, torch and the runtime's libraries "
                               "(already resident), and memory the allocator reuses from earlier frees"),
        }[self]


# ------------------------------------------------------------------------------------ reading the .pte


class _Flat:
    """Just enough of a flatbuffer reader for the fields of ExecuTorch's ``program.fbs`` needed here."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def u32(self, pos: int) -> int:
        return int(struct.unpack_from("<I", self.data, pos)[0])

    def root(self) -> int:
        return self.u32(0)

    def field(self, table: int, index: int) -> int | None:
        """Absolute position of field ``index`` of ``table``, None when absent."""
        vtable = table - int(struct.unpack_from("<i", self.data, table)[0])
        vt_size = int(struct.unpack_from("<H", self.data, vtable)[0])
        slot = 4 + 2 * index
        if slot >= vt_size:
            return None
        off = int(struct.unpack_from("<H", self.data, vtable + slot)[0])
        return table + off if off else None

    def ref(self, table: int, index: int) -> int | None:
        """The table/vector/string field ``index`` refers to (absolute position), None when absent."""
        pos = self.field(table, index)
        return pos + self.u32(pos) if pos is not None else None

    def vector(self, table: int, index: int) -> tuple[int, int]:
        """(length, position of the first element) of vector field ``index``; (0, 0) when absent."""
        vec = self.ref(table, index)
        return (self.u32(vec), vec + 4) if vec is not None else (0, 0)

    def tables(self, table: int, index: int) -> list[int]:
        n, start = self.vector(table, index)
        return [start + 4 * i + self.u32(start + 4 * i) for i in range(n)]

    def scalar(self, table: int, index: int, fmt: str, default: int = 0) -> int:
        pos = self.field(table, index)
        return int(struct.unpack_from(fmt, self.data, pos)[0]) if pos is not None else default

    def string(self, table: int, index: int) -> str:
        n, start = self.vector(table, index)
        return self.data[start:start + n].decode("utf-8", "replace")


# program.fbs field indexes (the order of the fields in each table)
_PROGRAM_PLANS, _PROGRAM_CONSTANT_BUFFER, _PROGRAM_DELEGATE_DATA = 1, 2, 3
_PROGRAM_SEGMENTS, _PROGRAM_CONSTANT_SEGMENT, _PROGRAM_NAMED_DATA = 4, 5, 7
_PLAN_NAME, _PLAN_DELEGATES, _PLAN_BUFFER_SIZES = 0, 7, 8
_SEGMENT_SIZE = 1
_DELEGATE_PROCESSED = 1
_DATA_REF_LOCATION, _DATA_REF_INDEX = 0, 1
_LOCATION_SEGMENT = 1
_NAMED_DATA_SEGMENT = 1


def _read(path: Path) -> _Flat:
    """The program's flatbuffer: the file up to the extended header's ``program_size`` (the segments after it hold
    the constant data and payloads, which only their sizes in the flatbuffer are needed of), else the whole file."""
    try:
        with path.open("rb") as fh:
            head = fh.read(64)
            data = head
            if len(head) >= 24 and head[8:12] == b"eh00":
                program_size = int.from_bytes(head[16:24], "little")
                data = head + fh.read(max(0, program_size - len(head)))
            else:
                data = head + fh.read()
    except OSError as exc:
        raise ExportError(f"cannot read program file {path}: {exc.strerror}; export the model first") from None
    if len(data) < 8 or not re.fullmatch(rb"ET\d\d", data[4:8]):
        raise ExportError(f"{path} is not an ExecuTorch program (no 'ETxx' identifier at bytes 4-8): pass a .pte")
    return _Flat(data)


def _plan(flat: _Flat, method: str | None) -> int:
    plans = flat.tables(flat.root(), _PROGRAM_PLANS)
    if not plans:
        raise ExportError("the program has no method (no execution plan)")
    if method is None:
        # What a runner without --method runs: "forward" if the program has it, else its first method.
        named = [p for p in plans if flat.string(p, _PLAN_NAME) == "forward"]
        return named[0] if named else plans[0]
    for p in plans:
        if flat.string(p, _PLAN_NAME) == method:
            return p
    names = ", ".join(flat.string(p, _PLAN_NAME) for p in plans)
    raise ExportError(f"the program has no method {method!r}; it has: {names}")


def planned_buffers(path: str | Path, method: str | None = None) -> tuple[int, ...]:
    """The memory-planned buffer sizes (bytes) of ``method`` (default: ``forward``), exactly as MethodMeta says.

    ``non_const_buffer_sizes[0]`` is reserved (it stood for the constants), so the planned buffers are the rest.
    """
    flat = _read(Path(path))
    try:
        plan = _plan(flat, method)
        n, start = flat.vector(plan, _PLAN_BUFFER_SIZES)
        sizes = [int(struct.unpack_from("<q", flat.data, start + 8 * i)[0]) for i in range(n)]
    except (struct.error, IndexError):
        raise ExportError(f"{path} is cut or not a program this reader understands: its memory plan cannot be "
                          "read; export it again") from None
    return tuple(sizes[1:])


@dataclass(frozen=True)
class ProgramSize:
    """What the ``.pte`` holds, in bytes: the whole file, and its constant data and delegate payloads."""

    pte_bytes: int
    #: constant tensors (constant segment, inline constant buffers) and named data (XNNPACK keeps its weights there)
    constant_bytes: int
    #: delegate payloads (an XNNPACK delegate's serialized graph; weights too when they are not named data)
    delegate_bytes: int

    def to_dict(self) -> dict[str, int]:
        return {"pte_bytes": self.pte_bytes, "constant_bytes": self.constant_bytes,
                "delegate_bytes": self.delegate_bytes}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProgramSize:
        return cls(int(d["pte_bytes"]), int(d.get("constant_bytes", 0)), int(d.get("delegate_bytes", 0)))


def program_size(path: str | Path) -> ProgramSize:
    """The ``.pte``'s size and how much of it is constant data and delegate payloads (see :class:`ProgramSize`)."""
    p = Path(path)
    flat = _read(p)
    try:
        root = flat.root()
        segments = [flat.scalar(s, _SEGMENT_SIZE, "<Q") for s in flat.tables(root, _PROGRAM_SEGMENTS)]
        constant = sum(flat.vector(b, 0)[0] for b in flat.tables(root, _PROGRAM_CONSTANT_BUFFER))
        seg = flat.ref(root, _PROGRAM_CONSTANT_SEGMENT)
        if seg is not None and segments:
            index = flat.scalar(seg, 0, "<I")
            constant += segments[index] if index < len(segments) else 0
        named = {flat.scalar(n, _NAMED_DATA_SEGMENT, "<I") for n in flat.tables(root, _PROGRAM_NAMED_DATA)}
        constant += sum(segments[i] for i in named if i < len(segments))
        inline = [flat.vector(d, 0)[0] for d in flat.tables(root, _PROGRAM_DELEGATE_DATA)]
        delegate = 0
        for plan in flat.tables(root, _PROGRAM_PLANS):
            for d in flat.tables(plan, _PLAN_DELEGATES):
                ref = flat.ref(d, _DELEGATE_PROCESSED)
                if ref is None:
                    continue
                where = flat.scalar(ref, _DATA_REF_LOCATION, "<B")
                index = flat.scalar(ref, _DATA_REF_INDEX, "<I")
                table = segments if where == _LOCATION_SEGMENT else inline
                delegate += table[index] if index < len(table) else 0
    except (struct.error, IndexError):
        raise ExportError(f"{p} is cut or not a program this reader understands; export it again") from None
    return ProgramSize(p.stat().st_size, constant, delegate)


# ------------------------------------------------------------------------------------ the profile's memory


@dataclass(frozen=True)
class Memory:
    """A profile's memory and size: planned buffers, program size, and load time and peak per block."""

    planned_bytes: tuple[int, ...]
    size: ProgramSize | None = None
    #: load time of each block (ms); () when the runner does not report it
    load_ms: tuple[float, ...] = ()
    #: peak memory of each block (KiB), what :attr:`peak_source` says; () when not measured
    peak_kb: tuple[int, ...] = ()
    peak_source: PeakSource | None = None
    #: what the runner's own MethodMeta said, when it printed it (a cross-check of ``planned_bytes``)
    runner_planned_bytes: tuple[int, ...] | None = None
    #: resident memory of the runner process before it opened the program, per block (KiB); () when not printed.
    #: ``peak - start`` is what the program added (under QEMU: the emulator's own start is left out)
    start_kb: tuple[int, ...] = ()

    @property
    def planned_total(self) -> int:
        return sum(self.planned_bytes)

    @property
    def peak_median_kb(self) -> float | None:
        return float(statistics.median(self.peak_kb)) if self.peak_kb else None

    @property
    def load_median_ms(self) -> float | None:
        return float(statistics.median(self.load_ms)) if self.load_ms else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "planned_bytes": list(self.planned_bytes), "planned_total_bytes": self.planned_total,
            "size": self.size.to_dict() if self.size else None, "load_ms": list(self.load_ms),
            "peak_kb": list(self.peak_kb), "peak_source": self.peak_source.value if self.peak_source else None,
            "peak_scope": self.peak_source.description if self.peak_source else None,
            "runner_planned_bytes": list(self.runner_planned_bytes) if self.runner_planned_bytes is not None else None,
            "start_kb": list(self.start_kb),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Memory:
        runner = d.get("runner_planned_bytes")
        return cls(
            planned_bytes=tuple(int(x) for x in d["planned_bytes"]),
            size=ProgramSize.from_dict(d["size"]) if d.get("size") else None,
            load_ms=tuple(float(x) for x in d.get("load_ms", ())),
            peak_kb=tuple(int(x) for x in d.get("peak_kb", ())),
            peak_source=PeakSource(d["peak_source"]) if d.get("peak_source") else None,
            runner_planned_bytes=tuple(int(x) for x in runner) if runner is not None else None,
            start_kb=tuple(int(x) for x in d.get("start_kb", ())),
        )

    @property
    def added_median_kb(self) -> float | None:
        """Median of ``peak - start`` over the blocks: what loading and running the program added to the process."""
        if not self.start_kb or len(self.start_kb) != len(self.peak_kb):
            return None
        return float(statistics.median(p - s for p, s in zip(self.peak_kb, self.start_kb, strict=True)))

    @classmethod
    def maybe(cls, d: Mapping[str, Any] | None) -> Memory | None:
        """``from_dict`` of a stored dict, None for a file written before memory was measured."""
        return cls.from_dict(d) if d else None


def memory_of(pte: Path, metadata: Sequence[Mapping[str, Any]], method: str | None = None) -> Memory:
    """The :class:`Memory` of ``pte`` measured in blocks whose run metadata (one per block) is ``metadata``."""
    peaks = [int(m[PEAK_KB]) for m in metadata if m.get(PEAK_KB) is not None]
    sources = {str(m[PEAK_SOURCE]) for m in metadata if m.get(PEAK_SOURCE)}
    runner = next((tuple(int(x) for x in m[RUNNER_PLANNED]) for m in metadata if m.get(RUNNER_PLANNED) is not None),
                  None)
    return Memory(
        planned_bytes=planned_buffers(pte, method), size=program_size(pte),
        load_ms=tuple(float(m[LOAD_MS]) for m in metadata if m.get(LOAD_MS) is not None),
        # A block without a peak (a runner that cannot tell) leaves out the whole set: no half-measured arms.
        peak_kb=tuple(peaks) if len(peaks) == len(metadata) and len(sources) == 1 else (),
        peak_source=PeakSource(sources.pop()) if len(peaks) == len(metadata) and len(sources) == 1 else None,
        runner_planned_bytes=runner,
        start_kb=tuple(int(m[START_KB]) for m in metadata) if all(m.get(START_KB) is not None for m in metadata)
        and metadata else (),
    )


def runner_log_memory(log_text: str) -> dict[str, Any]:
    """What pytest-sme2's own runner printed about memory and load (metadata keys; {} for executor_runner)."""
    out: dict[str, Any] = {}
    planned = RUNNER_PLANNED_LINE.search(log_text)
    if planned:
        out[RUNNER_PLANNED] = [int(s) for s in planned.group(3).split(",") if s]
    peak = RUNNER_PEAK_LINE.search(log_text)
    if peak:
        out[PEAK_KB] = int(peak.group(1))
    start = RUNNER_START_LINE.search(log_text)
    if start:
        out[START_KB] = int(start.group(1))
    load = RUNNER_LOAD_LINE.search(log_text)
    if load:
        out[LOAD_MS] = float(load.group(1))
    return out


# ------------------------------------------------------------------------------------ the local runtime's peak


def _status_kb(key: str) -> int | None:
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    m = re.search(rf"^{key}:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) if m else None


class PeakDelta:
    """The rise of this process' resident high-water mark around a load and its runs (:attr:`PeakSource.DELTA`).

    ``start()`` resets ``VmHWM`` to the current resident set (``/proc/self/clear_refs`` ``5``, Linux >= 4.0) and
    notes ``VmRSS``; ``peak_kb()`` is ``VmHWM - VmRSS_before``. Without /proc (or without the reset) it is None:
    not measured, never a guess. Resetting the mark affects this process' own ``ru_maxrss`` too, which nothing
    here reads.
    """

    def __init__(self) -> None:
        self._before: int | None = None

    def start(self) -> None:
        try:
            with open("/proc/self/clear_refs", "w") as fh:  # noqa: PTH123 - a /proc control file, not a path to keep
                fh.write("5")
        except OSError:
            self._before = None
            return
        self._before = _status_kb("VmRSS")

    def peak_kb(self) -> int | None:
        hwm = _status_kb("VmHWM")
        if self._before is None or hwm is None:
            return None
        return max(0, hwm - self._before)


def child_peak_kb(ru_maxrss: int) -> int:
    """``ru_maxrss`` of a reaped child in KiB (Linux reports KiB, macOS bytes)."""
    return ru_maxrss // 1024 if os.uname().sysname == "Darwin" else ru_maxrss


# ------------------------------------------------------------------------------------ thresholds and checks


@dataclass(frozen=True)
class MemoryThresholds:
    """How memory is gated (``@pytest.mark.sme2_threshold(planned_pct=, peak_pct=, planned_mb=, peak_mb=)``)."""

    #: growth of the planned total allowed (relative): 0 = exact, any byte more fails
    planned_growth: float = 0.0
    #: relative margin of the peak's median (a change within it passes)
    peak_margin: float = PEAK_MARGIN
    #: added to ``peak_margin`` when the reference is another session's (stored samples): memory's own, measured
    peak_drift_allowance: float = PEAK_DRIFT_ALLOWANCE
    #: absolute budgets in MiB; None = none
    planned_mb: float | None = None
    peak_mb: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"planned_growth": self.planned_growth, "peak_margin": self.peak_margin,
                "peak_drift_allowance": self.peak_drift_allowance,
                "planned_mb": self.planned_mb, "peak_mb": self.peak_mb}


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
