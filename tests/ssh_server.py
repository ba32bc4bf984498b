"""A real ssh host on loopback whose aarch64 programs run under QEMU: the emulated Arm host of ``--sme2-device=ssh``.

Debian's OpenSSH server (``/usr/sbin/sshd``), started by the test with its own config, host key, authorized_keys,
known_hosts and client config in a temp directory, listening on 127.0.0.1 only. It runs in a mount namespace of its own
with a tmpfs on ``/run`` (its privilege-separation directory ``/run/sshd`` is made there): nothing of the machine's
ssh setup is read or changed. Every command a client sends runs through ``ForceCommand`` in a user namespace of its
own (``emulated_device/userns.py`` + bwrap, as the arm64 emulated phone's), where a private ``binfmt_misc`` instance
registers ``qemu-aarch64`` for aarch64 ELF files: the runner pytest-sme2 pushes is executed by the kernel as on an
aarch64 host, with ``QEMU_CPU`` (``max``: SME2) and the arm64 cross sysroot's loader and libc. The host's
``binfmt_misc`` is never touched. ``uname -m`` says ``aarch64`` (a shim: the machine this host pretends to be);
everything else is the real machine's (its CPU count, tools, file system), and the CPU facts pytest-sme2 reads come
from the runner's own ``--probe`` under QEMU. Needs root (a user namespace with the full id map, as the emulated
phone), bwrap, Linux >= 6.7.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from emulated_device.arm64 import KERNEL_SETUP, USERNS_LAUNCHER, binfmt_registration

SSHD = "/usr/sbin/sshd"
#: Where the arm64 cross toolchain's loader and libc are (QEMU_LD_PREFIX), Debian's g++-aarch64-linux-gnu.
LD_PREFIX = "/usr/aarch64-linux-gnu"


class SshUnavailable(RuntimeError):
    """This machine cannot run the local ssh host (the message says what is missing)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sme2-test", "-f", str(path)], check=True,
                   capture_output=True, timeout=30)
    return path.with_suffix(".pub").read_text().strip()


@dataclass
class LocalSshHost:
    """One running sshd; ``address`` (``root@127.0.0.1:PORT``) and ``client_config`` are what a test passes."""

    root: Path
    port: int
    process: subprocess.Popen[bytes]
    home: Path
    user: str

    @property
    def address(self) -> str:
        return f"{self.user}@127.0.0.1:{self.port}"

    @property
    def client_config(self) -> Path:
        return self.root / "ssh_config"

    @property
    def log(self) -> Path:
        return self.root / "sshd.log"

    @property
    def commands(self) -> list[str]:
        """Every command a client ran on this host, in order (the ForceCommand wrapper logs them)."""
        path = self.root / "commands.log"
        return path.read_text().split("\0")[:-1] if path.is_file() else []

    def config_with_key(self, key: Path) -> Path:
        """A client config like :attr:`client_config` but offering ``key`` (a key the host does not know)."""
        path = self.root / f"ssh_config_{key.name}"
        path.write_text(self.client_config.read_text().replace(str(self.root / "client_key"), str(key)))
        return path

    def stop(self) -> None:
        """Stop the connections' sshd processes (each in a session of its own), then the listener."""
        for pid in _children(self.process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def shims_path(root: Path) -> Path:
    """The directory first on the host's PATH."""
    return root / "bin"


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def start_ssh_host(root: Path, *, qemu: Path, cpu: str = "max", ld_prefix: str = LD_PREFIX,
                   pretend_aarch64: bool = True, shims: Mapping[str, str] | None = None) -> LocalSshHost:
    """Start sshd on a free loopback port with everything under ``root``; raises SshUnavailable with the reason.

    ``pretend_aarch64=False``: ``uname -m`` tells the truth (``x86_64``), a host no runner of ours is for.
    ``shims``: {command: shell script} put first on the host's PATH (a fault of the test's own)."""
    if os.geteuid() != 0:
        raise SshUnavailable("the local ssh host runs its commands in a user namespace with the full id map: run as "
                             "root (as CI does)")
    missing = [t for t in (SSHD, shutil.which("bwrap"), shutil.which("unshare"), shutil.which("ssh-keygen"))
               if not t or not Path(t).exists()]
    if missing or not Path(SSHD).exists():
        raise SshUnavailable("no OpenSSH server or bwrap: apt-get install openssh-server bubblewrap")
    root.mkdir(parents=True, exist_ok=True)
    home, shims_dir = root / "home", shims_path(root)
    home.mkdir()
    shims_dir.mkdir()
    host_key = _keygen(root / "host_key")
    client_key = _keygen(root / "client_key")
    (root / "authorized_keys").write_text(client_key + "\n")
    port = free_port()
    (root / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key}\n")
    # The machine this host pretends to be: an aarch64 Linux host (its aarch64 programs run under QEMU).
    if pretend_aarch64:
        uname = shims_dir / "uname"
        uname.write_text("#!/bin/sh\n/usr/bin/uname \"$@\" | sed 's/x86_64/aarch64/g'\n")
        uname.chmod(0o755)
    for name, script in (shims or {}).items():
        (shims_dir / name).write_text(script)
        (shims_dir / name).chmod(0o755)
    wrapper = root / "force_command.sh"
    bwrap = shutil.which("bwrap")
    kernel = [sys.executable, str(USERNS_LAUNCHER), str(bwrap), "--dev-bind", "/", "/", "--proc", "/proc",
              "--unshare-pid", "--die-with-parent", "--cap-add", "CAP_SYS_ADMIN", "--", "/bin/sh", "-c", KERNEL_SETUP,
              "aarch64-host-kernel", binfmt_registration(qemu), "/bin/sh", "-c"]
    wrapper.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\0' \"$SSH_ORIGINAL_COMMAND\" >> {shlex.quote(str(root / 'commands.log'))}\n"
        f"export HOME={shlex.quote(str(home))} PATH={shlex.quote(str(shims_dir))}:/usr/sbin:/usr/bin:/sbin:/bin "
        f"QEMU_CPU={shlex.quote(cpu)} QEMU_LD_PREFIX={shlex.quote(ld_prefix)}\n"
        "cd \"$HOME\" || exit 1\n"
        f"exec {shlex.join(kernel)} \"$SSH_ORIGINAL_COMMAND\"\n")
    wrapper.chmod(0o755)
    (root / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host_key'}\nPidFile {root / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {root / 'authorized_keys'}\nStrictModes no\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nPermitRootLogin prohibit-password\nPrintMotd no\n"
        f"ForceCommand {wrapper}\nLogLevel VERBOSE\nMaxSessions 50\nMaxStartups 50\n")
    (root / "ssh_config").write_text(
        f"Host *\n  IdentityFile {root / 'client_key'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {root / 'known_hosts'}\n  GlobalKnownHostsFile /dev/null\n"
        "  StrictHostKeyChecking yes\n")
    # A mount namespace of its own with a tmpfs on /run: sshd's /run/sshd exists there only.
    setup = f"mount -t tmpfs tmpfs /run && mkdir -m 0755 /run/sshd && exec {SSHD} -D -e -f {root / 'sshd_config'}"
    log = (root / "sshd.log").open("wb")
    process = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", setup],
                               stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.close()
    host = LocalSshHost(root=root, port=port, process=process, home=home, user="root")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SshUnavailable(f"sshd exited ({process.returncode}): {(root / 'sshd.log').read_text()[-800:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return host
        time.sleep(0.1)
    host.stop()
    said = (root / "sshd.log").read_text()[-800:]
    raise SshUnavailable(f"sshd did not listen on 127.0.0.1:{port} within 20 s: {said}")
