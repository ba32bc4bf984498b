"""An Arm Linux host (or a Mac) over ssh: pytest-sme2's runner pushed once per content, run pinned, its trace pulled.

``--sme2-device=ssh --sme2-ssh-host user@host[:port]`` (or a ``Host`` of the user's ssh config: its ``IdentityFile``,
``ProxyJump``, ``Port`` ... apply; ``--sme2-ssh-config FILE`` is ``ssh -F FILE``). The system's OpenSSH client does the
work, not a Python ssh library: it already reads the user's config, agent, keys and known hosts, which is where a lab's
access rules live, and its ``ControlMaster`` gives one authenticated connection for the whole session (each command
after the first costs a channel, not a handshake).

One run: the runner (and its ``lib/`` of shared libraries, the executorch wheel's) and the ``.pte`` and inputs are made
present on the host by content — a *bundle* per content lives at ``<home>/.cache/pytest-sme2/ssh/<sha256[:16]>/``,
written to a private ``.part`` directory by one tar stream, checked with the host's own ``sha256sum``, marked complete
and renamed into place, so concurrent sessions never see half a runner and a second session pushes nothing — then
``timeout ... taskset -c <fastest cluster> <runner> ... </dev/null`` in a fresh run directory, the trace (and outputs)
pulled back by one tar stream, the run directory removed. The trace is read as every other
(:func:`~pytest_sme2.runners.executor_runner.result_from_trace`).

The device's identity is the host's own facts: ``uname``, the CPU count and cpufreq table, and the runner's
``--probe`` (``AT_HWCAP``/``AT_HWCAP2`` and ``/proc/cpuinfo`` as the runner process sees them) on Linux; ``sysctl hw``
(``hw.optional.arm.FEAT_SME2``) on macOS. A CPU whose ``CPU implementer`` is ``0x00`` ("reserved for software use",
which QEMU's ``-cpu max`` reports) is an emulated one: its time is emulated time, labelled so everywhere.

Which runner: pytest-sme2's own, cross-built for ``linux-aarch64`` from the aarch64 executorch wheel, for an aarch64
Linux host; for a Mac, ``--sme2-runner`` a runner built on a Mac (``pytest-sme2 build-runner``: the macOS arm64 wheel
ships the C++ SDK, ``include/`` and ``lib/*.dylib``), pushed with the ``lib/`` beside it. Any other OS or architecture
is refused, naming the host and what it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from shlex import quote
from typing import IO, TYPE_CHECKING, Any

from pytest_sme2.device.facts import (
    DeviceInfo,
    clusters_from_max_freq,
    cpuinfo_parts,
    darwin_identity,
    facts_sections,
    fastest_cpus,
    has_sme2,
    linux_identity,
    parse_cpu_table,
    parse_sysctl,
)
from pytest_sme2.errors import ConfigError, DeviceError, RunnerError, Sme2Error, tail
from pytest_sme2.evidence.memory import PEAK_SOURCE, PeakSource
from pytest_sme2.program.export import load_pte_check
from pytest_sme2.runners.base import MODE_TIMING, MODE_TRACE, BinaryBuilds, RunRequest, RunResult, check_threads
from pytest_sme2.runners.executor_runner import (
    BUILD_HINT,
    DEFAULT_TRACE_NAME,
    FinishedRun,
    new_run_dir,
    outputs_path,
    result_from_log,
    result_from_trace,
)
from pytest_sme2.runners.pool import Discovery, LeftOut, PoolEntry
from pytest_sme2.runners.process import kill_group, wait_with_rusage
from pytest_sme2.runners.qemu import CpuProbe, parse_probe
from pytest_sme2.store.files import file_sha256

if TYPE_CHECKING:
    from pytest_sme2.options import Sme2Options
    from pytest_sme2.runners.registry import RunnerContext

#: Where bundles live on the host, under the login's home.
REMOTE_DIR = ".cache/pytest-sme2/ssh"
#: The manifest a bundle carries (``sha256sum -c`` format), checked on the host before the bundle is put in place.
MANIFEST = ".sha256sums"
#: The marker a complete bundle holds: its digest.
COMPLETE = ".complete"
#: Exit status of ``timeout`` when it had to stop the runner (coreutils).
TIMEOUT_EXIT = 124
#: ssh's own exit status when the connection (not the remote command) failed.
SSH_FAILED = 255
#: Seconds for a short command (facts, checks, clean-up) over the connection.
SHORT_S = 60.0
#: ``CPU implementer : 0x00``: "reserved for software use" (Arm ARM, MIDR_EL1), what QEMU's ``-cpu max`` reports.
_SOFTWARE_IMPLEMENTER = re.compile(r"^CPU implementer\s*:\s*0x0+\s*$", re.M)
_HOST = re.compile(r"^(?:(?P<user>[^@\s:/]+)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^@\s:/\[\]]+)(?::(?P<port>\d{1,5}))?$")

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


# ------------------------------------------------------------------------------------------------ bundles


@dataclass(frozen=True)
class Bundle:
    """Files that live in one directory on the host, named by the digest of their names and contents."""

    files: Mapping[str, Path]

    @property
    def hashes(self) -> dict[str, str]:
        return {name: file_sha256(path) for name, path in sorted(self.files.items())}

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.hashes, sort_keys=True).encode()).hexdigest()


def bundle_dir(root: str, bundle: Bundle) -> str:
    return f"{root}/{bundle.digest[:16]}"


def deploy(link: SshLink, bundles: Sequence[Bundle], *, root: str, darwin: bool, run_id: str) -> list[str]:
    """Make every bundle present under ``root`` on the host; push only the missing ones. Returns the pushed ones'
    directories."""
    checks = [f"[ \"$(cat {quote(bundle_dir(root, b) + '/' + COMPLETE)} 2>/dev/null)\" = {quote(b.digest)} ] "
              "&& echo present || echo absent" for b in bundles]
    answer = link.run("; ".join(checks), what="checking which files are already there").stdout.decode().split()
    if len(answer) != len(bundles):
        raise DeviceError(f"ssh host {link.host} answered {' '.join(answer)[:200]!r} when asked which files it "
                          "holds; rerun, and report this if it persists")
    missing = [b for b, state in zip(bundles, answer, strict=True) if state != "present"]
    for bundle in missing:
        push(link, bundle, root=root, darwin=darwin, run_id=run_id)
    return [bundle_dir(root, b) for b in missing]


def push(link: SshLink, bundle: Bundle, *, root: str, darwin: bool, run_id: str) -> None:
    """One tar stream into a private directory, checked with the host's sha256 tool, marked, renamed into place."""
    final = bundle_dir(root, bundle)
    part = f"{final}.{run_id}.part"
    manifest = "".join(f"{digest}  {name}\n" for name, digest in bundle.hashes.items()).encode()

    def write(stream: IO[bytes]) -> None:
        with tarfile.open(fileobj=stream, mode="w|", dereference=True) as tar:
            for name, path in sorted(bundle.files.items()):
                try:
                    tar.add(str(path), arcname=name, recursive=False)
                except OSError as exc:
                    raise ConfigError(f"cannot read {path} to push it to ssh host {link.host}: "
                                      f"{exc.strerror}") from None
            info = tarfile.TarInfo(MANIFEST)
            info.size = len(manifest)
            tar.addfile(info, io.BytesIO(manifest))

    check = f"shasum -a 256 -c --status {MANIFEST}" if darwin else f"sha256sum -c --quiet --strict {MANIFEST}"
    # mv -T (GNU) refuses to move into a directory another session completed meanwhile; BSD mv has no -T.
    place = (f"{{ [ -e {quote(final)} ] || mv {quote(part)} {quote(final)}; }}" if darwin
             else f"{{ mv -T {quote(part)} {quote(final)} 2>/dev/null || true; }}")
    command = (f"set -e; mkdir -p {quote(root)}; rm -rf {quote(part)}; mkdir {quote(part)}; "
               f"tar -xf - -C {quote(part)}; cd {quote(part)}; {check}; "
               f"printf '%s' {quote(bundle.digest)} > {COMPLETE}; "
               f"cd ..; {place}; rm -rf {quote(part)}")
    size = sum(p.stat().st_size for p in bundle.files.values())
    try:
        link.run(command, what=f"pushing {', '.join(sorted(bundle.files))[:120]}", feed=write,
                 timeout=SHORT_S + size / 1e6)
    except RunnerError as exc:
        link.run(f"rm -rf {quote(part)}", what="removing a failed push", check=False)
        raise DeviceError(f"pushing {size} bytes to ssh host {link.host} ({final}) failed: the files arrived damaged "
                          f"or could not be written (full disk? check `df -h ~` there). Nothing was left "
                          f"half-written.\n{exc}") from None


