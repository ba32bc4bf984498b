"""Judging a profile (``pytest_sme2.judge``): what is recorded, what is refused, and what counts as a changed artifact.

Measurements are real runs of the ``executor_runner`` stand-in replaying recorded traces (``tests/standin``),
judged against baselines and artifacts in temporary stores.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gate.test_calibration import TEST_ID, _plugin_sessions, _store
from recorded import DATA, MOBILE, TOY_PTE, TOY_TRACE, standin_measurement, toy_profile, toy_samples
from standin import make_standin

from pytest_sme2.gate.decide import gate
from pytest_sme2.gate.rule import Comparison
from pytest_sme2.gate.verdict import GateConfig, Status
from pytest_sme2.history.calibration import HistoryCalibration
from pytest_sme2.judge import NOT_WRITTEN, RECORDED, Judgement, Policy, judge
from pytest_sme2.measure.pair import Pair
from pytest_sme2.measure.profile import Profile, measure
from pytest_sme2.measure.recipe import Measurement
from pytest_sme2.results import TestResult
from pytest_sme2.runners.base import SME2_OFF, SME2_ON, RunRequest, RunResult
from pytest_sme2.runners.host import HostRunner
from pytest_sme2.store.artifacts import ArtifactStore
from pytest_sme2.store.baseline import BaselineStore
from pytest_sme2.store.files import file_sha256


def test_an_invalid_measurement_never_becomes_a_baseline_and_strict_fails_it(tmp_path: Path) -> None:
    """--sme2-update-baseline refuses an invalid profile; strict fails invalid like inconclusive."""
    hot = toy_profile("thermal throttling: status went from none to severe while measuring")
    baselines = BaselineStore(tmp_path / "baselines")
    common = {"test_id": "t.py::test_a", "runner": None, "baselines": baselines,
              "artifacts": ArtifactStore(tmp_path / "artifacts"), "config": GateConfig(strict=True)}
    judgement = judge(hot, policy=Policy(update_baseline=True), **common)  # type: ignore[arg-type]
    assert judgement.outcome == NOT_WRITTEN
    assert "baseline not written: this measurement is invalid (thermal throttling" in judgement.message
    # Without a baseline, an invalid first run is not recorded either, and strict fails it.
    judgement = judge(hot, policy=Policy(), **common)  # type: ignore[arg-type]
    assert judgement.outcome == NOT_WRITTEN and judgement.verdict.status is Status.INVALID
    assert judgement.verdict.failed
    assert not (tmp_path / "baselines").exists() or not list((tmp_path / "baselines").iterdir())
    blocks = (4, 4, 3, 3)
    invalid = replace(toy_samples(15, 29, blocks), invalid_reason="busy machine")
    for strict in (False, True):
        verdict = gate(toy_samples(1, 15, blocks), invalid, GateConfig(strict=strict))
        assert verdict.status is Status.INVALID and verdict.failed is strict



def _recorded_profile(inputs_sha: str = "in-a", pte_sha: str = "pte-a") -> Profile:
    from pytest_sme2.store.artifacts import Artifact

    return replace(toy_profile(), artifact=Artifact(pte_sha, (inputs_sha,), {"runtime_module": "r"}))



def test_update_baseline_keeps_the_previous_baseline_when_the_measurement_failed(tmp_path: Path) -> None:
    """``--sme2-update-baseline`` does not replace a baseline with a failed or invalid measurement.

    A measurement that fails its own checks (here the p50 budget) or is invalid leaves the previous baseline, and says
    that it is kept.
    """
    baselines = BaselineStore(tmp_path / "baselines")
    common = {"test_id": "t.py::test_a", "runner": None, "baselines": baselines,
              "artifacts": ArtifactStore(tmp_path / "artifacts"), "policy": Policy(update_baseline=True)}
    good = judge(_recorded_profile(), config=GateConfig(), **common)  # type: ignore[arg-type]
    assert good.written
    before = good.baseline_path.read_bytes()
    # the recorded toy_cnn runs take ~0.079 ms: a 0.01 ms p50 budget fails on every block
    failed = judge(_recorded_profile(pte_sha="pte-b"), config=GateConfig(p50_ms=0.01), **common)  # type: ignore[arg-type]
    assert failed.outcome == NOT_WRITTEN and failed.verdict.status is Status.REGRESSION
    assert "baseline not replaced: this measurement failed its own checks (p50_budget: p50 0.0" in failed.message
    assert f"the previous baseline {good.baseline_path} is kept" in failed.message
    assert good.baseline_path.read_bytes() == before
    hot = replace(_recorded_profile(pte_sha="pte-c"), invalid_reason="thermal throttling")
    invalid = judge(hot, config=GateConfig(), **common)  # type: ignore[arg-type]
    assert invalid.outcome == NOT_WRITTEN and f"the previous baseline {good.baseline_path} is kept" in invalid.message
    assert good.baseline_path.read_bytes() == before



def test_inputs_that_differ_from_the_baselines_are_warned_about(tmp_path: Path) -> None:
    """Other input files than the baseline's (unseeded ``torch.randn`` in a marker) are a warning.

    Not an error: the test is judged as before (a changed artifact); the warning says why it is one.
    """
    baselines = BaselineStore(tmp_path / "baselines")
    common = {"test_id": "t.py::test_a", "runner": None, "baselines": baselines,
              "artifacts": ArtifactStore(tmp_path / "artifacts"), "config": GateConfig(), "policy": Policy()}
    first = judge(_recorded_profile("in-a"), **common)  # type: ignore[arg-type]
    assert first.written and first.warnings == ()
    same = judge(_recorded_profile("in-a"), **common)  # type: ignore[arg-type]
    assert same.warnings == ()
    other = judge(_recorded_profile("in-b"), **common)  # type: ignore[arg-type]
    (warning,) = other.warnings
    assert warning.startswith("the test's inputs differ from its baseline's (sha256 in-a -> in-b); the program is "
                              "the same: if they come from torch.randn without a seed")
    assert "\n" not in warning and other.verdict.status is not Status.REGRESSION
    # the warning travels with the result (JSON, xdist) and is shown under the test's terminal line
    result = TestResult.from_dict({**TestResult("t.py::test_a").to_dict(), "warnings": list(other.warnings)})
    assert result.warnings == other.warnings and result.to_dict()["warnings"] == [warning]



def _judge_twice(tmp_path: Path, runner: HostRunner, first: Measurement, second: Measurement,
                 between: Callable[[], None] = lambda: None) -> Judgement:
    """Record a baseline from ``first``, then judge ``second`` against it (no confirmation: one measurement)."""
    common = {"test_id": "t.py::test_a", "runner": runner, "baselines": BaselineStore(tmp_path / "baselines"),
              "artifacts": ArtifactStore(tmp_path / "artifacts"), "config": GateConfig(margin=0.5),
              "policy": Policy(confirm=False)}
    recorded = judge(measure(runner, first), **common)  # type: ignore[arg-type]
    assert recorded.outcome == RECORDED
    between()
    return judge(measure(runner, second), **common)  # type: ignore[arg-type]



def test_runs_warmup_and_the_measuring_code_are_part_of_the_artifact(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Other ``--sme2-runs`` / ``--sme2-warmup`` or another measuring code make a changed artifact.

    A baseline of 4 runs after 1 warm-up and a measurement of 6 runs after 0 are a changed artifact, not
    ``unchanged``, and so are two measurements made by other measuring code (the measurement recipe's version).
    """
    from pytest_sme2.measure import recipe as recipe_module

    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE))
    m = standin_measurement(tmp_path)
    other = _judge_twice(tmp_path, runner, m, replace(m, runs=6, warmup=0))
    assert other.verdict.comparison is Comparison.SESSION
    assert "measurement changed (runs 4 -> 6; warmup 1 -> 0)" in other.verdict.summary()
    same = _judge_twice(tmp_path / "same", runner, m, m)
    assert same.verdict.comparison is Comparison.UNCHANGED
    monkeypatch.setattr(recipe_module, "MEASUREMENT_RECIPE", recipe_module.MEASUREMENT_RECIPE + 1)
    newer = judge(measure(runner, m), test_id="t.py::test_a", runner=runner,
                  baselines=BaselineStore(tmp_path / "same" / "baselines"),
                  artifacts=ArtifactStore(tmp_path / "same" / "artifacts"), config=GateConfig(margin=0.5),
                  policy=Policy(confirm=False))
    assert newer.verdict.comparison is Comparison.SESSION
    recipe = recipe_module.MEASUREMENT_RECIPE
    assert f"measurement changed (measurement_recipe {recipe - 1} -> {recipe})" in newer.verdict.summary()



