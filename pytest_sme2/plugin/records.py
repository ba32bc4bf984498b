"""What one test measured and concluded, and how it travels to the controller (xdist-safe).

Each test's result is the one result type, :class:`pytest_sme2.results.TestResult`, kept in ``item.stash`` and
built up with :func:`update` as the test measures and is judged; ``pytest_runtest_makereport`` serializes it
(``TestResult.to_dict()``, the results file's own entry) into ``report.user_properties`` so that it reaches the
controller under pytest-xdist, where :func:`carried_result` reads it back (for the terminal section, the result
files and the HTML rows). This small module is what the other plugin modules share; it imports none of them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sme2.options import Sme2Options

if TYPE_CHECKING:
    from pytest_sme2.results import TestResult

RESULT_PROPERTY = "sme2_result"
OPTIONS_KEY = pytest.StashKey[Sme2Options]()
RESULTS_KEY = pytest.StashKey[list[dict[str, Any]]]()
RESULT_KEY = pytest.StashKey["TestResult"]()
#: the session's export pool run (pytest_sme2.program.pool.PoolReport), None when it had nothing to do; absent
#: until the first test that exports
EXPORT_POOL_KEY = pytest.StashKey[Any]()


#: What the lab adds to a device test's node id under pytest-xdist (what it needs; ``pytest_sme2.plugin.lab``).
NEED_MARK = "@sme2:"


def test_id(item: pytest.Item) -> str:
    """The test's id as pytest-sme2 keys it (baselines, records, run directories): its node id without what the lab
    adds for the scheduler, so a test's baseline is the same with and without the pool."""
    return item.nodeid.partition(NEED_MARK)[0]


def result_of(item: pytest.Item) -> TestResult:
    """The test's result so far (an empty one before the test recorded anything)."""
    if RESULT_KEY not in item.stash:
        from pytest_sme2.results import TestResult  # lazily: ``pytest --help`` does not load the analysis

        item.stash[RESULT_KEY] = TestResult(test_id(item))
    return item.stash[RESULT_KEY]


def update(item: pytest.Item, **fields: Any) -> TestResult:
    """Set ``fields`` of the test's result (:class:`~pytest_sme2.results.TestResult` field names)."""
    item.stash[RESULT_KEY] = replace(result_of(item), **fields)
    return item.stash[RESULT_KEY]


def attach(item: pytest.Item, report: pytest.TestReport) -> None:
    """Put the test's result into ``report.user_properties`` (call phase, or a setup that did not pass)."""
    # The call phase carries the record; so does a setup that failed or skipped (an export error, a
    # missing SME2 build), so that the reports list every sme2 test, not only those that ran.
    carries = report.when == "call" or (report.when == "setup" and not report.passed)
    if carries and RESULT_KEY in item.stash:
        report.user_properties.append((RESULT_PROPERTY, json.dumps(item.stash[RESULT_KEY].to_dict())))


def carried_result(report: pytest.TestReport) -> dict[str, Any] | None:
    """The sme2 result a test report carries (``TestResult.to_dict()``), with the report's outcome (and skip
    reason) filled in; the controller gathers them and reads them with ``TestResult.from_dict``."""
    for key, value in report.user_properties:
        if key == RESULT_PROPERTY:
            record: dict[str, Any] = json.loads(str(value))
            record["outcome"] = report.outcome
            if report.skipped and isinstance(report.longrepr, tuple) and not record.get("note"):
                record["note"] = str(report.longrepr[2]).removeprefix("Skipped: ")
            return record
    return None

