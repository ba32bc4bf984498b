"""Device facts: CPU, SME2 support, clusters, thermal state — for hosts and Android phones.

SME2 detection follows the kernel's view: on Linux/Android the ``Features`` line of
``/proc/cpuinfo`` carries whole tokens (``sme``, ``sme2``, ``sme2p1``, ``smei16i32`` ...) — split it
and test for the token ``sme2``, never a substring ``sme``. On macOS ``sysctl hw.optional.arm.FEAT_SME2``
is 1 on M4 and later. The parsers here take text, so the Android code feeds them what ``adb shell``
returned and tests feed them recorded files.

Two types, one vocabulary. :class:`DeviceInfo` is the live facts of a device, as read now: what runs use (the
clusters' CPUs to pin, the thermal status, the serial) and reports show.
:class:`~pytest_sme2.device.identity.DeviceIdentity` is what a baseline is keyed on: the facts that decide kernel
choice and speed, nothing that drifts. A fact both hold has one name in both (``arch``, ``cpu_name``,
``logical_cpus``, ``product``, ``soc``, ``abi``, ``sdk``); the two ``clusters`` are two views of the cores (the
CPUs of each cluster here, the core types there), and ``features`` (every token the kernel prints) is more than
the identity's ``isa`` (the dispatch features). ``DeviceInfo.to_dict()`` from before the names were one said
``cpu_model``, ``cores`` and ``model``: :func:`device_facts` reads them.

Each :class:`DeviceInfo` carries the device's identity, built here from the same texts:
:func:`linux_identity` from ``/proc/cpuinfo`` (x86 CPUID values, or arm64 MIDR fields per cluster),
:func:`darwin_identity` from ``sysctl hw`` output, :func:`device_info_from_facts` from the one round
trip the Android runner makes (:data:`ANDROID_FACTS_SCRIPT`).
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_sme2.device.identity import ARM_ISA, X86_ISA, CoreGroup, DeviceIdentity, isa_order

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


def cpuinfo_processors(cpuinfo_text: str) -> tuple[dict[str, str], ...]:
    """One ``{field: value}`` per ``processor`` block of a ``/proc/cpuinfo`` text, in order.

    Field names are lower-cased (``cpu part``, ``vendor_id``, ``cpu family``). Lines outside a
    processor block (the ``Hardware`` line of some arm kernels) are not part of any.
    """
    blocks: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in cpuinfo_text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            current = None  # a blank line ends a block
            continue
        key = key.strip().lower()
        if key == "processor":
            current = {}
            blocks.append(current)
        if current is not None:
            current[key] = value.strip()
    return tuple(blocks)


def _int_or_none(text: str | None, base: int = 10) -> int | None:
    try:
        return int(text, base) if text is not None else None
    except ValueError:
        return None


def _cpu_number(block: Mapping[str, str], position: int) -> int:
    number = _int_or_none(block.get("processor"))
    return position if number is None else number


def arm_core_groups(
    cpuinfo_text: str, max_khz: Mapping[int, int] | None = None, capacity: Mapping[int, int] | None = None
) -> tuple[CoreGroup, ...]:
    """The core types of an arm64 CPU, one :class:`CoreGroup` per cluster, slowest first.

    CPUs are grouped into clusters by their maximum clock and ``cpu_capacity`` (as
    :func:`clusters_from_max_freq` does for pinning); within a cluster, by the MIDR fields of each
    processor's ``/proc/cpuinfo`` block. Without cpufreq data (many servers and VMs) the MIDR fields
    alone group them. A CPU that is offline has no block: its cluster's part reads as unknown.
    """
    midr: dict[int, tuple[str, str, str, str]] = {}
    for position, block in enumerate(cpuinfo_processors(cpuinfo_text)):
        if "cpu part" in block or "cpu implementer" in block:
            midr[_cpu_number(block, position)] = (
                block.get("cpu implementer", "").lower(), block.get("cpu part", "").lower(),
                block.get("cpu variant", "").lower(), block.get("cpu revision", ""),
            )
    clocks = dict(max_khz or {})
    cpus = sorted(set(midr) | set(clocks))
    if not cpus:
        return ()
    if clocks:
        clusters = [(c.max_khz, c.cpus) for c in clusters_from_max_freq(clocks, capacity)]
        # CPUs with cpuinfo lines but no cpufreq entry form a cluster of unknown clock.
        unclocked = tuple(c for c in cpus if c not in clocks)
        ordered: list[tuple[int | None, tuple[int, ...]]] = [*([(None, unclocked)] if unclocked else []), *clusters]
    else:
        ordered = [(None, tuple(cpus))]
    groups: list[CoreGroup] = []
    for khz, members in ordered:
        by_type: dict[tuple[str, str, str, str], int] = {}
        for cpu in members:
            key = midr.get(cpu, ("", "", "", ""))
            by_type[key] = by_type.get(key, 0) + 1
        for (implementer, part, variant, revision), count in by_type.items():
            groups.append(CoreGroup(count=count, implementer=implementer, part=part, variant=variant,
                                    revision=revision, max_khz=khz))
    return tuple(groups)


def linux_identity(
    cpuinfo_text: str,
    *,
    os_kind: str = "linux",
    arch: str,
    logical_cpus: int,
    max_khz: Mapping[int, int] | None = None,
    capacity: Mapping[int, int] | None = None,
    soc: str = "",
    product: str = "",
    sdk: str = "",
    abi: str = "",
) -> DeviceIdentity:
    """The identity of a Linux or Android device from its ``/proc/cpuinfo`` text (and cpufreq data).

    x86 (a ``vendor_id`` line): vendor, ``cpu family``, ``model``, ``stepping`` and the brand
    string of the first processor, the :data:`~pytest_sme2.device.identity.X86_ISA` flags. Arm: the core
    types per cluster (:func:`arm_core_groups`) and the :data:`~pytest_sme2.device.identity.ARM_ISA`
    features. Clock readings (``cpu MHz``, ``BogoMIPS``) are never read.
    """
    blocks = cpuinfo_processors(cpuinfo_text)
    first = blocks[0] if blocks else {}
    features = cpuinfo_features(cpuinfo_text)
    if "vendor_id" in first:
        return DeviceIdentity(
            os=os_kind, arch=arch, logical_cpus=logical_cpus, vendor=first.get("vendor_id", ""),
            cpu_name=first.get("model name", ""), family=_int_or_none(first.get("cpu family")),
            model=_int_or_none(first.get("model")), stepping=_int_or_none(first.get("stepping")),
            isa=isa_order(features & frozenset(X86_ISA)), soc=soc, product=product, sdk=sdk, abi=abi,
        )
    return DeviceIdentity(
        os=os_kind, arch=arch, logical_cpus=logical_cpus, cpu_name=cpuinfo_model_name(cpuinfo_text),
        clusters=arm_core_groups(cpuinfo_text, max_khz, capacity),
        isa=isa_order(features & frozenset(ARM_ISA)), soc=soc, product=product, sdk=sdk, abi=abi,
    )


#: ``sysctl hw.optional.arm.FEAT_*`` names -> the Linux hwcap names :data:`~pytest_sme2.device.identity.ARM_ISA` uses.
DARWIN_FEATURES = {
    "hw.optional.AdvSIMD": ("asimd",), "hw.optional.arm.FEAT_FP16": ("fphp", "asimdhp"),
    "hw.optional.arm.FEAT_DotProd": ("asimddp",), "hw.optional.arm.FEAT_FHM": ("asimdfhm",),
    "hw.optional.arm.FEAT_I8MM": ("i8mm",), "hw.optional.arm.FEAT_BF16": ("bf16",),
    "hw.optional.arm.FEAT_SVE": ("sve",), "hw.optional.arm.FEAT_SVE2": ("sve2",),
    "hw.optional.arm.FEAT_SME": ("sme",), "hw.optional.arm.FEAT_SME2": ("sme2",),
    "hw.optional.arm.FEAT_SME2p1": ("sme2p1",),
}


def parse_sysctl(text: str) -> dict[str, str]:
    """``name: value`` lines of ``sysctl`` output -> dict."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            values[key.strip()] = value.strip()
    return values