def test_a_baseline_without_a_recipe_keeps_working_and_says_what_is_not_compared(tmp_path: Path) -> None:
    """A baseline written before the recipe was recorded is still ``unchanged`` for the same
    program, inputs and build (its runs and warm-up are unknown, not changed), and the verdict says so."""
    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE))
    m = standin_measurement(tmp_path)
    store = BaselineStore(tmp_path / "baselines")

    def strip_recipe() -> None:
        (path,) = store.root.glob("*.json")
        data = json.loads(path.read_text())
        data["artifact"].pop("recipe")
        path.write_text(json.dumps(data))

    old = _judge_twice(tmp_path, runner, m, replace(m, runs=6), between=strip_recipe)
    assert old.verdict.comparison is Comparison.UNCHANGED
    assert "the baseline records no measurement recipe (written by an earlier pytest-sme2)" in old.verdict.summary()



def _library(directory: Path, extra: bytes = b"") -> Path:
    """A real shared library under a non-system path (a copy of the system's libz, loadable; ``extra`` appended
    after its ELF contents changes its bytes, not how it loads), named as executorch's libraries are."""
    directory.mkdir(parents=True, exist_ok=True)
    lib = directory / "libexecutorch_standin.so"
    lib.write_bytes(_libz().read_bytes() + extra)
    return lib



