"""pytest-html integration, registered only when pytest-html is active.

Adds result-table columns (median, p90, delta vs baseline, interval, verdict), an expanded
section per sme2 test (charts, top operators, identity, verdict) and a summary block. The HTML
itself is built by :mod:`pytest_sme2.report.html`; this module only wires it into pytest-html.
"""

from __future__ import annotations

from typing import Any

import pytest


def _result_of(report: Any) -> Any:
    from pytest_sme2.plugin.records import carried_result
    from pytest_sme2.results import TestResult

    record = carried_result(report)
    return TestResult.from_dict(record) if record is not None else None


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_table_header(cells: list[str]) -> None:
    from pytest_sme2.report.html import COLUMNS, header_cells

    header = header_cells()
    cells[2:2] = [header[k] for k in COLUMNS]


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_table_row(report: Any, cells: list[str]) -> None:
    from pytest_sme2.report.html import COLUMNS

    result = _result_of(report)
    if result is None:
        # Tests without sme2 data still need the same number of cells.
        cells[2:2] = ['<td class="sme2-col"></td>' for _ in COLUMNS]
        return
    from pytest_sme2.report.html import row_cells

    row = row_cells(result)
    cells[2:2] = [row[k] for k in COLUMNS]


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_summary(prefix: list[str], summary: list[str], postfix: list[str], session: Any) -> None:
    from pytest_sme2.plugin.records import OPTIONS_KEY, RESULTS_KEY
    from pytest_sme2.plugin.reports import results_from_records
    from pytest_sme2.report.html import summary_block

    records = session.config.stash.get(RESULTS_KEY, [])
    if records:
        prefix.append(summary_block(results_from_records(records, session.config.stash[OPTIONS_KEY])))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Any:
    report = yield
    if report.when == "call":
        result = _result_of(report)
        if result is not None:
            import pytest_html

            from pytest_sme2.report.html import html_section

            extras = list(getattr(report, "extras", []))
            extras.append(pytest_html.extras.html(html_section(result)))
            extras.append(pytest_html.extras.json(result.to_dict(), name="sme2 result (JSON)"))
            report.extras = extras
    return report
