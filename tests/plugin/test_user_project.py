"""A user's own project, as a new user meets it: own models file, own tests, separate processes.

The slow tests run real processes in a temporary project directory (this checkout on ``PYTHONPATH``):
a second session must hit the export cache, models come from the user's file or an installed
package's entry point, the wheel holds only ``pytest_sme2``, and third-party noise stays out of the
user's output. The quick ones check how a models file is imported, in this process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from pytest_sme2 import models
from pytest_sme2.errors import ModelError

REPO = Path(__file__).resolve().parents[2]

#: The user's model file of every project here: ``tiny``, whose forward() warns while it is exported.
USER_MODELS = '''
import warnings

import torch
from torch import nn

from pytest_sme2.models import register_model


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x):
        if torch.compiler.is_exporting():  # only while the plugin exports it, not when run eagerly
            warnings.warn("Tiny.forward: old_api is deprecated (the user's own warning)", DeprecationWarning)
        return torch.relu(self.fc(x))


@register_model("tiny")
def tiny():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Tiny()
    return model.eval(), (torch.ones(1, 16),)
'''

#: Export ``tiny`` through the library (what both front ends call) and say whether it was a cache hit.
EXPORT_SCRIPT = '''
import json, sys
from pytest_sme2.program.export import export_model
from pytest_sme2.models import load_model_sources

load_model_sources(["my_models.py"])
lines = []
exported = export_model("tiny", cache_dir=".sme2_cache", progress=lines.append)
print(json.dumps({"cached": exported.cached, "key": exported.cache_key, "progress": lines}))
'''


def _env(**extra: str) -> dict[str, str]:
    """The environment of a user's process: this checkout importable, nothing of the test session's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONHASHSEED"))}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def _project(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text))
    return root


def _python(project: Path, *args: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=project, env=_env(**env), capture_output=True, text=True,
                          timeout=timeout, check=False)


# ------------------------------------------------------------------------------------ models files


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> object:
    """An empty model registry; sys.path and the modules a test imports are put back afterwards."""
    monkeypatch.setattr(models, "_REGISTRY", {})
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield models
    for name in set(sys.modules) - before:
        del sys.modules[name]


REGISTERS = """
from pytest_sme2.models import register_model


@register_model({name!r})
def factory():
    return None, ()
"""


def test_a_models_file_is_the_module_its_tests_import(tmp_path: Path, registry: object) -> None:
    """``--sme2-models my_models.py`` and ``from my_models import MyNet`` in a test are one module, so the
    model is registered once."""
    _project(tmp_path, {"my_models.py": REGISTERS.format(name="mine")})
    models.load_model_sources(["my_models.py"], base_dir=tmp_path)
    import my_models  # type: ignore[import-not-found]  # what the user's test file does

    assert Path(my_models.__file__).resolve() == tmp_path / "my_models.py"
    assert models.get_model("mine").factory is my_models.factory
    assert models.get_model("mine").origin == f"{tmp_path / 'my_models.py'}:factory"
    models.load_model_sources([str(tmp_path / "my_models.py")])  # again, by absolute path: nothing new
    assert sys.modules["my_models"] is my_models
    assert not [m for m in sys.modules if m.startswith("_sme2_models")]


@pytest.mark.parametrize("package_first", [True, False], ids=["package-imported-first", "file-loaded-first"])
def test_a_models_file_inside_a_package_is_imported_as_part_of_it(tmp_path: Path, registry: object,
                                                                  package_first: bool) -> None:
    """This repository's case: the ini names ``example_models/models.py`` while tests import
    ``example_models.models``. Either order gives one module and one registration."""
    _project(tmp_path / "suite", {"__init__.py": "from . import models\n",
                                  "models.py": REGISTERS.format(name="suite_model")})
    sys.path.insert(0, str(tmp_path))
    if package_first:
        import suite.models  # type: ignore[import-not-found]
    models.load_model_sources(["suite/models.py"], base_dir=tmp_path)
    import suite.models

    assert Path(suite.models.__file__).resolve() == tmp_path / "suite" / "models.py"
    assert models.get_model("suite_model").factory is suite.models.factory
    assert not [m for m in sys.modules if m.startswith("_sme2_models")]


