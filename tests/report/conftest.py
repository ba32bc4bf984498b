"""The recorded results every report test renders: an on/off pair of each model and a real regression."""

from __future__ import annotations

import pytest

from pytest_sme2.results import (
    SessionResults,
    TestResult,
)
from report.builders import MN, TT, on_off_result, regression_result, session_results


@pytest.fixture(scope="module")
def tt() -> TestResult:
    return on_off_result(TT)



@pytest.fixture(scope="module")
def mn() -> TestResult:
    return on_off_result(MN, min_speedup=2.0)



@pytest.fixture(scope="module")
def regression() -> TestResult:
    return regression_result()



@pytest.fixture(scope="module")
def session(tt: TestResult, mn: TestResult, regression: TestResult) -> SessionResults:
    return session_results(tt, mn, regression)
