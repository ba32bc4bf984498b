"""Process plumbing of a runner run as a child process: reaping it with its rusage, killing its process group.

:func:`wait_with_rusage` reaps the child with ``os.wait4``, so a run carries its own CPU time against its wall time
and its involuntary context switches; a timeout or Ctrl-C kills the child's whole process group
(:func:`kill_group`). Used by the host and QEMU runners; :func:`shell_exit_hint` by the ssh and adb ones.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def signal_text(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f" (killed by {signal.Signals(-returncode).name})"
        return f" (killed by signal {-returncode})"
    if returncode > 128:
        with contextlib.suppress(ValueError):
            return f" (a shell's report of {signal.Signals(returncode - 128).name})"
    return ""


#: Seconds between two heartbeats of a running runner process (:attr:`~pytest_sme2.runners.host.HostRunner.heartbeat`).
TICK_S = 1.0


def shell_exit_hint(returncode: int, where: str) -> str:
    """What a remote shell's exit code says by itself (the ssh and adb runners): 127, a command not found on ``where``
    (``"the host"``, ``"the device"``); above 128, killed by a signal; else ""."""
    if returncode == 127:
        return f" (a command was not found on {where})"
    if returncode > 128:
        return f" (killed by signal {returncode - 128}: the runner crashed)"
    return ""


def timeout_message(where: str, timeout: float, pte: str, log_path: Path) -> str:
    """What the ssh and adb runners say of a run killed at ``--sme2-timeout``."""
    return (f"{where} timed out after {timeout:g} s running {pte} and was killed. Raise --sme2-timeout if the model "
            f"is just slow; the log is {log_path}")


def wait_with_rusage(proc: subprocess.Popen[bytes], timeout: float, *, tick: Callable[[], None] | None = None
                     ) -> tuple[int, resource.struct_rusage, float]:
    """Reap ``proc`` within ``timeout`` s: (exit code, its rusage, ``perf_counter()`` when it was seen to end).

    ``os.wait4`` gives the child's own CPU time and context switches, exactly, whatever else this
    process runs. On Linux a pidfd wakes us the moment the child exits, so the end time is exact;
    elsewhere we poll as ``Popen.wait`` does (the end time is then late by up to 50 ms). Raises
    ``subprocess.TimeoutExpired`` with the child still running. ``tick`` is called every :data:`TICK_S` while the
    child runs (never after it ended: the end time stays exact).
    """
    deadline = time.monotonic() + timeout
    next_tick = time.monotonic() + TICK_S
    pidfd = None
    with contextlib.suppress(AttributeError, OSError):
        pidfd = os.pidfd_open(proc.pid)
    delay = 0.0005
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                ended = time.perf_counter()
                proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must know it was reaped
                return proc.returncode, usage, ended
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout)
            if tick is not None and now >= next_tick:
                tick()
                next_tick = now + TICK_S
            wait = min(remaining, max(next_tick - now, 0.0)) if tick is not None else remaining
            if pidfd is not None:
                select.select([pidfd], [], [], wait)
            else:
                time.sleep(min(delay, wait))
                delay = min(delay * 2, 0.05)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
