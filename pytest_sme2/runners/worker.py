"""The local runtime in a worker process, to measure two executorch runtimes side by side.

The local runner (:mod:`pytest_sme2.runners.local`) runs programs in this process, with the one executorch the
process imported. A runtime upgrade is measured in the session (:mod:`pytest_sme2.measure.runtimes`) by running the
baseline's executorch beside the installed one: each in a worker process (``python -m pytest_sme2.runners.worker``)
that runs :class:`~pytest_sme2.runners.local.LocalRunner` blocks on request. The reference's worker puts the folder
the previous executorch was installed in first on its ``sys.path``; the candidate's imports the installed one. Both
arms run in workers alike, so the only difference between them is the runtime, not the process they run in (a
fresh one against the session's, with torch and pytest in its heap).

:class:`RuntimePair` is the runner an interleaved pair is measured with: the reference arm's variant
(:data:`REFERENCE_RUNTIME`) goes to the reference's worker, every other request to the candidate's.

Protocol (JSON lines): the session writes ``{"identity": true}`` or ``{"run": RunRequest fields}`` to the worker's
stdin; it answers ``{"identity": build identity}``, ``{"result": RunResult.to_dict()}`` or ``{"error": text,
"kind": "ConfigError"|"RunnerError"|...}``, and exits when its stdin closes. What executorch prints goes to a log
file, whose tail a failure quotes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from pytest_sme2.errors import ConfigError, RunnerError, Sme2Error
from pytest_sme2.runners.base import Runner, RunRequest, RunResult

#: The variant of the reference arm of a runtime pair: the baseline's runtime, run by :class:`RuntimePair`'s
#: reference worker
REFERENCE_RUNTIME = "baseline_runtime"
#: seconds a worker may take to import its runtime and answer its first request (torch and executorch: ~7 s here)
START_SECONDS = 300.0
_STOP_SECONDS = 10.0
_LOG_TAIL = 4000


class WorkerRuntime(Runner):
    """The executorch Python runtime in a worker process: ``runtime`` (a folder holding another executorch, put first
    on the worker's ``sys.path``) or, None, the installed one. Started on first use; :meth:`close` stops it."""

    name = "local"
    in_process = True  # the executorch runtime, not a runner binary: its sources and the tracer's cost are the local's
    on_this_host = True

    def __init__(self, runtime: Path | None, *, log_dir: Path) -> None:
        self.runtime = runtime
        self._log_dir = log_dir
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None
        self._partial = b""
        self._identity: Mapping[str, Any] | None = None

    @property
    def what(self) -> str:
        return (f"the executorch runtime in {self.runtime}" if self.runtime is not None
                else "the installed executorch runtime")

    def identity(self) -> Mapping[str, Any]:
        from pytest_sme2.device.facts import host_identity

        return host_identity().to_dict()

    def build_identity(self, variant: str | None = None) -> Mapping[str, Any]:
        """The runtime's build identity, as the worker's :meth:`LocalRunner.build_identity` gives it (asked once)."""
        if self._identity is None:
            self._identity = dict(self._ask({"identity": True}, START_SECONDS)["identity"])
        return self._identity

    def run(self, request: RunRequest) -> RunResult:
        fields = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(request).items()}
        if request.inputs is not None:
            fields["inputs"] = [str(p) for p in request.inputs]
        started = self._proc is not None
        answer = self._ask({"run": fields}, request.timeout_s + (0.0 if started else START_SECONDS))
        return RunResult.from_dict(answer["result"])

    def start(self) -> None:
        """Start the worker (importing its runtime takes seconds: better before a measurement than in its first
        block); raises :class:`RunnerError` when it cannot start or import its runtime."""
        self.build_identity()

    def _spawn(self) -> subprocess.Popen[bytes]:
        self._log_dir.mkdir(parents=True, exist_ok=True)
        fd, log = tempfile.mkstemp(prefix="runtime-worker-", suffix=".log", dir=self._log_dir)
        self._log = Path(log)
        command = [sys.executable, "-m", "pytest_sme2.runners.worker"]
        if self.runtime is not None:
            command += ["--runtime", str(self.runtime)]
        env = dict(os.environ)
        env["PYTHONSAFEPATH"] = "1"  # the working directory's own executorch/ (a checkout of it) never shadows either
        try:
            return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=fd, env=env)
        finally:
            os.close(fd)

    def _ask(self, message: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        if self._proc is None:
            self._proc = self._spawn()
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()
        except OSError:
            raise self._died() from None
        answer = self._read(proc.stdout, timeout)
        if "error" in answer:
            kind = {"ConfigError": ConfigError}.get(str(answer.get("kind")), RunnerError)
            raise kind(f"{self.what}: {answer['error']}")
        return answer

    def _read(self, stdout: IO[bytes], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(stdout, selectors.EVENT_READ)
            while True:
                line, nl, rest = self._partial.partition(b"\n")
                if nl:
                    self._partial = rest
                    with contextlib.suppress(ValueError):
                        answer = json.loads(line)
                        if isinstance(answer, dict):
                            return answer
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.close(kill=True)
                    raise RunnerError(f"{self.what} did not answer within {timeout:.0f} s (its worker was stopped); "
                                      f"raise --sme2-timeout if the model is that slow{self._tail()}")
                if selector.select(timeout=remaining):
                    chunk = os.read(stdout.fileno(), 65536)
                    if not chunk:
                        raise self._died()
                    self._partial += chunk

    def _died(self) -> RunnerError:
        """The error of a worker whose pipe closed: its exit status and its log's last lines."""
        proc, code = self._proc, None
        if proc is not None:
            try:
                code = proc.wait(timeout=_STOP_SECONDS)
            except subprocess.TimeoutExpired:  # its pipe closed but it lives on: it is of no use any more
                self.close(kill=True)
        self._proc = None
        return RunnerError(f"the worker process of {self.what} exited with status {code}{self._tail()}")

    def _tail(self) -> str:
        if self._log is None or not self._log.is_file():
            return ""
        text = self._log.read_text(errors="replace")[-_LOG_TAIL:].strip()
        last = [line for line in text.splitlines() if line.strip()][-3:]
        return f" (its log {self._log}: {' | '.join(last)})" if last else f" (its log {self._log} is empty)"

    def close(self, *, kill: bool = False) -> None:
        """Stop the worker (``kill``: at once); the log of one that ended cleanly is removed, a failed one's kept."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            assert proc.stdin is not None
            proc.stdin.close()
        try:
            if kill:
                proc.kill()
            proc.wait(timeout=_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.returncode == 0 and self._log is not None:
            self._log.unlink(missing_ok=True)


class RuntimePair(Runner):
    """Two local runtimes measured side by side: requests of variant :data:`REFERENCE_RUNTIME` run on ``reference``
    (the baseline's executorch), every other one on ``candidate`` (the installed one)."""

    name = "local"
    in_process = True
    on_this_host = True

    def __init__(self, reference: WorkerRuntime, candidate: WorkerRuntime) -> None:
        self.reference = reference
        self.candidate = candidate

    def _of(self, variant: str | None) -> WorkerRuntime:
        return self.reference if variant == REFERENCE_RUNTIME else self.candidate

    def variants(self) -> tuple[str | None, ...]:
        return (None, REFERENCE_RUNTIME)

    def identity(self) -> Mapping[str, Any]:
        return self.candidate.identity()

    def build_identity(self, variant: str | None) -> Mapping[str, Any]:
        return self._of(variant).build_identity()

    def run(self, request: RunRequest) -> RunResult:
        if request.variant == REFERENCE_RUNTIME:
            # The worker's local runner has one build: the request is its default one, its files named apart.
            result = self.reference.run(dataclasses.replace(request, variant=None, label=request.stem))
            return dataclasses.replace(result, variant=REFERENCE_RUNTIME)
        return self.candidate.run(request)

    def close(self) -> None:
        for worker in (self.reference, self.candidate):
            worker.close()


# ------------------------------------------------------------------------------------------------ worker


def _serve(requests: IO[str], answer: Any) -> None:
    from pytest_sme2.runners.local import LocalRunner

    runner = LocalRunner()
    for line in requests:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
            if message.get("identity"):
                answer({"identity": dict(runner.build_identity(None))})
                continue
            fields = dict(message["run"])
            for key in ("pte", "out_dir", "build"):
                if fields.get(key) is not None:
                    fields[key] = Path(fields[key])
            if fields.get("inputs") is not None:
                fields["inputs"] = tuple(Path(p) for p in fields["inputs"])
            answer({"result": runner.run(RunRequest(**fields)).to_dict()})
        except Sme2Error as exc:
            answer({"error": str(exc), "kind": type(exc).__name__})
        except Exception as exc:  # the session reports it as the run's failure, with the worker's log
            answer({"error": f"{type(exc).__name__}: {exc}", "kind": "RunnerError"})


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pytest_sme2.runners.worker",
                                     description="a local-runtime worker of a pytest-sme2 session (reads requests on "
                                                 "stdin)")
    parser.add_argument("--runtime", type=Path, help="a folder holding another executorch, put first on sys.path")
    args = parser.parse_args(argv)
    if args.runtime is not None:
        # Before anything imports executorch: this folder's executorch (and its dist-info, which names its version)
        # is found first.
        sys.path.insert(0, str(args.runtime))
    answers = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # what executorch prints goes to the log with the rest

    def answer(message: dict[str, Any]) -> None:
        answers.write(json.dumps(message) + "\n")

    _serve(sys.stdin, answer)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
