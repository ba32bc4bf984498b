"""Device identity: the facts that decide which kernels run and how fast, and nothing that drifts.

Two machines of one cloud instance type can both report ``model name: AMD EPYC`` with 2 CPUs and
still be a Zen 3 (family 25 model 1: AVX2, no AVX-512) and a Zen 4 (family 25 model 17: AVX-512).
XNNPACK picks other kernels on each, and the same model ran 3.1x apart. So the identity holds what
the kernel choice and the speed depend on:

- x86: vendor, family, model, stepping, the brand string;
- Arm: per cluster of identical cores, the MIDR fields ``CPU implementer``/``part``/``variant``/
  ``revision``, how many cores and their maximum clock (the hardware limit, not the current clock);
- the ISA features XNNPACK and KleidiAI dispatch on (:data:`X86_ISA`, :data:`ARM_ISA`), as
  ``/proc/cpuinfo`` names them — a fixed list, so a kernel update that prints a new unrelated flag
  does not make a new device;
- OS kind, architecture, logical CPUs; on Android the SoC, the phone model, the SDK and the ABI.

Not in it: current clocks, temperature, battery, load, host name, serial numbers, kernel or build
versions — two units of one phone model share an identity, and so does one machine on a hot day.

This module is pure data: :mod:`pytest_sme2.device.facts` reads the facts and builds identities. There,
``DeviceInfo`` is the live facts of a device (what runs use and reports show, drifting facts included); a
:class:`DeviceIdentity` is what a baseline is keyed on. A fact both hold has the same name in both.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_sme2.errors import DeviceError, Sme2Error

#: Where a measurement's latency comes from (``Measurement.latency``), part of the identity: E2E samples from
#: untraced runs, breakdown from traced runs of the same blocks ...
LATENCY_UNTRACED = "untraced"
#: ... or E2E samples and breakdown from the same traced runs (the latency includes the tracer's cost).
LATENCY_TRACED = "traced"
LATENCY_MODES = (LATENCY_UNTRACED, LATENCY_TRACED)

#: Bumped when the meaning of a field changes; identities of different versions never match.
IDENTITY_VERSION = 1

#: x86 features, in /proc/cpuinfo spelling, that XNNPACK's and KleidiAI's dispatch looks at.
X86_ISA = (
    "sse2", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c",
    "avx512f", "avx512cd", "avx512dq", "avx512bw", "avx512vl", "avx512ifma", "avx512vbmi", "avx512_vbmi2",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "avx_vnni_int8",
    "amx_tile", "amx_int8", "amx_bf16", "amx_fp16",
)
#: arm64 hwcaps, in /proc/cpuinfo ``Features`` spelling, that XNNPACK's and KleidiAI's dispatch looks at.
ARM_ISA = (
    "asimd", "fphp", "asimdhp", "asimddp", "asimdfhm", "i8mm", "bf16",
    "sve", "sve2", "svei8mm", "svebf16", "sme", "sme2", "sme2p1",
)
#: The features a one-line description shows: those that separate CPU generations.
SHOWN_ISA = (
    "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
    "avx_vnni", "amx_tile", "amx_int8", "amx_bf16",
    "asimddp", "i8mm", "bf16", "sve", "sve2", "sme", "sme2", "sme2p1",
)
_ISA_ORDER = {name: i for i, name in enumerate((*X86_ISA, *ARM_ISA))}

#: ``CPU implementer`` codes -> names (for descriptions only; the identity keeps the code).
IMPLEMENTERS = {"0x41": "Arm", "0x42": "Broadcom", "0x43": "Cavium", "0x48": "HiSilicon", "0x4e": "NVIDIA",
                "0x51": "Qualcomm", "0x53": "Samsung", "0x61": "Apple", "0x6d": "Microsoft", "0xc0": "Ampere"}
#: Arm Ltd ``CPU part`` codes -> core names (Linux arch/arm64/include/asm/cputype.h); descriptions only.
ARM_PARTS = {
    "0xd03": "Cortex-A53", "0xd05": "Cortex-A55", "0xd07": "Cortex-A57", "0xd08": "Cortex-A72",
    "0xd09": "Cortex-A73", "0xd0a": "Cortex-A75", "0xd0b": "Cortex-A76", "0xd0c": "Neoverse-N1",
    "0xd0d": "Cortex-A77", "0xd40": "Neoverse-V1", "0xd41": "Cortex-A78", "0xd44": "Cortex-X1",
    "0xd46": "Cortex-A510", "0xd47": "Cortex-A710", "0xd48": "Cortex-X2", "0xd49": "Neoverse-N2",
    "0xd4d": "Cortex-A715", "0xd4e": "Cortex-X3", "0xd4f": "Neoverse-V2", "0xd80": "Cortex-A520",
    "0xd81": "Cortex-A720", "0xd82": "Cortex-X4", "0xd84": "Neoverse-V3", "0xd85": "Cortex-X925",
    "0xd87": "Cortex-A725", "0xd8b": "C1-Pro", "0xd8c": "C1-Ultra", "0xd8e": "Neoverse-N3",
    "0xd90": "C1-Premium",
}


def isa_order(features: Sequence[str] | frozenset[str]) -> tuple[str, ...]:
    """The known dispatch features among ``features``, in the canonical order of the lists above."""
    return tuple(sorted((f for f in set(features) if f in _ISA_ORDER), key=_ISA_ORDER.__getitem__))


@dataclass(frozen=True)
class CoreGroup:
    """A cluster of identical cores: how many, which core (MIDR fields), and its maximum clock.

    On Arm the MIDR fields come from ``/proc/cpuinfo`` as printed (``implementer`` ``0x41``,
    ``part`` ``0xd8c``, ``variant`` ``0x0``, ``revision`` ``0``); on Apple silicon ``part`` is the
    performance level's name. ``max_khz`` is ``cpuinfo_max_freq`` (None where the OS does not say).
    """

    count: int
    implementer: str = ""
    part: str = ""
    variant: str = ""
    revision: str = ""
    max_khz: int | None = None

    @property
    def core_name(self) -> str:
        """``Arm C1-Ultra r0p0`` when known, else the raw codes."""
        vendor = IMPLEMENTERS.get(self.implementer.lower(), self.implementer)
        part = ARM_PARTS.get(self.part.lower(), self.part) if self.implementer.lower() == "0x41" else self.part
        name = " ".join(x for x in (vendor, part) if x) or "unknown core"
        if self.variant or self.revision:
            try:
                name += f" r{int(self.variant, 16)}p{int(self.revision, 0)}"
            except ValueError:
                name += f" variant {self.variant} revision {self.revision}"
        return name

    def describe(self) -> str:
        clock = f" {self.max_khz / 1e6:.2f} GHz" if self.max_khz else ""
        return f"{self.count}x {self.core_name}{clock}"

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "implementer": self.implementer, "max_khz": self.max_khz,
                "part": self.part, "revision": self.revision, "variant": self.variant}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CoreGroup:
        max_khz = data.get("max_khz")
        return cls(count=int(data["count"]), implementer=str(data.get("implementer", "")),
                   part=str(data.get("part", "")), variant=str(data.get("variant", "")),
                   revision=str(data.get("revision", "")), max_khz=None if max_khz is None else int(max_khz))


@dataclass(frozen=True)
class DeviceIdentity:
    """What a baseline's device was: equal identities mean the same kernels at the same nominal speed.

    ``os`` is ``linux``, ``android``, ``darwin`` or ``windows``; ``family``/``model``/``stepping``
    are x86 CPUID values (on macOS ``hw.cpufamily``/``hw.cpusubfamily``); ``clusters`` are the core
    types of Arm CPUs, slowest first; ``isa`` the dispatch features present, in canonical order.
    """

    os: str
    arch: str
    logical_cpus: int
    vendor: str = ""
    cpu_name: str = ""
    family: int | None = None
    model: int | None = None
    stepping: int | None = None
    clusters: tuple[CoreGroup, ...] = ()
    isa: tuple[str, ...] = ()
    soc: str = ""
    product: str = ""
    sdk: str = ""
    abi: str = ""
    #: what emulates this device (``qemu-aarch64 11.1.3, -cpu max, SVL 256 bit``); "" for real hardware. Its
    #: timings are emulated time, never device time; its baselines never match a real device's.
    emulator: str = ""
    version: int = IDENTITY_VERSION

    @property
    def emulated(self) -> bool:
        return bool(self.emulator)

    # ------------------------------------------------------------------------------ serialization

    def to_dict(self) -> dict[str, Any]:
        """A plain dict with sorted keys (clusters as dicts, ISA as a list).

        ``emulator`` is present only for an emulated device, so the ids of real devices recorded before it
        existed stay what they were.
        """
        out = {
            "abi": self.abi, "arch": self.arch, "clusters": [c.to_dict() for c in self.clusters],
            "cpu_name": self.cpu_name, "family": self.family, "isa": list(self.isa),
            "logical_cpus": self.logical_cpus, "model": self.model, "os": self.os, "product": self.product,
            "sdk": self.sdk, "soc": self.soc, "stepping": self.stepping, "vendor": self.vendor,
            "version": self.version,
        }
        if self.emulator:
            out["emulator"] = self.emulator
        return dict(sorted(out.items()))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeviceIdentity:
        """The inverse of :meth:`to_dict`; a record without the required keys is a DeviceError."""
        missing = [k for k in ("version", "os", "arch", "logical_cpus", "isa") if k not in data]
        if missing:
            raise DeviceError(
                f"this device identity record has no {', '.join(missing)} (keys: {', '.join(sorted(data)) or 'none'}): "
                "it was not written by DeviceIdentity.to_dict, or by a pytest-sme2 from before device identities. "
                "Record it again on the device (a new baseline)."
            )

        def _int(key: str) -> int | None:
            value = data.get(key)
            return None if value is None else int(value)

        return cls(
            os=str(data["os"]), arch=str(data["arch"]), logical_cpus=int(data["logical_cpus"]),
            vendor=str(data.get("vendor", "")), cpu_name=str(data.get("cpu_name", "")),
            family=_int("family"), model=_int("model"), stepping=_int("stepping"),
            clusters=tuple(CoreGroup.from_dict(c) for c in data.get("clusters", [])),
            isa=tuple(str(x) for x in data["isa"]), soc=str(data.get("soc", "")),
            product=str(data.get("product", "")), sdk=str(data.get("sdk", "")), abi=str(data.get("abi", "")),
            emulator=str(data.get("emulator", "")), version=int(data["version"]),
        )

    @property
    def id(self) -> str:
        """A short stable id: the first 12 hex digits of the sha256 of the canonical JSON."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]

    # -------------------------------------------------------------------------------- in words

    def describe(self) -> str:
        """One line for reports and messages.

        ``AMD EPYC family 25 model 17 stepping 1 (x86_64, 2 CPUs; avx2 fma f16c avx512f ...)``;
        ``EmuPhone SME2 (Mediatek MT6993, Android SDK 36; aarch64, 8 CPUs: 4x Arm C1-Pro ...; ... sme2)``.
        """
        shown = [f for f in SHOWN_ISA if f in self.isa]
        isa = " ".join(shown or self.isa) or "ISA features unknown"
        cores = f"{self.arch}, {self.logical_cpus} CPUs"
        if self.clusters:
            cores += ": " + " + ".join(c.describe() for c in self.clusters)
        if self.os == "android":
            head = self.product or "Android device"
            details = [x for x in (self.soc, f"Android SDK {self.sdk}" if self.sdk else "") if x]
            return f"{head} ({', '.join(details) + '; ' if details else ''}{cores}; {isa})"
        head = self.cpu_name or self.vendor or "unknown CPU"
        if self.emulator:
            return f"EMULATED {self.arch} CPU ({self.emulator}; {cores}; {isa})"
        if self.os == "darwin":
            if self.family is not None:
                head += f" cpufamily {self.family:#x}"
        else:
            head += "".join(f" {label} {value}" for label, value in
                            (("family", self.family), ("model", self.model), ("stepping", self.stepping))
                            if value is not None)
        return f"{head} ({cores}; {isa})"


