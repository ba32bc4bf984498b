"""Pure numerics for latency samples: robust summaries, intervals, rank tests, FDR.

Nothing here knows about traces, runners or pytest. Latency is skewed and noisy, so the summaries
are medians, percentiles and trimmed means; significance comes from rank tests (Mann & Whitney,
1947), never from mean/stddev. Comparisons of two measurements made of blocks (program loads) use
exact, distribution-free inference on block medians (:func:`block_ratio_ci`,
:func:`block_difference_ci`, :func:`block_rank_p`): blocks are the independent units. The
bootstrap intervals (Efron & Tibshirani, 1993; fixed seed, so the same data always gives the same
interval), the former ratio interval and the other methods only tests and benchmarks use live in
``benchmarks/former_stats.py``.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np


def _array(samples: Sequence[float] | np.ndarray) -> np.ndarray:
    return np.asarray(samples, dtype=np.float64).reshape(-1)


def trimmed_mean(samples: Sequence[float] | np.ndarray, proportion: float = 0.1) -> float:
    """Mean after dropping ``proportion`` of the samples from each end (10 % by default)."""
    x = np.sort(_array(samples))
    if x.size == 0:
        return math.nan
    k = math.floor(x.size * proportion)
    core = x[k : x.size - k] if x.size - 2 * k > 0 else x
    return float(core.mean())


@dataclass(frozen=True)
class LatencyStats:
    """Summary of per-run end-to-end latencies (ms). ``cold`` is run 0, excluded from the rest."""

    cold: float | None
    count: int
    median: float
    mean: float
    min: float
    max: float
    p90: float
    p99: float
    std: float
    cv: float
    trimmed_mean: float

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "cold": self.cold, "count": self.count, "median": self.median, "mean": self.mean,
            "min": self.min, "max": self.max, "p90": self.p90, "p99": self.p99, "std": self.std,
            "cv": self.cv, "trimmed_mean": self.trimmed_mean,
        }


def summarize(measured: Sequence[float] | np.ndarray, *, cold: float | None = None) -> LatencyStats:
    """Robust statistics of the measured (warm) samples; a single sample has std 0, not NaN."""
    x = _array(measured)
    if x.size == 0:
        nan = math.nan
        return LatencyStats(cold, 0, nan, nan, nan, nan, nan, nan, nan, nan, nan)
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if x.size > 1 else 0.0
    return LatencyStats(
        cold=cold,
        count=int(x.size),
        median=float(np.median(x)),
        mean=mean,
        min=float(x.min()),
        max=float(x.max()),
        p90=float(np.percentile(x, 90)),
        p99=float(np.percentile(x, 99)),
        std=std,
        cv=std / mean if mean > 0 else math.nan,
        trimmed_mean=trimmed_mean(x),
    )


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided confidence interval.

    ``confidence`` is the level asked for. ``coverage``, when known, is the interval's exact coverage
    under its method's assumptions (distribution-free intervals from ranks reach only discrete levels,
    so they take the first one at or above ``confidence``: 96.8 % for 5 vs 5 blocks at 95 %).
    """

    estimate: float
    low: float
    high: float
    confidence: float
    coverage: float | None = None

    @property
    def half_width_rel(self) -> float:
        """Half the interval's width relative to the estimate (the precision reached)."""
        if not self.estimate:
            return math.inf
        return (self.high - self.low) / 2 / abs(self.estimate)

    def to_dict(self) -> dict[str, float]:
        out = {"estimate": self.estimate, "low": self.low, "high": self.high, "confidence": self.confidence}
        if self.coverage is not None:
            out["coverage"] = self.coverage
        return out


def check_blocks(blocks: Sequence[int], size: int, what: str = "samples") -> np.ndarray:
    """``blocks`` (runs per block, in order) as an array; empty when unknown. Must add up to ``size``."""
    sizes = np.asarray(tuple(blocks), dtype=np.int64)
    if sizes.size and (int(sizes.sum()) != size or (sizes < 1).any()):
        raise ValueError(f"block sizes {tuple(blocks)} do not partition the {size} {what}")
    return sizes


