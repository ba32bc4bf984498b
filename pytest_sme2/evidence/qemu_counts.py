"""QEMU's ``-d in_asm,exec,nochain`` log, streamed -> instructions executed under emulation, per method execution.

QEMU user mode 11.1 has no TCG plugins, but two of its log items together count exactly: ``in_asm`` prints each
translation block's instructions once, when it is translated, and ``exec`` with ``nochain`` prints one line per
block *execution* (with chaining off, every block goes back through QEMU's lookup, which logs it)::

    ----------------
    IN: main
    0x7f59bdd57a10:  94000000  bl       #0x7f59bdd57994
    Trace 0: 0x7f59b027e900 [80081009331/00007f59bdd57a10/00000001/00008200] main
    Trace 0: 0x7f59b027e980 [80081009331/00007f59bdd57994/00000001/00008200] sme2_runner_count_begin

A ``Trace`` line names the translated code (the host pointer after ``Trace 0:``), the guest pc, and the symbol of
the runner's binary it starts in. A block is logged by ``in_asm`` right before its first execution, so the first
``Trace`` of a just-translated block binds that host pointer to those instructions (a pointer QEMU reuses after
flushing its code cache is bound again by the next translation). The count of one method execution is then the sum,
over the block executions between the runner's markers (``sme2_runner_count_begin``/``_end``: QEMU names their
blocks from the runner's symbol table), of each block's instruction count, split by :data:`INSTRUCTION_KINDS`,
by library (the runner prints its executable mappings, ``sme2_runner code-map:``) and by exported function.

The counter reads the log as a stream (a pipe: the log of one execution is 10-20 MB, of start-up 100 MB; of
tiny_transformer SME2 off ~120 MB each, 356 MB in all), keeps the translated blocks and one integer per executed
block, and attributes addresses only once at the end.
"""

from __future__ import annotations

import fcntl
import io
import itertools
import os
import re
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import BinaryIO

from pytest_sme2.errors import TraceError
from pytest_sme2.evidence.elf import ElfFile
from pytest_sme2.evidence.instructions import INSTRUCTION_KINDS, InstructionCounts
from pytest_sme2.evidence.kernels import is_sme2
from pytest_sme2.evidence.qemu_log import (
    UNDECODED,
    UNKNOWN_REGION,
    Instruction,
    _Symbolizer,
    instruction_class,
    parse_maps,
    read_mapped_libraries,
)

#: The runner's marker functions around each method execution (pytest_sme2/runners/cpp/sme2_runner.cpp).
BEGIN_MARKER = b"sme2_runner_count_begin"
END_MARKER = b"sme2_runner_count_end"
#: The runner's lines that list its executable mappings (every library, the loader and itself).
CODE_MAP_PREFIX = "sme2_runner code-map: "
#: QEMU's log items the counter needs.
QEMU_LOG_ITEMS = "in_asm,exec,nochain"
#: Seconds between two progress ticks of :meth:`BlockCounter.feed_stream`.
TICK_S = 1.0

_INSN = re.compile(rb"^0x([0-9a-fA-F]+):\s+([0-9a-fA-F]{8})\s*(\S*)\s*(.*?)\s*$")
_PC = re.compile(rb"\[[0-9a-fA-F]+/([0-9a-fA-F]+)/")
_STOPPED = b"Stopped execution of TB chain before "
#: A line that does not start with T (every Trace line does).
_OTHER_LINE = re.compile(rb"\n[^T]")
#: What both markers start with.
_MARKERS = b"sme2_runner_count_"
#: Bytes :meth:`BlockCounter.feed_stream` reads at a time.
CHUNK = 1 << 20
#: The size :meth:`BlockCounter.feed_stream` asks for the pipe it reads (Linux's default limit for a user).
PIPE_SIZE = 1 << 20
#: Seconds :meth:`BlockCounter.feed_stream` lets a pipe fill after a read that found little in it.
PIPE_WAIT_S = 0.002

_SME_OPERAND = re.compile(r"\bza|\bzt0\b")
_SVE_OPERAND = re.compile(r"\b(?:z|p|pn)\d")
_NEON_OPERAND = re.compile(r"\bv\d")
_SME_MNEMONICS = frozenset({"smstart", "smstop", "rdsvl", "addsvl", "addspl"})
_SVE_SCALAR = re.compile(r"^(?:rdvl|addvl|addpl|(?:cnt|inc|dec|sqinc|uqinc|sqdec|uqdec)[bhwd])$")
_MEMORY = re.compile(r"^(?:ld|st|cas|swp)")
#: SME instructions in the SVE encoding space (rdsvl, addsvl, addspl): (mask, value) of their fixed bits.
_SME_IN_SVE_SPACE = ((0xFFFFF800, 0x04BF5800), (0xFFE0F800, 0x04205800), (0xFFE0F800, 0x04605800))


