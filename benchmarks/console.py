"""What a benchmark prints: results on stdout (kept, for its results file), progress on stderr with the load.

Every benchmark script talks through one :class:`Console`, so the results text a script writes is exactly
what it printed, and progress lines never mix into it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def shown_path(path: Path) -> str:
    """A path as a result names it: relative to the repository when it is in it, else absolute (a file in /tmp)."""
    resolved = path.resolve()
    return resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else resolved.as_posix()


class Console:
    """``say`` a result line (printed and kept in ``lines``); ``progress`` a status line (stderr only)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)

    def progress(self, text: str) -> None:
        print(f"  .. {text} (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
