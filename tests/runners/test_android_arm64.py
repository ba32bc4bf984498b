"""The Android path with real Arm code: pytest-sme2's aarch64 runner on an arm64 emulated phone.

The phone (``tests/emulated_device``, ``make_emulated_phone(..., arm64=True)``) executes pushed aarch64 ELF files
under ``qemu-aarch64`` (a binfmt_misc registration private to its sandbox) with the profile's CPU: ``sme2_phone``
runs on ``-cpu max`` (SME2), ``nosme_phone`` on ``-cpu max,sme=off``; its ``/proc/cpuinfo`` is the one QEMU emulates.
Nothing here is replayed: the runner is the one cross-built from the aarch64 executorch wheel (a glibc program; its
loader and libc come from ``QEMU_LD_PREFIX``, as a real phone would need an NDK build instead), its shared libraries
are pushed with ``runner_libs`` (``--sme2-runner-libs``), and every trace is written on the device and pulled.

Expectations are read here from what ran — the pulled traces (``read_etdump``), the runner's ``--probe`` of the
emulated CPU, and QEMU's in_asm log of chosen runner processes on the phone (``record_in_asm``: the kernels that
executed, which a real phone cannot tell the plugin) — with this file's own rules, not pytest_sme2's. SME2 on/off is
one runner on two CPUs (``cpu_overrides``), and the reports must say so: the wheel's XNNPACK cannot be rebuilt
without its SME2 kernels. Latency on this phone is emulated time: no test asserts
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
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from emulated_device.device import EmulatedPhone, InAsmLog, runs_binary
from emulated_device.fixtures import AdbServer, MakePhone, poll

from pytest_sme2.device.facts import cpuinfo_features
from pytest_sme2.errors import DeviceError, RunnerError
from pytest_sme2.evidence.elf import read_elf
from pytest_sme2.evidence.qemu_log import ExecutedKernels, parse_maps, read_executed_kernels
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.measure.profile import profile_exported
from pytest_sme2.runners.android import REMOTE_ROOT, AndroidRunner
from pytest_sme2.runners.base import SME2_OFF, SME2_ON, RunRequest
from pytest_sme2.runners.build import RunnerBuild

pytestmark = pytest.mark.emulated_device

REPO = Path(__file__).resolve().parents[2]
#: XNNPACK's GEMM-like operators (convolutions, fully connected) by their event names.
GEMM = re.compile(r"^(Convolution|Fully Connected) \(")
#: XNNPACK's packed-LHS types: the SME/KleidiAI paths (this file's rule, from XNNPACK's operator names).
PACKED = re.compile(r"\((NHWC|NC), P(F32|F16|QS8)\b")
#: KleidiAI's SME and SME2 routines by their exported names (``..._sme2_mopa``, ``..._sme2_mla``, ``..._sme``): this
#: file's rule, from KleidiAI's naming, not pytest_sme2's.
SME_FUNCTION = re.compile(r"(^|_)sme2?(_|$)")
XNNPACK_LIB = "libexecutorch_backend_xnnpack.so"


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


def _executed(log: InAsmLog, run_log: Path, build: RunnerBuild) -> ExecutedKernels:
    """The exported functions QEMU's in_asm log of a phone's runner process shows executing.

    The runner prints its ``/proc/self/maps`` (device paths) on stderr, which the run's log keeps; each mapped file is
    read from its host copy (the wheel's lib/, the runner build: the bytes that were pushed).
    """
    size = log.path.stat().st_size
    assert 0 < size < 64 << 20, f"{log.path}: {size} bytes"  # one process's translated code, bounded
    maps = [line.split("sme2_runner map: ", 1)[1] for line in run_log.read_text(errors="replace").splitlines()
            if "sme2_runner map: " in line]
    local = {p.name: p for p in _libs(build).iterdir()} | {log.name: build.path}
    libraries = {m.path: read_elf(local[Path(m.path).name]) for m in parse_maps(maps) if m.executable}
    assert f"{XNNPACK_LIB}" in {Path(p).name for p in libraries}, maps
    return read_executed_kernels(log.path, maps, libraries)


def _sme_functions(ran: ExecutedKernels) -> list[str]:
    return sorted({f.name for f in ran.functions if SME_FUNCTION.search(f.name)})


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
                                                   aarch64_runner_build: RunnerBuild, profile: str, cpu: str) -> None:
    phone = make_emulated_phone(profile, arm64=True)
    assert phone.arm64 is not None
    # What the runner's process sees under this CPU, probed here on the host with the same QEMU.
    probe = subprocess.run([str(phone.arm64.qemu), "-cpu", cpu, "-L", aarch64_runner_build.sysroot,
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
    phone.record_in_asm(aarch64_runner_build.path.name)
    result = _runner(phone, aarch64_runner_build).run(_request(fp32, tmp_path))
    assert result.trace_path is not None
    gemms = _gemms(result.trace_path)
    assert gemms and not any(PACKED.search(name) for name in gemms), gemms
    assert any(name.startswith("Convolution (NHWC, F32) IGEMM") for name in gemms)
    # What executed, from QEMU's own log of the runner's process on the phone: no SME routine, and no SME instruction
    # anywhere (the classes QEMU decoded outside every export); XNNPACK's library did run (the maps placed its code).
    (log,) = phone.in_asm_logs
    assert result.log_path is not None
    ran = _executed(log, result.log_path, aarch64_runner_build)
    assert not _sme_functions(ran), _sme_functions(ran)
    assert any(Path(f.library).name == XNNPACK_LIB for f in ran.functions)
    assert not [r.library for r in ran.unmapped if r.count("smstart") or r.count("fmopa za")]


def test_the_kernels_each_arm_executed_on_the_sme2_phone(make_emulated_phone: MakePhone,
                                                        aarch64_runner_build: RunnerBuild, fp32: Any,
                                                        tmp_path: Path) -> None:
    """The executed-kernel evidence of an on/off pair on the phone: QEMU's in_asm log of one run of each arm.

    The plugin cannot ask a phone (or an Android emulator) which code ran; the emulated phone's QEMU can log it for the
    test, with the plugin's commands unchanged. The SME2-off arm is the same runner under another name, which the phone
    runs on the SME-less CPU (one runner on two CPUs: XNNPACK cannot be rebuilt without SME2 from the wheel).
    """
    phone = make_emulated_phone(arm64=True, cpu_overrides={OFF_NAME: "max,sme=off"})
    off = _copy_as(aarch64_runner_build, tmp_path / "off", OFF_NAME)
    runner = _runner(phone, aarch64_runner_build, off=off)
    phone.record_in_asm(aarch64_runner_build.path.name)
    phone.record_in_asm(OFF_NAME)
    on_run = runner.run(_request(fp32, tmp_path / "on", variant=SME2_ON, runs=1, warmup=0))
    off_run = runner.run(_request(fp32, tmp_path / "off_run", variant=SME2_OFF, runs=1, warmup=0))
    logs = {log.name: log for log in phone.in_asm_logs}
    assert set(logs) == {aarch64_runner_build.path.name, OFF_NAME}  # one run of each arm, no more
    assert on_run.log_path is not None and off_run.log_path is not None
    on = _executed(logs[aarch64_runner_build.path.name], on_run.log_path, aarch64_runner_build)
    off_ran = _executed(logs[OFF_NAME], off_run.log_path, aarch64_runner_build)
    on_sme2 = [name for name in _sme_functions(on) if "sme2" in name]
    # SME2 micro-kernels of KleidiAI ran on the on arm (e.g. kai_kernel_matmul_clamp_f32_f32p2vlx1_..._sme2_mopa) ...
    assert any(name.startswith("kai_") and ("mopa" in name or "mla" in name) for name in on_sme2), on_sme2
    assert all(Path(f.library).name == XNNPACK_LIB for f in on.functions if f.name in on_sme2)
    # ... and none, nor any SME instruction, on the off arm, whose XNNPACK code did run.
    assert not _sme_functions(off_ran), _sme_functions(off_ran)
    assert any(Path(f.library).name == XNNPACK_LIB for f in off_ran.functions)
    assert not [r.library for r in off_ran.unmapped if r.count("smstart") or r.count("fmopa za")]
    # The traces agree with what ran: packed SME operators on the on arm only.
    assert on_run.trace_path is not None and off_run.trace_path is not None
    assert all(PACKED.search(n) for n in _gemms(on_run.trace_path))
    assert not any(PACKED.search(n) for n in _gemms(off_run.trace_path))
    print(f"\nSME2 functions that ran on the on arm: {on_sme2}")


def test_without_its_libraries_the_runner_fails_saying_which_option(make_emulated_phone: MakePhone,
                                                                    aarch64_runner_build: RunnerBuild, fp32: Any,
                                                                    tmp_path: Path) -> None:
    phone = make_emulated_phone(arm64=True)
    with pytest.raises(RunnerError) as err:
        _runner(phone, aarch64_runner_build, libs=False).run(_request(fp32, tmp_path))
    assert err.value.returncode == 127
    assert "error while loading shared libraries: libexecutorch" in err.value.stderr_tail
    assert "--sme2-runner-libs DIR" in str(err.value)


# ------------------------------------------------------------------------------------------ the plugin, for real

#: One runner on two CPUs: the SME2-off arm is a copy of the runner under this name, which the phone executes on
#: the no-SME CPU (``cpu_overrides``). XNNPACK cannot be rebuilt without its SME2 kernels from the wheel, so there is
#: no second build to push; what XNNPACK dispatches on the SME-less CPU is what such a build would run.
OFF_NAME = "sme2_runner_nosme"
LOST_NAME = "sme2_runner_lost"
SUITE = ["example_models/test_toy_cnn.py", "-k", "sme2_speedup or (test_latency and fp32-xnnpack)"]


def _copy_as(build: RunnerBuild, directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    shutil.copy2(build.path, path)
    return path


def _suite(phone: EmulatedPhone, build: RunnerBuild, tmp_path: Path, cache: Path,
           *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    # The session's private adb server is in ANDROID_ADB_SERVER_PORT (the adb_server fixture sets it).
    env = {**os.environ, "ANDROID_SERIAL": phone.serial}
    results = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "pytest", *SUITE, "-p", "no:cacheprovider", "-p", "no:randomly", "-rs",
           "--sme2-device=android", f"--sme2-runner-libs={_libs(build)}", f"--sme2-cache-dir={cache}",
           f"--sme2-baseline-dir={tmp_path / 'baselines'}", f"--sme2-out-dir={tmp_path / 'runs'}",
           "--sme2-blocks=4", "--sme2-runs=2", "--sme2-warmup=1", "--sme2-busy-limit=100",
           f"--sme2-json={results}", f"--sme2-markdown={tmp_path / 'r.md'}", *extra]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False)
    doc = json.loads(results.read_text()) if results.is_file() else {"tests": []}
    return done, {t["test_id"].rsplit("::", 1)[-1]: t for t in doc["tests"]}


def _check(test: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in test["verdict"]["checks"] if c["name"] == name)


def test_example_suite_on_the_sme2_phone_sme2_on_and_off(make_emulated_phone: MakePhone,
                                                         aarch64_runner_build: RunnerBuild, fp32: Any,
                                                         sme2_shared_cache: Path, tmp_path: Path) -> None:
    # fp32: exported into the shared cache the suite reads (the same .pte it pushes)
    phone = make_emulated_phone(arm64=True, cpu_overrides={OFF_NAME: "max,sme=off"})
    off = _copy_as(aarch64_runner_build, tmp_path / "off", OFF_NAME)
    done, tests = _suite(phone, aarch64_runner_build, tmp_path, sme2_shared_cache,
                         f"--sme2-runner={aarch64_runner_build.path}", f"--sme2-runner-off={off}")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert set(tests) == {"test_latency[fp32-xnnpack]", "test_sme2_speedup"}, out[-3000:]
    pair = tests["test_sme2_speedup"]
    # SME2 evidence from the real aarch64 traces: packed SME operators on the on arm, none on the off arm.
    on_ops = [o["name"] for o in pair["profile"]["analysis"]["operator_details"] if GEMM.match(o["name"])]
    off_ops = [o["name"] for o in pair["profile_off"]["analysis"]["operator_details"] if GEMM.match(o["name"])]
    assert on_ops and all(PACKED.search(n) for n in on_ops) and not any(PACKED.search(n) for n in off_ops)
    kernels = _check(pair, "sme2_kernels")
    assert kernels["status"] == "pass" and "(NHWC, PF32)" in kernels["message"]
    # Which pair it was: one runner build (the same sha256 for both arms, read here) on two CPUs, which the phone's
    # description names for every arm; never "two builds".
    on_sha, off_sha = (pair[k]["artifact"]["build"]["runner_sha256"] for k in ("profile", "profile_off"))
    assert on_sha == off_sha
    findings = pair["comparison"]["findings"]
    assert any(f.startswith(f"One runner build for both arms (sha256 {on_sha[:12]}), not two builds") for f in findings)
    assert not any("Two runner builds" in f for f in findings), findings
    for arm in ("profile", "profile_off"):
        assert f"-cpu max; {OFF_NAME} on -cpu max,sme=off)" in pair[arm]["identity"]["emulator"]
    assert f"{OFF_NAME} on -cpu max,sme=off" in (tmp_path / "r.md").read_text()
    # Emulated time: labelled in every report, the ratio never gated as a speedup.
    speedup = _check(pair, "min_speedup")
    assert speedup["advisory"] and speedup["message"].startswith("not a device: not gated")
    assert all(t["emulated"] for t in tests.values())
    assert pair["profile"]["identity"]["emulator"].startswith("Android emulator (ro.boot.qemu=1")
    for node in tests:
        line = next(line for line in done.stdout.splitlines() if node in line and "median" in line)
        shown = line.split(node, 1)[1]
        assert "(emulated)" in shown and "speedup" not in shown.lower()
    assert "emulated" in (tmp_path / "r.md").read_text().lower()
    # The categories and top operators come from the pulled traces of this run.
    latency = tests["test_latency[fp32-xnnpack]"]["profile"]
    assert latency["device"]["serial"] == phone.serial
    assert latency["analysis"]["category_totals_ms"]["Convolution"] > 0
    traces = sorted((tmp_path / "runs").rglob("*.etdump"))
    assert traces, "the pulled traces are kept beside their logs"
    named = {re.sub(r" #\d+$", "", str(n)) for n in read_etdump(traces[0]).operators()["event_name"]}
    top = latency["analysis"]["operator_details"][0]["name"]
    assert top in named and PACKED.search(top), top
    assert latency["identity"]["os"] == "android" and "sme2" in latency["identity"]["isa"]
    # Every runner process pinned to the big core and bounded by the device-side timeout.
    runs = [c for c in phone.history.commands if runs_binary(c, aarch64_runner_build.path.name) or
            runs_binary(c, OFF_NAME)]
    assert runs and all(re.search(r"exec timeout -k 5 \S+ taskset 80 /", c) for c in runs), runs
    assert set(phone.history.taskset_masks) == {"80"} and len(phone.history.taskset_masks) == len(runs)
    # Every file pushed once per content (<sha256>/<name>; a push goes to <name>.<run id>.part): the runner, its copy
    # under the off arm's name, the wheel's libraries, the .pte and its inputs, though both tests ran them many times.
    pushed = Counter(re.sub(r"\.[^./]+\.part$", "", path) for path, _ in phone.history.pushes)
    assert pushed and set(pushed.values()) == {1}, pushed
    names = {Path(p).name for p in pushed}
    libs = {p.name for p in _libs(aarch64_runner_build).iterdir() if p.name.endswith(".so")}
    assert {aarch64_runner_build.path.name, OFF_NAME, fp32.pte_path.name, *libs} <= names, names
    print(f"\nemulated phone, toy_cnn fp32: on/off ratio {speedup['message'][:160]}")


@pytest.mark.usefixtures("fp32")
def test_an_sme2_on_arm_that_lost_its_kernels_fails_with_the_kernel_evidence(
    make_emulated_phone: MakePhone, aarch64_runner_build: RunnerBuild, sme2_shared_cache: Path, tmp_path: Path,
) -> None:
    # The SME2-on arm runs on the SME-less CPU of a phone that reports SME2: a build that lost its SME2 kernels.
    phone = make_emulated_phone(arm64=True, cpu_overrides={OFF_NAME: "max,sme=off", LOST_NAME: "max,sme=off"})
    lost = _copy_as(aarch64_runner_build, tmp_path / "on", LOST_NAME)
    off = _copy_as(aarch64_runner_build, tmp_path / "off", OFF_NAME)
    phone.record_in_asm(LOST_NAME)  # the first SME2-on process: what it executed, from the phone's QEMU
    done, tests = _suite(phone, aarch64_runner_build, tmp_path, sme2_shared_cache,
                         f"--sme2-runner={lost}", f"--sme2-runner-off={off}", "-k", "sme2_speedup")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-4000:]
    check = _check(tests["test_sme2_speedup"], "sme2_kernels")
    assert check["status"] == "regression" and not check["advisory"]
    assert "no SME operator" in check["message"] and "Convolution (NHWC, F32) IGEMM" in check["message"]
    assert "no SME operator" in out
    # What the SME2-on arm executed agrees: no SME routine, no SME instruction, though XNNPACK ran. Its first process
    # is the SME2-on run directory with the lowest sequence number (<time>-<pid>-<n>: n counts the session's runs).
    (log,) = phone.in_asm_logs
    first = min((tmp_path / "runs").rglob("*_sme2_on/*/*_sme2_on.log"),
                key=lambda path: int(path.parent.name.rsplit("-", 1)[1]))
    ran = _executed(log, first, aarch64_runner_build)
    assert not _sme_functions(ran), _sme_functions(ran)
    assert any(Path(f.library).name == XNNPACK_LIB for f in ran.functions)
    assert not [r.library for r in ran.unmapped if r.count("smstart") or r.count("fmopa za")]


@pytest.mark.usefixtures("fp32")
def test_sme2_on_tests_skip_on_the_phone_without_sme2(make_emulated_phone: MakePhone,
                                                      aarch64_runner_build: RunnerBuild,
                                                      sme2_shared_cache: Path, tmp_path: Path) -> None:
    phone = make_emulated_phone("nosme_phone", arm64=True)
    done, _ = _suite(phone, aarch64_runner_build, tmp_path, sme2_shared_cache,
                     f"--sme2-runner={aarch64_runner_build.path}", "-k", "sme2_speedup")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "1 skipped" in done.stdout and "has no SME2 (no 'sme2' in its CPU features)" in done.stdout


# ------------------------------------------------------------------------------- heat and faults, real runner


def test_a_phone_that_throttles_mid_run_gives_invalid(make_emulated_phone: MakePhone,
                                                      aarch64_runner_build: RunnerBuild, fp32: Any,
                                                      tmp_path: Path) -> None:
    from pytest_sme2.gate.decide import gate
    from pytest_sme2.gate.verdict import GateConfig, Status

    phone = make_emulated_phone(arm64=True)
    runner = _runner(phone, aarch64_runner_build)
    profile = profile_exported(fp32, runner, runs=2, warmup=1, blocks=1, out_dir=tmp_path / "a")
    assert not profile.invalid_reason
    # The next block sends: push check, mkdir, thermal before, runner, thermal after: heat up as the runner starts.
    phone.faults.thermal_schedule[len(phone.history.commands) + 3] = 3
    hot = profile_exported(fp32, runner, runs=2, warmup=1, blocks=1, out_dir=tmp_path / "b")
    meta = hot.runs[0].metadata
    assert (meta["thermal_status_before"], meta["thermal_status_after"]) == (0, 3)
    assert "throttled during the run (thermal status 0 NONE -> 3 SEVERE)" in hot.invalid_reason
    assert gate(profile.samples(), hot.samples(), GateConfig(emulated=True)).status is Status.INVALID


def test_the_device_side_timeout_stops_a_real_runner(make_emulated_phone: MakePhone,
                                                     aarch64_runner_build: RunnerBuild, fp32: Any,
                                                     tmp_path: Path) -> None:
    phone = make_emulated_phone(arm64=True)
    started = time.monotonic()
    with pytest.raises(RunnerError, match=f"on Android device {phone.serial} timed out after 3 s") as err:
        _runner(phone, aarch64_runner_build).run(_request(fp32, tmp_path, runs=100_000, timeout_s=3.0))
    assert err.value.returncode == 124 and time.monotonic() - started < 60


def test_a_real_runner_that_crashes(make_emulated_phone: MakePhone, aarch64_runner_build: RunnerBuild, fp32: Any,
                                    tmp_path: Path) -> None:
    phone = make_emulated_phone(arm64=True)
    runner = _runner(phone, aarch64_runner_build)
    runner.run(_request(fp32, tmp_path))  # pushed and working

    def crash_it() -> None:
        marker = b"--num_executions=100004"  # this test's own: xdist may run the timeout test's runner beside it
        if poll(lambda: _runner_pid(marker) is not None, timeout=30):
            time.sleep(0.5)
            found = _runner_pid(marker)
            if found is not None:
                os.kill(found, signal.SIGSEGV)

    killer = threading.Thread(target=crash_it)
    killer.start()
    try:
        with pytest.raises(RunnerError, match=r"exited with code 139 \(killed by signal 11: the runner crashed\)"):
            runner.run(_request(fp32, tmp_path, runs=100_003, timeout_s=40.0))
    finally:
        killer.join()


def test_disk_full_and_a_cut_pull_with_real_files(make_emulated_phone: MakePhone,
                                                  aarch64_runner_build: RunnerBuild, fp32: Any,
                                                  tmp_path: Path) -> None:
    # 4 MB of quota: the runner fits, the 8.7 MB optimized-kernels library does not.
    phone = make_emulated_phone(arm64=True, data_quota_bytes=4_000_000)
    with pytest.raises(DeviceError, match="refused the write"):
        _runner(phone, aarch64_runner_build).run(_request(fp32, tmp_path))
    assert not [p for p in (phone.rootfs.local_tmp / "pytest_sme2").rglob("*.part")]
    cut = make_emulated_phone(arm64=True, drop_after_recv_bytes=2000)
    with pytest.raises(DeviceError, match=f"(Android device {cut.serial}|connection to the device broke)"):
        _runner(cut, aarch64_runner_build).run(_request(fp32, tmp_path / "cut"))
    assert not list((tmp_path / "cut").rglob("*.etdump"))


def _runner_pid(marker: bytes) -> int | None:
    """The QEMU process running the phone's runner with ``marker`` among its arguments (not ``timeout`` or the taskset
    shim, which carry the same arguments): under binfmt the runner's process is QEMU."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline and cmdline.split(b"\0")[0].endswith(b"qemu-aarch64"):
                return int(proc.name)
    return None


