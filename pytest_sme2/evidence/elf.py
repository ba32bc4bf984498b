"""ELF64 shared libraries -> their exported functions and load segments, in pure Python.

Executed-kernel evidence (:mod:`pytest_sme2.evidence.qemu_log`) maps code addresses to function names; the names
come from a library's dynamic symbol table (``.dynsym``), the one table a stripped release library still
has: ExecuTorch's ``libexecutorch_backend_xnnpack.so`` exports its KleidiAI routines there (``kai_*``),
while XNNPACK's own micro-kernels are hidden. Only what that needs is read: the file header, the program
headers (``PT_LOAD``: how file offsets become virtual addresses) and ``.dynsym`` with its string table.
Little-endian ELF64 only (x86_64 and aarch64 Linux/Android); anything else is refused with a reason.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.errors import Sme2Error

_MAGIC = b"\x7fELF"
_ELFCLASS64 = 2
_ELFDATA2LSB = 1
_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_PT_LOAD = 1
_SHT_DYNSYM = 11
_SHN_UNDEF = 0
_STT_FUNC = 2
_PF_X = 1
#: e_machine values worth naming in messages
MACHINES = {62: "x86_64", 183: "aarch64", 40: "arm", 3: "x86"}


class ElfError(Sme2Error):
    """A file is not a readable little-endian ELF64 shared library (or lacks a dynamic symbol table)."""


@dataclass(frozen=True)
class ElfSymbol:
    """One exported function: its name (without a symbol version) and its [value, value + size) range."""

    name: str
    value: int
    size: int

    def contains(self, vaddr: int) -> bool:
        return self.value <= vaddr < self.value + self.size


@dataclass(frozen=True)
class LoadSegment:
    """One ``PT_LOAD`` program header: file bytes [offset, offset + filesz) appear at [vaddr, vaddr + filesz)."""

    offset: int
    vaddr: int
    filesz: int
    memsz: int
    executable: bool


@dataclass(frozen=True)
class ElfFile:
    """What :func:`read_elf` read: machine, load segments, and exported functions sorted by address."""

    path: str
    machine: str
    segments: tuple[LoadSegment, ...]
    functions: tuple[ElfSymbol, ...]

    def vaddr_of_offset(self, offset: int) -> int | None:
        """The virtual address the file byte at ``offset`` is loaded to (None outside every PT_LOAD)."""
        for seg in self.segments:
            if seg.offset <= offset < seg.offset + seg.filesz:
                return offset - seg.offset + seg.vaddr
        return None


def _fail(path: Path, what: str) -> ElfError:
    return ElfError(f"{path}: {what}")


def read_elf(path: str | Path) -> ElfFile:
    """Read an ELF64 little-endian file's PT_LOAD segments and exported functions (STT_FUNC, defined).

    Symbols come from ``.dynsym`` (what ``nm -D --defined-only`` lists, without the ``@VERSION`` nm appends),
    sorted by address then name. Raises :class:`ElfError` naming the file and the fix when it cannot.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise _fail(p, f"cannot be read ({exc.strerror or exc}); pass the path of the library the process "
                       "mapped (a local copy of it when it ran on a device)") from None
    if data[:4] != _MAGIC:
        raise _fail(p, f"is not an ELF file (starts with {data[:4]!r}, not b'\\x7fELF'); pass a shared library "
                       "(.so), not an archive, script or linker script")
    if len(data) < _EHDR.size:
        raise _fail(p, f"is truncated: {len(data)} bytes, shorter than an ELF64 header ({_EHDR.size}); copy it again")
    ident, _e_type, machine, _v, _entry, phoff, shoff, _flags, _ehsize, phentsize, phnum, shentsize, shnum, _shstrndx \
        = _EHDR.unpack_from(data, 0)
    if ident[4] != _ELFCLASS64:
        raise _fail(p, "is a 32-bit (ELFCLASS32) file; only 64-bit libraries are read (arm64-v8a / aarch64, "
                       "x86_64): use the 64-bit build of the library")
    if ident[5] != _ELFDATA2LSB:
        raise _fail(p, "is big-endian (ELFDATA2MSB); only little-endian libraries are read (aarch64 and x86_64 "
                       "Linux/Android are little-endian): use the little-endian build")
    name = MACHINES.get(machine, f"e_machine {machine}")
    segments = tuple(_segments(p, data, phoff, phentsize, phnum))
    functions = _dynsym_functions(p, data, shoff, shentsize, shnum)
    return ElfFile(str(p), name, segments, functions)


def _need(p: Path, data: bytes, start: int, size: int, what: str) -> None:
    if start < 0 or size < 0 or start + size > len(data):
        raise _fail(p, f"is truncated: its {what} lies at bytes {start}..{start + size}, past the end of the "
                       f"file ({len(data)} bytes); copy the library again (an interrupted adb pull or download?)")


def _segments(p: Path, data: bytes, phoff: int, phentsize: int, phnum: int) -> list[LoadSegment]:
    if phnum and phentsize < _PHDR.size:
        raise _fail(p, f"has program headers of {phentsize} bytes, not {_PHDR.size}: not a valid ELF64 file")
    _need(p, data, phoff, phentsize * phnum, "program header table")
    out = []
    for i in range(phnum):
        p_type, p_flags, offset, vaddr, _paddr, filesz, memsz, _align = _PHDR.unpack_from(data, phoff + i * phentsize)
        if p_type == _PT_LOAD:
            out.append(LoadSegment(offset, vaddr, filesz, memsz, bool(p_flags & _PF_X)))
    return out


def _dynsym_functions(p: Path, data: bytes, shoff: int, shentsize: int, shnum: int) -> tuple[ElfSymbol, ...]:
    if shnum == 0 or shoff == 0:
        raise _fail(p, "has no section header table, so no .dynsym to read; use the library as built or "
                       "installed (not one rewritten by a tool that drops section headers)")
    if shentsize < _SHDR.size:
        raise _fail(p, f"has section headers of {shentsize} bytes, not {_SHDR.size}: not a valid ELF64 file")
    _need(p, data, shoff, shentsize * shnum, "section header table")
    headers = [_SHDR.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    dynsym = next((h for h in headers if h[1] == _SHT_DYNSYM), None)
    if dynsym is None:
        raise _fail(p, "has no .dynsym section: it is not a shared library or executable with exported symbols; "
                       "pass the .so the process loaded")
    _name, _type, _flags, _addr, sym_off, sym_size, link, _info, _align, entsize = dynsym
    if link >= shnum:
        raise _fail(p, f".dynsym links to string table section {link}, but the file has {shnum} sections")
    str_off, str_size = headers[link][4], headers[link][5]
    _need(p, data, sym_off, sym_size, ".dynsym")
    _need(p, data, str_off, str_size, ".dynstr")
    entsize = entsize or _SYM.size
    strings = data[str_off : str_off + str_size]
    out = []
    for off in range(sym_off, sym_off + sym_size - _SYM.size + 1, entsize):
        st_name, st_info, _other, shndx, value, size = _SYM.unpack_from(data, off)
        if st_info & 0xF != _STT_FUNC or shndx == _SHN_UNDEF:
            continue
        end = strings.find(b"\0", st_name)
        name = strings[st_name : end if end >= 0 else len(strings)].decode("utf-8", "replace")
        out.append(ElfSymbol(name, value, size))
    return tuple(sorted(out, key=lambda s: (s.value, s.name)))
