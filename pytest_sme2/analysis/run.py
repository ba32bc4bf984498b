"""Timeline -> analysis: end-to-end statistics, operator categories, operators, bottlenecks.

The rules the seeds ask for, and that the scripts behind them got wrong:

- E2E per run is the ``Method::execute`` duration of that run (summed if a run holds several),
  never a sum of nested events;
- run 0 is cold: it is reported as ``cold`` and the first ``warmup`` runs are left out of every
  statistic;
- only leaf operator events are categorized; category totals are the mean per measured run, and
  ``Other`` is mean E2E minus the four named categories, so the five add up to the mean E2E exactly;
- a leaf event's time is counted once: an event inside another leaf event of the same run (a kernel
  that records an inner event) adds nothing, and partly overlapping events count the union of their
  spans (see :func:`counted_ms`), so the categories never add up to more than the time the
  operators covered, and ``Other`` never goes negative from double counting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from pytest_sme2.errors import ConfigError, TraceError, check_schema_version
from pytest_sme2.evidence.categories import CATEGORIES, CONVOLUTION, GEMM, NAMED_CATEGORIES, OTHER
from pytest_sme2.evidence.kernels import KernelLog
from pytest_sme2.evidence.qemu_log import ExecutedKernels
from pytest_sme2.evidence.sme import NOT_SME, SME, UNDETERMINED, TraceEvidence, merge_evidence, trace_evidence
from pytest_sme2.evidence.sme import OTHER as OTHER_EVIDENCE
from pytest_sme2.evidence.trace import Timeline
from pytest_sme2.gate.stats import LatencyStats, summarize, times_problem

SCHEMA_VERSION = 1
#: Operators and categories above this share of E2E are bottlenecks (the seeds' 5 % rule).
BOTTLENECK_SHARE = 0.05
#: The categories whose time SME2 can take (their GEMM-like operators).
MATRIX_CATEGORIES = (CONVOLUTION, GEMM)


@dataclass(frozen=True)
class OperatorDetail:
    """One operator type, averaged over the measured runs."""

    name: str
    category: str
    count: float  # calls per run
    avg_ms: float  # per call
    total_ms: float  # per run
    share: float  # of mean E2E
    delegated: bool
    backend: str
    kernel_hint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {
            "name": self.name, "category": self.category, "count": self.count, "avg_ms": self.avg_ms,
            "total_ms": self.total_ms, "share": self.share, "delegated": self.delegated,
            "backend": self.backend,
        }
        if self.kernel_hint:
            d["kernel_hint"] = self.kernel_hint
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OperatorDetail:
        return cls(
            name=str(d["name"]), category=str(d["category"]), count=float(d["count"]),
            avg_ms=float(d["avg_ms"]), total_ms=float(d["total_ms"]), share=float(d["share"]),
            delegated=bool(d["delegated"]), backend=str(d.get("backend", "")),
            kernel_hint=d.get("kernel_hint"),
        )


@dataclass(frozen=True)
class Bottleneck:
    """Something above the 5 % line: an operator, a category, or a portable op to delegate."""

    kind: str  # "category" | "operator" | "portable"
    name: str
    total_ms: float
    share: float
    advice: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "total_ms": self.total_ms, "share": self.share,
                "advice": self.advice}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Bottleneck:
        return cls(str(d["kind"]), str(d["name"]), float(d["total_ms"]), float(d["share"]), str(d["advice"]))


@dataclass(frozen=True)
class Analysis:
    """Everything one trace (or one set of E2E samples) says about where the time goes.

    ``per_operator`` is False for E2E-only sources (the local runtime): then the category fields
    hold only ``Other`` (= E2E) and ``operator_details`` is empty.
    """

    source: str
    runs_total: int
    warmup: int
    e2e_per_run_ms: tuple[float, ...]
    e2e: LatencyStats
    per_operator: bool
    category_totals_ms: Mapping[str, float]
    category_per_run_ms: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    operator_details: tuple[OperatorDetail, ...] = ()
    bottlenecks: tuple[Bottleneck, ...] = ()
    portable_ms: float = 0.0
    delegated_ms: float = 0.0
    kernel_log: Mapping[str, Any] | None = None
    #: measured runs per block (runner process) when several were pooled, in order; () = one block
    block_sizes: tuple[int, ...] = ()
    #: which operators the trace names on XNNPACK's SME path (:func:`.sme_evidence.trace_evidence`); None = not
    #: computed (the runner decides: it knows whether the trace came from an Arm CPU)
    trace_evidence: TraceEvidence | None = None
    #: the exported functions that ran under QEMU (:func:`.qemu_log.executed_kernels`); None = not emulated
    executed_kernels: ExecutedKernels | None = None

    @property
    def runs_measured(self) -> int:
        return self.runs_total - self.warmup

    @property
    def measured_ms(self) -> tuple[float, ...]:
        return self.e2e_per_run_ms[self.warmup :]

    @property
    def category_share(self) -> dict[str, float]:
        mean = self.e2e.mean
        return {c: (v / mean if mean > 0 else math.nan) for c, v in self.category_totals_ms.items()}

    @property
    def delegated_operators(self) -> dict[str, float]:
        """Delegated (XNNPACK) operator events per measured run, by category.

        XNNPACK times its operators in whole microseconds, so a category of n such operators moves by up to
        n ticks between runs with nothing changed: the gate floors a category's allowance at a couple of
        ticks per operator (:data:`pytest_sme2.gate.checks.TICKS_PER_OPERATOR`).
        """
        out: dict[str, float] = {}
        for op in self.operator_details:
            if op.delegated:
                out[op.category] = out.get(op.category, 0.0) + op.count
        return out

    @property
    def dominant_category(self) -> str:
        return max(self.category_totals_ms, key=lambda c: self.category_totals_ms[c])

    def to_dict(self) -> dict[str, Any]:
        e2e: dict[str, Any] = dict(self.e2e.to_dict())
        e2e["per_run"] = list(self.e2e_per_run_ms)
        return {
            "schema_version": SCHEMA_VERSION,
            "source": self.source,
            "per_operator": self.per_operator,
            "runs": {"total": self.runs_total, "warmup": self.warmup, "measured": self.runs_measured,
                     # one trace is one block: then the spec's three keys, nothing else
                     **({"blocks": list(self.block_sizes)} if self.block_sizes else {})},
            "e2e_ms": e2e,
            "category_totals_ms": dict(self.category_totals_ms),
            "category_share": self.category_share,
            "category_per_run_ms": {k: list(v) for k, v in self.category_per_run_ms.items()},
            "operator_details": [o.to_dict() for o in self.operator_details],
            "bottlenecks": [b.to_dict() for b in self.bottlenecks],
            "portable_ms": self.portable_ms,
            "delegated_ms": self.delegated_ms,
            "kernel_log": dict(self.kernel_log) if self.kernel_log else None,
            # only when present, so analyses without them keep the keys they always had
            **({"trace_evidence": self.trace_evidence.to_dict()} if self.trace_evidence else {}),
            **({"executed_kernels": self.executed_kernels.to_dict()} if self.executed_kernels else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Analysis:
        check_schema_version(d, reads=SCHEMA_VERSION, what="analysis", missing=SCHEMA_VERSION)
        per_run = tuple(float(x) for x in d["e2e_ms"]["per_run"])
        problem = per_run and times_problem(per_run, (), "e2e_ms.per_run", "runs.blocks", blocks_required=False)
        if problem:
            raise ConfigError(f"{problem}: no measurement has such times, so the file was edited or damaged")
        warmup = int(d["runs"]["warmup"])
        cold = d["e2e_ms"].get("cold")
        return cls(
            source=str(d.get("source", "")),
            runs_total=int(d["runs"]["total"]),
            warmup=warmup,
            e2e_per_run_ms=per_run,
            e2e=summarize(per_run[warmup:], cold=None if cold is None else float(cold)),
            per_operator=bool(d.get("per_operator", True)),
            category_totals_ms={str(k): float(v) for k, v in d["category_totals_ms"].items()},
            category_per_run_ms={
                str(k): tuple(float(x) for x in v) for k, v in d.get("category_per_run_ms", {}).items()
            },
            operator_details=tuple(OperatorDetail.from_dict(o) for o in d.get("operator_details", [])),
            bottlenecks=tuple(Bottleneck.from_dict(b) for b in d.get("bottlenecks", [])),
            portable_ms=float(d.get("portable_ms", 0.0)),
            delegated_ms=float(d.get("delegated_ms", 0.0)),
            kernel_log=d.get("kernel_log"),
            block_sizes=tuple(int(n) for n in d["runs"].get("blocks", ())),
            trace_evidence=TraceEvidence.from_dict(d["trace_evidence"]) if d.get("trace_evidence") else None,
            executed_kernels=ExecutedKernels.from_dict(d["executed_kernels"]) if d.get("executed_kernels") else None,
        )


def _check_warmup(total: int, warmup: int, source: str) -> None:
    if warmup < 0:
        raise ConfigError(f"warmup must be 0 or more (got {warmup})")
    if total - warmup < 1:
        raise ConfigError(
            f"{source} has {total} run(s); with warmup={warmup} none is left to measure. "
            f"Use --warmup {max(total - 1, 0)} or fewer, or record more executions (--num_executions)."
        )


def analyze_e2e(samples_ms: tuple[float, ...], *, warmup: int, source: str) -> Analysis:
    """An E2E-only analysis (no per-operator trace): every millisecond is ``Other``."""
    _check_warmup(len(samples_ms), warmup, source)
    measured = np.asarray(samples_ms[warmup:], dtype=float)
    stats = summarize(measured, cold=samples_ms[0] if warmup > 0 else None)
    totals = {c: 0.0 for c in NAMED_CATEGORIES} | {OTHER: stats.mean}
    per_run = {c: tuple(0.0 for _ in measured) for c in NAMED_CATEGORIES} | {OTHER: tuple(measured.tolist())}
    return Analysis(
        source=source, runs_total=len(samples_ms), warmup=warmup, e2e_per_run_ms=tuple(samples_ms),
        e2e=stats, per_operator=False, category_totals_ms=totals, category_per_run_ms=per_run,
    )


def analyze(
    timeline: Timeline,
    *,
    warmup: int = 1,
    kernel_log: KernelLog | None = None,
    bottleneck_share: float = BOTTLENECK_SHARE,
    trace_evidence: TraceEvidence | None = None,
    executed_kernels: ExecutedKernels | None = None,
) -> Analysis:
    """Analyze a trace timeline: E2E statistics, categories, operators and bottlenecks.

    ``trace_evidence`` and ``executed_kernels`` are attached as given (like ``kernel_log``): the caller
    computes them, from ``timeline.operators()["op_type"]`` and from a QEMU log.
    """
    total = timeline.num_runs
    if total == 0:
        raise TraceError(f"{timeline.source} holds no execute events; nothing to analyze")
    _check_warmup(total, warmup, timeline.source)
    e2e_all = timeline.e2e_ms_per_run()
    measured_runs = np.arange(warmup, total)
    e2e = e2e_all[warmup:]
    stats = summarize(e2e, cold=float(e2e_all[0]) if warmup > 0 else None)
    n = measured_runs.size
    mean_e2e = float(e2e.mean())

    ops = timeline.operators()
    ops = ops[ops["run_index"] >= warmup]
    # From here on an operator's time is the part no earlier leaf event of its run already covers.
    ops = ops.assign(duration_ms=counted_ms(ops))

    # Per-run category sums (rows: measured runs, columns: categories), zero-filled.
    per_run = (
        ops.groupby(["run_index", "category"], sort=False)["duration_ms"].sum().unstack(fill_value=0.0)
        .reindex(index=measured_runs, columns=list(NAMED_CATEGORIES), fill_value=0.0)
    )
    named = per_run.to_numpy(dtype=float)
    other = e2e - named.sum(axis=1)
    category_per_run = {c: tuple(named[:, i].tolist()) for i, c in enumerate(NAMED_CATEGORIES)}
    category_per_run[OTHER] = tuple(other.tolist())
    totals = {c: float(named[:, i].mean()) for i, c in enumerate(NAMED_CATEGORIES)}
    # Other closes the sum exactly: mean(E2E) - sum(mean(named)).
    totals[OTHER] = mean_e2e - sum(totals.values())

    details = _operator_details(ops, n, mean_e2e, kernel_log)
    portable_ms = float(ops.loc[ops["backend"] == "portable", "duration_ms"].sum()) / n
    delegated_ms = float(ops.loc[ops["delegated"], "duration_ms"].sum()) / n
    bottlenecks = _bottlenecks(totals, details, mean_e2e, bottleneck_share, trace_evidence)
    return Analysis(
        source=timeline.source,
        runs_total=total,
        warmup=warmup,
        e2e_per_run_ms=tuple(float(x) for x in e2e_all),
        e2e=stats,
        per_operator=True,
        category_totals_ms={c: totals[c] for c in CATEGORIES},
        category_per_run_ms=category_per_run,
        operator_details=tuple(details),
        bottlenecks=tuple(bottlenecks),
        portable_ms=portable_ms,
        delegated_ms=delegated_ms,
        kernel_log=kernel_log.to_dict() if kernel_log else None,
        trace_evidence=trace_evidence,
        executed_kernels=executed_kernels,
    )


def analyze_trace(
    timeline: Timeline,
    *,
    warmup: int = 1,
    kernel_log: KernelLog | None = None,
    executed_kernels: ExecutedKernels | None = None,
) -> Analysis:
    """:func:`analyze` with the trace's own SME evidence: what its operator names say (the library's rules,
    :func:`.sme_evidence.trace_evidence`), on every device, at no cost. The ``analyze`` command and every
    runner's traced run take this path, so both tell the same operators the same way."""
    ops = timeline.operators()
    evidence = trace_evidence(ops["op_type"], source=timeline.source) if len(ops) else None
    return analyze(timeline, warmup=warmup, kernel_log=kernel_log, trace_evidence=evidence,
                   executed_kernels=executed_kernels)