def _libz() -> Path:
    found = sorted([*Path("/lib").glob("*/libz.so.1"), *Path("/usr/lib").glob("*/libz.so.1"),
                    *Path("/lib64").glob("libz.so.1")])
    if not found:
        pytest.skip("no libz.so.1 on this machine to load as a stand-in runtime library")
    return found[0]



def test_a_runners_non_system_shared_libraries_are_part_of_its_build(tmp_path: Path) -> None:
    """The same runner binary over a rebuilt shared library is a changed artifact, named.

    The runner process prints its ``/proc/self/maps`` (pytest-sme2's own runner does; the stand-in prints the real
    maps of the library it really loaded), so a rebuilt ``libexecutorch*.so`` beside the same binary is not
    ``unchanged``. The baseline's libraries cannot run here (the store keeps
    binaries, not what they load), so the verdict is the ``runtime`` comparison, never a same-session one that would
    re-measure the new libraries twice.
    """
    lib = _library(tmp_path / "lib")
    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE, libraries=(lib,)))
    m = standin_measurement(tmp_path)
    first = measure(runner, m)
    assert first.artifact is not None
    assert first.artifact.build["libraries"] == {lib.name: file_sha256(lib)}
    assert not any(name.startswith(("libc.", "libpython")) for name in first.artifact.build["libraries"])
    rebuilt = _judge_twice(tmp_path, runner, m, m, between=lambda: _library(tmp_path / "lib", b"\0rebuilt"))
    assert rebuilt.verdict.comparison is Comparison.RUNTIME
    summary = rebuilt.verdict.summary()
    assert f"runner build changed (libraries.{lib.name} " in summary
    assert "the baseline's runner loaded other shared libraries (libexecutorch_standin.so)" in summary



