"""One test's result of one run, as the history keeps it: small, flat, enough to draw and judge a series.

A record is per test x device identity x artifact: the gate's median and status (taken from the verdict, never
recomputed), the per-block medians the series and the change-point search use, the per-category medians for the
stacked breakdown, a short SME2 kernel-evidence summary, and for on/off tests the ratio of the two arms. The run
it belongs to (commit, branch, time) is a :class:`RunInfo`, written once per run file.

A record is not a third shape of a test's result: it is a projection of the one result type,
:class:`pytest_sme2.results.TestResult`, made only by :func:`record_of` (TestResult -> HistoryRecord). It has a type
of its own because the history store keeps the projection, not the results it came from, and is read back alone
(:meth:`HistoryRecord.from_dict`) to draw and judge series.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pytest_sme2.results import TestResult

SCHEMA_VERSION = 1
KIND = "pytest-sme2-history"
#: The status of a test that has no measurement (skipped): not kept in the history.
NOT_KEPT = ("skipped",)


@dataclass(frozen=True)
class RunInfo:
    """One pytest session: when, on which commit and branch, and how that was found out."""

    run_id: str
    time: str
    commit: str = ""
    branch: str = ""
    #: where commit/branch came from: "git", "env:GITHUB_SHA", ... or "none" (neither git nor a CI variable)
    commit_source: str = "none"
    #: the work tree had uncommitted changes: the commit does not describe exactly what ran
    dirty: bool = False
    tool_version: str = ""
    host: str = ""
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {"kind": KIND, **self.__dict__}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunInfo:
        return cls(run_id=str(d["run_id"]), time=str(d["time"]), commit=str(d.get("commit", "")),
                   branch=str(d.get("branch", "")), commit_source=str(d.get("commit_source", "none")),
                   dirty=bool(d.get("dirty", False)), tool_version=str(d.get("tool_version", "")),
                   host=str(d.get("host", "")), schema_version=int(d.get("schema_version", SCHEMA_VERSION)))


@dataclass(frozen=True)
class HistoryRecord:
    """One test's result in one run (on one device identity, for one artifact): :func:`record_of` of a TestResult."""

    test_id: str
    #: ``name dtype backend`` of the model
    label: str
    identity_id: str
    identity: str
    artifact_id: str
    #: the report status (regression, improvement, pass, drift, invalid, inconclusive, recorded, failed, ...)
    status: str
    #: the gate's comparison kind (unchanged / changed-... / "" when not compared)
    comparison: str = ""
    #: the median the gate judged (ms), and its change vs the baseline with the CI, percent, from the verdict
    median_ms: float | None = None
    delta_pct: float | None = None
    delta_ci_pct: tuple[float, float] | None = None
    margin_pct: float | None = None
    #: the baseline's median (ms) the gate compared with
    baseline_ms: float | None = None
    block_medians_ms: tuple[float, ...] = ()
    category_ms: Mapping[str, float] = field(default_factory=dict)
    #: median(off) / median(on) of an on/off pair with its CI, and what the pair is
    ratio: tuple[float, float, float] | None = None
    ratio_label: str = ""
    #: measured on an emulated device: every time is emulated time, a ratio is never a speedup
    emulated: bool = False
    #: SME2 kernel evidence in short: {"sme": n operators on the SME path, "not_sme": n, "sme2_kernels": n}
    kernels: Mapping[str, int] = field(default_factory=dict)
    #: instructions executed under emulation per execution, of the measured arm and of an on/off pair's SME2-off arm
    #: (exact: the same program counts the same, so their series steps exactly where the program changed)
    instructions: int | None = None
    instructions_off: int | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def series_key(self) -> tuple[str, str]:
        """A series is one test on one device identity (its artifact may change along it)."""
        return (self.test_id, self.identity_id)

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["block_medians_ms"] = list(self.block_medians_ms)
        d["category_ms"] = dict(self.category_ms)
        d["kernels"] = dict(self.kernels)
        for key in ("delta_ci_pct", "ratio"):
            d[key] = list(d[key]) if d[key] is not None else None
        return {k: v for k, v in d.items() if v not in (None, "", [], {}) or k in ("status",)}

    def problem(self) -> str:
        """What no measurement can have in this record ("" when nothing): a NaN, infinite or negative median, baseline,
        block median or on/off ratio, a category time that is not finite (``Other`` may dip below 0 in a noisy run)."""
        values: list[tuple[str, float | None]] = [("median_ms", self.median_ms), ("baseline_ms", self.baseline_ms)]
        values += [("block_medians_ms", v) for v in self.block_medians_ms]
        values += [("ratio", v) for v in self.ratio or ()]
        for name, value in values:
            if value is not None and not (math.isfinite(value) and value >= 0):
                return f"{name} is {value!r}, not a finite value >= 0"
        for category, ms in self.category_ms.items():
            if not math.isfinite(ms):
                return f"category_ms[{category!r}] is {ms!r}, not a finite time"
        return ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HistoryRecord:
        def opt_float(key: str) -> float | None:
            v = d.get(key)
            return None if v is None else float(v)

        ci, ratio = d.get("delta_ci_pct"), d.get("ratio")
        return cls(
            test_id=str(d["test_id"]), label=str(d.get("label", "")), identity_id=str(d["identity_id"]),
            identity=str(d.get("identity", "")), artifact_id=str(d.get("artifact_id", "")), status=str(d["status"]),
            comparison=str(d.get("comparison", "")), median_ms=opt_float("median_ms"), delta_pct=opt_float("delta_pct"),
            delta_ci_pct=(float(ci[0]), float(ci[1])) if ci else None, margin_pct=opt_float("margin_pct"),
            baseline_ms=opt_float("baseline_ms"),
            block_medians_ms=tuple(float(x) for x in d.get("block_medians_ms", ())),
            category_ms={str(k): float(v) for k, v in (d.get("category_ms") or {}).items()},
            ratio=(float(ratio[0]), float(ratio[1]), float(ratio[2])) if ratio else None,
            ratio_label=str(d.get("ratio_label", "")), emulated=bool(d.get("emulated", False)),
            kernels={str(k): int(v) for k, v in (d.get("kernels") or {}).items()},
            instructions=int(d["instructions"]) if d.get("instructions") is not None else None,
            instructions_off=int(d["instructions_off"]) if d.get("instructions_off") is not None else None,
            schema_version=int(d.get("schema_version", SCHEMA_VERSION)),
        )