def identity_differences(
    reference: DeviceIdentity, current: DeviceIdentity, *, current_name: str = "this device"
) -> tuple[str, ...]:
    """In words, each way ``current`` differs from ``reference`` (empty when they are the same).

    The gate prints them when a baseline belongs to another device, e.g. ``CPU model 1 != 17:
    another CPU generation (this device adds avx512f avx512bw avx512vl avx512_vnni)``. Values read
    "reference != current".
    """
    a, b = reference, current
    out: list[str] = []
    if a.version != b.version:
        out.append(f"identity format {a.version} != {b.version}: recorded by another pytest-sme2 version")
    if a.emulator != b.emulator:
        out.append(f"emulator {a.emulator or '(real hardware)'} != {b.emulator or '(real hardware)'}: emulated time "
                   "is not device time")
    if a.os != b.os:
        out.append(f"OS {a.os} != {b.os}")
    if a.arch != b.arch:
        out.append(f"architecture {a.arch} != {b.arch}")
    if a.abi != b.abi:
        out.append(f"ABI {a.abi or '-'} != {b.abi or '-'}")
    if a.vendor != b.vendor:
        out.append(f"CPU vendor {a.vendor or '-'} != {b.vendor or '-'}: another CPU maker")
    cpu_changes = len(out)
    if a.family != b.family:
        out.append(f"CPU family {_v(a.family)} != {_v(b.family)}: another CPU line")
    elif a.model != b.model:
        out.append(f"CPU model {_v(a.model)} != {_v(b.model)}: another CPU generation")
    elif a.stepping != b.stepping:
        out.append(f"CPU stepping {_v(a.stepping)} != {_v(b.stepping)}: another revision of the same CPU")
    same_arch = a.arch == b.arch  # across architectures, core and feature lists only add noise
    if same_arch and a.clusters != b.clusters:
        out.append(f"cores {_cores(a)} != {_cores(b)}: other core types or clocks")
    if a.soc != b.soc:
        out.append(f"SoC {a.soc or '-'} != {b.soc or '-'}")
    if a.product != b.product:
        out.append(f"model {a.product or '-'} != {b.product or '-'}")
    if a.cpu_name != b.cpu_name:
        out.append(f"CPU name {a.cpu_name or '-'!r} != {b.cpu_name or '-'!r}")
    added = [f for f in b.isa if f not in a.isa]
    lost = [f for f in a.isa if f not in b.isa]
    if same_arch and (added or lost):
        change = "; ".join(x for x in (f"{current_name} adds {' '.join(added)}" if added else "",
                                       f"{current_name} lacks {' '.join(lost)}" if lost else "") if x)
        if len(out) > cpu_changes:
            # Attach the features to the CPU difference that explains them.
            out[cpu_changes] += f" ({change})"
        else:
            out.append(f"ISA features differ: {change}")
    if a.logical_cpus != b.logical_cpus:
        out.append(f"logical CPUs {a.logical_cpus} != {b.logical_cpus}")
    if a.sdk != b.sdk:
        out.append(f"Android SDK {a.sdk or '-'} != {b.sdk or '-'}")
    return tuple(out)


