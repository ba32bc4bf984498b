"""SME2 off vs on of one model, as numbers: end-to-end and per-category speedups, the bottleneck shift, operators,
kernel evidence.

:class:`OnOffComparison` is what the reports render and the results document stores; the values here are plain
numbers (speedups are ``off / on``, 2.0 = twice as fast with SME2; end-to-end and per-category speedups are ratios of
medians with the gate's block interval, :func:`pytest_sme2.gate.stats.block_ratio_ci`; operator speedups are ratios
of per-run totals). :func:`pytest_sme2.report.comparison.compare_on_off` computes one and writes its sentences.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_sme2.analysis.run import Analysis, OperatorDetail
from pytest_sme2.evidence.categories import CATEGORIES
from pytest_sme2.evidence.kernels import KernelLog, isa_counts, kernel_log_from_dict, side_by_side
from pytest_sme2.gate.checks import MIN_CATEGORY_SHARE
from pytest_sme2.gate.stats import Interval, LatencyStats, block_ratio_ci
from pytest_sme2.gate.verdict import Check, GateConfig

SCHEMA_VERSION = 1


#: An operator or category below this speedup counts as "not accelerated".
NOT_ACCELERATED = 1.10


def _interval_from(d: Mapping[str, Any] | None) -> Interval | None:
    return Interval(**{k: float(v) for k, v in d.items()}) if d else None


def _stats_from(d: Mapping[str, Any]) -> LatencyStats:
    cold = d.get("cold")
    return LatencyStats(
        cold=None if cold is None else float(cold), count=int(d["count"]),
        **{k: float(d[k]) for k in ("median", "mean", "min", "max", "p90", "p99", "std", "cv", "trimmed_mean")},
    )


def _ratio(off: float, on: float) -> float:
    return off / on if on > 0 and off >= 0 else math.nan


@dataclass(frozen=True)
class CategoryShift:
    """One category in both builds: time per run (mean), share of E2E, and the speedup with its CI."""

    category: str
    off_ms: float
    on_ms: float
    off_share: float
    on_share: float
    #: median(off per run) / median(on per run) with a bootstrap CI; None when a median is 0
    speedup_ci: Interval | None = None
    #: False when the category is under 2 % of E2E in both builds (XNNPACK's 1 µs resolution)
    resolvable: bool = True

    @property
    def speedup(self) -> float:
        """The CI's point estimate when there is one, else the ratio of the mean times."""
        return self.speedup_ci.estimate if self.speedup_ci else _ratio(self.off_ms, self.on_ms)

    @property
    def share_change_pp(self) -> float:
        return (self.on_share - self.off_share) * 100

    @property
    def saved_ms(self) -> float:
        return self.off_ms - self.on_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category, "off_ms": self.off_ms, "on_ms": self.on_ms,
            "off_share": self.off_share, "on_share": self.on_share,
            "speedup_ci": self.speedup_ci.to_dict() if self.speedup_ci else None,
            "resolvable": self.resolvable,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CategoryShift:
        return cls(
            category=str(d["category"]), off_ms=float(d["off_ms"]), on_ms=float(d["on_ms"]),
            off_share=float(d["off_share"]), on_share=float(d["on_share"]),
            speedup_ci=_interval_from(d.get("speedup_ci")), resolvable=bool(d.get("resolvable", True)),
        )


@dataclass(frozen=True)
class OperatorSpeedup:
    """One operator type present in both builds: per-run totals, shares and kernel hints."""

    name: str
    category: str
    backend: str
    off_ms: float
    on_ms: float
    off_share: float
    on_share: float
    off_count: float = 0.0
    on_count: float = 0.0
    kernel_off: str | None = None
    kernel_on: str | None = None

    @property
    def speedup(self) -> float:
        return _ratio(self.off_ms, self.on_ms)

    @property
    def saved_ms(self) -> float:
        return self.off_ms - self.on_ms

    @property
    def portable(self) -> bool:
        return self.backend == "portable"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "category": self.category, "backend": self.backend,
            "off_ms": self.off_ms, "on_ms": self.on_ms, "off_share": self.off_share, "on_share": self.on_share,
            "off_count": self.off_count, "on_count": self.on_count,
            "kernel_off": self.kernel_off, "kernel_on": self.kernel_on,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OperatorSpeedup:
        return cls(
            name=str(d["name"]), category=str(d["category"]), backend=str(d.get("backend", "")),
            off_ms=float(d["off_ms"]), on_ms=float(d["on_ms"]), off_share=float(d["off_share"]),
            on_share=float(d["on_share"]), off_count=float(d.get("off_count", 0.0)),
            on_count=float(d.get("on_count", 0.0)), kernel_off=d.get("kernel_off"), kernel_on=d.get("kernel_on"),
        )