def _blocks(values: Sequence[float], sizes: Sequence[int]) -> Iterator[Sequence[float]]:
    sizes = tuple(sizes) or (len(values),)
    start = 0
    for n in sizes:
        if n > 0:
            yield values[start:start + n]
        start += n


def block_medians(values: Sequence[float], sizes: Sequence[int]) -> tuple[float, ...]:
    """The median of each block (program load / runner process): the independent units of a measurement."""
    return tuple(round(float(np.median(b)), 6) for b in _blocks(values, sizes) if len(b))


def artifact_id(artifact: Mapping[str, Any] | None) -> str:
    """12 hex digits naming the artifact (program, inputs, runtime build); "" when the profile has none."""
    if not artifact:
        return ""
    canonical = json.dumps(artifact, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def record_of(result: TestResult) -> HistoryRecord | None:
    """A :class:`~pytest_sme2.results.TestResult` as a history record; None for a skipped test."""
    from pytest_sme2.device.identity import DeviceIdentity
    from pytest_sme2.errors import Sme2Error

    status = result.status
    if status in NOT_KEPT:
        return None
    profile = result.profile
    verdict = result.verdict
    identity_id = identity = ""
    if profile is not None and profile.identity:
        from pytest_sme2.store.baseline import identity_id as baseline_identity_id

        # The baseline's identity (device facts + runner, dtype, backend, threads): a series is what one baseline
        # file judges, so its id is the same as the baseline file's name carries.
        identity_id = baseline_identity_id(profile.identity)
        try:
            identity = DeviceIdentity.from_dict(profile.identity).describe()
        except Sme2Error:  # an identity this version cannot read: still a record, named by its summary
            identity = str(profile.identity.get("summary", ""))
    elif result.baseline is not None:
        identity_id = result.baseline.identity_id
    if not identity_id:
        identity_id = "unknown"
    e2e = verdict.e2e if verdict is not None else None
    delta = ci = None
    if e2e is not None and e2e.interval is not None:
        delta = round((e2e.interval.estimate - 1) * 100, 3)
        ci = (round((e2e.interval.low - 1) * 100, 3), round((e2e.interval.high - 1) * 100, 3))
    blocks: tuple[float, ...] = ()
    cats: dict[str, float] = {}
    if profile is not None:
        blocks = block_medians(profile.samples_ms, profile.block_sizes)
        analysis = profile.analysis
        if analysis.per_operator:
            sizes = analysis.block_sizes or (analysis.runs_measured,)
            for cat, per_run in analysis.category_per_run_ms.items():
                meds = block_medians(per_run, sizes)
                if meds and any(meds):
                    cats[cat] = round(float(np.median(meds)), 6)
    ratio = None
    label = ""
    if result.comparison is not None:
        iv = result.comparison.speedup
        ratio = (round(iv.estimate, 4), round(iv.low, 4), round(iv.high, 4))
        from pytest_sme2.results import speedup_label

        label = speedup_label(result.comparison, emulated=result.emulated)
    median = result.median_ms
    return HistoryRecord(
        test_id=result.test_id, label=result.label, identity_id=identity_id, identity=identity,
        artifact_id=artifact_id(profile.artifact.to_dict() if profile is not None and profile.artifact else None),
        status=status, comparison=verdict.comparison.value if verdict is not None and verdict.comparison else "",
        median_ms=None if median is None else round(float(median), 6), delta_pct=delta, delta_ci_pct=ci,
        margin_pct=None if e2e is None or e2e.margin is None else round(e2e.margin * 100, 3),
        baseline_ms=None if e2e is None or e2e.baseline is None else round(float(e2e.baseline), 6),
        block_medians_ms=blocks, category_ms=cats, ratio=ratio, ratio_label=label, emulated=result.emulated,
        kernels=_kernels(result),
        instructions=profile.instructions.total if profile is not None and profile.instructions else None,
        instructions_off=(result.profile_off.instructions.total
                          if result.profile_off is not None and result.profile_off.instructions else None),
    )


def _kernels(result: TestResult) -> dict[str, int]:
    out: dict[str, int] = {}
    profile = result.profile
    trace = profile.analysis.trace_evidence if profile is not None else None
    if trace is not None:
        out["sme"] = len(trace.sme)
        out["not_sme"] = len(trace.not_sme)
    evidence = result.kernel_evidence()
    if evidence:
        out["sme2_kernels"] = max(len(a["sme2_kernels"]) for a in evidence["arms"])
    return out


def records_from_results(results: Any, commit: Any = None) -> list[HistoryRecord]:
    """Every kept test of a results document (a ``SessionResults`` or its dict) as history records."""
    from pytest_sme2.results import SessionResults

    if isinstance(results, Mapping):
        results = SessionResults.from_dict(results)
    return [r for r in (record_of(t) for t in results.tests) if r is not None]
