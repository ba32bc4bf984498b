"""Intervals and rank tests on blocks: exact values, coverage, and the gate's rule.

Blocks (program loads) are the independent units of a measurement; runs of one block share the
machine's state. These tests check the exact machinery against scipy and published tables, then the
property that matters: a nominal 95 % interval covers the true ratio at least 94 % of the time when
the machine drifts between blocks — in a seeded simulation shaped like this VM's measurements and in
real interleaved A/A blocks recorded with the local runtime (``benchmarks/data``, written by
``benchmarks/record_aa.py``). The old two-stage block bootstrap and the Mann-Whitney test on all runs
are run through the same checks, to show that the checks can fail.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pytest_sme2.gate.checks import compare_e2e
from pytest_sme2.gate.stats import (
    BlockEffect,
    Interval,
    block_difference_ci,
    block_medians,
    block_ratio_ci,
    mann_whitney_p,
    max_block_coverage,
    min_blocks_per_arm,
    paired_ratio_ci,
    rank_test_p,
)
from pytest_sme2.gate.verdict import Comparison, GateConfig, Samples, Status

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the statistics only tests and benchmarks use live in benchmarks/former_stats.py
    sys.path.insert(0, str(ROOT))
from benchmarks.former_stats import block_rank_p, ratio_of_medians_ci  # noqa: E402

pytestmark = pytest.mark.fast

AA_DATA = ROOT / "benchmarks" / "data" / "aa_toy_cnn_fp32_xnnpack.json"


def _scipy_stats():  # type: ignore[no-untyped-def]
    try:
        import scipy.stats
    except ImportError:  # pragma: no cover - scipy comes with scikit-learn, an executorch dependency
        pytest.skip("scipy is not importable in this environment (it normally comes with scikit-learn)")
    return scipy.stats


# ------------------------------------------------------------------------------ exact machinery


@pytest.mark.parametrize(("m", "n"), [(3, 3), (5, 5), (4, 7), (8, 8), (10, 12), (20, 20)])
def test_rank_test_p_is_scipys_exact_mann_whitney(m: int, n: int) -> None:
    stats = _scipy_stats()
    rng = np.random.default_rng(m * 31 + n)
    for shift in (0.0, 0.7, 1.5):
        a, b = rng.normal(0, 1, m), rng.normal(shift, 1, n)
        exact = stats.mannwhitneyu(a, b, alternative="two-sided", method="exact").pvalue
        assert rank_test_p(a, b) == pytest.approx(exact, rel=1e-9)
        assert rank_test_p(b, a) == pytest.approx(exact, rel=1e-9)


def test_rank_test_p_with_ties_is_the_exact_permutation_p() -> None:
    stats = _scipy_stats()
    a, b = np.array([1.0, 1.0, 2.0, 2.0, 3.0]), np.array([2.0, 3.0, 3.0, 4.0, 4.0])
    perm = stats.permutation_test(
        (a, b), lambda x, y: stats.mannwhitneyu(x, y).statistic, permutation_type="independent",
        n_resamples=np.inf, alternative="two-sided")
    assert rank_test_p(a, b) == pytest.approx(perm.pvalue, rel=1e-9)
    assert rank_test_p([1.0, 1.0], [1.0, 1.0, 1.0]) == 1.0  # all tied: no evidence


@pytest.mark.parametrize(("m", "n", "k"), [(5, 5, 3), (6, 6, 6), (7, 7, 9), (8, 8, 14), (10, 10, 24), (5, 8, 7)])
def test_interval_ranks_match_the_published_critical_values(m: int, n: int, k: int) -> None:
    """k = (two-sided 5 % critical value of U) + 1, from the Mann-Whitney tables (2, 5, 8, 13, 23; 6 for 5 vs 8)."""
    rng = np.random.default_rng(1)
    a, b = rng.lognormal(0, 0.1, m), rng.lognormal(0, 0.1, n)
    effect = block_ratio_ci(a, b, baseline_blocks=(1,) * m, candidate_blocks=(1,) * n)
    ratios = np.sort(np.divide.outer(b, a).ravel())
    assert effect.interval is not None
    assert effect.interval.low == pytest.approx(ratios[k - 1], rel=1e-12)
    assert effect.interval.high == pytest.approx(ratios[-k], rel=1e-12)
    assert effect.interval.confidence == 0.95
    assert effect.interval.coverage is not None and effect.interval.coverage >= 0.95


def test_five_vs_five_blocks_by_hand() -> None:
    """3rd smallest .. 3rd largest of the 25 block-median ratios; coverage 1 - 2 * 4/252 = 96.8 %."""
    base = [[10.0, 10.2, 9.9], [10.4, 10.45, 10.6], [9.7, 9.8, 9.6], [10.1, 10.0, 10.3], [10.8, 11.2, 10.7]]
    cand = [[11.0, 11.1, 10.9], [11.5, 11.4, 11.6], [10.5, 10.6, 10.4], [12.0, 12.1, 11.9], [10.9, 11.0, 11.1]]
    a, b = np.concatenate(base), np.concatenate(cand)
    effect = block_ratio_ci(a, b, baseline_blocks=(3,) * 5, candidate_blocks=(3,) * 5)
    assert block_medians(a, (3,) * 5).tolist() == [10.0, 10.45, 9.7, 10.1, 10.8]
    ratios = sorted(cb / ab for cb in (11.0, 11.5, 10.5, 12.0, 11.0) for ab in (10.0, 10.45, 9.7, 10.1, 10.8))
    iv = effect.interval
    assert iv is not None  # exp(log) round trip: equal to the last bit or two
    assert (iv.low, iv.high, iv.coverage) == pytest.approx((ratios[2], ratios[22], 244 / 252), rel=1e-12)
    assert (iv.estimate, iv.confidence) == (np.median(b) / np.median(a), 0.95)
    assert effect.shift == pytest.approx(ratios[12], rel=1e-12)  # Hodges-Lehmann: the median ratio
    assert effect.estimate == pytest.approx(11.1 / 10.2, rel=1e-12)  # the headline: medians of all 15 runs
    assert (effect.baseline_blocks, effect.candidate_blocks, effect.reason) == (5, 5, "")
    # One baseline block (10.8) is above one candidate block (10.5): U = 1 -> p = 2 * 2/252.
    assert effect.p_value == pytest.approx(4 / 252)


def test_difference_scale_for_categories_at_zero_ms() -> None:
    base = np.zeros(150)  # a category the trace shows as 0.0 ms
    cand = np.repeat([0.030, 0.031, 0.029, 0.032, 0.030], 30)
    blocks = (30,) * 5
    ratio = block_ratio_ci(base, cand, baseline_blocks=blocks, candidate_blocks=blocks)
    assert ratio.interval is None and "not positive" in ratio.reason and "difference in ms" in ratio.reason
    diff = block_difference_ci(base, cand, baseline_blocks=blocks, candidate_blocks=blocks)
    assert diff.scale == "difference" and diff.estimate == pytest.approx(0.030)
    assert diff.interval is not None
    # Every pairwise difference is a candidate block median (5 times each): 3rd smallest / largest of 25.
    assert (diff.interval.low, diff.interval.high) == pytest.approx((0.029, 0.032))
    assert diff.p_value == pytest.approx(2 / 252)


@pytest.mark.parametrize(("m", "n"), [(1, 1), (2, 2), (3, 3), (3, 4), (2, 5)])
def test_too_few_blocks_never_claim_the_confidence(m: int, n: int) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.lognormal(0, 0.05, 10 * m), rng.lognormal(0.5, 0.05, 10 * n)
    effect = block_ratio_ci(a, b, baseline_blocks=(10,) * m, candidate_blocks=(10,) * n)
    assert max_block_coverage(m, n) < 0.95
    assert effect.interval is None
    assert f"{m} vs {n} blocks can support at most {max_block_coverage(m, n):.1%}" in effect.reason
    assert "need >= 4 blocks per arm" in effect.reason
    assert effect.estimate == pytest.approx(np.median(b) / np.median(a))  # the headline is still there


def test_enough_blocks_at_the_edge() -> None:
    assert min_blocks_per_arm(0.95) == 4 and min_blocks_per_arm(0.99) == 5
    rng = np.random.default_rng(0)
    for m, n, coverage in [(4, 4, 1 - 2 / 70), (3, 5, 1 - 2 / 56)]:
        e = block_ratio_ci(rng.lognormal(0, 0.05, 4 * m), rng.lognormal(0, 0.05, 4 * n),
                           baseline_blocks=(4,) * m, candidate_blocks=(4,) * n)
        assert e.interval is not None and e.interval.coverage == pytest.approx(coverage)


def test_unknown_block_sizes_are_one_block() -> None:
    """A baseline written without block sizes: its 150 runs are one block, so there is no interval."""
    rng = np.random.default_rng(0)
    a, b = rng.lognormal(0, 0.05, 150), rng.lognormal(0, 0.05, 150)
    effect = block_ratio_ci(a, b, candidate_blocks=(30,) * 5)
    assert effect.baseline_blocks == 1 and effect.interval is None
    assert "unknown block sizes count as one block" in effect.reason
    assert block_medians(a).tolist() == [np.median(a)]
    with pytest.raises(ValueError, match="do not partition"):
        block_ratio_ci(a, b, baseline_blocks=(30,) * 4)


def test_block_effect_and_interval_round_trip() -> None:
    rng = np.random.default_rng(0)
    effect = block_ratio_ci(rng.lognormal(0, 0.05, 50), rng.lognormal(0, 0.05, 50),
                            baseline_blocks=(10,) * 5, candidate_blocks=(10,) * 5)
    assert BlockEffect.from_dict(json.loads(json.dumps(effect.to_dict()))) == effect
    few = block_ratio_ci([1.0, 2.0], [1.0, 2.0], baseline_blocks=(1, 1), candidate_blocks=(1, 1))
    assert BlockEffect.from_dict(json.loads(json.dumps(few.to_dict()))) == few
    # An interval written before ``coverage`` existed still reads, and a bootstrap one writes no coverage.
    assert Interval(**{"estimate": 1.0, "low": 0.9, "high": 1.1, "confidence": 0.95}).coverage is None
    assert "coverage" not in Interval(1.0, 0.9, 1.1, 0.95).to_dict()


# ------------------------------------------------------------------------ coverage by simulation


def _arm(rng: np.random.Generator, blocks: int, runs: int, *, drift: float, bursts: float,
         within: float = 0.02, stalls: float = 0.02) -> np.ndarray:
    """Runs of ``blocks`` blocks on a drifting machine (ms, ~0.3 ms per run like toy_cnn here).

    Per block: a lognormal factor (sd ``drift``) for the machine's state, and with probability
    ``bursts`` a +30 % burst from other load; per run: lognormal noise (sd ``within``) and, with
    probability ``stalls``, a 3x stall. benchmarks/README.md measured block medians within ~1 %
    with 5-10 % of blocks at +30 % on a quiet moment; benchmarks/data/aa_toy_cnn_fp32_xnnpack.json,
    at load average 4-6, block medians with a robust sd of 9 % and 9 % of runs above twice their
    block's median.
    """
    state = rng.lognormal(0, drift, blocks) * np.where(rng.random(blocks) < bursts, 1.3, 1.0)
    run = rng.lognormal(0, within, (blocks, runs)) * np.where(rng.random((blocks, runs)) < stalls, 3.0, 1.0)
    return (0.3 * state[:, None] * run).ravel()


#: (block sd, burst share): quiet VM with bursts, several-% drift with bursts, busy VM.
SCENARIOS = {"quiet+bursts": (0.01, 0.10), "drift+bursts": (0.04, 0.07), "busy": (0.09, 0.05)}


@pytest.mark.parametrize(("scenario", "blocks", "runs", "ratio"), [
    ("quiet+bursts", 5, 30, 1.0), ("drift+bursts", 5, 30, 1.0), ("busy", 5, 30, 1.0),
    ("drift+bursts", 5, 30, 1.1), ("busy", 10, 15, 1.0), ("drift+bursts", 8, 20, 1.2),
])
def test_block_interval_covers_at_least_94_percent_under_drift(scenario: str, blocks: int, runs: int,
                                                               ratio: float) -> None:
    """Nominal 95 % (exact 95.0-96.8 % for these block counts) must cover the true ratio >= 94 % of the time."""
    drift, bursts = SCENARIOS[scenario]
    rng = np.random.default_rng(20_251_123)
    sizes = (runs,) * blocks
    trials, covered, headline_outside = 600, 0, 0
    for _ in range(trials):
        a = _arm(rng, blocks, runs, drift=drift, bursts=bursts)
        b = ratio * _arm(rng, blocks, runs, drift=drift, bursts=bursts)
        iv = block_ratio_ci(a, b, baseline_blocks=sizes, candidate_blocks=sizes).interval
        assert iv is not None
        covered += iv.low <= ratio <= iv.high
        headline_outside += not iv.low <= iv.estimate <= iv.high
    assert covered / trials >= 0.94
    assert headline_outside / trials <= 0.02  # the headline and the interval tell one story


def test_the_old_two_stage_bootstrap_fails_the_same_coverage_check() -> None:
    """Why the interval changed: in this scenario the bootstrap's nominal 95 % covers ~93 %.

    Over 2000 trials at 2000 resamples (seed 11): bootstrap 93.2 %, block interval 97.1 %; the review
    saw 91.5 % in 200. The bootstrap costs ~10 ms per interval, so this test runs 300 trials at 400
    resamples on the coverage test's seed (bootstrap 89.7 %, block interval 96.3 %). Its coverage
    swings widely between seeds at 300 trials (89.7-97.7 % over four seeds): the claim rests on the
    2000-trial figure, this test only shows on fixed data that the check can fail.
    """
    drift, bursts = SCENARIOS["drift+bursts"]
    rng = np.random.default_rng(20_251_123)
    sizes = (30,) * 5
    trials, old, new = 300, 0, 0
    for _ in range(trials):
        a = _arm(rng, 5, 30, drift=drift, bursts=bursts)
        b = _arm(rng, 5, 30, drift=drift, bursts=bursts)
        boot = ratio_of_medians_ci(a, b, resamples=400, baseline_blocks=sizes, candidate_blocks=sizes)
        old += boot.low <= 1.0 <= boot.high
        iv = block_ratio_ci(a, b, baseline_blocks=sizes, candidate_blocks=sizes).interval
        assert iv is not None
        new += iv.low <= 1.0 <= iv.high
    assert old / trials < 0.94 <= new / trials


@pytest.mark.parametrize(("blocks", "alpha"), [(5, 0.05), (5, 0.01), (10, 0.05)])
def test_block_rank_test_false_positives_stay_at_or_below_alpha_under_drift(blocks: int, alpha: float) -> None:
    drift, bursts = SCENARIOS["drift+bursts"]
    rng = np.random.default_rng(7)
    sizes = (30,) * blocks
    trials, by_blocks, by_runs = 2000, 0, 0
    for _ in range(trials):
        a = _arm(rng, blocks, 30, drift=drift, bursts=bursts)
        b = _arm(rng, blocks, 30, drift=drift, bursts=bursts)
        by_blocks += block_rank_p(a, b, baseline_blocks=sizes, candidate_blocks=sizes) < alpha
        if by_runs < 100:  # the old guard, on all runs as if independent: stop counting once it is clearly wrong
            by_runs += mann_whitney_p(a, b) < alpha
    # An exact test's false-positive rate is at most alpha; allow the binomial noise of 2000 trials (2 SE).
    assert by_blocks / trials <= alpha + 2 * math.sqrt(alpha * (1 - alpha) / trials)
    assert by_runs >= 100  # >= 5 % of A/A comparisons "significant" (the review saw 133 of 200 at p < 0.01)


# ------------------------------------------------------------------ coverage on real A/A blocks


@pytest.fixture(scope="module")
def real_aa() -> dict[str, list[np.ndarray]]:
    """Measured runs of each recorded block per arm, in recording order (A B B A ...; one .pte, ratio 1)."""
    data = json.loads(AA_DATA.read_text())
    w = data["warmup"]
    arms: dict[str, list[np.ndarray]] = {"A": [], "B": []}
    for block in data["blocks"]:
        arms[block["arm"]].append(np.asarray(block["e2e_us"][w:], dtype=float))
    return arms


@pytest.mark.parametrize(("blocks", "runs"), [(5, 30), (8, 20), (10, 15)])
def test_block_interval_covers_real_interleaved_aa_blocks(real_aa: dict[str, list[np.ndarray]], blocks: int,
                                                          runs: int) -> None:
    """Consecutive windows of ``blocks`` A/B block pairs, as a session would measure them: 1 must be inside."""
    a_blocks, b_blocks = real_aa["A"], real_aa["B"]
    windows = len(a_blocks) // blocks
    assert windows >= 100
    sizes = (runs,) * blocks
    covered = rank_false = runs_false = 0
    for i in range(windows):
        part = slice(i * blocks, (i + 1) * blocks)
        a = np.concatenate([x[:runs] for x in a_blocks[part]])
        b = np.concatenate([x[:runs] for x in b_blocks[part]])
        effect = block_ratio_ci(a, b, baseline_blocks=sizes, candidate_blocks=sizes)
        assert effect.interval is not None
        covered += effect.interval.low <= 1.0 <= effect.interval.high
        rank_false += effect.p_value < 0.05
        runs_false += mann_whitney_p(a, b) < 0.01
    assert covered / windows >= 0.94
    assert rank_false / windows <= 0.05
    assert runs_false / windows > 0.05  # the runs-as-independent test is fooled by the same real data


# ------------------------------------------------------------------------------ the gate's rule


def _gate(base_medians: list[float], cand_medians: list[float], margin: float = 0.05) -> tuple[Status, str]:
    """compare_samples on blocks of 3 identical runs each: the block medians are exactly these values."""
    a, b = np.repeat(base_medians, 3), np.repeat(cand_medians, 3)
    check = compare_e2e(Samples(tuple(a), (3,) * len(base_medians)), Samples(tuple(b), (3,) * len(cand_medians)),
                        GateConfig(margin=margin), Comparison.SESSION)
    return check.status, check.message


def test_margin_rule_is_non_inferiority_and_the_words_say_so() -> None:
    """Item 9: -7.4 %..+3.1 % passes and -1.6 %..+5.5 % is inconclusive — the upper bound decides a pass."""
    base = [1.0] * 5  # every pairwise ratio is then a candidate block median; bounds = min and max of them
    status, msg = _gate(base, [0.926, 0.97, 1.0, 1.01, 1.031])
    assert status is Status.PASS
    assert "95% CI -7.4% .. +3.1%" in msg and "not slower by the +5.0% margin (upper bound below it)" in msg
    status, msg = _gate(base, [0.984, 1.0, 1.02, 1.03, 1.055])
    assert status is Status.INCONCLUSIVE
    assert "95% CI -1.6% .. +5.5%" in msg and "reaches past the +5.0% margin" in msg
    assert "upper bound below the margin" in msg
    for m in (_gate(base, [0.926, 0.97, 1.0, 1.01, 1.031])[1], msg):
        assert "±" not in m  # the margin is one-sided: never printed as "±"


def test_gate_regression_improvement_and_too_few_blocks() -> None:
    base = [1.0, 1.01, 0.99, 1.02, 0.98]
    status, msg = _gate(base, [1.12, 1.10, 1.15, 1.11, 1.13])
    assert status is Status.REGRESSION and "lower bound above the +5.0% margin" in msg
    assert "rank test on block medians p=0.0079" in msg
    status, msg = _gate(base, [0.90, 0.88, 0.91, 0.89, 0.87])
    assert status is Status.IMPROVEMENT and "upper bound below -5.0%" in msg
    status, msg = _gate(base[:2], [1.5, 1.6])
    assert status is Status.INCONCLUSIVE and "too few blocks" in msg and "need >= 4 blocks per arm" in msg
    # A baseline written without block sizes: one block, never a verdict from an interval it cannot have.
    check = compare_e2e(Samples(tuple(np.repeat(base, 3))),
                        Samples(tuple(np.repeat([1.5, 1.6, 1.55, 1.52, 1.58], 3)), (3,) * 5),
                        GateConfig(), Comparison.SESSION)
    assert check.status is Status.INCONCLUSIVE and "unknown block sizes count as one block" in check.message
    assert check.interval is None and check.baseline == pytest.approx(1.0)


def test_gate_decides_from_the_interval_alone() -> None:
    """4 vs 4 blocks: the interval exists (97.1 % exact coverage) and lies above the margin, so it is a
    regression; the matching rank test (p = 0.029, its smallest possible value) is the same evidence."""
    status, msg = _gate([1.0, 1.01, 0.99, 1.02], [1.12, 1.10, 1.15, 1.11])
    assert status is Status.REGRESSION and "p=0.029" in msg
    assert math.isclose(2 / math.comb(8, 4), 0.02857, rel_tol=1e-3)


def test_paired_variant_in_the_coverage_benchmark_uses_the_signed_rank_tables() -> None:
    """benchmarks/coverage.py's paired interval (measured there, not adopted): k = T critical + 1 (n=10: T=8)."""
    import sys

    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.coverage import signed_rank_interval
    finally:
        sys.path.remove(str(ROOT))
    d = np.random.default_rng(3).normal(0, 1, 10)
    i, j = np.triu_indices(10)
    walsh = np.sort((d[i] + d[j]) / 2)
    assert signed_rank_interval(d) == (walsh[8], walsh[-9])
    assert signed_rank_interval(d[:6]) == (d[:6].min(), d[:6].max())  # 6 pairs: only min..max (96.9 %)
    assert signed_rank_interval(d[:5]) is None  # 5 pairs reach 93.75 % at most


