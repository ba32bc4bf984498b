"""A runtime upgrade measured in the session: the baseline's executorch installed beside the current one.

A project in git records toy_cnn's baseline on the previous executorch (the previous release installed with ``pip
install --no-deps --target`` and put first on ``PYTHONPATH``, as a runner that had not upgraded yet), commits it, and a
fresh clone (no artifact store) runs CI on the installed executorch. The baseline's runtime is installed into
``--sme2-runtimes``, proven by its sha256, its program rebuilt by its own exporter from the recorded commit, and both
runtimes measured interleaved in worker processes: the verdict is ``runtime-session`` and names both versions. Where
the previous executorch cannot be installed (a package index that does not answer) the verdict says why in one line
and falls back to ``runtime`` (the stored samples). A session on the baseline's own runtime is ``unchanged`` and
installs nothing.

Each scenario is a real pytest session in a subprocess. The previous executorch is downloaded once into a folder the
tests reuse (``$SME2_TEST_RUNTIMES``, default ``~/.cache/pytest-sme2-tests/runtimes``); without PyPI they skip. A fresh
clone's export cache starts with toy_cnn as the installed executorch exports it (the workers' shared export,
``example_export``): the change's export is not what these tests check; the baseline's program, exported by the
previous executorch, is in no cache and is rebuilt for real.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import urllib.request
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from gated_project import EXAMPLE_MODELS

from pytest_sme2.measure.runtimes import Runtimes
from pytest_sme2.runners.local import LocalRunner

REPO = Path(__file__).resolve().parents[2]
INSTALLED = version("executorch")
#: where the previous executorch is installed once and reused (a CI cache may keep it)
RUNTIMES = Path(os.environ.get("SME2_TEST_RUNTIMES") or Path.home() / ".cache" / "pytest-sme2-tests" / "runtimes")

TEST = '''
import pytest


@pytest.mark.sme2_model("toy_cnn")
@pytest.mark.sme2_threshold(latency_pct=25)
def test_toy_cnn(exported_model, sme2_runner, sme2_baseline):
    sme2_baseline.check(sme2_runner.profile(exported_model))
'''
FAST = ["--sme2-runs", "4", "--sme2-warmup", "1", "--sme2-blocks", "6", "--sme2-busy-limit=100",
        "-p", "no:cacheprovider", "-p", "no:randomly", "--sme2-history=none"]
#: For a session whose test checks which comparison was made and what it says, not which way the verdict went: the
#: gate's fewest blocks (4 per arm) and no confirming measurement.
NO_STATUS = ["--sme2-blocks", "4", "--sme2-no-confirm"]


def _previous() -> str:
    """The release before the installed executorch (1.5.0 beside 1.5.1: the same torch 2.13 imports both)."""
    major, minor, patch = (int(x) for x in INSTALLED.split("+")[0].split(".")[:3])
    if patch == 0:
        pytest.skip(f"no previous patch release of executorch {INSTALLED} known to import with this torch")
    return f"{major}.{minor}.{patch - 1}"


@pytest.fixture(scope="module")
def previous() -> Path:
    """The previous executorch, installed once (by the product's own installer) into :data:`RUNTIMES`."""
    old = _previous()
    try:
        urllib.request.urlopen("https://pypi.org/simple/executorch/", timeout=15).close()
    except OSError as exc:
        pytest.skip(f"PyPI is unreachable ({exc}): the previous executorch cannot be downloaded")
    folder, why = Runtimes(RUNTIMES).install(old)
    assert folder is not None, why
    return folder


def _env(overlay: Path | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONHASHSEED", "CI"))}
    path = [str(overlay)] if overlay is not None else []
    env.update(PYTHONPATH=os.pathsep.join([*path, str(REPO)]), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com", **extra)
    return env


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=_env(), capture_output=True, text=True,
                          check=True).stdout.strip()


def _session(project: Path, *args: str, overlay: Path | None = None, ci: bool = True,
             env: dict[str, str] | None = None) -> tuple[int, dict[str, object]]:
    """One pytest session in ``project`` (on the ``overlay`` executorch when given): exit status and test result."""
    (project / "r.json").unlink(missing_ok=True)
    extra = {**({"CI": "1"} if ci else {}), **(env or {})}
    done = subprocess.run([sys.executable, "-m", "pytest", *FAST, "--sme2-json=r.json", *args], cwd=project,
                          env=_env(overlay, **extra), capture_output=True, text=True, timeout=900, check=False)
    assert (project / "r.json").is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((project / "r.json").read_text())["tests"][0]
    verdict = result.get("verdict") or {}
    checks = [c["message"] for c in verdict.get("checks", ()) if c.get("name") == "e2e"]
    print(f"{project.name}: {verdict.get('comparison')} {verdict.get('status')}, exit {done.returncode}\n" +
          "\n".join(str(n) for n in (*checks, *verdict.get("notes", ()))))  # shown with -rP
    return done.returncode, result


@pytest.fixture(scope="module")
def recorded(previous: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project whose toy_cnn baseline was recorded on the previous executorch and committed."""
    root = tmp_path_factory.mktemp("runtimes") / "project"
    root.mkdir()
    shutil.copy(EXAMPLE_MODELS, root / "my_models.py")
    (root / "test_toy.py").write_text(textwrap.dedent(TEST))
    (root / "pytest.ini").write_text("[pytest]\nsme2_models = my_models.py\n")
    (root / ".gitignore").write_text(".sme2_cache/\n.sme2_artifacts/\nsme2_out/\nr.json\n__pycache__/\n")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "model")
    code, _ = _session(root, "--sme2-update-baseline", overlay=previous, ci=False)
    assert code == 0
    (baseline,) = (root / ".sme2_baselines").glob("*.json")
    build = json.loads(baseline.read_text())["artifact"]["build"]
    assert build["executorch_version"] == previous.name.removeprefix("executorch-") != INSTALLED
    _git(root, "add", ".sme2_baselines")
    _git(root, "commit", "-q", "-m", "baseline on the previous executorch")
    return root


def _clone(recorded: Path, tmp_path: Path) -> Path:
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(recorded), str(clone))
    return clone


@pytest.fixture
def exported_here(example_export: Callable[[str, str], Any]) -> Callable[[Path], None]:
    """Put toy_cnn fp32/xnnpack as the installed executorch exports it (exported once for the test run) into a
    project's empty export cache."""

    def seed(project: Path) -> None:
        exported = example_export("fp32", "xnnpack")
        assert exported.executorch_version == INSTALLED and not (project / ".sme2_cache").exists()
        entry = exported.pte_path.parent
        shutil.copytree(entry, project / ".sme2_cache" / "toy_cnn" / entry.name)

    return seed


@pytest.mark.slow
def test_an_upgrade_is_measured_beside_the_baselines_runtime_on_a_fresh_clone(recorded: Path, previous: Path,
                                                                               exported_here: Callable[[Path], None],
                                                                               tmp_path: Path) -> None:
    clone = _clone(recorded, tmp_path)
    exported_here(clone)
    _, result = _session(clone, *NO_STATUS, f"--sme2-runtimes={RUNTIMES}")
    verdict = result["verdict"]
    assert isinstance(verdict, dict)
    notes = "\n".join(verdict["notes"])
    old = previous.name.removeprefix("executorch-")
    assert verdict["comparison"] == "runtime-session", notes
    assert f"a runtime change (executorch {old} -> {INSTALLED}), compared in this session" in notes
    assert f"installed in {previous} and proven by its sha256" in notes
    # No artifact store: the baseline's program was rebuilt from its commit by the previous executorch's exporter
    assert f"by the exporter of the executorch in {previous}" in notes
    assert verdict["status"] in ("pass", "improvement", "regression", "inconclusive"), notes
    reference = result["reference"]
    assert isinstance(reference, dict)
    assert f"executorch {old} pybindings" in str(reference["build"])
    assert f"executorch {INSTALLED} pybindings" in str(result["profile"]["build"])  # type: ignore[index]


@pytest.mark.slow
def test_without_the_previous_runtime_the_verdict_says_why_and_falls_back(recorded: Path,
                                                                          exported_here: Callable[[Path], None],
                                                                          tmp_path: Path) -> None:
    clone = _clone(recorded, tmp_path)
    exported_here(clone)
    shutil.copytree(recorded / ".sme2_artifacts", clone / ".sme2_artifacts")
    nowhere = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "",
               "PIP_RETRIES": "0", "PIP_TIMEOUT": "3", "PIP_CONFIG_FILE": os.devnull}
    _, result = _session(clone, *NO_STATUS, f"--sme2-runtimes={tmp_path / 'runtimes'}", env=nowhere)
    verdict = result["verdict"]
    assert isinstance(verdict, dict)
    notes = "\n".join(verdict["notes"])
    assert verdict["comparison"] == "runtime", notes
    assert "could not be installed beside this one: pip exited with status 1" in notes
    assert "; compared with the stored samples instead" in notes
    assert not (tmp_path / "runtimes" / f"executorch-{_previous()}").exists()


@pytest.mark.slow
def test_the_same_runtime_is_unchanged_and_installs_nothing(recorded: Path, previous: Path, tmp_path: Path) -> None:
    _, result = _session(recorded, *NO_STATUS, f"--sme2-runtimes={tmp_path / 'runtimes'}", overlay=previous)
    verdict = result["verdict"]
    assert isinstance(verdict, dict)
    if verdict["comparison"] != "unchanged":
        # The same runtime and program; a machine loaded otherwise than when the baseline was recorded may size its
        # blocks to more than 1.5x the runs (store/artifacts.RUNS_CHANGE_FACTOR): then the baseline's artifact is
        # measured beside in the session — never as a runtime change, and nothing else may have changed.
        assert verdict["comparison"] == "session", verdict["notes"]
        (changed,) = [n for n in verdict["notes"] if n.startswith("changed since the baseline: ")]
        assert re.fullmatch(r"changed since the baseline: effective runs changed \(\d+ -> \d+ per block, after block "
                            r"sizing\); compared with .*", changed), changed
    assert not (tmp_path / "runtimes").exists()


@pytest.mark.slow
def test_a_runtime_that_is_not_the_baselines_fails_the_proof(previous: Path, tmp_path: Path) -> None:
    """A baseline that ran another build of the previous release (its extension module hashes otherwise): the
    installed release starts, but is refused by its sha256, and the workers are stopped."""
    current = dict(LocalRunner().build_identity())
    old = previous.name.removeprefix("executorch-")
    theirs = {**current, "executorch_version": old, "runtime_sha256": "0" * 64}
    got = Runtimes(RUNTIMES, log_dir=tmp_path).reference(theirs, current)
    assert got.runner is None
    assert got.message == (f"executorch {old} from the package index is not the runtime the baseline ran "
                           "(runtime_libs_sha256, runtime_sha256 differ: a build of one's own?); compared with the "
                           "stored samples instead")


@pytest.mark.fast
def test_what_cannot_be_installed_is_said_without_asking_pip(tmp_path: Path) -> None:
    runtime = {"runtime_module": "executorch.extension.pybindings._C", "executorch_version": "1.5.1",
               "runtime_sha256": "a" * 64, "runtime_libs_sha256": "b" * 64}
    custom = {**runtime, "executorch_version": "1.5.0+mine", "runtime_sha256": "c" * 64}
    runtimes = Runtimes(tmp_path / "runtimes")
    assert runtimes.reference(custom, runtime).message == (
        "the baseline's runtime (executorch 1.5.0+mine) could not be installed beside this one: '1.5.0+mine' is not a "
        "release on the package index (a build of one's own?); compared with the stored samples instead")
    rebuilt = {**runtime, "runtime_sha256": "c" * 64}
    assert "the baseline ran another build of executorch 1.5.1 than this one" in \
        runtimes.reference(rebuilt, runtime).message
    assert Runtimes(None, why_off="--sme2-runtimes=none").reference(custom, runtime).message == (
        "the baseline's runtime (executorch 1.5.0+mine) is not installed beside this one (--sme2-runtimes=none); "
        "compared with the stored samples instead")
    runner = {"runner_sha256": "d" * 64}  # a runner binary's build: not a runtime this installs
    assert runtimes.reference(runner, runtime).message == ""
    assert not (tmp_path / "runtimes").exists()


@pytest.mark.slow
def test_our_own_runner_is_built_against_the_baselines_executorch(recorded: Path, previous: Path,
                                                                   tmp_path: Path) -> None:
    """``--sme2-device=host``: the baseline recorded by pytest-sme2's runner built against the previous executorch's
    SDK; on the installed executorch the runner is built again against the previous SDK, proven by its sha256 and its
    libraries', and measured beside the current build."""
    from toolchain import require_host_compiler

    require_host_compiler()
    project = _clone(recorded, tmp_path)
    code, _ = _session(project, "--sme2-device=host", "--sme2-update-baseline", overlay=previous, ci=False)
    assert code == 0
    _, result = _session(project, *NO_STATUS, "--sme2-device=host", f"--sme2-runtimes={RUNTIMES}")
    verdict = result["verdict"]
    assert isinstance(verdict, dict)
    notes = "\n".join(verdict["notes"])
    old = previous.name.removeprefix("executorch-")
    assert verdict["comparison"] == "runtime-session", notes
    assert f"a runtime change (executorch {old} -> {INSTALLED}), compared in this session: the baseline's runner, " \
           f"pytest-sme2's own built against executorch {old}'s SDK ({previous}) and proven by its sha256" in notes
    reference = result["reference"]
    assert isinstance(reference, dict)
    libraries = reference["artifact"]["build"]["libraries"]
    (host,) = [b for b in (json.loads(p.read_text()) for p in (project / ".sme2_baselines").glob("*.json"))
               if "runner_sha256" in b["artifact"]["build"]]
    assert libraries == host["artifact"]["build"]["libraries"]  # the reference loaded the baseline's libraries


@pytest.mark.slow
def test_the_emulators_runner_is_built_against_the_baselines_aarch64_sdk(previous: Path, tmp_path: Path) -> None:
    """``--sme2-device=qemu``: the aarch64 runner a session on the previous executorch builds (the CLI's build-runner,
    in its own process on that executorch) is built again by this session against the previous release's aarch64
    wheel: the same binary, loading the same libraries."""
    from toolchain import require_cross_compiler

    from pytest_sme2.runners.build import TARGET_LINUX_AARCH64
    from pytest_sme2.store.files import file_sha256

    require_cross_compiler()
    old = previous.name.removeprefix("executorch-")
    done = subprocess.run([sys.executable, "-m", "pytest_sme2", "build-runner", "--target", TARGET_LINUX_AARCH64,
                           "--cache-dir", str(tmp_path / "then"), "--json", str(tmp_path / "then.json")],
                          env=_env(previous), capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (then,) = json.loads((tmp_path / "then.json").read_text())
    assert then["executorch_version"] == old
    binary = Path(then["path"])
    libraries = {p.name: file_sha256(p) for p in (binary.parent / "lib").glob("libexecutorch*.so")}
    baseline = {"runner": "executor_runner", "executorch_version": old, "runner_sha256": file_sha256(binary),
                "libraries": libraries}
    current = {**baseline, "executorch_version": INSTALLED, "runner_sha256": "0" * 64}
    got = Runtimes(RUNTIMES).runner_reference(TARGET_LINUX_AARCH64, baseline, current, cache=tmp_path / "now")
    assert got.binary is not None, got.message
    assert file_sha256(got.binary) == baseline["runner_sha256"]
    assert f"pytest-sme2's own built against executorch {old}'s SDK" in got.message
    assert got.binary.is_relative_to(tmp_path / "now")


#: Five (or, made 20 % heavier, six) identical dense layers: the cost scales with LAYERS
HEAVIER = '''
import torch
from torch import nn

from pytest_sme2.models import register_model

LAYERS = 5


@register_model("net")
def net():
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(384, 384), nn.ReLU()) for _ in range(LAYERS)])
    return model.eval(), (torch.randn(32, 384, generator=torch.Generator().manual_seed(1)),)
'''


@pytest.mark.slow
def test_an_upgrade_that_comes_with_a_heavier_model_fails_in_the_session(previous: Path, tmp_path: Path) -> None:
    """The baseline's program on the baseline's executorch against the change (20 % more layers) on the installed one:
    the same-session comparison catches what the stored samples without history could not decide."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "my_models.py").write_text(textwrap.dedent(HEAVIER))
    (project / "test_net.py").write_text(textwrap.dedent(TEST).replace('"toy_cnn"', '"net"').replace("25", "10"))
    (project / "pytest.ini").write_text("[pytest]\nsme2_models = my_models.py\n")
    code, _ = _session(project, "--sme2-update-baseline", overlay=previous, ci=False)
    assert code == 0
    models = project / "my_models.py"
    models.write_text(models.read_text().replace("LAYERS = 5", "LAYERS = 6"))
    code, result = _session(project, "--sme2-blocks", "8", f"--sme2-runtimes={RUNTIMES}")
    verdict = result["verdict"]
    assert isinstance(verdict, dict)
    notes = "\n".join(verdict["notes"])
    assert verdict["comparison"] == "runtime-session", notes
    assert "model program changed" in notes
    assert verdict["status"] == "regression", notes
    assert code == 1


def test_a_previous_runtime_that_does_not_import_says_so(tmp_path: Path) -> None:
    """An installed release that cannot be imported with this Python and torch (here: one whose package raises on
    import) is said in one line, with the worker's log; nothing is left running."""
    folder = tmp_path / "runtimes" / "executorch-1.4.9"
    (folder / "executorch").mkdir(parents=True)
    (folder / "executorch" / "__init__.py").write_text("raise ImportError('built for another torch')\n")
    (folder / ".complete").write_text("executorch 1.4.9\n")
    current = {"runtime_module": "executorch.extension.pybindings._C", "executorch_version": INSTALLED,
               "runtime_sha256": "a" * 64, "runtime_libs_sha256": "b" * 64}
    got = Runtimes(tmp_path / "runtimes", log_dir=tmp_path / "logs").reference(
        {**current, "executorch_version": "1.4.9", "runtime_sha256": "c" * 64}, current)
    assert got.runner is None
    assert got.message.startswith(f"the baseline's runtime (executorch 1.4.9, installed in {folder}) does not start "
                                  "with this Python and torch: the executorch runtime in ")
    assert "the executorch Python runtime is not installed" in got.message
    assert got.message.endswith("; compared with the stored samples instead")
