"""The bad-input tier: what a careless or unlucky user does never passes silently and never destroys.

Each class of bad input (docs/reliability.md, "Bad input"): outputs on one path or on an input's path, an
interrupted session, paths under regular files, missing, empty, truncated and wrong-schema files, stores that do not
exist, and the exit code each gets. Every case asserts the message (path and fix), the exit code, no traceback, and
that the user's files are byte-identical afterwards. Runs in the normal suite; ``-m bad_input`` runs only these.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_cli import _results
from test_reliability import TOY_TRACE, _replay_project

from pytest_sme2.atomic import ensure_dir, refuse_overlaps, write_atomic
from pytest_sme2.cli import main
from pytest_sme2.errors import BaselineError, ConfigError

pytestmark = pytest.mark.bad_input


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run the CLI in-process: (exit code, stderr); a traceback would escape as an exception here."""
    capsys.readouterr()
    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def _snapshot(*paths: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in paths}


def _results_file(path: Path, **top: object) -> Path:
    """A results file as --sme2-json writes it (the recorded toy_cnn trace in 5 blocks), top-level fields replaced."""
    _results(path, {"t.py::test_a": TOY_TRACE})
    if top:
        path.write_text(json.dumps({**json.loads(path.read_text()), **top}))
    return path


# ------------------------------------------------------------------ outputs on one path, or on an input's path


@pytest.mark.parametrize("argv, named", [
    (["compare", "{old}", "{res}", "--json", "./{old}"], ("--json", "OLD")),
    (["compare", "{old}", "{res}", "--json", "{res}"], ("--json", "NEW")),
    (["report", "{res}", "--out", "{res}"], ("--out", "SOURCE")),
    (["report", "{dir}", "--out", "{dir}/{res}"], ("--out", "SOURCE")),
    (["report", "{res}", "--out", "{link}"], ("--out", "SOURCE")),
    (["analyze", "{trace}", "--json", "{trace}"], ("--json", "TRACE")),
    (["analyze", "{trace}", "--json", "../{cwd}/{trace}"], ("--json", "TRACE")),
    (["export-trace", "{trace}", "--out", "{trace}"], ("--out", "TRACE")),
    (["history", "steps", "--ack", "{res}", "--json", "{res}"], ("--json", "--ack")),
])
def test_cli_output_on_an_input_is_refused_before_anything_runs(argv: list[str], named: tuple[str, str],
                                                                 tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _results_file(tmp_path / "old.json")
    _results_file(tmp_path / "res.json")
    (tmp_path / "t.etdump").write_bytes(TOY_TRACE.read_bytes())
    (tmp_path / "d").mkdir()
    _results_file(tmp_path / "d" / "res.json")
    os.link(tmp_path / "res.json", tmp_path / "hard.json")  # a hard link: another name, the same file
    before = _snapshot(*(p for p in tmp_path.rglob("*") if p.is_file()))
    names = {"old": "old.json", "res": "res.json", "trace": "t.etdump", "dir": "d", "link": "hard.json",
             "cwd": tmp_path.name}
    code, err = _cli(capsys, *(a.format(**names) for a in argv))
    assert code == 2
    out_flag, in_name = named
    assert f"{out_flag} " in err and f"is also {in_name}" in err and "nothing was run or written" in err
    assert _snapshot(*before) == before
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file()) == sorted(before)


def test_history_output_on_a_stored_run_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "hist" / "runs" / "2026-11" / "20261127T100000-abc-1.jsonl"
    run.parent.mkdir(parents=True)
    run.write_text('{"kind": "pytest-sme2-history-run", "schema_version": 1}\n')
    before = run.read_bytes()
    code, err = _cli(capsys, "history", "page", "--store", str(tmp_path / "hist"), "--out", str(run))
    assert code == 2 and f"is also --store {tmp_path / 'hist'}" in err
    assert run.read_bytes() == before


