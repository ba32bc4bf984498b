"""Several exports at once, in worker processes, before anything is measured.

An export is mostly single-threaded Python (torch.export, the XNNPACK partitioner and its passes: 2-30 s per
model here), so a session that finds its models missing from the export cache spends most of its first minutes
on one core. :func:`export_all` hands the missing ones to ``processes`` workers (``python -m
pytest_sme2.program.pool``), each taking the next job when it finishes one, and returns when all are in the
cache. Nothing is measured meanwhile: a measurement beside an export would be disturbed by it.

The pool only fills the cache. A test still asks :func:`~pytest_sme2.program.export.export_model` for its model and
gets the pool's entry as a cache hit; a job the pool could not do (the model fails to build or lower, a worker
died) is simply exported again by its test, which then reports the error where it belongs. Entries are
written as every export writes them (a temporary directory renamed into place), so workers, a test and another
session may export the same model at once without a half-written entry.

A worker gets the model by its registered name and re-imports the file that registered it; it is told the
cache key the session computed and skips a job whose model it builds differently (the test then exports it).

Protocol (JSON lines): the session writes ``{"model", "dtype", "backend", "key", "source"}`` per job to a
worker's stdin; the worker answers ``{"progress": text}`` while it works and ``{"done": true, "error": text or
null, "pte": path, "inputs": [path, ...]}`` per job, and exits when its stdin closes. A job with an empty key is
exported whatever key its build gives (a baseline's program rebuilt at another commit, checked by its hash).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import selectors
import subprocess
import sys
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

#: the most workers the default starts: each holds torch and executorch (~1 GB), and the cores beyond a few
#: give little for a handful of models
MAX_DEFAULT_PROCESSES = 4

#: how long a worker may take to stop after its stdin closed (it finishes the line it is writing)
_STOP_SECONDS = 10.0
_STDERR_TAIL = 20


@dataclasses.dataclass(frozen=True)
class ExportJob:
    """One export a session needs: a registered model in one dtype and backend, and the key it must have."""

    model: str
    dtype: str
    backend: str
    #: the cache key the session computed (the worker skips the job when its build gives another); "" when the
    #: session cannot know it (a rebuild of a baseline's program from another commit: its hash is the check)
    key: str
    #: the file that registered the model (the worker imports it), or "" when registered by an entry point
    source: str = ""

    @property
    def label(self) -> str:
        return f"{self.model} {self.dtype}/{self.backend}"


@dataclasses.dataclass(frozen=True)
class CaughtWarning:
    """A warning the user's code raised while a worker exported its model (torch's and executorch's own are
    logged, as in every export). The test re-issues it, so the session's warning filters decide, as they do for
    an export in the test's process."""

    message: str
    #: ``module:qualname`` of the warning class
    category: str
    filename: str
    lineno: int

    def reissue(self) -> None:
        warnings.warn_explicit(self.message, _warning_class(self.category), self.filename, self.lineno)


def _warning_class(name: str) -> type[Warning]:
    module, _, qualname = name.partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError):
        return UserWarning
    return found if isinstance(found, type) and issubclass(found, Warning) else UserWarning


@dataclasses.dataclass(frozen=True)
class PoolReport:
    """What :func:`export_all` did: how many processes, the wall time, and the jobs done and not done."""

    processes: int
    seconds: float
    exported: tuple[ExportJob, ...] = ()
    #: jobs the pool could not do, with why (their tests export them again, and report the error)
    failed: tuple[tuple[ExportJob, str], ...] = ()
    #: cache key -> what the user's code warned while the pool exported that model
    warnings: Mapping[str, tuple[CaughtWarning, ...]] = dataclasses.field(default_factory=dict)
    #: cache key -> why the damaged cache entry the pool replaced was damaged (said under that model's first test)
    repaired: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: job -> the exported ``.pte`` and its input files (in the cache)
    outputs: Mapping[ExportJob, tuple[Path, tuple[Path, ...]]] = dataclasses.field(default_factory=dict)

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(job.key for job in self.exported)

    def summary(self) -> str:
        """``11 exported in 2 processes in 68 s`` (what was left to the tests: :meth:`left`)."""
        return f"{len(self.exported)} exported in {self.processes} processes in {self.seconds:.0f} s"

    def left(self) -> list[str]:
        """One line per job the pool left to its tests, with why."""
        return [f"{job.label}: {why}" for job, why in self.failed]


def default_processes(cpus: int | None = None) -> int:
    """How many export workers a session starts by default: the host's CPUs, at most :data:`MAX_DEFAULT_PROCESSES`."""
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(MAX_DEFAULT_PROCESSES, cpus))


