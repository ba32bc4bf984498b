"""The conditions of a measurement on a phone: which cores it is pinned to, heat, fixed clocks.

- Pinning: :func:`pin_mask` picks the ``taskset`` mask — ``--sme2-big-cores`` (checked against
  the device's CPUs) or the fastest cluster, widened until every thread has a core of its own.
- Heat: :func:`read_thermal` reads ``dumpsys thermalservice`` before and after each run;
  :func:`thermal_invalid_reason` says why a run at or above :data:`HOT_STATUS` cannot be trusted.
- Clocks: :func:`set_fixed_performance` turns Android's fixed performance mode on or off.
"""

from __future__ import annotations

import re

from pytest_sme2.device.facts import DeviceInfo, cpu_mask, fastest_cpus, parse_thermal_status
from pytest_sme2.errors import ConfigError, DeviceError, RunnerError
from pytest_sme2.runners.android.adb import AdbLink, join_args

THERMAL_NAMES = ("NONE", "LIGHT", "MODERATE", "SEVERE", "CRITICAL", "EMERGENCY", "SHUTDOWN")
#: A run is invalid when the thermal status before or after it is at least this. 1 (LIGHT) is where
#: Android starts asking apps to back off and where vendors may start capping clocks, so anything
#: above NONE means the numbers may not be the phone's sustained best.
HOT_STATUS = 1

_HEX_MASK = re.compile(r"^(0[xX])?[0-9a-fA-F]+$")


# ---------------------------------------------------------------------------------------- pinning


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


def pin_mask(pin: str | None, info: DeviceInfo, threads: int, serial: str) -> str | None:
    """The taskset mask for a run with ``threads`` threads (None = unpinned).

    ``pin`` is what :func:`parse_mask` made of ``--sme2-big-cores``: a mask, None (``none``), or
    ``""`` (not given: the fastest cluster, widened to the next-fastest ones until every thread
    has a core of its own).
    """
    if pin is None:
        return None
    if pin:
        online = cpu_mask([c for cl in info.clusters for c in cl.cpus]) if info.clusters else ""
        if online and int(pin, 16) & int(online, 16) == 0:
            raise ConfigError(
                f"--sme2-big-cores {pin} names no CPU of Android device {serial} (its CPUs: mask "
                f"{online}); pick a mask within it, e.g. {info.big_core_mask} for the fastest cluster, or 'none'"
            )
        return pin
    if not info.clusters:
        return None
    return cpu_mask(fastest_cpus(info.clusters, threads))


# ---------------------------------------------------------------------------------------- thermal


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


def read_thermal(link: AdbLink) -> int | None:
    """The device's thermal status now (None when ``dumpsys thermalservice`` does not say)."""
    out = link.shell("dumpsys thermalservice", what="reading the thermal status", check=False)
    return parse_thermal_status(out.stdout) if out.returncode == 0 else None


# ------------------------------------------------------------------------------------- clock mode


def set_fixed_performance(link: AdbLink, enabled: bool, info: DeviceInfo | None) -> None:
    """``cmd power set-fixed-performance-mode-enabled true|false``; a refusal says why and what to drop."""
    value = "true" if enabled else "false"
    try:
        link.shell(join_args(["cmd", "power", "set-fixed-performance-mode-enabled", value]),
                   what=f"setting fixed performance mode to {value}")
    except RunnerError as exc:
        version = f" (Android {info.os_version}, SDK {info.sdk})" if info else ""
        if enabled:
            sdk = _int_or_none(info.sdk) if info else None
            why = ("it needs Android 11 (SDK 30) or later" if sdk is not None and sdk < 30
                   else "this build does not offer it (some vendors remove it)")
            raise DeviceError(
                f"Android device {link.serial}{version} refused to turn on fixed performance mode: {why}. "
                f"Drop --sme2-fixed-performance.\n{exc}"
            ) from None
        raise DeviceError(
            f"could not turn fixed performance mode off again on Android device {link.serial}; do it by hand: "
            f"`adb -s {link.serial} shell cmd power set-fixed-performance-mode-enabled false`.\n{exc}"
        ) from None


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None
