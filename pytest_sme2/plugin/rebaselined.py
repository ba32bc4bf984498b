"""The session-end check of re-recorded baselines (``--sme2-base-ref``): :mod:`pytest_sme2.history.rebaselined`.

A change that commits re-recorded baselines is compared with the merge-base's baselines once, by the controller, at
the end of the session; an unacknowledged regression fails the session (exit 1), every step is listed under the
``sme2 performance`` section. Outside a git work tree, or without the base ref fetched, the check says why; it fails
the session when the ref was named (``--sme2-base-ref``: a CI that asked for the check must not pass without it), not
when it came from the CI's variables (a shallow clone of a pull request is not the change's fault).
"""

from __future__ import annotations

import pytest

from pytest_sme2.errors import Sme2Error
from pytest_sme2.plugin.records import OPTIONS_KEY
from pytest_sme2.plugin.session import worker_id

#: (lines, is_error) to show at the end of the terminal summary
LINES_KEY = pytest.StashKey[tuple[list[str], bool]]()
#: where the acknowledgements are read, in the rootdir (the history's file: docs/history.md)
ACK_FILE = "sme2_acknowledged.json"


def session_finish(session: pytest.Session) -> None:
    config = session.config
    opts = config.stash.get(OPTIONS_KEY, None)
    if worker_id(config) is not None or opts is None or not opts.base_ref or not opts.baseline_dir.is_dir():
        return
    from pytest_sme2.gate.verdict import GateConfig
    from pytest_sme2.history import acknowledge
    from pytest_sme2.history.rebaselined import rebaselined

    # Two sessions' samples: the drift allowance is the hand-set one, else calibrated from the history (issue 28 item
    # 2); a change it cannot decide is not green either (inconclusive fails, unless acknowledged).
    allowance = opts.drift_allowance / 100 if opts.drift_allowance is not None else None
    calibrate = None
    if opts.history is not None:
        from pytest_sme2.history.calibration import HistoryCalibration

        calibrate = HistoryCalibration(opts.history)
    try:
        report = rebaselined(opts.baseline_dir, base_ref=opts.base_ref,
                             config=GateConfig(margin=opts.margin / 100, drift_allowance=allowance,
                                               fail_on=("inconclusive",)),
                             acknowledgements=acknowledge.load(config.rootpath / ACK_FILE), calibrate=calibrate)
    except Sme2Error as exc:
        whence = "" if opts.base_ref_given else " (the pull request's target branch, from the CI's variables)"
        config.stash[LINES_KEY] = ([f"sme2 baselines vs {opts.base_ref}{whence}: not compared: {exc} "
                                    "(--sme2-base-ref=none turns the check off)"], opts.base_ref_given)
        if opts.base_ref_given and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return
    if not (report.rebaselined or report.added or report.removed):
        return
    config.stash[LINES_KEY] = ([f"sme2 {line}" if i == 0 else f"  {line}" for i, line in enumerate(report.lines())],
                               report.failed)
    if report.failed and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def write_lines(reporter: object, config: pytest.Config) -> None:
    """The lines of :func:`session_finish`, at the end of the terminal summary."""
    found = config.stash.get(LINES_KEY, None)
    if found is not None and reporter is not None:
        lines, error = found
        for line in lines:
            reporter.write_line(line, red=error)  # type: ignore[attr-defined]
