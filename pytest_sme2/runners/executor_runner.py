"""The ``executor_runner`` protocol every binary runner shares: its command line's conventions, and its log and
trace read into a :class:`~pytest_sme2.runners.base.RunResult`.

A run gets its own directory (:func:`new_run_dir`); a traced run's end-to-end times are the trace's
``Method::execute`` events (:func:`result_from_trace`), a timing build's its log's ``Iteration i of N: x ms`` lines
(:func:`result_from_log`); either way the run must have done what it was asked (:func:`check_what_ran`). The
libraries a runner process mapped (pytest-sme2's own runner prints its maps) are read by :func:`loaded_libraries`.
Used by the host, QEMU and Android runners.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_sme2.device.load import BlockLoad
from pytest_sme2.errors import ConfigError, RunnerError, TraceError, tail
from pytest_sme2.evidence.memory import PEAK_KB, PEAK_SOURCE, PeakSource, runner_log_memory
from pytest_sme2.evidence.trace import ETDUMP_IDENTIFIER, read_etdump
from pytest_sme2.runners.base import MODE_TIMING, MODE_TRACE, RunRequest, RunResult, build_option
from pytest_sme2.store.files import ensure_dir, file_sha256

#: ``Iteration 3 of 30: 0.079408 ms`` as executor_runner logs it (the file:line prefix varies by version).
ITERATION_LINE = re.compile(r"Iteration (\d+) of (\d+): ([0-9.eE+-]+) ms")


SUCCESS_TEXT = "Model executed successfully"


#: ``Model executed successfully 30 time(s) in 2.4 ms.``, executor_runner's last line before the trace.
SUCCESS_LINE = re.compile(r"Model executed successfully (\d+) time\(s\)")


#: A log in executor_runner's format (a build with logging on): then the success line must be in it.
RUNNER_LOG_LINE = re.compile(r"executorch:executor_runner\.cpp:\d+\]|Iteration \d+ of \d+: ")


BUILD_HINT = (
    "build examples/portable/executor_runner from the ExecuTorch sources with -DEXECUTORCH_BUILD_DEVTOOLS=ON "
    "-DEXECUTORCH_ENABLE_EVENT_TRACER=ON -DEXECUTORCH_BUILD_XNNPACK=ON"
)


#: How to build a timing-only runner whose Iteration lines give the E2E times.
TIMING_BUILD_HINT = (
    "build the timing runner like the traced one but without -DEXECUTORCH_ENABLE_EVENT_TRACER, and with "
    "-DEXECUTORCH_ENABLE_LOGGING=ON so that it prints its 'Iteration i of N: x ms' lines (see docs/run-modes.md)"
)


#: ``per_operator_note`` of a timing-build run: untraced on purpose.
TIMING_NOTE = "untraced block (run mode 'timing', timing-only build): end-to-end time only"


#: Where a tracer build writes its ETDump when it is given no --etdump_path.
DEFAULT_TRACE_NAME = "model.etdump"


_RUN_COUNTER = itertools.count(1)


def parse_iteration_ms(log_text: str) -> tuple[float, ...]:
    """The ``Iteration i of N: x ms`` times of an executor_runner log, in order."""
    return tuple(float(m.group(3)) for m in ITERATION_LINE.finditer(log_text))


def log_memory(log_text: str, meta: Mapping[str, Any]) -> dict[str, Any]:
    """Planned memory, load time and peak as pytest-sme2's own runner prints them; its peak is of the kind the
    caller said (``PEAK_SOURCE`` in ``meta``: QEMU's is the emulator's process), else the runner's own process
    (a phone). An executor_runner that prints none has no peak: not measured, never wait4's ``ru_maxrss``."""
    found = runner_log_memory(log_text)
    if PEAK_KB in found:
        found[PEAK_SOURCE] = meta.get(PEAK_SOURCE) or PeakSource.PROCESS.value
    else:
        found[PEAK_SOURCE] = None
    return found


def read_tail(path: Path, max_bytes: int = 8192) -> str:
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - max_bytes))
            return tail(fh.read(), 20)
    except OSError:
        return ""


def outputs_path(trace_path: Path) -> Path:
    """Where a traced run's outputs go (``--output_file``): beside its trace."""
    return trace_path.with_suffix(".outputs")


def new_run_dir(request: RunRequest) -> Path:
    """A fresh local directory ``out_dir/<stem>/<timestamp>-<pid>-<counter>`` for one run.

    Shared by the host and Android runners: a second run (or a second pytest process) never
    overwrites the first one's trace or log. Absolute: the runner runs with it as its working directory, so a path
    under a relative ``--sme2-out-dir`` given to it (its trace, QEMU's in_asm log) would point nowhere.
    """
    parent = request.out_dir.absolute() / request.stem
    stamp = time.strftime("%Y%m%d-%H%M%S")
    while True:
        run_dir = parent / f"{stamp}-{os.getpid()}-{next(_RUN_COUNTER):04d}"
        try:
            ensure_dir(parent)
            run_dir.mkdir(exist_ok=False)
            return run_dir
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigError(
                f"cannot create the run directory {run_dir}: {exc.strerror}; point --sme2-out-dir at a "
                "writable directory"
            ) from None


