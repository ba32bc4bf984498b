"""How measured quantities read in text: milliseconds, shares of E2E, ratios, changes.

One spelling per quantity, shared by the recommendations, the report tables and the charts, so a
number reads the same in a sentence, a table cell and a chart label. Every function returns ``—``
for an unknown (None or non-finite) value instead of ``nan``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import Enum

UNKNOWN = "—"


class TextEnum(str, Enum):
    """An enumeration whose members read as their value in text (str(), f-strings): ``pass``, not ``Status.PASS``."""

    def __str__(self) -> str:
        return str(self.value)


def _known(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def fmt_ms(x: float | None) -> str:
    """Milliseconds, without the unit: 3 decimals, 4 below 0.1 ms (XNNPACK resolves 1 µs)."""
    if x is None or not math.isfinite(x):
        return UNKNOWN
    return f"{x:.3f}" if abs(x) >= 0.1 or x == 0 else f"{x:.4f}"


def fmt_pct(share: float | None) -> str:
    """A share (0.082) as ``8.2%``."""
    return f"{share * 100:.1f}%" if share is not None and _known(share) else UNKNOWN


def fmt_x(ratio: float | None) -> str:
    """A ratio as ``2.59×``."""
    return f"{ratio:.2f}×" if ratio is not None and _known(ratio) else UNKNOWN


def fmt_change(ratio: float | None) -> str:
    """A ratio of new to old as a signed percent change: 1.023 -> ``+2.3%``."""
    return f"{(ratio - 1) * 100:+.1f}%" if ratio is not None and _known(ratio) else UNKNOWN


def fmt_signed_pct(pct: float | None) -> str:
    """A change already in percent, signed: 2.3 -> ``+2.3%``."""
    return f"{pct:+.1f}%" if pct is not None and _known(pct) else UNKNOWN


def fixed(places: int, *, signed: bool = False, suffix: str = "") -> Callable[[float | None], str]:
    """A formatter of ``places`` decimals (``signed``: with its sign), for :func:`fmt_interval`/:func:`fmt_range`
    where a message wants more digits than a report: the gate's ``+0.0123 ms``."""
    def fmt(v: float | None) -> str:
        return f"{v:{'+' if signed else ''}.{places}f}{suffix}" if v is not None and _known(v) else UNKNOWN
    return fmt


def fmt_range(low: float | None, high: float | None, fmt: Callable[[float | None], str] = fmt_x) -> str:
    """Two bounds in ``fmt``'s spelling: ``2.56×–2.60×``; signed ones (changes) as ``-0.4% .. +4.8%``, where a dash
    would read as a minus."""
    lo, hi = fmt(low), fmt(high)
    signed = lo[:1] in ("+", "-") or hi[:1] in ("+", "-")
    return f"{lo} .. {hi}" if signed else f"{lo}–{hi}"


def fmt_interval(estimate: float | None, low: float | None, high: float | None,
                 fmt: Callable[[float | None], str] = fmt_x, *, level: str = "", unit: str = "", note: str = "") -> str:
    """An estimate and its interval, the one spelling of every report: ``2.59× (95% CI 2.56×–2.60×)``,
    ``+2.3% (CI -0.4% .. +4.8%)``, ``1.234 ms (1.100–1.300)``.

    ``fmt`` spells each number (:func:`fmt_x` a ratio, :func:`fmt_change` a ratio as a change, :func:`fmt_ms`), ``unit``
    follows the estimate, ``level`` names the interval ("95% CI"; empty: unnamed) and ``note`` ends the parenthesis.
    """
    named = f"{level} " if level else ""
    return f"{fmt(estimate)}{unit} ({named}{fmt_range(low, high, fmt)}{note})"