class _OnArmChangesLater(HostRunner):
    """A host runner whose SME2-on arm, from ``later`` on, runs another real recording: the machine's state minutes
    after the pair was measured (the 2-thread recording of the same model: another speed, really measured)."""

    later: Path | None = None

    def run(self, request: RunRequest) -> RunResult:
        if self.later is not None and request.variant == SME2_ON:
            request = replace(request, build=self.later)
        return super().run(request)



def test_a_changed_models_speedup_is_judged_on_its_own_pair_and_reported_as_gated(tmp_path: Path) -> None:
    """A changed model of an on/off pair, compared in the same session with its baseline's artifact.

    The same-session comparison measures the SME2-on arm again, beside the baseline's artifact, minutes after the
    pair (another thermal state; here a later recording). The gated speedup is the pair's own off/on, never the pair's
    off arm over that later on arm; the report renders the verdict's check, and the latency is still judged against
    the re-measured reference.
    """
    from pytest_sme2.measure.pair import measure_on_off
    from pytest_sme2.report.pair import report_of

    bins = tmp_path / "bin"
    runner = _OnArmChangesLater(variants={
        SME2_OFF: make_standin(bins / "off", trace=DATA / f"{MOBILE}_simd-off_t1.etdump"),
        SME2_ON: make_standin(bins / "on", trace=DATA / f"{MOBILE}_simd-on_t1.etdump")})
    later = make_standin(bins / "later", trace=DATA / f"{MOBILE}_simd-on_t2.etdump")

    def pair_of(pte: Path) -> Pair:
        m = standin_measurement(tmp_path, runs=4, warmup=1, blocks=2)
        m = replace(m, pte=pte, inputs=())
        return measure_on_off(runner, replace(m, variant=SME2_OFF), replace(m, variant=SME2_ON))

    common = {"test_id": "t.py::test_on_off", "runner": runner, "baselines": BaselineStore(tmp_path / "baselines"),
              "artifacts": ArtifactStore(tmp_path / "artifacts"), "config": GateConfig(margin=5.0),
              "policy": Policy(confirm=False)}
    first = pair_of(TOY_PTE)
    assert judge(first.on, off=first.off, **common).outcome == RECORDED  # type: ignore[arg-type]
    pair = pair_of(DATA / "toy_cnn_fp16_xnnpack.pte")  # the model changed
    runner.later = later  # ... and the machine, after the pair was measured
    judgement = judge(pair.on, off=pair.off, **common)  # type: ignore[arg-type]
    verdict = judgement.verdict
    assert verdict.comparison is Comparison.SESSION and judgement.candidate is not None
    off_ms, on_ms = (p.samples().median_ms for p in (pair.off, pair.on))
    later_ms = judgement.candidate.samples().median_ms
    assert later_ms != pytest.approx(on_ms, rel=0.05), "the recordings differ: a mixed speedup would show"
    speedup = verdict.speedup
    assert speedup is not None
    assert (speedup.baseline, speedup.candidate) == (pytest.approx(off_ms), pytest.approx(on_ms))
    assert f"speedup {off_ms / on_ms:.2f}x" in speedup.message
    e2e = verdict.e2e
    assert e2e is not None and e2e.candidate == pytest.approx(later_ms)  # latency: beside the reference
    shown = report_of(pair, verdict, emulated=False)
    assert shown.speedup_check == speedup and shown.speedup.estimate == pytest.approx(off_ms / on_ms)