def counted_ms(ops: pd.DataFrame) -> pd.Series:
    """Each leaf event's share of the union of its run's leaf spans, in ms (aligned to ``ops``' index).

    Events are taken in start order (the longer first on a tie); each counts only the part of its
    span that no earlier event of the same run covered. An event fully inside another counts 0, two
    partly overlapping events count their union, and events laid end to end (every recorded trace)
    keep their own duration exactly.
    """
    if ops.empty:
        return pd.Series(np.zeros(0), index=ops.index, dtype=float)
    order = ops.sort_values(["run_index", "start_ns", "end_ns"], ascending=[True, True, False], kind="mergesort")
    start = order["start_ns"].to_numpy(dtype=np.int64)
    end = order["end_ns"].to_numpy(dtype=np.int64)
    # The furthest end of the events before each one, in its own run (-1 before a run's first event).
    covered = pd.Series(end, index=order.index).groupby(order["run_index"].to_numpy(), sort=False).cummax()
    before = covered.groupby(order["run_index"].to_numpy(), sort=False).shift(1, fill_value=-1).to_numpy()
    nested = np.flatnonzero(before > start)
    if nested.size == 0:  # nothing overlaps: every event keeps its recorded duration, bit for bit
        return ops["duration_ms"].astype(float)
    own = np.clip(end - np.maximum(start, before), 0, None)
    counted = pd.Series(order["duration_ms"].to_numpy(dtype=float), index=order.index)
    counted.iloc[nested] = own[nested] / 1e6
    return counted.reindex(ops.index)