# ------------------------------------------------------------------- paired rounds


def test_paired_interval_is_the_signed_rank_walsh_interval_and_its_test_is_scipys() -> None:
    """The paired interval equals the independent one of benchmarks/coverage.py; its p is scipy's exact Wilcoxon."""
    import sys

    scipy_stats = _scipy_stats()
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.coverage import signed_rank_interval
    finally:
        sys.path.remove(str(ROOT))
    rng = np.random.default_rng(7)
    for n in (6, 10, 15, 30):
        a = rng.lognormal(0, 0.05, n)
        b = a * rng.lognormal(0.02, 0.03, n)
        effect = paired_ratio_ci(a, b, baseline_blocks=(1,) * n, candidate_blocks=(1,) * n)
        want = signed_rank_interval(np.log(b) - np.log(a))
        assert effect.paired and effect.interval is not None and want is not None
        assert (math.log(effect.interval.low), math.log(effect.interval.high)) == pytest.approx(want, rel=1e-12)
        assert effect.p_value == pytest.approx(scipy_stats.wilcoxon(np.log(b) - np.log(a), method="exact").pvalue)
    few = paired_ratio_ci([1.0] * 5, [1.1] * 5, baseline_blocks=(1,) * 5, candidate_blocks=(1,) * 5)
    assert few.interval is None and "need >= 6 rounds" in few.reason


