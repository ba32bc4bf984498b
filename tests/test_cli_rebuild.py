"""``pytest-sme2 rebuild``: committed baselines' programs rebuilt into the artifact store from their commits.

A small project in git records a baseline and commits it; in a fresh clone (no ``.sme2_artifacts/``) the command
rebuilds the baseline's ``.pte`` from the commit it was recorded at, keeps it only because it hashes to the
baseline's, and a CI session afterwards compares a changed model with it in the session without rebuilding anything
(the store the command filled is the plugin's). A baseline whose program does not reproduce, and one without a
recipe, exit 1 saying why; a missing baseline directory is bad input (exit 2). Real exports and real sessions.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from measure.test_rebuild import FAST, GITIGNORE, INI, MODELS, TEST, _edit, _env, _git

from pytest_sme2.store.artifacts import ArtifactStore

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


def _cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_sme2", "rebuild", *args], cwd=project, env=_env(),
                          capture_output=True, text=True, timeout=900, check=False)


def _session(project: Path) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "pytest", *FAST, "--sme2-json=r.json"], cwd=project,
                          env=_env(CI="1"), capture_output=True, text=True, timeout=900, check=False)
    assert (project / "r.json").is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    verdict = json.loads((project / "r.json").read_text())["tests"][0]["verdict"]
    assert isinstance(verdict, dict)
    return verdict


def test_rebuild_fills_the_artifact_store_from_the_baselines_commit_and_the_session_uses_it(tmp_path: Path) -> None:
    origin = tmp_path / "origin"
    origin.mkdir()
    for name, text in {"my_models.py": MODELS, "test_net.py": TEST, "pytest.ini": INI, ".gitignore": GITIGNORE}.items():
        (origin / name).write_text(text)
    _git(origin, "init", "-q", "-b", "main")
    _git(origin, "add", ".")
    _git(origin, "commit", "-q", "-m", "model")
    recorded_at = _git(origin, "rev-parse", "HEAD")
    done = subprocess.run([sys.executable, "-m", "pytest", *FAST, "--sme2-update-baseline"], cwd=origin, env=_env(),
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-3000:]
    _git(origin, "add", ".sme2_baselines")
    _git(origin, "commit", "-q", "-m", "baselines")
    (baseline,) = (origin / ".sme2_baselines").glob("*.json")
    pte = json.loads(baseline.read_text())["artifact"]["pte_sha256"]

    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(origin), str(clone))
    assert not (clone / ".sme2_artifacts").exists()
    done = _cli(clone)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ok  {baseline.name}: the baseline's program was not in the artifact store: rebuilt net fp32/xnnpack " \
           f"from commit {recorded_at[:10]} (the commit the baseline was recorded at); its .pte and inputs hash to " \
           f"the baseline's ({pte[:10]})" in done.stdout
    assert "1 of 1 baselines have their program in .sme2_artifacts" in done.stdout
    stored = ArtifactStore(clone / ".sme2_artifacts").get(pte)
    assert stored is not None  # get() checks the content against the name: the baseline's program
    done = _cli(clone)
    assert done.returncode == 0 and f"its program and inputs are in the store ({pte[:10]})" in done.stdout

    # The plugin's session finds the reference the command stored: compared in the session, nothing rebuilt.
    _edit(clone, LAYERS=6)
    verdict = _session(clone)
    notes = "\n".join(str(n) for n in verdict["notes"])
    assert verdict["comparison"] == "session", notes
    assert "rebuilt" not in notes and "in interleaved blocks" in notes

    # A baseline whose program the commit does not reproduce (here: its recorded hash altered) is refused, exit 1.
    data = json.loads(baseline.read_text())
    data["artifact"]["pte_sha256"] = "0" * 64
    (clone / ".sme2_baselines" / baseline.name).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    done = _cli(clone)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"NOT REBUILT  {baseline.name}: " in done.stdout
    assert f"the .pte hashes to {pte[:10]}, not the baseline's 0000000000" in done.stdout
    assert "0 of 1 baselines have their program" in done.stdout
    # One written before recipes were recorded says what to do instead.
    del data["rebuild"]
    (clone / ".sme2_baselines" / baseline.name).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    done = _cli(clone, str(clone / ".sme2_baselines" / baseline.name))
    assert done.returncode == 1 and "the baseline records no recipe" in done.stdout

    done = _cli(clone, "--baseline-dir", "nowhere")
    assert done.returncode == 2 and "no baseline directory nowhere" in done.stderr
