"""The block engine's sizing and budget arithmetic (:mod:`pytest_sme2.measure.blocks`), on recorded blocks.

The tests of the whole measurement (tests/gate/test_decide.py) run a stand-in and read its wall clock, so they can
only bound what sizing chose ("6 or 7 runs"). Here :func:`_size_blocks` and :func:`_fit_budget` get a first block
made of the executions of a real recorded trace (tests/data, the first ``warmup + runs`` of them, in order), and
the runs, warm-up and blocks they choose are exact.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.measure.blocks import MIN_BLOCKS, MIN_RUNS, Block, _fit_budget, _size_blocks
from pytest_sme2.measure.recipe import Measurement
from pytest_sme2.runners.base import RunResult

pytestmark = pytest.mark.fast

DATA = Path(__file__).parents[1] / "data"
#: toy_cnn on XNNPACK: ~0.079 ms per execution after a 0.28 ms first one
TOY = DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"
#: toy_cnn on the portable kernels: ~10.7 ms per execution
PORTABLE = DATA / "toy_cnn_fp32_portable_simd-on_t1.etdump"
MOBILE = "mobilenet_v3_small_like_fp32_xnnpack"


def recorded_block(trace: Path, *, warmup: int, runs: int) -> Block:
    """One block of ``warmup + runs`` executions: the first of the recorded trace's, as recorded."""
    e2e = tuple(float(x) for x in read_etdump(trace).e2e_ms_per_run()[: warmup + runs])
    assert len(e2e) == warmup + runs, "the recording has fewer executions than the block asks for"
    return [RunResult(runner="host", e2e_ms=e2e, warmup=warmup, threads=1, build=trace.stem)]


def plan(**kwargs: object) -> Measurement:
    return Measurement(pte=DATA / "toy_cnn_fp32_xnnpack.pte", **kwargs)  # type: ignore[arg-type]


def test_a_block_too_short_gets_the_runs_that_fill_it_up_to_three_times_the_executions_asked_for() -> None:
    arm = plan(runs=3, warmup=1, min_block_ms=2.4)
    first = recorded_block(TOY, warmup=1, runs=3)
    median = statistics.median(first[0].measured_ms)
    assert 0.078 < median < 0.080  # the recording: 0.0811, 0.0791, 0.0788 ms after a 0.2783 ms first execution
    # 2.4 ms would take 31 runs; capped at 3 x 4 executions asked for, less the warm-up: 8.
    (sized,), note = _size_blocks([arm], [first])
    assert (sized.runs, sized.warmup) == (8, 1)
    assert note == f"short blocks (under 2.4 ms of runs): 8 runs per block after the first (its 3 took " \
                   f"{median * 3:.2f} ms)"
    # Under the cap: the runs that fill 0.5 ms (0.5 / 0.0791 -> 7), never fewer than asked.
    assert _size_blocks([plan(runs=3, warmup=1, min_block_ms=0.5)], [first])[0][0].runs == 7
    # A block that already fills it, or the rule off: the runs asked for, and nothing to say.
    for enough in (0.2, 0.0):
        (same,), said = _size_blocks([plan(runs=3, warmup=1, min_block_ms=enough)], [first])
        assert (same.runs, same.warmup, said) == (3, 1, "")


def test_a_block_too_long_gets_one_warm_up_and_the_runs_that_fit_never_fewer_than_three() -> None:
    arm = plan(runs=10, warmup=3, max_block_ms=100.0)
    first = recorded_block(PORTABLE, warmup=3, runs=10)
    median = statistics.median(first[0].measured_ms)
    assert 10.6 < median < 10.8
    # 13 executions of ~10.7 ms = ~139 ms > 100: 100 / 10.7 -> 9 executions, 1 of them warm-up.
    (sized,), note = _size_blocks([arm], [first])
    assert (sized.runs, sized.warmup) == (8, 1)
    assert note == (f"long blocks (over 100 ms of executions): 1 warm-up + 8 runs per block after the first (its 13 "
                    f"executions took {median * 13:.0f} ms)")
    # 20 ms fits one execution: the floor holds.
    assert _size_blocks([plan(runs=10, warmup=3, max_block_ms=20.0)], [first])[0][0].runs == MIN_RUNS == 3
    # A limit the block fits changes nothing.
    (same,), said = _size_blocks([plan(runs=10, warmup=3, max_block_ms=500.0)], [first])
    assert (same.runs, same.warmup, said) == (10, 3, "")


def test_each_arm_of_a_pair_is_sized_from_its_own_first_block_and_named() -> None:
    off = plan(runs=3, warmup=1, min_block_ms=12.0, variant="sme2-off")
    on = plan(runs=3, warmup=1, min_block_ms=12.0, variant="sme2-on")
    blocks = [recorded_block(DATA / f"{MOBILE}_simd-off_t1.etdump", warmup=1, runs=3),
              recorded_block(DATA / f"{MOBILE}_simd-on_t1.etdump", warmup=1, runs=3)]
    medians = [statistics.median(b[0].measured_ms) for b in blocks]
    assert medians[0] > 4 > medians[1]  # the recordings: SIMD off ~4.8 ms, on ~1.9 ms per execution
    (sized_off, sized_on), note = _size_blocks([off, on], blocks)
    # Off: 3 x ~4.8 ms already fills 12 ms. On: 3 x ~1.9 ms does not, and 12 / 1.9 -> 7 runs, under the cap of 8.
    assert (sized_off.runs, sized_on.runs) == (3, 7)
    assert note.startswith("short blocks (under 12 ms of runs): sme2-on 7 runs per block after the first"), note


def test_a_time_budget_shrinks_the_runs_then_the_blocks_never_below_the_gates_minimum() -> None:
    """The seconds of a round are those of a recorded block: 13 portable executions, ~143 ms."""
    first = recorded_block(PORTABLE, warmup=3, runs=10)
    round_s = sum(first[0].e2e_ms) / 1000
    assert 0.13 < round_s < 0.15
    per_execution = round_s / 13
    # 15 blocks fit 3 s: nothing changes.
    arms, blocks, note = _fit_budget([plan(runs=10, warmup=3, time_budget_s=3.0)], round_s, 15)
    assert (arms[0].runs, arms[0].warmup, blocks, note) == (10, 3, 15, "")
    # 1 s: 15 blocks get 1 warm-up and the runs a fifteenth of it holds (66.7 ms / ~11 ms -> 6, less the warm-up).
    arms, blocks, note = _fit_budget([plan(runs=10, warmup=3, time_budget_s=1.0)], round_s, 15)
    runs = int(1.0 / 15 / per_execution) - 1
    assert runs == 5 and (arms[0].runs, arms[0].warmup, blocks) == (5, 1, 15)
    assert note == f"time budget 1 s: 15 blocks of 1 warm-up + 5 runs from the third (a block of 13 executions took " \
                   f"{round_s:.1f} s)"
    # 0.2 s: even 1 + 3 executions per block do not fit 15 blocks (~0.66 s): the blocks go, never below the gate's
    # 6 (0.2 s holds 4).
    arms, blocks, note = _fit_budget([plan(runs=10, warmup=3, time_budget_s=0.2)], round_s, 15)
    assert (arms[0].runs, arms[0].warmup) == (MIN_RUNS, 1) and blocks == MIN_BLOCKS == 6
    assert note.startswith("time budget 0.2 s: 6 blocks of 1 warm-up + 3 runs from the third"), note