def instruction_kind(mnemonic: str, operands: str, word: int) -> str:
    """The one :data:`INSTRUCTION_KINDS` an instruction is, from QEMU's disassembly (mnemonic and operands).

    Order decides overlaps: anything on ZA/ZT0 or switching streaming mode is ``sme`` (an SME ``ld1w {za0h.s...}``
    too); other loads and stores are ``load_store``; ``z``/``p``/``pn`` registers (and SVE's vector-length
    arithmetic such as ``incw``) are ``sve``; ``v`` registers ``neon``; the rest ``scalar``. QEMU 11.1's
    disassembler cannot name SME2's newer forms (it prints ``.byte``); those are placed by their encoding's
    top-level group (:func:`undecoded_kind`), and only words outside the SME and SVE groups stay ``undecoded``.
    """
    if not mnemonic or mnemonic.startswith("."):
        return undecoded_kind(word)
    if mnemonic in _SME_MNEMONICS or _SME_OPERAND.search(operands):
        return "sme"
    if _MEMORY.match(mnemonic):
        return "load_store"
    if _SVE_SCALAR.match(mnemonic) or _SVE_OPERAND.search(operands):
        return "sve"
    if _NEON_OPERAND.search(operands):
        return "neon"
    return "scalar"


def undecoded_kind(word: int) -> str:
    """The kind of an instruction word QEMU's disassembler did not name, by the A64 top-level encoding groups.

    ``op0`` (bit 31) = 1 with ``op1`` (bits 28:25) = 0000 is the SME group: its bits 31:29 = 101 are SME2's
    multi-vector contiguous loads and stores of ``z`` registers (``load_store``), the rest ``sme``. ``op1`` = 0010
    is the SVE group: bits 31:29 = 1xx are SVE loads and stores, rdsvl/addsvl/addspl are SME, the rest ``sve``.
    """
    op1 = (word >> 25) & 0xF
    top = word >> 29
    if op1 == 0b0000 and word >> 31:
        return "load_store" if top == 0b101 else "sme"
    if op1 == 0b0010:
        if any(word & mask == value for mask, value in _SME_IN_SVE_SPACE):
            return "sme"
        return "load_store" if top >= 0b100 else "sve"
    return UNDECODED


@dataclass
class _Execution:
    """Block executions of one method execution: translated block id -> times executed."""

    blocks: dict[int, int] = field(default_factory=dict)


