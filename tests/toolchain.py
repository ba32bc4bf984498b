"""The tools the own-runner and emulated-device tests need, and how a missing one is reported.

A missing C++ compiler, aarch64 cross compiler or SME2-capable QEMU skips those tests with the reason and
the fix — on a developer's machine. In CI (the ``CI`` environment variable set) ``.ci/run`` installs every
one of them, so a missing tool there is a broken CI setup, and the same call fails instead: a green CI run
must have run them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import NoReturn

import ci
import pytest

from pytest_sme2.options import ci_environment
from pytest_sme2.runners.build import CROSS_CXX

#: ``AT_HWCAP2`` bit of SME2 (Linux arch/arm64/include/uapi/asm/hwcap.h), as the runner's ``--probe`` prints it.
HWCAP2_SME2 = 1 << 37
PROBE = re.compile(r"sme2_runner probe: arch=(\S+) hwcap=0x([0-9a-f]+) hwcap2=0x([0-9a-f]+)")


def tool_missing(reason: str) -> NoReturn:
    """Skip with ``reason``; in CI, fail with it: CI installs every tool these tests need.

    In CI means: the session started with ``CI`` set (:data:`ci.IN_CI`; each test runs without it, see
    ``tests/conftest.py``), or a test sets it.
    """
    if ci.IN_CI or ci_environment():
        pytest.fail(f"{reason}. CI must run these tests (.ci/run installs the tool), so a missing tool fails "
                    "there instead of skipping", pytrace=False)
    pytest.skip(reason)


def require_host_compiler() -> None:
    if not any(shutil.which(c) for c in ([os.environ["CXX"]] if os.environ.get("CXX") else ["c++", "g++", "clang++"])):
        tool_missing("no C++ compiler ($CXX, c++, g++, clang++) to build pytest-sme2's runner: apt-get install g++")


def require_cross_compiler() -> None:
    name = os.environ.get("SME2_CROSS_CXX") or CROSS_CXX
    if shutil.which(name) is None:
        tool_missing(f"no aarch64 cross compiler ({name}) to build the linux-aarch64 runner: "
                     "apt-get install g++-aarch64-linux-gnu")


def probe_hwcap2(qemu: str | Path, cpu: str, runner: Path, sysroot: str) -> int:
    """``AT_HWCAP2`` as the runner's process sees it under ``qemu -cpu cpu`` (read here, not by pytest_sme2)."""
    cmd = [str(qemu), "-cpu", cpu, *(["-L", sysroot] if sysroot else []), str(runner), "--probe"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    m = PROBE.search(proc.stdout)
    assert proc.returncode == 0 and m is not None, f"{cmd} failed ({proc.returncode}): {proc.stderr[-800:]}"
    assert m.group(1) == "aarch64"
    return int(m.group(3), 16)


def require_sme2_qemu(runner: Path, sysroot: str) -> Path:
    """qemu-aarch64 on PATH whose ``-cpu max`` gives a process SME2 (probed with ``runner``), else missing."""
    found = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
    if found is None:
        tool_missing("no qemu-aarch64 on PATH: install QEMU 11.1+ user mode (Debian: trixie-backports qemu-user)")
    if not probe_hwcap2(found, "max", runner, sysroot) & HWCAP2_SME2:
        tool_missing(f"{found} does not emulate SME2 (no HWCAP2_SME2 under -cpu max): install QEMU 11.1+ user "
                     "mode (Debian: trixie-backports qemu-user)")
    return Path(found)
