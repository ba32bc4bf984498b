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
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from pytest_sme2.errors import ConfigError, Sme2Error, unreadable

TMP_PREFIX = ".tmp-sme2-"


def write_atomic(path: str | Path, data: str | bytes, *, what: str = "file") -> Path:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename); create parent dirs."""
    p = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    _refuse_special(p, what)
    try:
        replace_atomically(p, lambda fh: fh.write(payload))
    except OSError as exc:
        raise _write_error(p, what, exc) from None
    return p


def replace_atomically(path: Path, write: Callable[[BinaryIO], object], *, mode: int = 0o644) -> None:
    """The one atomic write: ``write`` fills a temporary file beside ``path``, which is flushed, fsync'ed, given
    ``mode`` and renamed over ``path``; parent directories are created.

    Raises the ``OSError`` (the temporary file removed): each caller names what it writes and how to fix it
    (:func:`write_atomic`, the artifact store, the export cache).
    """
    ensure_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=path.suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).chmod(mode)
        Path(tmp).replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            Path(tmp).unlink()
        raise
    remove_stale_tmp(path.parent)


def fsync_path(path: Path) -> None:
    """Flush a file's data or a directory's entries to disk (best effort: a filesystem that cannot is no error).

    A directory written file by file and then renamed into place (the export cache) syncs its files and itself
    first, so after a crash the renamed directory is complete or absent.
    """
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def ensure_dir(directory: str | Path) -> Path:
    """``directory`` created with its parents if missing, as ``mkdir -p``; the error names the true cause.

    ``Path.mkdir(exist_ok=True)`` raises ``FileExistsError`` ("File exists") when the directory's own name is taken
    by a regular file, and ``NotADirectoryError`` without saying which component when one further up is: both
    become a ``NotADirectoryError`` whose text names the regular file in the way.
    """
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        blocker = _file_in_the_way(d)
        if blocker is None:
            raise
        raise NotADirectoryError(errno.ENOTDIR, f"Not a directory ({blocker} is a file)", str(d)) from exc
    return d


def _file_in_the_way(directory: Path) -> Path | None:
    """The first component of ``directory`` (from the root down) that exists and is not a directory."""
    for part in (*reversed(directory.parents), directory):
        if part.exists() and not part.is_dir():
            return part
    return None


def check_writable_dir(directory: str | Path, *, what: str = "output directory") -> Path:
    """Create ``directory`` if needed and prove a file can be written there, before any long work.

    Raises the same error a failed write would (what, path, reason, fix), so a run that would only
    fail when saving its result fails at once instead.
    """
    d = Path(directory)
    try:
        ensure_dir(d)
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
    """Delete ``.tmp-sme2-*`` files and directories that a SIGKILLed writer left behind (they would be committed with
    the baselines otherwise); recent ones may belong to a concurrent writer and are kept."""
    cutoff = time.time() - STALE_TMP_SECONDS
    for debris in directory.glob(f"{TMP_PREFIX}*"):
        with contextlib.suppress(OSError):
            if debris.stat().st_mtime >= cutoff:
                continue
            if debris.is_dir() and not debris.is_symlink():
                shutil.rmtree(debris, ignore_errors=True)
            else:
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
    from pytest_sme2.errors import BaselineError

    kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a device, pipe or socket)"
    raise BaselineError(
        f"cannot write {what} {path}: it is {kind}, which an atomic write would replace; "
        "pass the path of a regular file. Nothing was changed."
    )


def _write_error(path: Path, what: str, exc: OSError) -> Sme2Error:
    from pytest_sme2.errors import BaselineError

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
        ensure_dir(p.parent)
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


#: One file a command reads or writes: (how the user named it: an option or argument, its path).
NamedPath = tuple[str, Path]


def refuse_overlaps(outputs: Iterable[NamedPath], inputs: Iterable[NamedPath] = ()) -> None:
    """Refuse, before anything runs, two outputs on one path and an output on a path the command reads.

    Both front ends call this once with every file they would write and read: the second of two reports on one
    path silently replaced the first (``--sme2-json=r.out --sme2-markdown=r.out`` kept only the markdown), and an
    output on an input's path destroyed the input (``report res.json --out res.json``). Paths are compared resolved
    (``./a`` is ``a``, a symlink is its target) and, when both exist, as files (a hard link is the same file).
    Raises :class:`ConfigError` naming both options and the path.
    """
    outs = [(name, Path(path)) for name, path in outputs]
    ins = [(name, Path(path)) for name, path in inputs]
    for i, (name, path) in enumerate(outs):
        for other, other_path in outs[:i]:
            if same_file(path, other_path):
                raise ConfigError(
                    f"{other} and {name} both name {_both(other_path, path)}: the second write would replace the "
                    "first. Give each its own path; nothing was run or written")
        for other, other_path in ins:
            if same_file(path, other_path):
                raise ConfigError(
                    f"{name} {_both(path, other_path)} is also {other}, which this command reads: writing it would "
                    f"replace the input. Choose another path for {name}; nothing was run or written")


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: equal once resolved, or (both existing) the same inode."""
    if a.resolve() == b.resolve():
        return True
    try:
        return a.samefile(b)
    except OSError:
        return False  # one of them does not exist (yet): only the resolved names could make them one


def _both(a: Path, b: Path) -> str:
    return str(a) if str(a) == str(b) else f"{a} (the same file as {b})"


def files_matching(directory: Path, pattern: str) -> Sequence[Path]:
    """The files ``pattern`` finds in ``directory`` (none when it is not a directory): an input directory's files."""
    return sorted(directory.glob(pattern)) if directory.is_dir() else []


_HASHES: dict[tuple[int, int, int, int], str] = {}


def file_sha256(path: str | Path) -> str:
    """sha256 of a file, remembered per file (device, inode) as it is (size, mtime): a 10 MB ``.pte`` or a runtime
    library is hashed once per process, and a file replaced or rewritten is hashed again. One ``stat``: the runtime's
    libraries are looked up before every block."""
    p = Path(path)
    st = p.stat()
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    digest = _HASHES.get(key)
    if digest is None:
        h = hashlib.sha256()
        with p.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        digest = _HASHES[key] = h.hexdigest()
    return digest


def read_json(path: str | Path, *, what: str, fix: str, error: type[Sme2Error] = ConfigError) -> Any:
    """The JSON document in ``path``, for every reader of a stored file (baselines, results, acknowledgements).

    A file that is missing, a directory, unreadable, not UTF-8 text or not JSON raises ``error`` naming ``what``
    ("baseline", "results file"), the file, what is wrong with it, and ``fix``.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise unreadable(p, exc, what=what, fix=fix, inside="JSON", error=error) from None
    except UnicodeDecodeError as exc:
        raise error(f"{what} {p} is not UTF-8 text (byte {exc.start}), so not a pytest-sme2 {what}; {fix}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{what} {p} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); it was "
                    f"probably cut off or edited: {fix}") from None
