"""The Android runner: ``executor_runner`` builds pushed to a phone over adb, run pinned, traces pulled back.

Device selection (:func:`choose_serial`): ``--sme2-serial`` (a comma-separated list gives one device
per pytest-xdist worker), else ``$ANDROID_SERIAL``, else the only attached device; with xdist and no
serial, worker ``gwN`` takes the N-th ready device in sorted order.

Layout on the device, under ``/data/local/tmp/pytest_sme2``:

- ``<sha256[:16]>/<file name>`` — every pushed file (runner builds, ``libc++_shared.so``, ``.pte``,
  inputs) in a directory named after its content. A push goes to a private ``.part`` name, is
  checked with ``sha256sum`` on the device, renamed into place, and only then gets its
  ``.sha256`` marker. A later run skips the push when marker *and* size match, so concurrent
  sessions sharing a phone never see half-written binaries and need no lock.
- ``runs/<unique id>/`` — one run's trace, created fresh and deleted after the trace is pulled.

Each run: (optional cool-down) -> fixed performance mode on (optional) -> thermal status before ->
``timeout ... taskset <big-core mask> executor_runner ... </dev/null`` over shell v2 (real exit
code, separate stdout/stderr) -> thermal status after -> the trace must exist and be non-empty
before it is pulled (adbutils' pull of a missing file silently makes an empty directory) -> the
pulled size must match -> fixed performance mode restored, run directory deleted. The trace is
read exactly like a host trace (:func:`~pytest_sme2.runners.host.result_from_trace`).

Every device command is built from ``shlex.quote``-d arguments. Every adb failure becomes a
:class:`~pytest_sme2.errors.DeviceError` or :class:`~pytest_sme2.errors.RunnerError` naming the
device serial and the fix; a failed run never returns a result.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import adbutils

from ..artifacts import file_sha256
from ..device import (
    DeviceInfo,
    clusters_from_max_freq,
    cpu_mask,
    cpuinfo_features,
    cpuinfo_model_name,
    cpuinfo_parts,
    has_sme2,
    parse_thermal_status,
)
from ..errors import ConfigError, DeviceError, RunnerError, Sme2Error, tail
from ..export import load_pte_check
from .base import SME2_OFF, SME2_ON, BinaryBuilds, RunRequest, RunResult, check_threads, inputs_argv
from .host import BUILD_HINT, new_run_dir, result_from_trace

T = TypeVar("T")

#: Where everything goes on the device: the shell user's scratch space, writable without root.
REMOTE_ROOT = "/data/local/tmp/pytest_sme2"
THERMAL_NAMES = ("NONE", "LIGHT", "MODERATE", "SEVERE", "CRITICAL", "EMERGENCY", "SHUTDOWN")
#: A run is invalid when the thermal status before or after it is at least this. 1 (LIGHT) is where
#: Android starts asking apps to back off and where vendors may start capping clocks, so anything
#: above NONE means the numbers may not be the phone's sustained best.
HOT_STATUS = 1
#: Exit status of ``timeout`` (toybox and coreutils) when it had to stop the command.
TIMEOUT_EXIT = 124
#: Seconds for short device commands (facts, mkdir, thermal, hashing a pushed file).
COMMAND_TIMEOUT = 120.0

#: One round trip for every fact :meth:`AndroidRunner.device_info` needs. Constant text: no user input.
FACTS_SCRIPT = (
    "echo @@props; getprop; "
    "echo @@cpuinfo; cat /proc/cpuinfo; "
    "echo @@cpus; for c in /sys/devices/system/cpu/cpu[0-9]*; do "
    'echo "${c##*/cpu} $(cat $c/cpufreq/cpuinfo_max_freq 2>/dev/null || echo -)'
    ' $(cat $c/cpu_capacity 2>/dev/null || echo -)"; done; '
    "echo @@thermal; dumpsys thermalservice 2>/dev/null; "
    "echo @@battery; dumpsys battery 2>/dev/null; "
    "echo @@end"
)

_PROP_LINE = re.compile(r"^\[([^\]]*)\]: \[(.*)\]$")
_WORKER = re.compile(r"gw(\d+)$")
_HEX_MASK = re.compile(r"^(0[xX])?[0-9a-fA-F]+$")


def _q(arg: object) -> str:
    return shlex.quote(str(arg))


def _join(args: Sequence[object]) -> str:
    """One shell command from arguments, each quoted: names can never become shell syntax."""
    return " ".join(_q(a) for a in args)


# ------------------------------------------------------------------------------------- selection


@dataclass(frozen=True)
class AttachedDevice:
    """One line of ``adb devices -l``."""

    serial: str
    state: str
    model: str = ""

    def describe(self) -> str:
        model = f", {self.model}" if self.model else ""
        return f"{self.serial} ({self.state}{model})"


def parse_serials(text: str | None) -> tuple[str, ...]:
    """``"A, B"`` -> ``("A", "B")``; empty or None -> ``()``."""
    return tuple(s.strip() for s in (text or "").split(",") if s.strip())


def worker_index(worker: str | None) -> int | None:
    """``"gw3"`` -> 3 (the pytest-xdist worker number); None outside xdist."""
    if worker is None:
        return None
    m = _WORKER.match(worker)
    return int(m.group(1)) if m else 0


def state_error(serial: str, state: str) -> DeviceError:
    """The error for a device adb lists in a state other than ``device``, saying what to do on the phone."""
    if state == "unauthorized":
        return DeviceError(
            f"Android device {serial} is unauthorized: this computer's adb key has not been accepted. Unlock "
            "the phone and tap 'Allow' on the 'Allow USB debugging?' prompt (tick 'Always allow from this "
            "computer'); if no prompt appears, use Developer options > Revoke USB debugging authorizations, "
            "then unplug and replug it. `adb devices` must list it as 'device'."
        )
    if state == "offline":
        return DeviceError(
            f"Android device {serial} is offline: adb sees it but cannot talk to it. Unlock the phone, "
            f"reconnect the cable (or run `adb -s {serial} reconnect`; for a phone over Wi-Fi, "
            f"`adb connect {serial}`), and check that `adb devices` lists it as 'device'."
        )
    return DeviceError(
        f"Android device {serial} is in state {state!r}, not 'device': boot it into Android with USB "
        "debugging enabled (Developer options) and check `adb devices`."
    )


def choose_serial(devices: Sequence[AttachedDevice], requested: Sequence[str], worker: str | None) -> str:
    """Pick the serial for this process (and xdist worker); raise a clear error when none fits.

    ``requested`` comes from ``--sme2-serial`` or ``$ANDROID_SERIAL`` (possibly several, comma
    separated). Without a request a single attached device is used; several are a usage error
    listing them. Under pytest-xdist each worker needs a device of its own: two workers measuring
    on one phone would disturb each other's numbers.
    """
    index = worker_index(worker)
    listing = ", ".join(d.describe() for d in devices) or "none"
    if requested:
        if index is not None and index >= len(requested):
            if len(requested) == 1:
                raise ConfigError(
                    f"pytest-xdist worker {worker} would share Android device {requested[0]} with worker gw0: "
                    "two measurements on one phone disturb each other. Give one serial per worker "
                    "(--sme2-serial SERIAL1,SERIAL2 with -n 2) or run without -n."
                )
            raise ConfigError(
                f"pytest-xdist worker {worker} has no Android device of its own: {len(requested)} serials were "
                f"given ({', '.join(requested)}). Run with -n {len(requested)} or fewer, or add serials."
            )
        serial = requested[index or 0]
    else:
        if not devices:
            raise DeviceError(
                "no Android device is attached (adb devices lists none): connect a phone with USB debugging "
                "enabled (Developer options), or `adb connect HOST:PORT` for one over Wi-Fi, then rerun"
            )
        if index is None:
            if len(devices) > 1:
                raise ConfigError(
                    f"{len(devices)} Android devices are attached: {listing}. Choose one with --sme2-serial "
                    "SERIAL (or ANDROID_SERIAL=SERIAL), or use one device per worker with pytest-xdist "
                    f"(-n {len(devices)})."
                )
            serial = devices[0].serial
        else:
            ready = sorted(d.serial for d in devices if d.state == "device")
            if index >= len(ready):
                raise ConfigError(
                    f"pytest-xdist worker {worker} has no Android device of its own: {len(ready)} device(s) are "
                    f"ready ({listing}). Run with -n {max(1, len(ready))} or fewer, or attach more phones."
                )
            serial = ready[index]
    found = next((d for d in devices if d.serial == serial), None)
    if found is None:
        raise DeviceError(
            f"Android device {serial} is not attached (adb devices lists: {listing}). Plug it in and enable "
            f"USB debugging, or `adb connect {serial}` for a phone over Wi-Fi; check the serial given with "
            "--sme2-serial / ANDROID_SERIAL."
        )
    if found.state != "device":
        raise state_error(serial, found.state)
    return serial


# ------------------------------------------------------------------------------------------ facts


def parse_getprop(text: str) -> dict[str, str]:
    """``[key]: [value]`` lines of ``getprop`` -> dict."""
    props = {}
    for line in text.splitlines():
        m = _PROP_LINE.match(line.strip())
        if m:
            props[m.group(1)] = m.group(2)
    return props


def _sections(text: str) -> dict[str, str]:
    parts: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("@@"):
            current = line[2:].strip()
            parts[current] = []
        elif current:
            parts[current].append(line)
    return {k: "\n".join(v) for k, v in parts.items()}


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def parse_battery(text: str) -> dict[str, str]:
    """``dumpsys battery`` -> the fields that matter for stable numbers (level, powered, temperature)."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    wanted = ("level", "AC powered", "USB powered", "Wireless powered", "temperature", "status")
    return {k: fields[k] for k in wanted if k in fields}


