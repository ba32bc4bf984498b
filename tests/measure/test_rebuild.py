"""A same-session reference on every fresh runner, without an artifact cache.

A small project in git records its baselines and commits them; fresh clones (no ``.sme2_artifacts/``, no export
cache) then change the model. The baseline's own program is rebuilt from the commit it was recorded at (or, for a
baseline that records none, the commit that last touched it), proven by its hash, and measured beside the change:
a model made 20 % heavier gets a ``session`` verdict that fails, one whose weights were only re-seeded (same cost)
passes. A rebuild that does not hash-match falls back to ``stored`` and says why; outside git the verdict says
so; with the artifact store restored from a CI cache nothing is rebuilt.

Each scenario is a real pytest session in a subprocess (this checkout on ``PYTHONPATH``), real exports and real
measurements on the local runtime, as a user's CI runs them. The heavier model's export is made once
(:func:`heavier_export`) and each clone that changes to it starts with that entry in its export cache: the change's
export is not what these tests check, and it holds nothing of the baseline's program, which is rebuilt for real.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks.gate_rebuild import project_files
from pytest_sme2.measure.rebuild import Rebuilder, recipe_for
from pytest_sme2.store.artifacts import Artifact, ArtifactStore
from pytest_sme2.store.baseline import Recipe

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

#: Five (or, made 20 % heavier, six) identical dense layers: the cost scales with LAYERS, ~0.5 ms per run here; the
#: project benchmarks/gate_rebuild.py measures in separate sessions, with 10 layers and a 5 % margin.
_PROJECT = project_files(layers=5, margin_pct=10)
MODELS = _PROJECT["my_models.py"]
TEST = _PROJECT["test_net.py"]

INI = "[pytest]\nsme2_models = my_models.py\n"
GITIGNORE = ".sme2_cache/\n.sme2_artifacts/\n.sme2_history/\nsme2_out/\n*.json.tmp\nr.json\n__pycache__/\n"
FAST = ["--sme2-runs", "4", "--sme2-warmup", "1", "--sme2-blocks", "8", "--sme2-busy-limit=100",
        "-p", "no:cacheprovider", "-p", "no:randomly", "--sme2-history=none"]
#: For a scenario that checks which comparison was made and what its notes say, not the verdict's status: the gate's
#: fewest blocks and no confirming measurement.
NO_STATUS = ["--sme2-blocks", "4", "--sme2-no-confirm"]
#: The model made 20 % heavier, as the scenarios that fail or fall back change it.
HEAVIER = {"LAYERS": 6}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONHASHSEED", "CI"))}
    env.update(PYTHONPATH=str(REPO), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com", **extra)
    return env


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=_env(), capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _pytest(project: Path, *args: str, ci: bool = True) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    """One session in ``project`` (a CI one unless ``ci`` is False): the process and its test's result."""
    (project / "r.json").unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-m", "pytest", *FAST, "--sme2-json=r.json", *args], cwd=project,
                          env=_env(**({"CI": "1"} if ci else {})), capture_output=True, text=True, timeout=900,
                          check=False)
    assert (project / "r.json").is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    return done, json.loads((project / "r.json").read_text())["tests"][0]


def _edit(project: Path, **values: int) -> None:
    path = project / "my_models.py"
    text = path.read_text()
    for name, value in values.items():
        text = re.sub(rf"^{name} = \d+$", f"{name} = {value}", text, flags=re.M)
    path.write_text(text)


