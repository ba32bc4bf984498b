"""One measurement at a time on a host: an inter-process lock around the blocks of a measurement.

Two measurements at once on one machine skew each other without a trace in the evidence: another busy process on
the other core slowed XNNPACK 4-14 % with the measuring thread's CPU/wall still at 1 (:mod:`pytest_sme2.load`).
pytest-xdist's workers (``-n 2``), and two sessions of one project, each measure; so every measurement takes this
lock (``fcntl.flock`` on a file in the cache directory the workers share) for its blocks, and only for them: exports,
log runs and analysis run in parallel. A measurement that has to wait says so through its progress callback, and
its time budget starts when it holds the lock: waiting is never measured.

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

from .atomic import open_lock_file

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None  # type: ignore[assignment]

#: The lock file's name in the cache directory.
LOCK_NAME = "measuring.lock"

# The lock files this process holds: a measurement inside another (none today) must not wait for itself.
_HELD: set[str] = set()
_GUARD = threading.Lock()


@contextlib.contextmanager
def measuring(lock_file: Path | None, *, what: str = "a measurement",
              progress: Callable[[str], None] | None = None) -> Iterator[float]:
    """Hold the host's measuring lock ``lock_file`` (None: no lock) while the block runs; yields the seconds waited.

    The holder writes who it is into the file (pid, what, since when), so a waiting measurement can name it.
    """
    if lock_file is None or fcntl is None:
        yield 0.0
        return
    key = str(Path(lock_file).resolve())
    with _GUARD:
        reentered = key in _HELD
    if reentered:
        yield 0.0
        return
    fd = open_lock_file(lock_file, what="the host's measuring lock (in the cache directory: --sme2-cache-dir, or "
                                      "--cache-dir of pytest-sme2 profile)")
    waited = 0.0
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd) or "another process"
            if progress is not None:
                progress(f"{what}: waiting for another measurement on this host ({holder}; lock {lock_file})")
            started = time.monotonic()
            fcntl.flock(fd, fcntl.LOCK_EX)
            waited = time.monotonic() - started
        since = datetime.now(timezone.utc).strftime("%H:%M:%S")
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}: {what}, since {since} UTC\n".encode(), 0)
        with _GUARD:
            _HELD.add(key)
        try:
            yield waited
        finally:
            with _GUARD:
                _HELD.discard(key)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _read(fd: int) -> str:
    with contextlib.suppress(OSError):
        return os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
    return ""


__all__ = ["LOCK_NAME", "measuring"]
