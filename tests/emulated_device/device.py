"""An emulated phone: rootfs + sandbox + adbd, with a command history and fault knobs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .adbd import Adbd, Handler, Stream
from .arm64 import Arm64Cpu
from .profiles import get_profile
from .rootfs import SHELL_UID, Rootfs, build_rootfs
from .sandbox import Sandbox
from .shell import Protocol, parse_service, run_shell
from .sync import DeviceFs, SyncFaults, SyncSession


@dataclass(frozen=True)
class CommandOverride:
    """Answer shell commands matching `pattern` (re.search) with canned output instead of running them.

    The answer still comes from a real host process (so delays are killable and exit codes travel
    the normal path), but nothing runs in the sandbox. `times=None` matches forever.
    """

    pattern: str
    returncode: int = 0
    stdout: str | bytes = b""
    stderr: str | bytes = b""
    delay: float = 0.0
    times: int | None = None


@dataclass
class Faults:
    """Fault knobs; all may be changed while the phone runs."""

    overrides: list[CommandOverride] = field(default_factory=list)
    # thermal_schedule[n] = status: the HAL thermal status becomes `status` once n shell/exec
    # commands have run (applied as command n+1 starts), e.g. {3: 2} throttles from the 4th command.
    thermal_schedule: dict[int, int] = field(default_factory=dict)
    sync: SyncFaults = field(default_factory=SyncFaults)


#: Where an arm64 phone's QEMU writes the in_asm logs of `record_in_asm` (a test-side directory, like /emulated).
IN_ASM_DIR = "/emulated/in_asm"


def runs_binary(command: str, name: str) -> bool:
    """Whether a shell command executes the binary called ``name``: a path ending in ``/name`` followed by an option.

    (Not ``stat -c %s .../name`` or ``sha256sum .../name.part``: those only look at the file.)
    """
    return re.search(rf"/{re.escape(name)}\s+-", command) is not None


@dataclass(frozen=True)
class InAsmLog:
    """QEMU's ``-d in_asm`` log of one command of an arm64 phone: the code its aarch64 process translated (ran)."""

    index: int  # the command's position in History.commands
    name: str  # the binary it was recorded for
    command: str
    path: Path  # on the host


@dataclass
class History:
    """What the host asked of the phone, in order, for assertions."""

    rootfs: Rootfs = field(repr=False)
    services: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    pushes: list[tuple[str, int]] = field(default_factory=list)

    @property
    def taskset_masks(self) -> list[str]:
        """Masks of every taskset call that passed validation (as given, e.g. "80" or "0x70")."""
        return [mask for mask, _ in self.rootfs.taskset_log()]

    @property
    def taskset_calls(self) -> list[tuple[str, str]]:
        """(mask, command) of every taskset call that passed validation."""
        return self.rootfs.taskset_log()

    @property
    def fixed_performance_mode(self) -> list[bool]:
        """Values passed to `cmd power set-fixed-performance-mode-enabled`, in order."""
        return self.rootfs.fixed_performance_mode_log()


# Runs on the host for an overridden command: sleeps (killable), prints the canned streams, exits.
_OVERRIDE_SCRIPT = (
    "import os, sys, time\n"
    "time.sleep(float(sys.argv[1]))\n"
    "os.write(1, bytes.fromhex(sys.argv[2]))\n"
    "os.write(2, bytes.fromhex(sys.argv[3]))\n"
    "sys.exit(int(sys.argv[4]))\n"
)


def _as_bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