def device_info_from_facts(serial: str, text: str) -> DeviceInfo:
    """A :class:`DeviceInfo` from the output of :data:`FACTS_SCRIPT`."""
    sec = _sections(text)
    props = parse_getprop(sec.get("props", ""))
    cpuinfo = sec.get("cpuinfo", "")
    max_khz: dict[int, int] = {}
    capacity: dict[int, int] = {}
    cpus: list[int] = []
    for line in sec.get("cpus", "").splitlines():
        fields = line.split()
        if len(fields) != 3 or not fields[0].isdigit():
            continue
        cpu = int(fields[0])
        cpus.append(cpu)
        khz, cap = _int_or_none(fields[1]), _int_or_none(fields[2])
        if khz is not None:
            max_khz[cpu] = khz
        if cap is not None:
            capacity[cpu] = cap
    features = cpuinfo_features(cpuinfo)
    abi = props.get("ro.product.cpu.abi", "")
    soc = " ".join(x for x in (props.get("ro.soc.manufacturer", ""), props.get("ro.soc.model", "")) if x)
    soc = soc or props.get("ro.board.platform", "") or props.get("ro.hardware", "")
    model = props.get("ro.product.model", "")
    battery = parse_battery(sec.get("battery", ""))
    return DeviceInfo(
        kind="android",
        name=model or serial,
        # From the ABI, not `uname -m`: the ABI is what the runner build must match.
        arch={"arm64-v8a": "aarch64", "armeabi-v7a": "armv7", "x86_64": "x86_64", "x86": "x86"}.get(abi, abi),
        cpu_model=cpuinfo_model_name(cpuinfo) or soc,
        cores=len(cpus) or len(cpuinfo_parts(cpuinfo)),
        # No Features line at all means "could not tell", not "no SME2".
        sme2=has_sme2(features) if features else None,
        features=tuple(sorted(features)),
        cpu_parts=cpuinfo_parts(cpuinfo),
        clusters=clusters_from_max_freq(max_khz, capacity) if max_khz else (),
        serial=serial,
        model=model,
        soc=soc,
        abi=abi,
        os_version=props.get("ro.build.version.release", ""),
        sdk=props.get("ro.build.version.sdk", ""),
        thermal_status=parse_thermal_status(sec.get("thermal", "")),
        extra={"build_fingerprint": props.get("ro.build.fingerprint", ""), "battery": battery},
    )


