"""Gating on instructions executed under emulation, proven on real changes (issue 32, items 3, 5 and 6).

One pytest project, run for real in subprocesses on ``--sme2-device=qemu --sme2-count-instructions``: toy_cnn's
network (example_models' ToyCNN) at width 20, SME2 off/on, one execution per arm, counted under QEMU.

1. the first session records the count baseline (keyed without the host), and the project's second test, whose
   SME2-off arm runs on the SME2 CPU (``pytest_sme2.runners.qemu.CPUS`` patched by its module), fails with the
   counts as the evidence;
2. the same program again: every count is identical, the test passes;
3. the model made 5 % wider (width 21): a count regression, with the kinds that moved;
4. the wider model with ``sme2_threshold(instructions_pct=...)`` above the change it made: it passes.

Every expectation is read from what the sessions produced (the results JSON, the baseline files, the history store)
and checked against the counts themselves: the change the regression names is recomputed here from the two sessions'
counts, and the history's count series must step exactly at the session whose program changed.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.runners.build import RunnerBuild
from pytest_sme2.store.files import file_lock

pytestmark = pytest.mark.slow

REPO = Path(__file__).parents[2]
PLAIN = ["-p", "no:cacheprovider", "-p", "no:randomly", "-rs"]
NODE = "test_counts.py::test_on_off"
FORCED = "test_forced_on.py::test_on_off"
PROJECT = '''\
import sys

import pytest

sys.path.insert(0, {repo!r})
from example_models.models import ToyCNN, _example_input, _seeded  # noqa: E402

WIDTH = {width}


def toy_cnn_width():
    return _seeded(lambda: ToyCNN(width=WIDTH)).eval(), (_example_input(1, 3, 32, 32),)


@pytest.mark.sme2_model(toy_cnn_width, dtype="fp32", backend="xnnpack")
{threshold}
def test_on_off(exported_model, sme2_runner, sme2_baseline):
    sme2_baseline.check(sme2_runner.profile_on_off(exported_model))
'''
#: The SME2-off arm put on the SME2 CPU: a broken on/off setup whose counts must show it.
FORCED_ON = textwrap.dedent("""\
    import pytest
    from pytest_sme2.runners import qemu
    from pytest_sme2.runners.base import SME2_OFF

    @pytest.fixture(autouse=True)
    def sme2_off_arm_on_the_sme2_cpu(monkeypatch):
        monkeypatch.setattr(qemu, "CPUS", {**qemu.CPUS, SME2_OFF: qemu.CPU_SME2_ON})
    """)


@dataclass(frozen=True)
class Session:
    out: str
    returncode: int
    results: dict[str, Any]

    def test(self, node: str = NODE) -> dict[str, Any]:
        return self.results[node]

    def check(self, name: str, node: str = NODE) -> dict[str, Any]:
        return next(c for c in self.test(node)["verdict"]["checks"] if c["name"] == name)

    def counts(self, arm: str, node: str = NODE) -> dict[str, Any]:
        return dict(self.test(node)["instructions"]["arms"][arm])


@dataclass(frozen=True)
class Project:
    root: Path
    sessions: dict[str, Session]


def _write(project: Path, width: int, threshold: str = "") -> None:
    (project / "test_counts.py").write_text(PROJECT.format(repo=str(REPO), width=width, threshold=threshold))


@pytest.fixture(scope="session")
def counted(sme2_shared_cache: Path, aarch64_runner_build: RunnerBuild, sme2_qemu: Path) -> Project:
    """The four sessions, run once per test run (whichever worker is first; the other reads their files)."""
    project = sme2_shared_cache.parent / "count_gate_project"
    with file_lock(sme2_shared_cache.parent / ".count_gate_project.lock"):
        done = project / "done.json"
        if not done.is_file():
            project.mkdir(exist_ok=True)
            pytest_ = [sys.executable, "-m", "pytest", *PLAIN, f"--sme2-cache-dir={sme2_shared_cache}",
                       "--sme2-device=qemu", "--sme2-count-instructions", "--sme2-history=history",
                       "--sme2-out-dir=runs"]
            ran: dict[str, Any] = {}
            plan = [("recorded", 20, "", ["test_counts.py", "test_forced_on.py"]),
                    ("same", 20, "", ["test_counts.py"]),
                    ("wider", 21, "", ["test_counts.py", "--sme2-markdown=wider.md", "--html=wider.html",
                                       "--self-contained-html"]),
                    ("tolerated", 21, "@pytest.mark.sme2_threshold(instructions_pct=90)", ["test_counts.py"]),
                    ("rewritten", 21, "", ["test_counts.py", "--sme2-update-baseline",
                                           "--sme2-baseline-dir=rewritten_baselines"])]
            for name, width, threshold, args in plan:
                _write(project, width, threshold)
                (project / "test_forced_on.py").write_text(
                    FORCED_ON + PROJECT.format(repo=str(REPO), width=20, threshold=""))
                proc = subprocess.run([*pytest_, f"--sme2-json={name}.json", *args], cwd=project, capture_output=True,
                                      text=True, timeout=1800, check=False)
                ran[name] = {"out": proc.stdout + proc.stderr, "returncode": proc.returncode}
            done.write_text(json.dumps(ran))
        ran = json.loads(done.read_text())
    sessions = {}
    for name, r in ran.items():
        doc = json.loads((project / f"{name}.json").read_text())
        sessions[name] = Session(r["out"], r["returncode"], {t["test_id"]: t for t in doc["tests"]})
    return Project(project, sessions)


def _count_baselines(project: Path) -> list[Path]:
    return [p for p in (project / ".sme2_baselines").glob("test_counts.py_test_on_off*.json")
            if "instructions" in json.loads(p.read_text())]


def test_the_first_session_records_a_count_baseline_without_the_host(counted: Project) -> None:
    first = counted.sessions["recorded"]
    assert first.test()["outcome"] == "passed", first.out[-3000:]
    (path,) = _count_baselines(counted.root)
    stored = json.loads(path.read_text())
    assert "; on " not in json.dumps(stored["identity"]) and "logical_cpus" not in stored["identity"]
    assert stored["identity"]["emulator"].startswith("qemu-aarch64 ") and stored["identity"]["variant"] == "sme2_on"
    # The file holds this session's counts of both arms, exactly.
    assert stored["instructions"]["total"] == first.counts("sme2_on")["total"] > 0
    assert stored["instructions_off"]["total"] == first.counts("sme2_off")["total"] > 0
    assert "count baseline for this test on this emulated CPU: recorded, not gated" in first.out


def test_the_on_off_pair_reports_the_count_ratio_and_the_move_to_sme(counted: Project) -> None:
    s = counted.sessions["recorded"]
    on, off = s.counts("sme2_on"), s.counts("sme2_off")
    ratio = s.check("sme2_instructions")
    assert ratio["advisory"] and f"on/off {on['total'] / off['total']:.3f}×" in ratio["message"]
    assert "speedup" not in ratio["message"].replace("no speedup", "")
    # The SME2-on arm's GEMM work left NEON for SME: computed here from the two arms' own counts.
    assert on["by_kind"]["sme"] > 0 and off["by_kind"]["sme"] == 0
    assert on["by_kind"]["neon"] < off["by_kind"]["neon"]
    assert on["by_mnemonic"].get("fmopa za", 0) > 0 and off["by_mnemonic"].get("fmopa za", 0) == 0
    assert off["by_mnemonic"].get("fmla v", 0) > on["by_mnemonic"].get("fmla v", 0)
    assert "fmopa za 0 -> " in ratio["message"]
    # The pair's findings (the reports' summary of the on/off comparison) say the same.
    assert ratio["message"] in s.test()["comparison"]["findings"]
    assert s.check("sme2_off_instructions")["status"] == "pass"


def test_an_sme2_off_arm_that_ran_sme2_fails_with_the_counts(counted: Project) -> None:
    s = counted.sessions["recorded"]
    forced = s.test(FORCED)
    assert forced["outcome"] == "failed"
    off = s.counts("sme2_off", FORCED)
    assert off["cpu"] == "max" and off["by_kind"]["sme"] > 0
    check = s.check("sme2_off_instructions", FORCED)
    assert check["status"] == "regression"
    assert f"executed {off['by_kind']['sme']:,} SME instructions" in check["message"]
    assert "this is not an SME2 on/off comparison" in check["message"]
    assert "sme2_off_instructions" in s.out and s.returncode == 1
    # Its counts never became a count baseline.
    assert not [p for p in (counted.root / ".sme2_baselines").glob("test_forced_on.py*.json")
                if "instructions" in json.loads(p.read_text())]


def test_the_unchanged_program_counts_identically_and_passes(counted: Project) -> None:
    first, again = counted.sessions["recorded"], counted.sessions["same"]
    assert again.returncode == 0, again.out[-3000:]
    for arm in ("sme2_on", "sme2_off"):
        assert again.counts(arm) == first.counts(arm)
    check = again.check("instructions")
    assert check["status"] == "pass" and "identical to the baseline" in check["message"]
    assert again.check("instructions_off")["status"] == "pass"


def test_a_model_made_5_percent_wider_is_a_count_regression(counted: Project) -> None:
    base, wider = counted.sessions["recorded"], counted.sessions["wider"]
    assert wider.test()["outcome"] == "failed" and wider.returncode == 1
    before, after = base.counts("sme2_on")["total"], wider.counts("sme2_on")["total"]
    assert after > before
    check = wider.check("instructions")
    assert check["status"] == "regression" and (check["baseline"], check["candidate"]) == (before, after)
    assert f"{before:,} -> {after:,}" in check["message"] and f"{(after - before) / before * 100:+.3f}%" in check[
        "message"]
    assert "more work" in check["message"] and "exact" in check["message"]
    assert wider.check("instructions_off")["status"] == "regression"
    assert "sme2 REGRESSION" in wider.out and "instructions executed under emulation per execution" in wider.out


def test_a_tolerance_above_the_change_passes_it(counted: Project) -> None:
    tolerated = counted.sessions["tolerated"]
    assert tolerated.returncode == 0, tolerated.out[-3000:]
    assert tolerated.check("instructions")["status"] == "pass"
    assert "within ±90%" in tolerated.check("instructions")["message"]


def test_update_baseline_writes_the_count_baseline_from_an_evidence_run(counted: Project) -> None:
    s = counted.sessions["rewritten"]
    assert s.returncode == 0 and s.test()["outcome"] == "passed", s.out[-3000:]
    (path,) = (counted.root / "rewritten_baselines").glob("test_counts.py_test_on_off*.json")
    stored = json.loads(path.read_text())
    assert stored["instructions"]["total"] == counted.sessions["wider"].counts("sme2_on")["total"]
    assert stored["instructions_off"]["total"] == counted.sessions["wider"].counts("sme2_off")["total"]
    assert s.out.count("count baseline written (commit it): ") == 1 and path.name in s.out


def test_the_reports_show_the_counts_per_kind_and_arm(counted: Project) -> None:
    wider = counted.sessions["wider"]
    md = (counted.root / "wider.md").read_text()
    on = wider.counts("sme2_on")
    assert "Instructions Executed Under Emulation" in md
    kinds = ("sme", "sve", "neon", "load_store", "scalar", "undecoded")
    assert f"| SME2 on | {on['total']:,} | " + " | ".join(f"{on['by_kind'][k]:,}" for k in kinds) + " |" in md
    # pytest-html keeps the extras in a JSON blob inside the page: unescaped, the chart's SVG as drawn.
    page = html.unescape((counted.root / "wider.html").read_text()).replace('\\"', '"')
    assert "sme2-chart-instructions" in page
    for kind in kinds:
        assert f'data-kind="{kind}" data-value="{on["by_kind"][kind]}"' in page


def test_the_history_count_series_steps_exactly_where_the_program_changed(counted: Project) -> None:
    from pytest_sme2.history.series import INSTRUCTIONS, build_series, steps_of
    from pytest_sme2.history.store import HistoryStore
    from pytest_sme2.history.trend import render_page

    series = [s for s in build_series(HistoryStore(counted.root / "history").frame(), [INSTRUCTIONS])
              if s.test_id == NODE]
    (counts,) = series
    totals = [counted.sessions[n].counts("sme2_on")["total"]
              for n in ("recorded", "same", "wider", "tolerated", "rewritten")]
    assert counts.values == totals
    (step,) = steps_of(counts)
    assert step.index == 2 and step.artifact_changed and step.kind == "regression"
    assert step.pct == pytest.approx((totals[2] / totals[0] - 1) * 100)
    page = render_page(series, [step])
    assert 'class="chart instructions"' in page and f"{totals[0]:,} → {totals[2]:,} instructions" in page


def test_a_count_baseline_re_recorded_with_more_instructions_is_a_regression_of_the_change(
        counted: Project, tmp_path: Path) -> None:
    """history.rebaselined judges a re-recorded count baseline on its counts: main holds the width-20 one the first
    session recorded; a branch re-records it with the wider model's counts (those the 'wider' session measured)."""
    from dataclasses import replace

    from pytest_sme2.evidence.instructions import InstructionCounts
    from pytest_sme2.gate.verdict import GateConfig
    from pytest_sme2.history.rebaselined import rebaselined
    from pytest_sme2.store.baseline import BaselineStore

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)

    repo = tmp_path / "repo"
    (path,) = _count_baselines(counted.root)
    (repo / ".sme2_baselines").mkdir(parents=True)
    (repo / ".sme2_baselines" / path.name).write_bytes(path.read_bytes())
    git("init", "-q", "-b", "main")
    git("-c", "user.email=ci@example.com", "-c", "user.name=CI", "commit", "--allow-empty", "-qm", "root")
    git("add", "-A")
    git("-c", "user.email=ci@example.com", "-c", "user.name=CI", "commit", "-qm", "count baseline")
    git("checkout", "-qb", "wider")
    store = BaselineStore(repo / ".sme2_baselines")
    wider = counted.sessions["wider"]
    old = store.read(repo / ".sme2_baselines" / path.name)
    store.save(replace(old, instructions=InstructionCounts.from_dict(wider.counts("sme2_on")),
                       instructions_off=InstructionCounts.from_dict(wider.counts("sme2_off"))))
    report = rebaselined(repo / ".sme2_baselines", base_ref="main", config=GateConfig())
    (entry,) = report.rebaselined
    assert report.failed and entry.verdict is not None and entry.verdict.status.value == "regression"
    before, after = counted.sessions["recorded"].counts("sme2_on")["total"], wider.counts("sme2_on")["total"]
    assert f"{before:,} -> {after:,}" in entry.describe()
    assert "executes more instructions under emulation than the merge-base's" in entry.describe()


def test_a_test_that_counts_takes_its_kernel_evidence_from_the_counting_process(counted: Project) -> None:
    """One emulated process per arm gives the counts and the kernels that ran: no second process under -d in_asm."""
    s = counted.sessions["recorded"]
    test = s.test()
    on, off = test["profile"]["analysis"]["executed_kernels"], test["profile_off"]["analysis"]["executed_kernels"]
    assert "the counting process: 1 warm-up + 1 counted execution" in on["source"]
    assert "the counting process" in off["source"]
    assert [f for f in on["functions"] if f["sme2"]] and not [f for f in off["functions"] if f["sme2"]]
    assert not list((counted.root / "runs").rglob("*.in_asm"))
