"""How long work tells the user what it is doing: one line of text at a time.

The export, the runner build and the measurement take a ``Progress`` callback; the front ends choose where its lines
go (the CLI: stderr, rewritten in place on a terminal; the plugin: pytest's terminal). This module is at the bottom of
the house so that every layer can take one without importing a layer above it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

#: A callback taking one line of progress text (no trailing newline).
Progress = Callable[[str], None]


def to_stderr(message: str) -> None:
    """Progress lines to whatever ``sys.stderr`` is when they are written, flushed at once."""
    print(message, file=sys.stderr, flush=True)