# ------------------------------------------------------------------------------------------------ the host


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


class SshRunner(BinaryBuilds):
    """Run ``.pte`` files with one runner binary on an Arm host over ssh (see the module docstring).

    ``runner`` is the binary; ``libs`` the directory of shared libraries it loads from ``lib/`` beside itself
    (pytest-sme2's own runner: the executorch wheel's; default: ``lib/`` beside the runner when there is one).
    ``untraced``: the runner is also its own timing build (pytest-sme2's runner attaches no tracer without
    ``--etdump_path``). ``runtime``: what the libraries are, for the artifact (executorch version, SDK digest).
    """

    name = "ssh"

    def __init__(self, runner: str | Path, *, host: str | SshHost, config: str | Path | None = None,
                 timeout_s: float | None = 600.0, libs: Path | None = None, untraced: bool = False,
                 runtime: Mapping[str, str] | None = None, write_outputs: bool = True, ssh: str = "ssh") -> None:
        binary = Path(runner)
        if not binary.is_file():
            raise ConfigError(f"the runner {binary} does not exist or is not a file; {BUILD_HINT} (or leave "
                              "--sme2-runner out: pytest-sme2 builds its own for linux-aarch64)")
        if timeout_s is not None and timeout_s <= 0:
            raise ConfigError(f"timeout_s must be positive (got {timeout_s}); set --sme2-timeout")
        self.builds = {None: binary}
        self.mode_builds = {MODE_TIMING: {None: binary}} if untraced else {}
        lib_dir = libs if libs is not None else binary.parent / "lib"
        self.libs = tuple(sorted((p for p in lib_dir.iterdir() if p.is_file() and (p.suffix in (".so", ".dylib")
                                                                                    or ".so." in p.name)),
                                 key=lambda p: p.name)) if lib_dir.is_dir() else ()
        self.host = host if isinstance(host, SshHost) else SshHost.parse(host)
        self.link = SshLink(self.host, config=_config(config), ssh=ssh)
        self.timeout_s = timeout_s
        self.runtime = dict(runtime or {})
        self.write_outputs = write_outputs
        self.kind = binary_kind(binary)
        #: seconds ssh may take beyond the host-side ``timeout`` before the run is abandoned here
        self.timeout_grace_s = 30.0
        self._facts: HostFacts | None = None
        self._info: DeviceInfo | None = None

    # ------------------------------------------------------------------------------ the host

    @property
    def facts(self) -> HostFacts:
        """The host's facts (read once), refused when no runner of ours can run there."""
        if self._facts is None:
            facts = HostFacts.parse(self.link.run(FACTS_SCRIPT, what="reading the host's facts").stdout.decode(
                "utf-8", errors="replace"))
            wanted = "darwin-arm64" if facts.darwin and facts.arm64 else "linux-aarch64" \
                if facts.system == "Linux" and facts.arm64 else ""
            if not wanted:
                raise ConfigError(
                    f"ssh host {self.host} is {facts.describe()}: --sme2-device=ssh runs Arm hosts (aarch64 Linux, "
                    "arm64 macOS) and there is no runner for this one; measure this machine kind with "
                    "--sme2-device=host on it")
            if self.kind != wanted:
                fix = ("build pytest-sme2's runner on a Mac with `pytest-sme2 build-runner` (the macOS arm64 "
                       "executorch wheel ships the C++ SDK) and pass it with --sme2-runner (its lib/ is pushed with it)"
                       if wanted == "darwin-arm64" else
                       "leave --sme2-runner out (pytest-sme2 cross-builds its own for linux-aarch64), or pass an "
                       "aarch64 Linux executor_runner")
                raise ConfigError(f"ssh host {self.host} is {facts.describe()}, and the runner {self.runner_for(None)} "
                                  f"is {self.kind}: no runner for that host. To fix it, {fix}")
            missing = {"tar", "shasum" if facts.darwin else "sha256sum"} - facts.tools
            if missing:
                raise ConfigError(f"ssh host {self.host} has no {', '.join(sorted(missing))}, which pushing the runner "
                                  "needs: install it there (coreutils / tar)")
            self._facts = facts
        return self._facts

    @property
    def root(self) -> str:
        return f"{self.facts.home.rstrip('/')}/{REMOTE_DIR}"

    def _runner_bundle(self, binary: Path) -> Bundle:
        return Bundle({binary.name: binary, **{f"lib/{lib.name}": lib for lib in self.libs}})

    def _probe(self) -> tuple[CpuProbe | None, str]:
        """The runner's ``--probe`` on the host (Linux; after pushing it), and the sysctl text (macOS)."""
        facts = self.facts
        if facts.darwin:
            return None, facts.sysctl
        binary = self.runner_for(None)
        bundle = self._runner_bundle(binary)
        deploy(self.link, [bundle], root=self.root, darwin=False, run_id=_run_id())
        remote = f"{bundle_dir(self.root, bundle)}/{binary.name}"
        out = self.link.run(f"{quote(remote)} --probe", what="probing the CPU with the runner", check=False)
        text = out.stdout.decode("utf-8", errors="replace")
        probe = parse_probe(text)
        if out.returncode != 0 or probe is None:
            raise RunnerError(f"the runner's CPU probe ({remote} --probe) failed on ssh host {self.host}"
                              f"{exit_hint(out.returncode, text + out.stderr.decode(errors='replace'))}",
                              command=f"{remote} --probe", returncode=out.returncode,
                              stderr_tail=tail(out.stderr or out.stdout))
        return probe, ""

    def device_info(self) -> DeviceInfo:
        """The host's facts and identity (read once): the runner's probe on Linux, ``sysctl`` on macOS."""
        if self._info is None:
            facts = self.facts
            probe, sysctl = self._probe()
            if probe is None:
                identity = darwin_identity(sysctl, arch=facts.machine, logical_cpus=facts.logical_cpus)
                values = parse_sysctl(sysctl)
                sme2 = values.get("hw.optional.arm.FEAT_SME2") == "1" if values else None
                features = tuple(identity.isa)
                cpu_name = identity.cpu_name
            else:
                identity = replace(linux_identity(probe.cpuinfo, arch=facts.machine, logical_cpus=facts.logical_cpus,
                                                  max_khz=facts.max_khz, capacity=facts.capacity),
                                   emulator=emulated_cpu(probe))
                sme2 = probe.sme2 or has_sme2(probe.features)
                features = tuple(sorted(probe.features))
                cpu_name = identity.cpu_name
            self._info = DeviceInfo(
                kind="ssh", name=str(self.host), arch=facts.machine, cpu_name=cpu_name,
                logical_cpus=facts.logical_cpus, sme2=sme2, features=features,
                cpu_parts=cpuinfo_parts(probe.cpuinfo) if probe else (),
                clusters=clusters_from_max_freq(facts.max_khz, facts.capacity) if facts.max_khz else (),
                os_version=facts.describe(),
                extra={"probe": probe.to_dict()} if probe else {}, device_identity=identity)
        return self._info

    def identity(self) -> Mapping[str, Any]:
        """The host's :class:`~pytest_sme2.device.identity.DeviceIdentity` as a dict (its CPU, not its name)."""
        return self.device_info().identity().to_dict()

    @property
    def emulated(self) -> bool:
        """Whether the host's CPU is emulated (its identity names an emulator): its time is then emulated time."""
        return bool(self.device_info().identity().emulator)

    def build_identity(self, variant: str | None) -> Mapping[str, Any]:
        """What runs the ``.pte``: the runner's sha256 and its shared libraries', and what they are."""
        ident: dict[str, Any] = {"runner": "sme2_runner (over ssh)" if self.runtime else "executor_runner (over ssh)",
                                 **self.builds_identity(variant), **self.runtime}
        if self.libs:
            ident["runner_libs_sha256"] = {lib.name: file_sha256(lib) for lib in self.libs}
        return ident

    def run_settings(self) -> Mapping[str, Any]:
        """How runs are pinned (part of the identity a baseline is keyed on): the fastest cluster, or not at all
        where the OS cannot pin (macOS)."""
        return {"pinning": "none (macOS cannot pin)" if self.facts.darwin else "fastest cluster"}

    def cpus_for(self, threads: int) -> list[int]:
        """The CPUs a run of ``threads`` threads is pinned to: the fastest cluster, widened to the next-fastest ones
        until every thread has a core (no cpufreq table: the first ``threads`` CPUs); [] = unpinned (macOS)."""
        if self.facts.darwin:
            return []
        info = self.device_info()
        if not info.clusters:
            return list(range(min(threads, self.facts.logical_cpus or threads)))
        return sorted(fastest_cpus(info.clusters, threads))

    def build_of(self, variant: str | None, build: Path | None = None, mode: str = MODE_TRACE) -> str:
        path = build or self.binary_for(variant, mode)
        return f"{path} (sha256 {file_sha256(path)[:12]}) on ssh host {self.host}"

    # ------------------------------------------------------------------------------ run

    def command(self, request: RunRequest, *, runner: str, pte: str, inputs: Sequence[str], run_dir: str,
                traced: bool, cpus: Sequence[int], timeout: float) -> str:
        """The host's shell command for one run (every argument quoted)."""
        argv: list[str] = []
        if "timeout" in self.facts.tools:
            argv += ["timeout", "-k", "5", f"{timeout:g}"]
        if cpus and "taskset" in self.facts.tools:
            argv += ["taskset", "-c", ",".join(str(c) for c in cpus)]
        argv += [runner, "--model_path", pte]
        if traced:
            argv += ["--etdump_path", "trace.etdump"]
        argv += [f"--num_executions={request.executions}", f"--cpu_threads={request.threads}"]
        if inputs:
            if any("," in p for p in inputs):
                raise ConfigError("an input file's path contains a comma, which executor_runner --inputs splits on; "
                                  "rename the file")
            argv += ["--inputs", ",".join(inputs)]
        if traced and self.write_outputs:
            argv += ["--output_file", "trace.outputs"]
        return f"mkdir -p {quote(run_dir)} && cd {quote(run_dir)} && exec {shlex.join(argv)} </dev/null"

    def run(self, request: RunRequest) -> RunResult:
        """Push what is missing, run once on the host, pull the trace (or read the log); any failure raises."""
        runner = request.build or self.binary_for(request.variant, request.mode)
        traced = request.mode == MODE_TRACE
        load_pte_check(request.pte)
        info = self.device_info()
        check_threads(request.threads, info.logical_cpus, f"ssh host {self.host}")
        timeout = min(t for t in (self.timeout_s, request.timeout_s) if t is not None)
        run_id = _run_id()
        runner_bundle = self._runner_bundle(runner)
        inputs = [Path(p) for p in request.inputs or ()]
        data = [Bundle({p.name: p}) for p in dict.fromkeys([request.pte, *inputs])]
        pushed = deploy(self.link, [runner_bundle, *data], root=self.root, darwin=self.facts.darwin, run_id=run_id)
        where = {p: f"{bundle_dir(self.root, b)}/{p.name}" for b in data for p in b.files.values()}
        cpus = self.cpus_for(request.threads)
        remote_run = f"{self.root}/runs/{run_id}"
        command = self.command(request, runner=f"{bundle_dir(self.root, runner_bundle)}/{runner.name}",
                               pte=where[request.pte], inputs=[where[p] for p in inputs], run_dir=remote_run,
                               traced=traced, cpus=cpus, timeout=timeout)
        local_dir = new_run_dir(request)
        log_path = local_dir / f"{request.stem}.log"
        trace_path = local_dir / f"{request.stem}.etdump"
        try:
            returncode, wall_s = self._run_logged(command, log_path, timeout + self.timeout_grace_s)
            output = log_path.read_text(encoding="utf-8", errors="replace")
            if returncode == SSH_FAILED:
                raise connection_error(self.host, output, f"running {runner.name}")
            if returncode != 0:
                raise self._exit_error(returncode, runner, request, command=command, output=output,
                                       log_path=log_path, timeout=timeout)
            stray = False
            if traced:
                self._pull(remote_run, local_dir, trace_path, runner=runner, command=command, output=output)
            else:
                stray = self.link.run(f"[ -e {quote(remote_run + '/' + DEFAULT_TRACE_NAME)} ]", what="checking for a "
                                      "trace", check=False).returncode == 0
        finally:
            with contextlib.suppress(DeviceError):
                self.link.run(f"rm -rf {quote(remote_run)}", what="removing the run directory", check=False)
        metadata: dict[str, Any] = {
            "device": info.to_dict(), "ssh_host": str(self.host), "device_command": command,
            "device_run_dir": remote_run, "cpus": cpus, "pushed": pushed,
            PEAK_SOURCE: (PeakSource.EMULATOR if self.emulated else PeakSource.PROCESS).value,
        }
        finished = FinishedRun(runner_name=self.name, runner_text=f"runner {runner.name} on ssh host {self.host}",
                               request=request, build=self.build_of(request.variant, request.build, request.mode),
                               cmd=command, run_dir=local_dir, log_path=log_path, wall_s=wall_s, metadata=metadata)
        if not traced:
            return result_from_log(finished, stray_trace=Path(DEFAULT_TRACE_NAME) if stray else None)
        outputs = outputs_path(trace_path)
        if outputs.is_file():
            finished = replace(finished, metadata={**metadata, "outputs_path": str(outputs)})
        return result_from_trace(finished, trace_path)

    def _run_logged(self, command: str, log_path: Path, timeout: float) -> tuple[int, float]:
        """Run ``command`` on the host, its stdout and stderr into ``log_path``: (exit code, wall seconds)."""
        argv = self.link.argv(command)
        started = time.perf_counter()
        with log_path.open("wb") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            try:
                returncode, _, ended = wait_with_rusage(proc, timeout, tick=self.heartbeat)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                raise DeviceError(f"ssh host {self.host} did not finish the run within {timeout:g} s (the host-side "
                                  "timeout did not stop it either): the host stopped answering; check it and rerun. "
                                  f"The log is {log_path}") from None
            except BaseException:
                kill_group(proc)  # Ctrl-C: closing the connection ends the remote command
                raise
        return returncode, ended - started

    def _pull(self, remote_run: str, local_dir: Path, trace_path: Path, *, runner: Path, command: str,
              output: str) -> None:
        """The run's trace (and outputs) back by one tar stream; a missing or empty trace raises, nothing is kept."""
        pull = (f"cd {quote(remote_run)} || exit 3; [ -s trace.etdump ] || {{ echo 'no trace' >&2; exit 3; }}; "
                "exec tar -cf - trace.etdump $([ -f trace.outputs ] && echo trace.outputs)")
        got = self.link.run(pull, what="pulling the trace", check=False, timeout=SHORT_S * 5)
        if got.returncode != 0:
            raise RunnerError(f"runner {runner.name} on ssh host {self.host} exited 0 but wrote no trace (or an empty "
                              f"one); a runner built without the event tracer writes none: {BUILD_HINT}",
                              command=command, returncode=0, stderr_tail=tail(output))
        try:
            with tarfile.open(fileobj=io.BytesIO(got.stdout), mode="r") as tar:
                for member in tar.getmembers():
                    if member.isfile() and member.name in ("trace.etdump", "trace.outputs"):
                        target = trace_path if member.name == "trace.etdump" else outputs_path(trace_path)
                        _extract(tar, member, target)
        except (tarfile.TarError, OSError) as exc:
            with contextlib.suppress(OSError):
                trace_path.unlink()
            raise DeviceError(f"pulling the trace from ssh host {self.host} was cut short ({exc}); check the "
                              "connection and rerun. Nothing was kept.") from None

    def _exit_error(self, returncode: int, runner: Path, request: RunRequest, *, command: str, output: str,
                    log_path: Path, timeout: float) -> RunnerError:
        where = f"runner {runner.name} on ssh host {self.host}"
        if returncode == TIMEOUT_EXIT:
            message = (f"{where} timed out after {timeout:g} s running {request.pte.name} and was killed. Raise "
                       f"--sme2-timeout if the model is just slow; the log is {log_path}")
        else:
            message = (f"{where} exited with code {returncode}{exit_hint(returncode, output)} while running "
                       f"{request.pte.name}; the full log is {log_path}")
        return RunnerError(message, command=command, returncode=returncode, stderr_tail=tail(output))

    def close(self) -> None:
        """End the session's ssh connection (also done when the runner is collected)."""
        self.link.close()


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    """One regular file of a pulled tar stream, whole (a cut stream raises)."""
    source = tar.extractfile(member)
    data = source.read() if source is not None else b""
    if len(data) != member.size:
        raise tarfile.TarError(f"{member.name}: {len(data)} of {member.size} bytes")
    target.write_bytes(data)


