"""Per-session state shared by the fixtures: options, the device runner (built once), the run directory.

Also the one way plugin code calls the library: :func:`call` turns a library error into a test failure
with the error's message (no traceback from deep inside executorch).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from pytest_sme2.errors import ConfigError, Sme2Error
from pytest_sme2.options import Sme2Options

if TYPE_CHECKING:
    from pytest_sme2.runners.base import Runner


class Sme2Session:
    """Per-session state: options, the device runner (built on first use), the output dir."""

    def __init__(self, config: pytest.Config, options: Sme2Options, out_dir: Path) -> None:
        from pytest_sme2.store.artifacts import ArtifactStore
        from pytest_sme2.store.baseline import BaselineStore

        self.config = config
        self.options = options
        self.out_dir = out_dir
        self.baselines = BaselineStore(options.baseline_dir)
        self.artifacts = ArtifactStore(options.artifact_dir)
        self.rules: Any = None
        rules_file = options.rules
        if rules_file is not None:
            from pytest_sme2.evidence.categories import CategoryRules

            self.rules = call(lambda: CategoryRules.load(rules_file))
        self._runner: Runner | None = None
        #: (log build, program, inputs, threads) sha256s -> KernelLog: each log build runs once per model
        self._kernel_logs: dict[tuple[Any, ...], Any] = {}
        self._status: LiveStatus | None = None
        #: cache keys of the export pool's models whose export warnings a test has re-issued
        self.reissued: set[str] = set()
        #: how far each unchanged test judged so far moved against its baseline (median ratio): the machine's move,
        #: which a stored comparison's is judged against (pytest_sme2.gate.suite)
        self.controls: list[float] = []
        self._calibration: Any = None

    @property
    def calibrate(self) -> Any:
        """Each test's drift calibration on each device, from the history store (None: ``--sme2-history=none``),
        read once, when the first test is compared with another session's samples."""
        if self.options.history is None:
            return None
        if self._calibration is None:
            from pytest_sme2.history.calibration import HistoryCalibration

            self._calibration = HistoryCalibration(self.options.history)
        return self._calibration

    def third_party(self, label: str) -> Any:
        """Around the plugin's runtime calls: executorch's C++ log, cpuinfo lines and torch/executorch warnings
        go to ``<out dir>/third_party.log``, not into the user's captured output or warnings summary."""
        from pytest_sme2.thirdparty import third_party_output

        return third_party_output(self.out_dir / "third_party.log", label=label, python_output=True)

    @property
    def latency(self) -> str:
        """Where the gate's E2E samples come from (``--sme2-latency``, else untraced with timing builds)."""
        return self.options.latency_mode

    def kernel_log(self, measurement: Any) -> Any:
        """The XNNPACK kernel log of ``measurement``'s arm, from its log build: run once per session per
        (log build, program, inputs), then reused; None when the arm has no log build."""
        from pytest_sme2.measure.profile import record_kernel_log
        from pytest_sme2.runners.base import MODE_LOG
        from pytest_sme2.store.files import file_sha256

        runner = self.runner
        binary = runner.binary_for(measurement.variant, MODE_LOG) if runner.has_build(measurement.variant,
                                                                                       MODE_LOG) else None
        if binary is None:
            return None
        key = (file_sha256(binary), file_sha256(measurement.pte),
               tuple(file_sha256(p) for p in measurement.inputs), measurement.threads)
        if key not in self._kernel_logs:
            arm = f" {measurement.variant}" if measurement.variant else ""
            self.progress(f"{measurement.label}{arm}: XNNPACK log run on {binary}")
            self._kernel_logs[key] = record_kernel_log(runner, measurement)
        return self._kernel_logs[key]

    def executed_kernels(self, measurement: Any, *, counted: bool = False) -> Any:
        """On an emulated device, the kernels that executed for ``measurement``'s arm and program, once per session;
        None elsewhere. When the test also ``counted`` the arm's instructions, the counting process's blocks say it
        (:meth:`counted_run`); otherwise one execution under QEMU's in_asm log."""
        from pytest_sme2.measure.profile import record_executed_kernels

        if not self.runner.records_executed:
            return None
        if counted and self.runner.records_counts:
            run = self.counted_run(measurement)
            return run.executed if run is not None else None
        return self._once_per_arm("executed", measurement, "the kernels that run, from QEMU's in_asm log",
                                  record_executed_kernels)

    def instruction_counts(self, measurement: Any) -> Any:
        """On an emulated device that counts, the instructions one execution of ``measurement``'s arm and program
        executed under emulation, once per session (a count does not change between executions); None elsewhere."""
        run = self.counted_run(measurement)
        return run.counts if run is not None else None

    def counted_run(self, measurement: Any) -> Any:
        """The counting process of ``measurement``'s arm and program (its counts and the kernels it ran), once per
        session; None on a device that cannot count."""
        from pytest_sme2.measure.profile import record_counted_run

        return self._once_per_arm("counts", measurement, "instructions executed under emulation (QEMU)",
                                  record_counted_run)

    def _once_per_arm(self, kind: str, measurement: Any, what: str, record: Any) -> Any:
        """``record(runner, measurement)`` once per session for what runs the arm and its program and inputs."""
        from pytest_sme2.store.files import file_sha256

        # What runs the arm (binary, emulator, CPU) is part of the key, not just the arm's name: an arm whose CPU
        # changed within the session must not be shown what another CPU ran.
        runs_it = tuple(sorted((str(k), str(v)) for k, v in self.runner.build_identity(measurement.variant).items()))
        key = (kind, measurement.variant, runs_it, file_sha256(measurement.pte),
               tuple(file_sha256(p) for p in measurement.inputs), measurement.threads)
        if key not in self._kernel_logs:
            self.progress(f"{measurement.label}: {what}")
            self._kernel_logs[key] = record(self.runner, measurement)
        return self._kernel_logs[key]

    def policy(self, test_id: str) -> Any:
        """What this session asks of a baseline check (update, require, confirm, the command to create one)."""
        from pytest_sme2.judge import Policy
        from pytest_sme2.version import __version__

        o = self.options
        return Policy(update_baseline=o.update_baseline, require_baseline="missing" in o.fail_on,
                      confirm=not o.no_confirm, tool_version=__version__,
                      create_command=create_command(test_id, o))

    @property
    def host_lock(self) -> Path | None:
        """The host's measuring lock (:mod:`measure.hostlock`) on this session's device: measurements on this host's
        CPUs take turns across xdist workers and sessions, and exports and builds wait for them; None for a device
        whose registry row says it does not measure here (a phone: each worker's phone is its own device)."""
        from pytest_sme2.measure.hostlock import LOCK_NAME
        from pytest_sme2.runners.registry import device

        o = self.options
        return o.cache_dir / LOCK_NAME if device(o.device).host_lock else None

    @property
    def runner(self) -> Runner:
        if self._runner is None:
            from pytest_sme2.measure.hostlock import heavy_work
            from pytest_sme2.runners.registry import RunnerContext, device

            o = self.options
            # pytest-sme2's own runner is built once per content and kept beside the export cache.
            # In a pool the worker's device is its pool entry's (its options), not the worker index's choice.
            context = RunnerContext(progress=self.progress, worker=None if o.pool else worker_id(self.config),
                                    runner_cache=o.cache_dir / "runners")
            try:
                row = device(o.device)
                # Building pytest-sme2's own runner (a compiler, seconds of CPU) waits for a sibling's measurement.
                with heavy_work(self.host_lock if row.builds_own_runner(o) else None, what="building the runner",
                                progress=self.progress):
                    runner = row.make(o, context)
                runner.heartbeat = self.status.tick  # a long runner process shows its elapsed time
                self._runner = runner
            except Sme2Error as exc:
                error = exc
            else:
                return runner
            if isinstance(error, ConfigError):
                # A wrong choice of device or option (several phones and no serial, a mask naming no
                # CPU) is wrong for every test: one usage error for the session, not a failure per test.
                pytest.exit(f"pytest-sme2: {error}", returncode=pytest.ExitCode.USAGE_ERROR)
            fail_without_chain(str(error))
        return self._runner

    def progress(self, message: str) -> None:
        """Show ``message`` as a transient status at the end of pytest's current line (TTY only; see LiveStatus)."""
        self.status.show(message)

    @property
    def status(self) -> LiveStatus:
        if self._status is None:
            self._status = LiveStatus(self.config)
        return self._status