def _rounds_window(real_aa: dict[str, list[np.ndarray]], start: int, rounds: int, runs: int, *,
                   drift: np.ndarray, slowdown: float) -> tuple[Samples, Samples]:
    """``rounds`` consecutive recorded A/B rounds; both blocks of round k scaled by ``drift[k]`` (the machine),
    the B blocks by ``slowdown`` too (the model). Both arms carry the same round ids."""
    a = np.concatenate([x[:runs] * f for x, f in zip(real_aa["A"][start:start + rounds], drift, strict=True)])
    b = np.concatenate([x[:runs] * f * slowdown
                        for x, f in zip(real_aa["B"][start:start + rounds], drift, strict=True)])
    ids = tuple(f"w{start}.{k}" for k in range(rounds))
    sizes = (runs,) * rounds
    return Samples(tuple(a), sizes, rounds=ids), Samples(tuple(b), sizes, rounds=ids)


def test_same_session_rounds_are_judged_paired_so_drift_between_rounds_cancels(
        real_aa: dict[str, list[np.ndarray]]) -> None:
    """Real interleaved A/A rounds with a 3 % per-round common drift, 15 rounds x 10 runs.

    The same 60 disjoint windows of the recording judged both ways. Unpaired (the rounds dropped), the
    drift between rounds and the machine's slow swings are noise: median interval 14.9 % wide, a real +10 % past
    the 5 % margin in 19 of 60; paired (the rounds kept, as measure_pair now gives them), they cancel within each
    round: 9.5 % wide, 34 of 60. No A/A false alarm either way. (benchmarks/gate_paired.py has the full study with
    the confirmation; this recording's per-round noise, ~10 % sd of the log ratio at 10 runs, is what keeps +10 %
    from the 95 % target at 15 x 10.)
    """
    rng = np.random.default_rng(18)
    config = GateConfig(margin=0.05)
    windows = 60
    caught = {True: 0, False: 0}
    alarms = {True: 0, False: 0}
    widths: dict[bool, list[float]] = {True: [], False: []}
    for w in range(windows):
        drift = np.exp(rng.normal(0, 0.03, 15))
        for pair in (True, False):
            ref, slow = _rounds_window(real_aa, w * 15, 15, 10, drift=drift, slowdown=1.10)
            ref, slow = (ref, slow) if pair else (replace(ref, rounds=()), replace(slow, rounds=()))
            check = compare_e2e(ref, slow, config, Comparison.SESSION)
            assert ("paired over 15 interleaved rounds" in check.message) is pair
            caught[pair] += check.status is Status.REGRESSION
            assert check.interval is not None
            widths[pair].append(check.interval.high / check.interval.low - 1)
            ref, same = _rounds_window(real_aa, w * 15, 15, 10, drift=drift, slowdown=1.0)
            ref, same = (ref, same) if pair else (replace(ref, rounds=()), replace(same, rounds=()))
            alarms[pair] += compare_e2e(ref, same, config, Comparison.SESSION).status is Status.REGRESSION
    assert alarms == {True: 0, False: 0}
    assert caught[True] >= 1.5 * caught[False] and caught[True] >= 30
    assert float(np.median(widths[True])) <= 0.75 * float(np.median(widths[False]))
    # Stored samples carry no rounds, and rounds of another measurement pair with nothing: unpaired.
    ref, slow = _rounds_window(real_aa, 0, 15, 10, drift=np.ones(15), slowdown=1.10)
    other = replace(slow, rounds=tuple(f"x.{k}" for k in range(15)))
    assert "paired" not in compare_e2e(ref, other, config, Comparison.SESSION).message