def export_all(
    jobs: Sequence[ExportJob],
    *,
    cache_dir: str | Path,
    processes: int,
    model_sources: Iterable[str] = (),
    progress: Callable[[str], None] | None = None,
    cwd: Path | None = None,
    runtime: Path | None = None,
) -> PoolReport:
    """Export ``jobs`` into ``cache_dir`` in up to ``processes`` worker processes; returns when all are done.

    ``model_sources`` are the ``--sme2-models`` files/modules the workers import (absolute paths). Never raises
    for a job: what failed is in the report. ``progress`` gets a line whenever a worker reports a stage. ``cwd``
    runs the workers there (a worktree of another commit, :mod:`measure.rebuild`) with that directory kept off
    their ``sys.path``, so pytest-sme2 is the session's own. ``runtime``: a folder holding another executorch, put
    first on the workers' ``sys.path`` (the exporter of a baseline's runtime, :mod:`measure.runtimes`).
    """
    started = time.perf_counter()
    todo = deque(dict.fromkeys(jobs))  # in order, each once
    total = len(todo)
    count = min(processes, total)
    done: list[ExportJob] = []
    failed: list[tuple[ExportJob, str]] = []
    caught: dict[str, tuple[CaughtWarning, ...]] = {}
    repaired: dict[str, str] = {}
    outputs: dict[ExportJob, tuple[Path, tuple[Path, ...]]] = {}
    workers: list[_Worker] = []
    selector = selectors.DefaultSelector()
    finished = False
    try:
        for _ in range(count):
            worker = _Worker.start(Path(cache_dir), tuple(model_sources), cwd, runtime)
            workers.append(worker)
            selector.register(worker.stdout_fd, selectors.EVENT_READ, (worker, "out"))
            selector.register(worker.stderr_fd, selectors.EVENT_READ, (worker, "err"))
            worker.give(todo.popleft() if todo else None)
        while any(w.open_streams for w in workers):
            for key, _ in selector.select(timeout=1.0):
                worker, stream = key.data
                lines = worker.read(stream)
                if lines is None:  # end of that stream
                    selector.unregister(key.fd)
                    if not worker.open_streams and worker.job is not None:
                        failed.append((worker.job, worker.death()))
                        worker.job = None
                    continue
                for message in lines:
                    if "done" in message and worker.job is not None:
                        job, worker.job = worker.job, None
                        error = message.get("error")
                        if error:
                            failed.append((job, str(error)))
                        else:
                            done.append(job)
                            caught[job.key] = tuple(CaughtWarning(**w) for w in message.get("warnings", ()))
                            if message.get("repaired"):
                                repaired[job.key] = str(message["repaired"])
                            if message.get("pte"):
                                outputs[job] = (Path(message["pte"]), tuple(Path(p) for p in message["inputs"]))
                        worker.give(todo.popleft() if todo else None)
                    elif "progress" in message and progress is not None:
                        progress(f"exporting {total} models in {count} processes before measuring "
                                 f"({len(done) + len(failed)} done): {message['progress']}")
        # Jobs never handed out (every worker died first) go back to their tests too.
        failed.extend((job, "no export worker was left to take it") for job in todo)
        finished = True
    finally:
        for worker in workers:
            # Interrupted (Ctrl-C, a fixture timeout): a worker in the middle of an export would finish it first.
            worker.stop(kill=not finished)
        selector.close()
    return PoolReport(processes=count, seconds=time.perf_counter() - started, exported=tuple(done),
                      failed=tuple(failed), warnings=caught, repaired=repaired, outputs=outputs)