def _changed(project: Path, *args: str, export_cache: Path | None = None,
             **values: int) -> tuple[int, dict[str, object], str]:
    """The model edited as ``values`` say, then a CI session (its export cache started from ``export_cache`` when
    given): its exit status, the verdict and the verdict's notes."""
    _edit(project, **values)
    if export_cache is not None:
        assert not (project / ".sme2_cache").exists()
        shutil.copytree(export_cache, project / ".sme2_cache")
    done, result = _pytest(project, *args)
    verdict = result["verdict"]
    assert isinstance(verdict, dict)
    notes = "\n".join(str(n) for n in verdict["notes"])
    print(f"{project.name} {values}: {verdict['comparison']} {verdict['status']}, exit {done.returncode}\n"
          f"{verdict['checks'][0]['message']}\n{notes}")  # the scenario's verdict, shown with -rP
    return done.returncode, verdict, notes


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A project whose baseline was recorded at commit ``c1`` and committed in ``c2``; ``c3`` strips the recipe
    from it (a baseline of the pytest-sme2 before this change). Returns the repository and the commits."""
    root = tmp_path_factory.mktemp("rebuild") / "project"
    root.mkdir()
    for name, text in {"my_models.py": MODELS, "test_net.py": TEST, "pytest.ini": INI,
                       ".gitignore": GITIGNORE}.items():
        (root / name).write_text(textwrap.dedent(text))
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "model")
    c1 = _git(root, "rev-parse", "HEAD")
    done, _ = _pytest(root, "--sme2-update-baseline", ci=False)
    assert done.returncode == 0, done.stdout[-3000:]
    baselines = list((root / ".sme2_baselines").glob("*.json"))
    assert len(baselines) == 1
    data = json.loads(baselines[0].read_text())
    assert data["rebuild"] == {"model": "net", "dtype": "fp32", "backend": "xnnpack", "models_file": "my_models.py",
                               "commit": c1, "dirty": False}
    _git(root, "add", ".sme2_baselines")
    _git(root, "commit", "-q", "-m", "baselines")
    c2 = _git(root, "rev-parse", "HEAD")
    del data["rebuild"]
    baselines[0].write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    _git(root, "commit", "-q", "-am", "baseline without a recipe, as written before issue 28")
    return {"root": root, "c1": c1, "c2": c2, "c3": _git(root, "rev-parse", "HEAD"),
            "pte": data["artifact"]["pte_sha256"]}


@pytest.fixture(scope="module")
def heavier_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export cache holding only the heavier model's export (the scenarios' change), made once by the library's
    export in its own process, as the plugin's export workers make it."""
    project = tmp_path_factory.mktemp("heavier")
    (project / "my_models.py").write_text(textwrap.dedent(MODELS))
    _edit(project, **HEAVIER)
    script = ("from pytest_sme2.models import load_model_sources\n"
              "from pytest_sme2.program.export import export_model\n"
              "load_model_sources(['my_models.py'])\n"
              "assert not export_model('net', cache_dir='.sme2_cache').cached\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=project, env=_env(), capture_output=True, text=True,
                          timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (entry,) = (project / ".sme2_cache" / "net").iterdir()
    assert (entry / "model.pte").is_file()
    return project / ".sme2_cache"


def _clone(recorded: dict[str, object], tmp_path: Path, commit: str) -> Path:
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(recorded["root"]), str(clone))
    _git(clone, "checkout", "-q", commit)
    assert not (clone / ".sme2_artifacts").exists() and not (clone / ".sme2_cache").exists()
    return clone


def test_a_fresh_clone_gets_the_rebuilt_reference_and_a_heavier_model_fails(recorded: dict[str, object],
                                                                             heavier_export: Path,
                                                                             tmp_path: Path) -> None:
    clone = _clone(recorded, tmp_path, str(recorded["c2"]))
    code, verdict, notes = _changed(clone, export_cache=heavier_export, **HEAVIER)
    assert verdict["comparison"] == "session", notes
    assert f"rebuilt net fp32/xnnpack from commit {str(recorded['c1'])[:10]} (the commit the baseline was recorded " \
           "at)" in notes
    assert verdict["status"] == "regression", notes
    assert code == 1
    assert ArtifactStore(clone / ".sme2_artifacts").get(str(recorded["pte"])) is not None


def test_an_old_baseline_is_rebuilt_from_the_commit_that_last_touched_it_and_an_a_a_passes(
        recorded: dict[str, object], tmp_path: Path) -> None:
    """A baseline without a recipe (written before it was recorded): the last commit of its file is the candidate,
    proven by the hash. The model's weights re-seeded (another program, the same cost) passes."""
    clone = _clone(recorded, tmp_path, str(recorded["c3"]))
    code, verdict, notes = _changed(clone, WEIGHT_SEED=1)
    assert verdict["comparison"] == "session", notes
    assert f"from commit {str(recorded['c3'])[:10]} (the commit that last touched " in notes
    assert verdict["status"] == "pass", notes
    assert code == 0


