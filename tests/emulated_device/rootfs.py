"""Per-test root filesystem of an emulated phone, laid out at its Android paths.

The tree lives in a temporary directory; `MOUNTS` says where each part appears on the "device". The
sandbox binds them at those paths for shell commands and the sync service maps device paths through
the same table, so both views agree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .arm64 import Arm64Cpu
from .profiles import Profile

SHELL_UID = 2000  # AID_SHELL: what `adb shell` runs as on a production phone
SHIMS = Path(__file__).with_name("shims")
SHIM_NAMES = ("getprop", "dumpsys", "taskset", "cmd", "logcat")
#: Android's shell and coreutils, as Debian packages them (`mksh`, `toybox`); dash and coreutils when absent.
MKSH = "/bin/mksh"
TOYBOX = "/usr/bin/toybox"


#: Commands the phone does not take from toybox. `timeout`: toybox runs a command that is one of its own applets
#: in-process, so its `timeout ... taskset MASK` would pin with toybox's real taskset (the host's 2 CPUs, not the
#: phone's 8) instead of the shim; coreutils' timeout execs the shim from PATH. `sh`: mksh is the shell. `su`:
#: Android's toybox is built without it, and a production phone has none (an `su` is what rooting adds).
NOT_TOYBOX = ("timeout", "sh", "su")


def toybox_applets(toybox: str = TOYBOX) -> tuple[str, ...]:
    """The commands this toybox provides (its no-argument listing), or () without toybox."""
    if not Path(toybox).is_file():
        return ()
    out = subprocess.run([toybox], capture_output=True, text=True, timeout=30, check=False).stdout
    return tuple(name for name in out.split() if name.isascii() and "/" not in name)

THERMAL_STATUS_NAMES = ("NONE", "LIGHT", "MODERATE", "SEVERE", "CRITICAL", "EMERGENCY", "SHUTDOWN")


@dataclass(frozen=True)
class Mount:
    """A rootfs entry and the Android path it appears at.

    `writable` is the mount flag. A writable mount is still guarded by file modes: /sys is bound
    writable so that writing a root-owned sysfs file fails with EACCES ("Permission denied"), as on a
    phone, instead of EROFS.
    """

    device_path: str
    rootfs_path: str
    writable: bool
    # Counted against the data-partition quota (fault injection): /sdcard lives on /data on a phone.
    on_data_partition: bool = False


MOUNTS = (
    Mount("/data", "data", writable=True, on_data_partition=True),
    Mount("/sdcard", "sdcard", writable=True, on_data_partition=True),
    Mount("/system", "system", writable=False),
    Mount("/sys", "sys", writable=True),
    Mount("/proc/cpuinfo", "proc/cpuinfo", writable=False),
    # Not an Android path: state the shims share with the test (thermal status, taskset log).
    Mount("/emulated", "emulated", writable=True),
)


@dataclass(frozen=True)
class Rootfs:
    """A built rootfs: host paths of the parts tests and the fixtures look at."""

    root: Path
    profile: Profile

    @property
    def data(self) -> Path:
        """Host path of the device's /data."""
        return self.root / "data"

    @property
    def local_tmp(self) -> Path:
        """Host path of /data/local/tmp, the shell user's scratch directory."""
        return self.root / "data" / "local" / "tmp"

    @property
    def sdcard(self) -> Path:
        """Host path of /sdcard."""
        return self.root / "sdcard"

    @property
    def state(self) -> Path:
        """Host path of the shims' state directory (/emulated on the device)."""
        return self.root / "emulated"

    def host_path(self, device_path: str) -> tuple[Path, Mount] | None:
        """Map an absolute device path into the rootfs; None if no mount covers it.

        `..` is folded lexically first (as the kernel would walk it from /), so a path cannot climb
        out of its mount; symlinks are checked by the caller.
        """
        normal = os.path.normpath("/" + device_path.lstrip("/"))
        for mount in sorted(MOUNTS, key=lambda m: -len(m.device_path)):
            if normal == mount.device_path or normal.startswith(mount.device_path + "/"):
                rest = PurePosixPath(normal).relative_to(mount.device_path)
                return self.root / mount.rootfs_path / rest, mount
        return None

    def read_thermal_status(self) -> int:
        """The HAL thermal status dumpsys reports (ignoring `cmd thermalservice override-status`)."""
        return int((self.state / "thermal_status").read_text().strip())

    def write_thermal_status(self, status: int) -> None:
        """Set the HAL thermal status (0 NONE ... 6 SHUTDOWN)."""
        if not 0 <= status < len(THERMAL_STATUS_NAMES):
            raise ValueError(f"thermal status must be 0-6 ({', '.join(THERMAL_STATUS_NAMES)}), got {status}")
        tmp = self.state / "thermal_status.tmp"
        tmp.write_text(f"{status}\n")
        os.chown(tmp, SHELL_UID, SHELL_UID)
        tmp.replace(self.state / "thermal_status")  # atomic: a concurrent dumpsys never reads ""

    def thermal_override(self) -> int | None:
        """The status set by `cmd thermalservice override-status`, None after `reset`."""
        path = self.state / "thermal_override"
        text = path.read_text().strip() if path.exists() else ""
        return int(text) if text else None

    def taskset_log(self) -> list[tuple[str, str]]:
        """(mask, command) for every taskset call that passed validation, in order."""
        path = self.state / "taskset.log"
        if not path.exists():
            return []
        return [
            (mask, command) for mask, _, command in (line.partition("\t") for line in path.read_text().splitlines())
        ]

    @property
    def logcat_buffer(self) -> Path:
        """Host path of the logcat main buffer (/emulated/logcat): threadtime lines, what `logcat -d` prints."""
        return self.state / "logcat"

    def logcat_lines(self) -> list[str]:
        """The logcat buffer now (cleared by `logcat -c`, appended to by runner stand-ins)."""
        return self.logcat_buffer.read_text().splitlines() if self.logcat_buffer.exists() else []

    def fixed_performance_mode_log(self) -> list[bool]:
        """Every `cmd power set-fixed-performance-mode-enabled` value, in order."""
        path = self.state / "fixed_performance_mode.log"
        if not path.exists():
            return []
        return [line == "true" for line in path.read_text().splitlines()]