@dataclass(frozen=True)
class FinishedRun:
    """One executor_runner process that exited 0, as the host and Android runners hand it over to be read."""

    runner_name: str
    #: how messages name the runner (``executor_runner <path>``, ``... on Android device <serial>``)
    runner_text: str
    request: RunRequest
    build: str
    cmd: list[str] | str
    run_dir: Path
    log_path: Path
    wall_s: float
    #: the runner's own metadata, added to what the log and trace give
    metadata: Mapping[str, Any] | None = None
    load: BlockLoad | None = None


def result_from_trace(run: FinishedRun, trace_path: Path) -> RunResult:
    """Read a fresh, checked trace (and the runner's log) into a :class:`RunResult`.

    Shared by the host and Android runners: the caller has already proved that ``trace_path`` was
    written by this run. A file that is not an ETDump becomes a RunnerError naming ``runner_text``;
    a real ETDump without latency events keeps its TraceError, which says how to rebuild the runner.
    """
    log_tail = read_tail(run.log_path)
    try:
        timeline = read_etdump(trace_path)
    except TraceError as exc:
        if looks_like_etdump(trace_path):
            raise
        raise RunnerError(
            f"{run.runner_text} exited 0 but wrote something that is not a trace: {exc}",
            command=run.cmd, returncode=0, stderr_tail=log_tail,
        ) from exc
    e2e = tuple(float(x) for x in timeline.e2e_ms_per_run())
    log_text = run.log_path.read_text(encoding="utf-8", errors="replace")
    check_what_ran(run.runner_text, run.request, len(e2e), log_text, cmd=run.cmd, log_path=run.log_path,
                   log_tail=log_tail)
    iterations = parse_iteration_ms(log_text)
    per_operator = bool(len(timeline.operators()))
    meta: dict[str, Any] = {
        "mode": MODE_TRACE,
        "command": run.cmd,
        "run_dir": str(run.run_dir),
        "wall_s": round(run.wall_s, 3),
        "requested_executions": run.request.executions,
        "trace_runs": len(e2e),
        "log_iteration_ms": list(iterations),
        "log_success": SUCCESS_TEXT in log_text,
    }
    if iterations and len(iterations) == len(e2e):
        meta["log_vs_trace_max_abs_diff_ms"] = max(abs(a - b) for a, b in zip(iterations, e2e, strict=True))
    meta.update(run.metadata or {})
    meta.update(log_memory(log_text, meta))
    return RunResult(
        runner=run.runner_name,
        e2e_ms=e2e,
        warmup=run.request.warmup,
        threads=run.request.threads,
        build=run.build,
        variant=run.request.variant,
        trace_path=trace_path,
        log_path=run.log_path,
        per_operator=per_operator,
        per_operator_note="" if per_operator else (
            "the trace holds no operator events, only Method::execute: this runner records end-to-end "
            "time only"
        ),
        metadata=meta,
        load=run.load,
    )


def result_from_log(run: FinishedRun, *, stray_trace: Path | None = None) -> RunResult:
    """A timing or log run (no trace): its E2E times from the log's ``Iteration`` lines.

    Shared by the host and Android runners. A timing run must log one ``Iteration`` line per execution
    (else the build cannot time: it says how to rebuild) and must not have written a trace (a build with
    the event tracer would put the tracer's cost into the latency it reports as untraced).
    """
    log_text = run.log_path.read_text(encoding="utf-8", errors="replace")
    log_tail = read_tail(run.log_path)
    iterations = parse_iteration_ms(log_text)
    if run.request.mode == MODE_TIMING:
        if stray_trace is not None:
            raise RunnerError(
                f"{run.runner_text}, given as a timing-only build ({build_option(MODE_TIMING, run.request.variant)}), "
                f"wrote an ETDump ({stray_trace}): it was built with the event tracer, so its latency would include "
                f"the tracer's cost. {TIMING_BUILD_HINT}",
                command=run.cmd, returncode=0, stderr_tail=log_tail,
            )
        if len(iterations) != run.request.executions:
            raise RunnerError(
                f"{run.runner_text} ran as the timing-only build but logged {len(iterations)} 'Iteration i of N: x ms' "
                f"lines for {run.request.executions} executions, so its end-to-end times cannot be read; "
                f"{TIMING_BUILD_HINT}. The log is {run.log_path}",
                command=run.cmd, returncode=0, stderr_tail=log_tail,
            )
    meta: dict[str, Any] = {
        "mode": run.request.mode,
        "command": run.cmd,
        "run_dir": str(run.run_dir),
        "wall_s": round(run.wall_s, 3),
        "requested_executions": run.request.executions,
        "log_success": SUCCESS_TEXT in log_text,
    }
    if run.request.mode == MODE_TIMING:
        meta["timing_scope"] = ("executor_runner's 'Iteration' lines: Method::execute of each execution, the span "
                                "the traced build's Method::execute events time")
    meta.update(run.metadata or {})
    meta.update(log_memory(log_text, meta))
    return RunResult(
        runner=run.runner_name,
        e2e_ms=iterations,
        warmup=min(run.request.warmup, len(iterations)),
        threads=run.request.threads,
        build=run.build,
        variant=run.request.variant,
        log_path=run.log_path,
        per_operator=False,
        per_operator_note=TIMING_NOTE if run.request.mode == MODE_TIMING else "XNNPACK log run: kernel selection only",
        metadata=meta,
        load=run.load,
    )


