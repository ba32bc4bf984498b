"""The export pool: a session's missing exports done in worker processes before anything is measured.

Real workers (``python -m pytest_sme2.program.pool``), real exports of two small registered models. What must
hold: the pool fills the cache with the very bytes the test's own export would write, a job a worker cannot
do is left to its test (never a wrong entry, never a lost job), and an interrupted pool leaves no worker behind.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.models import get_model, load_model_sources
from pytest_sme2.program import pool as export_pool
from pytest_sme2.program.export import export_model, find_cached
from pytest_sme2.program.pool import ExportJob, PoolReport, default_processes, export_all

POOL_MODELS = '''
import os
import warnings

import torch
from torch import nn

from pytest_sme2.models import register_model


class PoolWarning(UserWarning):
    pass


class PoolMlp(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc1 = nn.Linear(16, width)
        self.fc2 = nn.Linear(width, 4)

    def forward(self, x):
        if torch.compiler.is_exporting():
            warnings.warn(f"PoolMlp({self.fc1.out_features}).forward: the user's own warning", PoolWarning)
        return self.fc2(torch.relu(self.fc1(x)))


@register_model("pool_mlp")
def pool_mlp():
    return PoolMlp(32), (torch.randn(1, 16),)


@register_model("pool_mlp_wide")
def pool_mlp_wide():
    return PoolMlp(64), (torch.randn(1, 16),)


@register_model("pool_dies")
def pool_dies():
    # A worker process dies building it (a crash in a factory, the OOM killer): only where the test asks.
    if os.environ.get("SME2_TEST_POOL_DIE") == "1":
        os._exit(7)
    return PoolMlp(8), (torch.randn(1, 16),)
'''


@pytest.fixture(scope="module")
def models_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pool_models") / "pool_models.py"
    path.write_text(textwrap.dedent(POOL_MODELS))
    load_model_sources([str(path)])
    return path


def _job(name: str, cache_dir: Path, *, dtype: str = "fp32", backend: str = "portable", key: str | None = None,
         source: str = "") -> ExportJob:
    if key is None:
        key, hit = find_cached(get_model(name), dtype=dtype, backend=backend, cache_dir=cache_dir)
        assert hit is None, f"{name} must not be in the test's fresh cache yet"
    return ExportJob(name, dtype, backend, key, source)


def test_the_pool_writes_the_bytes_the_tests_own_export_would(models_file: Path, tmp_path: Path) -> None:
    pooled, own = tmp_path / "pooled", tmp_path / "own"
    jobs = [_job("pool_mlp", pooled), _job("pool_mlp_wide", pooled, backend="xnnpack")]
    lines: list[str] = []
    report = export_all(jobs, cache_dir=pooled, processes=2, model_sources=[str(models_file)], progress=lines.append)
    assert report.processes == 2 and not report.failed, report.left()
    assert sorted(report.exported, key=lambda j: j.model) == jobs
    assert report.keys == {j.key for j in jobs}
    assert any("exporting 2 models in 2 processes before measuring" in line for line in lines), lines
    for job in jobs:
        spec = get_model(job.model)
        # What the test then asks for is a cache hit on the pool's entry ...
        hit = export_model(spec, dtype=job.dtype, backend=job.backend, cache_dir=pooled, progress=None)
        assert hit.cached and hit.cache_key == job.key
        # ... holding the bytes the test's own process writes when it exports the model itself.
        with pytest.warns(sys.modules["pool_models"].PoolWarning):  # the user's warning, as in the worker
            mine = export_model(spec, dtype=job.dtype, backend=job.backend, cache_dir=own, progress=None)
        assert not mine.cached
        assert mine.pte_path.read_bytes() == hit.pte_path.read_bytes(), job.label
        assert [p.read_bytes() for p in mine.input_files] == [p.read_bytes() for p in hit.input_files]
    # The user's warnings of each export come back to be re-issued in the test (torch's own stay in the log).
    for job, width in zip(jobs, (32, 64), strict=True):
        caught = report.warnings[job.key]
        assert {(w.category, w.message) for w in caught} == {
            ("pool_models:PoolWarning", f"PoolMlp({width}).forward: the user's own warning")}, caught
        with pytest.warns(sys.modules["pool_models"].PoolWarning, match=f"PoolMlp\\({width}\\)") as shown:
            caught[0].reissue()
        assert shown[0].filename == str(models_file) and shown[0].lineno == caught[0].lineno


def test_a_model_the_worker_builds_differently_is_left_to_its_test(models_file: Path, tmp_path: Path) -> None:
    # The session's key is not what the worker's build gives (a factory that is not deterministic across
    # processes): the worker writes nothing, and says why.
    job = _job("pool_mlp", tmp_path, key="0" * 64)
    report = export_all([job], cache_dir=tmp_path, processes=2, model_sources=[str(models_file)])
    assert report.processes == 1, "one job needs one worker"
    assert not report.exported and [j for j, _ in report.failed] == [job]
    assert "with another cache key" in report.left()[0] and "000000000000" in report.left()[0]
    assert not list(tmp_path.glob("pool_mlp/*/meta.json")), "nothing may be written for it"


def test_an_unknown_model_is_found_through_the_file_that_registered_it(models_file: Path, tmp_path: Path) -> None:
    # Registered by a file the worker was not told about (a test module, a conftest): the job names it.
    job = _job("pool_mlp", tmp_path, source=str(models_file))
    report = export_all([job], cache_dir=tmp_path, processes=2)
    assert report.exported == (job,), report.left()
    missing = ExportJob("pool_nowhere", "fp32", "portable", "1" * 64)
    report = export_all([missing], cache_dir=tmp_path, processes=2)
    assert "unknown model 'pool_nowhere'" in report.left()[0]


def test_a_worker_that_dies_loses_only_its_job(models_file: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SME2_TEST_POOL_DIE", "1")
    dies = ExportJob("pool_dies", "fp32", "portable", "2" * 64)
    good = [_job("pool_mlp", tmp_path), _job("pool_mlp_wide", tmp_path)]
    report = export_all([dies, *good], cache_dir=tmp_path, processes=2, model_sources=[str(models_file)])
    assert [j for j, _ in report.failed] == [dies]
    assert "exited with status 7" in report.left()[0], report.left()
    assert sorted(report.exported, key=lambda j: j.model) == good, "the other worker takes the rest"
    # One worker, and it dies first: the jobs it never got go back to their tests, not into thin air.
    fresh = tmp_path / "second"
    report = export_all([dies, _job("pool_mlp", fresh)], cache_dir=fresh, processes=1,
                        model_sources=[str(models_file)])
    assert not report.exported
    assert [why for _, why in report.failed][1] == "no export worker was left to take it"


def test_an_interrupted_pool_leaves_no_worker_behind(models_file: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[Any] = []
    real_start = export_pool._Worker.start

    def start(*args: Any) -> Any:
        worker = real_start(*args)
        started.append(worker.proc)
        return worker

    monkeypatch.setattr(export_pool._Worker, "start", staticmethod(start))

    def interrupt(line: str) -> None:
        raise KeyboardInterrupt  # Ctrl-C while the first export is under way

    jobs = [_job("pool_mlp", tmp_path), _job("pool_mlp_wide", tmp_path)]
    with pytest.raises(KeyboardInterrupt):
        export_all(jobs, cache_dir=tmp_path, processes=2, model_sources=[str(models_file)], progress=interrupt)
    assert len(started) == 2 and all(proc.poll() is not None for proc in started), "every worker is gone"
    # Killed, not left to finish their exports first (which would also have ended them, after seconds).
    assert not list(tmp_path.glob("pool_mlp*/*/meta.json"))


def test_the_default_is_the_hosts_cpus_up_to_four() -> None:
    assert [default_processes(n) for n in (1, 2, 3, 16)] == [1, 2, 3, 4]
    assert PoolReport(processes=2, seconds=61.4).summary() == "0 exported in 2 processes in 61 s"
