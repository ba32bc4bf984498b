"""plugin/reports.py's fail-closed rule for a session gated on instructions executed under emulation."""

from __future__ import annotations

import pytest

from pytest_sme2.gate.verdict import TIME_NOT_GATED
from pytest_sme2.options import Sme2Options
from pytest_sme2.plugin.reports import nothing_gated

pytestmark = pytest.mark.fast


def _evidence_only(*checks: dict[str, object]) -> list[dict[str, object]]:
    return [{"outcome": "passed", "verdict": {"status": "pass", "comparison": None, "notes": [TIME_NOT_GATED],
                                              "checks": list(checks)}}]


def test_a_count_compared_with_its_count_baseline_is_gated() -> None:
    closed = Sme2Options(fail_on=("missing",))
    assert not nothing_gated(_evidence_only({"name": "instructions", "status": "pass", "advisory": False}), closed)
    assert not nothing_gated(_evidence_only({"name": "instructions_off", "status": "pass", "advisory": False}), closed)
    # The on/off count ratio is reported, not gated: alone it decided nothing.
    assert nothing_gated(_evidence_only({"name": "sme2_instructions", "status": "pass", "advisory": True}), closed)
    # Counts asked for where none could be taken: nothing decided.
    assert nothing_gated(_evidence_only({"name": "instructions", "status": "inconclusive", "advisory": True}), closed)
