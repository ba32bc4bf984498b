"""The same-session reference is seeded whenever the artifact is the baseline's.

A CI whose cache was evicted, or whose baselines were recorded on another machine, can still compare a changed
model with its baseline's program in the same session: an unchanged
run stores its artifact (by content), artifacts are stored before the baseline (a kill between the two never
leaves a baseline without its reference), and the store cleans what a killed writer left behind.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from gated_project import EXAMPLE_MODELS, FAST, GATED_TEST

from pytest_sme2.store.artifacts import ArtifactStore
from pytest_sme2.store.files import STALE_TMP_SECONDS, file_sha256

pytestmark = pytest.mark.slow


def _stored(root: Path) -> set[str]:
    return {p.name for p in root.glob("*/*") if p.is_file() and not p.name.startswith(".tmp")}


def test_an_unchanged_run_seeds_the_artifact_store(pytester: pytest.Pytester,
                                                    tmp_path_factory: pytest.TempPathFactory) -> None:
    cache = tmp_path_factory.getbasetemp() / "seeding_cache"
    pytester.makeini(f"[pytest]\nsme2_models = {EXAMPLE_MODELS}\n")
    pytester.makepyfile(test_model=GATED_TEST)
    store = pytester.path / ".sme2_artifacts"

    def run(*args: str) -> pytest.RunResult:
        return pytester.runpytest_subprocess(f"--sme2-cache-dir={cache}", *FAST, *args, timeout=600)

    run().assert_outcomes(passed=1)  # records the baseline and its artifact
    recorded = _stored(store)
    assert recorded, "recording keeps the baseline's program and inputs"
    for path in store.glob("*/*"):  # a CI cache that was evicted, or baselines recorded on another machine
        path.unlink()
    result = run("--sme2-json=r.json")
    result.assert_outcomes(passed=1)
    verdict = json.loads((pytester.path / "r.json").read_text())["tests"][0]["verdict"]
    assert verdict["comparison"] == "unchanged"
    assert _stored(store) == recorded, "an unchanged run must store its (the baseline's) artifact again"


def test_the_store_removes_what_a_killed_writer_left(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    program = tmp_path / "model.pte"
    program.write_bytes(b"a program")
    directory = store.path_of(file_sha256(program)).parent
    directory.mkdir(parents=True)
    debris = directory / ".tmp-sme2-killed"
    debris.write_bytes(b"half a file")
    old = time.time() - STALE_TMP_SECONDS - 10
    os.utime(debris, (old, old))
    fresh = directory / ".tmp-sme2-concurrent"
    fresh.write_bytes(b"being written")
    store.put(program)
    assert store.get(file_sha256(program)) is not None
    assert not debris.exists(), "a stale temporary file of a killed writer is removed"
    assert fresh.exists(), "a recent one may belong to a concurrent writer and is kept"


def test_a_runtime_change_is_its_own_verdict_and_says_what_it_can_catch(tmp_path: Path) -> None:
    """A new runtime on the local device (an executorch patch release, a rebuilt wheel).

    The baseline's runtime cannot run in this process, so its artifact cannot be re-measured: the stored samples
    decide, at the margin plus the drift allowance. The verdict is ``runtime`` (not ``stored``, as for an evicted
    artifact cache), and it says that only a slowdown beyond margin +
    allowance is caught and how to gate later changes in the same session again (re-record on this runtime).
    """
    from pytest_sme2.gate.verdict import Comparison, GateConfig
    from pytest_sme2.judge import RECORDED, Policy, judge
    from pytest_sme2.measure.profile import measure
    from pytest_sme2.measure.recipe import Measurement, ProgramFile
    from pytest_sme2.runners.local import LocalRunner
    from pytest_sme2.store.baseline import BaselineStore

    data = Path(__file__).parents[1] / "data"
    runner = LocalRunner()
    m = Measurement.of(ProgramFile(data / "toy_cnn_fp32_xnnpack.pte", (data / "toy_cnn_input_fp32.bin",), "fp32",
                                   "xnnpack"), runs=3, warmup=1, blocks=2, out_dir=tmp_path / "runs", busy_limit=1.0)
    common = {"test_id": "t::toy", "runner": runner, "baselines": BaselineStore(tmp_path / "baselines"),
              "artifacts": ArtifactStore(tmp_path / "artifacts"), "config": GateConfig(margin=0.1, drift_allowance=0.5),
              "policy": Policy(confirm=False)}
    assert judge(measure(runner, m), **common).outcome == RECORDED  # type: ignore[arg-type]
    # The baseline as a previous build of the wheel recorded it: another runtime library, all else the same.
    (path,) = (tmp_path / "baselines").glob("*.json")
    stored = json.loads(path.read_text())
    stored["artifact"]["build"]["runtime_sha256"] = "0" * 64
    path.write_text(json.dumps(stored))
    verdict = judge(measure(runner, m), **common).verdict  # type: ignore[arg-type]
    assert verdict.comparison is Comparison.RUNTIME
    summary = verdict.summary()
    assert "runtime changed (runtime_sha256 000000000000 -> " in summary
    assert "the baseline ran on another runtime" in summary
    assert "a runtime change is gated only beyond the margin plus the drift allowance" in summary
    e2e = verdict.e2e
    assert e2e is not None and e2e.margin == 0.6  # margin + drift allowance, as a stored comparison