def exit_hint(returncode: int, output: str) -> str:
    """What a runner's exit on the host usually means, from the code and its output."""
    if "sched_setaffinity" in output or "taskset: failed" in output:
        return " (taskset could not pin it to the fastest cluster's CPUs)"
    if "error while loading shared libraries" in output or "Library not loaded" in output:
        return (" (the dynamic loader did not find the runner's libraries: they are pushed from lib/ beside the "
                "runner; pass a runner with its lib/ directory)")
    if returncode == 126 or "Exec format error" in output or "cannot execute binary file" in output:
        return " (the host cannot execute it: it is not a runner for this host's OS and architecture)"
    if returncode == 127:
        return " (a command was not found on the host)"
    if returncode > 128:
        return f" (killed by signal {returncode - 128}: the runner crashed)"
    return ""


def _run_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def own_runner(options: Sme2Options, cache_dir: Path | None, progress: Callable[[str], None] | None) -> dict[str, Any]:
    """The SshRunner arguments of ``--sme2-runner``, else of pytest-sme2's own runner cross-built for linux-aarch64."""
    if options.runner is not None:
        return {"runner": options.runner}
    from pytest_sme2.runners.build import TARGET_LINUX_AARCH64, build_runner

    build = build_runner(TARGET_LINUX_AARCH64, cache_dir=cache_dir, wheel=options.aarch64_wheel, progress=progress)
    return {"runner": build.path, "untraced": True, "runtime": build.runtime()}