def mann_whitney_p(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value (normal approximation with tie and continuity correction).

    Exact for small samples without ties would be slightly more powerful; with n >= 8 per arm the
    approximation is within a few percent of the exact p, which is all a significance *guard* needs.

    It treats every sample as independent. Runs of one block are not: on all runs of two A/A arms of
    the same ``.pte`` it found p < 0.01 in 4.5-15 % of real interleaved comparisons. For runs in
    blocks use :func:`block_rank_p` (or :func:`rank_test_p` on per-block values).
    """
    x, y = _array(a), _array(b)
    n1, n2 = x.size, y.size
    if n1 == 0 or n2 == 0:
        return 1.0
    combined = np.concatenate([x, y])
    ranks = _rankdata(combined)
    r1 = ranks[:n1].sum()
    u1 = r1 - n1 * (n1 + 1) / 2
    mu = n1 * n2 / 2
    _, counts = np.unique(combined, return_counts=True)
    n = n1 + n2
    tie_term = float((counts**3 - counts).sum()) / (n * (n - 1)) if n > 1 else 0.0
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term))
    if sigma == 0:
        return 1.0
    z = (abs(u1 - mu) - 0.5) / sigma
    return float(min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2))))


def _rankdata(x: np.ndarray) -> np.ndarray:
    """Average ranks (1-based), ties sharing the mean rank."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(x.size, dtype=np.float64)
    sorted_x = x[order]
    boundaries = np.flatnonzero(np.diff(sorted_x)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [x.size]])
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        ranks[order[s:e]] = (s + e + 1) / 2
    return ranks


# ----------------------------------------------------------------------------- inference on blocks
#
# A block is one program load (one runner process): its runs share the machine's state while it ran
# (clock speed, other load, memory layout), so they are not independent samples; blocks are. These
# functions reduce each block to the median of its runs and make exact, distribution-free
# statements about those medians: the Mann-Whitney (Wilcoxon rank-sum) test, and the Hodges-Lehmann
# interval that inverts it (Hodges & Lehmann, Annals of Mathematical Statistics 34, 1963; Hollander,
# Wolfe & Chicken, *Nonparametric Statistical Methods*, 3rd ed., 2014, section 4.3). "Exact" holds
# whatever the distribution of block medians — bursts included — as long as blocks are independent
# and the candidate's block medians are the baseline's shifted (by a factor, on the ratio scale).
# The two-stage block bootstrap (ratio_of_medians_ci) leans on asymptotics that 5 blocks do not
# reach: 95 % nominal, ~91 % real (tests/gate/test_intervals.py).

#: Rank sums beyond this many (subset size x largest total) use the normal approximation: exact
#: counting is for block medians (tens), not for thousands of runs.
_EXACT_RANK_WORK = 20_000_000


def block_medians(samples: Sequence[float] | np.ndarray, blocks: Sequence[int] = ()) -> np.ndarray:
    """The median of each block's runs, in order.

    ``blocks`` are the runs per block (runner process), in order, adding up to ``len(samples)``.
    Unknown blocks (``()``, e.g. a baseline written before block sizes were stored) make all the runs
    *one* block: runs of one process cannot stand in for independent blocks.
    """
    x = _array(samples)
    sizes = check_blocks(blocks, x.size)
    if x.size == 0:
        return np.empty(0)
    if sizes.size == 0:
        return np.array([float(np.median(x))])
    if (sizes == sizes[0]).all():  # the usual case: one vectorised median per block
        equal: np.ndarray = np.median(x.reshape(sizes.size, int(sizes[0])), axis=1)
        return equal
    return np.array([float(np.median(part)) for part in np.split(x, np.cumsum(sizes)[:-1])])


def _rank_sum_counts(scores: tuple[int, ...], size: int) -> np.ndarray:
    """How many ``size``-subsets of items with these integer scores have each total score (index = total)."""
    return _rank_sum_counts_cached(tuple(sorted(scores)), size)