def test_a_models_file_named_like_another_module_gets_a_private_name(tmp_path: Path, registry: object) -> None:
    import csv

    _project(tmp_path, {"csv.py": REGISTERS.format(name="shadow")})
    models.load_model_sources([str(tmp_path / "csv.py")])
    assert sys.modules["csv"] is csv, "the standard library's csv must stay what it is"
    factory = models.get_model("shadow").factory
    assert factory.__module__.startswith("_sme2_models_csv_")
    assert models.get_model("shadow").origin == f"{tmp_path / 'csv.py'}:factory"


def test_one_name_from_two_files_is_an_error_naming_both(tmp_path: Path, registry: object) -> None:
    _project(tmp_path / "a", {"first_models.py": REGISTERS.format(name="net")})
    _project(tmp_path / "b", {"second_models.py": REGISTERS.format(name="net")})
    models.load_model_sources([str(tmp_path / "a" / "first_models.py")])
    with pytest.raises(ModelError) as info:
        models.load_model_sources([str(tmp_path / "b" / "second_models.py")])
    message = str(info.value)
    assert "model name 'net' is registered twice" in message
    assert str(tmp_path / "a" / "first_models.py") in message and str(tmp_path / "b" / "second_models.py") in message


def test_a_missing_or_broken_models_file_names_it(tmp_path: Path, registry: object) -> None:
    with pytest.raises(ModelError, match=r"models file .*nope\.py does not exist"):
        models.load_model_sources(["nope.py"], base_dir=tmp_path)
    _project(tmp_path, {"broken_models.py": "raise RuntimeError('no GPU here')\n"})
    with pytest.raises(ModelError, match=r"importing models file .*/broken_models.py failed: RuntimeError: no GPU"):
        models.load_model_sources(["broken_models.py"], base_dir=tmp_path)
    assert "broken_models" not in sys.modules


def test_ini_paths_are_relative_to_the_ini_file(tmp_path: Path) -> None:
    """``sme2_models = my_models.py`` in ``project/pytest.ini`` means ``project/my_models.py`` even when
    pytest is started in ``project/tests``; module names are left alone."""
    _project(tmp_path, {"helpers": ""})
    assert models.resolve_model_sources(["my_models.py", "sub/more.py", "pkg.models", "/abs/m.py"], tmp_path) == (
        str(tmp_path / "my_models.py"), str(tmp_path / "sub" / "more.py"), "pkg.models", "/abs/m.py")
    assert models.resolve_model_sources(["helpers"], tmp_path) == (str(tmp_path / "helpers"),), "an existing file"


# ------------------------------------------------------------------------------------ export cache


@pytest.mark.slow
def test_export_cache_hits_in_a_second_process_and_another_checkout(tmp_path: Path) -> None:
    """String hashes are salted per process (PYTHONHASHSEED); nothing in the key may depend on them, nor on
    the directory the project is checked out in."""
    first_dir = _project(tmp_path / "checkout_a", {"my_models.py": USER_MODELS, "export_it.py": EXPORT_SCRIPT})
    first = _python(first_dir, "export_it.py", PYTHONHASHSEED="1")
    assert first.returncode == 0, first.stderr
    made = json.loads(first.stdout.splitlines()[-1])
    assert made["cached"] is False and made["progress"][0] == "exporting tiny fp32/xnnpack: starting (0 s)"

    again = _python(first_dir, "export_it.py", PYTHONHASHSEED="2")
    assert again.returncode == 0, again.stderr
    hit = json.loads(again.stdout.splitlines()[-1])
    assert hit == {"cached": True, "key": made["key"], "progress": []}, "a second process exported again"

    # The same project elsewhere (another clone, a CI workspace), its cache carried along.
    second_dir = tmp_path / "elsewhere" / "checkout_b"
    shutil.copytree(first_dir, second_dir)
    moved = _python(second_dir, "export_it.py", PYTHONHASHSEED="3")
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout.splitlines()[-1]) == hit
    assert [p.name for p in (second_dir / ".sme2_cache" / "tiny").iterdir()] == [made["key"][:16]]


# ------------------------------------------------------------------------------------------ packaging