def from_options(options: Sme2Options, context: RunnerContext) -> SshRunner:
    """The registry's factory: ``--sme2-runner`` or pytest-sme2's own (cross-built for linux-aarch64), on
    ``--sme2-ssh-host``; the host is contacted now, so an unreachable one or a refused key is said before anything is
    exported."""
    host = SshHost.parse(options.ssh_host or "")
    ssh = SshRunner(host=host, config=_config(options.ssh_config), timeout_s=options.timeout,
                    **own_runner(options, context.runner_cache, context.progress))
    _ = ssh.device_info()
    return ssh


def _config(value: str | Path | None) -> Path | None:
    # A pool entry carries it as text (entries are JSON between the xdist controller and its workers).
    return Path(value) if value else None


# ------------------------------------------------------------------------------------------------ the pool's source


def discover(options: Sme2Options, progress: Callable[[str], None]) -> Discovery:
    """The pool's ``ssh`` source (:mod:`pytest_sme2.runners.pool`): every host of ``--sme2-ssh-hosts`` (ini
    ``sme2_ssh_hosts``, one per line) that answers and is an Arm host our runner runs on, read as the ssh device reads
    it (the runner pushed and probed: its SME2, SVL and identity); the others are left out with their fix."""
    if not options.ssh_hosts:
        raise ConfigError("--sme2-pool=ssh needs the hosts: --sme2-ssh-hosts user@host[:port],... or, in the ini "
                          "file, sme2_ssh_hosts with one host per line (docs/lab.md)")
    # A pool of phones and hosts: --sme2-runner is the phones' Android build, so the hosts run pytest-sme2's own.
    android = options.runner is not None and binary_kind(options.runner) == "android-aarch64"
    if android:
        options = replace(options, runner=None)
    runner = own_runner(options, options.cache_dir / "runners", progress)
    entries: list[PoolEntry] = []
    left: list[LeftOut] = []
    for text in options.ssh_hosts:
        progress(f"reading ssh host {text}")
        try:
            ssh = SshRunner(host=text, config=options.ssh_config, **runner)
            try:
                entry = entry_of(ssh, text, options.ssh_config)
                entries.append(replace(entry, options={**entry.options, "runner": None}) if android else entry)
            finally:
                ssh.close()
        except Sme2Error as exc:
            left.append(LeftOut("ssh", text, str(exc)))
    return Discovery(tuple(entries), tuple(left))