def _operator_details(
    ops: pd.DataFrame, runs: int, mean_e2e: float, kernel_log: KernelLog | None
) -> list[OperatorDetail]:
    if ops.empty:
        return []
    grouped = ops.groupby("op_type", sort=False).agg(
        category=("category", "first"),
        calls=("duration_ms", "size"),
        total=("duration_ms", "sum"),
        delegated=("delegated", "all"),
        backend=("backend", "first"),
    )
    grouped = grouped.sort_values("total", ascending=False, kind="mergesort")
    details = []
    for name, row in grouped.iterrows():
        calls = int(row["calls"])
        total = float(row["total"])
        details.append(
            OperatorDetail(
                name=str(name),
                category=str(row["category"]),
                count=calls / runs,
                avg_ms=total / calls,
                total_ms=total / runs,
                share=(total / runs) / mean_e2e if mean_e2e > 0 else math.nan,
                delegated=bool(row["delegated"]),
                backend=str(row["backend"]),
                kernel_hint=kernel_log.hint_for(str(name)) if kernel_log else None,
            )
        )
    return details


_CATEGORY_ADVICE = {
    "Convolution": "matrix compute dominates; check that convolutions are delegated and that the "
    "runner uses SME2 kernels (kernel hints ending in __neonsme2)",
    "GEMM": "matrix compute dominates; check delegation and SME2 kernels for linear/matmul layers",
    "Data Movement": "layout churn (transpose/reshape/copy/convert); look for NCHW<->NHWC transposes "
    "between operators that disagree on layout, and fuse or remove copies",
    "Elementwise": "many small elementwise ops; fuse activations into the preceding conv/linear",
    "Other": "pooling, reductions, softmax, norms, unmatched ops and runtime overhead; check "
    "operator details for portable (non-delegated) ops",
}
#: How an operator bottleneck names its SME evidence (the trace's operator name decides it).
_OPERATOR_EVIDENCE = {
    SME: "on XNNPACK's SME path (SME or SME2 kernels: the CPU's features say which)",
    NOT_SME: "off XNNPACK's SME path (SME kernels run only its packed-LHS PF32/PF16/PQS8 operators)",
    OTHER_EVIDENCE: "no GEMM micro-kernel, so not SME's to take",
    UNDETERMINED: "a QP8 GEMM: its name is the same with SME2 and NEON kernels, so the trace does not tell which ran",
}


