"""Wiring tests: adbutils -> the real adb server -> the emulated phone, for both profiles.

Everything goes through a real adb server (the binary adbutils picks); only the phone is emulated.
Expected values are written out here from the profile descriptions (not read back from the profile
objects) so a wrong rootfs cannot agree with itself.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import adbutils
import pytest
from emulated_device.device import CommandOverride, EmulatedPhone
from emulated_device.fixtures import AdbServer, MakePhone, poll

pytestmark = pytest.mark.emulated_device

TIMEOUT = 20  # per adb call: generous for CI, short enough that a hang fails fast
PROFILES = ("sme2_phone", "nosme_phone")
PROBE = Path(__file__).parent / "emulated_device" / "device_probe.py"

# Per profile, from the SoC descriptions in the brief: (product, model, SDK, SoC model,
# cpuinfo_max_freq per cpu in kHz, CPU part per cpu).
EXPECTED = {
    "sme2_phone": (
        "emu_sme2",
        "EmuPhone_SME2",
        "36",
        "MT6993",
        [2_700_000] * 4 + [3_500_000] * 3 + [4_210_000],
        ["0xd8b"] * 4 + ["0xd90"] * 3 + ["0xd8c"],
    ),
    "nosme_phone": (
        "emu_nosme",
        "EmuPhone_NoSME",
        "35",
        "SM8650",
        [2_265_600] * 2 + [3_014_400] * 5 + [3_302_400],
        ["0xd80"] * 2 + ["0xd81"] * 5 + ["0xd82"],
    ),
}


def _device(server: AdbServer, phone: EmulatedPhone) -> adbutils.AdbDevice:
    return server.client().device(phone.serial)




@pytest.mark.parametrize("profile", PROFILES)
def test_device_is_listed_with_product_and_model(
    make_emulated_phone: MakePhone, adb_server: AdbServer, profile: str
) -> None:
    phone = make_emulated_phone(profile)
    product, model, *_ = EXPECTED[profile]
    infos = {info.serial: info for info in adb_server.client().list(extended=True)}
    assert infos[phone.serial].state == "device"
    assert infos[phone.serial].tags["product"] == product
    assert infos[phone.serial].tags["model"] == model  # the server turns spaces into "_"
    listing = adb_server.run("devices", "-l", timeout=TIMEOUT).stdout
    line = next(line for line in listing.splitlines() if line.startswith(phone.serial))
    assert f"product:{product} model:{model} device:{product}" in line


@pytest.mark.parametrize("profile", PROFILES)
def test_shell_v2_separates_streams_and_returns_exit_code(
    make_emulated_phone: MakePhone, adb_server: AdbServer, profile: str
) -> None:
    device = _device(adb_server, make_emulated_phone(profile))
    result = device.shell2("echo out; echo err >&2; exit 7", v2=True, timeout=TIMEOUT)
    assert (result.returncode, result.stdout, result.stderr) == (7, "out\n", "err\n")
    assert device.shell2("true", v2=True, timeout=TIMEOUT).returncode == 0


@pytest.mark.parametrize(("signal_name", "status"), [("KILL", 137), ("TERM", 143)])
def test_killed_command_reports_128_plus_signal(
    emulated_phone: EmulatedPhone, adb_server: AdbServer, signal_name: str, status: int
) -> None:
    result = _device(adb_server, emulated_phone).shell2(f"kill -{signal_name} $$", v2=True, timeout=TIMEOUT)
    assert result.returncode == status


def test_shell_v1_merges_output_and_cli_gets_exit_code(emulated_phone: EmulatedPhone, adb_server: AdbServer) -> None:
    device = _device(adb_server, emulated_phone)
    assert device.shell("echo out; echo err >&2", timeout=TIMEOUT) == "out\nerr"
    cli = adb_server.run("-s", emulated_phone.serial, "shell", "echo hi; echo e >&2; exit 4", timeout=TIMEOUT)
    assert (cli.returncode, cli.stdout, cli.stderr) == (4, "hi\n", "e\n")


def test_cli_shell_sends_close_stdin(emulated_phone: EmulatedPhone, adb_server: AdbServer) -> None:
    # adb 36 sends a close-stdin packet at once when its stdin is at EOF; `cat` must then finish.
    done = subprocess.run(
        [adb_server.adb, "-s", emulated_phone.serial, "shell", "cat; echo cat-done"],
        env=adb_server.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "cat-done\n")


def test_exec_out_is_raw(emulated_phone: EmulatedPhone, adb_server: AdbServer) -> None:
    argv = [adb_server.adb, "-s", emulated_phone.serial, "exec-out", "printf 'a\\r\\nb'"]
    done = subprocess.run(argv, env=adb_server.env, capture_output=True, timeout=TIMEOUT, check=False)
    assert done.stdout == b"a\r\nb"  # bytes: no pty, no newline translation
    assert emulated_phone.history.services[-1] == "exec:printf 'a\\r\\nb'"


def test_unsupported_service_is_refused(emulated_phone: EmulatedPhone, adb_server: AdbServer) -> None:
    done = adb_server.run("-s", emulated_phone.serial, "root", timeout=TIMEOUT)
    assert done.returncode != 0
    assert "root:" in emulated_phone.history.services


@pytest.mark.parametrize("profile", PROFILES)
def test_shell_runs_as_uid_2000_with_android_path(
    make_emulated_phone: MakePhone, adb_server: AdbServer, profile: str
) -> None:
    device = _device(adb_server, make_emulated_phone(profile))
    result = device.shell2("id -u; id -g; id -G; echo $PATH; pwd", v2=True, timeout=TIMEOUT)
    assert result.stdout.split() == ["2000", "2000", "2000", "/system/bin:/usr/bin:/bin", "/"]


def test_closing_the_stream_kills_the_command(emulated_phone: EmulatedPhone, adb_server: AdbServer) -> None:
    marker = f"31.{os.getpid()}"  # a sleep length unique to this run, to find exactly this process

    def running() -> bool:
        found = subprocess.run(["pgrep", "-u", "2000", "-f", f"sleep {marker}"], capture_output=True, check=False)
        return found.returncode == 0

    connection = _device(adb_server, emulated_phone).shell(f"sleep {marker}", stream=True)
    try:
        assert poll(running), "the command never started"
    finally:
        connection.close()
    assert poll(lambda: not running()), "the command outlived its closed stream"


@pytest.mark.parametrize("profile", PROFILES)
def test_push_pull_round_trip_5mb(
    make_emulated_phone: MakePhone, adb_server: AdbServer, profile: str, tmp_path: Path
) -> None:
    phone = make_emulated_phone(profile)
    device = _device(adb_server, phone)
    payload = os.urandom(5 * 1024 * 1024)
    source = tmp_path / "model.pte"
    source.write_bytes(payload)
    assert device.sync.push(source, "/data/local/tmp/model.pte") == len(payload)
    on_device = phone.rootfs.local_tmp / "model.pte"
    assert on_device.read_bytes() == payload
    assert (on_device.stat().st_uid, on_device.stat().st_gid) == (2000, 2000)
    assert device.sync.stat("/data/local/tmp/model.pte").size == len(payload)
    device.sync.pull("/data/local/tmp/model.pte", tmp_path / "back.pte")
    assert (tmp_path / "back.pte").read_bytes() == payload
    # The CLI takes the stat_v2 path (STA2 + SEND/RECV) that adbutils does not.
    cli_back = tmp_path / "cli.pte"
    assert adb_server.run("-s", phone.serial, "push", str(source), "/data/local/tmp/cli/m.pte").returncode == 0
    assert adb_server.run("-s", phone.serial, "pull", "/data/local/tmp/cli/m.pte", str(cli_back)).returncode == 0
    assert cli_back.read_bytes() == payload
    assert (
        device.shell2("sha256sum /data/local/tmp/cli/m.pte", v2=True, timeout=TIMEOUT).stdout.split()[0]
        == (subprocess.run(["sha256sum", str(source)], capture_output=True, text=True, check=True).stdout.split()[0])
    )


def test_file_name_with_shell_metacharacters_is_never_executed(
    emulated_phone: EmulatedPhone, adb_server: AdbServer, tmp_path: Path
) -> None:
    device = _device(adb_server, emulated_phone)
    name = "a b;cd $TMPDIR&&touch PWNED"
    remote = f"/data/local/tmp/{name}"
    source = tmp_path / "payload.bin"
    source.write_bytes(b"harmless\n")
    device.sync.push(source, remote)
    assert name in [entry.path for entry in device.sync.list("/data/local/tmp")]
    device.sync.pull(remote, tmp_path / "back.bin")
    assert (tmp_path / "back.bin").read_bytes() == b"harmless\n"
    assert device.shell(["cat", remote], timeout=TIMEOUT) == "harmless"  # list form: shlex-quoted
    assert adb_server.run("-s", emulated_phone.serial, "pull", remote, str(tmp_path / "cli.bin")).returncode == 0

    def pwned() -> list[Path]:
        return [p for p in emulated_phone.rootfs.root.rglob("*") if p.name == "PWNED"]

    assert pwned() == []
    # Prove the check can see an injection: the same name pasted unquoted does run `touch PWNED`.
    device.shell(f"cat {remote}", timeout=TIMEOUT)
    assert [p.name for p in pwned()] == ["PWNED"]


def test_pull_of_a_missing_file(emulated_phone: EmulatedPhone, adb_server: AdbServer, tmp_path: Path) -> None:
    device = _device(adb_server, emulated_phone)
    missing = "/data/local/tmp/no_such.etdump"
    assert not device.sync.exists(missing)
    with pytest.raises(adbutils.AdbError, match="No such file or directory"):
        device.sync.read_bytes(missing)
    # adbutils quirk the Android runner must guard against: pull() "succeeds" with an empty directory.
    assert device.sync.pull(missing, tmp_path / "etdump") == 0
    assert (tmp_path / "etdump").is_dir()
    cli = adb_server.run("-s", emulated_phone.serial, "pull", missing, str(tmp_path / "cli"))
    assert cli.returncode == 1
    assert f"failed to stat remote object '{missing}': No such file or directory" in cli.stderr


def test_push_into_read_only_and_root_only_places_fails(
    emulated_phone: EmulatedPhone, adb_server: AdbServer, tmp_path: Path
) -> None:
    source = tmp_path / "f"
    source.write_bytes(b"x")
    system = adb_server.run("-s", emulated_phone.serial, "push", str(source), "/system/bin/f")
    assert "remote couldn't create file: Read-only file system" in system.stderr
    data = adb_server.run("-s", emulated_phone.serial, "push", str(source), "/data/f")
    assert "remote couldn't create file: Permission denied" in data.stderr
    assert not (emulated_phone.rootfs.data / "f").exists()


@pytest.mark.parametrize("profile", PROFILES)
def test_getprop(make_emulated_phone: MakePhone, adb_server: AdbServer, profile: str) -> None:
    device = _device(adb_server, make_emulated_phone(profile))
    _, _, sdk, soc, *_ = EXPECTED[profile]
    assert device.getprop("ro.build.version.sdk") == sdk
    assert device.getprop("ro.soc.model") == soc
    assert device.getprop("ro.product.cpu.abi") == "arm64-v8a"
    assert device.getprop("ro.no.such.prop") == ""
    assert device.shell("getprop ro.no.such.prop fallback", timeout=TIMEOUT) == "fallback"
    assert f"[ro.soc.model]: [{soc}]" in device.shell("getprop", timeout=TIMEOUT).splitlines()


@pytest.mark.parametrize("profile", PROFILES)
def test_cpuinfo_features_and_parts(make_emulated_phone: MakePhone, adb_server: AdbServer, profile: str) -> None:
    device = _device(adb_server, make_emulated_phone(profile))
    cpuinfo = device.shell2("cat /proc/cpuinfo", v2=True, timeout=TIMEOUT).stdout
    assert device.sync.read_text("/proc/cpuinfo") == cpuinfo
    lines = [line.split(":", 1) for line in cpuinfo.splitlines() if ":" in line]
    features = [value.split() for key, value in lines if key.strip() == "Features"]
    parts = [value.strip() for key, value in lines if key.strip() == "CPU part"]
    assert len(features) == 8
    has_sme2 = profile == "sme2_phone"
    assert all(("sme2" in tokens) == has_sme2 and ("sme" in tokens) == has_sme2 for tokens in features)
    assert parts == EXPECTED[profile][5]


@pytest.mark.parametrize("profile", PROFILES)
def test_cpufreq_topology(make_emulated_phone: MakePhone, adb_server: AdbServer, profile: str) -> None:
    device = _device(adb_server, make_emulated_phone(profile))
    base = "/sys/devices/system/cpu"
    script = f"cat {base}/possible; for c in 0 1 2 3 4 5 6 7; do cat {base}/cpu$c/cpufreq/cpuinfo_max_freq; done"
    out = device.shell2(script, v2=True, timeout=TIMEOUT).stdout.split()
    assert out[0] == "0-7"
    assert [int(khz) for khz in out[1:]] == EXPECTED[profile][4]
    related = device.shell2(f"cat {base}/cpu7/cpufreq/related_cpus {base}/cpu7/cpu_capacity", v2=True, timeout=TIMEOUT)
    assert related.stdout.split() == ["7", "1024"]


def test_taskset_validates_the_mask_against_the_fake_topology(
    emulated_phone: EmulatedPhone, adb_server: AdbServer
) -> None:
    device = _device(adb_server, emulated_phone)
    pinned = device.shell2("taskset 80 echo pinned", v2=True, timeout=TIMEOUT)
    assert (pinned.returncode, pinned.stdout) == (0, "pinned\n")
    outside = device.shell2("taskset 100 echo never", v2=True, timeout=TIMEOUT)
    assert (outside.returncode, outside.stdout) == (1, "")
    assert "sched_setaffinity: Invalid argument" in outside.stderr
    bad = device.shell2("taskset zz echo never", v2=True, timeout=TIMEOUT)
    assert bad.returncode == 1
    assert device.shell2("taskset 0x70 true", v2=True, timeout=TIMEOUT).returncode == 0
    assert emulated_phone.history.taskset_masks == ["80", "0x70"]
    assert emulated_phone.history.taskset_calls[0] == ("80", "echo pinned")


def test_governor_write_is_denied_but_local_tmp_is_writable(
    emulated_phone: EmulatedPhone, adb_server: AdbServer
) -> None:
    device = _device(adb_server, emulated_phone)
    governor = "/sys/devices/system/cpu/cpu7/cpufreq/scaling_governor"
    denied = device.shell2(f"echo performance > {governor}", v2=True, timeout=TIMEOUT)
    assert denied.returncode != 0
    assert "Permission denied" in denied.stderr
    assert device.shell(f"cat {governor}", timeout=TIMEOUT) == "schedutil"
    written = device.shell2("echo ok > /data/local/tmp/w && cat /data/local/tmp/w", v2=True, timeout=TIMEOUT)
    assert (written.returncode, written.stdout) == (0, "ok\n")
    assert device.shell2("touch /data/x", v2=True, timeout=TIMEOUT).returncode != 0  # /data is 0771 root


def _thermal_status(device: adbutils.AdbDevice) -> int:
    out = device.shell("dumpsys thermalservice", timeout=TIMEOUT)
    return int(next(line for line in out.splitlines() if line.startswith("Thermal Status:")).split(":")[1])


def test_thermal_status_via_dumpsys_and_cmd(emulated_phone: EmulatedPhone, adb_server: AdbServer) -> None:
    device = _device(adb_server, emulated_phone)
    out = device.shell("dumpsys thermalservice", timeout=TIMEOUT)
    assert "Temperature{mValue=44.8, mType=0, mName=AP, mStatus=0}" in out
    assert _thermal_status(device) == 0
    emulated_phone.set_thermal_status(3)
    assert _thermal_status(device) == 3
    assert device.shell2("cmd thermalservice override-status 5", v2=True, timeout=TIMEOUT).returncode == 0
    assert _thermal_status(device) == 5
    assert "IsStatusOverride: true" in device.shell("dumpsys thermalservice", timeout=TIMEOUT)
    device.shell("cmd thermalservice reset", timeout=TIMEOUT)
    assert _thermal_status(device) == 3
    bad = device.shell2("cmd nosuchservice x", v2=True, timeout=TIMEOUT)
    assert (bad.returncode, bad.stderr) == (20, "cmd: Can't find service: nosuchservice\n")


def test_thermal_status_changes_mid_run(make_emulated_phone: MakePhone, adb_server: AdbServer) -> None:
    device = _device(adb_server, make_emulated_phone(thermal_schedule={2: 4}))
    assert [_thermal_status(device) for _ in range(4)] == [0, 0, 4, 4]


def test_fixed_performance_mode_is_recorded(emulated_phone: EmulatedPhone, adb_server: AdbServer) -> None:
    device = _device(adb_server, emulated_phone)
    for value in ("true", "false"):
        result = device.shell2(f"cmd power set-fixed-performance-mode-enabled {value}", v2=True, timeout=TIMEOUT)
        assert result.returncode == 0
    assert emulated_phone.history.fixed_performance_mode == [True, False]


def test_battery(emulated_phone: EmulatedPhone, adb_server: AdbServer) -> None:
    battery = _device(adb_server, emulated_phone).battery()
    assert (battery.level, battery.temperature, battery.usb_powered) == (87, 31.2, True)


def test_unauthorized_device(make_emulated_phone: MakePhone, adb_server: AdbServer) -> None:
    phone = make_emulated_phone(unauthorized=True)
    assert adb_server.state(phone.serial) == "unauthorized"
    with pytest.raises(adbutils.AdbError, match="unauthorized"):
        _device(adb_server, phone).shell("id", timeout=TIMEOUT)
    assert phone.history.services == []


def test_offline_and_back(emulated_phone: EmulatedPhone, adb_server: AdbServer) -> None:
    device = _device(adb_server, emulated_phone)
    emulated_phone.go_offline()
    assert poll(lambda: adb_server.state(emulated_phone.serial) == "offline")
    with pytest.raises(adbutils.AdbError, match="offline"):
        device.shell("id", timeout=TIMEOUT)
    emulated_phone.come_online()
    adb_server.client().wait_for(emulated_phone.serial, state="device", timeout=TIMEOUT)
    assert device.shell("id -u", timeout=TIMEOUT) == "2000"


def test_disk_full_push_fails_with_the_device_message(
    make_emulated_phone: MakePhone, adb_server: AdbServer, tmp_path: Path
) -> None:
    phone = make_emulated_phone(disk_full=True)
    source = tmp_path / "model.pte"
    source.write_bytes(os.urandom(100_000))
    # adbutils reads only the FAIL tag, not the message: the CLI shows what the device said.
    with pytest.raises(adbutils.AdbError, match="FAIL"):
        _device(adb_server, phone).sync.push(source, "/data/local/tmp/model.pte")
    cli = adb_server.run("-s", phone.serial, "push", str(source), "/data/local/tmp/model.pte", timeout=TIMEOUT)
    assert cli.returncode == 1
    assert "remote write failed: No space left on device" in cli.stderr
    assert not (phone.rootfs.local_tmp / "model.pte").exists()  # no partial file left behind


def test_data_quota_lets_small_pushes_through(
    make_emulated_phone: MakePhone, adb_server: AdbServer, tmp_path: Path
) -> None:
    phone = make_emulated_phone(data_quota_bytes=1500)
    device = _device(adb_server, phone)
    device.sync.push(b"x" * 1000, "/data/local/tmp/one")
    with pytest.raises(adbutils.AdbError):
        device.sync.push(b"y" * 1000, "/sdcard/two")  # /sdcard shares the data partition
    assert phone.history.pushes == [("/data/local/tmp/one", 1000)]


def test_transport_dropped_mid_pull_raises(
    make_emulated_phone: MakePhone, adb_server: AdbServer, tmp_path: Path
) -> None:
    phone = make_emulated_phone(drop_after_recv_bytes=1_000_000)
    device = _device(adb_server, phone)
    payload = os.urandom(5_000_000)
    device.sync.push(payload, "/data/local/tmp/big.etdump")
    with pytest.raises((adbutils.AdbError, EOFError)):
        device.sync.pull("/data/local/tmp/big.etdump", tmp_path / "big.etdump")
    assert (tmp_path / "big.etdump").stat().st_size < len(payload)
    # The fault is one-shot and the phone still listens: the server reconnects by itself.
    adb_server.client().wait_for(phone.serial, state="device", timeout=TIMEOUT)
    assert phone.adbd.stats.connections == 2
    assert device.sync.read_bytes("/data/local/tmp/big.etdump") == payload


def test_command_overrides(make_emulated_phone: MakePhone, adb_server: AdbServer) -> None:
    canned = CommandOverride(r"executor_runner", returncode=3, stdout="canned out\n", stderr="canned err\n")
    phone = make_emulated_phone(overrides=[canned])
    phone.override(r"^getprop ro\.soc\.model$", stdout="FAKE\n", times=1)
    device = _device(adb_server, phone)
    result = device.shell2("cd /data/local/tmp && ./executor_runner --model_path m.pte", v2=True, timeout=TIMEOUT)
    assert (result.returncode, result.stdout, result.stderr) == (3, "canned out\n", "canned err\n")
    assert device.getprop("ro.soc.model") == "FAKE"
    assert device.getprop("ro.soc.model") == "MT6993"  # times=1: the real shim answers again
    phone.override("slow", delay=5)
    with pytest.raises(adbutils.AdbTimeout):
        device.shell("slow", timeout=0.5)
    assert phone.history.commands[0].endswith("--model_path m.pte")


def test_python_script_from_tests_runs_in_the_sandbox(emulated_phone: EmulatedPhone, adb_server: AdbServer) -> None:
    device = _device(adb_server, emulated_phone)
    python = sys.executable  # the venv interpreter: a symlink into the base prefix (both are bound)
    direct = device.shell2(f"{shlex.quote(python)} {shlex.quote(str(PROBE))} --exit 5 x", v2=True, timeout=TIMEOUT)
    assert (direct.returncode, direct.stderr) == (5, "device_probe: done\n")
    report = json.loads(direct.stdout)
    assert report["uid"] == 2000
    assert report["prefix"] == sys.prefix
    assert report["argv"] == ["--exit", "5", "x"]
    assert report["sme2"] is True
    assert report["tmp_writable"] is True
    # Pushed next to a model, as the runner stand-in will be.
    device.sync.push(PROBE, "/data/local/tmp/bench/runner.py")
    pushed = device.shell2(f"cd /data/local/tmp/bench && {python} ./runner.py", v2=True, timeout=TIMEOUT)
    assert pushed.returncode == 0
    assert json.loads(pushed.stdout)["cwd"] == "/data/local/tmp/bench"
