"""The seeds' CSV files, written from a timeline and its analysis.

``<stem>_all_runs_timeline.csv`` (every event of every run), ``<stem>_run0_timeline.csv`` (the cold
run), ``<stem>_ops_stats.csv`` (one row per operator type over the measured runs).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pytest_sme2.analysis.run import Analysis
from pytest_sme2.evidence.trace import TIMELINE_COLUMNS, Timeline
from pytest_sme2.store.files import write_atomic


def timeline_csv(timeline: Timeline) -> str:
    return str(timeline.table.loc[:, list(TIMELINE_COLUMNS)].to_csv(index=False, float_format="%.6f"))


def ops_stats_frame(timeline: Timeline, analysis: Analysis) -> pd.DataFrame:
    ops = timeline.operators()
    ops = ops[ops["run_index"] >= analysis.warmup]
    per_call = ops.groupby("op_type", sort=False)["duration_ms"].agg(
        p50_ms="median", min_ms="min", max_ms="max"
    )
    rows = []
    for op in analysis.operator_details:
        calls = per_call.loc[op.name] if op.name in per_call.index else None
        rows.append({
            "op_type": op.name, "category": op.category, "backend": op.backend, "delegated": op.delegated,
            "calls_per_run": op.count, "avg_ms": op.avg_ms, "total_ms_per_run": op.total_ms,
            "share_of_e2e": op.share,
            "p50_ms": None if calls is None else float(calls["p50_ms"]),
            "min_ms": None if calls is None else float(calls["min_ms"]),
            "max_ms": None if calls is None else float(calls["max_ms"]),
            "kernel_hint": op.kernel_hint or "",
        })
    return pd.DataFrame(rows)


def write_csvs(timeline: Timeline, analysis: Analysis, out_dir: Path, stem: str) -> list[Path]:
    """Write the three CSV files into ``out_dir``; returns their paths."""
    out_dir = Path(out_dir)
    all_runs = write_atomic(out_dir / f"{stem}_all_runs_timeline.csv", timeline_csv(timeline), what="CSV")
    run0 = Timeline(timeline.source, timeline.table[timeline.table["run_index"] == 0], timeline.etdump_version)
    run0_path = write_atomic(out_dir / f"{stem}_run0_timeline.csv", timeline_csv(run0), what="CSV")
    stats = ops_stats_frame(timeline, analysis).to_csv(index=False, float_format="%.6f")
    stats_path = write_atomic(out_dir / f"{stem}_ops_stats.csv", stats, what="CSV")
    return [all_runs, run0_path, stats_path]