def _matrix_advice(category: str, details: list[OperatorDetail], evidence: TraceEvidence | None) -> str:
    """What to do about a matrix category above the line, as the trace's operator names show it.

    Without evidence (an analysis made without operator names to judge) the general advice stands.
    """
    if evidence is None:
        return _CATEGORY_ADVICE[category]
    names = [o.name for o in details if o.category == category]
    on, off, unsure = ([n for n in names if evidence.kind_of(n) == kind] for kind in (SME, NOT_SME, UNDETERMINED))
    parts = ["matrix compute dominates"]
    if on:
        parts.append(f"the trace shows {len(on)} of its GEMM-like operators on XNNPACK's SME path (e.g. `{on[0]}`; "
                     "SME or SME2 kernels, the CPU's features say which)")
    if off:
        where = "ran off it" if on else "of its GEMM-like operators ran off XNNPACK's SME path"
        parts.append(f"{len(off)} {where} (e.g. `{off[0]}`): XNNPACK runs SME kernels only for its packed-LHS "
                     "operators (PF32, PF16, PQS8), which it creates on a CPU reporting SME2 or SME with a KleidiAI "
                     "build; check that the CPU reports sme2 and the runner's XNNPACK has KleidiAI")
    if unsure:
        parts.append(f"{len(unsure)} QP8 GEMM{'s' if len(unsure) != 1 else ''} (e.g. `{unsure[0]}`) "
                     f"{'have' if len(unsure) != 1 else 'has'} one name for SME2 and NEON kernels, so the trace does "
                     "not tell which ran: an XNNPACK debug log (--xnnlog) or QEMU's executed kernels do")
    rest = [n for n in names if evidence.kind_of(n) == OTHER_EVIDENCE]
    if rest and (on or off or unsure):
        parts.append(f"{len(rest)} more {'run' if len(rest) != 1 else 'runs'} no GEMM micro-kernel (e.g. `{rest[0]}`), "
                     "which SME does not take")
    if not (on or off or unsure):
        parts.append("none of its operators is named as a GEMM/IGEMM micro-kernel, the only kind XNNPACK runs on "
                     "SME (e.g. depthwise convolutions, portable kernels), so SME2 cannot take this time as it is")
    elif on and not (off or unsure):
        parts.append("SME is already in use, so the next gains come from fewer or cheaper matrix operations "
                     "(a smaller or quantized model, more threads)")
    return "; ".join(parts)


