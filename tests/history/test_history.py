"""History across commits: the store, change points, acknowledgements, creep, the PR view, the page.

The end-to-end tests build a small model project in a temporary git repository, make real commits (a docs-only
change, then a real model change: a larger input, really slower), run the suite once per commit in its own
process, and check what ``pytest-sme2 history`` makes of the store against what each session's gate said (its
``--sme2-json``). The unit tests use the real per-session series recorded on this VM
(``benchmarks/data/history_toy_cnn_sessions.jsonl``, ``benchmarks/record_history.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pytest_sme2.history import acknowledge
from pytest_sme2.history.changepoints import _welch_p, find_steps
from pytest_sme2.history.creep import theil_sen_pct
from pytest_sme2.history.pr import column_of, pr_view, render_markdown
from pytest_sme2.history.records import HistoryRecord, RunInfo
from pytest_sme2.history.series import build_series, steps_of
from pytest_sme2.history.store import HistoryError, HistoryStore, read_run
from pytest_sme2.store.files import TMP_PREFIX

REPO = Path(__file__).resolve().parents[2]
RECORDED = REPO / "benchmarks" / "data" / "history_toy_cnn_sessions.jsonl"


def recorded(plan: str, size: int) -> list[float]:
    """The gate's median of every recorded session of ``plan`` at input ``size``, in recording order."""
    out = []
    for line in RECORDED.read_text().splitlines():
        d = json.loads(line)
        if d["bench"]["plan"] == plan and d["bench"]["size"] == size:
            out.append(d["median_ms"])
    return out


def record(test_id: str, status: str, median: float, **kw: object) -> HistoryRecord:
    return HistoryRecord(test_id=test_id, label="toy", identity_id="a92033e3b449", identity="AMD EPYC",
                         artifact_id=str(kw.pop("artifact_id", "art1")), status=status, median_ms=median, **kw)  # type: ignore[arg-type]


def run(i: int, commit: str) -> RunInfo:
    return RunInfo(run_id=f"run{i:03d}", time=f"2026-11-24T10:{i:02d}:00+00:00", commit=commit, branch="main",
                   commit_source="git")


# ------------------------------------------------------------------------------------------------ store


