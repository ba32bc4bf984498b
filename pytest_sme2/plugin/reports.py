"""Result files written once per session by the controller: --sme2-json, --sme2-markdown, GitHub step summary."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.errors import Sme2Error
from pytest_sme2.options import Sme2Options
from pytest_sme2.plugin.records import OPTIONS_KEY, RESULTS_KEY
from pytest_sme2.plugin.session import worker_id


def session_finish(session: pytest.Session) -> None:
    config = session.config
    if worker_id(config) is not None:
        return  # workers never write shared reports; the controller has every record
    records = config.stash.get(RESULTS_KEY, [])
    opts = config.stash.get(OPTIONS_KEY, None)
    if opts is None:
        return
    interrupted = interruption(session, records)
    try:
        if interrupted and not records:
            _keep_previous_reports(config, opts, interrupted)
        else:
            _write_reports(config, opts, records, interrupted=interrupted)
    except Sme2Error as exc:
        # A report that cannot be written is an error of the run, shown once, without a traceback.
        reporter = config.pluginmanager.getplugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"pytest-sme2: {exc}", red=True)
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
    if any((r.get("verdict") or {}).get("status") == "regression" for r in records) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if nothing_gated(records, opts) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def nothing_gated(records: list[dict[str, Any]], opts: Sme2Options) -> str:
    """Why this session is not green although no test failed: fail-closed (``missing`` in ``--sme2-fail-on``, the CI
    default) and sme2 tests ran but none decided anything against a baseline ("" when that is not so).

    Decided means compared with a baseline and not left undecided
    (:attr:`pytest_sme2.gate.verdict.Verdict.undecided`): a session of invalid or inconclusive verdicts, which
    ``--sme2-fail-on=missing`` reports without failing them, has passed nothing, as a CI whose every run records into
    a thrown-away workspace has not; either would otherwise stay green forever.
    """
    from pytest_sme2.gate.verdict import Verdict

    if "missing" not in opts.fail_on or opts.update_baseline or not records:
        return ""
    measured = [r for r in records if r.get("outcome") != "skipped"]
    compared = [r for r in measured if (r.get("verdict") or {}).get("comparison")]
    decided = [r for r in compared if not Verdict.from_dict(r["verdict"]).undecided]
    decided += [r for r in measured if _evidence_gated(r.get("verdict"))]
    if not measured or decided:
        return ""
    statuses = sorted({str((r.get("verdict") or {}).get("status") or r.get("outcome") or "?") for r in measured})
    what = ("none was decided" if compared else "none was compared with a baseline")
    fix = ("Run it where it can decide (a quiet runner; the baselines' artifacts cached in --sme2-artifact-dir)"
           if compared else "Record baselines with --sme2-update-baseline and commit them")
    return (f"pytest-sme2: {len(measured)} performance test(s) ran and {what} (verdicts: {', '.join(statuses)}): "
            "nothing was gated, so this run is not green. It fails closed because --sme2-fail-on includes 'missing' "
            f"(the default where CI is set). {fix}, or opt out with --sme2-fail-on=none")


def _evidence_gated(verdict: dict[str, Any] | None) -> bool:
    """An emulated device measured for its evidence (its time not gated, by design): gated when its kernel evidence
    or numerics were judged and passed — the question it answers."""
    from pytest_sme2.gate.checks import EVIDENCE_CHECKS
    from pytest_sme2.gate.instructions import GATED_COUNTS
    from pytest_sme2.gate.verdict import TIME_NOT_GATED

    if not verdict or TIME_NOT_GATED not in verdict.get("notes", ()):
        return False
    return any(c.get("name") in (*EVIDENCE_CHECKS, *GATED_COUNTS) and not c.get("advisory")
               and c.get("status") == "pass" for c in verdict.get("checks", ()))


def interruption(session: pytest.Session, records: list[dict[str, Any]]) -> str:
    """Why the session stopped before running what it selected ("" when it ran to its end).

    pytest ends a session with ``INTERRUPTED`` on Ctrl-C and on collection errors, and with ``USAGE_ERROR`` when a
    wrong option stops it mid-run (pytest.exit); either way its reports would hold only part of the suite.
    """
    status = session.exitstatus
    if status == pytest.ExitCode.INTERRUPTED:
        cause = "interrupted (Ctrl-C, or an error during collection)"
    elif status == pytest.ExitCode.USAGE_ERROR:
        cause = "stopped by a usage error"
    else:
        return ""
    return f"the session was {cause} after {len(records)} performance test(s)"


def _keep_previous_reports(config: pytest.Config, opts: Sme2Options, why: str) -> None:
    """An interrupted session with nothing measured leaves the previous session's reports as they were."""
    reports = (opts.json, opts.markdown, opts.bmf, opts.gab, opts.pytest_benchmark)
    kept = [str(p) for p in reports if p is not None and p.exists()]
    if kept:
        _say(config, f"pytest-sme2: {why}: nothing to report, so {' and '.join(kept)} were left as they were (the "
                     "previous session's)", yellow=True)


def _say(config: pytest.Config, line: str, **markup: bool) -> None:
    reporter = config.pluginmanager.getplugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line, **markup)


def results_from_records(records: list[dict[str, Any]], opts: Sme2Options, *, interrupted: str = "") -> Any:
    """The session's records as a :class:`~pytest_sme2.results.SessionResults`."""
    import platform
    import sys

    from pytest_sme2.results import SessionResults, TestResult

    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in opts.__dict__.items()}
    environment = {"python": sys.version.split()[0], "platform": platform.platform(), "host": platform.node()}
    return SessionResults(tests=tuple(TestResult.from_dict(r) for r in records), environment=environment,
                          config=config, interrupted=interrupted)


def _write_reports(config: pytest.Config, opts: Sme2Options, records: list[dict[str, Any]], *,
                   interrupted: str = "") -> None:
    dashboards = {fmt: path for fmt, path in (("bmf", opts.bmf), ("gab", opts.gab),
                                               ("pytest-benchmark", opts.pytest_benchmark)) if path is not None}
    if not (opts.json or opts.markdown or dashboards or os.environ.get("GITHUB_STEP_SUMMARY")):
        return
    from pytest_sme2.results import append_step_summary, write_results

    results = results_from_records(records, opts, interrupted=interrupted)
    if opts.json:
        write_results(opts.json, results)
    if dashboards and interrupted:
        # Their formats cannot say "interrupted": part of the suite would pass for all of it on a dashboard.
        _say(config, f"pytest-sme2: {interrupted}: {' and '.join(map(str, dashboards.values()))} left as they were "
                     "(the previous session's): a dashboard cannot mark a partial session", yellow=True)
    elif dashboards:
        from pytest_sme2.report.dashboards import write_dashboard

        for fmt, path in dashboards.items():
            write_dashboard(path, results, fmt)
    if opts.markdown:
        from pytest_sme2.report.markdown import render_markdown
        from pytest_sme2.store.files import write_atomic

        write_atomic(opts.markdown, render_markdown(results), what="markdown report")
    if records:
        append_step_summary(results)
