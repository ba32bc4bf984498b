"""Runners: local ExecuTorch runtime, host ``executor_runner``, Android device (see ``base``)."""

from .base import SME2_OFF, SME2_ON, Runner, RunRequest, RunResult

__all__ = ["SME2_OFF", "SME2_ON", "RunRequest", "RunResult", "Runner"]