def darwin_identity(sysctl_text: str, *, arch: str, logical_cpus: int = 0) -> DeviceIdentity:
    """The identity of a Mac from ``sysctl hw machdep.cpu.brand_string`` output.

    The brand string (``Apple M4 Pro``), ``hw.cpufamily``/``hw.cpusubfamily`` (the core
    microarchitecture), one :class:`~pytest_sme2.device.identity.CoreGroup` per performance level
    (``hw.perflevelN.logicalcpu`` and ``.name``) and the ``hw.optional.arm.FEAT_*`` flags that are 1,
    named as on Linux (``FEAT_SME2`` -> ``sme2``).
    """
    values = parse_sysctl(sysctl_text)
    features = {name for key, names in DARWIN_FEATURES.items() if values.get(key) == "1" for name in names}
    levels = _int_or_none(values.get("hw.nperflevels")) or 0
    groups = []
    # perflevel0 is the fastest; identities list clusters slowest first.
    for level in reversed(range(levels)):
        count = _int_or_none(values.get(f"hw.perflevel{level}.logicalcpu")) or 0
        if count:
            groups.append(CoreGroup(count=count, implementer="Apple",
                                    part=values.get(f"hw.perflevel{level}.name", f"perflevel{level}")))
    return DeviceIdentity(
        os="darwin", arch=arch, logical_cpus=_int_or_none(values.get("hw.logicalcpu")) or logical_cpus,
        vendor="Apple" if values.get("hw.cpufamily") else "", cpu_name=values.get("machdep.cpu.brand_string", ""),
        family=_int_or_none(values.get("hw.cpufamily")), model=_int_or_none(values.get("hw.cpusubfamily")),
        clusters=tuple(groups), isa=isa_order(frozenset(features)),
    )


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