def test_a_rebuild_that_does_not_hash_match_falls_back_to_stored_and_says_why(recorded: dict[str, object],
                                                                              heavier_export: Path,
                                                                              tmp_path: Path) -> None:
    """The baseline recorded from uncommitted code (a re-seeded model), only the baseline committed: the recorded
    commit is skipped (its models file was dirty), the commit that last touched the baseline holds other weights."""
    work = tmp_path / "work"
    _git(tmp_path, "clone", "-q", str(recorded["root"]), str(work))
    _edit(work, WEIGHT_SEED=2)
    done, _ = _pytest(work, "--sme2-update-baseline", ci=False)
    assert done.returncode == 0, done.stdout[-3000:]
    _git(work, "commit", "-q", "-m", "re-recorded from uncommitted code", "--", ".sme2_baselines")
    (baseline,) = (work / ".sme2_baselines").glob("*.json")
    assert json.loads(baseline.read_text())["rebuild"]["dirty"] is True
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(work), str(clone))
    _, verdict, notes = _changed(clone, *NO_STATUS, export_cache=heavier_export, **HEAVIER)
    assert verdict["comparison"] == "stored", notes
    touched = _git(clone, "rev-parse", "HEAD")[:10]
    assert f"did not reproduce it: at {touched} (the commit that last touched {baseline.name}) the .pte hashes to " \
           in notes
    assert "compared with the stored samples instead" in notes


def test_outside_git_the_verdict_says_so(recorded: dict[str, object], heavier_export: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(Path(str(recorded["root"])), copy,
                    ignore=shutil.ignore_patterns(".git", ".sme2_artifacts", ".sme2_cache"))
    _, verdict, notes = _changed(copy, *NO_STATUS, export_cache=heavier_export, **HEAVIER)
    assert verdict["comparison"] == "stored", notes
    assert "is not in a git checkout" in notes


def test_the_fast_path_a_restored_artifact_cache_needs_no_rebuild(recorded: dict[str, object],
                                                                  heavier_export: Path, tmp_path: Path) -> None:
    """CI restores ``.sme2_artifacts/`` from a cache keyed on the baselines' content (README, "Gating CI"): the
    reference is there, nothing is rebuilt."""
    clone = _clone(recorded, tmp_path, str(recorded["c2"]))
    shutil.copytree(Path(str(recorded["root"])) / ".sme2_artifacts", clone / ".sme2_artifacts")
    code, verdict, notes = _changed(clone, export_cache=heavier_export, **HEAVIER)
    assert verdict["comparison"] == "session", notes
    assert "rebuilt" not in notes
    assert not (clone / ".sme2_cache" / "rebuild").exists()
    assert verdict["status"] == "regression", notes
    assert code == 1


def test_a_recipe_names_the_commit_and_whether_the_models_file_was_dirty(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\n")
    assert recipe_for("m", "fp32", "xnnpack", tmp_path / "m.py") == \
        Recipe("m", "fp32", "xnnpack", str((tmp_path / "m.py").resolve()))
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "m.py")
    _git(tmp_path, "commit", "-q", "-m", "m")
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert recipe_for("m", "int8", "portable", tmp_path / "m.py") == Recipe("m", "int8", "portable", "m.py", head)
    (tmp_path / "m.py").write_text("x = 2\n")
    assert recipe_for("m", "fp32", "xnnpack", tmp_path / "m.py").dirty
    assert Recipe.maybe(Recipe("m", "fp32", "xnnpack", "m.py", head).to_dict()) == \
        Recipe("m", "fp32", "xnnpack", "m.py", head)
    assert Recipe.maybe(None) is None


def test_an_uncommitted_baseline_or_a_missing_commit_says_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "m.py")
    _git(tmp_path, "commit", "-q", "-m", "m")
    baseline = tmp_path / ".sme2_baselines" / "t@x.json"
    baseline.parent.mkdir()
    baseline.write_text("{}")
    # The session's recipe names HEAD now; a baseline without a recipe was not recorded there: HEAD is no candidate.
    rebuilder = Rebuilder(recipe_for("m", "fp32", "xnnpack", tmp_path / "m.py"), tmp_path / ".sme2_cache")
    assert rebuilder.recipe is not None and rebuilder.recipe.commit and not rebuilder.recipe.dirty
    artifact = Artifact("0" * 64)
    store = ArtifactStore(tmp_path / ".sme2_artifacts")
    got = rebuilder.rebuild(None, artifact, baseline, store)
    assert not got.ok and "t@x.json is not committed" in got.message
    gone = Recipe("m", "fp32", "xnnpack", "m.py", "f" * 40)  # recorded at a commit a shallow clone does not have
    got = rebuilder.rebuild(gone, artifact, baseline, store)
    assert not got.ok
    assert "at ffffffffff (the commit the baseline was recorded at) the commit is not in this clone" in got.message
    assert "fetch-depth: 0" in got.message and "compared with the stored samples instead" in got.message
    outside = Rebuilder(Recipe("m", "fp32", "xnnpack", str(tmp_path.parent / "m.py")), tmp_path / ".sme2_cache")
    got = outside.rebuild(None, artifact, baseline, store)
    assert not got.ok and "lies outside the git checkout" in got.message


