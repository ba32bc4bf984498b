"""Executed kernels from a real QEMU ``-d in_asm`` log: a tiny aarch64 library built and run at test time.

The fixture (``tests/qemu_fixture/``) prints its own ``/proc/self/maps``, then calls one exported function
and a hidden one (NEON fmla/sdot; an SME fmopa only when the CPU reports SME); another exported function
never runs. Needs ``aarch64-linux-gnu-gcc`` and a ``qemu-aarch64`` with SME2 (QEMU >= 11, ``-cpu max``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_sme2.errors import ConfigError, TraceError
from pytest_sme2.evidence.elf import read_elf
from pytest_sme2.evidence.qemu_log import (
    UNDECODED,
    ExecutedKernels,
    Instruction,
    instruction_class,
    parse_in_asm,
    parse_maps,
    read_executed_kernels,
)

FIXTURE = Path(__file__).parents[1] / "qemu_fixture"
SYSROOT = Path("/usr/aarch64-linux-gnu")
CC = shutil.which("aarch64-linux-gnu-gcc")
QEMU = shutil.which("qemu-aarch64")

needs_tools = pytest.mark.skipif(
    CC is None or QEMU is None or not SYSROOT.is_dir(),
    reason="needs the aarch64 cross compiler (apt: gcc-aarch64-linux-gnu, libc6-dev-arm64-cross) and qemu-aarch64 "
           "(QEMU >= 11 for SME2: qemu-user from trixie-backports)")


@pytest.fixture(scope="module")
def fixture_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert CC is not None
    out = tmp_path_factory.mktemp("qemu_fixture")
    subprocess.run([CC, "-O1", "-shared", "-fPIC", "-o", str(out / "libfixture.so"), str(FIXTURE / "fixture_lib.c")],
                   check=True, capture_output=True)
    subprocess.run([CC, "-O1", "-o", str(out / "main"), str(FIXTURE / "fixture_main.c"), f"-L{out}", "-lfixture",
                    "-Wl,-rpath,$ORIGIN"], check=True, capture_output=True)
    return out


def _run(build: Path, cpu: str) -> tuple[Path, list[str]]:
    assert QEMU is not None
    log = build / f"in_asm_{cpu.replace(',', '_').replace('=', '_')}.log"
    done = subprocess.run([QEMU, "-cpu", cpu, "-L", str(SYSROOT), "-d", "in_asm", "-D", str(log), str(build / "main")],
                          capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0 and "Illegal instruction" in done.stderr:
        pytest.skip(f"{QEMU} does not emulate SME under -cpu {cpu} (QEMU >= 11 needed): {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "result 147"  # sum(i * 7 for i in range(7))
    return log, done.stdout.splitlines()


@needs_tools
def test_the_exported_function_that_ran_is_found_and_the_idle_one_is_not(fixture_build: Path) -> None:
    log, stdout = _run(fixture_build, "max")
    lib = str(fixture_build / "libfixture.so")
    ek = read_executed_kernels(log, stdout)
    ran = {f.name for f in ek.by_library()[lib]}
    assert ran == {"sme2_fixture_ran", "sme2_fixture_entry"}
    exported = {f.name for f in read_elf(lib).functions}
    assert "sme2_fixture_idle" in exported and "fixture_hidden_kernel" not in exported
    # main's loader and libc ran too, each under its own mapping
    assert any(lib.endswith("libc.so.6") and any(f.name == "__libc_start_main" for f in fs)
               for lib, fs in ek.by_library().items())
    assert not any(f.sme2 for f in ek.functions)  # no kai_*sme2* / __neonsme2 name in the fixture
    # The hidden function's instructions are counted under the library: SME ones only with SME on.
    region = next(r for r in ek.unmapped if r.library == lib)
    assert (region.count("fmla v"), region.count("sdot v")) == (1, 1)
    assert (region.count("smstart"), region.count("fmopa za"), region.count("smstop")) == (1, 1, 1)
    off_log, off_stdout = _run(fixture_build, "max,sme=off")
    off = read_executed_kernels(off_log, off_stdout)
    off_region = next(r for r in off.unmapped if r.library == lib)
    assert off_region.count("fmla v") == 1 and off_region.count("fmopa za") == 0 and off_region.count("smstart") == 0
    assert {f.name for f in off.by_library()[lib]} == ran


@needs_tools
def test_libraries_can_be_given_for_paths_this_machine_does_not_have(fixture_build: Path) -> None:
    """A device's maps name device paths: the caller passes a local copy's ELF data under that path."""
    log, stdout = _run(fixture_build, "max")
    lib = str(fixture_build / "libfixture.so")
    device_path = "/data/local/tmp/sme2/libfixture.so"
    maps = [line.replace(lib, device_path) for line in stdout]
    ek = read_executed_kernels(log, maps, {device_path: read_elf(lib)})
    assert {f.name for f in ek.functions} == {"sme2_fixture_ran", "sme2_fixture_entry"}
    assert {f.library for f in ek.functions} == {device_path}
    # Libraries not given are not read from disk: their code is counted, unnamed.
    assert any(r.library.endswith("libc.so.6") for r in ek.unmapped)
    again = ExecutedKernels.from_dict(ek.to_dict())
    assert again == ek and ek.to_dict()["schema_version"] == 1
    assert [f["sme2"] for f in ek.to_dict()["functions"]] == [False, False]


def test_maps_lines_among_other_output_and_in_asm_blocks() -> None:
    lines = ["result 147", "7f6c6eb50000-7f6c6eb51000 r-xp 00000000 fe:00 2146363      /tmp/x/libfixture.so",
             "7f6c6eb6f000-7f6c6eb70000 r--p 0000f000 fe:00 2146363                    /tmp/x/libfixture.so",
             "7f6c64800000-7f6c65000000 rw-p 00000000 00:00 0                          [stack]",
             "7f6c6d1e2000-7f6c6d1ef000 rw-p 00000000 00:00 0 "]
    maps = parse_maps(lines)
    assert [(m.start, m.offset, m.path, m.executable) for m in maps] == [
        (0x7F6C64800000, 0, "[stack]", False), (0x7F6C6D1E2000, 0, "", False),
        (0x7F6C6EB50000, 0, "/tmp/x/libfixture.so", True), (0x7F6C6EB6F000, 0xF000, "/tmp/x/libfixture.so", False)]
    log = ("----------------\nIN: main\n0x004006d4:  d503477f  smstart  \n\n----------------\nIN: \n"
           "0x004006e0:  c00800ff  zero     {za}\n0x004006e4:  808c02c0  fmopa    za0.s, p0/m, p0/m, z22.s, z12.s\n"
           "0x004006e8:  a040c764  .byte    0x64, 0xc7, 0x40, 0xa0\n")
    blocks = parse_in_asm(log)
    assert [len(b) for b in blocks] == [1, 3]
    assert [instruction_class(i) for i in blocks[1]] == [None, "fmopa za", UNDECODED]
    assert instruction_class(Instruction(0, "fmla", "z0.s, p0/m, z1.s, z2.s")) == "fmla z"


def test_errors_say_what_to_pass(tmp_path: Path) -> None:
    log = tmp_path / "in_asm.log"
    log.write_text("IN: \n0x1000:  d503201f  nop\n")
    with pytest.raises(TraceError, match="no /proc/self/maps line"):
        read_executed_kernels(log, ["hello"])
    log.write_text("nothing here\n")
    with pytest.raises(TraceError, match="-d in_asm -D"):
        read_executed_kernels(log, ["1000-2000 r-xp 00000000 00:00 0 /x.so"], {})
    with pytest.raises(TraceError, match="does not exist"):
        read_executed_kernels(tmp_path / "missing.log", [])
    with pytest.raises(ConfigError, match="newer"):
        ExecutedKernels.from_dict({"schema_version": 99})