def test_store_appends_one_file_per_run_and_reads_it_back(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h")
    a = store.append(run(1, "a" * 40), [record("t::x", "pass", 0.08, block_medians_ms=(0.079, 0.081))])
    b = store.append(run(2, "b" * 40), [record("t::x", "regression", 0.09, delta_pct=12.5, delta_ci_pct=(10.0, 15.0))])
    assert a != b and a.parent == b.parent == tmp_path / "h" / "runs" / "2026-11"
    assert not [p for p in (tmp_path / "h").rglob("*") if p.name.startswith(TMP_PREFIX)]
    runs = store.runs()
    assert [r.run.commit[0] for r in runs] == ["a", "b"]
    assert runs[1].records[0].delta_ci_pct == (10.0, 15.0)
    assert runs[0].records[0].block_medians_ms == (0.079, 0.081)
    frame = store.frame()
    assert list(frame["order"]) == [0, 1] and list(frame["status"]) == ["pass", "regression"]


def test_a_failed_write_leaves_no_run_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run is written whole or not at all (a killed session never leaves half a record)."""
    from pytest_sme2.store import files as atomic

    def fail(*args: object, **kw: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", fail)
    store = HistoryStore(tmp_path / "h")
    with pytest.raises(Exception, match="No space left"):
        store.append(run(1, "a" * 40), [record("t::x", "pass", 0.08)])
    assert list((tmp_path / "h").rglob("*.jsonl")) == []


def test_store_errors_name_the_file_and_the_fix(tmp_path: Path) -> None:
    bad = tmp_path / "runs" / "2026-11" / "x.jsonl"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"something": "else"}\n')
    with pytest.raises(HistoryError, match=r"x\.jsonl: not a pytest-sme2 history run.*remove it"):
        read_run(bad)
    bad.write_text(json.dumps({**run(1, "a").to_dict(), "schema_version": 99}) + "\n")
    with pytest.raises(HistoryError, match=r"history run .*has schema_version 99, newer.*upgrade pytest-sme2"):
        read_run(bad)


# -------------------------------------------------------------------------------------- change points


def test_welch_t_test_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    x, y = rng.normal(0, 1, 12), rng.normal(0.7, 2, 7)
    assert _welch_p(x, y) == pytest.approx(stats.ttest_ind(x, y, equal_var=False).pvalue, rel=1e-9)


@pytest.mark.skipif(not RECORDED.is_file(), reason="benchmarks/record_history.py has not recorded the series")
def test_recorded_unchanged_sessions_have_no_step_and_a_real_20pct_change_is_found() -> None:
    unchanged = recorded("light", 32)
    slower = recorded("light", 36)
    assert len(unchanged) >= 20 and len(slower) >= 5
    assert find_steps(unchanged) == []
    spliced = unchanged[:20] + slower
    steps = find_steps(spliced)
    assert [s.index for s in steps] == [20]
    # The size is the ratio of the two sides' medians (of log values: an even count's middle is geometric), computed
    # here independently.
    expected = (np.exp(np.median(np.log(slower)) - np.median(np.log(unchanged[:20]))) - 1) * 100
    assert steps[0].pct == pytest.approx(expected, rel=1e-9)
    assert 10 < steps[0].pct < 35


def test_theil_sen_creep_of_a_steady_drift() -> None:
    values = [1.0 * 1.01 ** i for i in range(20)]  # +1 % per run, 19 intervals
    assert theil_sen_pct(values) == pytest.approx((1.01 ** 19 - 1) * 100, rel=1e-9)
    assert theil_sen_pct([1.0] * 20) == 0


# ------------------------------------------------------------------------------ acknowledge and PR view


def _store_with_step(tmp_path: Path) -> HistoryStore:
    store = HistoryStore(tmp_path / "h")
    medians = [0.080, 0.081, 0.0805, 0.0802, 0.100, 0.101, 0.0995, 0.1003]
    for i, m in enumerate(medians):
        store.append(run(i, f"{i:x}" * 40), [record("t::x", "pass" if i < 4 else "regression", m,
                                                       artifact_id="art1" if i < 4 else "art2")])
    return store


def test_acknowledged_step_and_stale_entry(tmp_path: Path) -> None:
    store = _store_with_step(tmp_path)
    series = build_series(store.frame(), ["e2e"])
    steps = steps_of(series[0], min_size=3)
    assert [(s.index, s.commit_range, s.artifact_changed) for s in steps] == [(4, "3333333333..4444444444", True)]
    ack_file = tmp_path / acknowledge.DEFAULT_FILE
    ack_file.write_text(json.dumps({"schema_version": 1, "acknowledged": [
        {"test": "t::*", "device": "a920", "commits": "4444444", "reason": "bigger input, accepted"},
        {"test": "t::gone", "device": "*", "commits": "1..2", "reason": "renamed test"}]}))
    marked, stale = acknowledge.apply(steps, series, acknowledge.load(ack_file))
    assert marked[0].acknowledged == "bigger input, accepted"
    assert [a.test for a in stale] == ["t::gone"]
    ack_file.write_text(json.dumps({"acknowledged": [{"test": "t::x"}]}))
    with pytest.raises(Exception, match=r"sme2_acknowledged\.json: entry 1 has no device, commits, reason"):
        acknowledge.load(ack_file)


def test_pr_view_counts_are_the_head_runs_gate_statuses(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h")
    store.append(run(1, "a" * 40), [record("t::x", "pass", 0.08), record("t::gone", "pass", 0.1)])
    head = [record("t::x", "regression", 0.09, delta_pct=12.0, delta_ci_pct=(9.0, 15.0)),
            record("t::y", "drift", 0.05), record("t::z", "inconclusive", 0.05), record("t::n", "recorded", 0.2)]
    store.append(run(2, "b" * 40), head)
    base, head_run = store.runs()
    view = pr_view(head_run, base, base_ref="main")
    assert view.counts() == {"regressed": 1, "improved": 0, "unchanged": 1, "new": 3, "missing": 1, "invalid": 1,
                             "not gated": 1}
    assert [column_of(r.status) for r in head] == ["regressed", "unchanged", "invalid", "not gated"]
    text = render_markdown(view)
    assert "| regressed | improved | unchanged | new | missing | invalid | not gated |" in text
    assert "| 1 | 0 | 1 | 3 | 1 | 1 | 1 |" in text
    assert "+12.0% (+9.0% .. +15.0%)" in text and "`t::gone`" in text


# --------------------------------------------------------------------------- end to end, real commits

MODELS = '''
import torch

from example_models.models import ToyCNN, _example_input, _seeded
from pytest_sme2.models import register_model

SIZE = {size}


@register_model("toy")
def toy():
    return _seeded(ToyCNN).eval(), (_example_input(1, 3, SIZE, SIZE),)
'''

TESTS = '''
import pytest


@pytest.mark.sme2_model("toy", dtype="fp32", backend="xnnpack")
@pytest.mark.sme2_threshold(latency_pct=10)
def test_latency(exported_model, sme2_runner, sme2_baseline):
    sme2_baseline.check(sme2_runner.profile(exported_model))


@pytest.mark.sme2_model("toy", dtype="fp32", backend="xnnpack")
@pytest.mark.sme2_threshold(latency_pct=25)
def test_latency_loose(exported_model, sme2_runner, sme2_baseline):
    sme2_baseline.check(sme2_runner.profile(exported_model))
'''

PYPROJECT = '''
[tool.pytest.ini_options]
sme2_models = ["models.py"]
'''


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONHASHSEED", "GITHUB_"))}
    env.pop("CI", None)
    env["PYTHONPATH"] = str(REPO)
    return env


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=ci@example.com", "-c", "user.name=CI", *args], cwd=root,
                          capture_output=True, text=True, check=True).stdout.strip()


def _session(root: Path, name: str, *extra: str) -> dict[str, object]:
    out = root.parent / f"{name}.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--sme2-busy-limit=100",
                           "--sme2-blocks=5", "--sme2-runs=5", f"--sme2-json={out}", *extra], cwd=root, env=_env(),
                          capture_output=True, text=True, timeout=900, check=False)
    assert out.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "sme2 history: run " in proc.stdout, proc.stdout[-2000:]
    return json.loads(out.read_text())


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_sme2", "history", *args], cwd=root, env=_env(),
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, object]], list[str]]:
    """main: c1 (the model), c2, c3 (docs only); feature (from c3): c4 (input 32 -> 96: 9x the pixels), c5, c6 (docs).
    One session per commit (c6's with two xdist workers): three runs a side, so Welch's t-test has a few degrees of
    freedom (two a side left ~1, and p wandered past 0.05 on a loaded CI machine). The step is far larger than a
    session's drift here (+53 % / -28 % seen between sessions of one .pte): with 32 -> 48 (2.25x) one drifting
    session a side could take p past 0.05; at 9x the step stands."""
    root = tmp_path_factory.mktemp("history") / "proj"
    root.mkdir()
    for name, text in {"models.py": MODELS.format(size=32), "test_perf.py": TESTS, "pyproject.toml": PYPROJECT,
                       "README.md": "a model project\n", ".gitignore": ".sme2_*\n"}.items():
        (root / name).write_text(textwrap.dedent(text))
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "c1: the model")
    results = {"c1": _session(root, "c1")}
    for name in ("c2", "c3"):
        (root / "README.md").write_text(f"a model project, documented ({name})\n")
        _git(root, "commit", "-qam", f"{name}: docs")
        results[name] = _session(root, name)
    _git(root, "checkout", "-qb", "feature")
    (root / "models.py").write_text(textwrap.dedent(MODELS.format(size=96)))
    _git(root, "commit", "-qam", "c4: larger input")
    results["c4"] = _session(root, "c4")
    for name in ("c5", "c6"):
        (root / "README.md").write_text(f"a model project, documented again ({name})\n")
        _git(root, "commit", "-qam", f"{name}: docs")
        results[name] = _session(root, name, *(("-n", "2") if name == "c6" else ()))
    commits = _git(root, "rev-list", "--reverse", "HEAD").split()
    return root, results, commits


def _gate_medians(results: dict[str, object], test: str) -> float:
    return next(float(t["median_ms"]) for t in results["tests"] if t["test_id"].endswith(test))  # type: ignore[index, union-attr]


@pytest.mark.slow
def test_history_fills_and_lists_the_real_step(project: tuple[Path, dict[str, dict[str, object]], list[str]]) -> None:
    root, results, commits = project
    runs = HistoryStore(root / ".sme2_history").runs()
    assert [r.run.commit for r in runs] == commits  # one run per session, in order, xdist's appended once
    assert [r.run.branch for r in runs] == ["main"] * 3 + ["feature"] * 3
    assert [len(r.records) for r in runs] == [2] * 6
    # Each record carries what that session's gate said (its --sme2-json), not a recomputation.
    for stored, name in zip(runs, ("c1", "c2", "c3", "c4", "c5", "c6"), strict=True):
        gate = {t["test_id"]: (t["status"], t["median_ms"]) for t in results[name]["tests"]}  # type: ignore[index]
        assert {r.test_id: (r.status, r.median_ms) for r in stored.records} == {
            k: (s, round(m, 6)) for k, (s, m) in gate.items()}
    listed = _cli(root, "list")
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == 6
    # Three runs on each side of the step: Welch's t-test has a few degrees of freedom there, so this short history
    # needs a looser p than the default (which is tuned for series of tens of runs, benchmarks/changepoints.py).
    steps = _cli(root, "steps", "--min-size=3", "--max-pvalue=0.05", "--metrics=e2e")
    assert steps.returncode == 0, steps.stderr
    lines = [line for line in steps.stdout.splitlines() if line.startswith("REGRESSION")]
    assert len(lines) == 2, steps.stdout  # both tests
    # The sides' medians are of log values (three runs a side: the middle one), from each session's gate median.
    expected = {t: (np.exp(np.median(np.log([_gate_medians(results[c], t) for c in ("c4", "c5", "c6")]))
                           - np.median(np.log([_gate_medians(results[c], t) for c in ("c1", "c2", "c3")]))) - 1) * 100
                for t in ("test_latency", "test_latency_loose")}
    for test, pct in expected.items():
        line = next(x for x in lines if f"::{test} " in x)
        shown = float(line.split(" e2e: ")[1].split("%")[0])
        # The store keeps medians to 1 ns (6 decimals of a ms) and the line prints 0.1 %.
        assert shown == pytest.approx(pct, abs=0.06) and f"at {commits[2][:10]}..{commits[3][:10]}" in line
        assert "artifact changed" in line
    assert all(p > 30 for p in expected.values())


@pytest.mark.slow
def test_pr_table_matches_the_gate_and_regressions_are_listed(
        project: tuple[Path, dict[str, dict[str, object]], list[str]], tmp_path: Path) -> None:
    root, results, commits = project
    summary = tmp_path / "summary.md"
    env_summary = {**_env(), "GITHUB_STEP_SUMMARY": str(summary)}
    pr = subprocess.run([sys.executable, "-m", "pytest_sme2", "history", "pr", "--base", "main", "--step-summary"],
                        cwd=root, env=env_summary, capture_output=True, text=True, timeout=300, check=False)
    assert pr.returncode == 0, pr.stderr
    gate = results["c6"]["counts"]  # type: ignore[index]
    columns = {"regressed": gate["regression"], "improved": gate["improvement"],  # type: ignore[index]
               "unchanged": gate["pass"] + gate["drift"],  # type: ignore[index]
               "invalid": gate["invalid"] + gate["inconclusive"] + gate["failed"],  # type: ignore[index]
               "new": 0, "missing": 0}
    header = "| regressed | improved | unchanged | new | missing | invalid |"
    assert header in pr.stdout
    assert "| " + " | ".join(str(columns[c]) for c in header.strip("| ").split(" | ")) + " |" in pr.stdout
    assert f"against `{commits[2][:10]}` (merge-base with `main`)" in pr.stdout
    assert summary.read_text() == pr.stdout
    assert gate["regression"] == 2  # type: ignore[index]  # the larger input is really slower: both tests regress
    regressions = _cli(root, "regressions", "--min-size=3", "--max-pvalue=0.05", "--metrics=e2e")
    assert regressions.returncode == 1
    step_lines = [x for x in regressions.stdout.splitlines() if " e2e: " in x]
    assert len(step_lines) == 2 and all(f"at {commits[2][:10]}..{commits[3][:10]}" in x for x in step_lines)
    assert len([x for x in regressions.stdout.splitlines() if "gate verdict of run" in x]) == 2
    # Acknowledging the change stops the steps from counting; the gate's own regressions of the head run stay.
    (root / acknowledge.DEFAULT_FILE).write_text(json.dumps({"schema_version": 1, "acknowledged": [
        {"test": "test_perf.py::*", "device": "*", "commits": commits[3][:12], "reason": "larger input, accepted"},
        {"test": "test_perf.py::old", "device": "*", "commits": commits[0][:12], "reason": "stale"}]}))
    try:
        acked = _cli(root, "regressions", "--min-size=3", "--max-pvalue=0.05", "--metrics=e2e")
    finally:
        (root / acknowledge.DEFAULT_FILE).unlink()
    lines = acked.stdout.splitlines()
    assert not [x for x in lines if " e2e: " in x]  # the acknowledged steps are no longer current regressions
    assert len([x for x in lines if "gate verdict of run" in x]) == 2 and acked.returncode == 1
    assert [x.split(" on ")[0] for x in lines if x.startswith("STALE ACK")] == ["STALE ACK   test_perf.py::old"]
    steps = _cli(root, "steps", "--min-size=3", "--max-pvalue=0.05", "--metrics=e2e")
    assert steps.returncode == 0


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt install chromium)")
def test_trend_page_shows_the_steps_in_chromium(project: tuple[Path, dict[str, dict[str, object]], list[str]],
                                                 tmp_path: Path) -> None:
    from report.test_browser import chromium, png_pixels

    root, _, commits = project
    page = tmp_path / "trend.html"
    made = _cli(root, "page", "--min-size=3", "--max-pvalue=0.05", "--out", str(page))
    assert made.returncode == 0, made.stderr
    dom = chromium("--dump-dom", page.as_uri(), profile=tmp_path / "profile").stdout
    step_range = f"{commits[2][:10]}..{commits[3][:10]}"
    assert dom.count('class="step"') >= 2 and f'data-commits="{step_range}"' in dom
    assert dom.count('class="point"') >= 12 and commits[4][:12] in dom  # hover text names each run's commit
    assert dom.count("<section class=\"series\"") == 2
    shot = tmp_path / "trend.png"
    chromium("--window-size=1000,1400", f"--screenshot={shot}", page.as_uri(), profile=tmp_path / "profile")
    _, _, rgb = png_pixels(shot)
    red = sum(1 for i in range(0, len(rgb), 3) if rgb[i:i + 3] == bytes((0xCF, 0x22, 0x2E)))
    assert red > 50  # the regression step lines and labels are drawn


# ----------------------------------------------------------------------------- option, commit detection


def test_history_option_defaults_beside_the_baselines(pytester: pytest.Pytester) -> None:
    from pytest_sme2.plugin.records import OPTIONS_KEY

    config = pytester.parseconfigure()
    assert config.stash[OPTIONS_KEY].history == config.rootpath / ".sme2_history"
    config = pytester.parseconfigure("--sme2-baseline-dir=perf/baselines")
    assert config.stash[OPTIONS_KEY].history == config.rootpath / "perf" / ".sme2_history"
    assert pytester.parseconfigure("--sme2-history=none").stash[OPTIONS_KEY].history is None
    config = pytester.parseconfigure("--sme2-history=ci/history")
    assert config.stash[OPTIONS_KEY].history == config.rootpath / "ci" / "history"


def test_commit_from_git_else_ci_variables_else_none(tmp_path: Path) -> None:
    from pytest_sme2.store.gitinfo import commit_info

    plain = tmp_path / "plain"
    plain.mkdir()
    env = {"GITHUB_SHA": "f" * 40, "GITHUB_HEAD_REF": "feature/x", "GITHUB_REF_NAME": "12/merge"}
    assert commit_info(plain, env).__dict__ == {"commit": "f" * 40, "branch": "feature/x", "source": "env:GITHUB_SHA",
                                                "dirty": False}
    assert commit_info(plain, {}).source == "none"
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "trunk")
    (repo / "a.txt").write_text("1")
    _git(repo, "add", "a.txt")
    _git(repo, "commit", "-qm", "one")
    info = commit_info(repo, env)
    assert (info.commit, info.branch, info.source, info.dirty) == (_git(repo, "rev-parse", "HEAD"), "trunk", "git",
                                                                    False)
    (repo / "a.txt").write_text("2")
    assert commit_info(repo, env).dirty


def test_a_step_of_an_unchanged_artifact_is_drift_not_a_regression(tmp_path: Path) -> None:
    """As the per-run gate: the same program, inputs and build slower is the machine, reported and never failed."""
    from pytest_sme2.history.cli import current_regressions

    store = HistoryStore(tmp_path / "h")
    for i, m in enumerate([0.080, 0.081, 0.0805, 0.0802, 0.100, 0.101, 0.0995, 0.1003]):
        store.append(run(i, f"{i:x}" * 40), [record("t::x", "drift" if i >= 4 else "pass", m)])
    series = build_series(store.frame(), ["e2e"])
    steps = steps_of(series[0])
    assert [(s.index, s.artifact_changed, s.kind) for s in steps] == [(4, False, "regression")]
    failing, drift = current_regressions(series, steps, store.runs())
    assert failing == [] and len(drift) == 1 and "+24." in drift[0]


def test_page_labels_an_emulated_ratio_as_not_a_speedup(tmp_path: Path) -> None:
    from pytest_sme2.history.trend import render_page

    store = HistoryStore(tmp_path / "h")
    for i in range(4):
        store.append(run(i, f"{i:x}" * 40), [
            record("t::emu", "pass", 1.5, ratio=(1.8, 1.7, 1.9), ratio_label="SME2 on/off", emulated=True),
            record("t::dev", "pass", 0.5, ratio=(2.0, 1.9, 2.1), ratio_label="SME2 speedup")])
    series = build_series(store.frame())
    page = render_page(series, [])
    emulated, device = page.split("data-test='t::emu'")[1], page.split("data-test='t::dev'")[1].split("<section")[0]
    assert "Emulated time ratio (not a speedup) per run" in emulated.split("<section")[0]
    assert "speedup" not in emulated.split("<section")[0].replace("not a speedup", "")
    assert "SME2 speedup per run" in device


def test_invalid_and_failed_runs_are_not_points_of_a_series(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h")
    for i, status in enumerate(["pass", "invalid", "pass", "failed", "drift"]):
        store.append(run(i, f"{i:x}" * 40), [record("t::x", status, 0.08 + i / 1000)])
    (series,) = build_series(store.frame(), ["e2e"])
    assert [p.status for p in series.points] == ["pass", "pass", "drift"]
    assert series.values == [0.08, 0.082, 0.084]


def test_bare_history_command_lists_the_runs_and_says_when_there_is_no_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_sme2.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["history"]) == 2
    err = capsys.readouterr().err
    assert "pytest-sme2 history: error: no history store at .sme2_history" in err
    assert "run pytest here first, or name the store: pytest-sme2 history list --store DIR" in err
    assert main(["history", "list", "--store", "elsewhere"]) == 2
    assert "no history store at elsewhere" in capsys.readouterr().err

    _store_with_step(tmp_path)
    (tmp_path / "h").rename(tmp_path / ".sme2_history")
    assert main(["history"]) == 0
    bare = capsys.readouterr().out
    assert main(["history", "list"]) == 0
    assert bare == capsys.readouterr().out
    assert len(bare.splitlines()) == 8 and "run007  1 regression" in bare
