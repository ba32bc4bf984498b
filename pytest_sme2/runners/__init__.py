"""Runners: local ExecuTorch runtime, host ``executor_runner``, Android device, emulated Armv9 (see ``base``).

:func:`make_runner` is the one place that turns a device name and runner paths into a runner.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pytest_sme2.errors import ConfigError
from pytest_sme2.runners.base import SME2_OFF, SME2_ON, Runner, RunRequest, RunResult

DEVICES = ("local", "host", "android", "qemu")

__all__ = ["DEVICES", "SME2_OFF", "SME2_ON", "RunRequest", "RunResult", "Runner", "make_runner"]


def make_runner(
    device: str,
    *,
    runner_path: Path | None = None,
    runner_off: Path | None = None,
    serial: str | None = None,
    timeout_s: float = 600.0,
    runner_timing: Path | None = None,
    runner_off_timing: Path | None = None,
    runner_log: Path | None = None,
    runner_off_log: Path | None = None,
    qemu: Path | None = None,
    runner_cache: Path | None = None,
    aarch64_wheel: Path | None = None,
    progress: Callable[[str], None] | None = None,
    **android_options: object,
) -> Runner:
    """The runner for ``device`` ("local", "host", "android" or "qemu").

    ``runner_timing``/``runner_off_timing`` and ``runner_log``/``runner_off_log`` are the optional timing-only
    and XNNPACK-logging builds of the SME2-on (default) and SME2-off arms (see ``docs/run-modes.md``).
    Without ``runner_path``, "host" and "qemu" build pytest-sme2's own runner against the installed executorch
    wheel (:mod:`pytest_sme2.runners.build`, cached in ``runner_cache``), for this host or for linux-aarch64; it is
    its own timing build (no tracer unless asked for a trace).
    """
    if device == "local":
        given = [flag for flag, path in (("--sme2-runner-timing", runner_timing), ("--sme2-runner-off-timing",
                 runner_off_timing), ("--sme2-runner-log", runner_log), ("--sme2-runner-off-log", runner_off_log))
                 if path is not None]
        if given:
            raise ConfigError(f"{', '.join(given)}: executor_runner builds for --sme2-device=host or android; the "
                              "local device uses the executorch Python runtime (which times untraced runs itself)")
        from pytest_sme2.runners.local import LocalRunner

        return LocalRunner()
    if device == "qemu":
        from pytest_sme2.runners.build import TARGET_LINUX_AARCH64, build_runner
        from pytest_sme2.runners.qemu import QemuRunner, find_qemu

        emulator = find_qemu(qemu)  # before a build: a missing QEMU is the first thing to say
        if runner_path is not None:
            from pytest_sme2.runners.build import cross_compiler, cross_sysroot, host_is_aarch64

            sysroot = "" if host_is_aarch64() else cross_sysroot(cross_compiler())
            emulated = QemuRunner(runner_path, qemu=emulator, sysroot=sysroot, timeout_s=timeout_s)
        else:
            build = build_runner(TARGET_LINUX_AARCH64, cache_dir=runner_cache, wheel=aarch64_wheel,
                                 progress=progress)
            emulated = QemuRunner(build.path, qemu=emulator, sysroot=build.sysroot, timeout_s=timeout_s,
                                  runtime=build.runtime())
        # Probe the emulated CPUs now: a QEMU without SME2 is one usage error for the session, not a failure per test.
        _ = emulated.probes
        return emulated
    if device == "host":
        from pytest_sme2.runners.host import HostRunner

        if runner_path is None:
            from pytest_sme2.runners.build import TARGET_HOST, build_runner

            build = build_runner(TARGET_HOST, cache_dir=runner_cache, progress=progress)
            own = build.path
            # One binary, both run kinds: untraced without --etdump_path (the timing build), traced with it.
            return HostRunner(own, variants={None: own, SME2_ON: own}, timeout_s=timeout_s, timing={None: own,
                              SME2_ON: own}, write_outputs=True, runtime=build.runtime())

        def arms(on: Path | None, off: Path | None) -> dict[str | None, Path]:
            out: dict[str | None, Path] = {None: on, SME2_ON: on} if on is not None else {}
            if off is not None:
                out[SME2_OFF] = off
            return out

        return HostRunner(runner_path, variants=arms(runner_path, runner_off), timeout_s=timeout_s,
                          timing=arms(runner_timing, runner_off_timing), log=arms(runner_log, runner_off_log))
    if device == "android":
        from pytest_sme2.runners.android import AndroidRunner

        android = AndroidRunner(runner_path=runner_path, runner_off=runner_off, serial=serial,
                                timeout_s=timeout_s, runner_timing=runner_timing,
                                runner_off_timing=runner_off_timing, runner_log=runner_log,
                                runner_off_log=runner_off_log, **android_options)  # type: ignore[arg-type]
        # Choose the phone now: several phones without --sme2-serial (a ConfigError) or none at all
        # is found before anything is exported or measured, not by the first test.
        _ = android.serial
        return android
    raise ConfigError(f"unknown device {device!r}; allowed: {', '.join(DEVICES)}")
