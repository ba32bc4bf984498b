"""What the host is: one round trip of facts (:class:`HostFacts`: OS, architecture, home, CPUs, cpufreq, tools), what a
runner binary is built for (:func:`binary_kind`), and an emulated CPU told from a real one (:func:`emulated_cpu`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.device.facts import facts_sections, parse_cpu_table
from pytest_sme2.errors import ConfigError
from pytest_sme2.runners.qemu import CpuProbe

#: ``CPU implementer : 0x00``: "reserved for software use" (Arm ARM, MIDR_EL1), what QEMU's ``-cpu max`` reports.
_SOFTWARE_IMPLEMENTER = re.compile(r"^CPU implementer\s*:\s*0x0+\s*$", re.M)

#: One round trip for the host's facts (constant text). Sections start with ``@@name`` lines.
FACTS_SCRIPT = (
    "echo @@uname; uname -sm; echo @@home; printf '%s\\n' \"$HOME\"; "
    "echo @@ncpu; getconf _NPROCESSORS_ONLN 2>/dev/null || sysctl -n hw.logicalcpu 2>/dev/null; "
    "echo @@cpus; for c in /sys/devices/system/cpu/cpu[0-9]*; do [ -d \"$c\" ] || continue; "
    'echo "${c##*/cpu} $(cat $c/cpufreq/cpuinfo_max_freq 2>/dev/null || echo -)'
    ' $(cat $c/cpu_capacity 2>/dev/null || echo -)"; done; '
    "echo @@sysctl; [ \"$(uname -s)\" = Darwin ] && sysctl hw machdep.cpu.brand_string 2>/dev/null; "
    "echo @@tools; for t in taskset timeout sha256sum shasum tar; do command -v $t >/dev/null 2>&1 && echo $t; done; "
    "echo @@hostname; uname -n; echo @@uid; id -u; "
    "echo @@governor; cat /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor 2>/dev/null; "
    "true"
)


@dataclass(frozen=True)
class HostFacts:
    """What one round trip tells of the host: OS and architecture, home, CPUs, cpufreq, tools."""

    system: str
    machine: str
    home: str
    logical_cpus: int
    max_khz: Mapping[int, int]
    capacity: Mapping[int, int]
    sysctl: str
    tools: frozenset[str]
    hostname: str = ""
    #: the login's uid ("" when not said): 0 = root
    uid: str = ""
    #: the cpufreq governors of its CPUs (``performance/schedutil`` when they differ; "" when there is no cpufreq)
    governor: str = ""

    @classmethod
    def parse(cls, text: str) -> HostFacts:
        sec = facts_sections(text)
        system, _, machine = sec.get("uname", "").strip().partition(" ")
        cpus, max_khz, capacity = parse_cpu_table(sec.get("cpus", ""))
        ncpu = sec.get("ncpu", "").strip()
        governors = sorted({g.strip() for g in sec.get("governor", "").splitlines() if g.strip()})
        return cls(system=system, machine=machine.strip(), home=sec.get("home", "").strip(),
                   logical_cpus=int(ncpu) if ncpu.isdigit() else len(cpus), max_khz=max_khz, capacity=capacity,
                   sysctl=sec.get("sysctl", ""), tools=frozenset(sec.get("tools", "").split()),
                   hostname=sec.get("hostname", "").strip(), uid=sec.get("uid", "").strip(),
                   governor="/".join(governors))

    @property
    def darwin(self) -> bool:
        return self.system == "Darwin"

    @property
    def arm64(self) -> bool:
        return self.machine in ("aarch64", "arm64")

    def describe(self) -> str:
        return f"{self.system or '?'} {self.machine or '?'}"


def binary_kind(path: Path) -> str:
    """``linux-aarch64``, ``darwin-arm64`` or what else the file's header says (``ELF machine 62``, ...)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise ConfigError(f"cannot read the runner {path}: {exc.strerror}") from None
    if head[:4] == b"\x7fELF":
        machine = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
        if machine != 183:
            return f"ELF machine {machine}"
        # An NDK build asks for Android's loader (its .interp, right after the headers): bionic, not glibc.
        return "android-aarch64" if b"/system/bin/linker64" in head else "linux-aarch64"
    if head[:4] == b"\xcf\xfa\xed\xfe":
        return "darwin-arm64" if int.from_bytes(head[4:8], "little") == 0x0100000C else "Mach-O (not arm64)"
    return "not a binary"


def emulated_cpu(probe: CpuProbe) -> str:
    """What emulates the host's CPU ("" for real hardware): MIDR implementer 0x00 is no vendor's (QEMU's max)."""
    if not _SOFTWARE_IMPLEMENTER.search(probe.cpuinfo):
        return ""
    sve = f"SVE {probe.sve_vl_bytes * 8} bit, " if probe.sve_vl_bytes > 0 else ""
    sme = f"SVL {probe.sme_vl_bytes * 8} bit, " if probe.sme_vl_bytes > 0 else ""
    return (f"an emulated CPU (CPU implementer 0x00, reserved for software: QEMU's -cpu max), {sve}{sme}"
            f"SME2 {'yes' if probe.sme2 else 'no'}")