def explain_difference(reference: DeviceIdentity, current: DeviceIdentity, *,
                       current_name: str = "this device") -> str:
    """:func:`identity_differences` as one sentence ("" when the identities are equal)."""
    return "; ".join(identity_differences(reference, current, current_name=current_name))


def short_name(identity: Mapping[str, Any]) -> str:
    """A device in a few words, from a measurement identity (or a device identity's dict).

    ``AMD EPYC family 25 model 1``; ``Pixel 9 (Tensor G4)``; ``QEMU 11.1.3 on AuthenticAMD family 25 model 17``
    (emulated time depends on the host, so the host is named). The full identity is ``summary``/:meth:`describe`.
    """
    emulator = str(identity.get("emulator") or "")
    if emulator:
        m = _EMULATOR.match(emulator)
        return f"QEMU {m.group(1)} on {m.group(2)}" if m else f"emulated ({emulator.split(',', maxsplit=1)[0]})"
    if identity.get("os") == "android":
        soc = identity.get("soc")
        return f"{identity.get('product') or 'Android device'}{f' ({soc})' if soc else ''}"
    head = str(identity.get("cpu_name") or identity.get("vendor") or identity.get("arch") or "unknown device")
    if not identity.get("cpu_name") and identity.get("clusters"):
        head = " + ".join(CoreGroup.from_dict(c).core_name for c in identity["clusters"])
    return head + "".join(f" {label} {identity[label]}" for label in ("family", "model")
                          if identity.get(label) is not None)


