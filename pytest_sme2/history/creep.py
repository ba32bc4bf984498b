"""Slow creep: an unchanged artifact whose runs drift further and further, by less than any single gate sees.

The per-run gate calls a slower unchanged artifact "drift" and never fails it (the machine may differ between
sessions). Across runs a steady trend is still worth seeing: over the last ``window`` runs of one artifact, the
Theil-Sen slope of log(median) per run, times the runs, is the creep. It is reported beyond ``bound_pct``.

Whether it may fail CI was decided with numbers (benchmarks/README.md, "History"): on this VM's recorded unchanged
sessions the creep statistic over 20 runs spans the values measured there, so by default creep is *reported*, and
fails ``pytest-sme2 history`` only with ``--fail-on creep``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pytest_sme2.history.series import E2E, Point, Series, short

#: Runs of one unchanged artifact looked at.
WINDOW = 20
#: Creep over the window that is reported, percent (tuned in benchmarks/changepoints.py).
BOUND_PCT = 10.0


@dataclass(frozen=True)
class Creep:
    test_id: str
    identity_id: str
    label: str
    artifact_id: str
    runs: int
    pct: float
    first_commit: str
    last_commit: str

    @property
    def commit_range(self) -> str:
        return f"{short(self.first_commit)}..{short(self.last_commit)}"


def theil_sen_pct(values: Sequence[float]) -> float:
    """The drift over ``values`` (oldest first) in percent: Theil-Sen slope of log values x (n - 1)."""
    y = np.log(np.asarray(values, dtype=float))
    n = len(y)
    if n < 3:
        return 0.0
    i, j = np.triu_indices(n, 1)
    slope = float(np.median((y[j] - y[i]) / (j - i)))
    return (math.exp(slope * (n - 1)) - 1) * 100


def creep_of(series: Series, *, window: int = WINDOW, bound_pct: float = BOUND_PCT) -> Creep | None:
    """The creep of the newest artifact's last ``window`` runs when it exceeds ``bound_pct`` (slower), else None."""
    if series.metric != E2E or not series.points:
        return None
    newest = series.points[-1].artifact_id
    run: list[Point] = []
    for p in reversed(series.points):
        if p.artifact_id != newest:
            break
        run.append(p)
    run = run[:window][::-1]
    if len(run) < window:
        return None
    pct = theil_sen_pct([p.value for p in run])
    if pct < bound_pct:
        return None
    return Creep(test_id=series.test_id, identity_id=series.identity_id, label=series.label, artifact_id=newest,
                 runs=len(run), pct=pct, first_commit=run[0].commit, last_commit=run[-1].commit)
