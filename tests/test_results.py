"""A test's result (``pytest_sme2.results``): its status combines the test's outcome with its verdict."""

from __future__ import annotations

import pytest
from recorded import toy_samples

from pytest_sme2.gate.decide import gate
from pytest_sme2.gate.verdict import GateConfig, Status
from pytest_sme2.results import TestResult

pytestmark = pytest.mark.fast


def test_a_test_failing_after_check_is_failed_not_pass() -> None:
    """A functional assert after a passing check() makes the result 'failed' in JSON and HTML."""
    blocks = (4, 4, 3, 3)
    verdict = gate(toy_samples(1, 15, blocks), toy_samples(15, 29, blocks), GateConfig(margin=5.0))
    assert verdict.status is Status.PASS
    result = TestResult("t.py::test_a", outcome="failed", verdict=verdict)
    assert result.status == "failed" and result.to_dict()["status"] == "failed"
    assert TestResult("t.py::test_a", outcome="passed", verdict=verdict).status == "pass"
