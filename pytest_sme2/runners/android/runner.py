"""The Android runner: one run = deploy -> conditions -> run on the device -> pull the trace -> RunResult.

Each :meth:`AndroidRunner.run`: (optional cool-down) -> fixed performance mode on (optional) ->
thermal status before -> ``timeout ... taskset <mask> executor_runner ... </dev/null`` -> thermal
status after -> the trace checked and pulled -> fixed performance mode restored, run directory
deleted. The trace is read exactly like a host trace
(:func:`~pytest_sme2.runners.host.result_from_trace`). A failed run never returns a result.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import adbutils

from ...artifacts import file_sha256
from ...device import ANDROID_FACTS_SCRIPT, DeviceInfo, device_info_from_facts
from ...errors import ConfigError, DeviceError, Sme2Error
from ...export import load_pte_check
from ..base import MODE_TRACE, SME2_OFF, SME2_ON, BinaryBuilds, RunRequest, RunResult, check_threads
from ..host import BUILD_HINT, new_run_dir, result_from_trace
from .adb import AdbLink, join_args, quote
from .conditions import HOT_STATUS, parse_mask, pin_mask, read_thermal, set_fixed_performance, thermal_invalid_reason
from .deploy import REMOTE_ROOT, Deployed, deploy, remote_path
from .run import device_command, exit_error, pull_trace, run_on_device
from .selection import parse_serials


class AndroidRunner(BinaryBuilds):
    """Run ``.pte`` files with one or two ``executor_runner`` builds on an Android device over adb.

    ``runner_path`` is the SME2-on (default) build, ``runner_off`` the SME2-off build. ``libcxx`` is
    pushed beside them when given. ``big_cores`` is a taskset hex mask, ``"none"`` (unpinned) or None
    (the fastest cluster, widened to cover ``threads``). ``cooldown_s`` is slept before every run
    but the first; ``fixed_performance`` turns Android's fixed performance mode on around each run.
    ``client`` lets tests pass an ``adbutils.AdbClient``; by default one is made from the
    environment (``ANDROID_ADB_SERVER_PORT``).
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
        big_cores: str | None = None,
        cooldown_s: float = 0.0,
        fixed_performance: bool = False,
        worker: str | None = None,
        client: adbutils.AdbClient | None = None,
        remote_root: str = REMOTE_ROOT,
        hot_status: int = HOT_STATUS,
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
        for path in {*builds.values(), *([Path(libcxx)] if libcxx else [])}:
            if not path.is_file():
                raise ConfigError(f"{path} does not exist or is not a file; {BUILD_HINT} for arm64-v8a "
                                  "(see docs/android.md) and pass its path")
        if timeout_s is not None and timeout_s <= 0:
            raise ConfigError(f"timeout_s must be positive (got {timeout_s}); set --sme2-timeout")
        if cooldown_s < 0:
            raise ConfigError(f"cooldown must be 0 or more seconds (got {cooldown_s}); set --sme2-cooldown")
        self.builds = builds
        self.libcxx = Path(libcxx) if libcxx else None
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
            device = self._link.device()
            features = self._link.call("reading adb features", device.get_features)
            if "shell_v2" not in features.split(","):
                # Without it adbutils silently falls back to a shell that cannot report exit codes.
                raise DeviceError(
                    f"Android device {self.serial} does not offer adb's shell protocol v2 (features: "
                    f"{features or 'none'}), so runner exit codes cannot be read: it needs Android 7 or later "
                    "and an up-to-date adb (`adb version`)"
                )
            facts = self._link.shell(ANDROID_FACTS_SCRIPT, what="reading device facts")
            info = device_info_from_facts(self.serial, facts.stdout)
            self._info = info
        return self._info

    # ------------------------------------------------------------------------------ identity

    def identity(self) -> Mapping[str, Any]:
        """The phone's :class:`~pytest_sme2.identity.DeviceIdentity` as a dict: cores, ISA, SoC, model, SDK."""
        return self.device_info().identity().to_dict()

    def build_identity(self, variant: str | None) -> Mapping[str, Any]:
        """What is under test besides the ``.pte``: the sha256 of ``variant``'s runner (and ``libc++_shared.so``)."""
        ident: dict[str, Any] = {"runner": "executor_runner", "runner_sha256": file_sha256(self.runner_for(variant))}
        if self.libcxx is not None:
            ident["libcxx_sha256"] = file_sha256(self.libcxx)
        return ident

    def run_settings(self) -> Mapping[str, Any]:
        """How runs are made on the phone, which changes their speed: pinning and fixed performance mode."""
        return {"pinning": "auto" if self.pin == "" else (self.pin or "none"),
                "fixed_performance": self.fixed_performance}

    def fingerprint(self) -> Mapping[str, Any]:
        """Device facts that do not drift, the sha256 of every pushed binary, pinning and clock mode."""
        hashes = {variant or "default": file_sha256(path)[:16] for variant, path in self.builds.items()}
        fp: dict[str, Any] = {**self.device_info().fingerprint(), "runner": self.name, "runner_sha256": hashes,
                              **self.run_settings()}
        if self.libcxx is not None:
            fp["libcxx_sha256"] = file_sha256(self.libcxx)[:16]
        return fp

    def build_of(self, variant: str | None, build: Path | None = None) -> str:
        path = build or self.runner_for(variant)
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
                remote_run: str, remote_trace: str, mask: str | None, timeout: float) -> str:
        """The device shell command for one run; every argument shlex-quoted."""
        return device_command(request, deployed, runner, self.libcxx, remote_run=remote_run,
                              remote_trace=remote_trace, mask=mask, timeout=timeout)

    def run(self, request: RunRequest) -> RunResult:
        """Deploy, run once on the device, pull and read the trace; any failure raises, nothing stale is kept."""
        if request.mode != MODE_TRACE:
            raise ConfigError(
                f"the Android runner runs one traced executor_runner build per variant; a {request.mode!r} run "
                "needs a separate build of that kind"
            )
        runner = request.build or self.runner_for(request.variant)
        load_pte_check(request.pte)  # a foreign or cut .pte: say so here, before anything is pushed
        info = self.device_info()
        check_threads(request.threads, info.cores, f"Android device {self.serial}")
        timeout = min(t for t in (self.timeout_s, request.timeout_s) if t is not None)
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        files = [runner, *([self.libcxx] if self.libcxx else []), request.pte, *(Path(p) for p in request.inputs or ())]
        deployed = self.deploy(files, run_id)
        mask = self.cpu_mask_for(request.threads)
        remote_run = f"{self.remote_root}/runs/{run_id}"
        remote_trace = f"{remote_run}/trace.etdump"
        command = self.command(request, deployed, runner, remote_run=remote_run, remote_trace=remote_trace,
                               mask=mask, timeout=timeout)
        local_dir = new_run_dir(request)
        trace_path = local_dir / f"{request.stem}.etdump"
        log_path = local_dir / f"{request.stem}.log"
        slept = 0.0
        if self._runs and self.cooldown_s > 0:
            time.sleep(self.cooldown_s)  # let the phone shed the previous block's heat
            slept = self.cooldown_s
        self._runs += 1
        cleanup_note = ""
        failed = True
        if self.fixed_performance:
            set_fixed_performance(self._link, True, self._info)
        try:
            # A fresh directory, and any trace at the path removed: only this run can write one there.
            self._link.shell(f"mkdir -p {quote(remote_run)} && rm -f {quote(remote_trace)}",
                             what="preparing the run directory")
            before = read_thermal(self._link)
            started = time.perf_counter()
            result = run_on_device(self._link, command, timeout=timeout, grace_s=self.timeout_grace_s,
                                   runner=runner, request=request)
            wall_s = time.perf_counter() - started
            after = read_thermal(self._link)
            log_path.write_bytes(result.stdout + result.stderr)
            output = (result.stdout + result.stderr).decode("utf-8", errors="replace")
            if result.returncode != 0:
                raise exit_error(result.returncode, runner, request, serial=self.serial, command=command, output=output,
                                 log_path=log_path, timeout=timeout)
            pull_trace(self._link, remote_trace, trace_path, runner=runner, command=command, output=output)
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
        return result_from_trace(
            runner_name=self.name, runner_text=f"executor_runner {runner} on Android device {self.serial}",
            request=request, build=self.build_of(request.variant, request.build), cmd=command, run_dir=local_dir,
            trace_path=trace_path, log_path=log_path, wall_s=wall_s, metadata=metadata,
        )
