"""The session-end hook that appends this session's results to the history store (``--sme2-history``).

Only the controller writes (xdist workers' records reach it through ``report.user_properties``, see ``records``),
once, as one new file written atomically: a killed session leaves no record, never half of one.
"""

from __future__ import annotations

import pytest

from pytest_sme2.errors import Sme2Error
from pytest_sme2.plugin.records import OPTIONS_KEY, RESULTS_KEY
from pytest_sme2.plugin.session import worker_id

#: (line, is_error) to show under the ``sme2 performance`` section (session finish runs before the terminal summary).
LINE_KEY = pytest.StashKey[tuple[str, bool]]()


def session_finish(session: pytest.Session) -> None:
    config = session.config
    if worker_id(config) is not None:
        return
    opts = config.stash.get(OPTIONS_KEY, None)
    records = config.stash.get(RESULTS_KEY, [])
    if opts is None or opts.history is None or not records:
        return
    from pytest_sme2.history.store import append_results
    from pytest_sme2.plugin.reports import results_from_records

    try:
        written = append_results(opts.history, results_from_records(records, opts), cwd=config.rootpath)
    except Sme2Error as exc:
        config.stash[LINE_KEY] = (f"pytest-sme2: history not written: {exc}", True)
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        return
    if written is not None:
        path, run = written
        commit = run.commit[:10] if run.commit else "unknown commit (no git, no CI variable)"
        config.stash[LINE_KEY] = (f"sme2 history: run {run.run_id} on {commit}{' (dirty)' if run.dirty else ''} "
                                  f"appended to {path}", False)


def write_line(reporter: object, config: pytest.Config) -> None:
    """The history line of :func:`session_finish`, at the end of the terminal summary."""
    line = config.stash.get(LINE_KEY, None)
    if line is not None and reporter is not None:
        reporter.write_line(line[0], red=line[1])  # type: ignore[attr-defined]