class _Worker:
    """One ``python -m pytest_sme2.program.pool`` process: its pipes, its current job, its stderr's tail."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self._stdin: IO[bytes] = proc.stdin
        self.stdout_fd = proc.stdout.fileno()
        self.stderr_fd = proc.stderr.fileno()
        self._partial = {"out": b"", "err": b""}
        self.open_streams = {"out", "err"}
        self.stderr_tail: deque[str] = deque(maxlen=_STDERR_TAIL)
        self.job: ExportJob | None = None

    @classmethod
    def start(cls, cache_dir: Path, model_sources: tuple[str, ...], cwd: Path | None = None,
              runtime: Path | None = None) -> _Worker:
        # The session's environment as it is, thread settings included: a factory that runs its model (BatchNorm
        # calibration) computes other weights with another thread count, and so another cache key.
        command = [sys.executable, "-m", "pytest_sme2.program.pool", "--cache-dir", str(cache_dir)]
        for source in model_sources:
            command += ["--models", source]
        env = None
        if cwd is not None or runtime is not None:
            env = worker_env(cwd or Path.cwd(), runtime)
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=cwd, env=env)
        return cls(proc)

    def give(self, job: ExportJob | None) -> None:
        """Send ``job`` (None: no more work, close its stdin)."""
        self.job = job
        with contextlib.suppress(OSError, ValueError):  # a worker that died is noticed on its stdout
            if job is None:
                self._stdin.close()
                return
            self._stdin.write((json.dumps(dataclasses.asdict(job)) + "\n").encode())
            self._stdin.flush()

    def read(self, stream: str) -> list[dict[str, Any]] | None:
        """The complete messages now readable on ``stream`` ("out" or "err"); None at its end."""
        fd = self.stdout_fd if stream == "out" else self.stderr_fd
        chunk = os.read(fd, 65536)
        if not chunk:
            self.open_streams.discard(stream)
            return None
        data = self._partial[stream] + chunk
        *lines, self._partial[stream] = data.split(b"\n")
        if stream == "err":
            self.stderr_tail.extend(line.decode(errors="replace") for line in lines if line.strip())
            return []
        messages = []
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                continue  # not ours
            if isinstance(message, dict):
                messages.append(message)
        return messages

    def death(self) -> str:
        """Why the worker stopped in the middle of a job: its exit status and the last line it wrote to stderr."""
        code = self.proc.poll()
        if code is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.proc.wait(timeout=_STOP_SECONDS)
        last = self.stderr_tail[-1] if self.stderr_tail else "no output"
        return f"the export worker exited with status {code} ({last})"

    def stop(self, *, kill: bool = False) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stdin.close()
        try:
            if kill:
                self.proc.kill()
            self.proc.wait(timeout=_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


# ------------------------------------------------------------------------------------------------ worker


def worker_env(cwd: Path, runtime: Path | None = None) -> dict[str, str]:
    """The environment of an export worker running in a worktree: the session's, with the worktree's directory kept
    off ``sys.path`` (PYTHONSAFEPATH), so pytest-sme2 itself is the session's, not the commit's copy of it; with
    ``runtime`` (a folder holding another executorch) first on it."""
    env = dict(os.environ)
    env["PYTHONSAFEPATH"] = "1"
    env["PWD"] = str(cwd)
    if runtime is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(runtime), env.get("PYTHONPATH", "")) if p)
    return env


def _serve(cache_dir: Path, model_sources: Sequence[str], requests: IO[str], answer: Callable[[dict[str, Any]],
           None]) -> None:
    """The worker's loop: one export per request line, until the session closes the pipe."""
    from pytest_sme2.errors import Sme2Error
    from pytest_sme2.models import get_model, load_model_sources
    from pytest_sme2.program.export import export_model, find_cached

    load_model_sources(model_sources)
    for line in requests:
        if not line.strip():
            continue
        error: str | None = None
        repaired = ""
        made: dict[str, Any] = {}
        caught: list[warnings.WarningMessage] = []
        try:
            job = ExportJob(**json.loads(line))
            try:
                spec = get_model(job.model)
            except Sme2Error:
                if not job.source:
                    raise
                load_model_sources([job.source])
                spec = get_model(job.model)
            key, _ = find_cached(spec, dtype=job.dtype, backend=job.backend, cache_dir=cache_dir)
            if job.key and key != job.key:
                error = (f"the export worker built {job.label} with another cache key ({key[:12]}, the session's "
                         f"{job.key[:12]}): its factory is not deterministic across processes")
            else:
                # Every warning of the user's code is kept: the session's filters decide when the test re-issues it.
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    exported = export_model(spec, dtype=job.dtype, backend=job.backend, cache_dir=cache_dir,
                                            progress=lambda text: answer({"progress": text}))
                repaired = exported.repaired
                made = {"pte": str(exported.pte_path), "inputs": [str(p) for p in exported.input_files]}
        except Exception as exc:  # one job's failure is its test's to report; the worker goes on
            lines = str(exc).strip().splitlines()
            error = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
        answer({"done": True, "error": error, "repaired": repaired, **made, "warnings": [
            {"message": str(w.message), "category": f"{w.category.__module__}:{w.category.__qualname__}",
             "filename": w.filename, "lineno": w.lineno} for w in caught]})


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pytest_sme2.program.pool",
                                     description="an export worker of a pytest-sme2 session (reads jobs on stdin)")
    parser.add_argument("--cache-dir", required=True, type=Path)
    parser.add_argument("--models", action="append", default=[])
    args = parser.parse_args(argv)
    # Our answers get stdout to themselves: what torch and executorch print goes to stderr with the rest.
    answers = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)

    def answer(message: dict[str, Any]) -> None:
        answers.write(json.dumps(message) + "\n")

    _serve(args.cache_dir, args.models, sys.stdin, answer)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