@dataclass(frozen=True)
class KernelEvidence:
    """What the XNNPACK logs of the two builds prove about the kernels that ran.

    ``off``/``on`` are ``KernelLog.to_dict()`` forms (None when that build has no log).
    """

    off: Mapping[str, Any] | None
    on: Mapping[str, Any] | None

    @property
    def off_log(self) -> KernelLog | None:
        return kernel_log_from_dict(self.off) if self.off is not None else None

    @property
    def on_log(self) -> KernelLog | None:
        return kernel_log_from_dict(self.on) if self.on is not None else None

    @property
    def on_sme2_kernels(self) -> tuple[str, ...]:
        log = self.on_log
        return log.sme2_kernels if log else ()

    @property
    def off_sme2_kernels(self) -> tuple[str, ...]:
        log = self.off_log
        return log.sme2_kernels if log else ()

    @property
    def sme2_missing(self) -> bool:
        """The SME2-on build has a kernel log, and it names no SME2 kernel."""
        log = self.on_log
        return log is not None and bool(log.kernels) and not log.sme2_kernels

    @property
    def changed_kinds(self) -> tuple[str, ...]:
        off, on = self.off_log, self.on_log
        if off is None or on is None:
            return ()
        return tuple(r.kind for r in side_by_side(off, on) if r.changed)

    def isas(self, which: str) -> dict[str, int]:
        """Kernel count per ISA for ``"off"`` or ``"on"`` (empty without a log)."""
        log = self.off_log if which == "off" else self.on_log
        return isa_counts(log) if log else {}

    def to_dict(self) -> dict[str, Any]:
        return {"off": dict(self.off) if self.off is not None else None,
                "on": dict(self.on) if self.on is not None else None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> KernelEvidence:
        return cls(off=d.get("off"), on=d.get("on"))


@dataclass(frozen=True)
class OnOffComparison:
    """The SME2 off vs on comparison of one model, ready to report."""

    off_label: str
    on_label: str
    off_source: str
    on_source: str
    off_e2e: LatencyStats
    on_e2e: LatencyStats
    #: ``speedup`` / ``min_speedup`` check: interval = median(off)/median(on) with its CI
    speedup_check: Check
    per_operator: bool
    categories: tuple[CategoryShift, ...] = ()
    #: operators present in both builds, most time saved first
    operators: tuple[OperatorSpeedup, ...] = ()
    only_off: tuple[str, ...] = ()
    only_on: tuple[str, ...] = ()
    kernels: KernelEvidence | None = None
    #: the sentences a reader should see first: speedup, then the shift, then kernel evidence
    findings: tuple[str, ...] = ()
    #: the bottleneck-shift sentences alone (a subset of ``findings``)
    shift: tuple[str, ...] = ()
    #: measured on an emulated device: the ratio is of emulated time, never a device's speedup
    emulated: bool = False
    #: what the trace's operator names and an emulator's log say about SME2 kernels, without an XNNPACK log
    other_kernel_evidence: str = ""

    @property
    def speedup(self) -> Interval:
        iv = self.speedup_check.interval
        if iv is None:  # speedup_check always sets one; a hand-built Check might not
            est = _ratio(self.off_e2e.median, self.on_e2e.median)
            return Interval(est, est, est, 0.95)
        return iv

    def category(self, name: str) -> CategoryShift | None:
        return next((c for c in self.categories if c.category == name), None)

    @property
    def dominant_off(self) -> str:
        return max(self.categories, key=lambda c: c.off_ms).category if self.categories else ""

    @property
    def dominant_on(self) -> str:
        return max(self.categories, key=lambda c: c.on_ms).category if self.categories else ""

    def top_accelerated(self, n: int = 5) -> tuple[OperatorSpeedup, ...]:
        """Operators that saved the most time per run, among those with speedup >= 1.10x."""
        ok = [o for o in self.operators if math.isfinite(o.speedup) and o.speedup >= NOT_ACCELERATED]
        return tuple(sorted(ok, key=lambda o: -o.saved_ms)[:n])

    def not_accelerated(self, *, min_share: float = 0.01) -> tuple[OperatorSpeedup, ...]:
        """Operators under 1.10x that still weigh at least ``min_share`` of E2E with SME2 on."""
        slow = [o for o in self.operators if o.on_share >= min_share
                and (not math.isfinite(o.speedup) or o.speedup < NOT_ACCELERATED)]
        return tuple(sorted(slow, key=lambda o: -o.on_ms))

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "off_label": self.off_label, "on_label": self.on_label,
            "off_source": self.off_source, "on_source": self.on_source,
            "off_e2e": self.off_e2e.to_dict(), "on_e2e": self.on_e2e.to_dict(),
            "speedup_check": self.speedup_check.to_dict(),
            "per_operator": self.per_operator,
            "categories": [c.to_dict() for c in self.categories],
            "operators": [o.to_dict() for o in self.operators],
            "only_off": list(self.only_off), "only_on": list(self.only_on),
            "kernels": self.kernels.to_dict() if self.kernels else None,
            "findings": list(self.findings),
            "shift": list(self.shift),
            "emulated": self.emulated,
            "other_kernel_evidence": self.other_kernel_evidence,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OnOffComparison:
        from pytest_sme2.errors import check_schema_version

        check_schema_version(d, reads=SCHEMA_VERSION, what="on/off comparison", missing=SCHEMA_VERSION)
        kernels = d.get("kernels")
        return cls(
            off_label=str(d["off_label"]), on_label=str(d["on_label"]),
            off_source=str(d.get("off_source", "")), on_source=str(d.get("on_source", "")),
            off_e2e=_stats_from(d["off_e2e"]), on_e2e=_stats_from(d["on_e2e"]),
            speedup_check=Check.from_dict(d["speedup_check"]),
            per_operator=bool(d.get("per_operator", False)),
            categories=tuple(CategoryShift.from_dict(c) for c in d.get("categories", ())),
            operators=tuple(OperatorSpeedup.from_dict(o) for o in d.get("operators", ())),
            only_off=tuple(str(x) for x in d.get("only_off", ())),
            only_on=tuple(str(x) for x in d.get("only_on", ())),
            kernels=KernelEvidence.from_dict(kernels) if kernels else None,
            findings=tuple(str(x) for x in d.get("findings", ())),
            shift=tuple(str(x) for x in d.get("shift", ())),
            emulated=bool(d.get("emulated", False)),
            other_kernel_evidence=str(d.get("other_kernel_evidence", "")),
        )


def _blocks_of(analysis: Analysis, runs: int) -> tuple[int, ...]:
    """The analysis' block sizes when ``runs`` per-run values are its measured runs."""
    return analysis.block_sizes if sum(analysis.block_sizes) == runs else ()


def category_shifts(off: Analysis, on: Analysis, config: GateConfig) -> tuple[CategoryShift, ...]:
    off_share, on_share = off.category_share, on.category_share
    rows = []
    for cat in CATEGORIES:
        a = np.asarray(off.category_per_run_ms.get(cat, ()), dtype=float)
        b = np.asarray(on.category_per_run_ms.get(cat, ()), dtype=float)
        ci = None
        # A zero median (sub-µs operators, or a category the model lacks) has no ratio to bootstrap.
        if a.size and b.size and np.median(a) > 0 and np.median(b) > 0:
            effect = block_ratio_ci(b, a, baseline_blocks=_blocks_of(on, b.size),
                                    candidate_blocks=_blocks_of(off, a.size), confidence=config.confidence)
            ci = effect.interval
        resolvable = max(off_share.get(cat, 0.0), on_share.get(cat, 0.0)) >= MIN_CATEGORY_SHARE
        rows.append(CategoryShift(
            category=cat, off_ms=float(off.category_totals_ms.get(cat, 0.0)),
            on_ms=float(on.category_totals_ms.get(cat, 0.0)), off_share=float(off_share.get(cat, 0.0)),
            on_share=float(on_share.get(cat, 0.0)), speedup_ci=ci, resolvable=resolvable,
        ))
    return tuple(rows)


def operator_speedups(
    off: Analysis, on: Analysis
) -> tuple[tuple[OperatorSpeedup, ...], tuple[str, ...], tuple[str, ...]]:
    off_ops: dict[str, OperatorDetail] = {o.name: o for o in off.operator_details}
    on_ops: dict[str, OperatorDetail] = {o.name: o for o in on.operator_details}
    both = [
        OperatorSpeedup(
            name=name, category=b.category, backend=b.backend, off_ms=a.total_ms, on_ms=b.total_ms,
            off_share=a.share, on_share=b.share, off_count=a.count, on_count=b.count,
            kernel_off=a.kernel_hint, kernel_on=b.kernel_hint,
        )
        for name, b in on_ops.items() if (a := off_ops.get(name)) is not None
    ]
    both.sort(key=lambda o: (-o.saved_ms, o.name))
    only_off = tuple(n for n in off_ops if n not in on_ops)
    only_on = tuple(n for n in on_ops if n not in off_ops)
    return tuple(both), only_off, only_on


def kernel_evidence(off: Analysis, on: Analysis, off_kernels: KernelLog | None,
                     on_kernels: KernelLog | None) -> KernelEvidence | None:
    off_d = off_kernels.to_dict() if off_kernels else (dict(off.kernel_log) if off.kernel_log else None)
    on_d = on_kernels.to_dict() if on_kernels else (dict(on.kernel_log) if on.kernel_log else None)
    if off_d is None and on_d is None:
        return None
    return KernelEvidence(off=off_d, on=on_d)
