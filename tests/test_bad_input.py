"""The bad-input tier: what a careless or unlucky user does never passes silently and never destroys.

Each class of bad input (docs/reliability.md, "Bad input"): outputs on one path or on an input's path, an
interrupted session, paths under regular files, missing, empty, truncated and wrong-schema files, stores that do not
exist, and the exit code each gets. Every case asserts the message (path and fix), the exit code, no traceback, and
that the user's files are byte-identical afterwards. Runs in the normal suite; ``-m bad_input`` runs only these.
A pytest run refused at start-up or at collection runs in this process (``pytester.runpytest``: nothing is measured,
and a new interpreter cost seconds each); the runs that measure or are interrupted have their own process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from history.test_history import _store_with_step, record, run
from test_cli import _results
from test_reliability import TOY_INPUT, TOY_PTE, TOY_TRACE, _replay_project

from pytest_sme2.cli import main
from pytest_sme2.errors import BaselineError, ConfigError
from pytest_sme2.history.store import HistoryStore
from pytest_sme2.store.files import ensure_dir, refuse_overlaps, write_atomic

pytestmark = pytest.mark.bad_input


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run the CLI in-process: (exit code, stderr); a traceback would escape as an exception here."""
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse refuses an option value (usage: exit 2)
        code = int(exc.code or 0)
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


@pytest.mark.parametrize("second", ["--sme2-markdown", "--sme2-bmf", "--sme2-gab", "--sme2-pytest-benchmark",
                                    "--junitxml"])