def test_the_sme2_off_runner_of_a_pair_is_part_of_the_measured_arms_artifact(tmp_path: Path) -> None:
    """A new SME2-off runner changes what the pair's speedup is over: a changed artifact, named.

    The SME2-on arm's artifact holds the SME2-off arm's build too, so a rebuilt SME2-off runner (which moves the gated
    speedup) does not leave the test ``unchanged``.
    """
    from pytest_sme2.measure.pair import measure_on_off

    bins = tmp_path / "bin"
    on = make_standin(bins / "on", trace=DATA / f"{MOBILE}_simd-on_t1.etdump")
    runner = HostRunner(variants={SME2_OFF: make_standin(bins / "off", trace=DATA / f"{MOBILE}_simd-off_t1.etdump"),
                                  SME2_ON: on})
    m = replace(standin_measurement(tmp_path), pte=TOY_PTE, inputs=())
    common = {"test_id": "t.py::test_on_off", "runner": runner, "baselines": BaselineStore(tmp_path / "baselines"),
              "artifacts": ArtifactStore(tmp_path / "artifacts"), "config": GateConfig(margin=5.0),
              "policy": Policy(confirm=False)}

    def judged() -> Judgement:
        pair = measure_on_off(runner, replace(m, variant=SME2_OFF), replace(m, variant=SME2_ON))
        return judge(pair.on, off=pair.off, **common)  # type: ignore[arg-type]

    assert judged().outcome == RECORDED
    assert judged().verdict.comparison is Comparison.UNCHANGED
    make_standin(bins / "off", trace=DATA / f"{MOBILE}_simd-on_t2.etdump")  # the SME2-off runner rebuilt
    verdict = judged().verdict
    assert verdict.comparison is Comparison.SESSION
    assert "measurement changed (off_arm.build.runner_sha256 " in verdict.summary()


@pytest.mark.slow
def test_judge_calibrates_a_runtime_change_from_the_history(tmp_path: Path) -> None:
    """The judge asks the history for the test's calibration only in a cross-session comparison, and says which
    allowance judged it. A real toy_cnn measurement on the local runtime; the baseline as another runtime wrote it."""
    from pytest_sme2.judge import RECORDED, Policy, judge
    from pytest_sme2.measure.profile import measure
    from pytest_sme2.measure.recipe import Measurement, ProgramFile
    from pytest_sme2.runners.local import LocalRunner
    from pytest_sme2.store.artifacts import ArtifactStore
    from pytest_sme2.store.baseline import BaselineStore

    data = Path(__file__).parent / "data"
    runner = LocalRunner()
    m = Measurement.of(ProgramFile(data / "toy_cnn_fp32_xnnpack.pte", (data / "toy_cnn_input_fp32.bin",), "fp32",
                                   "xnnpack"), runs=3, warmup=1, blocks=4, out_dir=tmp_path / "runs", busy_limit=1.0)
    common: dict[str, Any] = {"test_id": TEST_ID, "runner": runner, "baselines": BaselineStore(tmp_path / "b"),
                              "artifacts": ArtifactStore(tmp_path / "a"), "config": GateConfig(margin=0.1),
                              "policy": Policy(confirm=False)}
    assert judge(measure(runner, m), **common).outcome == RECORDED
    (path,) = (tmp_path / "b").glob("*.json")
    stored = json.loads(path.read_text())
    stored["artifact"]["build"]["runtime_sha256"] = "0" * 64
    path.write_text(json.dumps(stored))
    undecided = judge(measure(runner, m), **common).verdict
    assert undecided.comparison is Comparison.RUNTIME and undecided.status is Status.INCONCLUSIVE
    assert "no history of this test on this device calibrates the drift between sessions" in undecided.summary()
    # The history of this test on this device: the real sessions' medians scaled to this machine's toy_cnn.
    identity = BaselineStore(tmp_path / "b").read(path).identity_id
    level = float(np.median(stored["samples_ms"]))
    rows = _plugin_sessions()
    scale = level / rows[0]["median_ms"]
    _store(tmp_path / "h", [{**r, "identity_id": identity, "median_ms": r["median_ms"] * scale} for r in rows])
    verdict = judge(measure(runner, m), **common, calibrate=HistoryCalibration(tmp_path / "h")).verdict
    assert verdict.comparison is Comparison.RUNTIME
    assert "drift allowance calibrated from 16 sessions of this test on this device" in verdict.summary()
    e2e = verdict.e2e
    assert e2e is not None and e2e.margin is not None and 0.1 < e2e.margin < 0.15
