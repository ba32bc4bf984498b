"""The Android runner end to end: adbutils -> the real adb server -> the emulated phone -> the runner stand-in.

Only the phone is emulated (see tests/emulated_device/README.md for what that does not cover). The
stand-in replays real recorded traces from tests/data, so every number asserted here is read
independently from those files with ``pytest_sme2.evidence.trace.read_etdump``; device facts are written out
from the emulated profiles' descriptions, not read back from the profile objects.

The stand-in is here because a recorded trace is the point (exact numbers), or for faults only a scripted runner
gives on demand (no trace, a file that is not a trace, a hang, a full disk's text while writing). The same path with
real Arm code — the aarch64 runner on an arm64 phone, SME2 on and off, throttling, crash, timeout, full storage, a
cut pull, an unplugged phone — is ``tests/runners/test_android_arm64.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from emulated_device.device import CommandOverride, EmulatedPhone
from emulated_device.fixtures import AdbServer, MakePhone, poll
from standin import make_standin

from pytest_sme2.device.facts import device_info_from_facts
from pytest_sme2.device.identity import DeviceIdentity, explain_difference
from pytest_sme2.errors import ConfigError, DeviceError, ExportError, RunnerError
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.gate.decide import gate
from pytest_sme2.gate.verdict import GateConfig, Status
from pytest_sme2.measure.pair import profile_on_off
from pytest_sme2.measure.profile import profile_exported
from pytest_sme2.runners import SME2_OFF, SME2_ON, make_runner
from pytest_sme2.runners.android import REMOTE_ROOT, AndroidRunner, choose_serial
from pytest_sme2.runners.base import RunRequest
from runners.test_host import _five

pytestmark = pytest.mark.emulated_device

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parents[1] / "data"
TOY_PTE = DATA / "toy_cnn_fp32_xnnpack.pte"
TOY_INPUT = DATA / "toy_cnn_input_fp32.bin"

# Test-file source: a recorded .pte standing in for the exported_model fixture (used in pytester files).
RECORDED = textwrap.indent(textwrap.dedent(f"""\
    from pathlib import Path

    class Recorded:
        name, dtype, backend = "toy_cnn", "fp32", "xnnpack"
        pte_path, input_files = Path({str(TOY_PTE)!r}), (Path({str(TOY_INPUT)!r}),)

        def to_dict(self):
            return {{"name": self.name, "dtype": self.dtype, "backend": self.backend}}
    """), " " * 8).lstrip()
TOY_TRACE = DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"
MOBILE_OFF = DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-off_t1.etdump"
MOBILE_ON = DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-on_t1.etdump"

# From the profile descriptions (Dimensity-9500-like and Snapdragon-8-Gen-3-like): model, SoC,
# Android release, SDK, CPU part per cpu, (max kHz, cpus) per cluster, slowest first.
EXPECTED = {
    "sme2_phone": ("EmuPhone SME2", "Mediatek MT6993", "16", "36", ["0xd8b"] * 4 + ["0xd90"] * 3 + ["0xd8c"],
                   [(2_700_000, [0, 1, 2, 3]), (3_500_000, [4, 5, 6]), (4_210_000, [7])]),
    "nosme_phone": ("EmuPhone NoSME", "QTI SM8650", "15", "35", ["0xd80"] * 2 + ["0xd81"] * 5 + ["0xd82"],
                    [(2_265_600, [0, 1]), (3_014_400, [2, 3, 4, 5, 6]), (3_302_400, [7])]),
}


def _e2e(trace: Path) -> list[float]:
    return [float(x) for x in read_etdump(trace).e2e_ms_per_run()]


def _request(tmp_path: Path, **overrides: Any) -> RunRequest:
    fields: dict[str, Any] = {"pte": TOY_PTE, "runs": 29, "warmup": 1, "threads": 1, "out_dir": tmp_path / "out",
                              "inputs": (TOY_INPUT,), "timeout_s": 60.0}
    fields.update(overrides)
    return RunRequest(**fields)


def _runner(phone: EmulatedPhone, tmp_path: Path, *, trace: Path = TOY_TRACE, off_trace: Path | None = None,
            fault: str | None = None, **options: Any) -> AndroidRunner:
    on = make_standin(tmp_path / "build-on", trace=trace, fault=fault)
    off = make_standin(tmp_path / "build-off", trace=off_trace) if off_trace else None
    return AndroidRunner(on, off, serial=phone.serial, timeout_s=60.0, **options)


def _remote_files(phone: EmulatedPhone) -> list[str]:
    root = phone.rootfs.local_tmp / "pytest_sme2"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def _runs_left(phone: EmulatedPhone) -> list[Path]:
    runs = phone.rootfs.local_tmp / "pytest_sme2" / "runs"
    return list(runs.iterdir()) if runs.exists() else []




@dataclass(frozen=True)
class _Exported:
    """What profiling needs from an exported model (the ExportedLike protocol), for a recorded .pte."""

    name: str
    pte_path: Path
    dtype: str = "fp32"
    backend: str = "xnnpack"
    input_files: tuple[Path, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "backend": self.backend, "pte_path": str(self.pte_path)}


# ------------------------------------------------------------------------------------- device facts


def test_device_info(phone_of_each_profile: EmulatedPhone, tmp_path: Path) -> None:
    phone, profile = phone_of_each_profile, phone_of_each_profile.profile.name
    info = _runner(phone, tmp_path).device_info()
    model, soc, release, sdk, parts, clusters = EXPECTED[profile]
    assert (info.kind, info.serial, info.model, info.soc) == ("android", phone.serial, model, soc)
    assert (info.abi, info.arch, info.os_version, info.sdk) == ("arm64-v8a", "aarch64", release, sdk)
    assert list(info.cpu_parts) == parts
    assert [(c.max_khz, list(c.cpus)) for c in info.clusters] == clusters
    assert info.big_core_mask == "80"  # cpu7 is the single fastest core on both
    assert info.sme2 is (profile == "sme2_phone")
    assert ("sme" in info.features) is (profile == "sme2_phone")
    assert info.thermal_status == 0
    assert info.extra["battery"]["level"] == "87"


def test_fingerprint_separates_phones_and_builds(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    sme2, nosme = make_emulated_phone("sme2_phone"), make_emulated_phone("nosme_phone")
    a = _runner(sme2, tmp_path / "a", off_trace=MOBILE_OFF).fingerprint()
    b = _runner(nosme, tmp_path / "b", off_trace=MOBILE_OFF).fingerprint()
    assert (a["sme2"], b["sme2"]) == (True, False)
    assert a["model"] != b["model"] and a["soc"] != b["soc"]
    assert set(a["runner_sha256"]) == {"default", SME2_ON, SME2_OFF}
    assert a["runner_sha256"][SME2_ON] != a["runner_sha256"][SME2_OFF]  # the two builds differ
    assert "thermal_status" not in a and "serial" not in a  # facts that drift or name one unit stay out
    c = _runner(sme2, tmp_path / "c", trace=MOBILE_ON).fingerprint()
    assert c["runner_sha256"][SME2_ON] != a["runner_sha256"][SME2_ON]  # another build, another baseline


def test_identity_over_adb_is_the_one_of_the_recorded_facts(phone_of_each_profile: EmulatedPhone,
                                                             tmp_path: Path) -> None:
    """The live adb path reads the same identity as the recorded facts text (tests/data/device)."""
    phone, profile = phone_of_each_profile, phone_of_each_profile.profile.name
    recorded = device_info_from_facts("recorded", (DATA / "device" / f"android_facts_{profile}.txt").read_text())
    live = _runner(phone, tmp_path).identity()
    assert live == recorded.identity().to_dict()
    model, soc, _, sdk, parts, clusters = EXPECTED[profile]
    assert (live["product"], live["soc"], live["sdk"], live["logical_cpus"]) == (model, soc, sdk, len(parts))
    assert [(c["max_khz"], c["part"], c["count"]) for c in live["clusters"]] == [
        (khz, parts[cpus[0]], len(cpus)) for khz, cpus in clusters]
    assert ("sme2" in live["isa"]) is (profile == "sme2_phone")
    assert "serial" not in live and "thermal_status" not in live and "runner_sha256" not in live


def test_identity_survives_heat_and_separates_phones(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    sme2, nosme = make_emulated_phone("sme2_phone"), make_emulated_phone("nosme_phone")
    cool = _runner(sme2, tmp_path / "a").identity()
    sme2.set_thermal_status(3)
    hot_runner = _runner(sme2, tmp_path / "b")
    assert hot_runner.device_info().thermal_status == 3
    assert hot_runner.identity() == cool
    other = _runner(nosme, tmp_path / "c").identity()
    assert DeviceIdentity.from_dict(other) != DeviceIdentity.from_dict(cool)
    assert "this device lacks sme sme2" in explain_difference(DeviceIdentity.from_dict(cool),
                                                              DeviceIdentity.from_dict(other))


def test_build_identity_hashes_the_runner_and_libcxx(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone("sme2_phone")
    libcxx = tmp_path / "ndk" / "libc++_shared.so"
    libcxx.parent.mkdir()
    libcxx.write_bytes(b"\x7fELF stand-in for the NDK's shared C++ STL\n")
    runner = _runner(phone, tmp_path, off_trace=MOBILE_OFF, libcxx=libcxx)
    on, off = runner.runner_for(SME2_ON), runner.runner_for(SME2_OFF)
    assert runner.build_identity(SME2_ON) == {
        "runner": "executor_runner", "runner_sha256": hashlib.sha256(on.read_bytes()).hexdigest(),
        "libcxx_sha256": hashlib.sha256(libcxx.read_bytes()).hexdigest()}
    assert runner.build_identity(SME2_OFF)["runner_sha256"] == hashlib.sha256(off.read_bytes()).hexdigest()
    assert "libcxx_sha256" not in _runner(phone, tmp_path / "plain").build_identity(None)
    assert runner.run_settings() == {"pinning": "auto", "fixed_performance": False}


# ---------------------------------------------------------------------------------- deploy and run


def test_run_replays_the_recorded_trace_pinned_to_the_big_core(
    make_emulated_phone: MakePhone, tmp_path: Path
) -> None:
    phone = make_emulated_phone()
    result = _runner(phone, tmp_path).run(_request(tmp_path))
    assert list(result.e2e_ms) == _e2e(TOY_TRACE)
    assert result.trace_path is not None and result.trace_path.read_bytes() == TOY_TRACE.read_bytes()
    assert result.per_operator and result.runner == "android"
    assert result.log_path is not None and "Iteration 1 of" in result.log_path.read_text()
    assert phone.history.taskset_masks == ["80"]
    meta = result.metadata
    assert meta["device"]["serial"] == phone.serial and meta["device"]["sme2"] is True
    assert (meta["thermal_status_before"], meta["thermal_status_after"]) == (0, 0)
    assert "invalid_reason" not in meta
    assert meta["log_iteration_ms"] == pytest.approx(_e2e(TOY_TRACE), abs=1e-6)
    run_command = next(c for c in phone.history.commands if "--etdump_path" in c)
    assert run_command.endswith("</dev/null") and "--num_executions=30" in run_command
    assert "--cpu_threads=1" in run_command
    assert _runs_left(phone) == []  # the per-run directory is gone from the device


def test_second_run_skips_pushes_and_repairs_a_damaged_file(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone()
    runner = _runner(phone, tmp_path)
    first = runner.run(_request(tmp_path))
    pushed = len(phone.history.pushes)
    assert pushed == 3  # runner, .pte, input
    assert all(path.startswith(REMOTE_ROOT + "/") and path.endswith(".part") for path, _ in phone.history.pushes)
    assert sorted(first.metadata["pushed"]) == sorted(
        f for f in (f"{REMOTE_ROOT}/{name}" for name in _remote_files(phone)) if not f.endswith(".sha256"))
    second = runner.run(_request(tmp_path))
    assert len(phone.history.pushes) == pushed and second.metadata["pushed"] == []
    # A truncated file on the device (size no longer matches its marker) is pushed again.
    pte = next(p for p in (phone.rootfs.local_tmp / "pytest_sme2").rglob(TOY_PTE.name))
    pte.write_bytes(pte.read_bytes()[:100])
    third = runner.run(_request(tmp_path))
    assert [Path(p).name for p in third.metadata["pushed"]] == [TOY_PTE.name]
    assert pte.read_bytes() == TOY_PTE.read_bytes()
    assert list(third.e2e_ms) == _e2e(TOY_TRACE)


def test_cpu_mask_follows_threads_and_option(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone()
    _runner(phone, tmp_path / "auto").run(_request(tmp_path, threads=3))  # cpu7 + the 3.5 GHz cluster
    _runner(phone, tmp_path / "opt", big_cores="0x70").run(_request(tmp_path))
    _runner(phone, tmp_path / "none", big_cores="none").run(_request(tmp_path))
    assert phone.history.taskset_masks == ["f0", "70"]
    with pytest.raises(ConfigError, match="names no CPU"):
        _runner(phone, tmp_path / "bad", big_cores="100").run(_request(tmp_path))
    with pytest.raises(ConfigError, match="not a CPU mask"):
        _runner(phone, tmp_path / "bad2", big_cores="cpu7")


def test_on_off_interleaved_speedup_from_the_recorded_traces(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone()
    runner = _runner(phone, tmp_path, trace=MOBILE_ON, off_trace=MOBILE_OFF)
    exported = _Exported("mobilenet_v3_small_like", TOY_PTE)
    pair = profile_on_off(exported, runner, runs=29, warmup=1, blocks=2, out_dir=tmp_path / "out", timeout_s=60)
    off, on = pair.off, pair.on
    off_runs, on_runs = _e2e(MOBILE_OFF)[1:], _e2e(MOBILE_ON)[1:]
    assert list(off.samples_ms) == off_runs * 2 and list(on.samples_ms) == on_runs * 2
    expected = statistics.median(off_runs) / statistics.median(on_runs)
    print(f"\nmobilenet_v3_small_like fp32: speedup from the recorded simd-off/on traces {expected:.3f}x")
    assert expected > 1
    assert statistics.median(off.samples_ms) / statistics.median(on.samples_ms) == pytest.approx(expected)
    # ABBA: off, on, on, off — told apart by the content directory of each build.
    order = [SME2_ON if run in {r.metadata["device_command"] for r in on.runs} else SME2_OFF
             for run in (c for c in phone.history.commands if "--etdump_path" in c)]
    assert order == [SME2_OFF, SME2_ON, SME2_ON, SME2_OFF]
    assert on.device["serial"] == off.device["serial"] == phone.serial
    # One phone, two builds: the identity differs only in the variant, the artifact in the runner build.
    assert {k: v for k, v in on.identity.items() if k != "variant"} == \
        {k: v for k, v in off.identity.items() if k != "variant"}
    assert on.artifact.build["runner_sha256"] != off.artifact.build["runner_sha256"]
    assert on.artifact.pte_sha256 == off.artifact.pte_sha256
    from pytest_sme2.report.comparison import compare_on_off

    assert compare_on_off(off.analysis, on.analysis).speedup.estimate == pytest.approx(expected)


# ---------------------------------------------------------------------------------------- plugin


def test_plugin_skips_sme2_on_without_sme2(
    phone_of_each_profile: EmulatedPhone, tmp_path: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
) -> None:
    phone, profile = phone_of_each_profile, phone_of_each_profile.profile.name
    on = make_standin(tmp_path / "on", trace=TOY_TRACE)
    monkeypatch.setenv("ANDROID_SERIAL", phone.serial)
    pytester.makepyfile(
        f"""
        {RECORDED}
        def test_device(android_device):
            print("FACTS", android_device.serial, android_device.sme2, android_device.big_core_mask)

        def test_on(sme2_runner):
            profile = sme2_runner.profile(Recorded(), variant="sme2_on")
            print("SAMPLES", len(profile.samples_ms), profile.device["serial"])

        def test_backends(sme2_runner):
            sme2_runner.profile(Recorded(), variant="portable")
        """
    )
    result = pytester.runpytest("--sme2-device=android", f"--sme2-runner={on}", "--sme2-blocks=1", "--sme2-runs=20",
                                "--sme2-warmup=3", "-s", "-rs", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines([f"*FACTS {phone.serial} {profile == 'sme2_phone'} 80*"])
    # A backend comparison is the local runtime's: the skip says how to run it.
    result.stdout.fnmatch_lines(["*variant 'portable' compares backends on the local runtime only: run it with "
                                 "--sme2-device=local (the default)*"])
    if profile == "nosme_phone":
        result.assert_outcomes(passed=1, skipped=2)
        # ... and names the device that runs SME2 on and off on this machine
        result.stdout.fnmatch_lines(["*has no SME2 (no 'sme2' in its CPU features)*Run it on this machine with "
                                     "--sme2-device=qemu*"])
    else:
        result.assert_outcomes(passed=2, skipped=1)  # measured on the phone, not skipped
        result.stdout.fnmatch_lines([f"*SAMPLES 20 {phone.serial}*"])  # 23 executions, 3 of them warm-up


def test_example_suite_runs_unchanged_on_the_emulated_phone(
    make_emulated_phone: MakePhone, adb_server: AdbServer, tmp_path: Path
) -> None:
    phone = make_emulated_phone()
    on = make_standin(tmp_path / "on", trace=TOY_TRACE)
    off = make_standin(tmp_path / "off", trace=TOY_TRACE)
    env = {**os.environ, "ANDROID_SERIAL": phone.serial, "ANDROID_ADB_SERVER_PORT": str(adb_server.port)}
    base = [sys.executable, "-m", "pytest", "example_models/test_toy_cnn.py", "-k", "fp32-xnnpack", "-p",
            "no:cacheprovider", "--sme2-device=android", f"--sme2-runner={on}", f"--sme2-runner-off={off}",
            f"--sme2-baseline-dir={tmp_path / 'baselines'}", f"--sme2-out-dir={tmp_path / 'runs'}",
            "--sme2-blocks=4", "--sme2-json", str(tmp_path / "results.json")]
    first = subprocess.run([*base, "--sme2-update-baseline"], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=600, check=False)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert "BASELINE-WRITTEN" in first.stdout and "sme2 verdicts: 1 baseline-written" in first.stdout
    second = subprocess.run(base, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-2000:]
    assert "sme2 verdicts: 1 pass" in second.stdout
    record = json.loads((tmp_path / "results.json").read_text())["tests"][0]
    assert record["profile"]["device"]["serial"] == phone.serial
    assert record["profile"]["identity"]["os"] == "android"
    assert phone.history.taskset_masks and set(phone.history.taskset_masks) == {"80"}


def test_several_phones_without_a_choice_is_one_usage_error(
    make_emulated_phone: MakePhone, tmp_path: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = make_emulated_phone(), make_emulated_phone("nosme_phone")
    on = make_standin(tmp_path / "on", trace=TOY_TRACE)
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", range(3))
        def test_device(n, android_device):
            pass
        """
    )
    # --sme2-cooldown 0 is the default spelled out: accepted, not "must be greater than 0".
    result = pytester.runpytest("--sme2-device=android", f"--sme2-runner={on}", "--sme2-cooldown=0",
                                "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stdout.str()
    assert out.count("2 Android devices are attached") == 1  # once for the session, not once per test
    assert a.serial in out and b.serial in out and "--sme2-serial SERIAL" in out
    assert "Traceback" not in out


# ------------------------------------------------------------------------------------- selection


def test_device_selection(
    make_emulated_phone: MakePhone, adb_server: AdbServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = make_emulated_phone(), make_emulated_phone("nosme_phone")
    on = make_standin(tmp_path / "on", trace=TOY_TRACE)
    with pytest.raises(ConfigError) as several:
        AndroidRunner(on).device_info()
    assert "2 Android devices are attached" in str(several.value)
    assert a.serial in str(several.value) and b.serial in str(several.value)
    monkeypatch.setenv("ANDROID_SERIAL", b.serial)
    assert AndroidRunner(on).device_info().model == "EmuPhone NoSME"
    assert AndroidRunner(on, serial=a.serial).device_info().model == "EmuPhone SME2"  # the option wins
    monkeypatch.delenv("ANDROID_SERIAL")
    with pytest.raises(DeviceError, match=r"Android device 127\.0\.0\.1:1 is not attached"):
        AndroidRunner(on, serial="127.0.0.1:1").device_info()
    # pytest-xdist: one device per worker, from the sorted ready list or from a serial list.
    ready = sorted([a.serial, b.serial])
    assert [AndroidRunner(on, worker=w).serial for w in ("gw0", "gw1")] == ready
    assert AndroidRunner(on, serial=f"{b.serial},{a.serial}", worker="gw1").serial == a.serial
    with pytest.raises(ConfigError, match="worker gw2 has no Android device of its own"):
        AndroidRunner(on, worker="gw2").device_info()
    with pytest.raises(ConfigError, match="would share Android device"):
        AndroidRunner(on, serial=a.serial, worker="gw1").device_info()
    # The factory the plugin uses passes every Android option through.
    runner = make_runner("android", runner_path=on, serial=a.serial, timeout_s=5, libcxx=None, big_cores="none",
                         cooldown_s=0.0, fixed_performance=False, worker=None)
    assert isinstance(runner, AndroidRunner) and runner.serial == a.serial and runner.pin is None


def test_no_device_and_choose_serial_without_server() -> None:
    with pytest.raises(DeviceError, match="no Android device is attached"):
        choose_serial([], (), None)


# ---------------------------------------------------------------------------------------- faults


def test_unauthorized_device(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone(unauthorized=True)
    with pytest.raises(DeviceError) as err:
        _runner(phone, tmp_path).device_info()
    text = str(err.value)
    assert f"Android device {phone.serial} is unauthorized" in text and "Allow USB debugging" in text
    assert phone.history.services == []


def test_offline_device(make_emulated_phone: MakePhone, adb_server: AdbServer, tmp_path: Path) -> None:
    phone = make_emulated_phone()
    phone.go_offline()
    try:
        assert poll(lambda: adb_server.state(phone.serial) == "offline")
        with pytest.raises(DeviceError, match=f"Android device {phone.serial} is offline: .*reconnect"):
            _runner(phone, tmp_path).device_info()
    finally:
        phone.come_online()


@pytest.mark.parametrize(
    ("fault", "match", "returncode"),
    [
        ("crash", r"exited with code 134 \(killed by signal 6: the runner crashed\)", 134),
        ("no_trace", "exited 0 but wrote no trace at", 0),
        ("garbage", "exited 0 but wrote something that is not a trace", 0),
    ],
)
def test_runner_faults(make_emulated_phone: MakePhone, tmp_path: Path, fault: str, match: str,
                       returncode: int) -> None:
    phone = make_emulated_phone()
    with pytest.raises(RunnerError, match=match) as err:
        _runner(phone, tmp_path, fault=fault).run(_request(tmp_path))
    assert err.value.returncode == returncode
    assert phone.serial in str(err.value)
    # No trace is kept for a failed run; only a file that is not a trace stays, beside its log, to look at.
    assert len(list((tmp_path / "out").rglob("*.etdump"))) == (fault == "garbage")
    assert _runs_left(phone) == []


def test_foreign_pte_is_refused_before_anything_is_pushed(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone()
    foreign = tmp_path / "model.pte"
    foreign.write_bytes(TOY_TRACE.read_bytes()[:4096])  # an ETDump passed where a program belongs
    with pytest.raises(ExportError, match=str(foreign)):
        _runner(phone, tmp_path).run(_request(tmp_path, pte=foreign))
    assert phone.history.pushes == []


def test_more_threads_than_the_phone_has_cores_is_refused_before_anything_is_pushed(
    make_emulated_phone: MakePhone, tmp_path: Path
) -> None:
    phone = make_emulated_phone()
    runner = _runner(phone, tmp_path)
    cores = runner.device_info().cores
    assert cores > 0
    with pytest.raises(ConfigError, match=rf"{cores + 1} threads asked for, but Android device {phone.serial} has "
                                          rf"{cores} CPUs"):
        runner.run(_request(tmp_path, threads=cores + 1))
    assert phone.history.pushes == []


def test_runner_timeout_on_the_device(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone()
    started = time.monotonic()
    with pytest.raises(RunnerError, match=f"on Android device {phone.serial} timed out after 2 s") as err:
        _runner(phone, tmp_path, fault="hang").run(_request(tmp_path, timeout_s=2.0))
    # The device's `timeout` stopped it (exit 124, the message), not the host's backstop at 2 + 30 s: ~3-5 s quiet,
    # about ten adb round trips that a loaded machine slows several-fold, so the bound is just under the backstop.
    assert time.monotonic() - started < 30
    assert err.value.returncode == 124
    assert _runs_left(phone) == []


def test_device_that_stops_answering_times_out_on_the_host(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone(overrides=[CommandOverride("--etdump_path", delay=30)])
    runner = _runner(phone, tmp_path)
    runner.timeout_grace_s = 0.5
    with pytest.raises(RunnerError, match=r"did not finish within 1 s .* the device stopped answering"):
        runner.run(_request(tmp_path, timeout_s=1.0))


def test_storage_full_while_the_runner_writes(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    full = "E executorch:etdump] fwrite failed: No space left on device\n"
    phone = make_emulated_phone(overrides=[CommandOverride("--etdump_path", returncode=1, stderr=full)])
    with pytest.raises(RunnerError, match=f"storage is full: free space on {phone.serial}"):
        _runner(phone, tmp_path).run(_request(tmp_path))


def test_push_to_full_storage_leaves_nothing_half_written(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone(disk_full=True)
    runner = _runner(phone, tmp_path)
    with pytest.raises(DeviceError) as err:
        runner.run(_request(tmp_path))
    text = str(err.value)
    assert f"to Android device {phone.serial}" in text and "refused the write" in text and "df -h /data" in text
    assert _remote_files(phone) == []
    phone.faults.sync.data_quota_bytes = None  # space freed: the next run pushes and works
    assert list(runner.run(_request(tmp_path)).e2e_ms) == _e2e(TOY_TRACE)


def test_transport_cut_while_pulling_the_trace(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone(drop_after_recv_bytes=TOY_TRACE.stat().st_size // 2)
    with pytest.raises(DeviceError, match=f"(Android device {phone.serial}|connection to the device broke)"):
        _runner(phone, tmp_path).run(_request(tmp_path))
    assert not list((tmp_path / "out").rglob("*.etdump"))


def test_device_unplugged_mid_run(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone(overrides=[CommandOverride("--etdump_path", delay=10)])

    def unplug_once_the_runner_started() -> None:
        if poll(lambda: any("--etdump_path" in c for c in phone.history.commands), timeout=30):
            time.sleep(0.3)
            phone.go_offline()

    unplug = threading.Thread(target=unplug_once_the_runner_started)
    unplug.start()
    try:
        with pytest.raises(DeviceError) as err:
            _runner(phone, tmp_path).run(_request(tmp_path))
    finally:
        unplug.join()
        phone.come_online()
    text = str(err.value)
    assert "while running executor_runner" in text and phone.serial in text
    # What adb lists a moment after the cable is pulled: offline, usually; still listed or gone, rarely.
    assert re.search(r"is offline|still listed|disappeared", text), text
    assert "othing from this run was kept" in text
    assert not list((tmp_path / "out").rglob("*.etdump"))


def test_adb_server_restarted_mid_session(make_emulated_phone: MakePhone, adb_server: AdbServer,
                                          tmp_path: Path) -> None:
    phone = make_emulated_phone()
    runner = _runner(phone, tmp_path)
    runner.run(_request(tmp_path))
    assert adb_server.run("kill-server").returncode == 0
    assert adb_server.run("start-server").returncode == 0  # a new server: TCP devices are forgotten
    try:
        with pytest.raises(DeviceError, match=f"Android device {phone.serial} disappeared .*adb connect"):
            runner.run(_request(tmp_path))
    finally:
        adb_server.client().connect(phone.address, timeout=10)
        adb_server.client().wait_for(phone.serial, state="device", timeout=10)
    assert list(runner.run(_request(tmp_path)).e2e_ms) == _e2e(TOY_TRACE)  # and it works once reconnected


def test_two_sessions_share_a_phone(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone()
    # Two runners with the same builds, as two pytest processes would be: same content directories,
    # pushed concurrently, separate run directories.
    runners = [_runner(phone, tmp_path), _runner(phone, tmp_path)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda i: runners[i].run(_request(tmp_path / f"s{i}")), range(2)))
    assert [list(r.e2e_ms) for r in results] == [_e2e(TOY_TRACE)] * 2
    assert results[0].metadata["device_run_dir"] != results[1].metadata["device_run_dir"]
    assert results[0].trace_path != results[1].trace_path
    assert not [f for f in _remote_files(phone) if f.endswith(".part")]
    assert _runs_left(phone) == []


def test_file_names_with_shell_metacharacters(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone()
    odd = tmp_path / "odd"
    odd.mkdir()
    pte = odd / "a b;touch PWNED.pte"
    shutil.copyfile(TOY_PTE, pte)
    inputs = odd / "in $(touch PWNED2) 'x'.bin"
    shutil.copyfile(TOY_INPUT, inputs)
    result = _runner(phone, tmp_path).run(_request(tmp_path, pte=pte, inputs=(inputs,), label="odd"))
    assert list(result.e2e_ms) == _e2e(TOY_TRACE)
    assert {Path(f).name for f in _remote_files(phone)} >= {pte.name, inputs.name}
    assert [p for p in phone.rootfs.root.rglob("PWNED*")] == []
    assert not (Path.cwd() / "PWNED").exists()


# ---------------------------------------------------------------------------------------- thermal


def test_hot_at_start_is_invalid(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone(thermal_status=2)
    exported = _Exported("toy_cnn", TOY_PTE, input_files=(TOY_INPUT,))
    profile = profile_exported(exported, _runner(phone, tmp_path), runs=29, warmup=1, out_dir=tmp_path / "out")
    meta = profile.runs[0].metadata
    assert (meta["thermal_status_before"], meta["thermal_status_after"]) == (2, 2)
    assert "already hot when the run started (thermal status 2 MODERATE)" in profile.invalid_reason
    verdict = gate(profile.samples(), profile.samples(), GateConfig())
    assert verdict.status is Status.INVALID  # not a regression, not a pass


def test_throttling_during_the_run_is_invalid(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone(thermal_schedule={})
    runner = _runner(phone, tmp_path)
    assert "invalid_reason" not in runner.run(_request(tmp_path)).metadata
    # The second run sends: push check, mkdir, thermal before, runner, thermal after. Heat up as the
    # runner starts, so "before" is cool and "after" is throttled.
    phone.faults.thermal_schedule[len(phone.history.commands) + 3] = 3
    meta = runner.run(_request(tmp_path)).metadata
    assert (meta["thermal_status_before"], meta["thermal_status_after"]) == (0, 3)
    assert "throttled during the run (thermal status 0 NONE -> 3 SEVERE)" in meta["invalid_reason"]


def test_fixed_performance_mode_is_always_restored(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone()
    _runner(phone, tmp_path / "ok", fixed_performance=True).run(_request(tmp_path))
    assert phone.history.fixed_performance_mode == [True, False]
    with pytest.raises(RunnerError):
        _runner(phone, tmp_path / "crash", fault="crash", fixed_performance=True).run(_request(tmp_path))
    assert phone.history.fixed_performance_mode == [True, False, True, False]
    runner = _runner(phone, tmp_path / "fp", fixed_performance=True)
    assert runner.fingerprint()["fixed_performance"] is True
    phone.override("set-fixed-performance-mode-enabled true", returncode=255, stderr="Unknown command\n", times=1)
    with pytest.raises(DeviceError, match="refused to turn on fixed performance mode"):
        runner.run(_request(tmp_path))
    assert phone.history.fixed_performance_mode == [True, False, True, False]  # the refused call was canned


def test_cooldown_between_runs(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone()
    runner = _runner(phone, tmp_path, cooldown_s=0.5)
    first, second = (runner.run(_request(tmp_path)) for _ in range(2))
    assert (first.metadata["cooldown_s"], second.metadata["cooldown_s"]) == (0.0, 0.5)


def test_libcxx_is_pushed_beside_the_runner(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    phone = make_emulated_phone()
    libcxx = tmp_path / "ndk" / "libc++_shared.so"
    libcxx.parent.mkdir()
    libcxx.write_bytes(b"\x7fELF stand-in for the NDK's shared C++ STL\n")
    result = _runner(phone, tmp_path, libcxx=libcxx).run(_request(tmp_path))
    assert "libc++_shared.so" in [Path(p).name for p in result.metadata["pushed"]]
    on_device = next((phone.rootfs.local_tmp / "pytest_sme2").rglob("libc++_shared.so"))
    assert on_device.read_bytes() == libcxx.read_bytes()
    assert f"LD_LIBRARY_PATH={REMOTE_ROOT}/" in result.metadata["device_command"]
    assert str(on_device.parent.name) in result.metadata["device_command"]


def test_missing_shared_stl_says_to_pass_libcxx(make_emulated_phone: MakePhone, tmp_path: Path) -> None:
    linker = 'CANNOT LINK EXECUTABLE "./executor_runner": library "libc++_shared.so" not found\n'
    phone = make_emulated_phone(overrides=[CommandOverride("--etdump_path", returncode=1, stderr=linker)])
    with pytest.raises(RunnerError, match=r"needs --sme2-libcxx path/to/libc\+\+_shared\.so") as err:
        _runner(phone, tmp_path).run(_request(tmp_path))
    assert err.value.returncode == 1 and "CANNOT LINK EXECUTABLE" in err.value.stderr_tail


def test_xdist_workers_take_one_phone_each(
    make_emulated_phone: MakePhone, tmp_path: Path, pytester: pytest.Pytester
) -> None:
    phones = [make_emulated_phone(), make_emulated_phone()]
    on = make_standin(tmp_path / "on", trace=TOY_TRACE)
    pytester.makepyfile(
        f"""
        {RECORDED}
        def test_measure(sme2_runner):
            sme2_runner.profile(Recorded())
        """
    )
    results = tmp_path / "results.json"
    outcome = pytester.runpytest("-n", "2", "--dist", "each", "--sme2-device=android", f"--sme2-runner={on}",
                                 "--sme2-blocks=1", f"--sme2-json={results}", "-p", "no:cacheprovider")
    outcome.assert_outcomes(passed=2)
    serials = sorted(t["profile"]["device"]["serial"] for t in json.loads(results.read_text())["tests"])
    assert serials == sorted(p.serial for p in phones)  # each worker measured on its own phone
    assert all(p.history.taskset_masks == ["80"] for p in phones)


def test_cli_profile_on_the_phone(make_emulated_phone: MakePhone, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_sme2.cli import main

    phone = make_emulated_phone()
    on = make_standin(tmp_path / "on", trace=TOY_TRACE)
    # 3 warm-ups + 10 runs (the CLI's defaults, the plugin's): the stand-in replays the recording's first 13 runs.
    code = main(["profile", "--model", "toy_cnn", "--models-from", str(REPO / "example_models" / "models.py"),
                 "--device", "android", "--runner", str(on), "--serial", phone.serial, "--blocks", "1",
                 "--cache-dir", str(REPO / ".sme2_cache"), "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert f"== toy_cnn_fp32_xnnpack on android {phone.serial}" in out
    summary = json.loads((tmp_path / "toy_cnn_fp32_xnnpack" / "analysis_summary.json").read_text())
    assert summary["e2e_ms"]["per_run"] == pytest.approx(_e2e(TOY_TRACE)[:13])
    # Statistics leave out the CLI's default three warm-up runs.
    assert summary["e2e_ms"]["median"] == pytest.approx(statistics.median(_e2e(TOY_TRACE)[3:13]))
    assert summary["profile"]["device"]["serial"] == phone.serial
    assert main(["profile", "--model", "toy_cnn", "--serial", phone.serial]) == 2  # android-only option
    assert "apply to --device android only" in capsys.readouterr().err


def test_android_runner_refuses_a_runner_that_ignores_num_executions(make_emulated_phone: MakePhone,
                                                                     tmp_path: Path) -> None:
    """The same check (the Android runner reads its result with the host's code)."""
    phone = make_emulated_phone()
    runner = AndroidRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE, fault="ignore_count"),
                           serial=phone.serial, timeout_s=60.0)
    with pytest.raises(RunnerError, match=r"asked for 5 executions \(--num_executions=5\), the trace holds 30") as info:
        runner.run(_five(tmp_path))
    assert f"on Android device {phone.serial}" in str(info.value)
