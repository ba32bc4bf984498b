"""SME2 off vs on: end-to-end speedup, category speedups, bottleneck shift, operators, kernel evidence.

:func:`compare_on_off` takes the two analyses of one model (same trace kind, same warm-up) and
returns an :class:`OnOffComparison`: plain numbers and the sentences the reports print. Speedups are
``off / on`` (2.0 = twice as fast with SME2); end-to-end and per-category speedups are ratios of
medians with the gate's block interval (:func:`pytest_sme2.gate.stats.block_ratio_ci`), operator
speedups are ratios of per-run totals (the analysis keeps no per-run operator values).

The seeds' key insight is the *shift*: once SME2 shrinks Convolution/GEMM, another category (often
Data Movement, or portable operators in Other) becomes the largest. The shift is reported in
percentage points of E2E per category, and in one sentence when the dominant category changes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from pytest_sme2.analysis.run import Analysis, OperatorDetail
from pytest_sme2.evidence.categories import CATEGORIES
from pytest_sme2.evidence.kernels import KernelLog
from pytest_sme2.gate.checks import MIN_CATEGORY_SHARE, speedup_check
from pytest_sme2.gate.stats import Interval, LatencyStats, block_ratio_ci
from pytest_sme2.gate.verdict import Check, GateConfig, Samples
from pytest_sme2.report.kernel_view import isa_counts, kernel_log_from_dict, side_by_side

SCHEMA_VERSION = 1
#: An operator or category below this speedup counts as "not accelerated".
NOT_ACCELERATED = 1.10
#: A category must move by more than this many percentage points of E2E to be called a shift.
SHIFT_PP = 2.0


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
        from pytest_sme2.errors import ConfigError

        version = int(d.get("schema_version", 0))
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"on/off comparison schema_version {version} is newer than this pytest-sme2 reads "
                f"({SCHEMA_VERSION}); upgrade pytest-sme2"
            )
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


def _category_shifts(off: Analysis, on: Analysis, config: GateConfig) -> tuple[CategoryShift, ...]:
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


def _operator_speedups(
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


def _kernel_evidence(off: Analysis, on: Analysis, off_kernels: KernelLog | None,
                     on_kernels: KernelLog | None) -> KernelEvidence | None:
    off_d = off_kernels.to_dict() if off_kernels else (dict(off.kernel_log) if off.kernel_log else None)
    on_d = on_kernels.to_dict() if on_kernels else (dict(on.kernel_log) if on.kernel_log else None)
    if off_d is None and on_d is None:
        return None
    return KernelEvidence(off=off_d, on=on_d)


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _speedup_sentence(cmp: OnOffComparison) -> str:
    iv = cmp.speedup
    where = (f"median {cmp.off_e2e.median:.3f} → {cmp.on_e2e.median:.3f} ms, "
             f"95% CI {iv.low:.2f}×–{iv.high:.2f}×")
    if cmp.emulated:
        return (f"Emulated time, not device time: {cmp.on_label} took {1 / iv.estimate:.2f}× the emulated time of "
                f"{cmp.off_label} ({where}). QEMU translates every instruction and emulates SME more slowly than "
                "NEON, so this is no SME2 speedup; what this device shows is which kernels ran and whether the "
                "outputs agree.")
    if iv.low > 1:
        return f"{cmp.on_label} is {iv.estimate:.2f}× faster end to end than {cmp.off_label} ({where})."
    if iv.high < 1:
        return f"{cmp.on_label} is SLOWER end to end than {cmp.off_label}: {iv.estimate:.2f}× ({where})."
    return (f"No clear end-to-end difference between {cmp.off_label} and {cmp.on_label}: "
            f"{iv.estimate:.2f}×, and the interval includes 1× ({where}).")


def _shift_sentences(cmp: OnOffComparison) -> tuple[str, ...]:
    out: list[str] = []
    iv = cmp.speedup
    if cmp.per_operator and cmp.categories:
        by_name = {c.category: c for c in cmp.categories}
        d_off, d_on = cmp.dominant_off, cmp.dominant_on
        c_off, c_on = by_name[d_off], by_name[d_on]
        if d_off != d_on:
            out.append(
                f"{d_on} became the largest category with {cmp.on_label} ({_pct(c_on.off_share)} → "
                f"{_pct(c_on.on_share)} of E2E), overtaking {d_off} ({_pct(c_off.off_share)} → "
                f"{_pct(c_off.on_share)})."
            )
        else:
            out.append(f"{d_on} stays the largest category ({_pct(c_on.off_share)} of E2E with "
                       f"{cmp.off_label}, {_pct(c_on.on_share)} with {cmp.on_label}).")
        grown = max(cmp.categories, key=lambda c: c.share_change_pp)
        # The new dominant category already has its sentence; otherwise name the biggest riser.
        if grown.share_change_pp > SHIFT_PP and not (d_off != d_on and grown.category == d_on):
            how = (f"it sped up {grown.speedup:.2f}×" if math.isfinite(grown.speedup)
                   else "its time did not shrink")
            out.append(
                f"{grown.category} grew from {_pct(grown.off_share)} to {_pct(grown.on_share)} of E2E "
                f"({grown.share_change_pp:+.1f} pp; {grown.off_ms:.3f} → {grown.on_ms:.3f} ms): {how} "
                f"against {iv.estimate:.2f}× end to end, so it weighs more now."
            )
    return tuple(out)


def _kernel_sentence(cmp: OnOffComparison) -> str:
    ev = cmp.kernels
    if (ev is None or ev.on is None) and cmp.other_kernel_evidence:
        return cmp.other_kernel_evidence
    if ev is None:
        return "No XNNPACK kernel log for either build: which kernels ran is not confirmed."
    if ev.on is None:
        return f"No XNNPACK kernel log for {cmp.on_label}: SME2 kernel use is not confirmed."
    if ev.sme2_missing:
        isas = ", ".join(list(ev.isas("on"))[:4])
        return f"{cmp.on_label} selected no SME2 kernel: its XNNPACK log names none (kernels target {isas})."
    n = len(ev.on_sme2_kernels)
    if n:
        return f"{cmp.on_label} selected {n} SME2 kernel{'s' if n != 1 else ''}, e.g. `{ev.on_sme2_kernels[0]}`."
    return f"The XNNPACK log of {cmp.on_label} names no kernel at all: was it written by a debug-logging build?"




def _other_kernel_evidence(off: Analysis, on: Analysis, off_label: str, on_label: str) -> str:
    """SME2 kernel use from the traces' operator names and an emulator's executed-kernel log ("" without either)."""
    parts = []
    for label, a in ((on_label, on), (off_label, off)):
        ran = a.executed_kernels
        if ran is not None:
            n = len(ran.sme2_functions)
            parts.append(f"{label} executed {n} SME2 kernel function{'s' if n != 1 else ''} under QEMU" + (
                f" (e.g. `{ran.sme2_functions[0].name}`)" if n else ""))
        elif a.trace_evidence is not None and a.trace_evidence.gemm_like:
            ev = a.trace_evidence
            parts.append(f"{label}'s trace has {len(ev.sme)} of {len(ev.gemm_like)} GEMM-like operators on the SME "
                         "packed path")
    return ("; ".join(parts) + ".") if parts else ""


def builds_sentence(off_build: Mapping[str, Any], on_build: Mapping[str, Any], off_label: str = "SME2 off",
                    on_label: str = "SME2 on") -> str:
    """Which it was: two runner builds (SME2 kernels compiled in and out), or one runner on two CPUs.

    From the arms' artifacts (``Artifact.build``): the runner binaries' sha256 and, on the emulated device, the
    CPU each arm ran on. "" when an arm does not say. One build whose arms do not say their CPUs (a phone) is
    not claimed to have run on two CPUs: on one CPU both arms run the same kernels, and only the device (an
    emulator's description, the trace evidence) can tell otherwise.
    """
    a, b = off_build.get("runner_sha256"), on_build.get("runner_sha256")
    if not a or not b:
        return ""
    if a != b:
        return (f"Two runner builds: {off_label} ran {str(a)[:12]}, {on_label} ran {str(b)[:12]} (SME2 compiled out "
                "and in): the comparison is of the builds on one CPU.")
    cpus = (off_build.get("cpu"), on_build.get("cpu"))
    if all(cpus) and cpus[0] != cpus[1]:
        return (f"One runner build for both arms (sha256 {str(a)[:12]}): the difference is the CPU's ({off_label}: "
                f"-cpu {cpus[0]}, {on_label}: -cpu {cpus[1]}), not the build's — XNNPACK picks SME2 kernels from the "
                "CPU's features.")
    return (f"One runner build for both arms (sha256 {str(a)[:12]}), not two builds: XNNPACK picks SME2 kernels from "
            "the CPU's features, so the arms differ only if the device ran them on different CPUs (an emulator "
            "configured so says where in its description); on one CPU both arms run the same kernels.")


def compare_on_off(
    off: Analysis,
    on: Analysis,
    *,
    off_kernels: KernelLog | None = None,
    on_kernels: KernelLog | None = None,
    min_speedup: float | None = None,
    config: GateConfig | None = None,
    off_label: str = "SME2 off",
    on_label: str = "SME2 on",
    speedup: Check | None = None,
    emulated: bool = False,
    builds: str = "",
) -> OnOffComparison:
    """Compare the SME2-off and SME2-on analyses of one model.

    Kernel logs default to the ones stored in the analyses (``Analysis.kernel_log``). With
    ``min_speedup`` the speedup check is judged on its CI's lower bound (pass / regression /
    inconclusive), otherwise it is advisory. ``speedup``: the speedup check decided for the pair
    (:func:`measure.pair.report_of` always passes it, so the reports render the gated number); without it (an
    analysis read from files, no verdict) the ratio of the analyses' own runs is shown, with the same rule.
    """
    cfg = config or GateConfig(min_speedup=min_speedup)
    check = speedup if speedup is not None else speedup_check(
        Samples(off.measured_ms, off.block_sizes), Samples(on.measured_ms, on.block_sizes), cfg)
    per_op = off.per_operator and on.per_operator
    operators, only_off, only_on = _operator_speedups(off, on) if per_op else ((), (), ())
    cmp = OnOffComparison(
        off_label=off_label, on_label=on_label, off_source=off.source, on_source=on.source,
        off_e2e=off.e2e, on_e2e=on.e2e, speedup_check=check, per_operator=per_op,
        categories=_category_shifts(off, on, cfg) if per_op else (),
        operators=operators, only_off=only_off, only_on=only_on,
        kernels=_kernel_evidence(off, on, off_kernels, on_kernels), emulated=emulated,
        other_kernel_evidence=_other_kernel_evidence(off, on, off_label, on_label),
    )
    shift = _shift_sentences(cmp)
    findings = (_speedup_sentence(cmp), *shift, _kernel_sentence(cmp), *([builds] if builds else []))
    return replace(cmp, findings=findings, shift=shift)
