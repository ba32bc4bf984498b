"""Runners: local ExecuTorch runtime, host ``executor_runner``, Android device, emulated Armv9 (see ``base``).

Which devices there are, what each takes and how its runner is made is the registry's
(:mod:`pytest_sme2.runners.registry`); :func:`make_runner` is its keyword spelling, for scripts and tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_sme2.runners.base import SME2_OFF, SME2_ON, Runner, RunRequest, RunResult

__all__ = ["SME2_OFF", "SME2_ON", "RunRequest", "RunResult", "Runner", "make_runner"]


def make_runner(device: str, *, runner_path: Path | None = None, timeout_s: float = 600.0,
                cooldown_s: float = 0.0, runner_cache: Path | None = None,
                progress: Callable[[str], None] | None = None, worker: str | None = None, **options: Any) -> Runner:
    """The runner of ``device``, made by its registry row's factory from keywords: ``runner_path`` is the
    ``--sme2-runner`` build, ``timeout_s`` and ``cooldown_s`` the ``timeout`` and ``cooldown`` options, every other
    keyword a :class:`~pytest_sme2.options.Sme2Options` field (``runner_off``, ``serial``, ``qemu``, ...).
    ``runner_cache``: where pytest-sme2's own runner builds are kept (None: ``build_runner``'s default)."""
    from pytest_sme2.options import Sme2Options
    from pytest_sme2.runners.registry import RunnerContext
    from pytest_sme2.runners.registry import make_runner as make

    opts = Sme2Options(device=device, runner=runner_path, timeout=timeout_s, cooldown=cooldown_s, **options)
    return make(opts, RunnerContext(progress=progress, worker=worker, runner_cache=runner_cache))