def fastest_cpus(clusters: Sequence[Cluster], threads: int) -> list[int]:
    """The CPUs a run of ``threads`` threads is pinned to: the fastest cluster, widened to the next-fastest ones until
    every thread has a core of its own (``clusters`` slowest first)."""
    cpus: list[int] = []
    for cluster in reversed(clusters):
        if len(cpus) >= threads:
            break
        cpus += cluster.cpus
    return cpus


@dataclass(frozen=True)
class DeviceInfo:
    """What is known about the machine that ran a measurement.

    ``fingerprint()`` keeps only facts that decide comparability and do not drift: not the current
    clock, temperature or battery level (baselines must survive CPU-frequency drift). ``identity()``
    is its successor: the :class:`~pytest_sme2.device.identity.DeviceIdentity` read with these facts.
    """

    kind: str  # "host" | "android" | "qemu"
    name: str
    arch: str
    #: the CPU's name (``model name`` of /proc/cpuinfo, the brand string)
    cpu_name: str = ""
    logical_cpus: int = 0
    sme2: bool | None = None
    features: tuple[str, ...] = ()
    cpu_parts: tuple[str, ...] = ()
    clusters: tuple[Cluster, ...] = ()
    serial: str = ""
    #: the phone model (``ro.product.model``)
    product: str = ""
    soc: str = ""
    abi: str = ""
    os_version: str = ""
    sdk: str = ""
    thermal_status: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: built by :func:`host_device` / :func:`device_info_from_facts` from the texts they read
    device_identity: DeviceIdentity | None = None

    def identity(self) -> DeviceIdentity:
        """What decides kernel choice and speed on this device (see :mod:`pytest_sme2.device.identity`).

        A DeviceInfo made by hand, without the texts behind it, gets the identity its fields allow.
        """
        if self.device_identity is not None:
            return self.device_identity
        feats = frozenset(self.features)
        return DeviceIdentity(
            os="android" if self.kind == "android" else platform.system().lower(), arch=self.arch,
            logical_cpus=self.logical_cpus, cpu_name=self.cpu_name,
            isa=isa_order(feats & frozenset((*X86_ISA, *ARM_ISA))),
            soc=self.soc, product=self.product, sdk=self.sdk, abi=self.abi,
        )

    # The names before DeviceInfo took DeviceIdentity's (the ``android_device`` fixture is public): read-only.
    @property
    def cpu_model(self) -> str:
        return self.cpu_name

    @property
    def cores(self) -> int:
        return self.logical_cpus

    @property
    def model(self) -> str:
        return self.product

    @property
    def big_cores(self) -> tuple[int, ...]:
        return self.clusters[-1].cpus if self.clusters else ()

    @property
    def big_core_mask(self) -> str:
        return cpu_mask(self.big_cores) if self.big_cores else ""

    def fingerprint(self) -> dict[str, Any]:
        # The keys of the first release's fingerprint, unchanged (what the runners' fingerprint() returns).
        fp: dict[str, Any] = {"device_kind": self.kind, "arch": self.arch, "cpu_model": self.cpu_name,
                              "cores": self.logical_cpus, "sme2": self.sme2}
        if self.kind == "android":
            fp.update({"model": self.product, "soc": self.soc, "abi": self.abi, "sdk": self.sdk,
                       "cpu_parts": sorted(set(self.cpu_parts)),
                       "clusters": [c.to_dict() for c in self.clusters]})
        return fp

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "name": self.name, "arch": self.arch, "cpu_name": self.cpu_name,
            "logical_cpus": self.logical_cpus, "sme2": self.sme2, "cpu_parts": list(self.cpu_parts),
            "clusters": [c.to_dict() for c in self.clusters], "serial": self.serial, "product": self.product,
            "soc": self.soc, "abi": self.abi, "os_version": self.os_version, "sdk": self.sdk,
            "thermal_status": self.thermal_status, "big_core_mask": self.big_core_mask,
            "extra": dict(self.extra),
        }


