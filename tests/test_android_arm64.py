"""The Android path with real Arm code: pytest-sme2's aarch64 runner on an arm64 emulated phone.

The phone (``tests/emulated_device``, ``make_emulated_phone(..., arm64=True)``) executes pushed aarch64 ELF files
under ``qemu-aarch64`` (a binfmt_misc registration private to its sandbox) with the profile's CPU: ``sme2_phone``
runs on ``-cpu max`` (SME2), ``nosme_phone`` on ``-cpu max,sme=off``; its ``/proc/cpuinfo`` is the one QEMU emulates.
Nothing here is replayed: the runner is the one cross-built from the aarch64 executorch wheel (a glibc program; its
loader and libc come from ``QEMU_LD_PREFIX``, as a real phone would need an NDK build instead), its shared libraries
are pushed with ``runner_libs`` (``--sme2-runner-libs``), and every trace is written on the device and pulled.

Expectations are read here from what ran — the pulled traces (``read_etdump``), the runner's ``--probe`` of the
emulated CPU — with this file's own rules, not pytest_sme2's. Latency on this phone is emulated time: no test asserts
one, and the reports must say so. toy_cnn and few executions keep the tier's time modest (emulation is 150-500x
slower than native).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from emulated_device.device import EmulatedPhone
from emulated_device.fixtures import AdbServer, MakePhone, poll

from pytest_sme2.device import cpuinfo_features
from pytest_sme2.errors import DeviceError, RunnerError
from pytest_sme2.profile import profile_exported
from pytest_sme2.runner_build import RunnerBuild
from pytest_sme2.runners.android import REMOTE_ROOT, AndroidRunner
from pytest_sme2.runners.base import RunRequest
from pytest_sme2.trace import read_etdump

pytestmark = pytest.mark.emulated_device

REPO = Path(__file__).resolve().parent.parent
#: XNNPACK's GEMM-like operators (convolutions, fully connected) by their event names.
GEMM = re.compile(r"^(Convolution|Fully Connected) \(")
#: XNNPACK's packed-LHS types: the SME/KleidiAI paths (this file's rule, from XNNPACK's operator names).
PACKED = re.compile(r"\((NHWC|NC), P(F32|F16|QS8)\b")


def _libs(build: RunnerBuild) -> Path:
    """The wheel's lib/ the runner was linked against (its RUNPATH's ``$ORIGIN/lib``)."""
    return (build.path.parent / "lib").resolve()


def _runner(phone: EmulatedPhone, build: RunnerBuild, *, off: Path | None = None, libs: bool = True,
            **options: Any) -> AndroidRunner:
    return AndroidRunner(build.path, off, serial=phone.serial, timeout_s=120.0,
                         runner_libs=_libs(build) if libs else None, **options)


def _request(exported: Any, tmp_path: Path, **overrides: Any) -> RunRequest:
    fields: dict[str, Any] = {"pte": exported.pte_path, "runs": 2, "warmup": 1, "threads": 1,
                              "out_dir": tmp_path / "out", "inputs": tuple(exported.input_files), "timeout_s": 120.0}
    fields.update(overrides)
    return RunRequest(**fields)


def _gemms(trace: Path) -> list[str]:
    names = read_etdump(trace).operators()["event_name"].unique().tolist()
    return sorted(str(n) for n in names if GEMM.match(str(n)))


def _shell(adb_server: AdbServer, phone: EmulatedPhone, command: str) -> str:
    done = adb_server.run("-s", phone.serial, "shell", command)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def fp32(example_export: Callable[[str, str], Any]) -> Any:
    return example_export("fp32", "xnnpack")


# ------------------------------------------------------------------------------------------ the phone


@pytest.mark.parametrize(("profile", "cpu"), [("sme2_phone", "max"), ("nosme_phone", "max,sme=off")])
def test_the_phone_reports_the_cpu_qemu_emulates(make_emulated_phone: MakePhone, adb_server: AdbServer,
                                                   aarch64_runner_build: RunnerBuild, sme2_qemu: Path,
                                                   profile: str, cpu: str) -> None:
    phone = make_emulated_phone(profile, arm64=True)
    # What the runner's process sees under this CPU, probed here on the host with the same QEMU.
    probe = subprocess.run([str(sme2_qemu), "-cpu", cpu, "-L", aarch64_runner_build.sysroot,
                            str(aarch64_runner_build.path), "--probe"], capture_output=True, text=True, timeout=120,
                           check=True).stdout
    qemu_features = cpuinfo_features(probe)
    info = _runner(phone, aarch64_runner_build).device_info()
    assert set(info.features) == qemu_features
    assert info.sme2 is (profile == "sme2_phone") and ("sme2" in qemu_features) is info.sme2
    qemu_part = re.search(r"^CPU part\s*:\s*(\S+)", probe, re.M)
    assert qemu_part and set(info.cpu_parts) == {qemu_part.group(1)} and len(info.cpu_parts) == 8
    assert info.big_core_mask == "80"  # the profile's sysfs topology: cpu7 is the fastest core
    identity = info.identity()
    assert identity.emulator.startswith("Android emulator (ro.boot.qemu=1, ro.boot.qemu.avd_name=")
    assert f"-cpu {cpu})" in identity.emulator
    # Android's shell and tools: mksh, toybox.
    assert "MIRBSD KSH" in _shell(adb_server, phone, "echo $KSH_VERSION")
    assert _shell(adb_server, phone, "readlink /system/bin/sha256sum").strip() == "/usr/bin/toybox"


def test_an_aarch64_binary_runs_as_on_a_phone(make_emulated_phone: MakePhone, adb_server: AdbServer,
                                              aarch64_runner_build: RunnerBuild) -> None:
    phone = make_emulated_phone(arm64=True)
    remote = "/data/local/tmp/sme2_runner"
    assert adb_server.run("-s", phone.serial, "push", str(aarch64_runner_build.path), remote).returncode == 0
    # Its RUNPATH is $ORIGIN/lib: the wheel's libraries beside it, as in the build directory.
    lib = _libs(aarch64_runner_build)
    assert adb_server.run("-s", phone.serial, "push", str(lib), "/data/local/tmp/lib").returncode == 0
    out = _shell(adb_server, phone, f"{remote} --probe")
    hwcap2 = int(re.search(r"hwcap2=0x([0-9a-f]+)", out).group(1), 16)  # type: ignore[union-attr]
    assert hwcap2 & (1 << 37)  # HWCAP2_SME2: the kernel ran it under QEMU's -cpu max
    assert "arch=aarch64" in out
    # The host's own binfmt_misc is untouched: the registration lives in the phone's namespace only.
    assert not Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists() or os.environ.get("SME2_HOST_BINFMT")


# ------------------------------------------------------------------------------------------ real runs


def test_real_runner_on_the_sme2_phone(make_emulated_phone: MakePhone, aarch64_runner_build: RunnerBuild,
                                       fp32: Any, tmp_path: Path) -> None:
    phone = make_emulated_phone(arm64=True)
    runner = _runner(phone, aarch64_runner_build)
    result = runner.run(_request(fp32, tmp_path))
    libs = sorted(p.name for p in _libs(aarch64_runner_build).iterdir() if p.name.endswith(".so"))
    pushed = sorted(Path(p).name for p in result.metadata["pushed"])
    assert pushed == sorted([aarch64_runner_build.path.name, fp32.pte_path.name,
                             *(p.name for p in fp32.input_files), *libs])
    command = result.metadata["device_command"]
    assert command.count(f"{REMOTE_ROOT}/") >= len(libs) and "LD_LIBRARY_PATH=" in command
    assert phone.history.taskset_masks == ["80"] and "timeout -k 5 120" in command
    # The trace was written on the phone by the aarch64 runner and pulled: real XNNPACK operators, SME2 ones.
    assert result.trace_path is not None
    gemms = _gemms(result.trace_path)
    assert gemms and all(PACKED.search(name) for name in gemms), gemms
    assert len(result.e2e_ms) == 3 and read_etdump(result.trace_path).num_runs == 3
    assert result.per_operator
    assert not list((phone.rootfs.local_tmp / "pytest_sme2" / "runs").iterdir())
    # Pushed once per content: a second run pushes nothing.
    again = runner.run(_request(fp32, tmp_path))
    assert again.metadata["pushed"] == []
    assert runner.build_identity(None)["runner_libs_sha256"].keys() == set(libs)


def test_the_same_runner_on_the_phone_without_sme2(make_emulated_phone: MakePhone,
                                                   aarch64_runner_build: RunnerBuild, fp32: Any,
                                                   tmp_path: Path) -> None:
    phone = make_emulated_phone("nosme_phone", arm64=True)
    result = _runner(phone, aarch64_runner_build).run(_request(fp32, tmp_path))
    assert result.trace_path is not None
    gemms = _gemms(result.trace_path)
    assert gemms and not any(PACKED.search(name) for name in gemms), gemms
    assert any(name.startswith("Convolution (NHWC, F32) IGEMM") for name in gemms)


def test_without_its_libraries_the_runner_fails_saying_which_option(make_emulated_phone: MakePhone,
                                                                    aarch64_runner_build: RunnerBuild, fp32: Any,
                                                                    tmp_path: Path) -> None:
    phone = make_emulated_phone(arm64=True)
    with pytest.raises(RunnerError) as err:
        _runner(phone, aarch64_runner_build, libs=False).run(_request(fp32, tmp_path))
    assert err.value.returncode == 127
    assert "error while loading shared libraries: libexecutorch" in err.value.stderr_tail
    assert "--sme2-runner-libs DIR" in str(err.value)
