"""Measuring a profile (``pytest_sme2.measure.profile``): blocks, interleaved rounds, block sizing, the time budget
and the stopping rules in use.

The runner is the ``executor_runner`` stand-in replaying real recorded traces (``tests/standin``); where a rule
depends on time, the clock is scripted so the rule's arithmetic, not the machine's speed, decides.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from recorded import DATA, MOBILE, TOY_TRACE, standin_measurement
from standin import make_standin

from pytest_sme2.gate.decide import gate
from pytest_sme2.gate.stats import block_medians
from pytest_sme2.gate.verdict import GateConfig, Status
from pytest_sme2.measure.profile import Profile, measure
from pytest_sme2.measure.recipe import Measurement
from pytest_sme2.plugin.terminal import _blocks_text
from pytest_sme2.report.tables import blocks_text
from pytest_sme2.runners.base import RunRequest, RunResult
from pytest_sme2.runners.host import HostRunner


def test_an_interleaved_pair_carries_its_rounds_and_the_gate_judges_it_paired(tmp_path: Path) -> None:
    """measure_pair's two arms share one id per round (block i of each ran in round i), so the
    gate judges them with the paired signed-rank interval; separate measurements never pair."""
    from pytest_sme2.measure.pair import measure_pair
    from pytest_sme2.measure.profile import measure

    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE))
    m = Measurement(pte=DATA / "toy_cnn_fp32_xnnpack.pte", inputs=(DATA / "toy_cnn_input_fp32.bin",), runs=5,
                    warmup=1, blocks=6, out_dir=tmp_path / "out", busy_limit=1.0)
    ref, cand = measure_pair(runner, m, replace(m, label="b"))
    assert len(ref.rounds) == 6 and ref.rounds == cand.rounds and len(set(ref.rounds)) == 6
    assert ref.samples().rounds == cand.samples().rounds == ref.rounds
    again = measure(runner, m)
    assert again.rounds and not set(again.rounds) & set(ref.rounds)
    e2e = gate(ref.samples(), cand.samples(), GateConfig(margin=0.05)).e2e
    assert e2e is not None and "paired over 6 interleaved rounds" in e2e.message, e2e.message
    unpaired = gate(ref.samples(), again.samples(), GateConfig(margin=0.05)).e2e
    assert unpaired is not None and "paired" not in unpaired.message
    # The rounds survive the results file (a profile read back pairs as measured).
    assert Profile.from_dict(cand.to_dict()).rounds == cand.rounds



class _TwoSpeeds(HostRunner):
    """A host runner whose blocks alternate between two stand-ins replaying two real recordings of one model (the 1-
    and the 2-thread mobilenet traces): a measurement whose block medians really are far apart."""

    speeds: tuple[Path, ...] = ()
    calls = 0

    def run(self, request: RunRequest) -> RunResult:
        self.calls += 1
        return super().run(replace(request, build=self.speeds[self.calls % 2]))



def test_a_precise_measurement_stops_after_six_blocks_and_a_noisy_one_runs_them_all(tmp_path: Path) -> None:
    """The same recorded trace every block (block medians equal) is known precisely after 6 of 15
    blocks: 6 measured, and the profile says why; asked for no precision, all 15 run; blocks alternating between two
    real recordings far apart never reach ±5 %: all 15 run, nothing stopped early."""
    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE))
    m = standin_measurement(tmp_path, runs=3, warmup=1, blocks=15, precision=0.05)
    precise = measure(runner, m)
    assert len(precise.samples().blocks) == 6
    assert "stopped after 6 of up to 15 rounds: the median was known to ±" in precise.disturbance
    assert len(measure(runner, replace(m, precision=0.0)).samples().blocks) == 15

    noisy_runner = _TwoSpeeds(make_standin(tmp_path / "bin0", trace=TOY_TRACE))
    noisy_runner.speeds = tuple(make_standin(tmp_path / f"t{t}", trace=DATA / f"{MOBILE}_simd-on_t{t}.etdump")
                                for t in (1, 2))
    noisy = measure(noisy_runner, replace(m, pte=DATA / f"{MOBILE}.pte", inputs=()))
    medians = block_medians(noisy.samples().e2e_ms, noisy.samples().blocks)
    assert medians.max() / medians.min() > 1.1, medians  # the premise: the two recordings really are far apart
    assert len(noisy.samples().blocks) == 15 and "stopped after" not in noisy.disturbance, medians



def test_a_model_too_fast_for_its_blocks_gets_more_runs_per_block_not_another_recipe(tmp_path: Path) -> None:
    """Blocks of 10 runs of toy_cnn's 80 us caught a real +10 % in 88-96 % of same-session
    comparisons, blocks of 30 in 99.5-100 % (benchmarks/gate_paired.py). A block whose runs take under
    ``min_block_ms`` gets more runs after the first, up to 3 x the runs asked for counting the warm-up; the recipe
    (what the artifact compares) keeps the runs asked for. The recorded toy_cnn trace: ~0.08 ms per execution."""
    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE))
    m = standin_measurement(tmp_path, runs=3, warmup=1, blocks=4, min_block_ms=2.4)
    filled = measure(runner, m)
    # 3 runs take ~0.24 ms: the next blocks fill 2.4 ms (30 runs), capped at 3 x 3 executions with the warm-up.
    assert filled.samples().blocks == (3, 8, 8, 8)
    assert "short blocks (under 2.4 ms of runs): 8 runs per block after the first (its 3 took 0.2" in filled.disturbance
    assert filled.artifact.recipe == measure(runner, replace(m, min_block_ms=0.0)).artifact.recipe
    assert filled.artifact.recipe["runs"] == 3
    # Off, or a block long enough: exactly the runs asked for.
    assert measure(runner, replace(m, min_block_ms=0.0)).samples().blocks == (3, 3, 3, 3)
    assert measure(runner, replace(m, min_block_ms=0.2)).samples().blocks == (3, 3, 3, 3)
    # Between: the runs that fill it (0.5 ms / ~0.08 ms = 7 runs), under the cap.
    assert measure(runner, replace(m, min_block_ms=0.5)).samples().blocks[1:] in ((6, 6, 6), (7, 7, 7))



def test_a_model_too_slow_for_its_blocks_gets_one_warm_up_and_fewer_runs_not_another_recipe(tmp_path: Path) -> None:
    """The README's main job spent most of its time in 13-execution blocks of portable programs
    (230-340 ms each). A block whose executions, warm-up included, take over ``max_block_ms`` gets one warm-up and
    the runs that fit after the first block, never fewer than 3; the recipe keeps the runs and warm-up asked for.
    The recorded toy_cnn portable trace: ~10.7 ms per execution."""
    runner = HostRunner(make_standin(tmp_path / "bin", trace=DATA / "toy_cnn_fp32_portable_simd-on_t1.etdump"))
    m = replace(standin_measurement(tmp_path, runs=10, warmup=3, blocks=3), pte=DATA / "toy_cnn_fp32_portable.pte",
                model={"name": "toy_cnn", "dtype": "fp32", "backend": "portable"})
    trimmed = measure(runner, replace(m, max_block_ms=100.0))
    # 13 executions took ~139 ms: the next blocks fit 100 ms, 1 warm-up + 8 runs.
    assert trimmed.samples().blocks == (10, 8, 8), trimmed.disturbance
    assert [r.warmup for r in trimmed.runs] == [3, 1, 1]
    assert "long blocks (over 100 ms of executions): 1 warm-up + 8 runs per block after the first (its 13 " \
           "executions took 1" in trimmed.disturbance
    untouched = measure(runner, m)
    assert untouched.samples().blocks == (10, 10, 10) and [r.warmup for r in untouched.runs] == [3, 3, 3]
    assert trimmed.artifact.recipe == untouched.artifact.recipe and trimmed.artifact.recipe["warmup"] == 3
    # Never fewer than 3 runs, however long an execution; a limit the block fits changes nothing.
    assert measure(runner, replace(m, max_block_ms=20.0)).samples().blocks == (10, 3, 3)
    assert measure(runner, replace(m, max_block_ms=500.0)).samples().blocks == (10, 10, 10)
    # Each block's breakdown leaves out its own warm-up: 10 + 8 + 8 executions analysed.
    assert trimmed.analysis.block_sizes == (10, 8, 8) and trimmed.analysis.runs_measured == 26
    # The terminal's verdict line says so (a reader of it would otherwise take every block for 10 runs).
    assert _blocks_text(SimpleNamespace(profile=trimmed)) == "; 8 runs per block after the first (10 asked)"
    assert _blocks_text(SimpleNamespace(profile=untouched)) == ""
    # ... and the reports' "Where the numbers come from" table ("Runs measured" alone would not say how they were
    # blocked).
    assert blocks_text(trimmed) == "3: runs 10, 8 × 2 (10 asked)" and blocks_text(untouched) == "3: 10 runs each"
    assert blocks_text(replace(untouched, measurement=replace(m, blocks=5))) == "3 of up to 5: 10 runs each"



class _ScriptedClock:
    """``time`` for :mod:`measure.blocks` and :mod:`measure.profile` (the budget's clock, and its reading of the
    traces) whose ``perf_counter`` moves only when a run says how long it took:
    the budget's arithmetic, not the machine's speed, decides what a test of it sees."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)



