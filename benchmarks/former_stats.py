"""Statistics the gate does not use, kept where they are used: tests and benchmarks.

The gate's former ratio interval (a two-stage block bootstrap, :func:`ratio_of_medians_ci`), kept so that
tests/gate/test_intervals.py and benchmarks/coverage.py can show on the same data why the block intervals of
:mod:`pytest_sme2.gate.stats` replaced it (it under-covers with 5 blocks); a bootstrap interval of one sample's
quantile (:func:`median_ci`, the benchmarks' summaries); the smallest Mann-Whitney p; the rank test on
block medians (:func:`block_rank_p`); and Benjamini-Hochberg. Moved out of the package (issue 18: the
package carries only what it runs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from pytest_sme2.gate.stats import Interval, _array, block_medians, check_blocks, rank_test_p

#: Bootstrap resamples. 2,000 keeps the Monte Carlo error of the 2.5 %/97.5 % bounds a few percent
#: of the interval's width — far below the run-to-run noise of any device — at a fifth of the cost
#: of 10,000 (measured in benchmarks/README.md: the same verdict on 99.3 % and 98.7 % of 150 real
#: comparisons in two runs, the gate 2.2x faster, plugin overhead per test 85 -> 35 ms).
BOOTSTRAP_RESAMPLES = 2_000
#: Seed for every bootstrap: verdicts must be reproducible from the stored samples.
BOOTSTRAP_SEED = 20_251_122


def _bootstrap_medians(
    x: np.ndarray, rng: np.random.Generator, resamples: int, blocks: Sequence[int] = ()
) -> np.ndarray:
    """Medians of ``resamples`` bootstrap resamples of ``x``.

    With block sizes (the runs of each runner process, in order), resampling has two stages: the
    blocks with replacement, then the runs of each chosen block. The runs of one block share the
    machine's state while it ran (clocks, other load, the process's memory layout), so they are not
    independent; resampling runs alone claims an interval several times too narrow when that state
    drifts between blocks (Kalibera & Jones, *Rigorous Benchmarking in Reasonable Time*, 2013).
    One block, or unknown blocks, leaves the runs as the only level to resample.
    """
    sizes = check_blocks(blocks, x.size)
    if sizes.size < 2:
        idx = rng.integers(0, x.size, size=(resamples, x.size))
        medians: np.ndarray = np.median(x[idx], axis=1)
        return medians
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    chosen = rng.integers(0, sizes.size, size=(resamples, sizes.size))
    chosen_sizes = sizes[chosen][..., None]
    width = int(sizes.max())
    within = np.floor(rng.random((resamples, sizes.size, width)) * chosen_sizes).astype(np.int64)
    values = x[starts[chosen][..., None] + within]
    if (sizes == width).all():
        medians = np.median(values.reshape(resamples, -1), axis=1)
        return medians
    # A chosen block contributes as many runs as it has: the padding past its size is dropped.
    keep = np.arange(width) < chosen_sizes
    medians = np.nanmedian(np.where(keep, values, np.nan).reshape(resamples, -1), axis=1)
    return medians


# The gate's former interval, kept only so that tests/gate/test_intervals.py and benchmarks/coverage.py can
# show on the same data why it was replaced by the block intervals below (it under-covers with 5 blocks).
def ratio_of_medians_ci(
    baseline: Sequence[float] | np.ndarray,
    candidate: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    baseline_blocks: Sequence[int] = (),
    candidate_blocks: Sequence[int] = (),
) -> Interval:
    """Percentile-bootstrap CI of ``median(candidate) / median(baseline)``.

    Each arm is resampled independently, by blocks then runs when its block sizes are given (see
    :func:`_bootstrap_medians`). A ratio above 1 means the candidate is slower.

    With few blocks this under-covers: 93.2 % for a nominal 95 % with 5 vs 5 drifting blocks
    (tests/gate/test_intervals.py). To judge two arms measured in blocks use :func:`block_ratio_ci`.
    """
    a, b = _array(baseline), _array(candidate)
    if a.size == 0 or b.size == 0:
        raise ValueError("both arms need at least one sample")
    estimate = float(np.median(b) / np.median(a))
    if a.size == 1 and b.size == 1:
        return Interval(estimate, estimate, estimate, confidence)
    rng = np.random.default_rng(seed)
    ratios = (_bootstrap_medians(b, rng, resamples, candidate_blocks)
              / _bootstrap_medians(a, rng, resamples, baseline_blocks))
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return Interval(estimate, float(low), float(high), confidence)


def median_ci(
    samples: Sequence[float] | np.ndarray,
    *,
    quantile: float = 50.0,
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """Percentile-bootstrap CI of one quantile (the median by default) of ``samples``."""
    x = _array(samples)
    estimate = float(np.percentile(x, quantile))
    if x.size < 2:
        return Interval(estimate, estimate, estimate, confidence)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    boots = np.percentile(x[idx], quantile, axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(boots, [tail, 100 - tail])
    return Interval(estimate, float(low), float(high), confidence)


def min_mann_whitney_p(n1: int, n2: int) -> float:
    """Smallest two-sided exact p a Mann-Whitney test can reach with these sample sizes."""
    return 2 / math.comb(n1 + n2, n1)


def block_rank_p(
    baseline: Sequence[float] | np.ndarray,
    candidate: Sequence[float] | np.ndarray,
    *,
    baseline_blocks: Sequence[int] = (),
    candidate_blocks: Sequence[int] = (),
) -> float:
    """Exact two-sided Mann-Whitney p on block medians: the significance test that respects blocks.

    Unlike :func:`mann_whitney_p` on all runs, its false-positive rate stays at or below alpha when
    the machine drifts between blocks. 5 vs 5 blocks reach p = 0.0079 at best (complete separation).
    """
    return rank_test_p(block_medians(baseline, baseline_blocks), block_medians(candidate, candidate_blocks))


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (false discovery rate), in the input order."""
    p = np.asarray(pvalues, dtype=np.float64)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p)
    adjusted = p[order] * m / np.arange(1, m + 1)
    adjusted = np.minimum.accumulate(adjusted[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(adjusted, 1.0)
    return out.tolist()
