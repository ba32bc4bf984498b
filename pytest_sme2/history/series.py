"""The store's records as series (one metric of one test on one device identity, one point per run) and the
steps found in them, each named by its commit range, size and confidence."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_sme2.history.changepoints import MAX_PVALUE, MIN_PCT, MIN_SIZE, find_steps

#: The gate's median of each run.
E2E = "e2e"
#: median(off)/median(on) of an on/off pair.
RATIO = "ratio"
CATEGORY_PREFIX = "category:"
#: Instructions executed under emulation per execution (the measured arm): exact, so a step is any change.
INSTRUCTIONS = "instructions"
#: Category series whose median is below this (ms) are drawn but not searched: delegated operator times are whole
#: microseconds in the trace (``gate.TICK_MS``), so 1 -> 2 us is a "+100 %" step of the quantization, not of the model.
CATEGORY_FLOOR_MS = 0.01


@dataclass(frozen=True)
class Point:
    run_id: str
    time: str
    commit: str
    branch: str
    artifact_id: str
    status: str
    value: float
    baseline_ms: float | None = None
    categories: Mapping[str, float] = field(default_factory=dict)
    ratio: tuple[float, float, float] | None = None


@dataclass(frozen=True)
class Series:
    test_id: str
    identity_id: str
    identity: str
    label: str
    metric: str
    points: tuple[Point, ...]
    ratio_label: str = ""
    emulated: bool = False

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]


@dataclass(frozen=True)
class FoundStep:
    """A step of one series: between run ``index - 1`` (commit ``before_commit``) and run ``index``."""

    test_id: str
    identity_id: str
    label: str
    metric: str
    index: int
    before_commit: str
    after_commit: str
    before: float
    after: float
    pct: float
    confidence: float
    #: the artifact (program, inputs, build) differs across the step: a change of the project, not of the machine
    artifact_changed: bool
    #: runs measured after the step (how long ago it was)
    runs_after: int
    #: the acknowledgement's reason when a team accepted this step ("" = not acknowledged)
    acknowledged: str = ""

    @property
    def commit_range(self) -> str:
        return f"{short(self.before_commit)}..{short(self.after_commit)}"

    @property
    def kind(self) -> str:
        """regression (slower; a smaller ratio for a speedup), or improvement."""
        worse = self.pct < 0 if self.metric == RATIO else self.pct > 0
        return "regression" if worse else "improvement"

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "commit_range": self.commit_range, "kind": self.kind}


def short(commit: str) -> str:
    return commit[:10] if commit else "unknown"


def build_series(frame: Any, metrics: Sequence[str] | None = None) -> list[Series]:
    """Every series in a store frame (:meth:`.store.HistoryStore.frame`), e2e first, then ratio and categories."""
    out: list[Series] = []
    if frame is None or len(frame) == 0:
        return out
    frame = frame.sort_values(["order"], kind="stable")
    for (test_id, identity_id), rows in frame.groupby(["test_id", "identity_id"], sort=True):
        records = rows.to_dict("records")
        cats = sorted({c for r in records for c in (r["category_ms"] or {})})
        wanted = ([E2E, RATIO, INSTRUCTIONS, *(CATEGORY_PREFIX + c for c in cats)] if metrics is None
                  else list(metrics))
        last = records[-1]
        for metric in wanted:
            points = [p for p in (_point(r, metric) for r in records) if p is not None]
            if points:
                out.append(Series(test_id=str(test_id), identity_id=str(identity_id), identity=str(last["identity"]),
                                  label=str(last["label"]), metric=metric, points=tuple(points),
                                  ratio_label=str(last["ratio_label"] or ""), emulated=bool(last["emulated"])))
    return out


def _num(v: Any) -> float | None:
    """A number from a frame cell: pandas turns a missing float into NaN."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


#: Runs whose measurement the gate did not trust (a busy machine, a failed run) are left out of every series: their
#: medians are the disturbance, not the model.
UNTRUSTED = ("invalid", "failed")


def _point(r: Mapping[str, Any], metric: str) -> Point | None:
    if metric == INSTRUCTIONS:
        # A count does not depend on the machine's load: a run whose time was invalid counted all the same.
        if r["status"] == "failed":
            return None
        value = _num(r["instructions"])
    elif r["status"] in UNTRUSTED:
        return None
    elif metric == E2E:
        value = _num(r["median_ms"])
    elif metric == RATIO:
        value = r["ratio"][0] if r["ratio"] else None
    else:
        value = (r["category_ms"] or {}).get(metric.removeprefix(CATEGORY_PREFIX))
    if value is None or not value > 0:
        return None
    return Point(run_id=r["run_id"], time=r["time"], commit=r["commit"], branch=r["branch"],
                 artifact_id=r["artifact_id"], status=r["status"], value=float(value),
                 baseline_ms=_num(r["baseline_ms"]),
                 categories=dict(r["category_ms"] or {}), ratio=r["ratio"])


def count_steps(series: Series) -> list[FoundStep]:
    """The steps of a count series: every run whose count differs from the run before it (a count has no noise, so
    no statistics: the step is where it is, confidence 1)."""
    pts = series.points
    return [FoundStep(test_id=series.test_id, identity_id=series.identity_id, label=series.label, metric=series.metric,
                      index=i, before_commit=pts[i - 1].commit, after_commit=pts[i].commit, before=pts[i - 1].value,
                      after=pts[i].value, pct=(pts[i].value / pts[i - 1].value - 1) * 100, confidence=1.0,
                      artifact_changed=pts[i - 1].artifact_id != pts[i].artifact_id, runs_after=len(pts) - i)
            for i in range(1, len(pts)) if pts[i].value != pts[i - 1].value]


def steps_of(series: Series, *, min_size: int = MIN_SIZE, max_pvalue: float = MAX_PVALUE,
             min_pct: float = MIN_PCT) -> list[FoundStep]:
    pts = series.points
    out: list[FoundStep] = []
    if series.metric == INSTRUCTIONS:
        return count_steps(series)
    if series.metric.startswith(CATEGORY_PREFIX) and float(np.median(series.values)) < CATEGORY_FLOOR_MS:
        return out
    for s in find_steps(series.values, min_size=min_size, max_pvalue=max_pvalue, min_pct=min_pct):
        before, after = pts[s.index - 1], pts[s.index]
        artifacts_before = {p.artifact_id for p in pts[max(0, s.index - min_size):s.index]}
        artifacts_after = {p.artifact_id for p in pts[s.index:s.index + min_size]}
        out.append(FoundStep(
            test_id=series.test_id, identity_id=series.identity_id, label=series.label, metric=series.metric,
            index=s.index, before_commit=before.commit, after_commit=after.commit, before=s.before, after=s.after,
            pct=s.pct, confidence=s.confidence, artifact_changed=artifacts_before != artifacts_after,
            runs_after=len(pts) - s.index))
    return out


def all_steps(series: Iterable[Series], **tuning: Any) -> list[FoundStep]:
    return [step for s in series for step in steps_of(s, **tuning)]
