"""Statistics: summaries against numpy, the bootstrap on seeded data, rank tests against scipy, BH by hand."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from recorded import DATA

from pytest_sme2.gate.stats import Interval, mann_whitney_p, summarize, trimmed_mean

if str(Path(__file__).resolve().parents[2]) not in sys.path:  # the statistics only tests and benchmarks use
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.former_stats import (
    BOOTSTRAP_SEED,
    benjamini_hochberg,
    median_ci,
    min_mann_whitney_p,
    ratio_of_medians_ci,
)

pytestmark = pytest.mark.fast


def _scipy_stats():  # type: ignore[no-untyped-def]
    try:
        import scipy.stats
    except ImportError:  # pragma: no cover - scipy comes with scikit-learn, an executorch dependency
        pytest.skip("scipy is not importable in this environment (it normally comes with scikit-learn)")
    return scipy.stats


@pytest.fixture(scope="module")
def real_samples() -> np.ndarray:
    """Steady-state E2E samples (ms) of a real recorded trace."""
    from pytest_sme2.evidence.trace import read_etdump

    return read_etdump(DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-off_t1.etdump").e2e_ms_per_run()[1:]


# --------------------------------------------------------------------------------------- summaries


def test_summarize_matches_numpy(real_samples: np.ndarray) -> None:
    x = real_samples
    s = summarize(x, cold=9.5)
    assert s.cold == 9.5
    assert s.count == 29
    assert s.median == np.median(x)
    assert s.mean == pytest.approx(np.mean(x), rel=1e-12)
    assert s.min == x.min()
    assert s.max == x.max()
    assert s.p90 == pytest.approx(np.percentile(x, 90), rel=1e-12)
    assert s.p99 == pytest.approx(np.percentile(x, 99), rel=1e-12)
    assert s.std == pytest.approx(np.std(x, ddof=1), rel=1e-12)
    assert s.cv == pytest.approx(np.std(x, ddof=1) / np.mean(x), rel=1e-12)
    sorted_x = np.sort(x)
    assert s.trimmed_mean == pytest.approx(sorted_x[2:-2].mean(), rel=1e-12)  # 10 % of 29 -> 2 each end
    assert set(s.to_dict()) == {"cold", "count", "median", "mean", "min", "max", "p90", "p99", "std", "cv",
                                "trimmed_mean"}


def test_summarize_edges() -> None:
    one = summarize([4.0])
    assert (one.count, one.median, one.std, one.cv) == (1, 4.0, 0.0, 0.0)
    empty = summarize([])
    assert empty.count == 0
    assert math.isnan(empty.median)
    assert math.isnan(empty.mean)
    assert summarize([1.0, 2.0]).cold is None


@pytest.mark.parametrize("proportion", [0.0, 0.1, 0.2, 0.25])
def test_trimmed_mean_matches_scipy(real_samples: np.ndarray, proportion: float) -> None:
    stats = _scipy_stats()
    assert trimmed_mean(real_samples, proportion) == pytest.approx(
        stats.trim_mean(real_samples, proportion), rel=1e-12
    )


def test_trimmed_mean_by_hand() -> None:
    # 10 values, 10 % -> drop one from each end: mean of 2..9 with the outlier 1000 gone.
    assert trimmed_mean([1, 2, 3, 4, 5, 6, 7, 8, 9, 1000]) == 5.5
    assert trimmed_mean([3.0]) == 3.0
    assert math.isnan(trimmed_mean([]))


# --------------------------------------------------------------------------------------- bootstrap


def test_bootstrap_ci_contains_the_true_ratio_and_is_reproducible() -> None:
    rng = np.random.default_rng(2024)
    baseline = rng.lognormal(0.0, 0.15, 40)
    candidate = 1.2 * rng.lognormal(0.0, 0.15, 40)
    iv = ratio_of_medians_ci(baseline, candidate)
    assert iv.low < 1.2 < iv.high
    assert iv.low > 1.0  # and it is informative: a 20 % change is resolved at n=40
    assert iv.estimate == pytest.approx(np.median(candidate) / np.median(baseline), rel=1e-12)
    assert iv.low <= iv.estimate <= iv.high
    assert iv.confidence == 0.95
    # Same data, same interval, bit for bit (fixed seed); another seed moves it a little.
    assert ratio_of_medians_ci(baseline, candidate) == iv
    other = ratio_of_medians_ci(baseline, candidate, seed=BOOTSTRAP_SEED + 1)
    assert other != iv
    assert other.low == pytest.approx(iv.low, rel=0.02)


def test_bootstrap_coverage_and_power_over_many_seeded_datasets() -> None:
    """The 95 % CI covers the true ratio in most datasets and excludes 1.0 for a real 20 % change."""
    rng = np.random.default_rng(7)
    covered = excluded_one = 0
    trials = 120
    for _ in range(trials):
        a = rng.lognormal(0.0, 0.2, 30)
        b = 1.2 * rng.lognormal(0.0, 0.2, 30)
        iv = ratio_of_medians_ci(a, b, resamples=2000)
        covered += iv.low <= 1.2 <= iv.high
        excluded_one += iv.low > 1.0
    assert covered / trials >= 0.90
    assert excluded_one / trials >= 0.80


def _drifting_blocks(rng: np.random.Generator, blocks: int = 5, runs: int = 30, drift: float = 0.1) -> np.ndarray:
    """Runs of ``blocks`` runner processes, each at its own machine state (a common factor per block)."""
    return np.concatenate([rng.normal(1.0, 0.01, runs) * rng.uniform(1 - drift, 1 + drift) for _ in range(blocks)])


def test_block_bootstrap_is_honest_about_drift_between_blocks() -> None:
    """A/A with per-block drift: resampling runs alone 'finds' a difference most of the time; by blocks, rarely."""
    rng = np.random.default_rng(7)
    blocks = (30,) * 5
    runs_only_misses = blocks_misses = 0
    for _ in range(40):
        a, b = _drifting_blocks(rng), _drifting_blocks(rng)
        runs = ratio_of_medians_ci(a, b, resamples=500)
        by_blocks = ratio_of_medians_ci(a, b, resamples=500, baseline_blocks=blocks, candidate_blocks=blocks)
        runs_only_misses += not runs.low <= 1.0 <= runs.high
        blocks_misses += not by_blocks.low <= 1.0 <= by_blocks.high
    assert runs_only_misses >= 20  # claims ±1 % while the blocks wander ±10 %
    assert blocks_misses <= 6  # ~5 % expected at 95 % confidence


def test_block_bootstrap_without_drift_is_about_as_tight_as_runs_alone() -> None:
    rng = np.random.default_rng(3)
    a, b = _drifting_blocks(rng, drift=0.0), _drifting_blocks(rng, drift=0.0) * 1.2
    runs = ratio_of_medians_ci(a, b)
    by_blocks = ratio_of_medians_ci(a, b, baseline_blocks=(30,) * 5, candidate_blocks=(30,) * 5)
    assert runs.low <= 1.2 <= runs.high and by_blocks.low <= 1.2 <= by_blocks.high
    assert by_blocks.half_width_rel <= 2 * runs.half_width_rel  # two stages, not a different answer


def test_block_sizes_must_partition_the_samples() -> None:
    x = np.arange(1.0, 11.0)
    with pytest.raises(ValueError, match="do not partition the 10 samples"):
        ratio_of_medians_ci(x, x, baseline_blocks=(5, 4))
    with pytest.raises(ValueError, match="do not partition"):
        ratio_of_medians_ci(x, x, candidate_blocks=(10, 0))
    unequal = ratio_of_medians_ci(x, x * 2, baseline_blocks=(3, 7), candidate_blocks=(5, 5))
    assert unequal.estimate == 2.0 and unequal.low <= 2.0 <= unequal.high


def test_bootstrap_confidence_level_widens_the_interval() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.lognormal(0, 0.2, 25), rng.lognormal(0, 0.2, 25)
    narrow = ratio_of_medians_ci(a, b, confidence=0.80)
    wide = ratio_of_medians_ci(a, b, confidence=0.99)
    assert wide.low < narrow.low <= narrow.high < wide.high


def test_bootstrap_edges() -> None:
    assert ratio_of_medians_ci([2.0], [3.0]) == Interval(1.5, 1.5, 1.5, 0.95)
    with pytest.raises(ValueError):
        ratio_of_medians_ci([], [1.0])
    same = ratio_of_medians_ci([1.0] * 10, [1.0] * 10)
    assert (same.low, same.estimate, same.high) == (1.0, 1.0, 1.0)
    assert same.half_width_rel == 0.0


def test_median_ci_on_real_samples(real_samples: np.ndarray) -> None:
    iv = median_ci(real_samples)
    assert iv.estimate == np.median(real_samples)
    assert real_samples.min() <= iv.low <= iv.estimate <= iv.high <= real_samples.max()
    p90 = median_ci(real_samples, quantile=90)
    assert p90.estimate == pytest.approx(np.percentile(real_samples, 90), rel=1e-12)
    assert median_ci(real_samples) == iv


# --------------------------------------------------------------------------------------- rank tests


@pytest.mark.parametrize(("n1", "n2", "shift", "round_to"), [
    (10, 10, 0.0, None), (10, 10, 1.0, None), (12, 15, 0.5, None), (30, 30, 0.3, None),
    (10, 40, 1.0, None), (20, 20, 0.5, 1),  # rounded to 1 decimal: many ties
])
def test_mann_whitney_matches_scipy(n1: int, n2: int, shift: float, round_to: int | None) -> None:
    stats = _scipy_stats()
    rng = np.random.default_rng(n1 * 100 + n2)
    a, b = rng.normal(0, 1, n1), rng.normal(shift, 1, n2)
    if round_to is not None:
        a, b = np.round(a, round_to), np.round(b, round_to)
    ours = mann_whitney_p(a, b)
    theirs = stats.mannwhitneyu(a, b, alternative="two-sided").pvalue
    assert ours == pytest.approx(theirs, rel=0.10)
    # Same method (normal approximation, tie and continuity corrections): the same number.
    asymptotic = stats.mannwhitneyu(a, b, alternative="two-sided", method="asymptotic").pvalue
    assert ours == pytest.approx(asymptotic, rel=1e-9)
    assert mann_whitney_p(b, a) == pytest.approx(ours, rel=1e-12)  # two-sided: symmetric


def test_mann_whitney_on_real_on_off_samples() -> None:
    stats = _scipy_stats()
    from pytest_sme2.evidence.trace import read_etdump

    on = read_etdump(DATA / "tiny_transformer_fp32_xnnpack_simd-on_t1.etdump").e2e_ms_per_run()[1:]
    off = read_etdump(DATA / "tiny_transformer_fp32_xnnpack_simd-off_t1.etdump").e2e_ms_per_run()[1:]
    ours = mann_whitney_p(on, off)
    assert ours == pytest.approx(stats.mannwhitneyu(on, off, alternative="two-sided").pvalue, rel=0.10)
    assert ours < 1e-9  # complete separation of 29 vs 29


def test_mann_whitney_is_conservative_against_the_exact_test() -> None:
    """The normal approximation must never claim more significance than the exact test (it is a guard)."""
    stats = _scipy_stats()
    rng = np.random.default_rng(11)
    for n in (10, 12, 20):
        for shift in (0.2, 0.5, 1.0, 1.5):
            a, b = rng.normal(0, 1, n), rng.normal(shift, 1, n)
            exact = stats.mannwhitneyu(a, b, alternative="two-sided", method="exact").pvalue
            assert mann_whitney_p(a, b) >= 0.9 * exact


def test_mann_whitney_edges() -> None:
    assert mann_whitney_p([], [1.0, 2.0]) == 1.0
    assert mann_whitney_p([1.0, 1.0, 1.0], [1.0, 1.0]) == 1.0  # all tied: no evidence
    assert 0 < mann_whitney_p([1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15, 16]) < 0.01


@pytest.mark.parametrize(("n", "expected"), [(4, 0.029), (5, 0.008), (7, 0.0006)])
def test_min_mann_whitney_p_from_statistics_notes(n: int, expected: float) -> None:
    p = min_mann_whitney_p(n, n)
    assert p == pytest.approx(expected, rel=0.05)
    assert p == 2 / math.comb(2 * n, n)


def test_min_mann_whitney_p_is_the_exact_p_at_perfect_separation() -> None:
    stats = _scipy_stats()
    for n in (3, 4, 5, 7):
        a, b = np.arange(n, dtype=float), np.arange(n, 2 * n, dtype=float)
        exact = stats.mannwhitneyu(a, b, alternative="two-sided", method="exact").pvalue
        assert min_mann_whitney_p(n, n) == pytest.approx(exact, rel=1e-9)
    assert min_mann_whitney_p(4, 4) > 0.01  # 4 blocks per arm can never reach p < 0.01
    assert min_mann_whitney_p(5, 5) < 0.01


# --------------------------------------------------------------------------------- Benjamini-Hochberg


def test_benjamini_hochberg_by_hand() -> None:
    # Sorted 0.005, 0.01, 0.03, 0.04 -> x m/rank = 0.02, 0.02, 0.04, 0.04 (already monotone).
    assert benjamini_hochberg([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    # 0.04 x 2/1 = 0.08 exceeds 0.045 x 2/2 = 0.045: the step-up minimum carries down.
    assert benjamini_hochberg([0.04, 0.045]) == pytest.approx([0.045, 0.045])
    # Capped at 1.
    assert benjamini_hochberg([0.9, 0.8, 0.95]) == pytest.approx([0.95, 0.95, 0.95])
    assert benjamini_hochberg([0.6]) == [0.6]
    assert benjamini_hochberg([]) == []


def test_benjamini_hochberg_matches_scipy() -> None:
    stats = _scipy_stats()
    p = np.random.default_rng(5).uniform(0, 0.2, 12)
    assert benjamini_hochberg(p.tolist()) == pytest.approx(stats.false_discovery_control(p, method="bh").tolist(),
                                                           rel=1e-12)