class BlockCounter:
    """Feed it QEMU's ``-d in_asm,exec,nochain`` log line by line (bytes); it counts block executions between markers.

    Holds every translated block (raw instruction lines) and, per method execution, how often each block executed.

    Nearly every line is a ``Trace`` line, so those take short paths: outside a counted execution, with no translation
    waiting for its first execution, only a line naming the begin marker is looked at; inside one, a ``Trace`` line
    already seen in this execution (the same line is the same thread, host pointer and block) only adds one to its
    tally. A tally is moved onto its block (:meth:`_settle`) before that host pointer could mean another block (a
    re-bind), before a ``Stopped execution`` line takes an execution back, at the end marker and at the end of
    :meth:`feed` and :meth:`feed_stream`: the counts are exactly those of resolving every line when it is read.
    :meth:`feed_stream` goes further: it finds those runs of ``Trace`` lines in the bytes it reads and skips or tallies
    each run whole, so only the other lines, a few per translation, are looked at one by one.
    """

    def __init__(self, source: str = "<qemu log>") -> None:
        self.source = source
        self.blocks: list[list[bytes]] = []
        self._bound: dict[bytes, int] = {}
        self._current: list[bytes] = []
        #: translated blocks not yet executed, by start pc (hex digits): another thread's lines may come between
        #: a block's translation and its first execution, and translations are serialised (QEMU's mmap lock)
        self._pending: dict[bytes, list[bytes]] = {}
        self._counting: _Execution | None = None
        #: the last counted ``Trace`` line (its host pointer is what a ``Stopped execution`` line may take back)
        self._last: bytes = b""
        #: ``Trace`` lines of the counted execution not yet settled onto their blocks -> times executed
        self._tally: Counter[bytes] = Counter()
        #: the host pointer of every counted ``Trace`` line seen
        self._pointer: dict[bytes, bytes] = {}
        self.executions: list[_Execution] = []
        self.block_executions = 0
        self.lines = 0

    def feed(self, lines: Iterable[bytes]) -> None:
        """Count ``lines`` (each ending with its newline, as ``readline`` gives them)."""
        lines = lines if isinstance(lines, list) else list(lines)
        self._feed_lines(lines)
        self._settle()
        self.lines += len(lines)

    def _feed_lines(self, lines: list[bytes]) -> None:
        """Every line's own path; what a line already seen in this execution executed may be left in the tally."""
        bound, blocks = self._bound, self.blocks
        current, pending = self._current, self._pending
        counting, tally, pointer, last = self._counting, self._tally, self._pointer, self._last
        try:
            for line in lines:
                if line.startswith(b"Trace "):
                    if not pending:
                        if counting is None:
                            if BEGIN_MARKER not in line:
                                continue  # start-up or between executions: nothing to bind, nothing to count
                        else:
                            n = tally.get(line)
                            if n is not None:
                                tally[line] = n + 1
                                last = line
                                continue
                    parts = line.split(None, 4)
                    ptr = parts[2]
                    if pending:
                        m = _PC.search(parts[3])
                        translated = pending.pop(m[1].lstrip(b"0"), None) if m is not None else None
                        if translated is not None:
                            if ptr in bound and counting is not None:
                                self._settle()  # counted so far under the pointer's old block
                            bound[ptr] = len(blocks)
                            blocks.append(translated)
                    symbol = parts[4].strip() if len(parts) > 4 else b""
                    if symbol == BEGIN_MARKER:
                        if counting is not None:
                            raise TraceError(f"{self.source}: {BEGIN_MARKER.decode()} ran twice without "
                                             f"{END_MARKER.decode()} between: the markers are not the runner's")
                        counting = self._counting = _Execution()
                        self.executions.append(counting)
                        continue
                    if symbol == END_MARKER:
                        if counting is not None:
                            self._settle()
                        counting = self._counting = None
                        continue
                    if counting is not None:
                        pointer[line] = self._counted_pointer(parts)
                        tally[line] = tally.get(line, 0) + 1
                        last = line
                elif line.startswith(b"0x"):
                    current.append(line)
                elif line.startswith(b"IN:") or line.startswith(b"---"):
                    if current:
                        pending[_start_pc(current[0])] = current
                        current = self._current = []
                elif line.startswith(_STOPPED) and counting is not None:
                    self._settle()
                    ptr = line[len(_STOPPED):].split(None, 1)[0]
                    if last and ptr == pointer[last] and counting.blocks.get(bound[ptr], 0) > 0:
                        counting.blocks[bound[ptr]] -= 1  # logged, then not executed
                        last = b""
                elif current and not line.strip():
                    pending[_start_pc(current[0])] = current
                    current = self._current = []
        finally:
            self._last = last

    def _counted_pointer(self, parts: list[bytes]) -> bytes:
        """The host pointer of a ``Trace`` line (split in 5) counted in an execution; refused when another thread
        executed it or its translation is not in the log."""
        if parts[1] != b"0:":
            raise TraceError(f"{self.source}: a second guest thread ({parts[1].decode()[:-1]}) executed code inside "
                             "a counted method execution; count with one thread (--cpu_threads 1): other threads' "
                             "blocks interleave in the log")
        if parts[2] not in self._bound:
            raise TraceError(f"{self.source}: QEMU executed translated code {parts[2].decode()} whose translation the "
                             f"log does not show; was it written with -d {QEMU_LOG_ITEMS} from the start of the "
                             "process?")
        return parts[2]

    def _settle(self) -> None:
        """Move the tally of ``Trace`` lines onto the blocks their host pointers are bound to now."""
        if not self._tally:
            return
        assert self._counting is not None  # a tally is only kept inside a counted execution
        counts, bound, pointer = self._counting.blocks, self._bound, self._pointer
        for line, n in self._tally.items():
            block = bound[pointer[line]]
            counts[block] = counts.get(block, 0) + n
        self._tally.clear()

    def feed_stream(self, stream: BinaryIO, *, tick: Callable[[], None] | None = None) -> None:
        """Read ``stream`` to its end (a pipe from QEMU: its log as it is written); ``tick`` is called about every
        :data:`TICK_S` seconds meanwhile, so a front end can show the elapsed time.

        Reads up to :data:`CHUNK` bytes at a time and counts their whole lines (:meth:`_feed_data`); a line cut at a
        chunk's end is completed by the next. QEMU writes its log a line at a time, so a reader that waits on the pipe
        is woken for every line (hundreds of thousands of reads, as costly as counting them): from a pipe, after a
        read that found it less than a quarter full, it sleeps :data:`PIPE_WAIT_S` while the pipe (raised to
        :data:`PIPE_SIZE`) fills.
        """
        read = getattr(stream, "read1", stream.read)
        small = _pipe_capacity(stream) // 4
        next_tick = time.monotonic() + TICK_S
        carry = b""
        while True:
            chunk = read(CHUNK)
            if not chunk:
                break
            first = chunk.find(b"\n") + 1
            if first == 0:
                carry += chunk
            else:
                if carry:
                    self._feed_data(carry + chunk[:first], 0, len(carry) + first)
                else:
                    first = 0
                last = chunk.rfind(b"\n") + 1
                self._feed_data(chunk, first, last)
                carry = chunk[last:]
            if tick is not None and time.monotonic() >= next_tick:
                tick()
                next_tick = time.monotonic() + TICK_S
            if len(chunk) < small:
                time.sleep(PIPE_WAIT_S)
        if carry:  # a last line without its newline
            self._feed_lines([carry])
            self.lines += 1
        self._settle()

    def _feed_data(self, data: bytes, pos: int, size: int) -> None:
        """Count the whole lines ``data[pos:size]``: runs of ``Trace`` lines in bulk, every other line (and a marker's)
        on its own path (:meth:`_feed_lines`), with the lines up to and with the next ``Trace`` line (that line binds a
        translation, mostly). Between executions, with nothing pending, a run is skipped (its lines change nothing);
        inside one it is tallied whole (:meth:`_tally_lines`)."""
        while pos < size:
            if not self._pending and not self._current:
                other = _next_other(data, pos, size)
                end = size if other < 0 else other
                marker = data.find(BEGIN_MARKER if self._counting is None else _MARKERS, pos, end)
                if marker >= 0:
                    end = max(data.rfind(b"\n", pos, marker) + 1, pos)  # the line it is on
                if self._counting is not None:
                    self._tally_lines(data[pos:end])
                else:
                    self.lines += data.count(b"\n", pos, end)
                pos = end
                if pos == size:
                    return
            trace = _next_trace(data, pos, size)
            end = size if trace < 0 else data.index(b"\n", trace) + 1
            lines = _split_lines(data[pos:end])
            self._feed_lines(lines)
            self.lines += len(lines)
            pos = end

    def _tally_lines(self, data: bytes) -> None:
        """Tally the whole lines ``data`` inside a counted execution, where none translates code, names a marker or is
        a ``Stopped`` line (so only ``Trace`` lines count and nothing else changes); a line first seen is checked as
        :meth:`_feed_lines` checks it, in the order of the log."""
        if not data:
            return
        lines = _split_lines(data)
        self.lines += len(lines)
        tally, pointer = self._tally, self._pointer
        before = len(tally)
        tally.update(lines)
        for line in list(itertools.islice(reversed(tally), len(tally) - before))[::-1]:
            if line in pointer:
                continue
            if not line.startswith(b"Trace "):
                del tally[line]  # a line outside a translation that is no Trace: nothing to count
                continue
            pointer[line] = self._counted_pointer(line.split(None, 4))
        for line in reversed(lines):
            if line.startswith(b"Trace "):
                self._last = line
                break


