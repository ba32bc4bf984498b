"""The ssh device's runner (:class:`SshRunner`): the host's identity, one run pushed, run pinned and its trace pulled;
the registry's factory (:func:`from_options`).
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import subprocess
import tarfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from shlex import quote
from typing import TYPE_CHECKING, Any

from pytest_sme2.device.facts import (
    DeviceInfo,
    clusters_from_max_freq,
    cpuinfo_parts,
    darwin_identity,
    fastest_cpus,
    has_sme2,
    linux_identity,
    parse_sysctl,
)
from pytest_sme2.errors import ConfigError, DeviceError, RunnerError, tail
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
from pytest_sme2.runners.process import kill_group, shell_exit_hint, timeout_message, wait_with_rusage
from pytest_sme2.runners.qemu import CpuProbe, parse_probe
from pytest_sme2.runners.ssh.deploy import REMOTE_DIR, Bundle, bundle_dir, deploy
from pytest_sme2.runners.ssh.facts import FACTS_SCRIPT, HostFacts, binary_kind, emulated_cpu
from pytest_sme2.runners.ssh.link import SHORT_S, SSH_FAILED, SshHost, SshLink, config_path, connection_error
from pytest_sme2.store.files import file_sha256

if TYPE_CHECKING:
    from pytest_sme2.options import Sme2Options
    from pytest_sme2.runners.registry import RunnerContext


#: Exit status of ``timeout`` when it had to stop the runner (coreutils).
TIMEOUT_EXIT = 124


class SshRunner(BinaryBuilds):
    """Run ``.pte`` files with one runner binary on an Arm host over ssh (see :mod:`pytest_sme2.runners.ssh`).

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
        self.link = SshLink(self.host, config=config_path(config), ssh=ssh)
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
            message = timeout_message(where, timeout, request.pte.name, log_path)
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
    return shell_exit_hint(returncode, "the host")


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
    ssh = SshRunner(host=host, config=config_path(options.ssh_config), timeout_s=options.timeout,
                    **own_runner(options, context.runner_cache, context.progress))
    _ = ssh.device_info()
    return ssh

