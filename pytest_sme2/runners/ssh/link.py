"""The connection to an ssh host: ``[user@]host[:port]`` (:class:`SshHost`), commands over the system's ``ssh``
sharing one master connection (:class:`SshLink`), and ssh's failures told with their fix (:func:`connection_error`).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pytest_sme2.errors import ConfigError, DeviceError, RunnerError, tail

#: ssh's own exit status when the connection (not the remote command) failed.
SSH_FAILED = 255
#: Seconds for a short command (facts, checks, clean-up) over the connection.
SHORT_S = 60.0
_HOST = re.compile(r"^(?:(?P<user>[^@\s:/]+)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^@\s:/\[\]]+)(?::(?P<port>\d{1,5}))?$")


@dataclass(frozen=True)
class SshHost:
    """``[user@]host[:port]`` as ssh takes it (the host may be a ``Host`` alias of the user's ssh config)."""

    host: str
    user: str = ""
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> SshHost:
        m = _HOST.match(text.strip())
        port = int(m.group("port")) if m and m.group("port") else None
        if m is None or (port is not None and not 0 < port < 65536):
            raise ConfigError(f"--sme2-ssh-host {text!r} is not an ssh host: use user@host, user@host:port, host or a "
                              "Host of your ssh config (IPv6: user@[::1]:2222)")
        return cls(host=m.group("host").strip("[]"), user=m.group("user") or "", port=port)

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user + '@' if self.user else ''}{host}{f':{self.port}' if self.port else ''}"


# ------------------------------------------------------------------------------------------------ the connection


class SshLink:
    """Commands on one host over the system's ``ssh``, sharing one master connection (``ControlMaster``).

    Never asks for a password or a host key (``BatchMode``): a host that needs either fails at once with the fix.
    """

    def __init__(self, host: SshHost, *, config: Path | None = None, ssh: str = "ssh",
                 connect_timeout_s: float = 15.0) -> None:
        self.host = host
        self.config = config
        self.ssh = shutil.which(ssh) or ssh
        self.connect_timeout_s = connect_timeout_s
        # A short directory: the control socket's path must fit a sockaddr_un (~104 bytes).
        self._control_dir = tempfile.mkdtemp(prefix="sme2-ssh-")
        self._master = False
        self._finalizer = weakref.finalize(self, _close_master, self._base(), self._control_dir)

    def _base(self) -> list[str]:
        argv = [self.ssh, "-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout_s:g}",
                "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4", "-o", "LogLevel=ERROR",
                "-o", f"ControlPath={self._control_dir}/%C"]
        if self.config is not None:
            argv += ["-F", str(self.config)]
        if self.host.port is not None:
            argv += ["-p", str(self.host.port)]
        return argv

    def argv(self, command: str) -> list[str]:
        """The local command line that runs ``command`` (a shell command line) on the host."""
        self.connect()
        return [*self._base(), "-o", "ControlMaster=auto", "--", self.host.destination, command]

    def connect(self) -> None:
        """Start the session's master connection (once): the first contact, where reachability and keys are told."""
        if self._master:
            return
        # -f: ssh goes to the background once authenticated; its stderr is a file, not a pipe that would stay open.
        with tempfile.TemporaryFile() as err:
            cmd = [*self._base(), "-f", "-N", "-o", "ControlMaster=yes", "-o", "ControlPersist=300", "--",
                   self.host.destination]
            try:
                proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                      timeout=self.connect_timeout_s * 4 + 30, check=False)
            except FileNotFoundError:
                raise ConfigError(f"no ssh client ({self.ssh}) to reach {self.host}: install OpenSSH's client "
                                  "(Debian/Ubuntu: apt-get install openssh-client)") from None
            except subprocess.TimeoutExpired:
                raise DeviceError(f"ssh host {self.host} did not answer within {self.connect_timeout_s * 4 + 30:g} s; "
                                  f"{unreachable_fix(self.host)}") from None
            err.seek(0)
            stderr = err.read().decode("utf-8", errors="replace")
        if proc.returncode != 0:
            raise connection_error(self.host, stderr, "connecting")
        self._master = True

    def run(self, command: str, *, what: str, timeout: float = SHORT_S, feed: Callable[[IO[bytes]], None] | None = None,
            check: bool = True) -> subprocess.CompletedProcess[bytes]:
        """Run ``command`` on the host (``feed`` writes its stdin, streamed: a large file is never held in memory); a
        broken connection (ssh's 255) is a DeviceError, a failed command (with ``check``) a RunnerError naming
        ``what``."""
        argv = self.argv(command)
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE if feed else subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        try:
            if feed is not None and proc.stdin is not None:
                # BrokenPipeError: the command ended early; its exit and stderr say why. communicate() closes stdin.
                with contextlib.suppress(BrokenPipeError):
                    feed(proc.stdin)
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise DeviceError(f"ssh host {self.host} did not finish {what} within {timeout:g} s; check that it is "
                              f"responsive (ssh {self.host.destination} true)") from None
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
        if proc.returncode == SSH_FAILED:
            raise connection_error(self.host, stderr.decode("utf-8", errors="replace"), what)
        if check and proc.returncode != 0:
            raise RunnerError(f"{what} on ssh host {self.host} failed", command=command, returncode=proc.returncode,
                              stderr_tail=tail(stderr or stdout))
        return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)

    def close(self) -> None:
        self._finalizer()