def test_the_wheel_installs_only_pytest_sme2(tmp_path: Path) -> None:
    """example_models/ is this repository's example suite; before, it landed in site-packages as a
    top-level package (with its test files) and the library imported it by name."""
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", ".sme2_*")
    for name in ("pytest_sme2", "example_models", "tests", "benchmarks"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    built = _python(src, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", ".", "-w",
                    str(tmp_path / "dist"), timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("pytest_sme2-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top = {n.split("/")[0] for n in names}
        dist_info = next(t for t in top if t.endswith(".dist-info"))
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    assert top == {"pytest_sme2", dist_info}, sorted(top)
    assert "pytest_sme2/py.typed" in names and "pytest_sme2/plugin/__init__.py" in names
    assert "[pytest11]\nsme2 = pytest_sme2.plugin" in entry_points
    assert "pytest-sme2 = pytest_sme2.cli:main" in entry_points


DIST_INFO_METADATA = "Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"


def _installed(site: Path, dist: str, package: str, source: str) -> None:
    """A package as pip installs it: the module plus a dist-info declaring a pytest_sme2.models entry point."""
    _project(site / package, {"__init__.py": source})
    info = site / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(DIST_INFO_METADATA.format(name=dist))
    (info / "entry_points.txt").write_text(f"[pytest_sme2.models]\n{package} = {package}\n")


def test_models_from_an_installed_packages_entry_point(tmp_path: Path) -> None:
    """A package ships models the way pytest plugins ship hooks: no --sme2-models needed."""
    site = tmp_path / "site"
    _installed(site, "acme-models", "acme_models", REGISTERS.format(name="acme_net"))
    code = "from pytest_sme2.models import get_model; print(get_model('acme_net').origin)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False, env={**_env(), "PYTHONPATH": os.pathsep.join([str(REPO), str(site)])})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{site / 'acme_models' / '__init__.py'}:factory"

    # A broken one names itself and the package it came from, instead of a traceback from importlib.
    _installed(site, "broken-models", "broken_models", "raise ImportError('needs torchvision')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_sme2", "profile", "--model", "acme_net"], cwd=tmp_path, capture_output=True,
        text=True, timeout=120, check=False, env={**_env(), "PYTHONPATH": os.pathsep.join([str(REPO), str(site)])})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert ("pytest-sme2 profile: error: the pytest_sme2.models entry point 'broken_models' = 'broken_models' of "
            "broken-models failed to load: ImportError: needs torchvision") in proc.stderr
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------------------- a user's pytest run


USER_TEST = '''
import pytest


@pytest.mark.sme2_model("tiny")
def test_tiny(exported_model, sme2_runner, sme2_baseline):
    profile = sme2_runner.profile(exported_model)
    sme2_baseline.check(profile)
    assert profile.samples_ms[0] < 0, "a functional check that fails, so pytest shows the captured output"
'''


#: A user's pytest session, short: pytest's cache, randomly and xdist off; one block of 3 runs; no busy check.
SHORT_SESSION = ["-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist", "--sme2-runs=3",
                 "--sme2-warmup=1", "--sme2-blocks=1", "--sme2-busy-limit=100"]


def _section(output: str, title: str) -> str:
    """One ``==== title ====`` section of pytest's terminal output ("" when absent)."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("=") and f" {title} " in line), None)
    if start is None:
        return ""
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("====")), len(lines))
    return "\n".join(lines[start:end])


@pytest.fixture(scope="module")
def user_sessions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """Two pytest sessions in a user's project: its own models file (named in its ini, then with --sme2-models)
    and a test that fails after measuring."""
    project = _project(tmp_path_factory.mktemp("user_project"), {
        "my_models.py": USER_MODELS, "test_tiny.py": USER_TEST, "pytest.ini": "[pytest]\nsme2_models = my_models.py\n",
    })
    argv = SHORT_SESSION
    first = _python(project, *argv, "--sme2-update-baseline")
    second = _python(project, *argv, "--sme2-models=my_models.py")  # the flag names the same file as the ini
    return project, first.stdout + first.stderr, second.stdout + second.stderr


@pytest.mark.slow
def test_a_user_project_session_exports_once_and_reports_the_users_warning(
        user_sessions: tuple[Path, str, str]) -> None:
    project, first, second = user_sessions
    # The functional check after check() failed the test: it is reported as failed, not as its baseline status.
    assert "1 failed" in first and "FAILED           test_tiny.py::test_tiny" in first, first
    assert list((project / ".sme2_baselines").glob("*.json")), "the baseline was written all the same"
    assert "sme2 exports: 1 exported in " in first and ", 0 from the cache" in first
    assert "1 failed" in second and "sme2 exports: 0 exported in 0.0 s, 1 from the cache" in second, (
        "the second session must hit the export cache")

    # The user's warning, raised in their forward() while the plugin exported it, is in the summary.
    summary = _section(first, "warnings summary")
    assert "my_models.py" in summary and "Tiny.forward: old_api is deprecated" in summary, first
    # torch/executorch/torchao noise of the export is not (before: 29 warnings in this summary) ...
    for noise in ("script_method", "read_text is deprecated", "open_text", "read_binary", "LeafSpec"):
        assert noise not in summary, summary
    # ... nor in the failing test's captured output; it is in the export's log beside the .pte.
    assert "Failed to load" not in first and "_pytree" not in first, first
    (log,) = (project / ".sme2_cache" / "tiny").glob("*/export.log")
    text = log.read_text()
    assert "DeprecationWarning" in text and "torch" in text and "Tiny.forward" not in text


@pytest.mark.slow
def test_a_user_project_session_keeps_runtime_noise_out_of_a_failing_tests_output(
        user_sessions: tuple[Path, str, str]) -> None:
    _, first, second = user_sessions
    for output in (first, second):
        assert "cpuinfo" not in output and "threadpool.cpp" not in output, output
        summary = _section(output, "warnings summary")
        assert "ExperimentalWarning" not in summary and "/executorch/" not in summary, output
    assert "warnings summary" not in second, "with the export cached, nothing is left to warn"


@pytest.fixture(scope="module")
def pool_sessions(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    """A user's project whose two tests export two configurations of its model: a first session (export pool),
    a second (cache hits), and a first session again with ``--sme2-export-processes=1``."""
    project = _project(tmp_path_factory.mktemp("pool_project"), {
        "my_models.py": USER_MODELS, "pytest.ini": "[pytest]\nsme2_models = my_models.py\n",
        "test_tiny.py": '''
            import pytest

            @pytest.mark.parametrize("backend", [
                pytest.param("portable", marks=pytest.mark.sme2_model("tiny", backend="portable")),
                pytest.param("xnnpack", marks=pytest.mark.sme2_model("tiny", backend="xnnpack")),
            ])
            def test_tiny(backend, exported_model, sme2_runner, sme2_baseline):
                sme2_baseline.check(sme2_runner.profile(exported_model))
            ''',
    })
    argv = [*SHORT_SESSION, "-W", "default"]
    outputs = [_python(project, *argv), _python(project, *argv),
               _python(project, *argv, "--sme2-cache-dir=one_process", "--sme2-export-processes=1")]
    return tuple(p.stdout + p.stderr for p in outputs)  # type: ignore[return-value]


@pytest.mark.slow
def test_a_first_session_exports_its_models_in_worker_processes_before_measuring(
        pool_sessions: tuple[str, str, str]) -> None:
    pooled, cached, one_process = pool_sessions
    assert "2 passed" in pooled, pooled
    assert "sme2 exports: 2 exported in 2 processes in " in pooled, pooled
    assert " before measuring, 0 exported in 0.0 s by the tests, 0 from the cache" in pooled, pooled
    # The user's warning, raised in their forward() while a worker exported it, is the test's as before: each test's
    # export warned, at the user's line.
    summary = _section(pooled, "warnings summary")
    assert "test_tiny.py::test_tiny[portable]\ntest_tiny.py::test_tiny[xnnpack]\n" in summary, pooled
    assert "my_models.py:17: DeprecationWarning: Tiny.forward: old_api is deprecated" in summary, pooled
    assert "2 passed, 2 warnings" in pooled
    # The next session finds both in the cache: no worker is started.
    assert "2 passed" in cached and "sme2 exports: 0 exported in 0.0 s, 2 from the cache" in cached, cached
    # One process: each test exports its own model, as before the pool.
    assert "2 passed" in one_process and "sme2 exports: 2 exported in " in one_process, one_process
    assert "processes" not in one_process.split("sme2 exports:")[1].splitlines()[0]
