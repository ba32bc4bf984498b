"""Which Android device this process measures on: ``--sme2-serial``, ``$ANDROID_SERIAL``, or the only one.

A comma-separated list of serials gives one device per pytest-xdist worker; with xdist and no
serial, worker ``gwN`` takes the N-th ready device in sorted order. Pure functions over the
``adb devices -l`` listing, so every choice and every error is tested without a phone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_sme2.errors import ConfigError, DeviceError

_WORKER = re.compile(r"gw(\d+)$")


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
