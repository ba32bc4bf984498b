"""pytest fixtures for the emulated-device tier: a private adb server and emulated phones.

Load with `pytest_plugins = ["emulated_device.fixtures"]` in tests/conftest.py. Tests using these
fixtures should carry `@pytest.mark.emulated_device`. Without a usable bubblewrap the phone fixtures
skip with the reason, except under CI (`CI` set), where the tier must run and they fail instead.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import adbutils
import pytest

from .arm64 import Arm64Cpu, probe_cpu
from .device import CommandOverride, EmulatedPhone, Faults, validate_thermal_schedule
from .profiles import get_profile
from .rootfs import MKSH, TOYBOX, build_rootfs
from .sandbox import Sandbox, SandboxUnavailable, default_ro_binds, find_bwrap, probe
from .sync import SyncFaults

CONNECT_TIMEOUT = 10.0
_SERVER_ENV_KEYS = ("ANDROID_ADB_SERVER_PORT", "ANDROID_SERIAL")


@dataclass(frozen=True)
class AdbServer:
    """A private adb server (the real binary) on a free loopback port."""

    adb: str
    port: int
    home: Path

    @property
    def env(self) -> dict[str, str]:
        """Environment for adb CLI calls that must reach this server (and only it)."""
        env = {k: v for k, v in os.environ.items() if k != "ANDROID_SERIAL"}
        # ADB_LIBUSB=0: the native USB backend starts in milliseconds, libusb waits ~3 s for enumeration.
        env.update(ANDROID_ADB_SERVER_PORT=str(self.port), HOME=str(self.home), ADB_LIBUSB="0")
        return env

    def run(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run the adb CLI against this server (never raises on a non-zero exit)."""
        return subprocess.run(
            [self.adb, *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def client(self, socket_timeout: float = 30.0) -> adbutils.AdbClient:
        """An adbutils client for this server (pass `port=` explicitly: never rely on 5037)."""
        return adbutils.AdbClient(host="127.0.0.1", port=self.port, socket_timeout=socket_timeout)

    def state(self, serial: str) -> str:
        """The device's state as this server lists it ("device", "offline", ...), or "absent"."""
        return next((info.state for info in self.client().list() if info.serial == serial), "absent")


def poll(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Wait up to ``timeout`` s for ``predicate`` to hold; its final value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def adb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdbServer]:
    """Start a private adb server for the session; ANDROID_ADB_SERVER_PORT points at it meanwhile.

    The binary is adbutils' choice (an `adb` on PATH, else the one bundled in the wheel), HOME is a
    temp dir (the server writes its key pair there), and ANDROID_SERIAL is removed so an ambient
    value cannot pick a device for the code under test. Both are restored afterwards.
    """
    home = tmp_path_factory.mktemp("adb-home")
    adb = adbutils.adb_path()
    server: AdbServer | None = None
    last = ""
    for _ in range(3):  # the free port can be taken between probe and bind; try another
        candidate = AdbServer(adb=adb, port=_free_port(), home=home)
        done = candidate.run("start-server", timeout=30)
        if done.returncode == 0:
            server = candidate
            break
        last = (done.stderr or done.stdout).strip()
    if server is None:
        pytest.fail(f"could not start a private adb server with {adb}: {last}", pytrace=False)
    saved = {key: os.environ.get(key) for key in _SERVER_ENV_KEYS}
    os.environ["ANDROID_ADB_SERVER_PORT"] = str(server.port)
    os.environ.pop("ANDROID_SERIAL", None)
    try:
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.run("kill-server", timeout=30)


@pytest.fixture(scope="session")
def emulated_sandbox_support(tmp_path_factory: pytest.TempPathFactory) -> str | None:
    """None if commands can run in the sandbox here, else the reason they cannot."""
    root = tmp_path_factory.mktemp("sandbox-probe") / "rootfs"
    try:
        if os.geteuid() == 0:  # build_rootfs chowns to uid 2000; probe() explains the non-root case
            build_rootfs(root, get_profile("sme2_phone"))
        probe(Sandbox(root, ro_binds=default_ro_binds(), bwrap=find_bwrap()), timeout=20)
    except SandboxUnavailable as exc:
        return str(exc)
    return None


#: The QEMU CPUs arm64 phones run on: every profile's, and the SME-less one for `cpu_overrides`.
ARM64_CPUS = ("max", "max,sme=off")


@pytest.fixture(scope="session")
def arm64_cpus(aarch64_runner_build: Any, sme2_qemu: Path, tmp_path_factory: pytest.TempPathFactory,
               emulated_sandbox_support: str | None) -> dict[str, Arm64Cpu]:
    """The CPUs of arm64 phones, probed with the aarch64 runner under the SME2-capable QEMU; skipped (failed in CI)
    where this kernel cannot give a sandbox its own binfmt_misc."""
    from toolchain import tool_missing

    # Android's shell and tools: without them the phone would fall back to dash and coreutils, and the arm64 tier
    # would no longer catch the shell differences a phone has.
    missing = [path for path in (MKSH, TOYBOX) if not Path(path).is_file()]
    if missing:
        tool_missing(f"the arm64 emulated phone runs Android's shell and tools, and {', '.join(missing)} is missing: "
                     "apt-get install mksh toybox")
    cpus = {cpu: probe_cpu(sme2_qemu, aarch64_runner_build.path, cpu, aarch64_runner_build.sysroot)
            for cpu in ARM64_CPUS}
    if emulated_sandbox_support is None:
        root = tmp_path_factory.mktemp("arm64-probe") / "rootfs"
        try:
            build_rootfs(root, get_profile("sme2_phone"), cpus["max"])
            probe(Sandbox(root, ro_binds=default_ro_binds(), bwrap=find_bwrap(), arm64=cpus["max"]), timeout=20)
        except SandboxUnavailable as exc:
            tool_missing(f"arm64 emulated phone unavailable: {exc}")
    return cpus


def _wait_for_state(client: adbutils.AdbClient, serial: str, state: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    seen = "absent"
    while time.monotonic() < deadline:
        for info in client.list():
            if info.serial == serial:
                seen = info.state
                if seen == state:
                    return
        time.sleep(0.05)
    raise TimeoutError(f"{serial} did not reach state {state!r} in {timeout} s (last seen: {seen})")


class MakePhone:
    """The `make_emulated_phone` factory: each call builds, starts and connects one phone (see the fixture)."""

    def __init__(self, client: adbutils.AdbClient, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.client = client
        self.tmp_path = tmp_path
        self.request = request
        #: every phone made, stopped at the fixture's teardown
        self.phones: list[EmulatedPhone] = []

    def __call__(
        self,
        profile: str = "sme2_phone",
        *,
        unauthorized: bool = False,
        overrides: Sequence[CommandOverride] = (),
        thermal_schedule: Mapping[int, int] | None = None,
        thermal_status: int = 0,
        disk_full: bool = False,
        data_quota_bytes: int | None = None,
        drop_after_recv_bytes: int | None = None,
        arm64: bool = False,
        cpu_overrides: Mapping[str, str] | None = None,
    ) -> EmulatedPhone:
        client, phones = self.client, self.phones
        cpu: Arm64Cpu | None = None
        if arm64:
            cpus: Mapping[str, Arm64Cpu] = self.request.getfixturevalue("arm64_cpus")
            cpu = cpus[get_profile(profile).qemu_cpu]
        faults = Faults(
            overrides=list(overrides),
            thermal_schedule=validate_thermal_schedule(thermal_schedule or {}),
            sync=SyncFaults(
                data_quota_bytes=0 if disk_full else data_quota_bytes,
                drop_after_recv_bytes=drop_after_recv_bytes,
            ),
        )
        phone = EmulatedPhone(
            self.tmp_path / f"phone{len(phones)}-{profile}",
            profile,
            unauthorized=unauthorized,
            ro_binds=default_ro_binds(),
            bwrap=find_bwrap(),
            faults=faults,
            arm64=cpu,
            cpu_overrides=cpu_overrides,
        )
        phone.set_thermal_status(thermal_status)
        phones.append(phone)
        address = phone.start()
        phone.serial = address
        answer = client.connect(address, timeout=CONNECT_TIMEOUT)
        expected = "failed to authenticate to" if unauthorized else "connected to"
        if not answer.startswith(expected):
            raise RuntimeError(f"adb connect {address}: expected {expected!r}, server said {answer!r}")
        if unauthorized:
            _wait_for_state(client, address, "unauthorized", CONNECT_TIMEOUT)
        else:
            client.wait_for(address, state="device", timeout=CONNECT_TIMEOUT)
        return phone


@pytest.fixture
def make_emulated_phone(
    adb_server: AdbServer, emulated_sandbox_support: str | None, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[MakePhone]:
    """Factory: build, start, `adb connect` and wait for an emulated phone; see `MakePhone`.

    Knobs: `unauthorized` (the server lists it `unauthorized`), `overrides` (canned answers for
    matching commands), `thermal_schedule` ({commands_run: status}), `thermal_status` (initial),
    `disk_full` / `data_quota_bytes` (SEND to /data or /sdcard fails "No space left on device"),
    `drop_after_recv_bytes` (cut the transport mid-pull, once). `arm64=True` makes an arm64 phone: its
    aarch64 binaries run under QEMU with the profile's CPU, its /proc/cpuinfo is QEMU's (needs the aarch64
    runner, an SME2-capable QEMU and a kernel with per-namespace binfmt_misc: skipped, or failed in CI,
    without); `cpu_overrides` {binary name: QEMU CPU} runs that binary on another CPU (the phone's properties say
    so). Every phone is disconnected and stopped at teardown, and the test fails if the emulated adbd hit an
    internal error.
    """
    if emulated_sandbox_support is not None:
        message = f"emulated device unavailable: {emulated_sandbox_support}"
        from ci import IN_CI

        if IN_CI:
            pytest.fail(f"{message} (CI must run this tier)", pytrace=False)
        pytest.skip(message)
    make = MakePhone(adb_server.client(), tmp_path, request)
    yield make

    for phone in make.phones:
        make.client.disconnect(phone.address)
        phone.stop()
    errors = [error for phone in make.phones for error in phone.errors]
    if errors:
        pytest.fail(f"emulated adbd internal error(s): {errors!r}", pytrace=False)


@pytest.fixture
def emulated_phone(make_emulated_phone: MakePhone) -> EmulatedPhone:
    """A connected `sme2_phone` with no faults."""
    return make_emulated_phone()


@pytest.fixture(params=["sme2_phone", "nosme_phone"])
def phone_of_each_profile(make_emulated_phone: MakePhone, request: pytest.FixtureRequest) -> EmulatedPhone:
    """A connected phone with no faults, once of each profile (the test runs twice; `phone.profile.name` says which)."""
    return make_emulated_phone(request.param)
