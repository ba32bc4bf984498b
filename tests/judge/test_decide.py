"""The judge's deciding step (:func:`pytest_sme2.judge.decide.decide_plan`): a plan and its measurements in, a verdict.

Every timing is recorded: the interleaved blocks of ``benchmarks/data/aa_*.json`` (``benchmarks/record_aa.py``: arms A
and B of one ``.pte``, block k of each in round k; warm-ups left out as recorded). The change judged is a real one:
toy_cnn's XNNPACK program (``aa_toy_cnn_fp32_xnnpack.json``) against the same model on the portable kernels
(``aa_toy_cnn_fp32_portable.json``), about 38x slower. No runner runs: a confirming measurement, when the gate asks for
one, replays the recording's next blocks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from recorded import DATA

from pytest_sme2.analysis.run import analyze_e2e
from pytest_sme2.evidence.kernels import read_xnnpack_log
from pytest_sme2.gate.checks import REQUIRED_BY_ON_OFF, SME2_KERNELS, Sme2Evidence
from pytest_sme2.gate.verdict import TIME_NOT_GATED, Comparison, GateConfig, Samples, Status, Verdict
from pytest_sme2.judge.decide import decide_plan
from pytest_sme2.judge.execute import Measured
from pytest_sme2.judge.plan import COMPARE, EVIDENCE_ONLY, RECORD, Plan
from pytest_sme2.measure.pair import Pair
from pytest_sme2.measure.profile import Profile
from pytest_sme2.store.baseline import Baseline

AA = DATA.parent.parent / "benchmarks" / "data"
XNNLOG = DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.xnnlog"
XNNPACK, PORTABLE = "toy_cnn_fp32_xnnpack", "toy_cnn_fp32_portable"
PATH = Path("baselines/t.py__test_a.json")  # named in the plan; deciding never opens it

pytestmark = pytest.mark.fast


def _blocks(name: str, arm: str, first: int, count: int = 10) -> list[list[float]]:
    """Blocks ``first..first+count-1`` of ``arm`` in a recorded A/A file, in ms, without the recorded warm-ups."""
    data = json.loads((AA / f"aa_{name}.json").read_text())
    warmup = data["warmup"]
    arm_blocks = [[x / 1e3 for x in b["e2e_us"][warmup:]] for b in data["blocks"] if b["arm"] == arm]
    return arm_blocks[first:first + count]


def _rounds(first: int, count: int = 10) -> tuple[str, ...]:
    return tuple(f"round {k}" for k in range(first, first + count))


def _profile(blocks: list[list[float]], rounds: tuple[str, ...] = (), invalid_reason: str = "") -> Profile:
    runs = tuple(x for b in blocks for x in b)
    return Profile(model={"name": "toy_cnn", "dtype": "fp32"}, variant=None, runner="host", build="", threads=1,
                   identity={"arch": "test"}, analysis=analyze_e2e(runs, warmup=0, source="recorded A/A blocks"),
                   latency_ms=runs, latency_blocks=tuple(len(b) for b in blocks), rounds=rounds,
                   invalid_reason=invalid_reason)


def _baseline(blocks: list[list[float]]) -> Baseline:
    return Baseline(test_id="t.py::test_a", identity={"arch": "test"}, samples_ms=tuple(x for b in blocks for x in b),
                    block_sizes=tuple(len(b) for b in blocks), created="2026-11-23")


def _compare(comparison: Comparison, config: GateConfig, baseline: Baseline, judged: GateConfig | None = None) -> Plan:
    return Plan(COMPARE, PATH, config, judged or config, comparison=comparison, baseline=baseline)


def _replay(result: Callable[[], tuple[Samples | None, Samples, Samples | None]],
            calls: list[int]) -> Callable[[], tuple[Samples | None, Samples, Samples | None]]:
    def again() -> tuple[Samples | None, Samples, Samples | None]:
        calls.append(1)
        return result()
    return again


def test_the_plans_comparison_decides_what_a_slower_candidate_means() -> None:
    """The same recorded numbers (+3754 %, 95 % CI +3710 .. +3986 %) are drift for an unchanged artifact, a regression
    beside the baseline's artifact re-measured in this session, and not decided against another session's samples
    until a drift allowance says how far the machine may have moved (a hand-set 5 %: then a regression)."""
    baseline = _baseline(_blocks(XNNPACK, "A", 0))
    candidate = _profile(_blocks(PORTABLE, "A", 0))
    measured = Measured(candidate, candidate, base=baseline.samples())
    config = GateConfig(margin=0.10)

    def verdict(comparison: Comparison, judged: GateConfig | None = None) -> Verdict:
        return decide_plan(_compare(comparison, config, baseline, judged), measured)

    unchanged = verdict(Comparison.UNCHANGED)
    assert unchanged.status is Status.DRIFT and not unchanged.failed
    assert unchanged.e2e is not None and "the unchanged artifact ran slower than its baseline" in unchanged.e2e.message
    session = verdict(Comparison.SESSION)
    assert session.status is Status.REGRESSION and session.failed
    assert session.e2e is not None and session.e2e.interval is not None and session.e2e.interval.low > 38
    stored = verdict(Comparison.STORED)
    assert stored.status is Status.INCONCLUSIVE and stored.undecided
    assert stored.e2e is not None and "no calibrated drift allowance" in stored.e2e.message
    allowed = verdict(Comparison.STORED, replace(config, drift_allowance=0.05))
    assert allowed.status is Status.REGRESSION
    assert allowed.e2e is not None and allowed.e2e.margin is not None and abs(allowed.e2e.margin - 0.15) < 1e-12
    assert {v.comparison for v in (unchanged, session, stored)} == {Comparison.UNCHANGED, Comparison.SESSION,
                                                                   Comparison.STORED}


def test_a_settled_verdict_measures_nothing_more_and_an_unsettled_one_once() -> None:
    """Arms A and B of one program, measured in the same 10 rounds: +0.6 % (paired 95 % CI -1.0 .. +2.6 %). At a 10 %
    margin that passes on the first measurement; at 2 % it is not settled, so the confirming measurement (the
    recording's next 10 rounds) is taken once and the verdict is that of both pooled."""
    reference = _profile(_blocks(XNNPACK, "A", 0), _rounds(0))
    candidate = _profile(_blocks(XNNPACK, "B", 0), _rounds(0))
    next_ref = _profile(_blocks(XNNPACK, "A", 10), _rounds(10))
    next_cand = _profile(_blocks(XNNPACK, "B", 10), _rounds(10))
    baseline = _baseline(_blocks(XNNPACK, "A", 100))  # the stored samples: not what a session comparison judges
    calls: list[int] = []
    again = _replay(lambda: (next_ref.samples(), next_cand.samples(), None), calls)
    measured = Measured(candidate, candidate, reference=reference, base=reference.samples(), again=again)

    wide = GateConfig(margin=0.10)
    passed = decide_plan(_compare(Comparison.SESSION, wide, baseline), measured)
    assert passed.status is Status.PASS and passed.attempts == 1 and calls == []
    assert passed.e2e is not None and "paired over 10 interleaved rounds" in passed.e2e.message
    assert passed.reference_median_ms == reference.samples().median_ms

    narrow = GateConfig(margin=0.02)
    first = decide_plan(_compare(Comparison.SESSION, narrow, baseline), replace(measured, again=None))
    assert first.status is Status.INCONCLUSIVE and first.attempts == 1
    twice = decide_plan(_compare(Comparison.SESSION, narrow, baseline), measured)
    assert calls == [1] and twice.attempts == 2 and twice.samples == "two measurements pooled"
    assert "measured twice: the first measurement said inconclusive" in twice.summary()


def test_a_pairs_speedup_is_judged_on_its_own_arms() -> None:
    """A pair's speedup (the portable program over the XNNPACK one, about 38x) is one check, judged on the pair's arms
    with the caller's ``min_speedup`` (never on the baseline), and confirmed on the pair measured again: the latency
    of the unchanged XNNPACK program beside it is not what fails."""
    baseline = _baseline(_blocks(XNNPACK, "A", 0))
    on, off = _profile(_blocks(XNNPACK, "B", 0)), _profile(_blocks(PORTABLE, "A", 0))
    calls: list[int] = []

    def again_pair() -> Pair:
        calls.append(1)
        return Pair(_profile(_blocks(PORTABLE, "A", 10)), _profile(_blocks(XNNPACK, "B", 10)))

    measured = Measured(on, on, off, base=baseline.samples(), again_pair=again_pair)
    met = decide_plan(_compare(Comparison.UNCHANGED, GateConfig(margin=0.10, min_speedup=10.0), baseline), measured)
    assert met.status is Status.PASS and calls == []
    speedups = [c for c in met.checks if c.name in ("speedup", "min_speedup")]
    assert len(speedups) == 1 and speedups[0].status is Status.PASS and speedups[0].interval is not None
    assert 30 < speedups[0].interval.low < speedups[0].interval.high < 50

    unmet = decide_plan(_compare(Comparison.UNCHANGED, GateConfig(margin=0.10, min_speedup=50.0), baseline), measured)
    assert unmet.status is Status.REGRESSION and unmet.failed and calls == [1] and unmet.attempts == 2
    assert unmet.speedup is not None and unmet.speedup.status is Status.REGRESSION
    assert unmet.e2e is not None and unmet.e2e.status is Status.PASS  # the latency is not what failed


def test_a_first_recording_without_sme2_kernels_is_a_regression_and_evidence_only_is_never_compared() -> None:
    """Without a baseline only the absolute checks and the evidence decide: an SME2-on arm whose XNNPACK log (the
    recorded x86 log of toy_cnn: AVX-512 kernels) names no SME2 kernel, on a device that reports SME2, is a
    regression; an untrustworthy measurement is invalid. A plan for the evidence only (an emulated device's time)
    compares no latency, however slow, and says so."""
    candidate = _profile(_blocks(PORTABLE, "A", 0))
    evidence = Sme2Evidence(required_by=REQUIRED_BY_ON_OFF, device_sme2=True, device="the test device",
                            log=read_xnnpack_log(XNNLOG))
    config = GateConfig()
    record = Plan(RECORD, PATH, config, config)
    verdict = decide_plan(record, Measured(candidate, candidate, evidence=evidence))
    assert verdict.status is Status.REGRESSION and verdict.comparison is None
    (sme2,) = [c for c in verdict.checks if c.name == SME2_KERNELS]
    assert sme2.status is Status.REGRESSION and "no SME2 kernel" in sme2.message
    hot = _profile(_blocks(PORTABLE, "A", 0), invalid_reason="thermal throttling: status went from none to severe")
    invalid = decide_plan(replace(record, invalid=hot.invalid_reason), Measured(hot, hot))
    assert invalid.status is Status.INVALID and invalid.e2e is None

    baseline = _baseline(_blocks(XNNPACK, "A", 0))
    emulated = replace(config, emulated=True, time_gated=False)
    only = decide_plan(Plan(EVIDENCE_ONLY, PATH, emulated, emulated, baseline=baseline),
                       Measured(candidate, candidate, evidence=evidence, base=baseline.samples()))
    assert only.e2e is None and only.comparison is None and TIME_NOT_GATED in only.notes
    assert only.status is Status.REGRESSION  # the evidence still gates
