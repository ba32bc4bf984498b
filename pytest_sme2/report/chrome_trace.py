"""ETDump timeline -> Chrome trace / Perfetto JSON (the Trace Event Format's complete events).

Every profile event of the trace becomes one ``"ph": "X"`` event with ``ts``/``dur`` in
microseconds, so ``Method::execute``, ``DELEGATE_CALL``, ``OPERATOR_CALL`` and the operators inside
them all appear and nest as they ran. Layout: one process per trace; thread 0 holds the one-time
load/init events and thread ``r + 1`` holds run ``r``, so each run is its own track and the cold
run 0 sits right under the load. Timestamps keep the recorded clock (relative to the trace's first
event): runs appear in the order and at the spacing they ran.

Open the file in https://ui.perfetto.dev or chrome://tracing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pytest_sme2.evidence.trace import Timeline

LOAD_TID = 0


def _thread_name(run: int) -> str:
    if run < 0:
        return "load / init"
    return "run 0 (cold)" if run == 0 else f"run {run}"


def _events(timeline: Timeline, pid: int) -> list[dict[str, Any]]:
    t = timeline.table
    if t.empty:
        return []
    start = t["start_ns"].to_numpy(dtype=np.int64)
    end = t["end_ns"].to_numpy(dtype=np.int64)
    origin = int(start.min())
    # µs with ns precision; a plain float keeps the JSON small and both viewers accept fractions.
    ts = ((start - origin) / 1000.0).tolist()
    dur = (np.maximum(end - start, 0) / 1000.0).tolist()
    runs = t["run_index"].to_numpy(dtype=np.int64).tolist()
    tids = [LOAD_TID if r < 0 else r + 1 for r in runs]
    columns = zip(
        t["event_name"].tolist(), t["kind"].tolist(), t["category"].tolist(), t["op_type"].tolist(),
        t["backend"].tolist(), t["delegated"].tolist(), t["instruction_id"].tolist(), t["chain_index"].tolist(),
        t["block_name"].tolist(), t["duration_ms"].tolist(), strict=True,
    )
    events = []
    for i, (name, kind, category, op_type, backend, delegated, instr, chain, block, ms) in enumerate(columns):
        args: dict[str, Any] = {"run": runs[i], "kind": kind, "block": block, "instruction_id": int(instr),
                                "chain_index": int(chain), "duration_ms": round(float(ms), 6)}
        if category:
            args["category"] = category
        if op_type and op_type != name:
            args["op_type"] = op_type
        if backend:
            args["backend"] = backend
        args["delegated"] = bool(delegated)
        events.append({"name": name, "cat": kind, "ph": "X", "pid": pid, "tid": tids[i], "ts": ts[i],
                       "dur": dur[i], "args": args})
    # Parents before children when they start together (longer first), so viewers nest them; the
    # original index keeps the order total and the output deterministic.
    order = sorted(range(len(events)), key=lambda i: (tids[i], ts[i], -dur[i], i))
    return [events[i] for i in order]


def _metadata(timeline: Timeline, pid: int, process_name: str) -> list[dict[str, Any]]:
    runs = sorted({int(r) for r in timeline.table["run_index"].unique()}) if not timeline.table.empty else []
    meta: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": process_name}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
    ]
    for r in runs:
        tid = LOAD_TID if r < 0 else r + 1
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": _thread_name(r)}})
        meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    return meta


def etdump_to_chrome_trace(timeline: Timeline, *, pid: int = 1, process_name: str | None = None) -> dict[str, Any]:
    """A Chrome trace document for one timeline: ``{"traceEvents": [...], "displayTimeUnit": "ms", ...}``.

    ``traceEvents`` holds one ``X`` event per timeline row (the metadata ``M`` events that name the
    process and threads come first). Each event's ``args`` carry the run, kind, category, op type,
    backend and the original duration in ms.
    """
    name = process_name or Path(timeline.source).name
    return {
        "traceEvents": _metadata(timeline, pid, name) + _events(timeline, pid),
        "displayTimeUnit": "ms",
        "otherData": {"source": timeline.source, "etdump_version": timeline.etdump_version,
                      "runs": timeline.num_runs, "generator": "pytest-sme2"},
    }


def etdumps_to_chrome_trace(timelines: Sequence[tuple[str, Timeline]]) -> dict[str, Any]:
    """Several traces in one document, one process each (e.g. ``[("SME2 off", a), ("SME2 on", b)]``).

    Each trace starts at 0, so the two builds line up for a side-by-side look.
    """
    events: list[dict[str, Any]] = []
    sources = []
    for pid, (label, timeline) in enumerate(timelines, 1):
        doc = etdump_to_chrome_trace(timeline, pid=pid, process_name=label)
        events += doc["traceEvents"]
        sources.append({"pid": pid, "label": label, "source": timeline.source})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"traces": sources, "generator": "pytest-sme2"}}