#: ``DeviceInfo.to_dict()`` keys before they were DeviceIdentity's names -> the names now.
OLD_FACT_NAMES = {"cpu_model": "cpu_name", "cores": "logical_cpus", "model": "product"}


def device_facts(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A stored ``DeviceInfo.to_dict()`` under today's names: older files' ``cpu_model``/``cores``/``model`` are
    read as ``cpu_name``/``logical_cpus``/``product`` (a key under today's name wins)."""
    renamed = {OLD_FACT_NAMES[k]: v for k, v in stored.items() if k in OLD_FACT_NAMES}
    return {**renamed, **{k: v for k, v in stored.items() if k not in OLD_FACT_NAMES}}


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


def _macos_sysctl_text() -> str:
    """``sysctl hw machdep.cpu.brand_string``: every ``hw.*`` value and the brand string, one per line."""
    try:
        out = subprocess.run(["sysctl", "hw", "machdep.cpu.brand_string"], capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout


def read_cpufreq(root: str | Path = "/sys/devices/system/cpu") -> tuple[dict[int, int], dict[int, int]]:
    """(``cpuinfo_max_freq`` kHz, ``cpu_capacity``) per CPU number, for the CPUs that have them."""
    max_khz: dict[int, int] = {}
    capacity: dict[int, int] = {}
    for cpu_dir in Path(root).glob("cpu[0-9]*"):
        cpu = _int_or_none(cpu_dir.name[3:])
        if cpu is None:
            continue
        khz = _int_or_none(_read(str(cpu_dir / "cpufreq" / "cpuinfo_max_freq")).strip())
        cap = _int_or_none(_read(str(cpu_dir / "cpu_capacity")).strip())
        if khz is not None:
            max_khz[cpu] = khz
        if cap is not None:
            capacity[cpu] = cap
    return max_khz, capacity


def host_device() -> DeviceInfo:
    """Facts about this host: CPU model, cores, arch, SME2 support where detectable, and its identity."""
    arch = platform.machine()
    system = platform.system()
    cores = os.cpu_count() or 0
    if system == "Darwin":
        sme2_flag = _macos_sysctl("hw.optional.arm.FEAT_SME2")
        return DeviceInfo(
            kind="host", name=platform.node(), arch=arch,
            cpu_name=_macos_sysctl("machdep.cpu.brand_string") or platform.processor(),
            logical_cpus=cores, sme2=(sme2_flag == "1") if sme2_flag else False,
            device_identity=darwin_identity(_macos_sysctl_text(), arch=arch, logical_cpus=cores),
        )
    text = _read("/proc/cpuinfo")
    feats = cpuinfo_features(text)
    is_arm = arch in ("aarch64", "arm64")
    if system == "Linux":
        max_khz, capacity = read_cpufreq() if is_arm else ({}, {})
        identity = linux_identity(text, arch=arch, logical_cpus=cores, max_khz=max_khz, capacity=capacity)
    else:
        # No /proc/cpuinfo (Windows, BSDs): what the platform module says, no ISA features.
        identity = DeviceIdentity(os=system.lower(), arch=arch, logical_cpus=cores, cpu_name=platform.processor())
    return DeviceInfo(
        kind="host", name=platform.node(), arch=arch,
        cpu_name=cpuinfo_model_name(text) or platform.processor(), logical_cpus=cores,
        # On x86 the question has a definite answer (no SME2); on arm64 the Features line decides.
        sme2=has_sme2(feats) if is_arm else False,
        features=tuple(sorted(feats)) if is_arm else (), cpu_parts=cpuinfo_parts(text),
        device_identity=identity,
    )


def host_identity() -> DeviceIdentity:
    """This machine's :class:`~pytest_sme2.device.identity.DeviceIdentity`."""
    return host_device().identity()


# ------------------------------------------------------------------------------------------ Android

#: One ``adb shell`` round trip for every fact :func:`device_info_from_facts` reads. Constant text: no
#: user input. Sections start with ``@@name`` lines.
ANDROID_FACTS_SCRIPT = (
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
#: Android ABI -> the architecture name this package uses (the ABI is what a runner build must match).
ABI_ARCH = {"arm64-v8a": "aarch64", "armeabi-v7a": "armv7", "x86_64": "x86_64", "x86": "x86"}


def parse_getprop(text: str) -> dict[str, str]:
    """``[key]: [value]`` lines of ``getprop`` -> dict."""
    props = {}
    for line in text.splitlines():
        m = _PROP_LINE.match(line.strip())
        if m:
            props[m.group(1)] = m.group(2)
    return props


def facts_sections(text: str) -> dict[str, str]:
    """The output of :data:`ANDROID_FACTS_SCRIPT` split at its ``@@name`` lines."""
    parts: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("@@"):
            current = line[2:].strip()
            parts[current] = []
        elif current:
            parts[current].append(line)
    return {k: "\n".join(v) for k, v in parts.items()}


def parse_battery(text: str) -> dict[str, str]:
    """``dumpsys battery`` -> the fields that matter for stable numbers (level, powered, temperature)."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    wanted = ("level", "AC powered", "USB powered", "Wireless powered", "temperature", "status")
    return {k: fields[k] for k in wanted if k in fields}


def parse_cpu_table(text: str) -> tuple[list[int], dict[int, int], dict[int, int]]:
    """The ``@@cpus`` section (``N max_khz capacity``, ``-`` when unknown) -> (cpus, max kHz, capacity)."""
    max_khz: dict[int, int] = {}
    capacity: dict[int, int] = {}
    cpus: list[int] = []
    for line in text.splitlines():
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
    return cpus, max_khz, capacity


def device_info_from_facts(serial: str, text: str) -> DeviceInfo:
    """A :class:`DeviceInfo` (with its identity) from the output of :data:`ANDROID_FACTS_SCRIPT`."""
    sec = facts_sections(text)
    props = parse_getprop(sec.get("props", ""))
    cpuinfo = sec.get("cpuinfo", "")
    cpus, max_khz, capacity = parse_cpu_table(sec.get("cpus", ""))
    features = cpuinfo_features(cpuinfo)
    abi = props.get("ro.product.cpu.abi", "")
    soc = " ".join(x for x in (props.get("ro.soc.manufacturer", ""), props.get("ro.soc.model", "")) if x)
    soc = soc or props.get("ro.board.platform", "") or props.get("ro.hardware", "")
    model = props.get("ro.product.model", "")
    battery = parse_battery(sec.get("battery", ""))
    # From the ABI, not `uname -m`: the ABI is what the runner build must match.
    arch = ABI_ARCH.get(abi, abi)
    cores = len(cpus) or len(cpuinfo_parts(cpuinfo))
    sdk = props.get("ro.build.version.sdk", "")
    return DeviceInfo(
        kind="android",
        name=model or serial,
        arch=arch,
        cpu_name=cpuinfo_model_name(cpuinfo) or soc,
        logical_cpus=cores,
        # No Features line at all means "could not tell", not "no SME2".
        sme2=has_sme2(features) if features else None,
        features=tuple(sorted(features)),
        cpu_parts=cpuinfo_parts(cpuinfo),
        clusters=clusters_from_max_freq(max_khz, capacity) if max_khz else (),
        serial=serial,
        product=model,
        soc=soc,
        abi=abi,
        os_version=props.get("ro.build.version.release", ""),
        sdk=sdk,
        thermal_status=parse_thermal_status(sec.get("thermal", "")),
        extra={"build_fingerprint": props.get("ro.build.fingerprint", ""), "battery": battery},
        device_identity=replace(
            linux_identity(cpuinfo, os_kind="android", arch=arch, logical_cpus=cores, max_khz=max_khz,
                           capacity=capacity, soc=soc, product=model, sdk=sdk, abi=abi),
            emulator=android_emulator(props)),
    )


#: Properties an Android system booted under QEMU sets (the Android Emulator's kernel command line gives
#: ``androidboot.qemu=1``, which init turns into ``ro.boot.qemu``; older images set ``ro.kernel.qemu``).
EMULATOR_PROPS = ("ro.boot.qemu", "ro.kernel.qemu")


def android_emulator(props: Mapping[str, str]) -> str:
    """What emulates this Android device, from its properties ("" for a phone): its time is emulated time."""
    flags = [f"{key}=1" for key in EMULATOR_PROPS if props.get(key, "").strip() == "1"]
    if not flags:
        return ""
    extra = [f"{key}={props[key]}" for key in ("ro.boot.qemu.avd_name", "ro.hardware") if props.get(key)]
    return f"Android emulator ({', '.join(flags + extra)})"
