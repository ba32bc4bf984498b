"""Device profiles: the facts an emulated phone reports (props, CPU topology, hwcaps, thermals).

The numbers describe two phone classes the plugin must tell apart: one whose big cores have SME2
(Dimensity-9500-like) and one without (Snapdragon-8-Gen-3-like). Frequencies, CPU parts and SoC names
follow public descriptions of those SoCs; capacities, temperatures and the product names are
illustrative and marked as emulated, so nothing here can be mistaken for a measured device.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# Common Armv9 hwcaps, in the kernel's hwcap_str order, shared by both profiles.
_ARMV9_FEATURES = (
    "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc "
    "dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg dcpodp "
    "sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svebf16 i8mm bf16 dgh bti "
    "ecv afp rpres"
)
# SME tokens as Linux prints them; `sme2` is the one the plugin keys on, the rest keep a token-wise
# parser honest (a substring match on "sme" would also hit the no-SME2 cases below).
_SME2_FEATURES = (
    "sme smei16i64 smef64f64 smei8i32 smef16f32 smeb16f32 smef32f32 smefa64 wfxt ebf16 sveebf16 cssc "
    "sme2 smei16i32 smebi32i32 mops hbc"
)


@dataclass(frozen=True)
class Cluster:
    """A group of identical cores sharing one cpufreq policy."""

    cpus: tuple[int, ...]
    max_khz: int
    capacity: int
    part: int  # MIDR part number as /proc/cpuinfo prints it ("CPU part : 0xd8c")
    variant: int = 0
    revision: int = 0


@dataclass(frozen=True)
class ThermalZone:
    """One /sys/class/thermal zone and the HAL temperature dumpsys reports for it."""

    type: str
    millicelsius: int
    hal_type: int  # Temperature.mType: 0 CPU, 1 GPU, 2 BATTERY, 3 SKIN
    hal_name: str


@dataclass(frozen=True)
class Profile:
    """Everything an emulated phone reports about itself."""

    name: str
    props: Mapping[str, str]
    clusters: tuple[Cluster, ...]
    features: str
    thermal_zones: tuple[ThermalZone, ...]
    battery: Mapping[str, str] = field(default_factory=dict)
    #: the QEMU CPU an arm64 phone of this profile executes aarch64 code on (its /proc/cpuinfo then comes from it)
    qemu_cpu: str = "max"

    @property
    def cpu_count(self) -> int:
        """Number of CPUs across all clusters."""
        return sum(len(c.cpus) for c in self.clusters)

    @property
    def online_mask(self) -> int:
        """Affinity mask of every online CPU (what sched_setaffinity intersects with)."""
        mask = 0
        for cluster in self.clusters:
            for cpu in cluster.cpus:
                mask |= 1 << cpu
        return mask

    def cluster_of(self, cpu: int) -> Cluster:
        """The cluster that holds `cpu`."""
        for cluster in self.clusters:
            if cpu in cluster.cpus:
                return cluster
        raise KeyError(f"cpu{cpu} is not in profile {self.name!r} (cpus 0-{self.cpu_count - 1})")

    @property
    def banner_props(self) -> tuple[str, str, str]:
        """(ro.product.name, ro.product.model, ro.product.device) for the CNXN banner."""
        return (
            self.props["ro.product.name"],
            self.props["ro.product.model"],
            self.props["ro.product.device"],
        )


def _common_props(name: str, model: str, sdk: int, release: str) -> dict[str, str]:
    return {
        "ro.product.name": name,
        "ro.product.device": name,
        "ro.product.model": model,
        "ro.product.brand": "emulated",
        "ro.product.manufacturer": "pytest-sme2",
        "ro.build.version.sdk": str(sdk),
        "ro.build.version.release": release,
        "ro.build.type": "user",
        "ro.build.tags": "release-keys",
        "ro.build.fingerprint": f"emulated/{name}/{name}:{release}/EMU.{sdk}/1:user/release-keys",
        "ro.product.cpu.abi": "arm64-v8a",
        "ro.product.cpu.abilist": "arm64-v8a",
        "ro.debuggable": "0",
        "ro.secure": "1",
        "ro.adb.secure": "1",
        "sys.boot_completed": "1",
        "persist.sys.timezone": "UTC",
    }


_BATTERY = {
    "AC powered": "false",
    "USB powered": "true",
    "Wireless powered": "false",
    "Dock powered": "false",
    "Max charging current": "500000",
    "Max charging voltage": "5000000",
    "Charge counter": "4100000",
    "status": "2",
    "health": "2",
    "present": "true",
    "level": "87",
    "scale": "100",
    "voltage": "4213",
    "temperature": "312",
    "technology": "Li-ion",
}

SME2_PHONE = Profile(
    name="sme2_phone",
    props={
        **_common_props("emu_sme2", "EmuPhone SME2", 36, "16"),
        "ro.soc.manufacturer": "Mediatek",
        "ro.soc.model": "MT6993",
        "ro.hardware": "mt6993",
        "ro.board.platform": "mt6993",
        "ro.serialno": "EMUSME20001",
    },
    clusters=(
        Cluster(cpus=(0, 1, 2, 3), max_khz=2_700_000, capacity=600, part=0xD8B),  # C1-Pro
        Cluster(cpus=(4, 5, 6), max_khz=3_500_000, capacity=880, part=0xD90),  # C1-Premium
        Cluster(cpus=(7,), max_khz=4_210_000, capacity=1024, part=0xD8C),  # C1-Ultra
    ),
    features=f"{_ARMV9_FEATURES} {_SME2_FEATURES}",
    qemu_cpu="max",  # Armv9 with SVE2, SME, SME2
    thermal_zones=(
        ThermalZone("soc_max", 44_800, 0, "AP"),
        ThermalZone("cpu-big-core7", 45_300, 0, "CPU7"),
        ThermalZone("battery", 31_200, 2, "battery"),
        ThermalZone("skin", 33_900, 3, "skin"),
    ),
    battery=_BATTERY,
)

NOSME_PHONE = Profile(
    name="nosme_phone",
    props={
        **_common_props("emu_nosme", "EmuPhone NoSME", 35, "15"),
        "ro.soc.manufacturer": "QTI",
        "ro.soc.model": "SM8650",
        "ro.hardware": "qcom",
        "ro.board.platform": "pineapple",
        "ro.serialno": "EMUNOSME0001",
    },
    clusters=(
        Cluster(cpus=(0, 1), max_khz=2_265_600, capacity=390, part=0xD80),  # Cortex-A520
        Cluster(cpus=(2, 3, 4, 5, 6), max_khz=3_014_400, capacity=870, part=0xD81),  # Cortex-A720
        Cluster(cpus=(7,), max_khz=3_302_400, capacity=1024, part=0xD82),  # Cortex-X4
    ),
    features=_ARMV9_FEATURES,
    qemu_cpu="max,sme=off",  # the same Armv9 CPU without SME/SME2 (the X4/A720/A520 have SVE2, no SME)
    thermal_zones=(
        ThermalZone("cpu-1-0-0", 43_100, 0, "cpu-1-0-0"),
        ThermalZone("cpu-1-2-0", 44_600, 0, "cpu-1-2-0"),
        ThermalZone("battery", 30_500, 2, "battery"),
        ThermalZone("sys-therm-0", 32_700, 3, "skin"),
    ),
    battery=_BATTERY,
)

PROFILES: Mapping[str, Profile] = {p.name: p for p in (SME2_PHONE, NOSME_PHONE)}


def get_profile(name: str) -> Profile:
    """Look up a profile by name, listing the known ones if it is missing."""
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown emulated phone profile {name!r}; known: {', '.join(PROFILES)}") from None
