"""Device facts: CPU, SME2 support, clusters, thermal state — for hosts and Android phones.

SME2 detection follows the kernel's view: on Linux/Android the ``Features`` line of
``/proc/cpuinfo`` carries whole tokens (``sme``, ``sme2``, ``sme2p1``, ``smei16i32`` ...) — split it
and test for the token ``sme2``, never a substring ``sme``. On macOS ``sysctl hw.optional.arm.FEAT_SME2``
is 1 on M4 and later. The parsers here take text, so the Android code feeds them what ``adb shell``
returned and tests feed them recorded files.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SME2_TOKENS = ("sme2", "sme2p1")


def cpuinfo_features(cpuinfo_text: str) -> frozenset[str]:
    """All tokens of every ``Features``/``flags`` line in a ``/proc/cpuinfo`` text."""
    tokens: set[str] = set()
    for line in cpuinfo_text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("features", "flags"):
            tokens.update(value.split())
    return frozenset(tokens)


def has_sme2(features: frozenset[str]) -> bool:
    return any(t in features for t in SME2_TOKENS)


def cpuinfo_parts(cpuinfo_text: str) -> tuple[str, ...]:
    """``CPU part`` values per processor (arm64), e.g. ``('0xd8c', ...)``."""
    return tuple(
        line.partition(":")[2].strip() for line in cpuinfo_text.splitlines()
        if line.strip().lower().startswith("cpu part")
    )


def cpuinfo_model_name(cpuinfo_text: str) -> str:
    for line in cpuinfo_text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("model name", "hardware", "cpu model"):
            return value.strip()
    return ""


def parse_thermal_status(dumpsys_text: str) -> int | None:
    """``Thermal Status: N`` from ``dumpsys thermalservice`` (0 none ... 6 shutdown)."""
    m = re.search(r"Thermal Status:\s*(\d+)", dumpsys_text)
    return int(m.group(1)) if m else None


def cpu_mask(cpus: list[int] | tuple[int, ...]) -> str:
    """A taskset hex mask (no ``0x``, as toybox accepts it) for the given CPU numbers."""
    value = 0
    for c in cpus:
        value |= 1 << c
    return f"{value:x}"


@dataclass(frozen=True)
class Cluster:
    """CPUs that share a maximum frequency (a big.LITTLE cluster)."""

    cpus: tuple[int, ...]
    max_khz: int
    capacity: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"cpus": list(self.cpus), "max_khz": self.max_khz, "capacity": self.capacity}


def clusters_from_max_freq(
    max_khz: Mapping[int, int], capacity: Mapping[int, int] | None = None
) -> tuple[Cluster, ...]:
    """Group CPUs by ``cpuinfo_max_freq`` (and ``cpu_capacity`` when known); slowest cluster first.

    Capacity joins the key because two core types can share a maximum clock; the kernel's
    capacity (1024 = the biggest core) tells them apart.
    """
    cap = capacity or {}
    groups: dict[tuple[int, int], list[int]] = {}
    for cpu, khz in sorted(max_khz.items()):
        groups.setdefault((khz, cap.get(cpu, -1)), []).append(cpu)
    return tuple(
        Cluster(tuple(cpus), khz, cap.get(cpus[0])) for (khz, _), cpus in sorted(groups.items())
    )


@dataclass(frozen=True)
class DeviceInfo:
    """What is known about the machine that ran a measurement.

    ``fingerprint()`` keeps only facts that decide comparability and do not drift: not the current
    clock, temperature or battery level (baselines must survive CPU-frequency drift).
    """

    kind: str  # "host" | "android"
    name: str
    arch: str
    cpu_model: str = ""
    cores: int = 0
    sme2: bool | None = None
    features: tuple[str, ...] = ()
    cpu_parts: tuple[str, ...] = ()
    clusters: tuple[Cluster, ...] = ()
    serial: str = ""
    model: str = ""
    soc: str = ""
    abi: str = ""
    os_version: str = ""
    sdk: str = ""
    thermal_status: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def big_cores(self) -> tuple[int, ...]:
        return self.clusters[-1].cpus if self.clusters else ()

    @property
    def big_core_mask(self) -> str:
        return cpu_mask(self.big_cores) if self.big_cores else ""

    def fingerprint(self) -> dict[str, Any]:
        fp: dict[str, Any] = {"device_kind": self.kind, "arch": self.arch, "cpu_model": self.cpu_model,
                              "cores": self.cores, "sme2": self.sme2}
        if self.kind == "android":
            fp.update({"model": self.model, "soc": self.soc, "abi": self.abi, "sdk": self.sdk,
                       "cpu_parts": sorted(set(self.cpu_parts)),
                       "clusters": [c.to_dict() for c in self.clusters]})
        return fp

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "name": self.name, "arch": self.arch, "cpu_model": self.cpu_model,
            "cores": self.cores, "sme2": self.sme2, "cpu_parts": list(self.cpu_parts),
            "clusters": [c.to_dict() for c in self.clusters], "serial": self.serial, "model": self.model,
            "soc": self.soc, "abi": self.abi, "os_version": self.os_version, "sdk": self.sdk,
            "thermal_status": self.thermal_status, "big_core_mask": self.big_core_mask,
            "extra": dict(self.extra),
        }


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _macos_sysctl(name: str) -> str:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip()


def host_device() -> DeviceInfo:
    """Facts about this host: CPU model, cores, arch, and SME2 support where detectable."""
    arch = platform.machine()
    system = platform.system()
    cores = os.cpu_count() or 0
    if system == "Darwin":
        sme2_flag = _macos_sysctl("hw.optional.arm.FEAT_SME2")
        return DeviceInfo(
            kind="host", name=platform.node(), arch=arch,
            cpu_model=_macos_sysctl("machdep.cpu.brand_string") or platform.processor(),
            cores=cores, sme2=(sme2_flag == "1") if sme2_flag else False,
        )
    text = _read("/proc/cpuinfo")
    feats = cpuinfo_features(text)
    is_arm = arch in ("aarch64", "arm64")
    return DeviceInfo(
        kind="host", name=platform.node(), arch=arch,
        cpu_model=cpuinfo_model_name(text) or platform.processor(), cores=cores,
        # On x86 the question has a definite answer (no SME2); on arm64 the Features line decides.
        sme2=has_sme2(feats) if is_arm else False,
        features=tuple(sorted(feats)) if is_arm else (), cpu_parts=cpuinfo_parts(text),
    )
