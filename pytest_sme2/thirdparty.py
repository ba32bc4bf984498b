"""Keep what torch, executorch and torchao emit during the plugin's own calls out of the user's output.

The user did not call ``torch.export`` or load an ExecuTorch program; the plugin did. Around those
calls, :func:`third_party_output` sends to a log file:

- Python warnings attributed to torch, torchao or executorch (and the attribution quirks below),
  which would otherwise fill pytest's warnings summary with ~30 deprecation notices per run;
- records of the ``torch``, ``torchao`` and ``executorch`` loggers (torchao's ``Failed to load
  ..._C_mxfp8...so``, torch's ``_pytree`` notices), which pytest would show under "Captured log";
- whatever C code writes to file descriptors 1 and 2;
- with ``python_output=True``, what is written to ``sys.stdout``/``sys.stderr`` too: executorch's
  pybindings send the runtime's C++ log (``[cpuinfo_utils.cpp:...]``, ``[threadpool.cpp:...]``)
  through Python's ``sys.stderr``, which pytest would show under "Captured stderr". Only for blocks
  that run no user code (loading and executing a ``.pte``); an export runs the user's ``forward``,
  whose prints must stay where the user sees them.

Everything else passes: a warning raised in the user's own code (a ``DeprecationWarning`` in their
model's ``forward`` while it is exported) still reaches pytest, with the user's filters applied.

A progress line that suspends pytest's capture inside a block (``capman.global_and_fixture_disabled``)
hands fds 1/2 and ``sys.stdout``/``sys.stderr`` back to pytest's capture for the rest of that block:
print progress between blocks, not inside one.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import re
import sys
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from pytest_sme2.store.files import ensure_dir

#: Packages whose warnings and log records are the plugin's doing, not the user's.
THIRD_PARTY_PACKAGES = ("torch", "torchao", "executorch")


@dataclass(frozen=True)
class Quirk:
    """A warning these packages cause that Python attributes to another module."""

    category: type[Warning]
    message: str  #: regex matched at the start of the message, as ``filterwarnings`` does
    module: str  #: regex of the module it is attributed to (for the filter)
    files: tuple[str, ...]  #: endings of the file it is attributed to (for routing)


#: The same list as the ``filterwarnings`` exceptions in this repository's pyproject.toml.
ATTRIBUTION_QUIRKS: tuple[Quirk, ...] = (
    # executorch.exir calls importlib.resources.read_text, whose own call to the deprecated
    # open_text is attributed to importlib.resources._legacy
    Quirk(DeprecationWarning, r"open_(text|binary) is deprecated", r"importlib\.resources\._legacy$",
          (str(Path("importlib/resources/_legacy.py")),)),
    # torch's pytree LeafSpec deprecation fires while executorch deep-copies exported programs; the
    # deepcopy machinery (copyreg / typing_extensions) is where it is attributed
    Quirk(FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated", r"(copyreg|copy|typing_extensions)$",
          ("copyreg.py", "copy.py", "typing_extensions.py")),
)


@dataclass
class Diverted:
    """What one :func:`third_party_output` block sent to its log (counts grow while the block runs)."""

    log_path: Path
    warnings: int = 0
    log_records: int = 0
    #: why the log could not be written ("" when it was): the output was then dropped
    error: str = ""


@contextlib.contextmanager
def third_party_output(log_path: str | Path | None, *, label: str = "",
                       python_output: bool = False) -> Iterator[Diverted | None]:
    """Divert third-party warnings, log records and C-level stdout/stderr to ``log_path`` (appended).

    ``python_output`` diverts ``sys.stdout``/``sys.stderr`` as well (for runtime calls, which run
    no user code). ``label`` heads this block's section of the log. ``None`` diverts nothing (yields
    ``None``). Blocks nest: an inner block writes to its own log and hands back to the outer one.
    """
    if log_path is None:
        yield None
        return
    path = Path(log_path)
    diverted = Diverted(path)
    log = _open_log(path, diverted)
    try:
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        log.write(f"==== {label or 'third-party output'} ({stamp})\n")
        with _loggers_to(log, diverted), _warnings_to(log, diverted), _outputs_to(log, python_output):
            yield diverted
    finally:
        log.close()


@contextlib.contextmanager
def user_stderr() -> Iterator[TextIO]:
    """A stream to where ``sys.stderr`` writes now, which later :func:`third_party_output` blocks do not divert.

    For a command's own progress lines while it runs the runtime inside a block with ``python_output`` (which points
    ``sys.stderr`` and fd 2 at the log): a dup of fd 2 when ``sys.stderr`` writes there (a terminal, a CI log), else
    the stream itself (pytest's capture, which the block swaps out of ``sys.stderr`` but does not write to).
    """
    original = sys.stderr
    if not _on_fd(original, 2):
        yield original
        return
    stream = io.TextIOWrapper(io.FileIO(os.dup(2), "w"), encoding=getattr(original, "encoding", None) or "utf-8",
                              errors=getattr(original, "errors", None) or "strict", line_buffering=True)
    try:
        yield stream
    finally:
        with contextlib.suppress(Exception):
            stream.close()


class _Log:
    """The log file, never failing the caller: noise lost to a full disk is no loss (the caller's own
    writes to that disk report it)."""

    def __init__(self, file: TextIO, diverted: Diverted) -> None:
        self.file = file
        self.diverted = diverted

    def write(self, text: str) -> int:
        try:
            return self.file.write(text)
        except (OSError, ValueError) as exc:
            self.diverted.error = self.diverted.error or str(exc)
            return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.file.flush()

    def fileno(self) -> int:
        return self.file.fileno()

    def isatty(self) -> bool:
        return False

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.file.close()

    def __getattr__(self, name: str) -> Any:  # encoding, errors
        return getattr(self.file, name)


def _open_log(path: Path, diverted: Diverted) -> Any:
    try:
        ensure_dir(path.parent)
        file = path.open("a", encoding="utf-8", errors="backslashreplace", buffering=1)
    except OSError as exc:
        diverted.error = f"{exc.strerror or exc}"
        # Still diverted, only not kept; closed with the log at the end of the block.
        file = Path(os.devnull).open("a", encoding="utf-8")  # noqa: SIM115
    return _Log(file, diverted)


# ------------------------------------------------------------------------------------------ warnings


@functools.cache
def _package_dirs() -> tuple[str, ...]:
    """Real paths of the installed third-party packages (found without importing them)."""
    import importlib.util

    dirs = []
    for name in THIRD_PARTY_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            dirs.append(os.path.realpath(location) + os.sep)
    return tuple(dirs)


def is_third_party(message: Warning | str, category: type[Warning], filename: str) -> bool:
    """Is this warning torch's, torchao's or executorch's (by where Python attributes it)?"""
    if any(os.path.realpath(filename).startswith(d) for d in _package_dirs()):
        return True
    if category.__name__ == "ExperimentalWarning" and category.__module__.split(".")[0] in THIRD_PARTY_PACKAGES:
        return True
    text = str(message)
    return any(
        issubclass(category, q.category) and re.match(q.message, text, re.IGNORECASE) and filename.endswith(q.files)
        for q in ATTRIBUTION_QUIRKS
    )


@contextlib.contextmanager
def _warnings_to(log: TextIO, diverted: Diverted) -> Iterator[None]:
    # The user's filters keep deciding for warnings attributed to the user's code (an "error" filter
    # still raises there). Third-party ones are logged, once per place, whatever the user's filters say:
    # under ``-W error`` a torch deprecation inside the plugin's export must not fail the user's test.
    # What is shown goes to the log or, for the user's warnings, to whoever showed them before
    # (under pytest: its per-test recorder, through the default showwarning).
    previous = warnings.showwarning

    def route(message: Warning | str, category: type[Warning], filename: str, lineno: int,  # noqa: PLR0917 - showwarning's signature
              file: TextIO | None = None, line: str | None = None) -> None:
        if is_third_party(message, category, filename):
            diverted.warnings += 1
            log.write(warnings.formatwarning(message, category, filename, lineno, line))
        else:
            previous(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():  # restores showwarning and the filters on the way out
        for package in THIRD_PARTY_PACKAGES:
            warnings.filterwarnings("default", module=rf"{package}(\.|$)")
        for q in ATTRIBUTION_QUIRKS:
            warnings.filterwarnings("default", message=q.message, category=q.category, module=q.module)
        warnings.showwarning = route
        yield


# ------------------------------------------------------------------------------------------- logging


class _CountingHandler(logging.StreamHandler):  # type: ignore[type-arg]
    def __init__(self, stream: TextIO, diverted: Diverted) -> None:
        super().__init__(stream)
        self.diverted = diverted
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.diverted.log_records += 1
        super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        pass  # a record that cannot be written to the log is noise lost, not an error of the caller


@contextlib.contextmanager
def _loggers_to(log: TextIO, diverted: Diverted) -> Iterator[None]:
    # Not propagating keeps the records from pytest's capture handler on the root logger; torch's own
    # stderr handler on "torch" is set aside for the block.
    handler = _CountingHandler(log, diverted)
    saved = []
    for name in THIRD_PARTY_PACKAGES:
        logger = logging.getLogger(name)
        saved.append((logger, list(logger.handlers), logger.propagate))
        for old in list(logger.handlers):
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, handlers, propagate in saved:
            logger.removeHandler(handler)
            configured = bool(logger.handlers)  # the package set itself up during the block (first import)
            for old in handlers:
                if old not in logger.handlers:
                    logger.addHandler(old)
            if not configured:
                logger.propagate = propagate


# ------------------------------------------------------------------------------------ file descriptors


def _flush_c_stdio() -> None:
    """Flush C ``stdout``/``stderr`` buffers, so C output lands on the side of the switch it was written on."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).fflush(None)


def _on_fd(stream: Any, fd: int) -> bool:
    try:
        return bool(stream.fileno() == fd)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False


class _Stream:
    """Stands in for ``sys.stdout``/``sys.stderr`` during a block; writes to ``target``.

    Whoever picks it up during the block (a logging handler created by a first ``import torch``,
    pybind11's stream redirect) keeps a working stream afterwards: on the way out ``target``
    becomes the stream this one replaced.
    """

    def __init__(self, target: TextIO) -> None:
        self.target = target

    def write(self, text: str) -> int:
        return self.target.write(text)

    def writelines(self, lines: Iterable[str]) -> None:
        self.target.writelines(lines)

    def flush(self) -> None:
        self.target.flush()

    def isatty(self) -> bool:
        return self.target.isatty()

    def fileno(self) -> int:
        return self.target.fileno()

    def __getattr__(self, name: str) -> Any:  # encoding, errors, buffer, ...
        return getattr(self.target, name)


@contextlib.contextmanager
def _outputs_to(log: TextIO, python_output: bool) -> Iterator[None]:
    """Point fds 1 and 2 at the log, and ``sys.stdout``/``sys.stderr`` too when ``python_output``.

    Otherwise Python-level writes go where they went before, also when ``sys.stdout`` *is* fd 1
    (no pytest capture: the CLI, ``pytest -s``).
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    _flush_c_stdio()
    log.flush()
    saved: list[tuple[int, int]] = []
    swapped: list[tuple[str, Any, _Stream, io.TextIOWrapper | None]] = []
    try:
        for fd, attr in ((1, "stdout"), (2, "stderr")):
            original = getattr(sys, attr)
            try:
                keep = os.dup(fd)
            except OSError:
                continue  # fd closed: nothing to divert
            saved.append((fd, keep))
            owned: io.TextIOWrapper | None = None
            if python_output:
                target: TextIO | None = log
            elif _on_fd(original, fd):
                owned = io.TextIOWrapper(
                    io.FileIO(os.dup(keep), "w"), encoding=getattr(original, "encoding", None) or "utf-8",
                    errors=getattr(original, "errors", None) or "strict", line_buffering=True,
                )
                target = owned
            else:
                target = None  # pytest's capture object: Python writes stay with it
            if target is not None:
                stand_in = _Stream(target)
                swapped.append((attr, original, stand_in, owned))
                setattr(sys, attr, stand_in)
            os.dup2(log.fileno(), fd)
        yield
    finally:
        _flush_c_stdio()
        for attr, original, stand_in, owned in swapped:
            with contextlib.suppress(Exception):
                stand_in.flush()
            stand_in.target = original
            if owned is not None:
                with contextlib.suppress(Exception):
                    owned.close()
            setattr(sys, attr, original)
        for fd, keep in saved:
            os.dup2(keep, fd)
            os.close(keep)