def test_history_pr_out_and_the_step_summary_on_one_path_are_refused(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    code, err = _cli(capsys, "history", "pr", "--store", str(tmp_path), "--out", str(tmp_path / "summary.md"),
                     "--step-summary")
    assert code == 2 and "--out and $GITHUB_STEP_SUMMARY (--step-summary) both name" in err


def test_the_rule_compares_resolved_paths_and_files() -> None:
    here = Path.cwd()
    with pytest.raises(ConfigError, match=r"--a and --b both name x"):
        refuse_overlaps([("--a", Path("x")), ("--b", Path("./x"))])
    with pytest.raises(ConfigError, match=r"--a .* is also IN, which this command reads"):
        refuse_overlaps([("--a", here / "y")], [("IN", Path("y"))])
    refuse_overlaps([("--a", Path("x")), ("--b", Path("y"))], [("IN", Path("z"))])  # distinct: no error


def test_plugin_reports_on_one_path_are_refused_before_any_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): open('ran', 'w').close()")
    (pytester.path / "report.out").write_text("the previous report\n")
    result = pytester.runpytest_subprocess("--sme2-json=report.out", "--sme2-markdown=./report.out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "--sme2-json and --sme2-markdown both name report.out" in err and "Traceback" not in err
    assert not (pytester.path / "ran").exists()
    assert (pytester.path / "report.out").read_text() == "the previous report\n"


@pytest.mark.parametrize("option, clobbered", [
    ("--sme2-json=pytest.ini", "the ini file"),
    ("--sme2-markdown=test_x.py", "a test path"),
    ("--junitxml=r.json", None),
])
def test_plugin_report_on_a_file_the_session_reads_is_refused(pytester: pytest.Pytester, option: str,
                                                              clobbered: str | None) -> None:
    (pytester.path / "pytest.ini").write_text("[pytest]\n")
    pytester.makepyfile(test_x="def test_x(): pass")
    files = [pytester.path / "pytest.ini", pytester.path / "test_x.py"]
    before = _snapshot(*files)
    args = [option, "test_x.py"] + (["--sme2-json=r.json"] if clobbered is None else [])
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert (f"is also {clobbered}" if clobbered else "--sme2-json and --junitxml both name r.json") in err
    assert _snapshot(*files) == before


# ------------------------------------------------------------------------------- an interrupted session


def test_ctrl_c_mid_measurement_never_replaces_the_reports_with_less(pytester: pytest.Pytester, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A real SIGINT to a real pytest run, paused inside its wanted-th test (the replay conftest's fixed point).

    Interrupted in the first test (nothing measured), the previous session's reports stay byte-identical;
    interrupted in the third, the two tests measured are written with an "interrupted" status, never as a session
    that ran to its end.
    """
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    n = 4
    _, args = _replay_project(pytester, tmp_path, n)
    reports = ["--sme2-json=res.json", "--sme2-markdown=res.md"]
    pytester.runpytest_subprocess(*args, *reports, timeout=300).assert_outcomes(passed=n)
    res_json, res_md, log = pytester.path / "res.json", pytester.path / "res.md", pytester.path / "writes.log"
    before = _snapshot(res_json, res_md)
    # pytest as a terminal starts it: Ctrl-C raises KeyboardInterrupt (a shell's background job would ignore SIGINT,
    # and a child inherits that).
    cmd = [sys.executable, "-c", "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler);"
           " sys.exit(pytest.main(sys.argv[1:]))", *args, *reports, "-q"]
    outcomes = []
    for wanted in (1, 3):
        log.unlink()
        proc = subprocess.Popen(cmd, cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True,  # its own group: Ctrl-C reaches the group, runner included
                                env={**os.environ, "SME2_TEST_PAUSE_AFTER_BASELINES": str(wanted)})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            written = log.read_text().count("\tbaseline\t") if log.exists() else 0
            if written >= wanted:
                break
            time.sleep(0.01)
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before it could be interrupted"
        os.killpg(proc.pid, signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
        assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
        assert "Traceback" not in output.split("KeyboardInterrupt")[-1]
        outcomes.append(output)
    first = outcomes[0]
    # Interrupted in the first test: nothing measured, nothing replaced.
    assert "nothing to report, so res.json and res.md were left as they were" in first
    # Interrupted in the third test: the two measured tests, marked interrupted (the first run had written both).
    assert _snapshot(res_json, res_md) != before
    doc = json.loads(res_json.read_text())
    assert doc["interrupted"] == "the session was interrupted (Ctrl-C, or an error during collection) after 2 " \
                                 "performance test(s)"
    assert len(doc["tests"]) == 2
    assert "**Interrupted:** the session was interrupted" in res_md.read_text()


def test_an_interrupted_session_with_nothing_measured_keeps_the_reports(pytester: pytest.Pytester) -> None:
    """A collection error interrupts the session too: the previous reports stay."""
    pytester.makepyfile(test_x="import not_a_module_anywhere\n")
    (pytester.path / "r.json").write_text("the previous results\n")
    result = pytester.runpytest_subprocess("--sme2-json=r.json")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert (pytester.path / "r.json").read_text() == "the previous results\n"
    assert "r.json were left as they were" in result.stdout.str()


# ----------------------------------------------------------------------- paths under regular files


def test_a_directory_whose_name_is_a_file_says_not_a_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "f"
    blocker.write_text("mine\n")
    for directory in (blocker, blocker / "sub", blocker / "sub" / "deeper"):
        with pytest.raises(NotADirectoryError, match=rf"Not a directory \({blocker} is a file\)"):
            ensure_dir(directory)
    with pytest.raises(BaselineError, match=rf"cannot write report {blocker}/r.md: Not a directory \({blocker} "
                                            r"is a file\)"):
        write_atomic(blocker / "r.md", "x", what="report")
    assert blocker.read_text() == "mine\n"


@pytest.mark.parametrize("argv", [
    ["analyze", "{trace}", "--json", "{f}/a.json"],
    ["analyze", "{trace}", "--json", "a.json", "--csv-dir", "{f}"],
    ["export-trace", "{trace}", "--out", "{f}/sub/t.json"],
])
def test_cli_outputs_under_a_regular_file_name_the_true_cause(argv: list[str], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f").write_text("mine\n")
    code, err = _cli(capsys, *(a.format(trace=TOY_TRACE, f="f") for a in argv))
    assert code == 2
    assert "Not a directory (f is a file)" in err and "File exists" not in err
    assert (tmp_path / "f").read_text() == "mine\n"
