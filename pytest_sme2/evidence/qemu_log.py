"""QEMU ``-d in_asm`` log + the process's memory map + libraries' exports -> the functions that executed.

QEMU user mode logs every block of guest code it translates, once, before it first runs it::

    ----------------
    IN: <symbol, when QEMU knows one>
    0x7f6c6eb50440:  d503201f  nop
    0x7f6c6eb50444:  a9bf7bfd  stp      x29, x30, [sp, #-0x10]!

So the log lists code that *ran* (at least once), not how long it ran: "ran, not how long". With the
process's own ``/proc/self/maps`` lines (QEMU emulates the file; the runner prints it) an address becomes
a library and a file offset, the library's program headers turn the offset into its virtual address, and
its ``.dynsym`` (:mod:`pytest_sme2.evidence.elf`) names the exported function holding it. ExecuTorch's XNNPACK
library exports its KleidiAI routines (``kai_*``, SME2 ones marked) but hides XNNPACK's own micro-kernels;
for code outside every export only the classes of the instructions that ran are counted per library
(``fmopa``/``smopa`` are SME outer products, ``fmla``/``sdot``/``smmla`` on ``v`` registers NEON).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_sme2.errors import TraceError, check_schema_version
from pytest_sme2.evidence.elf import ElfFile, read_elf
from pytest_sme2.evidence.kernels import is_sme2

SCHEMA_VERSION = 1
#: Region name of code outside every file-backed executable mapping (JIT code, the vdso).
UNKNOWN_REGION = "[unknown]"
#: Mnemonics whose counts are kept per region: SME mode switches and outer products, and the
#: multiply-accumulate families XNNPACK's GEMM kernels are made of. A class is the mnemonic plus the
#: register file of its first operand: ``za`` (SME array), ``z`` (SVE/streaming vector), ``v`` (NEON).
INSTRUCTION_CLASSES = (
    "smstart", "smstop", "fmopa", "fmops", "bfmopa", "bfmops", "smopa", "smops", "umopa", "umops", "sumopa",
    "usmopa", "fmla", "fmls", "bfmla", "bfdot", "fdot", "sdot", "udot", "usdot", "sudot", "smmla", "ummla",
    "usmmla", "bfmmla", "fmmla",
)
_CLASSES = frozenset(INSTRUCTION_CLASSES)
#: Instructions QEMU's disassembler cannot name (newer SME2 forms) appear as ``.byte``/``.word``: counted apart.
UNDECODED = "undecoded"
_INSN = re.compile(r"^0x([0-9a-fA-F]+):\s+([0-9a-fA-F]{8})\s*(\S*)\s*(.*)$")
_MAPS = re.compile(
    r"^\s*([0-9a-fA-F]+)-([0-9a-fA-F]+)\s+([r-][w-][x-][ps-])\s+([0-9a-fA-F]+)\s+\S+\s+\d+\s*(.*?)\s*$")


@dataclass(frozen=True)
class MemoryMapping:
    """One ``/proc/<pid>/maps`` line: [start, end) maps ``path`` from file ``offset`` with ``perms``."""

    start: int
    end: int
    perms: str
    offset: int
    path: str

    @property
    def executable(self) -> bool:
        return "x" in self.perms


def parse_maps(lines: Iterable[str]) -> tuple[MemoryMapping, ...]:
    """The mappings among ``lines`` (other lines, such as the runner's own output, are skipped)."""
    out = []
    for line in lines:
        m = _MAPS.match(line)
        if m:
            out.append(MemoryMapping(int(m[1], 16), int(m[2], 16), m[3], int(m[4], 16), m[5]))
    return tuple(sorted(out, key=lambda mp: mp.start))


@dataclass(frozen=True)
class Instruction:
    address: int
    mnemonic: str
    operands: str


def parse_in_asm(text: str) -> tuple[tuple[Instruction, ...], ...]:
    """The translated blocks of a QEMU ``-d in_asm`` log, each its instructions in order.

    A block starts at an ``IN:`` line; instruction lines are ``0x<address>:  <8 hex digits>  <mnemonic> ...``.
    """
    blocks: list[tuple[Instruction, ...]] = []
    current: list[Instruction] = []
    for line in text.splitlines():
        if line.startswith("IN:"):
            if current:
                blocks.append(tuple(current))
            current = []
            continue
        m = _INSN.match(line)
        if m:
            current.append(Instruction(int(m[1], 16), m[3], m[4].strip()))
    if current:
        blocks.append(tuple(current))
    return tuple(blocks)


def instruction_class(insn: Instruction) -> str | None:
    """``fmopa za``, ``fmla v``, ``smstart``, ``undecoded``; None for instructions not counted."""
    if not insn.mnemonic or insn.mnemonic.startswith("."):
        return UNDECODED
    if insn.mnemonic not in _CLASSES:
        return None
    first = insn.operands.split(",", 1)[0].strip().lstrip("{").lower()
    bank = "za" if first.startswith("za") else "z" if first.startswith("z") else "v" if first.startswith("v") else ""
    return f"{insn.mnemonic} {bank}" if bank else insn.mnemonic


@dataclass(frozen=True)
class ExecutedFunction:
    """An exported function that ran: its library (as mapped), name, SME2 flag and translated blocks seen."""

    library: str
    name: str
    blocks: int

    @property
    def sme2(self) -> bool:
        return is_sme2(self.name)

    def to_dict(self) -> dict[str, Any]:
        return {"library": self.library, "name": self.name, "sme2": self.sme2, "blocks": self.blocks}


@dataclass(frozen=True)
class RegionInstructions:
    """Code that ran outside every exported function of one library: its blocks and instruction classes."""

    library: str
    blocks: int
    instructions: int
    classes: tuple[tuple[str, int], ...] = ()

    def count(self, cls: str) -> int:
        return dict(self.classes).get(cls, 0)

    def to_dict(self) -> dict[str, Any]:
        return {"library": self.library, "blocks": self.blocks, "instructions": self.instructions,
                "classes": dict(self.classes)}


@dataclass(frozen=True)
class ExecutedKernels:
    """Which exported functions executed at least once (per library), and what ran outside them.

    Proof that code ran, never of how long it ran: QEMU logs a block when it first translates it.
    """

    source: str
    functions: tuple[ExecutedFunction, ...]
    unmapped: tuple[RegionInstructions, ...] = ()
    blocks: int = 0

    @property
    def sme2_functions(self) -> tuple[ExecutedFunction, ...]:
        return tuple(f for f in self.functions if f.sme2)

    def by_library(self) -> dict[str, tuple[ExecutedFunction, ...]]:
        out: dict[str, list[ExecutedFunction]] = {}
        for f in self.functions:
            out.setdefault(f.library, []).append(f)
        return {k: tuple(v) for k, v in out.items()}

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "source": self.source, "blocks": self.blocks,
                "functions": [f.to_dict() for f in self.functions], "unmapped": [r.to_dict() for r in self.unmapped]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExecutedKernels:
        check_schema_version(data, reads=SCHEMA_VERSION, what="executed kernels", missing=SCHEMA_VERSION)
        return cls(
            source=str(data.get("source", "")), blocks=int(data.get("blocks", 0)),
            functions=tuple(ExecutedFunction(str(f["library"]), str(f["name"]), int(f["blocks"]))
                            for f in data.get("functions", ())),
            unmapped=tuple(RegionInstructions(str(r["library"]), int(r["blocks"]), int(r["instructions"]),
                                              tuple((str(k), int(v)) for k, v in dict(r.get("classes", {})).items()))
                           for r in data.get("unmapped", ())),
        )


class _Symbolizer:
    """Address -> (library, exported function or None), from the mappings and the libraries' ELF data."""

    def __init__(self, maps: tuple[MemoryMapping, ...], libraries: Mapping[str, ElfFile]) -> None:
        self._maps = [m for m in maps if m.executable]
        self._starts = [m.start for m in self._maps]
        self._libs = libraries
        self._values = {path: [s.value for s in lib.functions] for path, lib in libraries.items()}

    def lookup(self, addr: int) -> tuple[str, tuple[str, int] | None]:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0 or addr >= self._maps[i].end:
            return UNKNOWN_REGION, None
        mp = self._maps[i]
        region = mp.path or UNKNOWN_REGION
        lib = self._libs.get(mp.path)
        if lib is None:
            return region, None
        vaddr = lib.vaddr_of_offset(addr - mp.start + mp.offset)
        if vaddr is None:
            return region, None
        # functions are sorted by address; aliases (C1/C2 constructors) share one: take any that holds vaddr
        j = bisect.bisect_right(self._values[mp.path], vaddr) - 1
        while j >= 0:
            sym = lib.functions[j]
            if sym.contains(vaddr):
                return region, (sym.name, sym.value)
            if vaddr - sym.value > 1 << 24:  # no function is that long: stop scanning back
                break
            j -= 1
        return region, None


def read_mapped_libraries(maps: Iterable[MemoryMapping]) -> dict[str, ElfFile]:
    """Every file-backed executable mapping's ELF data, read from the same path on this machine."""
    out = {}
    for mp in maps:
        if mp.executable and mp.path.startswith("/") and mp.path not in out and Path(mp.path).is_file():
            out[mp.path] = read_elf(mp.path)
    return out


def executed_kernels(
    log_text: str,
    maps_lines: Iterable[str],
    libraries: Mapping[str, ElfFile] | None = None,
    *,
    source: str = "<in_asm log>",
) -> ExecutedKernels:
    """The exported functions a QEMU ``-d in_asm`` log shows executing, and the instruction classes elsewhere.

    ``maps_lines`` are the process's ``/proc/self/maps`` lines (other lines are ignored). ``libraries`` maps a
    mapped path to its ELF data (a local copy of a device's library, say); None reads every mapped library
    from its own path. Functions are listed per library in address order.
    """
    maps = _maps_of(maps_lines, source)
    blocks = parse_in_asm(log_text)
    if not blocks:
        raise TraceError(f"{source}: no translated block (no 'IN:' line followed by '0x<address>: <insn>' lines); "
                         "was QEMU run with -d in_asm -D <file>?")
    return kernels_of_blocks(blocks, maps, libraries, source=source)


def executed_kernels_of_lines(blocks: Iterable[Iterable[bytes]], maps_lines: Iterable[str],
                              libraries: Mapping[str, ElfFile] | None = None, *,
                              source: str = "<qemu log>") -> ExecutedKernels:
    """:func:`executed_kernels` of translated blocks already split out of a log: each block its raw instruction
    lines (``b"0x7f6c...:  d503201f  nop"``), as :class:`~pytest_sme2.evidence.qemu_counts.BlockCounter` keeps
    them. A counted run (``-d in_asm,exec,nochain``) translates what the process runs, so the same blocks that
    count its instructions say which kernels ran: no second process under ``-d in_asm``."""
    maps = _maps_of(maps_lines, source)
    parsed = []
    for lines in blocks:
        insns = [Instruction(int(m[1], 16), m[3], m[4].strip())
                 for m in (_INSN.match(raw.decode("utf-8", errors="replace").rstrip()) for raw in lines) if m]
        if insns:
            parsed.append(tuple(insns))
    if not parsed:
        raise TraceError(f"{source}: no translated block was executed, so no kernel can be said to have run")
    return kernels_of_blocks(tuple(parsed), maps, libraries, source=source)


def _maps_of(maps_lines: Iterable[str], source: str) -> tuple[MemoryMapping, ...]:
    maps = parse_maps(maps_lines)
    if not maps:
        raise TraceError(f"{source}: no /proc/self/maps line was given, so no address can be placed in a "
                         "library; pass the lines the runner printed from /proc/self/maps")
    return maps


def kernels_of_blocks(blocks: tuple[tuple[Instruction, ...], ...], maps: tuple[MemoryMapping, ...],
                      libraries: Mapping[str, ElfFile] | None = None, *, source: str) -> ExecutedKernels:
    """The exported functions that ``blocks`` (translated blocks of guest code that ran) fall in, per library, and
    the instruction classes of the code outside every export."""
    libs = read_mapped_libraries(maps) if libraries is None else dict(libraries)
    sym = _Symbolizer(maps, libs)
    seen: dict[tuple[str, str, int], int] = {}
    regions: dict[str, list[int]] = {}  # region -> [blocks, instructions]
    classes: dict[str, dict[str, int]] = {}
    for block in blocks:
        in_block: set[tuple[str, str, int]] = set()
        outside: set[str] = set()
        for insn in block:
            region, func = sym.lookup(insn.address)
            if func is not None:
                in_block.add((region, *func))
                continue
            outside.add(region)
            counts = regions.setdefault(region, [0, 0])
            counts[1] += 1
            cls = instruction_class(insn)
            if cls is not None:
                per = classes.setdefault(region, {})
                per[cls] = per.get(cls, 0) + 1
        for key in in_block:
            seen[key] = seen.get(key, 0) + 1
        for region in outside:
            regions[region][0] += 1
    functions = tuple(ExecutedFunction(lib, name, n)
                      for (lib, name, _value), n in sorted(seen.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])))
    unmapped = tuple(RegionInstructions(r, b, n, _most_first(classes.get(r, {})))
                     for r, (b, n) in sorted(regions.items()))
    return ExecutedKernels(source=source, functions=functions, unmapped=unmapped, blocks=len(blocks))


def _most_first(counts: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def read_executed_kernels(log: str | Path, maps_lines: Iterable[str],
                          libraries: Mapping[str, ElfFile] | None = None) -> ExecutedKernels:
    """:func:`executed_kernels` of a log file."""
    p = Path(log)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise TraceError(f"QEMU log {p} does not exist; run QEMU with -d in_asm -D {p}") from None
    return executed_kernels(text, maps_lines, libraries, source=str(p))
