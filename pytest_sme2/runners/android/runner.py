"""The Android runner: one run = deploy -> conditions -> run on the device -> pull the trace -> RunResult.

Each :meth:`AndroidRunner.run`: (optional cool-down) -> fixed performance mode on (optional) ->
thermal status before -> ``timeout ... taskset <mask> executor_runner ... </dev/null`` -> thermal
status after -> the trace checked and pulled -> fixed performance mode restored, run directory
deleted. The trace is read exactly like a host trace
(:func:`~pytest_sme2.runners.executor_runner.result_from_trace`). A failed run never returns a result.

``RunRequest.mode`` picks the build, as on the host: a ``timing`` run uses the timing-only build and
reads its E2E times from the ``Iteration`` lines of its output; a ``log`` run uses the XNNPACK-logging
build, whose log goes to logcat (tag ``XNNPACK``): logcat is cleared (``logcat -c``) before the run and
its XNNPACK lines are dumped after it (``logcat -d -s XNNPACK:*``, at most :data:`LOGCAT_MAX_LINES`
lines, within :data:`LOGCAT_TIMEOUT` s), then kept with the runner's own output in the run's log.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import adbutils

from pytest_sme2.device.facts import DeviceInfo
from pytest_sme2.errors import ConfigError, Sme2Error
from pytest_sme2.program.export import load_pte_check
from pytest_sme2.runners.android.adb import AdbLink, join_args, quote
from pytest_sme2.runners.android.conditions import (
    HOT_STATUS,
    parse_mask,
    pin_mask,
    read_thermal,
    set_fixed_performance,
    thermal_invalid_reason,
)
from pytest_sme2.runners.android.deploy import REMOTE_ROOT, Deployed, deploy, remote_path
from pytest_sme2.runners.android.run import device_command, exit_error, pull_trace, run_on_device
from pytest_sme2.runners.android.selection import parse_serials
from pytest_sme2.runners.android.source import read_info
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
)
from pytest_sme2.runners.executor_runner import (
    BUILD_HINT,
    DEFAULT_TRACE_NAME,
    FinishedRun,
    new_run_dir,
    result_from_log,
    result_from_trace,
)
from pytest_sme2.store.files import file_sha256

if TYPE_CHECKING:
    from pytest_sme2.options import Sme2Options
    from pytest_sme2.runners.registry import RunnerContext

#: The logcat tag XNNPACK logs under on Android.
LOGCAT_TAG = "XNNPACK"
#: At most this many logcat lines are read back after a log run (MobileNetV3's debug log: ~600 lines).
LOGCAT_MAX_LINES = 200_000
#: Seconds allowed for clearing or dumping logcat.
LOGCAT_TIMEOUT = 60.0


class AndroidRunner(BinaryBuilds):
    """Run ``.pte`` files with one or two ``executor_runner`` builds on an Android device over adb.

    ``runner_path`` is the SME2-on (default) build, ``runner_off`` the SME2-off build; ``runner_timing`` /
    ``runner_off_timing`` and ``runner_log`` / ``runner_off_log`` are their optional timing-only and
    XNNPACK-logging builds (see ``docs/run-modes.md``). ``libcxx`` is pushed beside them when given, and so is every
    shared library in ``runner_libs`` (a directory: a runner linked against executorch's shared libraries needs them on
    the device too); their directories go on ``LD_LIBRARY_PATH``.
    ``big_cores`` is a taskset hex mask, ``"none"`` (unpinned) or None (the fastest cluster, widened to
    cover ``threads``). ``cooldown_s`` is slept before every run but the first; ``fixed_performance``
    turns Android's fixed performance mode on around each run. ``client`` lets tests pass an
    ``adbutils.AdbClient``; by default one is made from the environment (``ANDROID_ADB_SERVER_PORT``).
    """

    name = "android"

    def __init__(
        self,
        runner_path: str | Path | None = None,
        runner_off: str | Path | None = None,
        *,
        serial: str | None = None,
        timeout_s: float | None = 600.0,
        libcxx: str | Path | None = None,
        runner_libs: str | Path | None = None,
        big_cores: str | None = None,
        cooldown_s: float = 0.0,
        fixed_performance: bool = False,
        worker: str | None = None,
        client: adbutils.AdbClient | None = None,
        remote_root: str = REMOTE_ROOT,
        hot_status: int = HOT_STATUS,
        runner_timing: str | Path | None = None,
        runner_off_timing: str | Path | None = None,
        runner_log: str | Path | None = None,
        runner_off_log: str | Path | None = None,
    ) -> None:
        if runner_path is None:
            raise ConfigError(
                "--sme2-device=android needs --sme2-runner PATH: an arm64-v8a executor_runner built with the "
                "Android NDK and -DEXECUTORCH_BUILD_DEVTOOLS=ON -DEXECUTORCH_ENABLE_EVENT_TRACER=ON "
                "(see docs/android.md)"
            )
        builds: dict[str | None, Path] = {None: Path(runner_path), SME2_ON: Path(runner_path)}
        if runner_off is not None:
            builds[SME2_OFF] = Path(runner_off)
        mode_builds: dict[str, dict[str | None, Path]] = {}
        for mode, on, off in ((MODE_TIMING, runner_timing, runner_off_timing), (MODE_LOG, runner_log, runner_off_log)):
            arm: dict[str | None, Path] = {}
            if on is not None:
                arm[None] = arm[SME2_ON] = Path(on)
            if off is not None:
                arm[SME2_OFF] = Path(off)
            if arm:
                mode_builds[mode] = arm
        extra = [p for arm in mode_builds.values() for p in arm.values()]
        for path in {*builds.values(), *extra, *([Path(libcxx)] if libcxx else [])}:
            if not path.is_file():
                raise ConfigError(f"{path} does not exist or is not a file; {BUILD_HINT} for arm64-v8a "
                                  "(see docs/android.md) and pass its path")
        if timeout_s is not None and timeout_s <= 0:
            raise ConfigError(f"timeout_s must be positive (got {timeout_s}); set --sme2-timeout")
        if cooldown_s < 0:
            raise ConfigError(f"cooldown must be 0 or more seconds (got {cooldown_s}); set --sme2-cooldown")
        self.builds = builds
        self.mode_builds = mode_builds
        self.libcxx = Path(libcxx) if libcxx else None
        self.runner_libs = shared_libraries(Path(runner_libs)) if runner_libs is not None else ()
        self.requested = parse_serials(serial) or parse_serials(os.environ.get("ANDROID_SERIAL"))
        self.worker = worker
        self.timeout_s = timeout_s
        self.pin = "" if big_cores is None else parse_mask(big_cores)  # "" auto, None unpinned
        self.cooldown_s = float(cooldown_s)
        self.fixed_performance = bool(fixed_performance)
        self.remote_root = remote_root.rstrip("/")
        self.hot_status = hot_status
        #: Seconds the host waits beyond the device-side ``timeout`` before giving up on adb itself.
        self.timeout_grace_s = 30.0
        self._link = AdbLink(client, self.requested, worker)
        self._info: DeviceInfo | None = None
        self._runs = 0

    # ------------------------------------------------------------------------------ the device

    @property
    def client(self) -> adbutils.AdbClient:
        return self._link.client

    @property
    def serial(self) -> str:
        """The selected device's serial (selected on first use)."""
        return self._link.serial

    def device_info(self) -> DeviceInfo:
        """The selected device's facts (read once; thermal status as of that first read)."""
        if self._info is None:
            self._info = read_info(self._link)
        return self._info

    # ------------------------------------------------------------------------------ identity

    def identity(self) -> Mapping[str, Any]:
        """The phone's :class:`~pytest_sme2.device.identity.DeviceIdentity` as a dict: cores, ISA, SoC, model, SDK."""
        return self.device_info().identity().to_dict()

    def build_identity(self, variant: str | None) -> Mapping[str, Any]:
        """What is under test besides the ``.pte``: the sha256 of ``variant``'s runner builds that give numbers
        (traced, timing) and of ``libc++_shared.so``."""
        ident: dict[str, Any] = {"runner": "executor_runner", **self.builds_identity(variant)}
        if self.libcxx is not None:
            ident["libcxx_sha256"] = file_sha256(self.libcxx)
        if self.runner_libs:
            ident["runner_libs_sha256"] = {lib.name: file_sha256(lib) for lib in self.runner_libs}
        return ident

    @property
    def shared_libs(self) -> tuple[Path, ...]:
        """The shared libraries pushed beside the runner: ``libc++_shared.so``, then ``--sme2-runner-libs``."""
        return (*([self.libcxx] if self.libcxx else []), *self.runner_libs)

    @property
    def emulated(self) -> bool:
        """Whether the phone is an emulator (its identity names one): its time is then emulated time."""
        return bool(self.device_info().identity().emulator)

    def run_settings(self) -> Mapping[str, Any]:
        """How runs are made on the phone, which changes their speed: pinning and fixed performance mode."""
        return {"pinning": "auto" if self.pin == "" else (self.pin or "none"),
                "fixed_performance": self.fixed_performance}

    def fingerprint(self) -> Mapping[str, Any]:
        """Device facts that do not drift, the sha256 of every pushed binary, pinning and clock mode."""
        fp: dict[str, Any] = {**self.device_info().fingerprint(), "runner": self.name,
                              "runner_sha256": self.build_hashes(),
                              **self.run_settings()}
        if self.libcxx is not None:
            fp["libcxx_sha256"] = file_sha256(self.libcxx)[:16]
        if self.runner_libs:
            fp["runner_libs_sha256"] = {lib.name: file_sha256(lib)[:16] for lib in self.runner_libs}
        return fp

    def build_of(self, variant: str | None, build: Path | None = None, mode: str = MODE_TRACE) -> str:
        path = build or self.binary_for(variant, mode)
        return f"{path} (sha256 {file_sha256(path)[:12]})"

    # ------------------------------------------------------------------------------ deploy

    def remote_path(self, sha256: str, name: str) -> str:
        return remote_path(self.remote_root, sha256, name)

    def deploy(self, files: Sequence[Path], run_id: str) -> dict[Path, Deployed]:
        """Make each file's content present on the device; push only what is missing or damaged."""
        return deploy(self._link, files, run_id, self.remote_root)

    # ------------------------------------------------------------------------------ run

    def cpu_mask_for(self, threads: int) -> str | None:
        """The taskset mask for a run with ``threads`` threads (None = unpinned)."""
        if self.pin is None:
            return None
        return pin_mask(self.pin, self.device_info(), threads, self.serial)

    def command(self, request: RunRequest, deployed: Mapping[Path, Deployed], runner: Path, *,
                remote_run: str, remote_trace: str | None, mask: str | None, timeout: float) -> str:
        """The device shell command for one run; every argument shlex-quoted."""
        return device_command(request, deployed, runner, self.shared_libs, remote_run=remote_run,
                              remote_trace=remote_trace, mask=mask, timeout=timeout)

    def run(self, request: RunRequest) -> RunResult:
        """Deploy, run once on the device, pull and read the trace (or the log); any failure raises, nothing
        stale is kept."""
        runner = request.build or self.binary_for(request.variant, request.mode)
        traced = request.mode == MODE_TRACE
        load_pte_check(request.pte)  # a foreign or cut .pte: say so here, before anything is pushed
        info = self.device_info()
        check_threads(request.threads, info.logical_cpus, f"Android device {self.serial}")
        timeout = min(t for t in (self.timeout_s, request.timeout_s) if t is not None)
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        files = [runner, *self.shared_libs, request.pte, *(Path(p) for p in request.inputs or ())]
        deployed = self.deploy(files, run_id)
        mask = self.cpu_mask_for(request.threads)
        remote_run = f"{self.remote_root}/runs/{run_id}"
        # A timing or log build is given no --etdump_path (without the tracer it refuses the flag); a build
        # with the tracer then writes model.etdump into the run directory, which is how one is caught.
        remote_trace = f"{remote_run}/{'trace.etdump' if traced else DEFAULT_TRACE_NAME}"
        command = self.command(request, deployed, runner, remote_run=remote_run,
                               remote_trace=remote_trace if traced else None, mask=mask, timeout=timeout)
        local_dir = new_run_dir(request)
        trace_path = local_dir / f"{request.stem}.etdump"
        log_path = local_dir / f"{request.stem}.log"
        slept = 0.0
        logged = request.mode == MODE_LOG
        if not logged:  # a log run gives no numbers: no cool-down before it, none counted after it
            if self._runs and self.cooldown_s > 0:
                time.sleep(self.cooldown_s)  # let the phone shed the previous block's heat
                slept = self.cooldown_s
            self._runs += 1
        cleanup_note = ""
        logcat = ""
        stray_trace = False
        failed = True
        if self.fixed_performance:
            set_fixed_performance(self._link, True, self._info)
        try:
            # A fresh directory, and any trace at the path removed: only this run can write one there.
            self._link.shell(f"mkdir -p {quote(remote_run)} && rm -f {quote(remote_trace)}",
                             what="preparing the run directory")
            before = read_thermal(self._link)
            if logged:
                self._link.shell("logcat -c", what="clearing logcat before the XNNPACK log run", timeout=LOGCAT_TIMEOUT)
            started = time.perf_counter()
            result = run_on_device(self._link, command, timeout=timeout, grace_s=self.timeout_grace_s,
                                   runner=runner, request=request)
            wall_s = time.perf_counter() - started
            after = read_thermal(self._link)
            if logged:
                logcat = read_logcat(self._link)
            log_path.write_bytes(result.stdout + result.stderr + logcat.encode("utf-8"))
            output = (result.stdout + result.stderr).decode("utf-8", errors="replace")
            if result.returncode != 0:
                raise exit_error(result.returncode, runner, request, serial=self.serial, command=command, output=output,
                                 log_path=log_path, timeout=timeout)
            if traced:
                pull_trace(self._link, remote_trace, trace_path, runner=runner, command=command, output=output)
            else:
                device = self._link.device()
                stray_trace = self._link.call("checking for a trace", lambda: device.sync.stat(remote_trace)).mode != 0
            failed = False
        finally:
            if self.fixed_performance:
                try:
                    set_fixed_performance(self._link, False, self._info)
                except Sme2Error:
                    if not failed:
                        raise
                    # The run's own error (often: the device is gone) says more than a failed restore.
            if self._link.connected:
                cleanup_note = self._link.try_shell(join_args(["rm", "-rf", remote_run]),
                                                    what="removing the run directory")
        invalid = thermal_invalid_reason(self.serial, before, after, self.hot_status)
        metadata: dict[str, Any] = {
            "device": info.to_dict(),
            "serial": self.serial,
            "device_command": command,
            "device_run_dir": remote_run,
            "cpu_mask": mask or "none",
            "thermal_status_before": before,
            "thermal_status_after": after,
            "thermal_hot_status": self.hot_status,
            "fixed_performance": self.fixed_performance,
            "cooldown_s": slept,
            "pushed": [d.remote for d in deployed.values() if d.pushed],
        }
        if invalid:
            metadata["invalid_reason"] = invalid
        if cleanup_note:
            metadata["cleanup_failed"] = cleanup_note
        if before is None or after is None:
            metadata["thermal_note"] = ("the thermal status could not be read (no 'Thermal Status' from dumpsys "
                                        "thermalservice): thermal validity is unchecked for this run")
        if not traced and logged:
            metadata["logcat_lines"] = logcat.count("\n")
            metadata.pop("invalid_reason", None)  # a log run's numbers are not used: heat cannot spoil them
        finished = FinishedRun(
            runner_name=self.name, runner_text=f"executor_runner {runner} on Android device {self.serial}",
            request=request, build=self.build_of(request.variant, request.build, request.mode), cmd=command,
            run_dir=local_dir, log_path=log_path, wall_s=wall_s, metadata=metadata,
        )
        if not traced:
            return result_from_log(finished, stray_trace=Path(remote_trace) if stray_trace else None)
        return result_from_trace(finished, trace_path)


