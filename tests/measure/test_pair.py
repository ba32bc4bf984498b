"""Pairs (``pytest_sme2.measure.pair``): a speedup confirmed on a fresh pair, and a pair that stops when precise."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from recorded import DATA, MOBILE, standin_measurement, toy_profile, toy_samples
from standin import make_standin

from pytest_sme2.gate.verdict import GateConfig
from pytest_sme2.measure.pair import Pair
from pytest_sme2.runners.base import SME2_OFF, SME2_ON
from pytest_sme2.runners.host import HostRunner


def test_a_speedup_is_confirmed_on_the_pair_measured_again() -> None:
    """A failing speedup is re-measured as a pair, both arms, never one arm against an old one."""
    from pytest_sme2.measure.pair import decide_speedup

    blocks = (4, 4, 3, 3)
    on, off = toy_samples(1, 15, blocks), toy_samples(15, 29, blocks)  # A/A: ~1.0x
    pair = Pair(replace(toy_profile(), latency_ms=off.e2e_ms, latency_blocks=blocks),
                replace(toy_profile(), latency_ms=on.e2e_ms, latency_blocks=blocks))
    slow_off = toy_samples(15, 29, blocks, data_movement_plus_ms=1.0).e2e_ms
    again = Pair(replace(pair.off, latency_ms=slow_off), pair.on)  # the fresh pair: off 1 ms slower per run
    calls: list[int] = []

    def measure_again() -> Pair:
        calls.append(1)
        return again

    verdict = decide_speedup(pair, GateConfig(min_speedup=2.0), measure_again)
    assert calls == [1] and verdict.attempts == 2
    assert verdict.speedup is not None
    # Decided on both pairs pooled: each arm with its own arm of the fresh pair, never one pair's off arm
    # over the other's on arm alone.
    fresh_off, fresh_on = again.samples()
    first_off, first_on = pair.samples()
    assert verdict.speedup.baseline == pytest.approx(first_off.pooled(fresh_off).median_ms)
    assert verdict.speedup.candidate == pytest.approx(first_on.pooled(fresh_on).median_ms)
    assert verdict.speedup.baseline != pytest.approx(first_off.median_ms)  # the fresh off arm counted



def test_a_pair_outside_a_same_session_comparison_stops_when_both_arms_are_precise(tmp_path: Path) -> None:
    """An on/off (or backend) pair whose arms both ask for a precision stops at the first look
    where both medians are known to it: 6 rounds of each arm, still interleaved and paired (6 rounds reach the 95 %
    signed-rank interval of the speedup)."""
    from pytest_sme2.measure.pair import measure_on_off

    bins = tmp_path / "bin"
    runner = HostRunner(variants={
        SME2_OFF: make_standin(bins / "off", trace=DATA / f"{MOBILE}_simd-off_t1.etdump"),
        SME2_ON: make_standin(bins / "on", trace=DATA / f"{MOBILE}_simd-on_t1.etdump")})
    m = standin_measurement(tmp_path, runs=3, warmup=1, blocks=15, precision=0.05)
    pair = measure_on_off(runner, replace(m, variant=SME2_OFF), replace(m, variant=SME2_ON))
    assert len(pair.off.rounds) == len(pair.on.rounds) == 6 and pair.off.rounds == pair.on.rounds
    assert "every arm" in pair.on.disturbance
