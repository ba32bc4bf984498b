"""The pytest adapter of pytest-sme2: the hooks, in the order pytest calls them, each delegating to a room.

Everything that measures or judges lives in the library (``export``, ``runners``, ``profile``, ``gate``,
``baseline``, ``report``); this package only translates between pytest and it:

- ``config``   — pytest's config (``--sme2-*`` flags, ``sme2_*`` ini keys) -> one frozen ``Sme2Options``; conflicts
  (the option table itself is the library's ``pytest_sme2/options.py``, shared with the CLI);
- ``markers``  — ``sme2_model`` / ``sme2_threshold``: registration, parsing, validation;
- ``session``  — per-session state (the runner, built once) and the library-call wrapper;
- ``fixtures`` — ``exported_model``, ``sme2_runner``, ``sme2_baseline``, ``android_device``;
- ``measure``  — what ``sme2_runner`` does (variants, profiling);
- ``check``    — what ``sme2_baseline`` does (the library judges; this applies the verdict to the test);
- ``records``  — each test's record and its trip to the controller (xdist-safe), shared with ``pytest_html_hooks``;
- ``terminal`` — the ``sme2 performance`` terminal section;
- ``reports``  — the JSON / markdown / GitHub step summary files, written once by the controller;
- ``lab``      — the device pool (``--sme2-pool``): one device per xdist worker, tests routed by what they need
  (``lab_scheduling``: the xdist scheduler);
- ``history``  — appends the session's results to the history store, once, by the controller;
- ``rebaselined`` — compares baselines re-recorded since the merge-base (``--sme2-base-ref``) with the merge-base's;
- ``pytest_html_hooks`` — pytest-html columns and row sections, registered only when pytest-html writes a report
  (the HTML itself is built by the library's ``report/html.py``).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from pytest_sme2.plugin import config as sme2_config
from pytest_sme2.plugin import history, lab, markers, rebaselined, records, reports, terminal
from pytest_sme2.plugin.fixtures import (
    android_device,
    exported_model,
    sme2_baseline,
    sme2_options,
    sme2_runner,
    sme2_session,
)

__all__ = ["android_device", "exported_model", "sme2_baseline", "sme2_options", "sme2_runner", "sme2_session"]


def pytest_addoption(parser: pytest.Parser) -> None:
    sme2_config.addoption(parser)


def pytest_configure(config: pytest.Config) -> None:
    markers.register(config)
    lab.register(config)
    config.stash[records.OPTIONS_KEY] = lab.configure(config, sme2_config.build_options(config))
    config.stash[records.RESULTS_KEY] = []
    config.pluginmanager.register(Collector(config), "sme2_collector")
    # pytest-html is "active" when it writes a report; being installed is not enough.
    if config.pluginmanager.hasplugin("html") and getattr(config.option, "htmlpath", None):
        from pytest_sme2.plugin import pytest_html_hooks as html

        config.pluginmanager.register(html, "sme2_html")


def pytest_report_header(config: pytest.Config) -> list[str]:
    return list(lab.header(config))


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    return lab.auto_workers(config)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, pytest.CollectReport,
                                                                         pytest.CollectReport]:
    report = yield
    markers.refuse_at_collection(report)
    return report


def pytest_runtest_setup(item: pytest.Item) -> None:
    markers.check_marker_fixtures(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    records.attach(item, report)
    return report


class Collector:
    """Gathers every test's record on the controller (xdist workers' included) and reports once."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = records.carried_result(report)
        if record is not None:
            self.config.stash[records.RESULTS_KEY].append(record)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        terminal.write_summary(terminalreporter, config)
        history.write_line(terminalreporter, config)
        rebaselined.write_lines(terminalreporter, config)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        reports.session_finish(session)
        history.session_finish(session)
        rebaselined.session_finish(session)
