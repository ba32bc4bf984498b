"""Steps in a series: E-divisive means with a Student t-test, as Apache Otava (ex-Hunter) does.

A series is one metric of one test on one device identity, one value per run (the gate's median, or a
category's median), oldest first. The search works on log values, so a step is a ratio whatever the scale:

1. over a segment, the split that maximizes the energy statistic of Matteson & James (2014)
   ``Q(tau) = m n / (m + n) * (2/(m n) sum|x - y| - 1/C(m,2) sum|x - x'| - 1/C(n,2) sum|y - y'|)``
   (left ``x`` of size m, right ``y`` of size n) is the candidate;
2. it is kept when a Welch t-test of the two sides (log values; on a side of 4 or more runs, points further than
   5 MADs from its median are left out: a session disturbed by other load) gives ``p < max_pvalue`` *and* the step
   (ratio of the sides' medians) is at least ``min_pct`` — Otava's t-test replaces the original permutation test
   (deterministic, fast), the size floor keeps a shared machine's between-session drift from being called a step;
3. both sides are searched again (binary segmentation) until nothing passes; then, as Otava re-tests its
   candidates, every kept step is tested again against its neighbouring steps' segments and dropped if it no
   longer passes.

A step needs ``min_size`` runs on each side: a step after the newest run is confirmed only ``min_size - 1`` runs
later (the PyTorch HUD needs two consecutive violations; this is the same idea). The defaults are tuned on this
VM's recorded sessions (``benchmarks/changepoints.py``, numbers in benchmarks/README.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Defaults, tuned in benchmarks/changepoints.py on recorded sessions of this VM (benchmarks/README.md).
MIN_SIZE = 3
MAX_PVALUE = 0.001
MIN_PCT = 5.0


@dataclass(frozen=True)
class Step:
    """A change between run ``index - 1`` and run ``index`` of a series."""

    #: the first run after the step (0-based position in the series)
    index: int
    #: medians of the segments before and after (same unit as the series)
    before: float
    after: float
    #: Welch t-test p-value of the two segments (log values)
    pvalue: float

    @property
    def pct(self) -> float:
        """The step as a percentage: + slower (for a latency), - faster."""
        return (self.after / self.before - 1) * 100 if self.before else math.nan

    @property
    def confidence(self) -> float:
        return 1 - self.pvalue


def _welch_p(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided Welch t-test p-value (scipy-free: the t distribution's tail from the regularized beta)."""
    mx, my = x.mean(), y.mean()
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    se2 = vx + vy
    if se2 <= 0:
        return 0.0 if mx != my else 1.0
    t = (mx - my) / math.sqrt(se2)
    df = se2 ** 2 / ((vx ** 2) / (len(x) - 1) + (vy ** 2) / (len(y) - 1)) if vx + vy > 0 else len(x) + len(y) - 2
    return _t_sf2(abs(t), df)