def entry_of(ssh: SshRunner, text: str, config: Path | None) -> PoolEntry:
    """The pool entry of ``ssh``'s host, named by the host and port as the user wrote them (stable across sessions)."""
    info = ssh.device_info()
    identity = info.identity()
    facts = ssh.facts
    sme_bytes = int(info.extra.get("probe", {}).get("sme_vl_bytes", 0))
    options: dict[str, Any] = {"ssh_host": text, **({"ssh_config": str(config)} if config else {})}
    return PoolEntry(
        name=str(replace(ssh.host, user="")), source="ssh", address=str(ssh.host), device="ssh", options=options,
        model=facts.hostname or str(ssh.host), soc=identity.cpu_name,
        clusters=tuple(c.describe() for c in identity.clusters), sme2=info.sme2,
        svl_bits=sme_bytes * 8 if sme_bytes > 0 else None, rooted=facts.uid == "0" if facts.uid else None,
        governor=facts.governor, emulated=identity.emulator, identity=identity.to_dict(),
    )


def alive(entry: PoolEntry) -> str:
    """"" when ``entry``'s host still runs a command over ssh, else what became of it (the pool's liveness check)."""
    link = SshLink(SshHost.parse(str(entry.options["ssh_host"])), config=_config(entry.options.get("ssh_config")))
    try:
        link.run("true", what="checking that the host still answers", timeout=30.0)
    except Sme2Error as exc:
        return str(exc)
    finally:
        link.close()
    return ""