def _write(path: Path, text: str, mode: int = 0o444, uid: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chown(path, uid, uid)
    path.chmod(mode)


def _mkdir(path: Path, mode: int = 0o755, uid: int = 0) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, uid)
    path.chmod(mode)  # explicit: mkdir's mode is masked by the umask


def _cpu_list(cpus: tuple[int, ...]) -> str:
    return f"{cpus[0]}-{cpus[-1]}" if len(cpus) > 1 else str(cpus[0])


def _cpuinfo(profile: Profile) -> str:
    blocks = []
    for cpu in range(profile.cpu_count):
        cluster = profile.cluster_of(cpu)
        blocks.append(
            f"processor\t: {cpu}\n"
            "BogoMIPS\t: 26.00\n"
            f"Features\t: {profile.features}\n"
            "CPU implementer\t: 0x41\n"
            "CPU architecture: 8\n"
            f"CPU variant\t: 0x{cluster.variant:x}\n"
            f"CPU part\t: 0x{cluster.part:03x}\n"
            f"CPU revision\t: {cluster.revision}\n"
        )
    return "\n".join(blocks) + "\n"


def _build_sys(root: Path, profile: Profile) -> None:
    cpu_dir = root / "sys" / "devices" / "system" / "cpu"
    everything = f"0-{profile.cpu_count - 1}\n"
    for name in ("possible", "online", "present"):
        _write(cpu_dir / name, everything)
    for index, cluster in enumerate(profile.clusters):
        # Android kernels expose one cpufreq policy per cluster and link cpuN/cpufreq to it.
        policy = cpu_dir / "cpufreq" / f"policy{cluster.cpus[0]}"
        related = " ".join(str(c) for c in cluster.cpus) + "\n"
        min_khz = 300_000 + 100_000 * index
        for name, text, mode in (
            ("cpuinfo_max_freq", f"{cluster.max_khz}\n", 0o444),
            ("cpuinfo_min_freq", f"{min_khz}\n", 0o444),
            ("scaling_max_freq", f"{cluster.max_khz}\n", 0o644),
            ("scaling_min_freq", f"{min_khz}\n", 0o644),
            ("scaling_cur_freq", f"{cluster.max_khz}\n", 0o444),
            ("scaling_governor", "schedutil\n", 0o644),  # root-owned: uid 2000 gets EACCES
            ("scaling_available_governors", "schedutil performance powersave\n", 0o444),
            ("related_cpus", related, 0o444),
            ("affected_cpus", related, 0o444),
        ):
            _write(policy / name, text, mode)
        for cpu in cluster.cpus:
            core = cpu_dir / f"cpu{cpu}"
            _write(core / "cpu_capacity", f"{cluster.capacity}\n")
            _write(core / "online", "1\n", 0o644)
            midr = 0x41 << 24 | cluster.variant << 20 | 0xF << 16 | cluster.part << 4 | cluster.revision
            _write(core / "regs" / "identification" / "midr_el1", f"0x{midr:016x}\n")
            (core / "cpufreq").symlink_to(f"../cpufreq/policy{cluster.cpus[0]}")
    for index, zone in enumerate(profile.thermal_zones):
        zone_dir = root / "sys" / "class" / "thermal" / f"thermal_zone{index}"
        _write(zone_dir / "type", f"{zone.type}\n")
        _write(zone_dir / "temp", f"{zone.millicelsius}\n")
    for path in (root / "sys").rglob("*"):
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)


