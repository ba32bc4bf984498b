"""Damaged cache entries are detected, said once, rebuilt once and never served again.

A damaged export-cache entry (meta.json cut off, model.pte deleted or cut off) is set aside and exported again
once; a damaged file in the artifact store (a reference ``.pte`` cut off) is not served.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_sme2.program.export import META_FILE, PTE_FILE, _entry, _set_aside_damaged, export_model, load_pte_check
from pytest_sme2.store.artifacts import ArtifactStore
from pytest_sme2.store.files import file_sha256

DATA = Path(__file__).parents[1] / "data"

#: part of the bad-input tier (tests/test_bad_input.py says what it holds; -m bad_input runs it alone)
pytestmark = pytest.mark.bad_input


class TinyLinear(torch.nn.Module):
    """The smallest model worth exporting: a cache entry in a few seconds."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


INPUTS = (torch.ones(1, 8),)


def _export(cache: Path, said: list[str]) -> object:
    return export_model(TinyLinear(), inputs=INPUTS, name="tiny_linear", cache_dir=cache, progress=said.append)


def _cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(("damage", "expected"), [
    (lambda entry: _cut(entry / META_FILE), "meta.json is unreadable"),
    (lambda entry: (entry / PTE_FILE).unlink(), "model.pte is missing"),
    (lambda entry: _cut(entry / PTE_FILE), "model.pte has"),
    (lambda entry: _cut(entry / "input_0.bin"), "input_0.bin has"),
], ids=["meta-cut", "pte-deleted", "pte-cut", "input-cut"])
def test_a_damaged_export_entry_is_said_once_rebuilt_once_and_then_hit(tmp_path: Path, damage: object,
                                                                       expected: str) -> None:
    said: list[str] = []
    first = _export(tmp_path, said)
    entry = first.entry_dir
    program = first.pte_path.read_bytes()
    assert json.loads((entry / META_FILE).read_text())["sizes"][PTE_FILE] == len(program)
    damage(entry)  # type: ignore[operator]

    said.clear()
    repaired = _export(tmp_path, said)
    notes = [line for line in said if "damaged" in line]
    assert len(notes) == 1, said
    assert f"export cache entry {entry} was damaged ({expected}" in notes[0]
    assert "exporting it again" in notes[0]
    assert not repaired.cached and expected in repaired.repaired
    assert repaired.pte_path.read_bytes() == program  # exports are byte-identical
    load_pte_check(repaired.pte_path)

    said.clear()
    again = _export(tmp_path, said)
    assert again.cached and not again.repaired and said == []  # rebuilt once: the next run hits
    assert not any(p.name.startswith(".tmp-") for p in entry.parent.iterdir())


def test_a_fresh_entry_is_never_set_aside_by_a_process_that_saw_it_damaged(tmp_path: Path) -> None:
    """Two processes find one entry damaged: the second to take the lock finds the first's fresh entry and
    leaves it (it reads the entry again under the lock)."""
    exported = _export(tmp_path, [])
    entry, key = exported.entry_dir, exported.cache_key
    assert _set_aside_damaged(entry, key, tmp_path) == ""
    assert _entry(entry, key)[0] is not None


def test_an_entry_written_before_sizes_were_recorded_is_checked_against_its_header(tmp_path: Path) -> None:
    exported = _export(tmp_path, [])
    entry = exported.entry_dir
    meta = json.loads((entry / META_FILE).read_text())
    del meta["sizes"]
    (entry / META_FILE).write_text(json.dumps(meta))
    assert _entry(entry, exported.cache_key)[0] is not None  # an old, complete entry is still a hit
    _cut(entry / PTE_FILE)
    assert "shorter than its header declares" in _entry(entry, exported.cache_key)[1]


# ------------------------------------------------------------------------------------------ artifact store