@functools.lru_cache(maxsize=512)
def _rank_sum_counts_cached(scores: tuple[int, ...], size: int) -> np.ndarray:
    total = sum(scores[-size:]) if size else 0
    ways = np.zeros((size + 1, total + 1))
    ways[0, 0] = 1.0
    for s in scores:
        # Take this item into a subset of j-1 items: rows from the previous state only (copied).
        ways[1:, s:] += ways[:-1, : total + 1 - s].copy()
    counts: np.ndarray = ways[size]
    return counts


@functools.lru_cache(maxsize=512)
def _u_cdf(m: int, n: int) -> np.ndarray:
    """P(U <= u) for u = 0..m*n: the Mann-Whitney statistic with m vs n untied values under the null."""
    k = min(m, n)
    doubled = _rank_sum_counts(tuple(range(2, 2 * (m + n) + 1, 2)), k)  # ranks doubled: same scale as ties
    by_w = doubled[::2]  # index = rank sum W of the smaller arm
    by_u = by_w[k * (k + 1) // 2 :]  # U = W - k(k+1)/2
    cdf: np.ndarray = np.cumsum(by_u) / by_u.sum()
    return cdf


def max_block_coverage(m: int, n: int) -> float:
    """The highest confidence any rank interval can have with m vs n blocks: 1 - 2 / C(m+n, m)."""
    if m < 1 or n < 1:
        return 0.0
    return 1 - 2 / math.comb(m + n, m)


def min_blocks_per_arm(confidence: float = 0.95) -> int:
    """Fewest blocks per arm (the same in both) for a rank interval at ``confidence``: 4 at 95 %, 5 at 99 %."""
    k = 1
    while max_block_coverage(k, k) < confidence:
        k += 1
    return k


def _interval_rank(m: int, n: int, confidence: float) -> tuple[int, float] | None:
    """``(k, coverage)``: [k-th smallest, k-th largest] of the m*n differences covers with ``coverage``.

    The coverage of that interval is ``1 - 2 P(U <= k-1)``; k is the largest (the narrowest interval)
    whose coverage is still at least ``confidence``. None when even k = 1 (min .. max) falls short.
    """
    cdf = _u_cdf(m, n)
    coverage = 1 - 2 * cdf[: (m * n + 1) // 2]  # k = 1 .. floor((mn+1)/2)
    ok = np.flatnonzero(coverage >= confidence - 1e-12)
    if ok.size == 0:
        return None
    k = int(ok[-1]) + 1
    return k, float(coverage[k - 1])


def rank_test_p(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Exact two-sided Mann-Whitney p-value of ``a`` vs ``b`` (the permutation distribution of ranks).

    Ties share their mid-rank and the exact distribution is counted with the ties as they are, so the
    test never claims more than the data hold (it matches ``scipy.stats.mannwhitneyu(method="exact")``
    without ties, and a permutation test with them). Meant for block medians; beyond ~10^7 units of
    counting work (thousands of values) it falls back to the normal approximation.
    """
    x, y = _array(a), _array(b)
    m, n = x.size, y.size
    if m == 0 or n == 0:
        return 1.0
    doubled = np.rint(2 * _rankdata(np.concatenate([x, y]))).astype(np.int64)
    if (doubled == doubled[0]).all():
        return 1.0  # all tied: no evidence either way
    small, observed = (m, doubled[:m]) if m <= n else (n, doubled[m:])
    if small * int(np.sort(doubled)[-small:].sum()) > _EXACT_RANK_WORK:
        return mann_whitney_p(x, y)
    counts = _rank_sum_counts(tuple(doubled.tolist()), small)
    probs = counts / counts.sum()
    t = int(observed.sum())
    lower, upper = float(probs[: t + 1].sum()), float(probs[t:].sum())
    return min(1.0, 2 * min(lower, upper))


@dataclass(frozen=True)
class BlockEffect:
    """Candidate vs baseline judged on blocks: an exact interval of the effect and the matching rank test.

    ``estimate`` is the headline: ``median(all candidate runs) / median(all baseline runs)`` (or their
    difference in ms on the ``"difference"`` scale). ``interval`` is the Hodges-Lehmann interval from
    block medians, and ``shift`` its point estimate (the median of the pairwise block differences).
    Both estimate the same number — the factor between the arms' typical run times — when blocks of
    the two arms differ only by that factor; the headline weighs runs, the interval weighs blocks, so
    a disturbed block moves them differently and the headline can fall outside the interval (never in
    2000 simulated A/A comparisons per scenario of tests/gate/test_intervals.py; in 0-1 % of the real
    comparisons of benchmarks/gate_power.py). Verdicts come from the interval only.
    ``interval.estimate`` is the headline, so a message prints one number.

    ``interval`` is None when the arms have too few blocks for the confidence asked (``reason`` says
    how many are needed) or, on the ratio scale, when a block median is not positive: this never
    claims a confidence it does not have. ``p_value`` is the exact two-sided rank test on the same
    block medians; ``p_value <= 1 - interval.coverage`` exactly when the interval excludes no change.
    """

    scale: str
    estimate: float
    shift: float
    interval: Interval | None
    p_value: float
    baseline_blocks: int
    candidate_blocks: int
    reason: str = ""
    #: the blocks were paired by round (:func:`paired_ratio_ci`): a signed-rank interval of per-round differences
    paired: bool = False

    @property
    def test_text(self) -> str:
        """What the p-value is, in words, for a message."""
        what = ("signed-rank test on per-round differences of block medians" if self.paired
                else "rank test on block medians")
        return f"{what} p={self.p_value:.2g}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "scale": self.scale, "estimate": self.estimate, "shift": self.shift,
            "interval": self.interval.to_dict() if self.interval else None, "p_value": self.p_value,
            "baseline_blocks": self.baseline_blocks, "candidate_blocks": self.candidate_blocks,
            "reason": self.reason, "paired": self.paired,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BlockEffect:
        iv = d.get("interval")
        return cls(
            scale=str(d["scale"]), estimate=float(d["estimate"]), shift=float(d["shift"]),
            interval=Interval(**iv) if iv else None, p_value=float(d["p_value"]),
            baseline_blocks=int(d["baseline_blocks"]), candidate_blocks=int(d["candidate_blocks"]),
            reason=str(d.get("reason", "")), paired=bool(d.get("paired", False)),
        )


NOT_POSITIVE = ("a block median is not positive (below the timer's resolution), so there is no ratio: "
                "judge the difference in ms instead")


def _arms(baseline: Sequence[float] | np.ndarray, candidate: Sequence[float] | np.ndarray, *,
          baseline_blocks: Sequence[int], candidate_blocks: Sequence[int],
          ratio: bool) -> tuple[np.ndarray, np.ndarray, float, bool]:
    """Both arms' block medians, the headline estimate (ratio or difference of the runs' medians) and whether
    every block median is positive (a ratio needs it): what the unpaired and the paired effect both start from."""
    a, b = _array(baseline), _array(candidate)
    if a.size == 0 or b.size == 0:
        raise ValueError("both arms need at least one sample")
    ma, mb = block_medians(a, baseline_blocks), block_medians(b, candidate_blocks)
    med_a, med_b = float(np.median(a)), float(np.median(b))
    if not ratio:
        return ma, mb, med_b - med_a, True
    estimate = med_b / med_a if med_a > 0 else math.nan
    return ma, mb, estimate, bool((ma > 0).all() and (mb > 0).all())


def _block_effect(
    baseline: Sequence[float] | np.ndarray,
    candidate: Sequence[float] | np.ndarray,
    *,
    baseline_blocks: Sequence[int],
    candidate_blocks: Sequence[int],
    confidence: float,
    scale: str,
) -> BlockEffect:
    ratio = scale == "ratio"
    ma, mb, estimate, positive = _arms(baseline, candidate, baseline_blocks=baseline_blocks,
                                       candidate_blocks=candidate_blocks, ratio=ratio)
    m, n = ma.size, mb.size
    p = rank_test_p(ma, mb)
    if ratio:
        diffs = np.subtract.outer(np.log(mb), np.log(ma)).ravel() if positive else np.empty(0)
    else:
        diffs = np.subtract.outer(mb, ma).ravel()
    shift = float(np.median(diffs)) if diffs.size else math.nan
    shift = math.exp(shift) if ratio and diffs.size else shift
    effect = BlockEffect(scale, estimate, shift, None, p, m, n)
    if not positive:
        return replace(effect, reason=NOT_POSITIVE)
    rank = _interval_rank(m, n, confidence)
    if rank is None:
        need = min_blocks_per_arm(confidence)
        return replace(effect, reason=(
            f"too few blocks: {m} vs {n} blocks can support at most {max_block_coverage(m, n):.1%} confidence, "
            f"not {confidence:.0%}; need >= {need} blocks per arm"
            + (" (unknown block sizes count as one block)" if min(m, n) == 1 else "")))
    k, coverage = rank
    d = np.sort(diffs)
    low, high = float(d[k - 1]), float(d[d.size - k])
    if ratio:
        low, high = math.exp(low), math.exp(high)
    return replace(effect, interval=Interval(estimate, low, high, confidence, coverage))


def block_ratio_ci(
    baseline: Sequence[float] | np.ndarray,
    candidate: Sequence[float] | np.ndarray,
    *,
    baseline_blocks: Sequence[int] = (),
    candidate_blocks: Sequence[int] = (),
    confidence: float = 0.95,
) -> BlockEffect:
    """The effect ``candidate / baseline`` (above 1: the candidate is slower), from blocks.

    The interval is the exact Hodges-Lehmann interval of the shift in log block medians, turned back
    into a ratio: with m vs n blocks, the k-th smallest to k-th largest of the m*n ratios
    ``median(candidate block j) / median(baseline block i)``, k chosen from the exact Mann-Whitney
    distribution (5 vs 5 at 95 %: the 3rd smallest to the 3rd largest of 25, coverage 96.8 %).
    With too few blocks (fewer than 4 per arm at 95 %, e.g. 2 vs 2, or unknown block sizes, which
    count as one block) the interval is None and ``reason`` says how many are needed.
    See :class:`BlockEffect` for how the headline ``estimate`` relates to the interval.
    """
    return _block_effect(baseline, candidate, baseline_blocks=baseline_blocks, candidate_blocks=candidate_blocks,
                         confidence=confidence, scale="ratio")


def block_difference_ci(
    baseline: Sequence[float] | np.ndarray,
    candidate: Sequence[float] | np.ndarray,
    *,
    baseline_blocks: Sequence[int] = (),
    candidate_blocks: Sequence[int] = (),
    confidence: float = 0.95,
) -> BlockEffect:
    """The effect ``candidate - baseline`` in the samples' unit (ms), from blocks.

    The same method as :func:`block_ratio_ci` on block medians themselves instead of their logs:
    for quantities whose baseline is at or near 0 ms (a category the trace shows as 0.0 ms), where a
    ratio means nothing. ``estimate`` is ``median(candidate runs) - median(baseline runs)``.
    """
    return _block_effect(baseline, candidate, baseline_blocks=baseline_blocks, candidate_blocks=candidate_blocks,
                         confidence=confidence, scale="difference")


# ----------------------------------------------------------------------------- paired rounds
#
# In an interleaved measurement (reference and candidate, or SME2 off and on, alternating within each
# round: A B, B A, ...) block i of one arm and block i of the other ran moments apart, in the same state of
# the machine. What drifts between rounds (clocks, other load, temperature) hits both blocks of a round
# alike, so the per-round difference of log block medians cancels it; the unpaired interval above treats
# the drift as noise and grows with it. The paired interval is the one that inverts the Wilcoxon
# signed-rank test: the Walsh averages (d_i + d_j) / 2, i <= j, of the per-round differences d, from the
# k-th smallest to the k-th largest, k from the exact null distribution of the signed-rank statistic
# (Hollander, Wolfe & Chicken, 3rd ed., 2014, section 3.3). Exact for any distribution of the d symmetric
# about the shift; rounds are the independent units.


@functools.lru_cache(maxsize=256)
def _signed_rank_cdf(n: int) -> np.ndarray:
    """P(T+ <= t), t = 0..n(n+1)/2: the Wilcoxon signed-rank statistic of n untied differences under the null."""
    total = n * (n + 1) // 2
    ways = np.zeros(total + 1)
    ways[0] = 1.0
    for r in range(1, n + 1):
        ways[r:] = ways[r:] + ways[: total + 1 - r].copy()
    cdf: np.ndarray = np.cumsum(ways) / 2.0**n
    return cdf


def max_paired_coverage(n: int) -> float:
    """The highest confidence a signed-rank interval can have with n rounds: 1 - 2 / 2^n (6 rounds: 96.9 %)."""
    return 1 - 2 / 2.0**n if n >= 1 else 0.0


def min_paired_rounds(confidence: float = 0.95) -> int:
    """Fewest paired rounds for a signed-rank interval at ``confidence``: 6 at 95 %, 8 at 99 %."""
    n = 1
    while max_paired_coverage(n) < confidence - 1e-12:
        n += 1
    return n


def signed_rank_p(differences: Sequence[float] | np.ndarray) -> float:
    """Exact two-sided Wilcoxon signed-rank p of ``differences`` (zeros dropped, ties at mid-ranks, counted exactly)."""
    d = _array(differences)
    d = d[d != 0]
    if d.size == 0:
        return 1.0
    doubled = np.rint(2 * _rankdata(np.abs(d))).astype(np.int64)
    total = int(doubled.sum())
    ways = np.zeros(total + 1)
    ways[0] = 1.0
    for r in doubled.tolist():
        ways[r:] = ways[r:] + ways[: total + 1 - r].copy()
    probs = ways / ways.sum()
    t = int(doubled[d > 0].sum())
    return float(min(1.0, 2 * min(probs[: t + 1].sum(), probs[t:].sum())))


def _paired_effect(
    baseline: Sequence[float] | np.ndarray,
    candidate: Sequence[float] | np.ndarray,
    *,
    baseline_blocks: Sequence[int],
    candidate_blocks: Sequence[int],
    confidence: float,
    scale: str,
) -> BlockEffect:
    ratio = scale == "ratio"
    ma, mb, estimate, positive = _arms(baseline, candidate, baseline_blocks=baseline_blocks,
                                       candidate_blocks=candidate_blocks, ratio=ratio)
    if ma.size != mb.size:
        raise ValueError(f"paired rounds need as many blocks in each arm ({ma.size} != {mb.size})")
    n = ma.size
    d = (np.log(mb) - np.log(ma) if ratio else mb - ma) if positive else np.empty(0)  # only a ratio can be non-positive
    effect = BlockEffect(scale, estimate, math.nan, None, signed_rank_p(d) if d.size else 1.0, n, n, paired=True)
    if not positive:
        return replace(effect, reason=NOT_POSITIVE)
    i, j = np.triu_indices(n)
    walsh = np.sort((d[i] + d[j]) / 2)
    shift = float(np.median(walsh))
    effect = replace(effect, shift=math.exp(shift) if ratio else shift)
    cdf = _signed_rank_cdf(n)
    coverage = 1 - 2 * cdf[: (walsh.size + 1) // 2]  # k = 1 .. : [k-th smallest, k-th largest]
    ok = np.flatnonzero(coverage >= confidence - 1e-12)
    if ok.size == 0:
        return replace(effect, reason=(
            f"too few rounds: {n} paired rounds can support at most {max_paired_coverage(n):.1%} confidence, not "
            f"{confidence:.0%}; need >= {min_paired_rounds(confidence)} rounds"))
    k = int(ok[-1]) + 1
    low, high = float(walsh[k - 1]), float(walsh[walsh.size - k])
    if ratio:
        low, high = math.exp(low), math.exp(high)
    return replace(effect, interval=Interval(estimate, low, high, confidence, float(coverage[k - 1])))


def paired_ratio_ci(
    baseline: Sequence[float] | np.ndarray,
    candidate: Sequence[float] | np.ndarray,
    *,
    baseline_blocks: Sequence[int] = (),
    candidate_blocks: Sequence[int] = (),
    confidence: float = 0.95,
) -> BlockEffect:
    """The effect ``candidate / baseline`` from blocks paired by round (block i of each arm ran in round i).

    The exact signed-rank (Walsh average) interval of the per-round log ratio of block medians,
    exponentiated; ``estimate`` is the headline ``median(candidate runs) / median(baseline runs)`` as in
    :func:`block_ratio_ci`, ``shift`` the Hodges-Lehmann one-sample estimate of the per-round ratio, and
    ``p_value`` the exact signed-rank test. Needs as many blocks in both arms; with fewer than 6 rounds at
    95 % the interval is None and ``reason`` says how many are needed.
    """
    return _paired_effect(baseline, candidate, baseline_blocks=baseline_blocks, candidate_blocks=candidate_blocks,
                          confidence=confidence, scale="ratio")


def paired_difference_ci(
    baseline: Sequence[float] | np.ndarray,
    candidate: Sequence[float] | np.ndarray,
    *,
    baseline_blocks: Sequence[int] = (),
    candidate_blocks: Sequence[int] = (),
    confidence: float = 0.95,
) -> BlockEffect:
    """:func:`paired_ratio_ci` on the difference in ms (for categories at or near 0 ms)."""
    return _paired_effect(baseline, candidate, baseline_blocks=baseline_blocks, candidate_blocks=candidate_blocks,
                          confidence=confidence, scale="difference")


def median_interval(values: Sequence[float] | np.ndarray, *, confidence: float = 0.95) -> tuple[Interval | None, str]:
    """Distribution-free interval of the median of independent ``values`` (one per block), from order statistics.

    The k-th smallest to the k-th largest value, k the largest with ``2 P(Bin(n, 1/2) < k) <= 1 - confidence``
    (5 values reach at most 93.8 %, 6 reach 96.9 %). Too few values: ``(None, why)``.
    """
    x = np.sort(_array(values))
    n = x.size
    alpha = 1 - confidence
    if n == 0:
        return None, "no values"
    cdf = np.cumsum([math.comb(n, i) for i in range(n + 1)]) / 2**n
    k = int(np.searchsorted(cdf, alpha / 2, side="right"))
    if k < 1:
        need = next(j for j in range(max(n, 1), 64) if 2 / 2**j <= alpha)
        return None, f"too few blocks: {n} can support at most {1 - 2 / 2**n:.1%} confidence, not {confidence:.0%}; " \
                     f"need >= {need}"
    coverage = 1 - 2 * float(cdf[k - 1])
    return Interval(float(np.median(x)), float(x[k - 1]), float(x[n - k]), confidence, coverage), ""


def times_problem(values: Any, blocks: Any, name: str, blocks_name: str, *, blocks_required: bool = True) -> str:
    """What is wrong with measured times ``values`` (ms) in blocks of ``blocks`` runs, "" when nothing.

    The one check of stored samples, for baselines and for the results and summaries ``compare`` and ``report``
    read: a non-empty list of finite times >= 0 ms (a NaN or a negative time is no measurement), and block sizes
    that are positive whole numbers adding up to the number of times.
    """
    if not isinstance(values, (list, tuple)) or not values:
        return f"{name!r} must be a non-empty list of times in ms, found {shown(values)}"
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0]
    if bad:
        return f"{name!r} holds {shown(bad[0])}, not a finite time >= 0 ms"
    if not isinstance(blocks, (list, tuple)) or any(isinstance(n, bool) or not isinstance(n, int) or n < 1
                                                    for n in blocks) \
            or (blocks and sum(blocks) != len(values)) or (blocks_required and not blocks):
        return (f"{blocks_name!r} must be positive whole numbers adding up to the {len(values)} values of {name!r}, "
                f"found {shown(blocks)}")
    return ""


def shown(value: Any) -> str:
    """A value for an error message: JSON as in the file, NaN and infinities as Python writes them, cut at 40."""
    if isinstance(value, tuple):
        value = list(value)
    try:
        text = json.dumps(value, allow_nan=False)
    except ValueError:  # NaN or an infinity, alone or in a list
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