def _bottlenecks(
    totals: Mapping[str, float], details: list[OperatorDetail], mean_e2e: float, threshold: float,
    evidence: TraceEvidence | None = None,
) -> list[Bottleneck]:
    out = []
    for cat in CATEGORIES:
        share = totals[cat] / mean_e2e if mean_e2e > 0 else 0.0
        if share > threshold:
            advice = _matrix_advice(cat, details, evidence) if cat in MATRIX_CATEGORIES else _CATEGORY_ADVICE[cat]
            out.append(Bottleneck("category", cat, totals[cat], share, advice))
    for op in details:
        if op.share > threshold:
            if op.backend == "portable":
                out.append(Bottleneck(
                    "portable", op.name, op.total_ms, op.share,
                    "runs on the portable (non-delegated) kernels; delegate it to XNNPACK if supported, "
                    "or change the model so the partitioner can take it",
                ))
            else:
                kind = evidence.kind_of(op.name) if evidence is not None else None
                where = f"; {_OPERATOR_EVIDENCE[kind]}" if kind in _OPERATOR_EVIDENCE else ""
                out.append(Bottleneck("operator", op.name, op.total_ms, op.share,
                                      f"{op.category} operator above {threshold:.0%} of E2E{where}"))
    return out


def merge(analyses: list[Analysis], *, source: str | None = None) -> Analysis:
    """Pool the measured runs of several blocks (each already stripped of its own warm-up).

    Interleaved measurements come as blocks (one runner process each); the pooled analysis keeps
    every measured run, the first block's cold run, and run-weighted operator statistics.
    """
    if not analyses:
        raise ValueError("merge() needs at least one analysis")
    if len(analyses) == 1:
        return analyses[0]
    measured = tuple(x for a in analyses for x in a.measured_ms)
    stats = summarize(measured, cold=analyses[0].e2e.cold)
    per_op = all(a.per_operator for a in analyses)
    cats = {c: tuple(x for a in analyses for x in a.category_per_run_ms.get(c, ())) for c in CATEGORIES}
    totals = {c: float(np.mean(v)) if v else 0.0 for c, v in cats.items()}
    totals[OTHER] = stats.mean - sum(totals[c] for c in NAMED_CATEGORIES)
    weights = [a.runs_measured for a in analyses]
    total_runs = sum(weights)
    details: dict[str, OperatorDetail] = {}
    acc: dict[str, list[float]] = {}
    for a, w in zip(analyses, weights, strict=True):
        for op in a.operator_details:
            calls, total = acc.get(op.name, [0.0, 0.0])
            acc[op.name] = [calls + op.count * w, total + op.total_ms * w]
            details.setdefault(op.name, op)
    merged_ops = []
    for name, (calls, total) in acc.items():
        op = details[name]
        per_run_total = total / total_runs
        merged_ops.append(OperatorDetail(
            name=name, category=op.category, count=calls / total_runs,
            avg_ms=total / calls if calls else 0.0, total_ms=per_run_total,
            share=per_run_total / stats.mean if stats.mean > 0 else math.nan,
            delegated=op.delegated, backend=op.backend, kernel_hint=op.kernel_hint,
        ))
    merged_ops.sort(key=lambda o: -o.total_ms)
    mean_e2e = stats.mean
    return Analysis(
        source=source or analyses[0].source,
        runs_total=len(measured),
        warmup=0,
        e2e_per_run_ms=measured,
        e2e=stats,
        per_operator=per_op,
        category_totals_ms={c: totals[c] for c in CATEGORIES},
        category_per_run_ms=cats,
        operator_details=tuple(merged_ops),
        bottlenecks=tuple(_bottlenecks(totals, merged_ops, mean_e2e, BOTTLENECK_SHARE)) if per_op else (),
        portable_ms=sum(a.portable_ms * w for a, w in zip(analyses, weights, strict=True)) / total_runs,
        delegated_ms=sum(a.delegated_ms * w for a, w in zip(analyses, weights, strict=True)) / total_runs,
        kernel_log=analyses[0].kernel_log,
        trace_evidence=merge_evidence([a.trace_evidence for a in analyses if a.trace_evidence]),
        executed_kernels=analyses[0].executed_kernels,
        block_sizes=tuple(n for a in analyses for n in (a.block_sizes or (a.runs_measured,))),
    )
