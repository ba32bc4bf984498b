"""The host runner: a user-built, tracer-enabled ``executor_runner`` on this machine, run as a subprocess.

Every run gets its own directory, ``out_dir/<stem>/<timestamp>-<pid>-<counter>/``, holding the
trace (``<stem>.etdump``) and the runner's stdout+stderr (``<stem>.log``), so a second run never
overwrites the first. The end-to-end time of each execution is read from the trace's
``Method::execute`` events; the log's ``Iteration i of N: x ms`` lines are kept as a cross-check.
The child is reaped with ``os.wait4``, so the result carries its own CPU time against its wall time
and its involuntary context switches, with the host's load around the run (``RunResult.load``).

What a binary records is decided when it is built, so ``RunRequest.mode`` picks the build
(:meth:`~.base.BinaryBuilds.binary_for`): ``trace`` the traced build (``--sme2-runner``), ``timing``
the timing-only build (``--sme2-runner-timing``, no event tracer: its end-to-end times are its
``Iteration`` lines, the span the traced build's ``Method::execute`` events time), ``log`` the
XNNPACK-logging build (``--sme2-runner-log``: its stderr is the log). Timing and log runs get no
``--etdump_path`` (a build without the tracer refuses the flag); a timing build that writes a trace
anyway has the tracer, and is refused.

Guards against the failures that make results silently wrong: a timeout kills the runner's whole
process group; a trace left over at the path is deleted before the run, and afterwards the trace
must exist and be newer than the run's start, hold as many runs as ``--num_executions`` asked for,
and a log in executor_runner's format must end with its success line; a non-zero exit, a missing
binary, a binary for another architecture each become a :class:`~pytest_sme2.errors.RunnerError`
carrying the command, the exit code and the tail of the log.

What every binary runner shares (the log and trace read into a ``RunResult``, the run directory, the loaded
libraries) is :mod:`pytest_sme2.runners.executor_runner`; reaping a child with its rusage and killing its process
group is :mod:`pytest_sme2.runners.process`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import platform
import subprocess
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sme2.device.codepaths import SHARED_OBJECTS, runner_shared_objects
from pytest_sme2.device.facts import host_device, host_identity
from pytest_sme2.device.load import SOURCE_CHILD, block_load, host_load
from pytest_sme2.errors import ConfigError, RunnerError
from pytest_sme2.evidence.memory import PEAK_SOURCE, RU_MAXRSS_KB, PeakSource, child_peak_kb
from pytest_sme2.program.export import load_pte_check
from pytest_sme2.runners.base import (
    MODE_LOG,
    MODE_TIMING,
    MODE_TRACE,
    SME2_OFF,
    SME2_ON,
    BinaryBuilds,
    RunRequest,
    RunResult,
    check_threads,
    inputs_argv,
)
from pytest_sme2.runners.executor_runner import (
    BUILD_HINT,
    DEFAULT_TRACE_NAME,
    LIBRARIES,
    FinishedRun,
    loaded_libraries,
    new_run_dir,
    outputs_path,
    read_lines,
    read_tail,
    result_from_log,
    result_from_trace,
)
from pytest_sme2.runners.process import kill_group, signal_text, wait_with_rusage
from pytest_sme2.store.files import ensure_dir, file_sha256

if TYPE_CHECKING:
    from pytest_sme2.options import Sme2Options
    from pytest_sme2.runners.registry import RunnerContext


def host_facts() -> dict[str, Any]:
    """Stable facts about this machine: OS, architecture, CPU model, logical CPUs, SME2 support."""
    return {"system": platform.system(), **host_device().fingerprint()}


class HostRunner(BinaryBuilds):
    """Run ``.pte`` files with one or two ``executor_runner`` binaries on this machine.

    ``runner_path`` is the default build (variant ``None``); ``variants`` maps variant names to builds,
    e.g. ``{"sme2_on": on_path, "sme2_off": off_path}`` for an on/off comparison. ``timing`` and ``log``
    map variants to their timing-only and XNNPACK-logging builds (optional). ``timeout_s`` caps every
    run (a request's own ``timeout_s`` applies too; the smaller one wins).
    """

    name = "host"
    on_this_host = True
    #: what the reaped child's ``ru_maxrss`` is the peak of (QEMU: the emulator's process)
    peak_source = PeakSource.PROCESS
    def __init__(
        self,
        runner_path: str | Path | None = None,
        *,
        variants: Mapping[str | None, str | Path] | None = None,
        timeout_s: float | None = None,
        timing: Mapping[str | None, str | Path] | None = None,
        log: Mapping[str | None, str | Path] | None = None,
        write_outputs: bool = False,
        runtime: Mapping[str, str] | None = None,
    ) -> None:
        builds: dict[str | None, Path] = {k: Path(v) for k, v in (variants or {}).items()}
        if runner_path is not None:
            builds.setdefault(None, Path(runner_path))
        if not builds:
            raise ConfigError(
                "the host runner needs an executor_runner: pass runner_path (one build) or variants "
                "({'sme2_on': path, 'sme2_off': path}); on the command line, --sme2-runner PATH"
            )
        self.builds = builds
        self.mode_builds = {mode: {k: Path(v) for k, v in paths.items()}
                            for mode, paths in ((MODE_TIMING, timing), (MODE_LOG, log)) if paths}
        if timeout_s is not None and timeout_s <= 0:
            raise ConfigError(f"timeout_s must be positive (got {timeout_s})")
        self.timeout_s = timeout_s
        #: traced runs also write the last execution's outputs (``--output_file``, a flag of pytest-sme2's own
        #: runner) beside the trace, for numerics checks between the arms of a pair
        self.write_outputs = write_outputs
        #: what the binaries load at run time that decides the numbers besides themselves (pytest-sme2's own runner:
        #: the executorch version and SDK digest its libraries come from); part of every artifact
        self.runtime = dict(runtime or {})

    def fingerprint(self) -> Mapping[str, Any]:
        """Host facts plus the sha256 of every runner binary (a rebuilt runner is a different build)."""
        return {**host_facts(), "runner": self.name, "runner_sha256": self.build_hashes()}

    def identity(self) -> Mapping[str, Any]:
        """This machine's :class:`~pytest_sme2.device.identity.DeviceIdentity` as a dict (no runner hashes)."""
        return host_identity().to_dict()

    def build_identity(self, variant: str | None) -> Mapping[str, Any]:
        """What runs the ``.pte``: the sha256 of ``variant``'s traced executor_runner (and of its timing build)."""
        self._check_executable(self.runner_for(variant))  # a missing binary: the error that says how to build one
        if self.has_build(variant, MODE_TIMING):
            self._check_executable(self.binary_for(variant, MODE_TIMING))
        return {"runner": "executor_runner", **self.builds_identity(variant), **self.runtime}

    # ---------------------------------------------------------------------------------------- run

    def command(self, request: RunRequest, runner: Path, trace_path: Path | None) -> list[str]:
        """The executor_runner command line for ``request``, writing its trace to ``trace_path`` (traced runs)."""
        cmd = [str(runner.absolute()), "--model_path", str(request.pte.absolute())]
        if trace_path is not None:
            cmd += ["--etdump_path", str(trace_path.absolute())]
        cmd += [f"--num_executions={request.executions}", f"--cpu_threads={request.threads}"]
        cmd += inputs_argv([str(Path(p).absolute()) for p in request.inputs or ()], fix="move or rename the file")
        if self.write_outputs and trace_path is not None:
            cmd += ["--output_file", str(outputs_path(trace_path).absolute())]
        return cmd

    def new_run_dir(self, request: RunRequest) -> Path:
        """A fresh directory ``out_dir/<stem>/<timestamp>-<pid>-<counter>`` for one run."""
        return new_run_dir(request)

    def run(self, request: RunRequest) -> RunResult:
        """Run ``request`` in a new run directory; see :meth:`run_in`."""
        check_threads(request.threads, os.cpu_count() or 0, "this host")
        self._check_executable(self._binary(request))
        load_pte_check(request.pte)  # a foreign or cut .pte: say so, instead of the runner's load error
        return self.run_in(request, self.new_run_dir(request))

    def run_in(self, request: RunRequest, run_dir: Path) -> RunResult:
        """Run the runner once in ``run_dir`` and read its trace; any failure is a RunnerError.

        A trace already at the target path is deleted first, so a runner that fails to write one
        can never be mistaken for a successful run.
        """
        runner = self._binary(request)
        self._check_executable(runner)
        load_pte_check(request.pte)
        ensure_dir(run_dir)
        traced = request.mode == MODE_TRACE
        trace_path = run_dir / (f"{request.stem}.etdump" if traced else DEFAULT_TRACE_NAME)
        log_path = run_dir / f"{request.stem}.log"
        with contextlib.suppress(FileNotFoundError):
            trace_path.unlink()
        cmd = self.command(request, runner, trace_path if traced else None)
        timeout = min(t for t in (self.timeout_s, request.timeout_s) if t is not None)
        # What the process maps, from one untraced execution stopped at its exit (once per binary and environment).
        # (In a directory of its own: whatever it writes where it runs is never taken for the measured run's.)
        probe = self.command(replace(request, runs=1, warmup=0), runner, None)
        objects = runner_shared_objects(runner, probe, cwd=run_dir / "maps-probe", timeout_s=timeout)
        load_before = host_load()
        started = time.perf_counter()
        with log_path.open("wb") as log:
            # The log's creation time, on the file system's own clock, is the "run started" mark
            # that the trace's mtime must not precede.
            started_mtime_ns = log_path.stat().st_mtime_ns
            try:
                proc = subprocess.Popen(
                    cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=run_dir,
                    start_new_session=True,  # its own process group, so a timeout kills all of it
                )
            except OSError as exc:
                raise self._exec_error(runner, cmd, exc) from None
            try:
                returncode, usage, ended = wait_with_rusage(proc, timeout, tick=self.heartbeat)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                raise RunnerError(
                    f"executor_runner {runner} timed out after {timeout:g} s and was killed (with its "
                    f"process group). Raise the limit with --sme2-timeout if the model is just slow; "
                    f"the log is {log_path}",
                    command=cmd, stderr_tail=read_tail(log_path),
                ) from None
            except BaseException:
                kill_group(proc)  # Ctrl-C must not leave a runner behind
                raise
        wall_s = ended - started
        load = block_load(
            load_before, host_load(), source=SOURCE_CHILD, cpu_s=usage.ru_utime + usage.ru_stime, wall_s=wall_s,
            threads=request.threads, involuntary_switches=int(usage.ru_nivcsw),
        )
        log_tail = read_tail(log_path)
        if returncode != 0:
            raise RunnerError(
                f"executor_runner {runner} exited with code {returncode}{signal_text(returncode)} while "
                f"running {request.pte}; the full log is {log_path}",
                command=cmd, returncode=returncode, stderr_tail=log_tail,
            )
        build = self.build_of(request.variant, request.build, request.mode)
        libraries = loaded_libraries(read_lines(log_path), binary=runner)
        # The peak is what the runner printed of its own VmHWM (pytest-sme2's runner; _log_memory), of the kind this
        # runner says (QEMU: the emulator's process). wait4's ru_maxrss is kept for reference only: Linux carries
        # this Python process' high-water mark into it at exec, so it is never a runner's peak.
        peak: dict[str, Any] = {RU_MAXRSS_KB: child_peak_kb(usage.ru_maxrss), PEAK_SOURCE: self.peak_source.value}
        if objects is not None:
            peak[SHARED_OBJECTS] = objects
        finished = FinishedRun(runner_name=self.name, runner_text=f"executor_runner {runner}", request=request,
                               build=build, cmd=cmd, run_dir=run_dir, log_path=log_path, wall_s=wall_s, metadata=peak,
                               load=load)
        if not traced:
            result = result_from_log(finished, stray_trace=trace_path if trace_path.exists() else None)
            return replace(result, metadata={**result.metadata, LIBRARIES: libraries}) if libraries else result
        self._check_trace(runner, cmd, trace_path, started_mtime_ns, log_tail)
        outputs = outputs_path(trace_path)
        extra: dict[str, Any] = {"outputs_path": str(outputs)} if self.write_outputs and outputs.is_file() else {}
        if libraries:
            extra[LIBRARIES] = libraries
        return result_from_trace(replace(finished, metadata={**peak, **extra}), trace_path)

    def build_of(self, variant: str | None, build: Path | None = None, mode: str = MODE_TRACE) -> str:
        """``<path> (sha256 <12>)`` of the binary that runs ``mode`` for ``variant`` (or of ``build``)."""
        path = build or self.binary_for(variant, mode)
        try:
            return f"{path} (sha256 {file_sha256(path)[:12]})"
        except OSError:
            return f"{path} (unreadable)"

    def _binary(self, request: RunRequest) -> Path:
        """The executor_runner to run ``request`` with: its own build (a stored reference), else the variant's
        build of the request's mode (a missing timing or log build names its option)."""
        return request.build or self.binary_for(request.variant, request.mode)

    # ------------------------------------------------------------------------------------ checks

    @staticmethod
    def _check_executable(runner: Path) -> None:
        if not runner.exists():
            raise RunnerError(
                f"executor_runner not found at {runner}; {BUILD_HINT}, then pass its path with --sme2-runner"
            )
        if not runner.is_file():
            raise RunnerError(f"executor_runner path {runner} is not a file; pass the binary itself")
        if not os.access(runner, os.X_OK):
            raise RunnerError(f"executor_runner {runner} is not executable; make it so with: chmod +x {runner}")

    @staticmethod
    def _exec_error(runner: Path, cmd: list[str], exc: OSError) -> RunnerError:
        if exc.errno == errno.ENOEXEC:
            message = (
                f"executor_runner {runner} cannot be executed on this {platform.machine()} machine "
                "(Exec format error): it was probably built for another architecture or OS, e.g. an "
                f"Android arm64 build (check with: file {runner}). Build it for this host, or run an "
                "arm64 Android build with --sme2-device=android."
            )
        elif exc.errno in (errno.EACCES, errno.EPERM):
            message = (
                f"permission denied executing {runner}: make it executable (chmod +x) and check that its "
                "file system is not mounted noexec"
            )
        elif exc.errno == errno.ENOENT:
            message = (
                f"executing {runner} failed with 'No such file or directory' although the file exists: "
                "its interpreter (the #! line) or dynamic loader is missing on this machine"
            )
        else:
            message = f"executing {runner} failed: {exc.strerror or exc}"
        return RunnerError(message, command=cmd)

    @staticmethod
    def _check_trace(runner: Path, cmd: list[str], trace_path: Path, started_mtime_ns: int, log_tail: str) -> None:
        try:
            st = trace_path.stat()
        except FileNotFoundError:
            raise RunnerError(
                f"executor_runner {runner} exited 0 but wrote no trace at {trace_path}. A runner built "
                f"without the event tracer writes none; {BUILD_HINT}.",
                command=cmd, returncode=0, stderr_tail=log_tail,
            ) from None
        if st.st_mtime_ns < started_mtime_ns:
            raise RunnerError(
                f"executor_runner {runner} exited 0 but the trace at {trace_path} is older than this run "
                f"(modified {time.ctime(st.st_mtime)}): it is a stale file, not a trace of this run",
                command=cmd, returncode=0, stderr_tail=log_tail,
            )


def from_options(options: Sme2Options, context: RunnerContext) -> HostRunner:
    """The registry's factory (:mod:`pytest_sme2.runners.registry`): the ``--sme2-runner*`` builds, or without them
    pytest-sme2's own runner built against the installed executorch wheel (:mod:`pytest_sme2.runners.build`, cached
    in ``context.runner_cache``). The own runner is its own timing build (no tracer unless asked for a trace)."""
    if options.runner is None:
        from pytest_sme2.runners.build import TARGET_HOST, build_runner

        build = build_runner(TARGET_HOST, cache_dir=context.runner_cache, progress=context.progress)
        own = build.path
        # One binary, both run kinds: untraced without --etdump_path (the timing build), traced with it.
        return HostRunner(own, variants={None: own, SME2_ON: own}, timeout_s=options.timeout, timing={None: own,
                          SME2_ON: own}, write_outputs=True, runtime=build.runtime())

    def arms(on: Path | None, off: Path | None) -> dict[str | None, Path]:
        out: dict[str | None, Path] = {None: on, SME2_ON: on} if on is not None else {}
        if off is not None:
            out[SME2_OFF] = off
        return out

    return HostRunner(options.runner, variants=arms(options.runner, options.runner_off), timeout_s=options.timeout,
                      timing=arms(options.runner_timing, options.runner_off_timing),
                      log=arms(options.runner_log, options.runner_off_log))