class LiveStatus:
    """A transient status at the end of pytest's progress line, for work that takes seconds to minutes (an export, a
    measurement's blocks, one emulated execution): ``[sme2: <test>: <what>: block 2/6, sme2_on, 1:05 elapsed]``.

    pytest writes ``file.py ..`` and the dots of each result on one line; a full line of our own would split
    it (the file name is reprinted before the next result). So on a terminal the status is written after
    what is on the line (cut to the terminal's width), rewritten by :meth:`tick` while a runner process runs, and
    erased again before the next update and when the work ends; on anything else (a CI log) nothing is written
    mid-line, and under pytest-xdist the controller's own reporting rules — the ``sme2 performance`` section sums the
    work up instead.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.shown = 0
        reporter = config.pluginmanager.getplugin("terminalreporter")
        writer = getattr(reporter, "_tw", None)
        self.writer = writer
        self.file = getattr(writer, "_file", None)
        #: None until first asked: whether the file is a terminal can only be seen with capture suspended (during
        #: a test, fd capture points file descriptor 1 at a temporary file)
        self._tty: bool | None = None
        self.enabled = bool(self.file is not None and getattr(writer, "hasmarkup", False) and worker_id(config) is None)
        self._text = ""
        self._since = 0.0

    def show(self, text: str) -> None:
        if self.enabled:
            if text != self._text:
                self._text, self._since = text, time.monotonic()
            self._write(self._render())

    def tick(self) -> None:
        """The same status with its elapsed time now (called while a runner process runs)."""
        if self.enabled and self._text:
            self._write(self._render())

    def clear(self) -> None:
        self._text = ""
        if self.enabled and self.shown:
            self._write("")

    def _render(self) -> str:
        elapsed = int(time.monotonic() - self._since)
        when = f", {elapsed // 60}:{elapsed % 60:02d} elapsed" if elapsed >= 1 else ""
        # pytest names the test it runs in PYTEST_CURRENT_TEST ("file.py::test_a[x] (call)")
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rpartition(" (")[0].rpartition("::")[2]
        text = f" [sme2: {test + ': ' if test else ''}{self._text}{when}]"
        # Never wider than what is left of the line: a wrapped status could not be erased, and would split it.
        room = int(getattr(self.writer, "fullwidth", 80)) - int(getattr(self.writer, "width_of_current_line", 0)) - 1
        if len(text) > room:
            text = text[:max(room - 2, 0)] + "…]" if room >= 12 else ""
        return text

    def _write(self, text: str) -> None:
        capman = self.config.pluginmanager.getplugin("capturemanager")
        if capman is not None:
            with capman.global_and_fixture_disabled():
                self._raw(text)
        else:  # pragma: no cover - capture is always registered in practice
            self._raw(text)

    def _raw(self, text: str) -> None:
        assert self.file is not None
        if self._tty is None:
            self._tty = bool(getattr(self.file, "isatty", lambda: False)())
        if not self._tty:
            self.enabled = False
            return
        erase = "\b" * self.shown + " " * self.shown + "\b" * self.shown
        self.file.write(erase + text)
        self.file.flush()
        self.shown = len(text)


def worker_id(config: pytest.Config) -> str | None:
    """The xdist worker id (``gw0``...), or None on the controller / without xdist."""
    worker = getattr(config, "workerinput", None)
    return None if worker is None else str(worker.get("workerid"))


def call(fn: Callable[[], Any]) -> Any:
    """Run library code; its errors fail the test with their message, not a traceback."""
    try:
        return fn()
    except Sme2Error as exc:
        message = str(exc)
    fail_without_chain(message)


def fail_without_chain(message: str) -> NoReturn:
    # Called outside the except block, so pytest does not print the library error as a chained cause.
    pytest.fail(message, pytrace=False)



def create_command(test_id: str, options: Sme2Options) -> str:
    """``pytest '<test id>' --sme2-update-baseline`` with every option of this run that decides the baseline.

    Rebuilt from the resolved options (not from ``sys.argv``): every ``--sme2-*`` value that differs from
    its default, paths absolute, as one ``--opt=value`` token each (a separate path argument would move
    pytest's rootdir, see the README).
    """
    import shlex

    from pytest_sme2.options import OPTION_TABLE

    skip = {"update_baseline", "strict", "require_baseline", "fail_on", "json", "markdown", "bmf", "gab",
            "pytest_benchmark", "no_confirm", "out_dir", "history"}
    parts = ["pytest", shlex.quote(test_id), "--sme2-update-baseline"]
    for spec in OPTION_TABLE:
        key = spec.dest.removeprefix("sme2_")
        if key in skip:
            continue
        value = getattr(options, key)
        if spec.action == "store_true":
            if value:
                parts.append(spec.flag)
            continue
        if key in ("baseline_dir", "cache_dir", "artifact_dir") and value is not None:
            parts.append(f"{spec.flag}={shlex.quote(str(value))}")
            continue
        if value is None or value in (spec.default, ()):
            continue
        values = value if isinstance(value, tuple) else (value,)
        parts += [f"{spec.flag}={shlex.quote(str(v))}" for v in values]
    return " ".join(parts)
