"""Run device shell commands in a bubblewrap sandbox that looks like Android to the shell user.

Each command gets fresh pid/ipc/uts namespaces, host /usr and /etc read-only, a fresh /proc and /dev,
a private /tmp, the rootfs parts at their Android paths, and runs as uid/gid 2000 via `setpriv`.
Python stand-ins pushed to the device need the venv, the real interpreter prefix behind the venv's
`python` symlink, the repo's tests/ directory and the package under test (the stand-in reads traces
with it): those are bound read-only at their host paths.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .arm64 import KERNEL_SETUP, USERNS_LAUNCHER, Arm64Cpu, binfmt_registration
from .rootfs import MOUNTS, SHELL_UID

DEVICE_PATH = "/system/bin:/usr/bin:/bin"
TESTS_DIR = Path(__file__).resolve().parent.parent
# The runner stand-in reads recorded traces with the package under test (an editable install, so it
# is not inside the venv): the package directory must be visible on the device at its host path.
PACKAGE_DIR = TESTS_DIR.parent / "pytest_sme2"
_HOST_RO = ("/usr", "/etc")
# Merged-/usr hosts have these as symlinks into /usr; older layouts have real directories.
_HOST_TOP = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# A phone's adb shell environment, minus what only matters to Android's runtime.
DEVICE_ENV = {
    "PATH": DEVICE_PATH,
    "HOME": "/",
    "USER": "shell",
    "LOGNAME": "shell",
    "SHELL": "/system/bin/sh",
    "HOSTNAME": "localhost",
    "TMPDIR": "/data/local/tmp",
    "ANDROID_DATA": "/data",
    "ANDROID_ROOT": "/system",
    "EXTERNAL_STORAGE": "/sdcard",
}


class SandboxUnavailable(RuntimeError):
    """bubblewrap (or setpriv, or the privileges to drop to uid 2000) is missing here."""


def default_ro_binds() -> tuple[Path, ...]:
    """Host trees a Python runner stand-in needs inside the sandbox, at the same paths."""
    candidates = [
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(os.path.realpath(sys.base_prefix)),
        Path(os.path.realpath(sys.executable)).parent.parent,
        TESTS_DIR,
        PACKAGE_DIR,
    ]
    return tuple(dict.fromkeys(candidates))


@dataclass(frozen=True)
class Sandbox:
    """How to turn one device command into a bwrap invocation for a given rootfs."""

    rootfs: Path
    ro_binds: tuple[Path, ...] = ()
    bwrap: str = "bwrap"
    setpriv: str = "/usr/bin/setpriv"
    #: an arm64 phone: aarch64 ELF files run under this QEMU CPU (a private binfmt_misc in its own user namespace)
    arm64: Arm64Cpu | None = None

    def argv(self, command: str) -> list[str]:
        """The full argv running `command` with /system/bin/sh -c inside the sandbox."""
        args = [
            self.bwrap,
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--hostname",
            "localhost",
            "--die-with-parent",
        ]
        for top in _HOST_RO:
            args += ["--ro-bind", top, top]
        for name in _HOST_TOP:
            host = Path("/") / name
            if host.is_symlink():
                args += ["--symlink", str(host.readlink()), str(host)]
            elif host.is_dir():
                args += ["--ro-bind", str(host), str(host)]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        made: set[str] = {"/", "/proc", "/dev", "/tmp", *_HOST_RO}
        for mount in MOUNTS:
            args += _parents(mount.device_path, made)
            flag = "--bind" if mount.writable else "--ro-bind"
            args += [flag, str(self.rootfs / mount.rootfs_path), mount.device_path]
            made.add(mount.device_path)
        for name in ("passwd", "group"):
            args += ["--ro-bind", str(self.rootfs / "system" / "etc" / "emulated" / name), f"/etc/{name}"]
        for path in sorted(self._extra_binds(), key=lambda p: len(p.parts)):
            args += _parents(str(path), made)
            args += ["--ro-bind", str(path), str(path)]
            made.add(str(path))
        if self.arm64 is not None:
            # Root of the sandbox's own user namespace may mount its binfmt_misc; setpriv then drops every
            # capability with the switch to uid 2000.
            args += ["--cap-add", "CAP_SYS_ADMIN"]
        args += ["--chdir", "/", "--"]
        if self.arm64 is not None:
            args += ["/bin/sh", "-c", KERNEL_SETUP, "arm64-kernel", binfmt_registration(self.arm64.qemu)]
        uid = str(SHELL_UID)
        args += [self.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        args += ["/system/bin/sh", "-c", command]
        if self.arm64 is not None:
            return [sys.executable, str(USERNS_LAUNCHER), *args]
        return args

    def env(self, cpu: str | None = None, qemu_env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The shell environment of the phone; an arm64 phone's tells QEMU its CPU (``cpu`` overrides it) and,
        with ``qemu_env``, more of QEMU's settings (``QEMU_LOG``/``QEMU_LOG_FILENAME``: its in_asm log)."""
        if self.arm64 is None:
            return dict(DEVICE_ENV)
        return {**DEVICE_ENV, **self.arm64.env, **({"QEMU_CPU": cpu} if cpu else {}), **(qemu_env or {})}

    def _extra_binds(self) -> Iterable[Path]:
        # Skip trees already visible through /usr or /etc, and nested duplicates.
        kept: list[Path] = []
        for path in sorted(self.ro_binds, key=lambda p: len(p.parts)):
            covered = any(path.is_relative_to(top) for top in _HOST_RO) or any(path.is_relative_to(k) for k in kept)
            if path.is_dir() and not covered:
                kept.append(path)
        return kept

    def spawn(self, command: str, merge_stderr: bool, cpu: str | None = None,
              qemu_env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start `command`; the caller's thread must also wait for it (`--die-with-parent`)."""
        return subprocess.Popen(
            self.argv(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            env=self.env(cpu, qemu_env),
            start_new_session=True,  # its own process group, so a closed stream can kill it all
            close_fds=True,
        )


def _parents(device_path: str, made: set[str]) -> list[str]:
    """`--dir` for each missing parent, 0755: bwrap would make them 0700 root, untraversable by uid 2000."""
    args: list[str] = []
    for parent in reversed(PurePosixPath(device_path).parents):
        text = str(parent)
        if text not in made:
            args += ["--perms", "0755", "--dir", text]
            made.add(text)
    return args


def find_bwrap() -> str:
    """Path of the bwrap binary, or SandboxUnavailable saying how to get it."""
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable("bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)")
    return path


def probe(sandbox: Sandbox, timeout: float = 20.0) -> None:
    """Run `id -u` in the sandbox; SandboxUnavailable with bwrap's own words if it is not 2000."""
    if os.geteuid() != 0:
        raise SandboxUnavailable(
            "the emulated device needs root to give /data/local/tmp to uid 2000 and drop to it "
            f"(running as uid {os.geteuid()})"
        )
    if not Path(sandbox.setpriv).exists():
        raise SandboxUnavailable(f"{sandbox.setpriv} is missing (Debian: util-linux)")
    try:
        done = subprocess.run(sandbox.argv("id -u"), capture_output=True, env=sandbox.env(), timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"bwrap did not run: {exc}") from exc
    if done.returncode != 0 or done.stdout.strip() != str(SHELL_UID).encode():
        stderr = done.stderr.decode(errors="replace").strip()
        if sandbox.arm64 is not None:
            raise SandboxUnavailable(
                f"the arm64 phone's sandbox did not start (rc {done.returncode}: {stderr or done.stdout!r}): it needs "
                "a private binfmt_misc in a user namespace (Linux 6.7 or newer, user namespaces enabled, root)")
        raise SandboxUnavailable(f"bwrap probe failed (rc {done.returncode}): {stderr or done.stdout!r}")


def run(sandbox: Sandbox, command: str, timeout: float = 20.0) -> subprocess.CompletedProcess[bytes]:
    """Run one command to completion (for tests of the sandbox itself)."""
    return subprocess.run(sandbox.argv(command), capture_output=True, env=sandbox.env(), timeout=timeout, check=False)