def thermal_name(status: int | None) -> str:
    if status is None:
        return "unknown"
    return f"{status} {THERMAL_NAMES[status]}" if 0 <= status < len(THERMAL_NAMES) else str(status)


def thermal_invalid_reason(serial: str, before: int | None, after: int | None, hot: int = HOT_STATUS) -> str:
    """Why a run's numbers cannot be trusted thermally, or "" when they can."""
    if before is not None and before >= hot:
        return (f"device {serial} was already hot when the run started (thermal status {thermal_name(before)}); "
                "let it cool (--sme2-cooldown SECONDS, screen off, out of the sun) and rerun")
    if after is not None and after >= hot:
        return (f"device {serial} throttled during the run (thermal status {thermal_name(before)} -> "
                f"{thermal_name(after)}); lengthen --sme2-cooldown or lower --sme2-runs and rerun")
    return ""


def parse_mask(text: str) -> str | None:
    """``--sme2-big-cores`` value -> hex mask without ``0x``, or None for ``none`` (run unpinned)."""
    value = text.strip()
    if value.lower() == "none":
        return None
    if not _HEX_MASK.match(value) or int(value, 16) == 0:
        raise ConfigError(
            f"--sme2-big-cores {text!r} is not a CPU mask: give a non-zero hexadecimal taskset mask such as 80 "
            "(cpu7) or f0 (cpus 4-7), or 'none' to run unpinned"
        )
    return f"{int(value, 16):x}"


# ----------------------------------------------------------------------------------------- runner


@dataclass(frozen=True)
class Deployed:
    """A local file and where its content lives on the device."""

    local: Path
    remote: str
    sha256: str
    size: int
    pushed: bool