def test_a_damaged_artifact_is_never_served_and_is_stored_again(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    pte = DATA / "toy_cnn_fp32_xnnpack.pte"
    digest = store.put(pte)
    stored = store.path_of(digest)
    _cut(stored)  # a copy cut off (a full disk, a killed cache restore)

    assert store.get(digest) is None
    assert not stored.exists()
    assert "toy_cnn" not in store.damaged[digest] and "bytes" in store.damaged[digest]
    assert store.put(pte) == digest  # the next put of the same program stores it again
    assert file_sha256(store.path_of(digest)) == digest and store.get(digest) == stored


def test_put_replaces_a_damaged_copy_of_the_same_content(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    pte = DATA / "toy_cnn_fp32_xnnpack.pte"
    digest = store.put(pte)
    _cut(store.path_of(digest))
    store.put(pte)
    assert store.path_of(digest).read_bytes() == pte.read_bytes()


# ------------------------------------------------------------------------------------------ runner builds


def test_a_damaged_runner_build_is_said_built_again_and_then_hit(host_runner_build: Any, tmp_path: Path) -> None:
    """A cut build.json was a JSONDecodeError traceback; a cut binary was served and failed when run."""
    import shutil

    from pytest_sme2.runners.build import TARGET_HOST, build_runner

    cache = tmp_path / "runners"
    entry = cache / TARGET_HOST / host_runner_build.key
    shutil.copytree(host_runner_build.path.parent, entry, symlinks=True)
    said: list[str] = []
    assert not build_runner(TARGET_HOST, cache_dir=cache, progress=said.append).built  # the copy is a hit

    for damage, expected in (("build.json", "build.json is unreadable"),
                             (host_runner_build.path.name, f"{host_runner_build.path.name} has")):
        _cut(entry / damage)
        said.clear()
        again = build_runner(TARGET_HOST, cache_dir=cache, progress=said.append)
        assert again.built
        assert [line for line in said if "damaged" in line] == [
            next(line for line in said if line.startswith(f"runner build {entry} was damaged ({expected}"))]
        said.clear()
        assert not build_runner(TARGET_HOST, cache_dir=cache, progress=said.append).built and said == []


_EXPORT_ONE = """
import json, sys
import torch
sys.path.insert(0, sys.argv[2])
from program.test_export_cache import INPUTS, TinyLinear
from pytest_sme2.program.export import export_model, load_pte_check

said = []
exported = export_model(TinyLinear(), inputs=INPUTS, name="tiny_linear", cache_dir=sys.argv[1], progress=said.append)
load_pte_check(exported.pte_path)
print(json.dumps({"repaired": exported.repaired, "said": [s for s in said if "damaged" in s]}))
"""


@pytest.mark.slow
def test_two_processes_repairing_one_damaged_entry_both_succeed_and_it_is_said_once(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    first = _export(tmp_path, [])
    entry = first.entry_dir
    program = first.pte_path.read_bytes()
    _cut(entry / PTE_FILE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]),
                                                         os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", _EXPORT_ONE, str(tmp_path), str(Path(__file__).parents[1])],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(len(r["said"]) for r in results) == 1, results  # one of them set it aside and said so
    again = _export(tmp_path, [])
    assert again.cached and again.pte_path.read_bytes() == program


_MODELS = """
import torch
from pytest_sme2.models import register_model


class Tiny(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = torch.nn.Linear(8, width)

    def forward(self, x):
        return self.fc(x)


@register_model("tiny_a")
def tiny_a():
    return Tiny(4), (torch.ones(1, 8),)


@register_model("tiny_b")
def tiny_b():
    return Tiny(6), (torch.ones(1, 8),)
"""

_TESTS = """
import pytest

@pytest.mark.parametrize("name", [pytest.param("a", marks=pytest.mark.sme2_model("tiny_a")),
                                  pytest.param("b", marks=pytest.mark.sme2_model("tiny_b"))])
def test_tiny(name, exported_model, sme2_runner, sme2_baseline):
    sme2_baseline.check(sme2_runner.profile(exported_model))
"""


@pytest.mark.slow
def test_the_plugin_says_a_repaired_entry_under_its_test_whoever_exported_it(pytester: pytest.Pytester) -> None:
    """Exported again in the test's process or by the export pool, the repair is said once under the test's line."""
    pytester.makepyfile(models=_MODELS, test_tiny=_TESTS)
    pytester.makeini("[pytest]\nsme2_models = models.py\n")
    args = ("-p", "no:cacheprovider", "-p", "no:randomly", "--sme2-blocks=2", "--sme2-runs=2", "--sme2-warmup=0",
            "--sme2-busy-limit=100", "--sme2-cache-dir=cache", "--sme2-export-processes=2")
    # The first session only fills the cache: its tests export in its own process (the pool's two would each import
    # torch and executorch first; the pool is what the sessions below check).
    first = [a for a in args if not a.startswith("--sme2-export-processes=")]
    pytester.runpytest_subprocess(*first, "--sme2-export-processes=1", timeout=600).assert_outcomes(passed=2)
    entries = {p.parent.parent.name: p.parent for p in (pytester.path / "cache").glob("tiny_*/*/model.pte")}
    _cut(entries["tiny_a"] / PTE_FILE)
    (entries["tiny_b"] / META_FILE).unlink()

    result = pytester.runpytest_subprocess(*args, timeout=600)  # two damaged entries: the pool exports both
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "sme2 exports: 2 exported in 2 processes" in out
    for name, why in (("tiny_a", "model.pte has"), ("tiny_b", "meta.json is missing")):
        assert out.count(f"warning: export cache entry {pytester.path / 'cache' / name}") == 1, out
        assert f"was damaged ({why}" in out

    _cut(entries["tiny_a"] / "input_0.bin")
    result = pytester.runpytest_subprocess(*args, timeout=600)  # one: the test exports it itself
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert out.count("warning: export cache entry") == 1 and "was damaged (input_0.bin has" in out

    result = pytester.runpytest_subprocess(*args, timeout=600)
    assert "damaged" not in result.stdout.str()  # repaired once: the next session hits