def test_a_phone_unplugged_while_the_real_runner_runs(make_emulated_phone: MakePhone,
                                                      aarch64_runner_build: RunnerBuild, fp32: Any,
                                                      tmp_path: Path) -> None:
    phone = make_emulated_phone(arm64=True)
    runner = _runner(phone, aarch64_runner_build)
    runner.run(_request(fp32, tmp_path / "first"))  # pushed and working
    marker = b"--num_executions=100002"

    def unplug_once_the_runner_runs() -> None:
        if poll(lambda: _runner_pid(marker) is not None, timeout=30):
            time.sleep(0.5)
            phone.go_offline()

    unplug = threading.Thread(target=unplug_once_the_runner_runs)
    unplug.start()
    try:
        with pytest.raises(DeviceError) as err:
            runner.run(_request(fp32, tmp_path, runs=100_000, warmup=2, timeout_s=60.0))
    finally:
        unplug.join()
        phone.come_online()
    text = str(err.value)
    assert "while running" in text and phone.serial in text, text
    assert re.search(r"is offline|still listed|disappeared", text), text
    assert not list((tmp_path / "out").rglob("*.etdump"))
    # The closed stream killed the emulated runner on the phone, as adbd kills a command whose stream is gone.
    assert poll(lambda: _runner_pid(marker) is None, timeout=20)


def test_unauthorized_and_offline_arm64_phones(make_emulated_phone: MakePhone, adb_server: AdbServer,
                                               aarch64_runner_build: RunnerBuild, tmp_path: Path) -> None:
    locked = make_emulated_phone(arm64=True, unauthorized=True)
    with pytest.raises(DeviceError, match=f"Android device {locked.serial} is unauthorized"):
        _runner(locked, aarch64_runner_build).device_info()
    phone = make_emulated_phone(arm64=True)
    phone.go_offline()
    try:
        assert poll(lambda: adb_server.state(phone.serial) == "offline")
        with pytest.raises(DeviceError, match=f"Android device {phone.serial} is offline"):
            _runner(phone, aarch64_runner_build).device_info()
    finally:
        phone.come_online()