class AndroidRunner(BinaryBuilds):
    """Run ``.pte`` files with one or two ``executor_runner`` builds on an Android device over adb.

    ``runner_path`` is the SME2-on (default) build, ``runner_off`` the SME2-off build. ``libcxx`` is
    pushed beside them when given. ``big_cores`` is a taskset hex mask, ``"none"`` (unpinned) or None
    (the fastest cluster, widened to cover ``threads``). ``cooldown_s`` is slept before every run
    but the first; ``fixed_performance`` turns Android's fixed performance mode on around each run.
    ``client`` lets tests pass an ``adbutils.AdbClient``; by default one is made from the
    environment (``ANDROID_ADB_SERVER_PORT``).
    """

    name = "android"

    def __init__(
        self,
        runner_path: str | Path | None = None,
        runner_off: str | Path | None = None,
        *,
        serial: str | None = None,
        timeout_s: float | None = 600.0,
        libcxx: str | Path | None = None,
        big_cores: str | None = None,
        cooldown_s: float = 0.0,
        fixed_performance: bool = False,
        worker: str | None = None,
        client: adbutils.AdbClient | None = None,
        remote_root: str = REMOTE_ROOT,
        hot_status: int = HOT_STATUS,
    ) -> None:
        if runner_path is None:
            raise ConfigError(
                "--sme2-device=android needs --sme2-runner PATH: an arm64-v8a executor_runner built with the "
                "Android NDK and -DEXECUTORCH_BUILD_DEVTOOLS=ON -DEXECUTORCH_ENABLE_EVENT_TRACER=ON "
                "(see docs/android.md)"
            )
        builds: dict[str | None, Path] = {None: Path(runner_path), SME2_ON: Path(runner_path)}
        if runner_off is not None:
            builds[SME2_OFF] = Path(runner_off)
        for path in {*builds.values(), *([Path(libcxx)] if libcxx else [])}:
            if not path.is_file():
                raise ConfigError(f"{path} does not exist or is not a file; {BUILD_HINT} for arm64-v8a "
                                  "(see docs/android.md) and pass its path")
        if timeout_s is not None and timeout_s <= 0:
            raise ConfigError(f"timeout_s must be positive (got {timeout_s}); set --sme2-timeout")
        if cooldown_s < 0:
            raise ConfigError(f"cooldown must be 0 or more seconds (got {cooldown_s}); set --sme2-cooldown")
        self.builds = builds
        self.libcxx = Path(libcxx) if libcxx else None
        self.requested = parse_serials(serial) or parse_serials(os.environ.get("ANDROID_SERIAL"))
        self.worker = worker
        self.timeout_s = timeout_s
        self.pin = "" if big_cores is None else parse_mask(big_cores)  # "" auto, None unpinned
        self.cooldown_s = float(cooldown_s)
        self.fixed_performance = bool(fixed_performance)
        self.remote_root = remote_root.rstrip("/")
        self.hot_status = hot_status
        #: Seconds the host waits beyond the device-side ``timeout`` before giving up on adb itself.
        self.timeout_grace_s = 30.0
        self._client = client
        self._serial: str | None = None
        self._device: adbutils.AdbDevice | None = None
        self._info: DeviceInfo | None = None
        self._lock = threading.Lock()
        self._runs = 0

    # ------------------------------------------------------------------------------ the device

    @property
    def client(self) -> adbutils.AdbClient:
        if self._client is None:
            # host/port from ANDROID_ADB_SERVER_HOST/PORT, like the adb CLI.
            self._client = adbutils.AdbClient(socket_timeout=COMMAND_TIMEOUT)
        return self._client

    def attached(self) -> list[AttachedDevice]:
        """Every device the adb server knows, with its state."""
        try:
            infos = self.client.list(extended=True)
        except (adbutils.AdbError, OSError, EOFError) as exc:
            raise DeviceError(
                f"cannot reach the adb server ({exc}): start it with `adb start-server` and check "
                "ANDROID_ADB_SERVER_PORT / `adb devices`"
            ) from None
        return [AttachedDevice(i.serial, i.state, str((i.tags or {}).get("model", ""))) for i in infos]

    @property
    def serial(self) -> str:
        """The selected device's serial (selected on first use)."""
        self._connect()
        assert self._serial is not None
        return self._serial

    def _connect(self) -> adbutils.AdbDevice:
        with self._lock:
            if self._device is None:
                serial = choose_serial(self.attached(), self.requested, self.worker)
                self._device = self.client.device(serial)
                self._serial = serial
            return self._device

    def device_info(self) -> DeviceInfo:
        """The selected device's facts (read once; thermal status as of that first read)."""
        if self._info is None:
            device = self._connect()
            features = self._adb("reading adb features", device.get_features)
            if "shell_v2" not in features.split(","):
                # Without it adbutils silently falls back to a shell that cannot report exit codes.
                raise DeviceError(
                    f"Android device {self.serial} does not offer adb's shell protocol v2 (features: "
                    f"{features or 'none'}), so runner exit codes cannot be read: it needs Android 7 or later "
                    "and an up-to-date adb (`adb version`)"
                )
            facts = self._shell(FACTS_SCRIPT, what="reading device facts")
            info = device_info_from_facts(self.serial, facts.stdout)
            self._info = info
        return self._info

    def fingerprint(self) -> Mapping[str, Any]:
        """Device facts that do not drift, the sha256 of every pushed binary, pinning and clock mode."""
        hashes = {variant or "default": file_sha256(path)[:16] for variant, path in self.builds.items()}
        fp: dict[str, Any] = {**self.device_info().fingerprint(), "runner": self.name, "runner_sha256": hashes,
                              "pinning": "auto" if self.pin == "" else (self.pin or "none"),
                              "fixed_performance": self.fixed_performance}
        if self.libcxx is not None:
            fp["libcxx_sha256"] = file_sha256(self.libcxx)[:16]
        return fp

    def identity(self) -> Mapping[str, Any]:
        """The phone's device identity (model, SoC, clusters, features), pinning and clock mode."""
        return {**self.device_info().fingerprint(), "runner": self.name,
                "pinning": "auto" if self.pin == "" else (self.pin or "none"),
                "fixed_performance": self.fixed_performance}

    def build_identity(self, variant: str | None) -> Mapping[str, Any]:
        """The executor_runner binary of ``variant`` (and libc++_shared.so pushed beside it)."""
        path = self.runner_for(variant)
        build: dict[str, Any] = {"kind": "executor_runner", "sha256": file_sha256(path), "path": str(path)}
        if self.libcxx is not None:
            build["libcxx_sha256"] = file_sha256(self.libcxx)
        return build

    def build_of(self, variant: str | None) -> str:
        path = self.runner_for(variant)
        return f"{path} (sha256 {file_sha256(path)[:12]})"

    # ------------------------------------------------------------------------------ adb calls

    def _adb(self, what: str, call: Callable[[], T], *, timeout_ok: bool = False) -> T:
        """Run one adb call; a lost device, server or transport becomes a DeviceError saying what to do.

        ``timeout_ok``: the caller turns an ``AdbTimeout`` into its own, more specific error.
        """
        try:
            return call()
        except adbutils.AdbTimeout as exc:
            if timeout_ok:
                raise
            raise DeviceError(
                f"Android device {self._serial or '?'} stopped answering while {what} (adb timed out: {exc}); "
                "check that it is still connected, unlocked and responsive (`adb devices`), then rerun. Nothing "
                "from this run was kept."
            ) from None
        except (adbutils.AdbError, OSError, EOFError) as exc:
            raise self._lost(what, exc) from None

    def _lost(self, what: str, exc: BaseException) -> DeviceError:
        serial = self._serial or "?"
        detail = f"{type(exc).__name__}: {exc}".strip()
        try:
            devices = self.attached()
        except DeviceError as server:
            return DeviceError(
                f"lost the adb server while {what} on Android device {serial} ({detail}); {server}. Nothing from "
                "this run was kept."
            )
        found = next((d for d in devices if d.serial == serial), None)
        if found is None:
            return DeviceError(
                f"Android device {serial} disappeared while {what} ({detail}): it was unplugged, or the adb "
                f"server was restarted (a phone over Wi-Fi/TCP must then be connected again: `adb connect "
                f"{serial}`). Reconnect it, check `adb devices`, and rerun; nothing from this run was kept."
            )
        if found.state != "device":
            return DeviceError(f"while {what}, the connection to the device broke ({detail}). "
                               f"{state_error(serial, found.state)} Nothing from this run was kept.")
        return DeviceError(
            f"adb failed while {what} on Android device {serial} ({detail}); the device is still listed, so the "
            "connection was probably interrupted (cable, USB hub, Wi-Fi). Check it and rerun; nothing from this "
            "run was kept."
        )

    def _shell(self, command: str, *, what: str, timeout: float = COMMAND_TIMEOUT,
               check: bool = True) -> adbutils.ShellReturn:
        """Run a shell command with shell v2 (real exit code, separate stderr)."""
        device = self._connect()
        try:
            result = self._adb(what, lambda: device.shell2(command, v2=True, timeout=timeout), timeout_ok=True)
        except adbutils.AdbTimeout:
            raise RunnerError(
                f"device command timed out after {timeout:g} s while {what} on Android device {self.serial}; "
                "check that the phone is responsive (unlocked, not overheating) and rerun",
                command=command,
            ) from None
        if check and result.returncode != 0:
            output = result.stderr or result.stdout
            hint = _storage_hint(output, self.serial)
            raise RunnerError(
                f"a device command failed while {what} on Android device {self.serial}" + (f". {hint}" if hint else ""),
                command=command, returncode=result.returncode, stderr_tail=tail(output),
            )
        return result

    def _try_shell(self, command: str, *, what: str) -> str:
        """Best-effort command (cleanup): returns "" on success, else why it failed."""
        try:
            self._shell(command, what=what)
        except Sme2Error as exc:
            return str(exc).splitlines()[0]
        return ""

    # ------------------------------------------------------------------------------ deploy

    def remote_path(self, sha256: str, name: str) -> str:
        return f"{self.remote_root}/{sha256[:16]}/{name}"

    def deploy(self, files: Sequence[Path], run_id: str) -> dict[Path, Deployed]:
        """Make each file's content present on the device; push only what is missing or damaged."""
        entries = []
        for path in dict.fromkeys(files):
            try:
                digest, size = file_sha256(path), path.stat().st_size
            except OSError as exc:
                raise ConfigError(f"cannot read {path} to push it to the device: {exc.strerror}") from None
            entries.append((path, digest, size, self.remote_path(digest, path.name)))
        checks = [
            f"if [ \"$(cat {_q(remote + '.sha256')} 2>/dev/null)\" = {_q(digest)} ] && "
            f"[ \"$(stat -c %s {_q(remote)} 2>/dev/null)\" = {_q(size)} ]; then echo present; else echo absent; fi"
            for _, digest, size, remote in entries
        ]
        answer = self._shell("; ".join(checks), what="checking which files are already on the device").stdout.split()
        if len(answer) != len(entries):
            raise DeviceError(f"unexpected answer from Android device {self.serial} while checking pushed files: "
                              f"{' '.join(answer)[:200]!r}; rerun, and report this if it persists")
        missing = [e for e, state in zip(entries, answer, strict=True) if state != "present"]
        if missing:
            dirs = sorted({str(PurePosixPath(remote).parent) for *_, remote in missing})
            self._shell(_join(["mkdir", "-p", *dirs]), what="creating directories for pushed files")
        for path, digest, size, remote in missing:
            self._push(path, digest, size, remote, run_id)
        pushed = {e[0] for e in missing}
        return {path: Deployed(path, remote, digest, size, path in pushed) for path, digest, size, remote in entries}

    def _push(self, path: Path, digest: str, size: int, remote: str, run_id: str) -> None:
        """Push to a private name, verify the hash on the device, then rename into place and mark it."""
        part = f"{remote}.{run_id}.part"
        device = self._connect()
        mode = 0o755 if os.access(path, os.X_OK) or path.suffix == ".so" else 0o644
        try:
            device.sync.push(path, part, mode=mode)
        except (adbutils.AdbError, OSError, EOFError) as exc:
            if str(exc) != "FAIL":  # anything but the device refusing the write: the link broke
                raise self._lost(f"pushing {path.name}", exc) from None
            self._try_shell(_join(["rm", "-f", part]), what="removing a failed push")
            raise DeviceError(
                f"pushing {path} ({size} bytes) to Android device {self.serial} at {remote} failed: the device "
                "refused the write. The usual cause is full storage: free space on the phone (check with "
                f"`adb -s {self.serial} shell df -h /data`; `adb -s {self.serial} shell rm -rf {self.remote_root}` "
                "drops pytest-sme2's cached pushes) and rerun. Nothing was left half-written."
            ) from None
        marker = f"{remote}.sha256"
        commit = (
            f"[ \"$(sha256sum {_q(part)} | cut -d ' ' -f 1)\" = {_q(digest)} ] && "
            f"mv -f {_q(part)} {_q(remote)} && printf '%s\\n' {_q(digest)} > {_q(marker + '.' + run_id)} && "
            f"mv -f {_q(marker + '.' + run_id)} {_q(marker)}"
        )
        try:
            self._shell(commit, what=f"verifying the pushed {path.name}")
        except RunnerError as exc:
            self._try_shell(_join(["rm", "-f", part, f"{marker}.{run_id}"]), what="removing a bad push")
            raise DeviceError(
                f"{path.name} arrived damaged or could not be put in place on Android device {self.serial} "
                f"({remote}): its sha256 on the device does not match, or the rename failed. Check free space "
                f"(`adb -s {self.serial} shell df -h /data`) and the cable, then rerun.\n{exc}"
            ) from None

    # ------------------------------------------------------------------------------ run

    def cpu_mask_for(self, threads: int) -> str | None:
        """The taskset mask for a run with ``threads`` threads (None = unpinned)."""
        if self.pin is None:
            return None
        info = self.device_info()
        if self.pin:
            online = cpu_mask([c for cl in info.clusters for c in cl.cpus]) if info.clusters else ""
            if online and int(self.pin, 16) & int(online, 16) == 0:
                raise ConfigError(
                    f"--sme2-big-cores {self.pin} names no CPU of Android device {self.serial} (its CPUs: mask "
                    f"{online}); pick a mask within it, e.g. {info.big_core_mask} for the fastest cluster, or 'none'"
                )
            return self.pin
        if not info.clusters:
            return None
        # The fastest cluster, widened to the next-fastest ones until every thread has a core of its own.
        cpus: list[int] = []
        for cluster in reversed(info.clusters):
            if len(cpus) >= threads:
                break
            cpus += cluster.cpus
        return cpu_mask(cpus)

    def command(self, request: RunRequest, deployed: Mapping[Path, Deployed], runner: Path, *,
                remote_run: str, remote_trace: str, mask: str | None, timeout: float) -> str:
        """The device shell command for one run; every argument shlex-quoted."""
        lib_dirs = [str(PurePosixPath(deployed[runner].remote).parent)]
        if self.libcxx is not None:
            lib_dirs.append(str(PurePosixPath(deployed[self.libcxx].remote).parent))
        argv: list[str] = ["timeout", "-k", "5", f"{timeout:g}"]
        if mask is not None:
            argv += ["taskset", mask]
        argv += [
            deployed[runner].remote,
            "--model_path", deployed[request.pte].remote,
            "--etdump_path", remote_trace,
            f"--num_executions={request.executions}",
            f"--cpu_threads={request.threads}",
        ]
        argv += inputs_argv([deployed[Path(p)].remote for p in request.inputs or ()], fix="rename the file")
        # stdin from /dev/null: adbutils' shell v2 never closes stdin, so a runner reading it would hang.
        return (f"cd {_q(remote_run)} && export LD_LIBRARY_PATH={_q(':'.join(dict.fromkeys(lib_dirs)))} && "
                f"exec {_join(argv)} </dev/null")

    def _thermal(self) -> int | None:
        out = self._shell("dumpsys thermalservice", what="reading the thermal status", check=False)
        return parse_thermal_status(out.stdout) if out.returncode == 0 else None

    def _set_fixed_performance(self, enabled: bool) -> None:
        value = "true" if enabled else "false"
        try:
            self._shell(_join(["cmd", "power", "set-fixed-performance-mode-enabled", value]),
                        what=f"setting fixed performance mode to {value}")
        except RunnerError as exc:
            info = self._info
            version = f" (Android {info.os_version}, SDK {info.sdk})" if info else ""
            if enabled:
                sdk = _int_or_none(info.sdk) if info else None
                why = ("it needs Android 11 (SDK 30) or later" if sdk is not None and sdk < 30
                       else "this build does not offer it (some vendors remove it)")
                raise DeviceError(
                    f"Android device {self.serial}{version} refused to turn on fixed performance mode: {why}. "
                    f"Drop --sme2-fixed-performance.\n{exc}"
                ) from None
            raise DeviceError(
                f"could not turn fixed performance mode off again on Android device {self.serial}; do it by hand: "
                f"`adb -s {self.serial} shell cmd power set-fixed-performance-mode-enabled false`.\n{exc}"
            ) from None

    def run(self, request: RunRequest) -> RunResult:
        """Deploy, run once on the device, pull and read the trace; any failure raises, nothing stale is kept."""
        if request.mode != "trace":
            raise ConfigError(
                f"the Android runner runs one traced executor_runner build per variant; a {request.mode!r} run "
                "needs a separate build of that kind"
            )
        runner = request.build or self.runner_for(request.variant)
        load_pte_check(request.pte)  # a foreign or cut .pte: say so here, before anything is pushed
        info = self.device_info()
        check_threads(request.threads, info.cores, f"Android device {self.serial}")
        timeout = min(t for t in (self.timeout_s, request.timeout_s) if t is not None)
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        files = [runner, *([self.libcxx] if self.libcxx else []), request.pte, *(Path(p) for p in request.inputs or ())]
        deployed = self.deploy(files, run_id)
        mask = self.cpu_mask_for(request.threads)
        remote_run = f"{self.remote_root}/runs/{run_id}"
        remote_trace = f"{remote_run}/trace.etdump"
        command = self.command(request, deployed, runner, remote_run=remote_run, remote_trace=remote_trace,
                               mask=mask, timeout=timeout)
        local_dir = new_run_dir(request)
        trace_path = local_dir / f"{request.stem}.etdump"
        log_path = local_dir / f"{request.stem}.log"
        slept = 0.0
        if self._runs and self.cooldown_s > 0:
            time.sleep(self.cooldown_s)  # let the phone shed the previous block's heat
            slept = self.cooldown_s
        self._runs += 1
        cleanup_note = ""
        failed = True
        if self.fixed_performance:
            self._set_fixed_performance(True)
        try:
            # A fresh directory, and any trace at the path removed: only this run can write one there.
            self._shell(f"mkdir -p {_q(remote_run)} && rm -f {_q(remote_trace)}", what="preparing the run directory")
            before = self._thermal()
            started = time.perf_counter()
            result = self._run_runner(command, timeout, runner, request)
            wall_s = time.perf_counter() - started
            after = self._thermal()
            log_path.write_bytes(result.stdout + result.stderr)
            output = (result.stdout + result.stderr).decode("utf-8", errors="replace")
            if result.returncode != 0:
                raise self._exit_error(result.returncode, runner, request, command=command, output=output,
                                       log_path=log_path, timeout=timeout)
            self._pull_trace(remote_trace, trace_path, runner, command, output)
            failed = False
        finally:
            if self.fixed_performance:
                try:
                    self._set_fixed_performance(False)
                except Sme2Error:
                    if not failed:
                        raise
                    # The run's own error (often: the device is gone) says more than a failed restore.
            if self._device is not None:
                cleanup_note = self._try_shell(_join(["rm", "-rf", remote_run]), what="removing the run directory")
        invalid = thermal_invalid_reason(self.serial, before, after, self.hot_status)
        metadata: dict[str, Any] = {
            "device": info.to_dict(),
            "serial": self.serial,
            "device_command": command,
            "device_run_dir": remote_run,
            "cpu_mask": mask or "none",
            "thermal_status_before": before,
            "thermal_status_after": after,
            "thermal_hot_status": self.hot_status,
            "fixed_performance": self.fixed_performance,
            "cooldown_s": slept,
            "pushed": [d.remote for d in deployed.values() if d.pushed],
        }
        if invalid:
            metadata["invalid_reason"] = invalid
        if cleanup_note:
            metadata["cleanup_failed"] = cleanup_note
        if before is None or after is None:
            metadata["thermal_note"] = ("the thermal status could not be read (no 'Thermal Status' from dumpsys "
                                        "thermalservice): thermal validity is unchecked for this run")
        return result_from_trace(
            runner_name=self.name, runner_text=f"executor_runner {runner} on Android device {self.serial}",
            request=request, build=self.build_of(request.variant), cmd=command, run_dir=local_dir,
            trace_path=trace_path, log_path=log_path, wall_s=wall_s, metadata=metadata,
        )

    def _run_runner(self, command: str, timeout: float, runner: Path, request: RunRequest) -> Any:
        device = self._connect()
        try:
            # The device-side `timeout` is the real limit; the adb read timeout is a backstop for a
            # device that stops answering altogether.
            return self._adb(f"running {runner.name}",
                             lambda: device.shell2(command, v2=True, timeout=timeout + self.timeout_grace_s,
                                                   encoding=None), timeout_ok=True)
        except adbutils.AdbTimeout:
            raise RunnerError(
                f"executor_runner {runner} on Android device {self.serial} did not finish within {timeout:g} s "
                f"(+{self.timeout_grace_s:g} s for adb) while running {request.pte.name}, and the device stopped "
                "answering; the command was abandoned (closing its adb stream kills it). Raise --sme2-timeout if "
                "the model is just slow, and check the phone is responsive.",
                command=command,
            ) from None

    def _exit_error(self, returncode: int, runner: Path, request: RunRequest, *, command: str, output: str,
                    log_path: Path, timeout: float) -> RunnerError:
        where = f"executor_runner {runner} on Android device {self.serial}"
        if returncode == TIMEOUT_EXIT:
            message = (f"{where} timed out after {timeout:g} s running {request.pte.name} and was killed. Raise "
                       f"--sme2-timeout if the model is just slow; the log is {log_path}")
        else:
            message = f"{where} exited with code {returncode}{_exit_hint(returncode, output, self.serial)} while " \
                      f"running {request.pte.name}; the full log is {log_path}"
        return RunnerError(message, command=command, returncode=returncode, stderr_tail=tail(output))

    def _pull_trace(self, remote_trace: str, trace_path: Path, runner: Path, command: str, output: str) -> None:
        device = self._connect()
        st = self._adb("checking the trace", lambda: device.sync.stat(remote_trace))
        if st.mode == 0 or st.size == 0:
            # Checked before pulling: adbutils' pull of a missing file "succeeds" with an empty directory.
            raise RunnerError(
                f"executor_runner {runner} on Android device {self.serial} exited 0 but wrote "
                f"{'no' if st.mode == 0 else 'an empty'} trace at {remote_trace}. A runner built without the "
                f"event tracer writes none; {BUILD_HINT}. {_storage_hint(output, self.serial)}".rstrip(),
                command=command, returncode=0, stderr_tail=tail(output),
            )
        try:
            self._adb("pulling the trace", lambda: device.sync.pull(remote_trace, trace_path))
            got = trace_path.stat().st_size if trace_path.is_file() else -1
            if got != st.size:
                raise DeviceError(
                    f"pulling the trace from Android device {self.serial} gave {got} of {st.size} bytes: the "
                    "transfer was cut short. Check the cable and rerun; the partial file was deleted."
                )
        except BaseException:
            with contextlib.suppress(OSError):
                trace_path.unlink()
            raise


