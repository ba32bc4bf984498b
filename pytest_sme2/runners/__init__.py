"""Runners: local ExecuTorch runtime, host ``executor_runner``, Android device (see ``base``).

:func:`make_runner` is the one place that turns a device name and runner paths into a runner.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from .base import SME2_OFF, SME2_ON, Runner, RunRequest, RunResult

DEVICES = ("local", "host", "android")

__all__ = ["DEVICES", "SME2_OFF", "SME2_ON", "RunRequest", "RunResult", "Runner", "make_runner"]


def make_runner(
    device: str,
    *,
    runner_path: Path | None = None,
    runner_off: Path | None = None,
    serial: str | None = None,
    timeout_s: float = 600.0,
    **android_options: object,
) -> Runner:
    """The runner for ``device`` ("local", "host" or "android")."""
    if device == "local":
        from .local import LocalRunner

        return LocalRunner()
    if device == "host":
        if runner_path is None:
            raise ConfigError(
                "--sme2-device=host needs --sme2-runner PATH: an executor_runner built with "
                "-DEXECUTORCH_BUILD_DEVTOOLS=ON -DEXECUTORCH_ENABLE_EVENT_TRACER=ON"
            )
        from .host import HostRunner

        variants: dict[str | None, Path] = {None: runner_path, SME2_ON: runner_path}
        if runner_off is not None:
            variants[SME2_OFF] = runner_off
        return HostRunner(runner_path, variants=variants, timeout_s=timeout_s)
    if device == "android":
        from .android import AndroidRunner

        android = AndroidRunner(runner_path=runner_path, runner_off=runner_off, serial=serial,
                                timeout_s=timeout_s, **android_options)  # type: ignore[arg-type]
        # Choose the phone now: several phones without --sme2-serial (a ConfigError) or none at all
        # is found before anything is exported or measured, not by the first test.
        _ = android.serial
        return android
    raise ConfigError(f"unknown device {device!r}; allowed: {', '.join(DEVICES)}")
