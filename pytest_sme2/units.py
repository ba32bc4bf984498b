"""How measured quantities read in text: milliseconds, shares of E2E, ratios, changes.

One spelling per quantity, shared by the recommendations, the report tables and the charts, so a
number reads the same in a sentence, a table cell and a chart label. Every function returns ``—``
for an unknown (None or non-finite) value instead of ``nan``.
"""

from __future__ import annotations

import math

UNKNOWN = "—"


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
