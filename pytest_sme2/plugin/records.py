"""What one test measured and concluded, and how it travels to the controller (xdist-safe).

Each test's :class:`TestRecord` lives in ``item.stash``; ``pytest_runtest_makereport`` serializes it
into ``report.user_properties`` so that it reaches the controller under pytest-xdist, where
:func:`record_of` reads it back (for the terminal section, the result files and the HTML rows).
This small module is what the other plugin modules share; it imports none of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_sme2.options import Sme2Options

RESULT_PROPERTY = "sme2_result"
OPTIONS_KEY = pytest.StashKey[Sme2Options]()
RESULTS_KEY = pytest.StashKey[list[dict[str, Any]]]()
RECORD_KEY = pytest.StashKey["TestRecord"]()
#: the session's export pool run (pytest_sme2.program.pool.PoolReport), None when it had nothing to do; absent
#: until the first test that exports
EXPORT_POOL_KEY = pytest.StashKey[Any]()


@dataclass
class TestRecord:
    """What one test measured and concluded; serialized into ``report.user_properties``."""

    test_id: str
    model: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] | None = None
    profile_off: dict[str, Any] | None = None
    comparison: dict[str, Any] | None = None
    baseline: dict[str, Any] | None = None
    verdict: dict[str, Any] | None = None
    #: the baseline's artifact re-measured in this session (a changed artifact compared in one session)
    reference: dict[str, Any] | None = None
    baseline_path: str = ""
    baseline_written: bool = False
    #: no baseline existed for this device: the measurement was recorded as the baseline, not gated
    recorded: bool = False
    note: str = ""
    #: one-line warnings about the test (e.g. its inputs differ from the baseline's), shown in the terminal section
    warnings: list[str] = field(default_factory=list)
    #: baselines of this test for other devices or configurations (no baseline for this one), in full
    other_baselines: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Keys of :class:`pytest_sme2.results.TestResult`."""
        d = dict(self.__dict__)
        d["model_override"] = d.pop("model")
        return d


def record(item: pytest.Item) -> TestRecord:
    """The test's record, created on first use."""
    if RECORD_KEY not in item.stash:
        item.stash[RECORD_KEY] = TestRecord(item.nodeid)
    return item.stash[RECORD_KEY]


def attach(item: pytest.Item, report: pytest.TestReport) -> None:
    """Put the test's record into ``report.user_properties`` (call phase, or a setup that did not pass)."""
    # The call phase carries the record; so does a setup that failed or skipped (an export error, a
    # missing SME2 build), so that the reports list every sme2 test, not only those that ran.
    carries = report.when == "call" or (report.when == "setup" and not report.passed)
    if carries and RECORD_KEY in item.stash:
        record = item.stash[RECORD_KEY]
        report.user_properties.append((RESULT_PROPERTY, json.dumps(record.to_dict())))


def record_of(report: pytest.TestReport) -> dict[str, Any] | None:
    """The sme2 record a test report carries, with the report's outcome (and skip reason) filled in."""
    for key, value in report.user_properties:
        if key == RESULT_PROPERTY:
            record: dict[str, Any] = json.loads(str(value))
            record["outcome"] = report.outcome
            if report.skipped and isinstance(report.longrepr, tuple) and not record.get("note"):
                record["note"] = str(report.longrepr[2]).removeprefix("Skipped: ")
            return record
    return None

