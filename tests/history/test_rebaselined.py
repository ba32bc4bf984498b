"""A baseline re-recorded in a change is compared with the merge-base's, and fails unless acknowledged.

A real project in a git repository (``tmp_path``): ``main`` holds a baseline recorded from a MobileNetV3 program; a
branch changes the program (one byte more: another artifact) and re-records the baseline with
``--sme2-update-baseline``'s policy. The runner is the ``executor_runner`` stand-in replaying real recorded traces:
the same model with XNNPACK's SIMD kernels on (the baseline) and off (the change: a real slowdown of this model, as
recorded, not invented).
"""

from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from standin import make_standin

from pytest_sme2.cli import main
from pytest_sme2.gate.verdict import GateConfig
from pytest_sme2.judge import Policy, judge
from pytest_sme2.measure.profile import measure
from pytest_sme2.measure.recipe import Measurement
from pytest_sme2.runners.host import HostRunner
from pytest_sme2.store.artifacts import ArtifactStore
from pytest_sme2.store.baseline import BaselineStore

DATA = Path(__file__).parents[1] / "data"
PTE = DATA / "mobilenet_v3_small_like_fp32_xnnpack.pte"
INPUT = DATA / "mobilenet_v3_small_like_input_fp32.bin"
SIMD_ON = DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-on_t1.etdump"
SIMD_OFF = DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-off_t1.etdump"
TEST_ID = "tests/test_perf.py::test_mobilenet"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def _record(repo: Path, pte: Path, trace: Path) -> Path:
    """Measure ``pte`` on a stand-in replaying ``trace`` and write it as the test's baseline (update policy)."""
    runner = HostRunner(make_standin(repo.parent / f"bin-{trace.stem}", trace=trace))
    m = Measurement(pte=pte, inputs=(INPUT,), runs=10, warmup=1, blocks=6, busy_limit=1.0,
                    out_dir=repo.parent / "runs", label="mobilenet")
    judged = judge(measure(runner, m), test_id=TEST_ID, runner=runner,
                   baselines=BaselineStore(repo / ".sme2_baselines"),
                   artifacts=ArtifactStore(repo.parent / "artifacts"), config=GateConfig(margin=0.05),
                   policy=Policy(update_baseline=True, confirm=False))
    return judged.baseline_path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git repository whose ``main`` holds the SIMD-on baseline, checked out on a branch ``change``."""
    repo = tmp_path / "project"
    repo.mkdir()
    _on_a_branch_of(repo)
    return repo


def _on_a_branch_of(repo: Path) -> None:
    """Make ``repo`` a git repository whose ``main`` holds the SIMD-on baseline (and whatever else is in it), checked
    out on a new branch ``change``."""
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "ci@example.com")
    _git(repo, "config", "user.name", "CI")
    program = repo / "model.pte"
    program.write_bytes(PTE.read_bytes())
    _record(repo, program, SIMD_ON)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "baseline")
    _git(repo, "checkout", "-qb", "change")


def _rebaselined(repo: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["rebaselined", "--base", "main", "--baseline-dir", str(repo / ".sme2_baselines"),
                 "--ack", str(repo / "sme2_acknowledged.json"), *extra])
    out, err = capsys.readouterr()
    return code, out + err


def test_a_slower_baseline_committed_in_a_change_fails_until_acknowledged(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program = project / "model.pte"
    program.write_bytes(program.read_bytes() + b"\0")  # the change: another program ...
    path = _record(project, program, SIMD_OFF)  # ... measured slower, and its baseline re-recorded
    _git(project, "commit", "-qam", "heavier model, baseline re-recorded")
    change = _git(project, "rev-parse", "HEAD")

    code, out = _rebaselined(project, capsys)
    print(out)
    assert code == 1, out
    assert "1 re-recorded, 0 added, 0 removed" in out
    line = next(x for x in out.splitlines() if x.startswith("REGRESSION"))
    assert TEST_ID in line and path.name in line and "is slower than the merge-base's" in line
    old, new = (json.loads(_git(project, "show", f"main:{path.relative_to(project)}")), json.loads(path.read_text()))
    assert old["stats"] != new["stats"]
    assert f'"commits": "{change[:10]}"' in line, "it says how to acknowledge it"

    (project / "sme2_acknowledged.json").write_text(json.dumps({"schema_version": 1, "acknowledged": [
        {"test": TEST_ID, "device": "*", "commits": change[:10], "reason": "heavier model, accepted in #7"}]}))
    code, out = _rebaselined(project, capsys)
    assert code == 0, out
    assert "acknowledged: heavier model, accepted in #7" in out


def test_a_baseline_re_recorded_for_the_same_program_is_reported_not_failed(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same artifact measured again (a re-record on the same machine): the step is the machine's drift."""
    committed = next((project / ".sme2_baselines").glob("*.json"))
    # The stand-in replays the same recording, so the two baselines differ only in when they were created (to the
    # second): a re-record within the same second would be byte-identical, nothing re-recorded for git to show.
    created = datetime.fromisoformat(json.loads(committed.read_text())["created"])
    while datetime.now(timezone.utc).replace(microsecond=0) <= created:
        time.sleep(0.05)
    _record(project, project / "model.pte", SIMD_ON)
    code, out = _rebaselined(project, capsys)  # uncommitted: the work tree against the merge-base
    assert code == 0, out
    assert "1 re-recorded" in out and ("DRIFT" in out or "PASS" in out), out


def test_outside_git_it_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "b").mkdir()
    code = main(["rebaselined", "--base", "main", "--baseline-dir", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert code == 2 and "is not in a git work tree" in err and "Traceback" not in err


def test_the_plugin_fails_a_session_whose_change_committed_a_slower_baseline(pytester: pytest.Pytester) -> None:
    """In CI on a pull request (``--sme2-base-ref``, default ``origin/$GITHUB_BASE_REF``): the session's own tests
    pass, and it still fails, naming the re-recorded baseline; an acknowledgement in the rootdir lets it pass."""
    repo = pytester.path
    pytester.makepyfile(test_other="def test_other(): pass")
    _on_a_branch_of(repo)
    program = repo / "model.pte"
    program.write_bytes(program.read_bytes() + b"\0")
    _record(repo, program, SIMD_OFF)
    _git(repo, "commit", "-qam", "heavier model, baseline re-recorded")

    # Without a drift allowance (none set, no history to calibrate one) the two recordings cannot be
    # told from the machines' drift: not decided, and not green either.
    result = pytester.runpytest("--sme2-base-ref=main", "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    assert f"INCONCLUSIVE {TEST_ID}" in out and "cannot be told from the machines' drift" in out
    # With one (a hand-set 0 %: the bare margin), the slower baseline is a regression.
    result = pytester.runpytest("--sme2-base-ref=main", "--sme2-drift-allowance=0", "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    assert "1 passed" in out
    assert "sme2 baselines against the merge-base" in out and f"REGRESSION {TEST_ID}" in out

    (repo / "sme2_acknowledged.json").write_text(json.dumps({"schema_version": 1, "acknowledged": [
        {"test": TEST_ID, "device": "*", "commits": "main..", "reason": "heavier model, accepted"}]}))
    result = pytester.runpytest("--sme2-base-ref=main", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "acknowledged: heavier model, accepted" in result.stdout.str()
    assert pytester.runpytest("-p", "no:cacheprovider").ret == pytest.ExitCode.OK  # not asked