def test_our_own_runner_is_rebuilt_from_its_source_at_the_baselines_commit(tmp_path: Path) -> None:
    """A checkout of pytest-sme2 whose runner source changed since the baseline: the baseline's runner build is built
    again from the source at the commit that last touched the baseline, and proven by its sha256 (real g++ builds).
    A project whose git does not hold the runner's source says so."""
    from toolchain import require_host_compiler

    from pytest_sme2.measure.rebuild import RUNNER_SOURCE
    from pytest_sme2.runners.build import TARGET_HOST, build_runner, runner_source
    from pytest_sme2.store.files import file_sha256

    require_host_compiler()
    project = tmp_path / "project"
    source = project / RUNNER_SOURCE
    source.parent.mkdir(parents=True)
    source.write_bytes(runner_source())
    baseline = project / ".sme2_baselines" / "t@x.json"
    baseline.parent.mkdir()
    baseline.write_text("{}")
    _git(project, "init", "-q")
    _git(project, "add", ".")
    _git(project, "commit", "-q", "-m", "runner and baseline")
    recorded = build_runner(TARGET_HOST, cache_dir=tmp_path / "recording", source=source.read_bytes())
    sha = file_sha256(recorded.path)
    # The runner changes afterwards (its banner: another binary), as an edit of runner_src would.
    source.write_bytes(runner_source().replace(b"sme2_runner probe:", b"sme2_runner probe :"))
    _git(project, "commit", "-q", "-am", "runner changed")
    assert file_sha256(build_runner(TARGET_HOST, cache_dir=tmp_path / "now", source=source.read_bytes()).path) != sha

    rebuilder = Rebuilder(None, project / ".sme2_cache", runner_target=TARGET_HOST,
                          runner_cache=project / ".sme2_cache" / "runners")
    binary, how = rebuilder.rebuild_runner(sha, None, baseline)
    assert binary is not None and file_sha256(binary) == sha, how
    commit = _git(project, "log", "-1", "--format=%H", "--", str(baseline))[:10]
    assert f"rebuilt it from {RUNNER_SOURCE} at commit {commit} (the commit that last touched t@x.json)" in how
    assert (binary.parent / "lib").is_dir(), "a rebuilt runner stays beside the libraries it loads"

    binary, why = rebuilder.rebuild_runner("0" * 64, None, baseline)
    assert binary is None and f"the runner hashes to {sha[:10]}, not the baseline's 0000000000" in why
    (tmp_path / "user").mkdir()
    user_baseline = tmp_path / "user" / "t@x.json"
    user_baseline.write_text("{}")
    _git(tmp_path / "user", "init", "-q")
    _git(tmp_path / "user", "add", ".")
    _git(tmp_path / "user", "commit", "-q", "-m", "b")
    binary, why = rebuilder.rebuild_runner(sha, None, user_baseline)
    assert binary is None and "comes with the installed pytest-sme2, not from this project's git" in why
    binary, why = Rebuilder(None, tmp_path).rebuild_runner(sha, None, baseline)  # the device runs another runner
    assert binary is None and "only pytest-sme2's own runner can be rebuilt" in why


def test_a_rebuilt_runner_is_measured_where_it_was_built(tmp_path: Path) -> None:
    """The reference measurement takes a rebuilt runner binary by its sha256 when the store lacks it (it stays beside
    the ``lib/`` it loads; a stored one is kept beside its libraries: tests/store/test_artifacts_runner.py); without
    one it names the build it lacks, which is what the judge asks the rebuilder for."""
    from stored_candidate import stored_candidate

    from pytest_sme2.judge import reference_measurement

    class Runner:
        def build_identity(self, variant: str | None) -> dict[str, str]:
            return {"runner_sha256": "b" * 64}

    store = ArtifactStore(tmp_path / "store")
    pte, inputs, candidate = stored_candidate(tmp_path, store)
    baseline = Artifact(pte, inputs, {"runner_sha256": "a" * 64})
    lacking = reference_measurement(baseline, candidate, Runner(), store)  # type: ignore[arg-type]
    assert lacking.measurement is None and lacking.missing_build == "a" * 64 and not lacking.missing
    rebuilt = tmp_path / "runners" / "sme2_runner"
    ref = reference_measurement(baseline, candidate, Runner(), store, {"a" * 64: rebuilt})  # type: ignore[arg-type]
    assert ref.measurement is not None and ref.measurement.build == rebuilt
    assert ref.measurement.pte == store.get(pte)
