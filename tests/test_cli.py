"""The command line as a user meets it: help, where output goes, and what ``compare`` says and exits with.

Inputs are the real recorded traces in ``tests/data`` (analysis summaries written by ``analyze``,
results files built from their analyses); the profile tests run the real local runtime on a recorded
``.pte``, or the executor_runner stand-in replaying a recorded trace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from standin import make_standin

from pytest_sme2.analysis.run import analyze, merge
from pytest_sme2.cli import main
from pytest_sme2.evidence.memory import Memory, memory_of
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.measure.profile import Profile
from pytest_sme2.results import SessionResults, TestResult, write_results
from pytest_sme2.store.artifacts import Artifact

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
MN_ON = DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-on_t1.etdump"
MN_OFF = DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-off_t1.etdump"  # a real 2.3x slower build
TT_ON = DATA / "tiny_transformer_fp32_xnnpack_simd-on_t1.etdump"
TOY_PTE = DATA / "toy_cnn_fp32_xnnpack.pte"
TOY_INPUT = DATA / "toy_cnn_input_fp32.bin"
TOY_TRACE = DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _summary(capsys: pytest.CaptureFixture[str], trace: Path, out: Path) -> Path:
    code, _, err = _cli(capsys, "analyze", str(trace), "--json", str(out), "--quiet")
    assert code == 0, err
    return out


def _profile(trace: Path, blocks: int = 5, *, identity: dict[str, Any] | None = None,
             artifact: Artifact | None = None, memory: Memory | None = None) -> Profile:
    """The recorded trace replayed in ``blocks`` blocks (one process each, as the stand-in runner does): the gate
    judges blocks, and one trace is one block — too few for any verdict."""
    one = analyze(read_etdump(trace))
    return Profile(model={"name": trace.stem}, variant=None, runner="host", build="recorded", threads=1,
                   identity=identity or {"device_kind": "host"}, analysis=merge([one] * blocks, source=one.source),
                   artifact=artifact, memory=memory)


def _results(path: Path, tests: dict[str, Path], **profile: Any) -> Path:
    results = SessionResults(tests=tuple(TestResult(test_id, outcome="passed", profile=_profile(trace, **profile))
                                         for test_id, trace in tests.items()),
                             created="2026-11-23T12:00:00+00:00")
    return write_results(path, results)


# ---------------------------------------------------------------------------------- help and output


def test_export_trace_help_documents_its_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["export-trace", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "ETDump file written by a tracer-enabled executor_runner" in out
    assert "where to write the trace JSON (default trace.json)" in out
    assert "ui.perfetto.dev" in out


def test_report_without_out_prints_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    results = _results(tmp_path / "results.json", {"tests/test_perf.py::test_latency[mobilenet]": MN_ON})
    monkeypatch.chdir(tmp_path)
    code, out, _ = _cli(capsys, "report", str(results))
    assert code == 0
    assert out.startswith("# ") and "`tests/test_perf.py::test_latency[mobilenet]`" in out
    assert not (tmp_path / "report.md").exists(), "without --out nothing is written"
    code, out, _ = _cli(capsys, "report", str(results), "--out", str(tmp_path / "r.md"))
    assert code == 0 and out == f"Wrote: {tmp_path / 'r.md'}\n" and (tmp_path / "r.md").read_text().startswith("# ")


# ---------------------------------------------------------------------------------------- compare


def test_compare_names_both_files_and_which_statistic_each_line_uses(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    old = _results(tmp_path / "before.json", {"t::test_mobilenet": MN_ON})
    new = _results(tmp_path / "after.json", {"t::test_mobilenet": MN_OFF})
    # Two files are two sessions: without a drift allowance (a hand-set 0 % here) nothing is decided.
    code, out, _ = _cli(capsys, "compare", str(old), str(new), "--drift-allowance", "0")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == (f"pytest-sme2 compare: baseline {old} -> candidate {new} (margin +5%, drift allowance +0% "
                        "(hand-set))")
    assert lines[1].startswith("REGRESSION   t::test_mobilenet  median ")
    explaining = next(i for i, line in enumerate(lines) if "categories explaining the change" in line)
    # The explanation uses the statistic the checks use (medians), and says so.
    assert "(medians of the traced runs)" in lines[explaining]
    assert all("median" in line for line in lines if line.strip().startswith("[regression] category:"))


def test_compare_of_two_single_traces_is_not_judged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One trace is one runner process, one block: a 2.3x slower build is not called a regression from one block
    each (runs of one process share its moment), and never a pass; with --strict it fails."""
    old = _summary(capsys, MN_ON, tmp_path / "before.json")
    new = _summary(capsys, MN_OFF, tmp_path / "after.json")
    code, out, _ = _cli(capsys, "compare", str(old), str(new))
    assert code == 0 and "INCONCLUSIVE after.json" in out and "too few blocks: 1 vs 1 blocks" in out
    assert "PASS" not in out
    code, _, _ = _cli(capsys, "compare", str(old), str(new), "--strict")
    assert code == 1


