"""units: one spelling per quantity, and one of an interval (fmt_interval), shared by the gate's messages and every
report: a speedup ``2.59× (95% CI 2.56×–2.60×)``, a change ``+2.3% (CI -0.4% .. +4.8%)`` (signed bounds are joined by
`` .. ``: an en dash before a minus would read as one)."""

from __future__ import annotations

import math

import pytest

from pytest_sme2.units import UNKNOWN, fixed, fmt_change, fmt_interval, fmt_ms, fmt_range, fmt_signed_pct, fmt_x

pytestmark = pytest.mark.fast


def test_an_interval_reads_the_same_for_every_quantity() -> None:
    assert fmt_interval(2.591, 2.561, 2.604, level="95% CI") == "2.59× (95% CI 2.56×–2.60×)"
    assert fmt_interval(1.023, 0.996, 1.048, fmt_change, level="CI") == "+2.3% (CI -0.4% .. +4.8%)"
    assert fmt_interval(1.2345, 1.1, 1.3, fmt_ms, unit=" ms") == "1.234 ms (1.100–1.300)"
    assert fmt_interval(0.95, 0.9, 1.0, level="CI", note="; emulated") == "0.95× (CI 0.90×–1.00×; emulated)"
    assert fmt_range(2.3, -0.4, fmt_signed_pct) == "+2.3% .. -0.4%"


def test_an_unknown_bound_is_a_dash_not_nan() -> None:
    assert fmt_interval(math.nan, None, 1.1) == f"{UNKNOWN} ({UNKNOWN}–1.10×)"
    assert fmt_signed_pct(None) == UNKNOWN and fmt_signed_pct(math.inf) == UNKNOWN
    assert fmt_x(None) == UNKNOWN


def test_the_gates_messages_spell_their_intervals_with_the_same_function() -> None:
    """The gate's messages keep four decimals of a millisecond, through fmt_interval like every report."""
    assert fmt_interval(0.0123, -0.001, 0.02, fixed(4, signed=True), level="95% CI", unit=" ms") == \
        "+0.0123 ms (95% CI -0.0010 .. +0.0200)"
    assert fmt_interval(1.2345, 1.1, 1.3, fixed(4), level="95% CI of the blocks' p95", unit=" ms") == \
        "1.2345 ms (95% CI of the blocks' p95 1.1000–1.3000)"
    assert fixed(2)(math.nan) == UNKNOWN and fixed(1, suffix="%")(2.34) == "2.3%"
