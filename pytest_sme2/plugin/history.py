"""The session-end hook that appends this session's results to the history store (``--sme2-history``).

Only the controller writes (xdist workers' records reach it through ``report.user_properties``, see ``records``),
once, as one new file written atomically: a killed session leaves no record, never half of one.
"""

from __future__ import annotations

import pytest

from ..errors import Sme2Error
from .records import OPTIONS_KEY, RESULTS_KEY
from .session import worker_id


def session_finish(session: pytest.Session) -> None:
    config = session.config
    if worker_id(config) is not None:
        return
    opts = config.stash.get(OPTIONS_KEY, None)
    records = config.stash.get(RESULTS_KEY, [])
    if opts is None or opts.history is None or not records:
        return
    from ..history.store import append_results
    from .reports import results_from_records

    reporter = config.pluginmanager.getplugin("terminalreporter")
    try:
        written = append_results(opts.history, results_from_records(records, opts), cwd=config.rootpath)
    except Sme2Error as exc:
        if reporter is not None:
            reporter.write_line(f"pytest-sme2: history not written: {exc}", red=True)
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        return
    if written is not None and reporter is not None:
        path, run = written
        commit = run.commit[:10] if run.commit else "unknown commit (no git, no CI variable)"
        reporter.write_line(f"sme2 history: run {run.run_id} on {commit}{' (dirty)' if run.dirty else ''} "
                            f"appended to {path}")