class EmulatedPhone:
    """A phone on 127.0.0.1:`port` that a real adb server can `connect` to."""

    def __init__(
        self,
        root: Path,
        profile: str = "sme2_phone",
        *,
        unauthorized: bool = False,
        ro_binds: tuple[Path, ...] = (),
        bwrap: str = "bwrap",
        faults: Faults | None = None,
        arm64: Arm64Cpu | None = None,
        cpu_overrides: Mapping[str, str] | None = None,
    ) -> None:
        self.profile = get_profile(profile)
        self.arm64 = arm64
        # {binary name: QEMU CPU}: on an arm64 phone, commands that run that binary execute on that CPU instead of the
        # profile's (a runner that must not find SME2 on a phone that has it). Fixed for the phone's life: its
        # properties (ro.boot.qemu.avd_name) say it, so every report naming the emulator names both CPUs.
        self.cpu_overrides = dict(cpu_overrides or {})
        if self.cpu_overrides and arm64 is None:
            raise ValueError("cpu_overrides needs an arm64 phone (arm64=True): only QEMU has a CPU to change")
        self.rootfs = build_rootfs(root, self.profile, arm64, self.cpu_overrides)
        self.sandbox = Sandbox(self.rootfs.root, ro_binds=ro_binds, bwrap=bwrap, arm64=arm64)
        self.faults = faults if faults is not None else Faults()
        self.history = History(self.rootfs)
        self.errors: list[BaseException] = []
        #: binary name -> how many more of its runs QEMU logs (record_in_asm); the logs made so far
        self._in_asm_left: dict[str, int] = {}
        self.in_asm_logs: list[InAsmLog] = []
        self.serial = ""  # set by whoever connects it (the fixture)
        self._lock = threading.Lock()
        self._fs = DeviceFs(self.rootfs)
        self.adbd = Adbd(
            banner=Adbd.make_banner(*self.profile.banner_props),
            route=self._route,
            on_error=self.errors.append,
            unauthorized=unauthorized,
        )

    @property
    def address(self) -> str:
        """host:port for `adb connect`."""
        return f"127.0.0.1:{self.adbd.port}"

    def start(self) -> str:
        """Start listening; returns the address to connect to."""
        self.adbd.start()
        return self.address

    def stop(self) -> None:
        """Drop all connections and stop listening (running commands are killed with their streams)."""
        self.adbd.stop()

    # --- knobs ------------------------------------------------------------------------------------
    def set_thermal_status(self, status: int) -> None:
        """Set the HAL thermal status `dumpsys thermalservice` reports (0 NONE ... 6 SHUTDOWN)."""
        self.rootfs.write_thermal_status(status)

    @property
    def thermal_status(self) -> int:
        """The HAL thermal status (without `cmd thermalservice override-status`)."""
        return self.rootfs.read_thermal_status()

    def override(
        self,
        pattern: str,
        *,
        returncode: int = 0,
        stdout: str | bytes = b"",
        stderr: str | bytes = b"",
        delay: float = 0.0,
        times: int | None = None,
    ) -> None:
        """Add a command override; earlier overrides win."""
        self.faults.overrides.append(CommandOverride(pattern, returncode, stdout, stderr, delay, times))

    def record_in_asm(self, name: str, times: int = 1) -> None:
        """Have QEMU log the code it translates (``-d in_asm``) in the next ``times`` runs of binary ``name``.

        The phone's QEMU reads ``QEMU_LOG=in_asm`` and ``QEMU_LOG_FILENAME`` from the command's environment (the
        plugin's command is unchanged); each log lands in ``IN_ASM_DIR`` and is listed in :attr:`in_asm_logs`. A log
        lists every block once, when first translated: ~3 MB per process of the example models, whatever the number
        of executions, so keep ``times`` small.
        """
        if self.arm64 is None:
            raise ValueError("record_in_asm needs an arm64 phone (arm64=True): only QEMU logs executed code")
        if times < 1:
            raise ValueError(f"times must be 1 or more, got {times}")
        with self._lock:
            self._in_asm_left[name] = self._in_asm_left.get(name, 0) + times

    def go_offline(self) -> None:
        """Pull the cable: drop the transport and refuse reconnects until `come_online()`."""
        self.adbd.go_offline()

    def come_online(self) -> None:
        """Plug back in: the server reconnects by itself (or force it with disconnect + connect)."""
        self.adbd.come_online()

    # --- services ---------------------------------------------------------------------------------
    def _route(self, service: str) -> Handler | None:
        with self._lock:
            self.history.services.append(service)
        if service == "sync:":
            return self._serve_sync
        parsed = parse_service(service)
        if parsed is None:
            return None  # forwards, reverse, root:, abb, ...: a CLSE, like a phone refusing them
        protocol, command = parsed
        return lambda stream: self._serve_shell(stream, protocol, command)

    def _serve_sync(self, stream: Stream) -> None:
        SyncSession(stream, self._fs, self.faults.sync, self._record_push).serve()

    def _record_push(self, device_path: str, size: int) -> None:
        with self._lock:
            self.history.pushes.append((device_path, size))

    def _serve_shell(self, stream: Stream, protocol: Protocol, command: str) -> None:
        run_shell(stream, command, protocol, self._spawn)

    def _spawn(self, command: str, merge_stderr: bool) -> subprocess.Popen[bytes]:
        with self._lock:
            count = len(self.history.commands)
            self.history.commands.append(command)
            status = self.faults.thermal_schedule.get(count)
            override = self._take_override(command)
            cpu = next((c for name, c in self.cpu_overrides.items() if runs_binary(command, name)), None)
            qemu_env = self._take_in_asm(count, command)
        if status is not None:
            self.set_thermal_status(status)
        if override is None:
            return self.sandbox.spawn(command, merge_stderr, cpu, qemu_env)
        argv = [
            sys.executable,
            "-c",
            _OVERRIDE_SCRIPT,
            str(override.delay),
            _as_bytes(override.stdout).hex(),
            _as_bytes(override.stderr).hex(),
            str(override.returncode),
        ]
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            start_new_session=True,
        )

    def _take_in_asm(self, index: int, command: str) -> dict[str, str] | None:
        """QEMU's log settings for command ``index`` if it runs a binary whose runs are being logged (lock held)."""
        name = next((n for n, left in self._in_asm_left.items() if left > 0 and runs_binary(command, n)), None)
        if name is None:
            return None
        self._in_asm_left[name] -= 1
        device = f"{IN_ASM_DIR}/{index:04d}-{name}.log"
        host = self.rootfs.root / device.lstrip("/")
        host.parent.mkdir(exist_ok=True)
        os.chown(host.parent, SHELL_UID, SHELL_UID)
        self.in_asm_logs.append(InAsmLog(index, name, command, host))
        return {"QEMU_LOG": "in_asm", "QEMU_LOG_FILENAME": device}

    def _take_override(self, command: str) -> CommandOverride | None:
        for index, override in enumerate(self.faults.overrides):
            if re.search(override.pattern, command):
                if override.times is not None:
                    left = override.times - 1
                    if left <= 0:
                        del self.faults.overrides[index]
                    else:
                        self.faults.overrides[index] = CommandOverride(
                            override.pattern,
                            override.returncode,
                            override.stdout,
                            override.stderr,
                            override.delay,
                            left,
                        )
                return override
        return None


def validate_thermal_schedule(mapping: Mapping[int, int]) -> dict[int, int]:
    """Validate a {commands_run: status} schedule."""
    for count, status in mapping.items():
        if count < 0 or not 0 <= status <= 6:
            raise ValueError(f"thermal schedule entries are commands_run>=0: status 0-6, got {count}: {status}")
    return dict(mapping)
