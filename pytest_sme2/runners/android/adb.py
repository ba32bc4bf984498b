"""The link to one Android device over adb: selected on first use, every failure an error that teaches.

:class:`AdbLink` owns the ``adbutils`` client and device. Each call goes through :meth:`AdbLink.call`,
which turns a lost device, server or transport into a :class:`~pytest_sme2.errors.DeviceError`
saying what happened and what to do (replug, ``adb connect``, unlock); shell commands run with
shell protocol v2 (:meth:`AdbLink.shell`), so their exit codes are real. Commands are built
from :func:`quote`-d arguments only: file names can never become shell syntax.
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

import adbutils

from pytest_sme2.errors import DeviceError, RunnerError, Sme2Error, tail
from pytest_sme2.runners.android.selection import AttachedDevice, choose_serial, state_error

T = TypeVar("T")

#: Seconds for short device commands (facts, mkdir, thermal, hashing a pushed file).
COMMAND_TIMEOUT = 120.0


def quote(arg: object) -> str:
    return shlex.quote(str(arg))


def join_args(args: Sequence[object]) -> str:
    """One shell command from arguments, each quoted: names can never become shell syntax."""
    return " ".join(quote(a) for a in args)


def storage_hint(output: str, serial: str) -> str:
    """A sentence about full storage when the output says so, else ""."""
    if "No space left on device" in output:
        return (f"The device's storage is full: free space on {serial} (`adb -s {serial} shell df -h /data`) "
                "and rerun.")
    return ""


class AdbLink:
    """One Android device over adb, chosen from ``requested`` serials (see :func:`choose_serial`).

    ``client`` lets tests pass an ``adbutils.AdbClient``; by default one is made from the
    environment (``ANDROID_ADB_SERVER_HOST``/``PORT``, like the adb CLI).
    """

    def __init__(self, client: adbutils.AdbClient | None, requested: Sequence[str], worker: str | None) -> None:
        self.requested = tuple(requested)
        self.worker = worker
        self._client = client
        self._serial: str | None = None
        self._device: adbutils.AdbDevice | None = None
        self._lock = threading.Lock()

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
        self.device()
        assert self._serial is not None
        return self._serial

    @property
    def connected(self) -> bool:
        """Whether a device has been selected (cleanup only talks to a device that was)."""
        return self._device is not None

    def device(self) -> adbutils.AdbDevice:
        """The selected device; the first call selects it."""
        with self._lock:
            if self._device is None:
                serial = choose_serial(self.attached(), self.requested, self.worker)
                self._device = self.client.device(serial)
                self._serial = serial
            return self._device

    # ------------------------------------------------------------------------------ calls

    def call(self, what: str, call: Callable[[], T], *, timeout_ok: bool = False) -> T:
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
            raise self.lost(what, exc) from None

    def lost(self, what: str, exc: BaseException) -> DeviceError:
        """The error for an adb failure while ``what``, after asking the server what became of the device."""
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

    def shell(self, command: str, *, what: str, timeout: float = COMMAND_TIMEOUT,
              check: bool = True) -> adbutils.ShellReturn:
        """Run a shell command with shell v2 (real exit code, separate stderr)."""
        device = self.device()
        try:
            result = self.call(what, lambda: device.shell2(command, v2=True, timeout=timeout), timeout_ok=True)
        except adbutils.AdbTimeout:
            raise RunnerError(
                f"device command timed out after {timeout:g} s while {what} on Android device {self.serial}; "
                "check that the phone is responsive (unlocked, not overheating) and rerun",
                command=command,
            ) from None
        if check and result.returncode != 0:
            output = result.stderr or result.stdout
            hint = storage_hint(output, self.serial)
            raise RunnerError(
                f"a device command failed while {what} on Android device {self.serial}" + (f". {hint}" if hint else ""),
                command=command, returncode=result.returncode, stderr_tail=tail(output),
            )
        return result

    def try_shell(self, command: str, *, what: str) -> str:
        """Best-effort command (cleanup): returns "" on success, else why it failed."""
        try:
            self.shell(command, what=what)
        except Sme2Error as exc:
            return str(exc).splitlines()[0]
        return ""
