"""The pure-Python ELF reader against binutils: exported functions and load segments, computed independently."""

from __future__ import annotations

import importlib.util
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.evidence.elf import ElfError, read_elf

# executorch is a namespace package (no __file__): its installed directory holds the C++ SDK's libraries
_ET = importlib.util.find_spec("executorch")
HOST_LIB = Path(next(iter(_ET.submodule_search_locations or ()))) / "lib" / "libexecutorch.so" if _ET else Path()
XNNPACK_SO = "libexecutorch_backend_xnnpack.so"


def _nm_functions(nm: str, lib: Path) -> set[tuple[str, int, int]]:
    """``nm -D -S --defined-only``'s text (T) and weak (W) symbols: the defined STT_FUNC exports.

    nm prints W for weak symbols that are not objects (V) and T for global ones in a code section; IFUNCs
    are ``i`` and are not STT_FUNC. A symbol of size 0 has no size column.
    """
    out = subprocess.run([nm, "-D", "-S", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    found = set()
    for line in out.stdout.splitlines():
        parts = line.split()
        value, size, letter, name = parts if len(parts) == 4 else (parts[0], "0", parts[1], parts[2])
        if letter in ("T", "W"):
            found.add((name.split("@", 1)[0], int(value, 16), int(size, 16)))
    return found


def _readelf_loads(lib: Path) -> list[tuple[int, int, int, bool]]:
    """``readelf -lW``'s LOAD lines: offset, vaddr, filesz, executable."""
    out = subprocess.run(["readelf", "-lW", str(lib)], capture_output=True, text=True, check=True).stdout
    loads = []
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "LOAD":
            loads.append((int(parts[1], 16), int(parts[2], 16), int(parts[4], 16), "E" in "".join(parts[6:-1])))
    return loads


@pytest.fixture(scope="module")
def arm_xnnpack(aarch64_runner_build: Any) -> Path:
    """The aarch64 wheel's XNNPACK backend, as the session's cross-built runner loads it (its ``lib/`` link)."""
    return Path(aarch64_runner_build.path).parent / "lib" / XNNPACK_SO


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils' nm is not installed")
def test_host_library_exports_match_nm() -> None:
    elf = read_elf(HOST_LIB)
    mine = {(f.name, f.value, f.size) for f in elf.functions}
    assert elf.machine == "x86_64"
    assert mine == _nm_functions("nm", HOST_LIB)
    assert len(mine) > 300  # executorch 1.5.1: 376 (234 T + 142 W)


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-nm") is None, reason="aarch64-linux-gnu-nm is not installed")
def test_aarch64_xnnpack_exports_match_cross_nm(arm_xnnpack: Path) -> None:
    elf = read_elf(arm_xnnpack)
    mine = {(f.name, f.value, f.size) for f in elf.functions}
    assert elf.machine == "aarch64"
    assert mine == _nm_functions("aarch64-linux-gnu-nm", arm_xnnpack)
    kai = [f.name for f in elf.functions if f.name.startswith("kai_")]
    assert len(kai) > 500 and any("sme2" in n for n in kai)
    sym = next(f for f in elf.functions if f.name == "kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa")
    assert (sym.value, sym.size) == (0x1C6900, 0x2FC)  # aarch64-linux-gnu-nm -D -S of the 1.5.1 wheel


@pytest.mark.skipif(shutil.which("readelf") is None, reason="binutils' readelf is not installed")
@pytest.mark.parametrize("which", ["host", "arm"])
def test_load_segments_match_readelf(which: str, request: pytest.FixtureRequest) -> None:
    lib = HOST_LIB if which == "host" else request.getfixturevalue("arm_xnnpack")
    elf = read_elf(lib)
    assert [(s.offset, s.vaddr, s.filesz, s.executable) for s in elf.segments] == _readelf_loads(lib)
    # Where a segment's vaddr differs from its offset (the host library's data), the mapping follows it.
    for seg in elf.segments:
        assert elf.vaddr_of_offset(seg.offset + 8) == seg.vaddr + 8
    if which == "host":
        assert any(s.vaddr != s.offset for s in elf.segments)


def _copy(tmp_path: Path, patch: dict[int, int] | None = None, cut: int | None = None) -> Path:
    data = bytearray(HOST_LIB.read_bytes())
    for offset, value in (patch or {}).items():
        data[offset] = value
    out = tmp_path / "lib.so"
    out.write_bytes(bytes(data[:cut] if cut is not None else data))
    return out


def test_errors_name_the_file_and_the_fix(tmp_path: Path) -> None:
    script = tmp_path / "script.so"
    script.write_text("INPUT(-lfoo)\n")
    with pytest.raises(ElfError, match=r"script\.so: is not an ELF file .*pass a shared library"):
        read_elf(script)
    with pytest.raises(ElfError, match=r"32-bit .*use the 64-bit build"):
        read_elf(_copy(tmp_path, {4: 1}))
    with pytest.raises(ElfError, match=r"big-endian .*use the little-endian build"):
        read_elf(_copy(tmp_path, {5: 2}))
    with pytest.raises(ElfError, match=r"lib\.so: is truncated.*copy the library again"):
        read_elf(_copy(tmp_path, cut=4096))
    with pytest.raises(ElfError, match=r"is truncated: 20 bytes"):
        read_elf(_copy(tmp_path, cut=20))
    with pytest.raises(ElfError, match=r"missing\.so: cannot be read"):
        read_elf(tmp_path / "missing.so")
    # No section headers (e_shnum = 0): no .dynsym to find, and the message says so.
    data = bytearray(HOST_LIB.read_bytes())
    struct.pack_into("<H", data, 60, 0)
    (tmp_path / "nosections.so").write_bytes(bytes(data))
    with pytest.raises(ElfError, match="no section header table"):
        read_elf(tmp_path / "nosections.so")