def test_plugin_reports_on_one_path_are_refused_before_any_test(second: str, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): open('ran', 'w').close()")
    (pytester.path / "report.out").write_text("the previous report\n")
    result = pytester.runpytest("--sme2-json=report.out", f"{second}=./report.out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert f"--sme2-json and {second} both name report.out" in err and "Traceback" not in err
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
    result = pytester.runpytest(*args)
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
    reports = ["--sme2-json=res.json", "--sme2-markdown=res.md", "--sme2-bmf=res.bmf"]
    pytester.runpytest_subprocess(*args, *reports, timeout=300).assert_outcomes(passed=n)
    res_json, res_md, log = pytester.path / "res.json", pytester.path / "res.md", pytester.path / "writes.log"
    bmf = pytester.path / "res.bmf"
    before = _snapshot(res_json, res_md)
    dashboard = bmf.read_bytes()
    # pytest as a terminal starts it: Ctrl-C raises KeyboardInterrupt (a shell's background job would ignore SIGINT,
    # and a child inherits that).
    # (faulthandler on SIGUSR1: a run that does not end after Ctrl-C shows where it is.)
    cmd = [sys.executable, "-c", "import faulthandler, signal, sys, pytest; "
           "signal.signal(signal.SIGINT, signal.default_int_handler); faulthandler.register(signal.SIGUSR1); "
           "sys.exit(pytest.main(sys.argv[1:]))", *args, *reports, "-q"]
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
        output = _interrupted_output(proc, wanted)
        assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
        assert "Traceback" not in output.split("KeyboardInterrupt")[-1]
        outcomes.append(output)
    first, third = outcomes
    # Interrupted in the first test: nothing measured, nothing replaced.
    assert "nothing to report, so res.json and res.md and res.bmf were left as they were" in first
    # A dashboard format cannot say "interrupted": never replaced by part of the suite.
    assert bmf.read_bytes() == dashboard
    assert "res.bmf left as they were (the previous session's): a dashboard cannot mark a partial session" in third
    # Interrupted in the third test: the two measured tests, marked interrupted (the first run had written both).
    assert _snapshot(res_json, res_md) != before
    doc = json.loads(res_json.read_text())
    assert doc["interrupted"] == "the session was interrupted (Ctrl-C, or an error during collection) after 2 " \
                                 "performance test(s)"
    assert len(doc["tests"]) == 2
    assert "**Interrupted:** the session was interrupted" in res_md.read_text()


def _interrupted_output(proc: subprocess.Popen[str], wanted: int) -> str:
    """The output of ``proc`` once it ended after the Ctrl-C it was just sent; a run that does not end fails the test
    with where it is (its stacks: faulthandler on SIGUSR1), its processes and who holds its output pipe.

    One case is CPython's, not pytest-sme2's: a KeyboardInterrupt raised inside a finalizer (a ``__del__``, a generator
    closed by the garbage collector) is printed as "Exception ignored" and the run goes on, here into the replay
    conftest's 600 s pause. A user presses Ctrl-C again; so does this test, and accepts it only with that signature.
    """
    try:
        return proc.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGUSR1)  # the stacks now: where the first Ctrl-C left it
    time.sleep(1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C again, as a user would
    try:
        output = proc.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        # pytest itself may have ended with a process of another session still holding its output pipe open
        ended = proc.poll()
        group = subprocess.run(["ps", "-o", "pid,stat,wchan:20,args", "-s", str(proc.pid)], capture_output=True,
                               text=True, check=False).stdout
        holders = _holders_of_pipe(proc.stdout.fileno()) if proc.stdout is not None else []
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in holders:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        output = proc.communicate()[0]
        pytest.fail(f"the run did not end within 120 s of two Ctrl-Cs (interrupted at baseline {wanted}); pytest "
                    f"{'exited ' + str(ended) if ended is not None else 'still running'}; its processes:\n{group}\n"
                    f"processes holding its output pipe: {holders}\nits output and stacks:\n{output}")
    swallowed = "Exception ignored" in output and "KeyboardInterrupt" in output.split("Exception ignored", 1)[1]
    assert swallowed, f"the run needed a second Ctrl-C (interrupted at baseline {wanted}):\n{output}"
    return output


def _holders_of_pipe(fd: int) -> list[int]:
    """The processes (but this one) with the pipe ``fd`` reads open: whoever keeps a child's output from ending."""
    pipe = f"pipe:[{os.fstat(fd).st_ino}]"
    holders = []
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit() or int(proc_dir.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if any(str(link.readlink()) == pipe for link in (proc_dir / "fd").iterdir()):
                holders.append(int(proc_dir.name))
    return holders


def test_an_interrupted_session_with_nothing_measured_keeps_the_reports(pytester: pytest.Pytester) -> None:
    """A collection error interrupts the session too: the previous reports stay."""
    pytester.makepyfile(test_x="import not_a_module_anywhere\n")
    (pytester.path / "r.json").write_text("the previous results\n")
    result = pytester.runpytest("--sme2-json=r.json")
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


# ------------------------------------------------------------- results files: validated as baselines are


def _damage(path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    return path


def _per_run(doc: dict[str, Any]) -> list[float]:
    return doc["tests"][0]["profile"]["analysis"]["e2e_ms"]["per_run"]


RESULTS_DAMAGE: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "nan_sample": (lambda d: _per_run(d).__setitem__(5, float("nan")),
                   "test t.py::test_a: 'e2e_ms.per_run' holds nan, not a finite time >= 0 ms"),
    "negative_sample": (lambda d: _per_run(d).__setitem__(7, -0.08),
                        "test t.py::test_a: 'e2e_ms.per_run' holds -0.08, not a finite time >= 0 ms"),
    "infinite_sample": (lambda d: _per_run(d).__setitem__(3, float("inf")), "holds inf, not a finite time"),
    "schema_0": (lambda d: d.__setitem__("schema_version", 0), "has schema_version 0; versions start at 1"),
    "schema_minus_3": (lambda d: d.__setitem__("schema_version", -3), "has schema_version -3; versions start at 1"),
    "schema_true": (lambda d: d.__setitem__("schema_version", True), "has no integer schema_version"),
    "unknown_kind": (lambda d: d.__setitem__("kind", "pytest-sme2-history-run"),
                     "has kind 'pytest-sme2-history-run', not 'pytest-sme2-results'"),
}


@pytest.mark.parametrize("case", sorted(RESULTS_DAMAGE))
@pytest.mark.parametrize("command", ["compare", "report"])
def test_results_files_with_impossible_samples_or_schema_are_refused(case: str, command: str, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    good = _results_file(tmp_path / "good.json")
    edit, expected = RESULTS_DAMAGE[case]
    bad = _damage(_results_file(tmp_path / "bad.json"), edit)
    before = _snapshot(good, bad)
    argv = ["compare", str(good), str(bad)] if command == "compare" else ["report", str(bad)]
    code, err = _cli(capsys, *argv)
    assert code == 2, err
    assert str(bad) in err and expected in err
    assert _snapshot(good, bad) == before


@pytest.mark.parametrize("content, expected", [
    (None, ("does not exist", "does not exist")),
    (b"", ("is not valid JSON", "is not valid JSON")),
    (b'{"schema_version": 1, "kind": "pytest-sme2-results", "tests": [{"test_id": "t.py::test',
     ("not valid JSON", "not valid JSON")),
    (b"\xff\xfe\x00garbage", ("is not UTF-8 text", "is not UTF-8 text (byte 0), so not a pytest-sme2 results file")),
    (b"[1, 2, 3]", ("expected an object", "expected a JSON object")),
])
def test_compare_and_report_on_missing_empty_cut_or_foreign_files(content: bytes | None, expected: tuple[str, str],
                                                                  tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    good = _results_file(tmp_path / "good.json")
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_bytes(content)
    for argv, message in zip((["compare", str(good), str(bad)], ["report", str(bad), "--out", str(tmp_path / "r.md")]),
                             expected, strict=True):
        code, err = _cli(capsys, *argv)
        assert code == 2 and str(bad) in err and message in err, err
        assert not (tmp_path / "r.md").exists()


# ----------------------------------------------------------------------------------- the history store


def _git_repo(root: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    root.mkdir()
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "one"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.parametrize("store", ["missing", "typo", "file"])
@pytest.mark.parametrize("command", [["regressions"], ["list"], ["steps"], ["page", "--out", "{tmp}/p.html"],
                                     ["pr", "--base", "HEAD"]])
def test_history_commands_fail_on_a_store_they_cannot_read(store: str, command: list[str], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    real = _store_with_step(tmp_path)  # the store the sessions append to, with runs in it
    path = {"missing": tmp_path / "nowhere", "typo": tmp_path / "H",
            "file": next(real.root.rglob("*.jsonl"))}[store]
    code, err = _cli(capsys, "history", *(a.format(tmp=tmp_path) for a in command), "--store", str(path))
    assert code == 2, err
    assert f"history store {path} is a file, not a directory" in err if store == "file" else \
        f"no history store at {path}: each pytest session" in err
    assert f"name the store: pytest-sme2 history {command[0]} --store DIR" in err
    assert not (tmp_path / "p.html").exists()


def test_history_regressions_on_an_empty_store_is_not_green(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "h").mkdir()
    code, err = _cli(capsys, "history", "regressions", "--store", str(tmp_path / "h"))
    assert code == 2 and f"no runs in the history store {tmp_path / 'h'}, so nothing to judge" in err


@pytest.mark.parametrize("field, value, expected", [
    ("median_ms", float("nan"), "median_ms is nan, not a finite value >= 0"),
    ("median_ms", -0.09, "median_ms is -0.09, not a finite value >= 0"),
    ("block_medians_ms", (0.09, float("inf")), "block_medians_ms is inf"),
    ("category_ms", {"Convolution": float("nan")}, "category_ms['Convolution'] is nan, not a finite time"),
])
def test_history_records_with_impossible_medians_are_reported_not_dropped(field: str, value: object, expected: str,
                                                                         tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    store = _store_with_step(tmp_path)
    kw = {} if field == "median_ms" else {field: value}
    median = value if field == "median_ms" else 0.1
    bad = store.append(run(20, "f" * 40), [record("t::x", "regression", median, **kw)])  # type: ignore[arg-type]
    for command in ("steps", "regressions", "list"):
        code, err = _cli(capsys, "history", command, "--store", str(store.root))
        assert code == 2, err
        assert f"{bad}: line 2 (t::x): {expected}" in err and "restore it from git" in err


# ------------------------------------------------------------------------------- tracebacks, true causes


@pytest.mark.parametrize("where", ["under_a_file", "a_directory"])
def test_history_pr_step_summary_that_cannot_be_written_is_one_line(where: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    commit = _git_repo(tmp_path / "repo")
    store = HistoryStore(tmp_path / "h")
    store.append(run(1, commit), [record("t::x", "pass", 0.08)])
    store.append(run(2, commit), [record("t::x", "pass", 0.081)])
    (tmp_path / "f").write_text("mine\n")
    target = tmp_path / "f" / "summary.md" if where == "under_a_file" else tmp_path
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(target))
    code, err = _cli(capsys, "history", "pr", "--store", str(store.root), "--repo", str(tmp_path / "repo"),
                     "--base", "HEAD", "--step-summary")
    assert code == 2, err
    reason = "Not a directory" if where == "under_a_file" else "Is a directory"
    assert f"cannot append the pytest-sme2 summary to $GITHUB_STEP_SUMMARY ({target}): {reason}" in err
    assert "point it at a writable file" in err
    assert (tmp_path / "f").read_text() == "mine\n"


def test_the_margin_message_says_what_is_allowed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    for value in ("0", "100", "nan"):
        result = pytester.runpytest(f"--sme2-margin={value}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        assert f"'{value}' is out of range; allowed: above 0 and below 100 percent, e.g. 5" in result.stderr.str()


def test_profile_input_files_that_do_not_fit_the_program_are_bad_input(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A wrong size is the user's file (2), not a failed run (3): the local runtime reads the inputs; for a user's
    executor_runner (here the stand-in replaying the real toy_cnn trace, which would run with any input) they are
    checked against the program's metadata before the runner starts."""
    from standin import make_standin

    short = tmp_path / "short.bin"
    short.write_bytes(bytes(100))
    runner = make_standin(tmp_path / "bin", trace=TOY_TRACE)
    for device in ([], ["--device", "host", "--runner", str(runner)]):
        for inputs in ([short], [TOY_INPUT, TOY_INPUT]):
            code, err = _cli(capsys, "profile", "--pte", str(TOY_PTE), "--inputs", *map(str, inputs), "--runs", "2",
                             "--blocks", "1", "--out", str(tmp_path / "out"), *device)
            assert code == 2, err
            assert ("input file " + str(short) + " has 100 bytes" in err) if inputs == [short] else \
                "takes 1 input(s) but 2 input file(s) were given" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.etdump")), "no runner ran"


def test_help_states_the_exit_code_rule(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "exit codes (every command): 0 ok; 1 a gate failed" in out
    assert "2 bad input or usage" in out and "3 a run failed (a runner or device); 130 interrupted (Ctrl-C)" in out


@pytest.mark.parametrize("option", ["--sme2-out-dir=f", "--sme2-baseline-dir=f/baselines", "--sme2-json=f/r.json"])
def test_plugin_paths_under_a_regular_file_name_the_true_cause(option: str, pytester: pytest.Pytester,
                                                              tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    _, args = _replay_project(pytester, tmp_path, 1)
    (pytester.path / "f").write_text("mine\n")
    result = pytester.runpytest_subprocess(*args, option, timeout=300)
    output = result.stdout.str() + result.stderr.str()
    assert result.ret != 0
    assert f"Not a directory ({pytester.path / 'f'} is a file)" in output or "Not a directory (f is a file)" in output
    assert "File exists" not in output and "Traceback" not in output
    assert (pytester.path / "f").read_text() == "mine\n"


def test_the_step_summary_on_a_report_path_is_refused(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """$GITHUB_STEP_SUMMARY is appended to at the end: on the --sme2-json path it would break the JSON."""
    pytester.makepyfile(test_x="def test_x(): pass")
    (pytester.path / "r.json").write_text("the previous results\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "r.json"))
    result = pytester.runpytest("--sme2-json=r.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--sme2-json and $GITHUB_STEP_SUMMARY both name" in result.stderr.str()
    assert (pytester.path / "r.json").read_text() == "the previous results\n"