def test_compare_keeps_an_analysis_summarys_invalid_reason(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A throttled measurement that looks 2.3x slower is INVALID, never a regression."""
    old = _summary(capsys, MN_ON, tmp_path / "before.json")
    new = _summary(capsys, MN_OFF, tmp_path / "after.json")
    data = json.loads(new.read_text())
    data["profile"] = {"invalid_reason": "thermal throttling: status went from none to severe while measuring"}
    new.write_text(json.dumps(data))
    code, out, _ = _cli(capsys, "compare", str(old), str(new), "--json", str(tmp_path / "verdicts.json"))
    assert "REGRESSION" not in out and code == 0
    assert "INVALID      after.json" in out and "thermal throttling" in out
    verdicts = json.loads((tmp_path / "verdicts.json").read_text())["verdicts"]
    assert verdicts["comparison"]["status"] == "invalid"


def test_compare_reports_tests_missing_from_the_new_results_and_fails(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    old = _results(tmp_path / "old.json", {"t::test_mobilenet": MN_ON, "t::test_transformer": TT_ON})
    new = _results(tmp_path / "new.json", {"t::test_mobilenet": MN_ON, "t::test_new": TT_ON})
    code, out, _ = _cli(capsys, "compare", str(old), str(new), "--json", str(tmp_path / "verdicts.json"),
                        "--drift-allowance", "0")
    assert code == 1, "a test that was not measured must not look green"
    assert "PASS         t::test_mobilenet" in out
    assert "MISSING      t::test_transformer  in old.json, not measured in new.json" in out
    assert "NOT IN OLD   t::test_new  nothing to compare it with in old.json" in out
    assert out.splitlines()[-1] == "1 compared: 1 pass, 1 missing from new.json, 1 not in old.json"
    doc = json.loads((tmp_path / "verdicts.json").read_text())
    assert doc["missing"] == ["t::test_transformer"] and doc["not_in_old"] == ["t::test_new"]
    # Nothing missing: the same files compare green.
    code, out, _ = _cli(capsys, "compare", str(old), str(old))
    assert code == 0 and "MISSING" not in out


# ------------------------------------------------------------------ compare: two files are two sessions

ZEN3 = {"vendor": "AuthenticAMD", "family": 25, "model": 1, "threads": 1, "dtype": "fp32", "backend": "xnnpack"}
ZEN4 = {**ZEN3, "model": 17}
RUNTIME = {"runtime_module": "a" * 64, "executorch": "1.5.1"}
PTE_A = Artifact("1" * 64, ("2" * 64,), RUNTIME)
PTE_B = Artifact("3" * 64, ("2" * 64,), RUNTIME)


def test_compare_refuses_measurements_of_another_identity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Zen 3 baseline against a Zen 4 run is not a comparison; it says which fields differ.

    Two files of different devices are never judged as one session (the recorded 2.3x slower build is no regression).
    """
    old = _results(tmp_path / "zen3.json", {"t::test_mobilenet": MN_ON}, identity=ZEN3, artifact=PTE_A)
    new = _results(tmp_path / "zen4.json", {"t::test_mobilenet": MN_OFF}, identity=ZEN4, artifact=PTE_A)
    code, out, err = _cli(capsys, "compare", str(old), str(new), "--json", str(tmp_path / "verdicts.json"))
    assert code == 2
    assert ("REFUSED      t::test_mobilenet  measured on another device identity than in zen3.json, so not "
            "compared; differs in: model: 1 != 17") in out
    assert "REGRESSION" not in out and out.splitlines()[-1] == "1 compared: 1 refused"
    assert "1 test(s) of" in err and "were measured on another device identity" in err
    assert json.loads((tmp_path / "verdicts.json").read_text())["refused"] == {"t::test_mobilenet": ["model: 1 != 17"]}


def test_compare_of_an_unchanged_artifact_is_drift_never_a_failure(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The same program, inputs and runtime, slower in another session, is the machine."""
    old = _results(tmp_path / "monday.json", {"t::test_mobilenet": MN_ON}, identity=ZEN3, artifact=PTE_A)
    new = _results(tmp_path / "tuesday.json", {"t::test_mobilenet": MN_OFF}, identity=ZEN3, artifact=PTE_A)
    code, out, _ = _cli(capsys, "compare", str(old), str(new))
    assert code == 0, out
    assert "DRIFT        t::test_mobilenet" in out
    assert "rule: unchanged artifact (same program, inputs and build) in two sessions: a slower median is the " \
           "machine (drift), reported, never failed" in out


def test_compare_of_a_changed_artifact_takes_the_stored_rule_and_the_drift_allowance(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A changed program is judged on the stored samples, the margin widened by the drift allowance.

    Without an allowance (none calibrated from --history, none set by hand) it is not decided, never a
    pass or a regression; a hand-set --drift-allowance still applies and says it is uncalibrated. The recorded toy_cnn
    fp16 runs are 1.43x the fp32 ones (0.1122 / 0.0787 ms): a regression at a hand-set 0 %, within 5 % + 50 %.
    """
    old = _results(tmp_path / "old.json", {"t::test_toy": DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"},
                   identity=ZEN3, artifact=PTE_A)
    new = _results(tmp_path / "new.json", {"t::test_toy": DATA / "toy_cnn_fp16_xnnpack_simd-on_t1.etdump"},
                   identity=ZEN3, artifact=PTE_B)
    code, out, _ = _cli(capsys, "compare", str(old), str(new))
    assert code == 0 and "INCONCLUSIVE t::test_toy" in out, out
    assert "rule: changed since OLD (model program changed (.pte 1111111111 -> 3333333333)); two files are two " \
           "sessions: the stored-samples rule, margin 5% and no calibrated drift allowance, so it is not decided " \
           "(--history DIR calibrates one, --drift-allowance PCT sets one by hand)" in out
    code, out, _ = _cli(capsys, "compare", str(old), str(new), "--strict")
    assert code == 1, "not decided is not green where inconclusive fails"
    code, out, _ = _cli(capsys, "compare", str(old), str(new), "--drift-allowance", "0")
    assert code == 1 and "REGRESSION   t::test_toy" in out
    code, out, _ = _cli(capsys, "compare", str(old), str(new), "--drift-allowance", "50")
    assert code == 0 and "PASS         t::test_toy" in out, out
    assert out.splitlines()[0].endswith("(margin +5%, drift allowance +50% (hand-set))")
    assert "the stored-samples rule, margin 5% + 50% drift allowance (hand-set, not calibrated)" in out
    assert "+55.0% margin (5% + 50% drift allowance, hand-set, not calibrated)" in out
    code, out, _ = _cli(capsys, "compare", str(old), str(new), "--history", str(tmp_path / "no_history"))
    assert code == 0 and "INCONCLUSIVE t::test_toy" in out
    assert "holds 0 trusted session(s) of this test on this device" in out


def test_compare_judges_planned_memory_exactly_by_the_files_comparison(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``compare`` gates memory as the plugin does. The same recorded runs (latency passes), the plan of
    another real program: toy_cnn portable plans 196,608 B where the XNNPACK one plans 12,400 B."""
    xnn = memory_of(DATA / "toy_cnn_fp32_xnnpack.pte", [])
    portable = memory_of(DATA / "toy_cnn_fp32_portable.pte", [])
    assert (xnn.planned_bytes, portable.planned_bytes) == ((12400,), (196608,))
    old = _results(tmp_path / "old.json", {"t::test_toy": TOY_TRACE}, identity=ZEN3, artifact=PTE_A, memory=xnn)
    new = _results(tmp_path / "new.json", {"t::test_toy": TOY_TRACE}, identity=ZEN3, artifact=PTE_B,
                   memory=portable)
    code, out, _ = _cli(capsys, "compare", str(old), str(new))
    assert code == 1 and "REGRESSION   t::test_toy" in out, out
    assert "184,208" in out, out
    code, out, _ = _cli(capsys, "compare", str(new), str(old))
    assert code == 0 and "[improvement] planned_memory: shrank: 196,608 B -> 12,400 B (-184,208 B" in out, out


# ---------------------------------------------------------------------------------------- profile


#: Rules match lower-cased operator names: every XNNPACK convolution counts as GEMM.
RULES = [{"category": "GEMM", "pattern": "convolution"}]


def test_profile_takes_category_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runner = make_standin(tmp_path / "bin", trace=TOY_TRACE)  # replays the recorded trace, and says so
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(RULES))
    totals = {}
    for name, extra in (("default", ()), ("rules", ("--rules", str(rules)))):
        # The busy check off: beside other tests it re-measures every block and waits; the totals are the trace's.
        code, _, err = _cli(capsys, "profile", "--pte", str(TOY_PTE), "--inputs", str(TOY_INPUT), "--runner",
                            str(runner), "--runs", "29", "--warmup", "1", "--busy-limit", "100",
                            "--out", str(tmp_path / name), *extra)
        assert code == 0, err
        (summary,) = (tmp_path / name).glob("*/analysis_summary.json")
        totals[name] = json.loads(summary.read_text())["category_totals_ms"]
    default, moved = totals["default"], totals["rules"]
    assert default["Convolution"] > 0 and moved["Convolution"] == 0
    assert moved["GEMM"] == pytest.approx(default["GEMM"] + default["Convolution"])


def test_profile_waits_for_another_measurement_on_this_host(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """``profile`` takes the host's measuring lock in ``--cache-dir``, as the plugin does: a pytest run measuring on
    this host (here, the lock held on another open file) holds it off until done, and it says whom it waits for."""
    import fcntl
    import threading

    runner = make_standin(tmp_path / "bin", trace=TOY_TRACE)
    cache = tmp_path / "cache"
    cache.mkdir()
    lock = cache / "measuring.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"pid 1: a pytest run, since 00:00:00 UTC\n")
    fcntl.flock(fd, fcntl.LOCK_EX)
    codes: list[int] = []
    argv = ["profile", "--pte", str(TOY_PTE), "--inputs", str(TOY_INPUT), "--runner", str(runner), "--runs", "3",
            "--warmup", "1", "--cache-dir", str(cache), "--out", str(tmp_path / "out")]
    capsys.readouterr()
    cli = threading.Thread(target=lambda: codes.append(main(argv)))
    err = ""
    try:
        cli.start()
        # until it says it waits (a loaded or slower machine takes seconds to import and reach the lock), then a
        # moment more: it must still be waiting, nothing measured
        deadline = time.monotonic() + 120
        while "waiting for another measurement" not in err and cli.is_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
            err += capsys.readouterr().err
        cli.join(timeout=1)
        assert cli.is_alive() and not list((tmp_path / "out").glob("*/analysis_summary.json")), "it did not wait"
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    cli.join(timeout=120)
    err += capsys.readouterr().err
    assert codes == [0], err
    assert f"waiting for another measurement on this host (pid 1: a pytest run, since 00:00:00 UTC; lock {lock})" in err
    assert list((tmp_path / "out").glob("*/analysis_summary.json"))


def test_profile_with_a_cache_dir_that_cannot_hold_the_lock_says_which(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A file where ``--cache-dir`` must be: the measuring lock cannot be made; the error names it, no traceback."""
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    runner = make_standin(tmp_path / "bin", trace=TOY_TRACE)
    code, _, err = _cli(capsys, "profile", "--pte", str(TOY_PTE), "--inputs", str(TOY_INPUT), "--runner", str(runner),
                        "--runs", "3", "--cache-dir", str(blocker / "cache"), "--out", str(tmp_path / "out"))
    assert code == 2 and "Traceback" not in err
    assert f"cannot write the host's measuring lock (in the cache directory: --sme2-cache-dir, or --cache-dir of " \
           f"pytest-sme2 profile) {blocker / 'cache' / 'measuring.lock'}: Not a directory ({blocker} is a file); " \
           "check the path." in err


@pytest.mark.parametrize(("content", "expected"), [
    (None, "does not exist; pass an existing JSON file"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "is not UTF-8 text (a binary file?)"),
    (b'[{"category": "Matmul", "pattern": "gemm"}]', "names category 'Matmul'; allowed: "),
])
def test_profile_and_analyze_refuse_a_bad_rules_file_before_running(content: bytes | None, expected: str,
                                                                    tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    rules = tmp_path / "rules.json"
    if content is not None:
        rules.write_bytes(content)
    for argv in (["profile", "--pte", str(TOY_PTE), "--out", str(tmp_path / "out")], ["analyze", str(TOY_TRACE)]):
        with pytest.raises(SystemExit) as info:
            main([*argv, "--rules", str(rules)])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert "argument --rules: " in err and str(rules) in err and expected in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_profile_keeps_the_runtimes_output_out_of_the_terminal(tmp_path: Path) -> None:
    """executorch's runtime prints cpuinfo/threadpool lines while loading a program; they go to a log. (The busy check
    is off: beside other tests it re-measures disturbed blocks, waiting for a quiet machine that never comes.)"""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_sme2", "profile", "--pte", str(TOY_PTE), "--inputs", str(TOY_INPUT),
         "--runs", "5", "--busy-limit", "100", "--out", str(tmp_path / "out")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    for noise in ("cpuinfo", "threadpool.cpp", "Warning"):
        assert noise not in proc.stderr and noise not in proc.stdout, proc.stdout + proc.stderr
    (log,) = (tmp_path / "out").glob("*/third_party.log")
    assert "[cpuinfo_utils.cpp" in log.read_text()
    assert f"(runtime output: {log})" in proc.stdout
    assert "median" in proc.stdout
    # ... and the progress reaches the user, not the log (the runtime's output is diverted inside the block).
    assert "[sme2] toy_cnn_fp32_xnnpack: block 1/" in proc.stderr and "[sme2]" not in log.read_text()


# ------------------------------------------------------------------ profile: the project's models

MODELS_PY = """
from pytest_sme2.models import register_model


@register_model("{name}")
def make():
    import torch
    return torch.nn.Linear(4, 2), (torch.ones(1, 4),)
"""


def test_profile_reads_the_projects_ini_upward_as_pytest_does(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``profile`` imports the ``sme2_models`` of the ini pytest would use, relative to it.

    The project's model is found from a directory below the ini, as pytest would find it.
    """
    project = tmp_path / "project"
    (project / "models").mkdir(parents=True)
    (project / "models" / "ini_found.py").write_text(MODELS_PY.format(name="ini_found_net"))
    (project / "pyproject.toml").write_text('[tool.pytest.ini_options]\nsme2_models = ["models/ini_found.py"]\n')
    (project / "tests" / "deep").mkdir(parents=True)
    monkeypatch.chdir(project / "tests" / "deep")  # the ini is two levels up, the path relative to it
    code, _, err = _cli(capsys, "profile", "--model", "no_such_net", "--out", str(tmp_path / "out"))
    assert code == 2
    assert "registered models:" in err and "ini_found_net" in err
    assert f"Model sources here: sme2_models of {project / 'pyproject.toml'}: " in err
    assert str(project / "models" / "ini_found.py") in err


def test_profile_models_option_replaces_the_ini_and_no_ini_is_named(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``--models SRC`` is the command line's ``--sme2-models``: it replaces the ini's list, as in the plugin."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nsme2_models =\n    missing_models.py\n")
    (tmp_path / "cli_models.py").write_text(MODELS_PY.format(name="cli_option_net"))
    monkeypatch.chdir(tmp_path)
    code, _, err = _cli(capsys, "profile", "--model", "no_such_net", "--models", "cli_models.py")
    assert code == 2 and "cli_option_net" in err and "Model sources here: --models cli_models.py" in err
    # Without --models, the ini's file is imported (and it does not exist: the error names it).
    code, _, err = _cli(capsys, "profile", "--model", "no_such_net")
    assert code == 2 and f"models file {tmp_path / 'missing_models.py'} does not exist" in err


@pytest.mark.parametrize(("files", "found"), [
    # pytest.ini wins over pyproject.toml in one directory, even without a [pytest] section
    ({"pytest.ini": "", "pyproject.toml": '[tool.pytest.ini_options]\nsme2_models = ["a.py"]\n'}, "pytest.ini"),
    # a pyproject.toml without a pytest table does not count: tox.ini's [pytest] does
    ({"pyproject.toml": "[project]\nname = 'x'\n", "tox.ini": "[pytest]\nsme2_models = a.py\n"}, "tox.ini"),
    ({"tox.ini": "[tox]\n", "setup.cfg": "[tool:pytest]\nsme2_models = a.py\n  b.py\n"}, "setup.cfg"),
    ({"setup.cfg": "[metadata]\nname = x\n"}, None),
])
def test_find_inifile_follows_pytests_order(tmp_path: Path, files: dict[str, str], found: str | None) -> None:
    from pytest_sme2.inifile import find_inifile

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "sub").mkdir()
    ini = find_inifile(tmp_path / "sub")
    if found is None:
        assert ini is None or ini.path.parent != tmp_path
        return
    assert ini is not None and ini.path == tmp_path / found
    if found == "setup.cfg":
        assert ini.model_sources() == (str(tmp_path / "a.py"), str(tmp_path / "b.py"))


@pytest.mark.slow
def test_the_readmes_profile_line_works_in_this_repository(tmp_path: Path, example_export: Any,
                                                          sme2_shared_cache: Path) -> None:
    """``pytest-sme2 profile --model toy_cnn``, run in this repository, finds the example models
    through pyproject.toml's ``sme2_models``, as the plugin does. Its cache holds toy_cnn's export already (a copy of
    the tests' shared export, as a restored CI cache would): what is checked is where the model is found, not an
    export; the cache is its own, so is the host's measuring lock in it."""
    exported = example_export("fp32", "xnnpack")
    shutil.copytree(exported.entry_dir, tmp_path / "cache" / exported.entry_dir.relative_to(sme2_shared_cache))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_sme2", "profile", "--model", "toy_cnn", "--runs", "2", "--warmup", "0",
         "--blocks", "1", "--busy-limit", "100", "--cache-dir", str(tmp_path / "cache"),
         "--out", str(tmp_path / "out")],
        cwd=REPO / "example_models", capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "== toy_cnn_fp32_xnnpack on local" in proc.stdout
    assert "exported toy_cnn" not in proc.stdout + proc.stderr  # found in the cache: the same model, found by name
    assert (tmp_path / "out" / "toy_cnn_fp32_xnnpack" / "analysis_summary.json").is_file()


# --------------------------------------------------------------------------- the plugin's --sme2-rules


def test_sme2_rules_is_checked_like_every_option(pytester: pytest.Pytester) -> None:
    """The plugin's rules file is read when pytest starts: a bad one is a usage error naming it."""
    pytester.makeini("[pytest]\n")
    pytester.makepyfile("def test_nothing():\n    pass\n")
    (pytester.path / "binary.json").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (pytester.path / "rules.json").write_text(json.dumps(RULES))
    for value, expected in (("missing.json", "does not exist; pass an existing JSON file"),
                            ("binary.json", "is not UTF-8 text (a binary file?)")):
        result = pytester.runpytest(f"--sme2-rules={value}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        assert f"argument --sme2-rules: category rules file {value} {expected}" in result.stderr.str()
    pytester.makeini("[pytest]\nsme2_rules = binary.json\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ini sme2_rules = 'binary.json': category rules file binary.json is not UTF-8 text" in result.stderr.str()
    pytester.makeini("[pytest]\nsme2_rules = rules.json\n")
    assert pytester.runpytest().ret == pytest.ExitCode.OK