_EMULATOR = re.compile(r"qemu-\S+ (\S+?),.*; on (.+)$")
#: Short values are shown in full in a short difference (``threads 1 != 2``); longer ones are only named.
_SHORT_VALUE = 24
_CPU_DETAILS = {"clusters", "cpu_name", "family", "model", "stepping", "vendor", "isa"}


def short_differences(reference: Mapping[str, Any], current: Mapping[str, Any]) -> str:
    """How ``current`` differs from ``reference`` (two measurement identities) in a few words.

    ``model 1 != 17; isa: 10 features differ``; ``threads 1 != 2``. The full differences are
    :func:`pytest_sme2.store.baseline.identity_diff`'s (the JSON results carry them).
    """
    out = []
    # Across architectures the CPU's details only add noise: "arch x86_64 != aarch64" says it.
    skip = {"summary"} | (_CPU_DETAILS if reference.get("arch") != current.get("arch") else set())
    for key in sorted(set(reference) | set(current)):
        a, b = reference.get(key), current.get(key)
        if a == b or key in skip:  # the summary repeats the other keys
            continue
        if key == "isa" and isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            out.append(f"isa: {len(set(a) ^ set(b))} features differ")
        elif key == "emulator" and not (a and b):
            out.append("emulated != real hardware")
        elif len(repr(a)) <= _SHORT_VALUE and len(repr(b)) <= _SHORT_VALUE and not isinstance(a, (list, dict)):
            out.append(f"{key} {a if a not in (None, '') else '-'} != {b if b not in (None, '') else '-'}")
        else:
            out.append(f"{key} differs")
    return "; ".join(out)


