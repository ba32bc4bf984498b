"""What makes an emulated phone an arm64 device: its aarch64 code runs under QEMU user mode, its CPU is QEMU's.

- **Execution.** Each shell command of an arm64 phone runs in a user namespace of its own (made by ``userns.py``
  with the full uid/gid map, so uid 2000 stays uid 2000), where the sandbox mounts a private ``binfmt_misc``
  instance (Linux 6.7+) and registers ``qemu-aarch64`` for aarch64 ELF files with the ``F`` flag (the kernel
  opens the interpreter at registration). A pushed aarch64 binary is then executed by the kernel like on a
  phone: the plugin's device commands are exactly what it sends to a real phone, and the host's own
  ``binfmt_misc`` is never touched (a global registration would change what every aarch64 ELF on the machine
  does, e.g. turn "Exec format error" into a QEMU error for other tests).
- **CPU.** QEMU reads ``QEMU_CPU`` (the profile's CPU: ``max`` has SME2, ``max,sme=off`` has not) and
  ``QEMU_LD_PREFIX`` (where the glibc loader and libc come from: the arm64 cross sysroot) from the environment
  of the phone's shell. A phone runs glibc here, not bionic: see README.md.
- **/proc/cpuinfo.** What the runner's ``--probe`` prints of QEMU's emulated ``/proc/cpuinfo`` under that CPU,
  one block per CPU of the profile: the plugin's SME2 detection and identity read what QEMU reports, and the
  x86 tools of the phone (``cat``) read the same text the aarch64 process sees.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: The user-namespace launcher every command of an arm64 phone starts under (standard library only).
USERNS_LAUNCHER = Path(__file__).with_name("userns.py")
#: aarch64 ELF executables and shared objects (ET_EXEC, ET_DYN), as Debian's qemu-user-binfmt matches them.
_MAGIC = r"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"
_MASK = r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff"
#: Runs as root inside the sandbox's user namespace before the shell user's command: the phone's "kernel" part.
KERNEL_SETUP = (
    "/usr/bin/mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc && "
    "printf '%s' \"$1\" > /proc/sys/fs/binfmt_misc/register && shift && exec \"$@\""
)
_PROBE = re.compile(r"sme2_runner probe: arch=(\S+) hwcap=0x([0-9a-f]+) hwcap2=0x([0-9a-f]+)")
_VERSION = re.compile(r"version (\d+\.\d+(?:\.\d+)?)")


def binfmt_registration(qemu: Path) -> str:
    """The ``binfmt_misc`` register line for ``qemu`` (``F``: opened now, so the sandbox need not see its path)."""
    return f":qemu-aarch64:M::{_MAGIC}:{_MASK}:{qemu}:F"


@dataclass(frozen=True)
class Arm64Cpu:
    """The CPU an arm64 phone executes aarch64 code on: ``qemu -cpu cpu``, its loader and libc from ``ld_prefix``."""

    qemu: Path
    qemu_version: str
    cpu: str
    ld_prefix: str
    #: /proc/cpuinfo as QEMU emulates it under ``cpu`` (as the runner's --probe printed it)
    qemu_cpuinfo: str
    hwcap2: int

    @property
    def env(self) -> dict[str, str]:
        """What the phone's shell environment carries for QEMU (inherited by every process it starts)."""
        return {"QEMU_CPU": self.cpu, "QEMU_LD_PREFIX": self.ld_prefix}

    def with_cpu(self, cpu: str, probe: Arm64Cpu) -> Arm64Cpu:
        """This emulator with another CPU (``probe`` is that CPU's own probe)."""
        return Arm64Cpu(self.qemu, self.qemu_version, cpu, self.ld_prefix, probe.qemu_cpuinfo, probe.hwcap2)

    def describe(self) -> str:
        return f"qemu-aarch64 {self.qemu_version} -cpu {self.cpu}"

    def cpuinfo(self, cpu_count: int) -> str:
        """``/proc/cpuinfo`` of a phone with ``cpu_count`` CPUs of this kind: QEMU's first block, renumbered.

        QEMU prints one block per host CPU; the phone has the profile's CPU count (its sysfs topology), so the
        block is repeated with the phone's processor numbers and nothing else changed.
        """
        blocks = [b for b in re.split(r"\n\s*\n", self.qemu_cpuinfo.strip()) if b.startswith("processor")]
        if not blocks:
            raise ValueError(f"no processor block in QEMU's /proc/cpuinfo for -cpu {self.cpu}: {self.qemu_cpuinfo!r}")
        body = blocks[0].split("\n", 1)[1]
        return "".join(f"processor\t: {n}\n{body}\n\n" for n in range(cpu_count))


def qemu_version(qemu: Path) -> str:
    out = subprocess.run([str(qemu), "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    m = _VERSION.search(out)
    if m is None:
        raise ValueError(f"{qemu} --version printed no version: {out[:80]!r}")
    return m.group(1)


def probe_cpu(qemu: Path, runner: Path, cpu: str, ld_prefix: str) -> Arm64Cpu:
    """Run ``runner --probe`` under ``qemu -cpu cpu`` on the host: the hwcaps and ``/proc/cpuinfo`` QEMU emulates."""
    cmd = [str(qemu), "-cpu", cpu, "-L", ld_prefix, str(runner), "--probe"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    m = _PROBE.search(proc.stdout)
    if proc.returncode != 0 or m is None or m.group(1) != "aarch64":
        raise RuntimeError(f"{' '.join(cmd)} failed (rc {proc.returncode}): {(proc.stderr or proc.stdout)[-800:]}")
    cpuinfo = proc.stdout.split("sme2_runner cpuinfo-begin\n", 1)[1].split("sme2_runner cpuinfo-end", 1)[0]
    return Arm64Cpu(qemu, qemu_version(qemu), cpu, ld_prefix, cpuinfo, int(m.group(3), 16))