def _pipe_capacity(stream: BinaryIO) -> int:
    """The capacity of the pipe ``stream`` reads, raised to :data:`PIPE_SIZE`; 0: no pipe, or one the system would not
    raise (a 64 KB pipe would fill while the reader waits: it reads as the log comes)."""
    try:
        fd = stream.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return 0
    except (OSError, ValueError, io.UnsupportedOperation):
        return 0
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if set_size is None:
        return 0  # not Linux (nor QEMU's user mode)
    try:
        return fcntl.fcntl(fd, set_size, PIPE_SIZE)
    except OSError:  # over the user's allowance of pipe memory
        return 0


def _split_lines(data: bytes) -> list[bytes]:
    """``data``'s lines with their ends, split at ``\\n`` only (as ``readline``)."""
    return data.splitlines(keepends=True) if b"\r" not in data else io.BytesIO(data).readlines()


def _next_other(data: bytes, pos: int, size: int) -> int:
    """Where the first line in ``data[pos:size]`` (``pos``: a line's start) that does not start with ``T`` starts;
    -1: none."""
    if data[pos] != 0x54:
        return pos
    m = _OTHER_LINE.search(data, pos, size)
    return -1 if m is None else m.start() + 1


def _next_trace(data: bytes, pos: int, size: int) -> int:
    """Where the first ``Trace`` line in ``data[pos:size]`` (``pos``: a line's start) starts; -1: none."""
    if data.startswith(b"Trace ", pos, size):
        return pos
    at = data.find(b"\nTrace ", pos, size)
    return -1 if at < 0 else at + 1