def shared_libraries(directory: Path) -> tuple[Path, ...]:
    """Every shared library (``*.so``, ``*.so.N``) directly in ``directory``, by name; none is a usage error."""
    if not directory.is_dir():
        raise ConfigError(f"--sme2-runner-libs {directory} is not a directory: pass the directory of the shared "
                          "libraries the runner is linked against (e.g. executorch's lib/)")
    libs = tuple(sorted((p for p in directory.iterdir() if p.is_file() and (p.suffix == ".so" or ".so." in p.name)),
                        key=lambda p: p.name))
    if not libs:
        raise ConfigError(f"--sme2-runner-libs {directory} holds no shared library (*.so): pass the directory of the "
                          "libraries the runner is linked against (e.g. executorch's lib/)")
    return libs


def read_logcat(link: AdbLink) -> str:
    """The XNNPACK lines logcat holds now (it was cleared before the run), bounded in lines and time.

    A header line names what was read, so the run's log says where its XNNPACK part came from.
    """
    command = join_args(["logcat", "-d", "-v", "threadtime", "-m", str(LOGCAT_MAX_LINES), "-s", f"{LOGCAT_TAG}:*"])
    out = link.shell(command, what="reading the XNNPACK log from logcat", timeout=LOGCAT_TIMEOUT)
    text = str(out.stdout)
    return f"--- logcat -s {LOGCAT_TAG}:* (cleared before the run; at most {LOGCAT_MAX_LINES} lines) ---\n{text}"


def from_options(options: Sme2Options, context: RunnerContext) -> AndroidRunner:
    """The registry's factory (:mod:`pytest_sme2.runners.registry`): every Android option passed through; the phone
    chosen now, so several phones without ``--sme2-serial`` (a ConfigError) or none at all is found before anything
    is exported or measured, not by the first test."""
    android = AndroidRunner(runner_path=options.runner, runner_off=options.runner_off, serial=options.serial,
                            timeout_s=options.timeout, runner_timing=options.runner_timing,
                            runner_off_timing=options.runner_off_timing, runner_log=options.runner_log,
                            runner_off_log=options.runner_off_log, libcxx=options.libcxx,
                            runner_libs=options.runner_libs, big_cores=options.big_cores, cooldown_s=options.cooldown,
                            fixed_performance=options.fixed_performance, worker=context.worker)
    _ = android.serial
    return android