def _close_master(base: list[str], control_dir: str) -> None:
    """Stop the master connection (``ssh -O exit``) and remove its socket's directory."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run([*base, "-O", "exit", "unused"], stdin=subprocess.DEVNULL, capture_output=True, timeout=10,
                       check=False)
    shutil.rmtree(control_dir, ignore_errors=True)


def unreachable_fix(host: SshHost) -> str:
    port = f" -p {host.port}" if host.port else ""
    return (f"check the host name and port, that sshd runs there and that this machine can reach it "
            f"(`ssh{port} {host.destination} true`), then rerun")


def connection_error(host: SshHost, stderr: str, what: str) -> DeviceError:
    """ssh's own failure, named by what it says: unreachable, refused key, unknown host key, or the link dropped."""
    said = " ".join(stderr.strip().split())[-400:] or "(ssh printed nothing)"
    port = f" -p {host.port}" if host.port else ""
    if "Permission denied" in stderr or "Too many authentication failures" in stderr:
        fix = (f"the host refused this machine's keys: add your public key to ~/.ssh/authorized_keys on {host.host} "
               f"(ssh-copy-id{port} {host.destination}), or name the key with IdentityFile for this Host in your ssh "
               "config (or in the file given with --sme2-ssh-config); password logins are not used (BatchMode)")
    elif "Host key verification failed" in stderr or "REMOTE HOST IDENTIFICATION HAS CHANGED" in stderr:
        fix = (f"its host key is not in your known_hosts (or changed): connect once by hand (ssh{port} "
               f"{host.destination}), check and accept the key, then rerun")
    elif re.search(r"Could not resolve hostname|Name or service not known", stderr):
        fix = f"the name does not resolve: check --sme2-ssh-host (or the Host entry of your ssh config); " \
              f"{unreachable_fix(host)}"
    elif re.search(r"Connection refused|timed out|No route to host|Network is unreachable|Connection closed|"
                   r"Connection reset|Broken pipe|kex_exchange_identification|not responding", stderr):
        fix = f"the host is unreachable or dropped the connection: {unreachable_fix(host)}"
    else:
        fix = unreachable_fix(host)
    return DeviceError(f"ssh host {host}: {what} failed: {said}. Fix: {fix}")


def config_path(value: str | Path | None) -> Path | None:
    """``--sme2-ssh-config`` as a path (None: ssh's own config). A pool entry carries it as text (entries are JSON
    between the xdist controller and its workers)."""
    return Path(value) if value else None

