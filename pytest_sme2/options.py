"""Option value types shared by the CLI and the pytest plugin (argparse ``type=`` callables).

Each raises ``argparse.ArgumentTypeError`` with a message that says what is allowed, so both
front ends reject bad single values at parse time with the option's name attached by argparse.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def percent(text: str) -> float:
    """``5``, ``5%`` or ``2.5 %`` -> 5.0 / 2.5 (percent, 0 < x < 100)."""
    raw = str(text).strip().removesuffix("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage; use e.g. 5 or 5%") from None
    if not 0 < value < 100:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range; a margin is between 0 and 100 percent")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; use e.g. 30") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or more")
    return value


def nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; use e.g. 1") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def executable_file(text: str) -> Path:
    """An existing, executable file (an ``executor_runner`` build)."""
    p = Path(text).expanduser()
    if not p.exists():
        raise argparse.ArgumentTypeError(f"{text} does not exist; pass the path of your executor_runner build")
    if not p.is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a file; pass the executor_runner binary itself")
    if not os.access(p, os.X_OK):
        raise argparse.ArgumentTypeError(f"{text} is not executable; run: chmod +x {text}")
    return p.resolve()


def existing_file(text: str) -> Path:
    p = Path(text).expanduser()
    if not p.is_file():
        raise argparse.ArgumentTypeError(f"{text} does not exist or is not a file")
    return p