class _SlowStart(HostRunner):
    """A host runner whose first run (the stand-in replaying the real toy_cnn trace) starts slowly, as a session's
    first block does while the runtime is imported: on a scripted clock, the first run takes ``slow_start_s``, every
    other ``block_s``."""

    calls = 0
    slow_start_s = 3.0
    block_s = 0.1

    def __init__(self, runner_path: Path, clock: _ScriptedClock) -> None:
        super().__init__(runner_path)
        self.clock = clock

    def run(self, request: RunRequest) -> RunResult:
        self.calls += 1
        result = super().run(request)
        self.clock.now += self.slow_start_s if self.calls == 1 else self.block_s
        return result



def test_a_slow_first_block_does_not_cut_the_warm_up_of_a_model_that_fits_its_time_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session's first block is slow (the runtime's import), so the time budget reads the second block: 4 blocks
    of a toy_cnn after a 3 s first block fit an 8 s budget (read from the first block they would take 12 s),
    warm-up and runs as asked; a model really over the budget still shrinks. The blocks' durations are scripted
    (3 s, then 0.1 s): under load a real stand-in block took 0.5 s, and a test of the rule must not depend on that."""
    import pytest_sme2.measure.blocks as blocks_module
    import pytest_sme2.measure.profile as profile_module

    clock = _ScriptedClock()
    monkeypatch.setattr(blocks_module, "time", clock)
    monkeypatch.setattr(profile_module, "time", clock)
    runner = _SlowStart(make_standin(tmp_path / "bin", trace=TOY_TRACE), clock)
    m = standin_measurement(tmp_path, runs=3, warmup=2, blocks=4, time_budget_s=8.0)
    profile = measure(runner, m)
    assert runner.calls == 4 and "time budget" not in profile.disturbance, profile.disturbance
    assert profile.samples().blocks == (3, 3, 3, 3) and all(r.warmup == 2 for r in profile.runs)
    # Over budget from the second block on: 8 blocks of ~1 ms each in a budget of 1 ms shrink to 6 blocks, warm-up 1.
    fast_start = _SlowStart(make_standin(tmp_path / "bin2", trace=TOY_TRACE), clock)
    fast_start.slow_start_s = fast_start.block_s = 0.001
    over = measure(fast_start, replace(m, blocks=8, time_budget_s=0.001))
    assert "time budget 0.001 s: 6 blocks of 1 warm-up + 3 runs from the third" in over.disturbance, over.disturbance
    assert len(over.samples().blocks) == 6
    # The breakdown leaves out each run's own warm-up (2, 2, then 1): 6 x 3 measured executions, none dropped.
    assert [r.warmup for r in over.runs] == [2, 2, 1, 1, 1, 1]
    assert over.analysis.runs_measured == 18 and over.analysis.block_sizes == (3,) * 6, over.analysis.block_sizes



def test_an_interleaved_pair_stops_at_the_first_look_whose_verdict_is_settled(tmp_path: Path) -> None:
    """The same recorded trace in both arms (a ratio of exactly 1 every round) is a settled pass at
    the first look: 8 rounds measured, not 15 (or 30), and the profile says why; without a stop rule all 15 run."""
    from pytest_sme2.gate.decide import measured_status
    from pytest_sme2.measure.pair import measure_pair
    from pytest_sme2.measure.sequential import Looks, settled

    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE))
    m = Measurement(pte=DATA / "toy_cnn_fp32_xnnpack.pte", inputs=(DATA / "toy_cnn_input_fp32.bin",), runs=3,
                    warmup=1, blocks=15, out_dir=tmp_path / "out", busy_limit=1.0)
    plan = Looks.for_blocks(m.blocks)
    config = plan.gate_config(GateConfig(margin=0.05))
    looked: list[int] = []

    def stop(ref: Profile, cand: Profile) -> bool:
        looked.append(len(ref.rounds or ref.samples().blocks))
        return settled(measured_status(gate(ref.samples(), cand.samples(), config)))

    ref, cand = measure_pair(runner, m, replace(m, label="b"), looks=plan, stop=stop)
    assert looked == [8] and len(ref.rounds) == len(cand.rounds) == 8
    assert "stopped after 8 of up to 30 rounds: the verdict was settled" in ref.disturbance
    verdict = gate(ref.samples(), cand.samples(), config)
    assert verdict.status is Status.PASS and verdict.e2e is not None and "paired over 8" in verdict.e2e.message



def test_a_sequential_pair_analyzes_each_run_once_across_its_looks(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A look profiles the rounds so far; the runs of earlier looks are not analyzed again (the looks at 8, 15 and
    22 rounds re-read 45 rounds' traces per arm before: ~15 ms each for MobileNetV3, against ~40 ms of executions in
    its XNNPACK block), and the result is the one analyzed from scratch."""
    import pytest_sme2.measure.profile as profile_module
    from pytest_sme2.measure.pair import measure_pair
    from pytest_sme2.measure.profile import profile_of
    from pytest_sme2.measure.sequential import Looks

    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE))
    m = Measurement(pte=DATA / "toy_cnn_fp32_xnnpack.pte", inputs=(DATA / "toy_cnn_input_fp32.bin",), runs=3,
                    warmup=1, blocks=8, out_dir=tmp_path / "out", busy_limit=1.0)
    plan = Looks.for_blocks(m.blocks)
    analyzed: list[int] = []
    real = profile_module.analyze_run

    def counting(result: RunResult, **kwargs: object) -> object:
        analyzed.append(id(result))
        return real(result, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(profile_module, "analyze_run", counting)
    looked: list[int] = []

    def never(ref: Profile, cand: Profile) -> bool:
        looked.append(len(ref.runs))
        return False

    ref, _ = measure_pair(runner, m, replace(m, label="b"), looks=plan, stop=never)
    assert len(looked) == len(plan.rounds) - 1 >= 2, "looks before the last, each profiling the rounds so far"
    rounds = len(ref.runs)
    assert rounds == plan.last and len(analyzed) == len(set(analyzed)) == 2 * rounds
    fresh = profile_of(runner, m, [[r] for r in ref.runs], kernel_log=None, rules=None, disturbance="", invalid="")
    assert fresh.analysis == ref.analysis and len(analyzed) == 3 * rounds



def test_a_time_budget_is_the_time_spent_not_only_the_time_predicted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The time budget is the time spent, not only the time predicted. The budget's prediction assumes a
    block costs its executions, but a tiny model's block is mostly fixed cost (loading, tracing), so fewer runs per
    block do not make it cheaper. Scripted: every block takes 1 s whatever its runs; a budget of 8 s predicts 10
    blocks of 1 + 3 runs (10 s). The measurement ends once 8 s are spent, with the blocks the gate needs, and says
    so."""
    import pytest_sme2.measure.blocks as blocks_module
    import pytest_sme2.measure.profile as profile_module

    clock = _ScriptedClock()
    monkeypatch.setattr(blocks_module, "time", clock)
    monkeypatch.setattr(profile_module, "time", clock)
    runner = _SlowStart(make_standin(tmp_path / "bin", trace=TOY_TRACE), clock)
    runner.slow_start_s = runner.block_s = 1.0
    profile = measure(runner, standin_measurement(tmp_path, runs=4, warmup=0, blocks=1000, time_budget_s=8.0))
    assert runner.calls == 8, runner.calls
    assert "time budget 8 s spent after 8 of 10 blocks" in profile.disturbance, profile.disturbance
    assert len(profile.samples().blocks) == 8
