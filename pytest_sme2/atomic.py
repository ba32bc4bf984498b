"""Crash-safe file writes: nothing the user stored is ever half-written.

Every file pytest-sme2 writes for keeps (baselines, reports, analysis JSON, CSVs) goes through
:func:`write_atomic`: the bytes go to a temporary file in the same directory, are flushed and
fsync'ed, then ``os.replace`` swaps it in. A reader sees the old file or the new one, never a mix;
a SIGKILL mid-write leaves the old file and, at worst, a ``.tmp-*`` file that is never read.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import Sme2Error

TMP_PREFIX = ".tmp-sme2-"


def write_atomic(path: str | Path, data: str | bytes, *, what: str = "file") -> Path:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename); create parent dirs."""
    p = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    _refuse_special(p, what)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=p.suffix, dir=p.parent)
    except OSError as exc:
        raise _write_error(p, what, exc) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).chmod(0o644)
        Path(tmp).replace(p)
    except OSError as exc:
        with contextlib.suppress(OSError):
            Path(tmp).unlink()
        raise _write_error(p, what, exc) from None
    remove_stale_tmp(p.parent)
    return p


def check_writable_dir(directory: str | Path, *, what: str = "output directory") -> Path:
    """Create ``directory`` if needed and prove a file can be written there, before any long work.

    Raises the same error a failed write would (what, path, reason, fix), so a run that would only
    fail when saving its result fails at once instead.
    """
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=TMP_PREFIX, dir=d)
    except OSError as exc:
        raise _write_error(d, what, exc) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        Path(probe).unlink()
    return d


#: A temp file older than this is debris of a killed writer, never one still being written.
STALE_TMP_SECONDS = 3600.0


def remove_stale_tmp(directory: Path) -> None:
    """Delete ``.tmp-sme2-*`` files that a SIGKILLed writer left behind (they would be committed with
    the baselines otherwise); recent ones may belong to a concurrent writer and are kept."""
    cutoff = time.time() - STALE_TMP_SECONDS
    for debris in directory.glob(f"{TMP_PREFIX}*"):
        with contextlib.suppress(OSError):
            if debris.is_file() and debris.stat().st_mtime < cutoff:
                debris.unlink()


def _refuse_special(path: Path, what: str) -> None:
    """Refuse a target that exists and is not a regular file (or a link to one).

    The rename would replace it: ``--json /dev/full`` run as root swapped the device node for a
    JSON file, and the write "succeeded" without ever reaching the disk-full device.
    """
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # absent (or unreachable: the write below reports that)
    if stat.S_ISREG(mode):
        return
    from .errors import BaselineError

    kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a device, pipe or socket)"
    raise BaselineError(
        f"cannot write {what} {path}: it is {kind}, which an atomic write would replace; "
        "pass the path of a regular file. Nothing was changed."
    )


def _write_error(path: Path, what: str, exc: OSError) -> Sme2Error:
    from .errors import BaselineError

    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
        fix = "make the directory writable or choose another location"
    elif exc.errno == errno.ENOSPC:
        fix = "free disk space or choose another location"
    else:
        fix = "check the path"
    err = BaselineError(f"cannot write {what} {path}: {reason}; {fix}. Nothing was changed.")
    return err


def open_lock_file(path: str | Path, *, what: str = "lock file") -> int:
    """The file descriptor of lock file ``path``, created (and its directory) if missing; a path that cannot hold it
    (a file where a directory must be, no permission) raises the error a failed write would, naming ``what``."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        return os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise _write_error(p, what, exc) from None


@contextlib.contextmanager
def file_lock(path: str | Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (created if missing) for read-modify-write cycles."""
    fd = open_lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