def check_what_ran(
    runner_text: str, request: RunRequest, trace_runs: int, log_text: str, *, cmd: list[str] | str,
    log_path: Path, log_tail: str,
) -> None:
    """The run did what it was asked: the trace holds ``request.executions`` runs, the log says they succeeded.

    A runner that ignores ``--num_executions`` (or a trace of another run) would otherwise give
    samples of the wrong size with nothing said. The success line is required only of a log in
    executor_runner's format: a build with logging off prints nothing at all.
    """
    asked = request.executions
    fix = f"check that it is an executor_runner that honours --num_executions; the log is {log_path}"
    if trace_runs != asked:
        raise RunnerError(
            f"{runner_text} was asked for {asked} executions (--num_executions={asked}), the trace holds "
            f"{trace_runs}: the trace is not a record of this request, so its samples are not used; {fix}",
            command=cmd, returncode=0, stderr_tail=log_tail,
        )
    if not RUNNER_LOG_LINE.search(log_text):
        return
    success = SUCCESS_LINE.search(log_text)
    if success is None:
        raise RunnerError(
            f"{runner_text} exited 0 and wrote a trace of {asked} executions, but its log has no "
            f"'{SUCCESS_TEXT} {asked} time(s)' line: the run did not finish as executor_runner does, so "
            f"its trace is not trusted; the log is {log_path}",
            command=cmd, returncode=0, stderr_tail=log_tail,
        )
    if int(success.group(1)) != asked:
        raise RunnerError(
            f"{runner_text} was asked for {asked} executions (--num_executions={asked}), its log says "
            f"'{success.group(0)}': {fix}",
            command=cmd, returncode=0, stderr_tail=log_tail,
        )


def looks_like_etdump(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            head = fh.read(12)
    except OSError:
        return False
    return ETDUMP_IDENTIFIER in (head[8:12], head[4:8])


#: ``RunResult.metadata`` key: the non-system shared libraries the runner process mapped, ``{path: sha256}``.
LIBRARIES = "libraries"


#: Where the OS's own libraries live (libc, libstdc++, the dynamic loader; a cross sysroot under /usr): not part
#: of what a project builds, so not of the artifact. A Python package directory below them is not "system".
SYSTEM_LIBRARY_DIRS = ("/lib/", "/lib32/", "/lib64/", "/libx32/", "/usr/")


_PACKAGE_DIRS = ("/site-packages/", "/dist-packages/", "/usr/local/")


#: How pytest-sme2's own runner prints its ``/proc/self/maps`` lines (runners/cpp/sme2_runner.cpp, print_maps).
MAP_PREFIX = "sme2_runner map: "


def read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def loaded_libraries(log_lines: Iterable[str], *, binary: Path | None = None) -> dict[str, str]:
    """The shared libraries a runner process mapped, as its log's ``sme2_runner map:`` lines name them, that are not
    the OS's (:data:`SYSTEM_LIBRARY_DIRS`) nor the binary itself: ``{path: sha256}`` (a file gone since: skipped).

    They decide the numbers as much as the binary does: the same runner over a rebuilt ``libexecutorch*.so`` (an
    executorch patch release, a rebuilt wheel) runs other code. Only pytest-sme2's own runner prints its maps; a
    statically linked ``executor_runner`` has nothing to add.
    """
    from pytest_sme2.evidence.qemu_log import parse_maps

    own = str(binary.resolve()) if binary is not None else ""
    out: dict[str, str] = {}
    mapped = parse_maps(line.split(MAP_PREFIX, 1)[1] for line in log_lines if MAP_PREFIX in line)
    for path in sorted({m.path for m in mapped if m.path.startswith("/")}):
        system = path.startswith(SYSTEM_LIBRARY_DIRS) and not any(d in path for d in _PACKAGE_DIRS)
        if system or path == own:
            continue
        with contextlib.suppress(OSError):
            out[path] = file_sha256(path)
    return out
