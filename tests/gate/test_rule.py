"""The comparison rule (``pytest_sme2.gate.rule``): one rule per comparison kind."""

from __future__ import annotations

import pytest

from pytest_sme2.gate.rule import Comparison, ComparisonRule
from pytest_sme2.gate.verdict import Status

pytestmark = pytest.mark.fast


def test_one_rule_per_comparison_kind_widens_and_maps_every_relative_check_alike() -> None:
    """The rule (pytest_sme2/gate/rule.py) is the one place a comparison kind means something."""
    stored, session = ComparisonRule.of(Comparison.STORED, 0.5), ComparisonRule.of(Comparison.SESSION, 0.5)
    unchanged = ComparisonRule.of(Comparison.UNCHANGED, 0.5)
    assert stored.margin(0.1) == pytest.approx(0.6) and session.margin(0.1) == unchanged.margin(0.1) == 0.1
    assert not unchanged.gates and stored.gates and session.gates
    assert session.separates_session and not stored.separates_session
    assert [session.status(lo, hi, 0.1) for lo, hi in ((0.11, 0.2), (-0.3, -0.11), (-0.3, 0.1), (0.05, 0.2))] == [
        Status.REGRESSION, Status.IMPROVEMENT, Status.PASS, Status.INCONCLUSIVE]
    assert [unchanged.status(lo, hi, 0.1) for lo, hi in ((0.11, 0.2), (-0.3, -0.11), (0.05, 0.2))] == [
        Status.DRIFT, Status.DRIFT, Status.PASS]