def build_rootfs(root: Path, profile: Profile, arm64: Arm64Cpu | None = None,
                 cpu_overrides: Mapping[str, str] | None = None) -> Rootfs:
    """Create the rootfs of one phone under `root` (which must not exist yet) and return it.

    Owners and modes follow a production phone where it matters to the shell user: /data is 0771
    root, /data/local/tmp 0771 shell, sysfs and /system root-owned. /system/bin/sh is mksh and the other
    commands are toybox's, as on Android (dash and the host's coreutils where Debian's packages are missing).
    An arm64 phone's /proc/cpuinfo is the one QEMU emulates for its CPU, and its properties say it is an
    emulator (`ro.boot.qemu=1`, as the Android Emulator's, with the AVD name naming QEMU's CPU, and the CPU of every
    binary `cpu_overrides` runs elsewhere: `sme2_phone (qemu-aarch64 11.1.3 -cpu max; sme2_runner_nosme on -cpu
    max,sme=off)`).
    """
    root.mkdir(parents=True)
    root.chmod(0o755)
    _mkdir(root / "data", 0o771)
    _mkdir(root / "data" / "local", 0o751)
    _mkdir(root / "data" / "local" / "tmp", 0o771, SHELL_UID)
    _mkdir(root / "sdcard", 0o775, SHELL_UID)
    _mkdir(root / "emulated", 0o775, SHELL_UID)

    bin_dir = root / "system" / "bin"
    _mkdir(bin_dir)
    for name in SHIM_NAMES:
        shutil.copyfile(SHIMS / name, bin_dir / name)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "sh").symlink_to(MKSH if Path(MKSH).is_file() else "/bin/sh")
    for applet in toybox_applets():
        if applet not in (*SHIM_NAMES, *NOT_TOYBOX):
            (bin_dir / applet).symlink_to(TOYBOX)
    etc = root / "system" / "etc" / "emulated"
    _mkdir(root / "system" / "etc")
    _mkdir(etc)
    props = dict(profile.props)
    if arm64 is not None:
        elsewhere = "".join(f"; {name} on -cpu {cpu}" for name, cpu in sorted((cpu_overrides or {}).items()))
        props.update({"ro.boot.qemu": "1", "ro.boot.qemu.avd_name": f"{profile.name} ({arm64.describe()}{elsewhere})"})
    _write(etc / "props", "".join(f"[{key}]: [{value}]\n" for key, value in sorted(props.items())))
    _write(etc / "online_mask", f"{profile.online_mask}\n")
    # bionic knows Android's ids (AID_SHELL = 2000 "shell") without /etc/passwd; glibc's toybox asks /etc/passwd and
    # /etc/group, so the sandbox binds these copies of the host's, with the ids the phone's shell user needs.
    for name, line in (("passwd", f"shell:x:{SHELL_UID}:{SHELL_UID}:shell:/:/system/bin/sh\n"),
                       ("group", f"shell:x:{SHELL_UID}:\n")):
        host = Path("/etc") / name
        _write(etc / name, (host.read_text() if host.is_file() else "") + line)
    _write(
        etc / "temperatures",
        "".join(f"{z.millicelsius / 1000:.1f} {z.hal_type} {z.hal_name}\n" for z in profile.thermal_zones),
    )
    _write(etc / "battery", "".join(f"{k}: {v}\n" for k, v in profile.battery.items()))

    _write(root / "proc" / "cpuinfo", arm64.cpuinfo(profile.cpu_count) if arm64 else _cpuinfo(profile))
    (root / "proc").chmod(0o755)
    _build_sys(root, profile)

    rootfs = Rootfs(root, profile)
    rootfs.write_thermal_status(0)
    _write(rootfs.state / "thermal_override", "", 0o664, SHELL_UID)
    _write(rootfs.logcat_buffer, "", 0o664, SHELL_UID)
    return rootfs
