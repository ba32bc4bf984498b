"""One measurement at a time on a host: an inter-process lock around the blocks of a measurement.

Two measurements at once on one machine skew each other without a trace in the evidence: another busy process on
the other core slowed XNNPACK 4-14 % with the measuring thread's CPU/wall still at 1 (:mod:`pytest_sme2.device.load`).
pytest-xdist's workers (``-n 2``), and two sessions of one project, each measure; so every measurement takes this
lock (``fcntl.flock`` on a file in the cache directory the workers share) for its blocks, and only for them: exports,
log runs and analysis run in parallel. A measurement that has to wait says so through its progress callback, and
its time budget starts when it holds the lock: waiting is never measured.

**Heavy work yields to a measurement.** The lock alone made measurements take turns, but a sibling worker's export
(torch.export and the XNNPACK passes: seconds of a core), runner build (a compiler) or trace analysis ran beside a
measurement, the very disturbance the lock is for. Such work holds the same lock *shared* (:func:`heavy_work`): any
number of exports and builds run at once, but not while a measurement holds it, and a measurement waits until they end.
Nothing deadlocks within a process: heavy work inside its own process' measurement (the looks' analysis) goes ahead,
and a measurement inside its own process' heavy work turns that hold into the measurement's.

Where ``fcntl`` does not exist (Windows) measurements are not serialized.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

from pytest_sme2.store.files import open_lock_file

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None  # type: ignore[assignment]

#: The lock file's name in the cache directory.
LOCK_NAME = "measuring.lock"

# The lock files this process holds: a measurement inside another (none today) must not wait for itself.
_HELD: set[str] = set()
# The lock files this process holds shared for heavy work: (file descriptor, holds) per lock file.
_SHARED: dict[str, list[int]] = {}
_GUARD = threading.Lock()

#: How a holder of heavy work ends its line in the lock file.
_HEAVY = " (an export, build or analysis)"

_WHAT = ("the host's measuring lock (in the cache directory: --sme2-cache-dir, or --cache-dir of pytest-sme2 "
         "profile)")


@contextlib.contextmanager
def measuring(lock_file: Path | None, *, what: str = "a measurement",
              progress: Callable[[str], None] | None = None) -> Iterator[float]:
    """Hold the host's measuring lock ``lock_file`` (None: no lock) while the block runs; yields the seconds waited.

    The holder writes who it is into the file (pid, what, since when), so a waiting measurement can name it.
    """
    key = _key(lock_file)
    with _GUARD:
        shared = _SHARED.get(key) if key is not None else None
    if key is None or lock_file is None or key in _HELD:  # no lock, or this process measures already
        yield 0.0
        return
    # Inside this process' own heavy work: its shared hold becomes the measurement's (a second descriptor would wait
    # for this process' own shared lock forever). Converting drops the shared hold first, so it cannot deadlock.
    fd = shared[0] if shared else open_lock_file(lock_file, what=_WHAT)
    try:
        def waiting(holder: str) -> None:
            if progress is not None:
                whose = "pytest-sme2's own work" if holder.endswith(_HEAVY) else "another measurement"
                progress(f"{what}: waiting for {whose} on this host ({holder}; lock {lock_file})")

        waited = _take(fd, fcntl.LOCK_EX, waiting)
        try:
            _write_holder(fd, what)
            with _GUARD:
                _HELD.add(key)
            yield waited
        finally:
            with _GUARD:
                _HELD.discard(key)
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_UN)
    finally:
        if not shared:
            os.close(fd)


@contextlib.contextmanager
def heavy_work(lock_file: Path | None, *, what: str = "heavy work",
               progress: Callable[[str], None] | None = None) -> Iterator[float]:
    """Hold the host's measuring lock ``lock_file`` shared (None: no lock) while CPU-heavy work of pytest-sme2's own
    runs (an export, a runner build, an analysis); yields the seconds waited for a measurement to end.

    Any number of holders share it; a measurement (:func:`measuring`) waits for all of them, and they for it. Within
    a process that measures, or already holds it, the work goes ahead at once.
    """
    key = _key(lock_file)
    with _GUARD:
        shared = key is not None and key in _SHARED and key not in _HELD
        if shared:
            _SHARED[str(key)][1] += 1
    if key is None or lock_file is None or key in _HELD:  # no lock, or inside this process' own measurement
        yield 0.0
        return
    if shared:
        try:
            yield 0.0
        finally:
            _release_shared(key)
        return
    fd = open_lock_file(lock_file, what=_WHAT)
    try:
        def waiting(holder: str) -> None:
            if progress is not None:
                progress(f"{what}: waiting for the measurement on this host to end ({holder}; lock {lock_file}): an "
                         "export, build or analysis beside it would disturb it")

        waited = _take(fd, fcntl.LOCK_SH, waiting)
        _write_holder(fd, what, heavy=True)
        with _GUARD:
            _SHARED[key] = [fd, 1]
    except BaseException:  # Ctrl-C while taking it: a descriptor left open would hold the lock until exit
        with _GUARD:
            if _SHARED.get(key, [None])[0] == fd:  # ours, not another thread's hold
                del _SHARED[key]
        os.close(fd)
        raise
    try:
        yield waited
    finally:
        _release_shared(key)


def _release_shared(key: str) -> None:
    with _GUARD:
        hold = _SHARED.get(key)
        if hold is None:
            return
        hold[1] -= 1
        if hold[1] > 0:
            return
        del _SHARED[key]
    try:
        fcntl.flock(hold[0], fcntl.LOCK_UN)
    finally:
        os.close(hold[0])


def _key(lock_file: Path | None) -> str | None:
    """How this process knows ``lock_file`` among the locks it holds; None when there is nothing to lock."""
    return None if lock_file is None or fcntl is None else str(Path(lock_file).resolve())


def _take(fd: int, how: int, waiting: Callable[[str], None]) -> float:
    """Lock ``fd`` (``how``: ``LOCK_EX`` or ``LOCK_SH``), first telling ``waiting`` whom it waits for when it must;
    returns the seconds waited."""
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
        return 0.0
    except BlockingIOError:
        waiting(_read(fd) or "another process")
    started = time.monotonic()
    fcntl.flock(fd, how)
    return time.monotonic() - started


def _write_holder(fd: int, what: str, *, heavy: bool = False) -> None:
    """Say who holds the lock (pid, what, since when) in its file, for a process that has to wait to name."""
    since = datetime.now(timezone.utc).strftime("%H:%M:%S")
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: {what}, since {since} UTC{_HEAVY if heavy else ''}\n".encode(), 0)


def _read(fd: int) -> str:
    with contextlib.suppress(OSError):
        return os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
    return ""


__all__ = ["LOCK_NAME", "heavy_work", "measuring"]
