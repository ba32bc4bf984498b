"""Memory and size of a program, as read: what it plans, what its file holds, how long it loads, how high it peaks.

Pure readers and values, no judgement (how each number is gated: :mod:`pytest_sme2.gate.memory`):

- the **planned buffers** read from the ``.pte`` itself (:func:`planned_buffers`) and the **program size**
  (:func:`program_size`);
- the keys of ``RunResult.metadata`` a runner fills in (:data:`PEAK_KB`, :data:`LOAD_MS`, ...), what pytest-sme2's
  own runner printed about them (:func:`runner_log_memory`), which process a peak is (:class:`PeakSource`), and the
  local runtime's rise of its own high-water mark (:class:`PeakDelta`);
- one :class:`Memory` per profile, assembled from the program and its blocks' metadata (:func:`memory_of`).
"""

from __future__ import annotations

import os
import re
import statistics
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_sme2.errors import ExportError
from pytest_sme2.units import TextEnum

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

#: ``sme2_runner planned_memory: buffers=2 total_bytes=1024 sizes=512,512`` (pytest-sme2's own runner)
RUNNER_PLANNED_LINE = re.compile(r"^sme2_runner planned_memory: buffers=(\d+) total_bytes=(\d+) sizes=([\d,]*)$", re.M)
#: ``sme2_runner vmhwm_kb: 12345`` (pytest-sme2's own runner: VmHWM of its /proc/self/status at exit)
RUNNER_PEAK_LINE = re.compile(r"^sme2_runner vmhwm_kb: (\d+)$", re.M)
#: ``sme2_runner rss_start_kb: 6000`` (its VmRSS before it opened the program)
RUNNER_START_LINE = re.compile(r"^sme2_runner rss_start_kb: (\d+)$", re.M)
#: ``Model loaded in 1.23 ms.`` (pytest-sme2's own runner)
RUNNER_LOAD_LINE = re.compile(r"Model loaded in ([0-9.eE+-]+) ms")


class PeakSource(TextEnum):
    """Which process' high-water mark a peak is, and so what it includes."""

    #: a runner process of its own: Linux ``VmHWM`` (``ru_maxrss`` is the same counter)
    PROCESS = "process"
    #: the qemu-user process running an aarch64 runner: the emulator and its translation cache are included
    EMULATOR = "emulator"
    #: the local runtime in this Python process: ``VmHWM`` after load + runs minus ``VmRSS`` before the load
    DELTA = "delta"

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