def _start_pc(line: bytes) -> bytes:
    """``7f59bdd57a10`` of an in_asm line ``0x7f59bdd57a10:  94000000  bl ...``."""
    return line[2:line.index(b":")]


@dataclass(frozen=True)
class _Decoded:
    kind: str
    mnemonic: str | None
    library: str
    symbol: str | None


def _decode_block(lines: list[bytes], symbolizer: _Symbolizer) -> list[_Decoded]:
    out = []
    for raw in lines:
        m = _INSN.match(raw)
        if m is None:
            continue
        address, word = int(m[1], 16), int(m[2], 16)
        mnemonic, operands = m[3].decode(errors="replace"), m[4].decode(errors="replace")
        region, func = symbolizer.lookup(address)
        library = PurePosixPath(region).name if region != UNKNOWN_REGION else UNKNOWN_REGION
        cls = instruction_class(Instruction(address, mnemonic, operands))
        out.append(_Decoded(instruction_kind(mnemonic, operands, word), None if cls == UNDECODED else cls, library,
                            f"{library}!{func[0]}" if func is not None else None))
    return out


def counts_of(counter: BlockCounter, maps_lines: Iterable[str], libraries: Mapping[str, ElfFile] | None = None,
              *, cpu: str = "", qemu_version: str = "", execution: int = -1) -> InstructionCounts:
    """The :class:`InstructionCounts` of one counted method execution (``execution``: its index, default the last).

    ``maps_lines`` are the runner's ``code-map`` lines (``/proc/self/maps`` format); ``libraries`` the mapped
    files' ELF data (None: read from the mapped paths, as this machine has them).
    """
    if not counter.executions:
        raise TraceError(f"{counter.source}: no block of {BEGIN_MARKER.decode()} executed, so no method execution "
                         "was counted: the runner lacks the marker functions around Method::execute() (a runner of "
                         "your own, one built from pytest-sme2's source before issue 32, or a stripped one: count with "
                         "pytest-sme2's own, `pytest-sme2 build-runner --target linux-aarch64`), or it failed before "
                         "executing")
    maps = parse_maps(maps_lines)
    if not maps:
        raise TraceError(f"{counter.source}: the runner printed no '{CODE_MAP_PREFIX.strip()}' line, so executed "
                         "addresses cannot be placed in libraries; use pytest-sme2's own runner")
    symbolizer = _Symbolizer(maps, read_mapped_libraries(maps) if libraries is None else dict(libraries))
    executed = counter.executions[execution].blocks
    by_kind = dict.fromkeys(INSTRUCTION_KINDS, 0)
    by_library: dict[str, int] = {}
    by_symbol: dict[str, int] = {}
    by_mnemonic: dict[str, int] = {}
    for block, times in executed.items():
        if times == 0:
            continue
        for insn in _decode_block(counter.blocks[block], symbolizer):
            by_kind[insn.kind] += times
            by_library[insn.library] = by_library.get(insn.library, 0) + times
            if insn.symbol is not None:
                by_symbol[insn.symbol] = by_symbol.get(insn.symbol, 0) + times
            if insn.mnemonic is not None:
                by_mnemonic[insn.mnemonic] = by_mnemonic.get(insn.mnemonic, 0) + times
    return InstructionCounts(
        total=sum(by_kind.values()), by_kind=by_kind, by_library=_most_first(by_library),
        by_symbol=_most_first(by_symbol),
        sme2_symbols=tuple(sorted(s for s in by_symbol if is_sme2(s.split("!", 1)[1]))),
        by_mnemonic=_most_first(by_mnemonic), cpu=cpu, qemu_version=qemu_version)


def _most_first(counts: Mapping[str, int]) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