def _storage_hint(output: str, serial: str) -> str:
    """A sentence about full storage when the output says so, else ""."""
    if "No space left on device" in output:
        return (f"The device's storage is full: free space on {serial} (`adb -s {serial} shell df -h /data`) "
                "and rerun.")
    return ""


def _exit_hint(returncode: int, output: str, serial: str) -> str:
    """What a device-side exit usually means, from the code and the runner's output."""
    if "sched_setaffinity" in output:
        return (" (taskset could not pin it to the requested CPUs: pick a mask within the device's CPUs "
                "with --sme2-big-cores, or 'none')")
    if "CANNOT LINK EXECUTABLE" in output or "library \"libc++_shared.so\" not found" in output:
        return (" (the dynamic linker failed: a runner built with the shared C++ STL needs "
                "--sme2-libcxx path/to/libc++_shared.so from the same NDK)")
    if returncode == 126 or "not executable" in output or "Exec format error" in output:
        return " (the device cannot execute it: build executor_runner for arm64-v8a with the Android NDK)"
    if returncode == 127:
        return " (a command was not found on the device)"
    if returncode > 128:
        return f" (killed by signal {returncode - 128}: the runner crashed)"
    hint = _storage_hint(output, serial)
    return f" ({hint[0].lower()}{hint[1:-1]})" if hint else ""