def _t_sf2(t: float, df: float) -> float:
    """P(|T| > t) for Student's t with ``df`` degrees of freedom: I_{df/(df+t^2)}(df/2, 1/2)."""
    x = df / (df + t * t)
    return float(_betainc(df / 2, 0.5, x))


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function (Numerical Recipes' continued fraction)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)
    if x < (a + 1) / (a + b + 2):
        return math.exp(lbeta) * _betacf(a, b, x) / a
    return 1 - math.exp(lbeta) * _betacf(b, a, 1 - x) / b


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1, a - 1
    c, d = 1.0, 1 - qab * x / qap
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c if abs(1 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1 + aa * d
        d = 1 / (d if abs(d) > tiny else tiny)
        c = 1 + aa / c if abs(1 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1) < 3e-14:
            break
    return h


#: A point further than this many MADs (scaled to a standard deviation) from its side's median is left out of the
#: t-test: a session disturbed by other load is a single high point, and one such point inflates a side's variance
#: enough to hide a real step (benchmarks/changepoints.py measured it on this VM's sessions). The MAD is floored at
#: ``TRIM_FLOOR`` (log units, ~0.5 %), so a very quiet side does not turn ordinary noise into outliers.
TRIM_MADS = 5.0
TRIM_FLOOR = 0.005


def _trim(side: np.ndarray) -> np.ndarray:
    if len(side) < 4:
        return side
    med = np.median(side)
    mad = max(float(np.median(np.abs(side - med))) * 1.4826, TRIM_FLOOR)
    kept = side[np.abs(side - med) <= TRIM_MADS * mad]
    return kept if len(kept) >= 2 else side


class _Energy:
    """Sums of |x_i - x_j| over rectangles of the distance matrix in O(1) (2-D prefix sums)."""

    def __init__(self, values: np.ndarray) -> None:
        dist = np.abs(values[:, None] - values[None, :])
        self.s = np.zeros((len(values) + 1, len(values) + 1))
        self.s[1:, 1:] = dist.cumsum(0).cumsum(1)

    def total(self, i0: int, i1: int, j0: int, j1: int) -> float:
        s = self.s
        return float(s[i1, j1] - s[i0, j1] - s[i1, j0] + s[i0, j0])

    def best_split(self, a: int, b: int, min_size: int) -> int | None:
        """The tau in [a + min_size, b - min_size] with the largest energy statistic, or None."""
        best, best_q = None, -math.inf
        for tau in range(a + min_size, b - min_size + 1):
            m, n = tau - a, b - tau
            cross = self.total(a, tau, tau, b) * 2 / (m * n)
            within_x = self.total(a, tau, a, tau) / (m * (m - 1)) if m > 1 else 0.0
            within_y = self.total(tau, b, tau, b) / (n * (n - 1)) if n > 1 else 0.0
            q = m * n / (m + n) * (cross - within_x - within_y)
            if q > best_q:
                best, best_q = tau, q
        return best


def find_steps(values: Sequence[float], *, min_size: int = MIN_SIZE, max_pvalue: float = MAX_PVALUE,
               min_pct: float = MIN_PCT) -> list[Step]:
    """The steps of a series (oldest value first), in order. Values must be positive (times, ratios)."""
    x = np.log(np.asarray([v for v in values], dtype=float))
    if len(x) < 2 * min_size or not np.all(np.isfinite(x)):
        return []
    energy = _Energy(x)

    def passes(a: int, tau: int, b: int) -> tuple[bool, float]:
        left, right = x[a:tau], x[tau:b]
        p = _welch_p(_trim(left), _trim(right))
        ratio = math.exp(float(np.median(right) - np.median(left)))
        return p < max_pvalue and abs(ratio - 1) * 100 >= min_pct, p

    cuts: list[int] = []
    todo = [(0, len(x))]
    while todo:
        a, b = todo.pop()
        if b - a < 2 * min_size:
            continue
        tau = energy.best_split(a, b, min_size)
        if tau is None:
            continue
        ok, _ = passes(a, tau, b)
        if ok:
            cuts.append(tau)
            todo += [(a, tau), (tau, b)]
    # Re-test each step against its neighbours' segments (Otava): a split found inside a long segment may not hold
    # once the segment is cut further.
    changed = True
    while changed and cuts:
        changed = False
        cuts.sort()
        bounds = [0, *cuts, len(x)]
        for i in range(1, len(bounds) - 1):
            ok, _ = passes(bounds[i - 1], bounds[i], bounds[i + 1])
            if not ok:
                cuts.remove(bounds[i])
                changed = True
                break
    cuts.sort()
    bounds = [0, *cuts, len(x)]
    steps = []
    for i in range(1, len(bounds) - 1):
        a, tau, b = bounds[i - 1], bounds[i], bounds[i + 1]
        _, p = passes(a, tau, b)
        steps.append(Step(index=tau, before=float(np.exp(np.median(x[a:tau]))),
                          after=float(np.exp(np.median(x[tau:b]))), pvalue=p))
    return steps
