"""Errors raised by pytest-sme2: one root, a few kinds, each message teaching the fix.

Every message says what happened, what was found, what is allowed, and how to fix it, and names
the file, device or option involved. Front ends print ``str(error)`` without a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_sme2.version import __version__


class Sme2Error(Exception):
    """Root of every error pytest-sme2 raises on purpose (bad input, failed run, bad baseline)."""

    #: exit status the CLI uses for this kind of error (2 = bad input / usage, 3 = a run failed)
    exit_code: int = 2


class TraceError(Sme2Error):
    """An ETDump trace is missing, not an ETDump, truncated, or holds no execute events."""


class ExportError(Sme2Error):
    """A model could not be found, built or exported to a ``.pte``."""


class ModelError(ExportError):
    """A model name is not registered, or its inputs do not fit."""


class BaselineError(Sme2Error):
    """A stored baseline is unreadable, of the wrong schema, or cannot be written."""


class ConfigError(Sme2Error):
    """An option, marker or threshold value is not allowed."""


class DeviceError(Sme2Error):
    """An Android device is missing, unauthorized, offline, ambiguous or misbehaving."""

    exit_code = 3


class RunnerError(Sme2Error):
    """A runner (subprocess or device command) failed; carries the command, exit code and stderr tail."""

    exit_code = 3

    def __init__(
        self,
        message: str,
        *,
        command: Sequence[str] | str | None = None,
        returncode: int | None = None,
        stderr_tail: str = "",
    ) -> None:
        self.command = command
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        parts = [message]
        if command is not None:
            shown = command if isinstance(command, str) else " ".join(_quote(c) for c in command)
            parts.append(f"  command: {shown}")
        if returncode is not None:
            parts.append(f"  exit code: {returncode}")
        if stderr_tail.strip():
            tail = "\n".join("    " + _printable(line) for line in stderr_tail.strip().splitlines()[-12:])
            parts.append(f"  last lines of output:\n{tail}")
        super().__init__("\n".join(parts))


def _printable(line: str) -> str:
    """One output line fit for a terminal: control characters (escape sequences!) become U+FFFD,
    and a line that is mostly binary is summarized instead of shown."""
    clean = "".join(c if c.isprintable() or c == "\t" else "\ufffd" for c in line)
    if clean and clean.count("\ufffd") > len(clean) // 5:
        return f"({len(line)} characters of binary output, not shown)"
    return clean


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(str(arg))


def tail(text: str | bytes, lines: int = 20) -> str:
    """Return the last ``lines`` lines of a process output, decoded leniently."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def unreadable(path: object, exc: OSError, *, what: str, fix: str, inside: str,
               error: type[Sme2Error] = ConfigError) -> Sme2Error:
    """The error for input file ``path`` (a ``what``: "trace file", "baseline") that ``exc`` kept from being read.

    Missing: ``fix`` says what to pass; a directory: pass the ``inside`` file ("JSON", ".pte") inside it; any other
    reason: the system's words for it.
    """
    if isinstance(exc, FileNotFoundError):
        return error(f"{what} {path} does not exist; {fix}")
    if isinstance(exc, IsADirectoryError):
        return error(f"{what} {path} is a directory; pass the {inside} file inside it")
    return error(f"cannot read {what} {path}: {exc.strerror or exc}")


#: What to do with a stored document that is not one of ours, or damaged (the callers name a better fix).
NOT_OURS_FIX = "restore it or write it again with pytest-sme2"


def check_schema_version(
    data: Mapping[str, Any],
    *,
    reads: int,
    what: str,
    source: object = "",
    error: type[Sme2Error] = ConfigError,
    fix: str = NOT_OURS_FIX,
    missing: int | None = None,
    then: str = "",
) -> int:
    """``data["schema_version"]`` checked: a whole number from 1 to ``reads`` (the newest schema read here).

    The one check of every stored document (baseline, results, history run, analysis, evidence); the error names
    ``what`` and its file ``source`` (empty for a part of a file: the reader of the file adds its name), the version
    found and the fix. A version without a whole number or below 1 is not one of ours (``fix`` says what to do); a
    newer one needs a newer pytest-sme2. ``missing`` is the version of a document without the key (None: such a
    document is not one of ours); ``then`` ends the newer-version message (e.g. that the file was left untouched).
    """
    name = f"{what} {source}" if str(source) else what
    version = data.get("schema_version", missing)
    if not isinstance(version, int) or isinstance(version, bool):
        found = "none at all" if "schema_version" not in data else f"found schema_version {version!r}"
        raise error(f"{name} has no integer schema_version ({found}), so it is not a pytest-sme2 {what}; {fix}")
    if version < 1:
        raise error(f"{name} has schema_version {version}; versions start at 1, so it is not a pytest-sme2 {what}; "
                    f"{fix}")
    if version > reads:
        raise error(f"{name} has schema_version {version}, newer than this pytest-sme2 reads ({reads}); upgrade "
                    f"pytest-sme2 (pip install -U pytest-sme2; this is {__version__}){then}")
    return version