def _v(value: int | None) -> str:
    return "-" if value is None else str(value)


def _cores(identity: DeviceIdentity) -> str:
    return " + ".join(c.describe() for c in identity.clusters) or "(not recorded)"


def reports_sme2(facts: Mapping[str, Any]) -> bool | None:
    """Whether a device reports SME2, from its facts: a ``sme2`` flag (``DeviceInfo.to_dict()``), else the ISA
    features of its identity (``DeviceIdentity.to_dict()``, or a profile's identity holding one); None when neither
    says.
    """
    flag = facts.get("sme2")
    if isinstance(flag, bool):
        return flag
    isa = facts.get("isa")
    if isinstance(isa, (list, tuple)):
        return "sme2" in isa or "sme2p1" in isa
    return None


class IdentifiedRunner(Protocol):
    """What :func:`identity_of` reads of a runner (every :class:`~pytest_sme2.runners.base.Runner` has it): a
    Protocol here, so that ``device/`` does not import ``runners/``, which stands above it."""

    @property
    def name(self) -> str: ...

    def identity(self) -> Mapping[str, Any]: ...

    def run_settings(self) -> Mapping[str, Any]: ...


class IdentifiedMeasurement(Protocol):
    """What :func:`identity_of` reads of a measurement (a :class:`~pytest_sme2.measure.recipe.Measurement`): a
    Protocol here, so that ``device/`` does not import ``measure/``, which stands above it."""

    @property
    def model(self) -> Mapping[str, Any]: ...

    @property
    def variant(self) -> str | None: ...

    @property
    def threads(self) -> int: ...

    @property
    def latency(self) -> str: ...


def identity_of(runner: IdentifiedRunner, measurement: IdentifiedMeasurement) -> dict[str, Any]:
    """What a baseline is keyed on: the device identity, how runs are made there (the runner kind; pinning and
    clock mode on a phone), and the test's threads, dtype, backend and variant. ``summary`` is one line of it."""
    device = dict(runner.identity())
    identity = dict(device)
    with contextlib.suppress(Sme2Error):  # a stand-in runner's own identity is keyed as it is
        identity["summary"] = DeviceIdentity.from_dict(device).describe()
    identity.update(runner.run_settings())
    identity.update({"runner": runner.name, "dtype": measurement.model.get("dtype", "unknown"),
                     "backend": measurement.model.get("backend", "unknown"), "threads": measurement.threads})
    if measurement.variant is not None:
        identity["variant"] = measurement.variant
    if measurement.latency == LATENCY_UNTRACED:
        # Untraced and traced latency time different things (the tracer's cost; on the local runtime the
        # pybindings call too): never one baseline for both. Traced keeps the key absent, as before it existed.
        identity["latency"] = LATENCY_UNTRACED
    return identity
