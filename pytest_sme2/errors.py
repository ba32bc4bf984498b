"""Errors raised by pytest-sme2: one root, a few kinds, each message teaching the fix.

Every message says what happened, what was found, what is allowed, and how to fix it, and names
the file, device or option involved. Front ends print ``str(error)`` without a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence


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
