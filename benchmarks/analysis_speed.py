"""Analysis speed: our trace analysis end to end vs the executorch Inspector, in fresh processes.

What is timed, per side, each in its own fresh ``python`` process (interpreter start-up excluded):

- **ours** (``analysis_s``): everything the analysis path needs in a fresh process — importing
  ``pytest_sme2.evidence.trace``/``analysis`` (which pulls numpy and pandas), reading the file, parsing the
  flatbuffer, categorizing, statistics (``analyze``) and the JSON text of the result.
- **Inspector** (``inspector_s``): ``Inspector(etdump_path=...)`` + ``to_dataframe()`` only. Its
  import (``executorch.devtools``, which pulls torch and ``executorch.exir``, several seconds) is
  *not* counted, although a fresh process must pay it; it is reported beside as
  ``inspector_import_s``. This is the comparison least favourable to us: our imports are in, its
  are out, and it does no categorizing or statistics at all.

The parent runs the sides alternately (ours, Inspector, ours, ...) and takes the median of each.
One process per side also dumps every ``Execute`` event's per-run durations, so the parent can check
that both decodings agree: E2E per run (``Method::execute``) and every per-operator duration.

Child usage (the parent calls it): ``python -m benchmarks.analysis_speed ours|inspector TRACE [DUMP]``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _child_ours(trace: str, dump: str | None) -> dict[str, float]:
    started = time.perf_counter()
    from pytest_sme2.analysis.run import analyze
    from pytest_sme2.evidence.trace import read_etdump

    imported = time.perf_counter()
    timeline = read_etdump(trace)
    analysis = analyze(timeline, warmup=1)
    text = json.dumps(analysis.to_dict())
    done = time.perf_counter()
    if dump:
        _dump_ours(timeline, dump)
    return {"total_s": done - started, "import_s": imported - started, "work_s": done - imported,
            "json_bytes": len(text)}


def _dump_ours(timeline: object, dump: str) -> None:
    """Per-run durations (ms) of each (event name, occurrence within its run) of the Execute runs."""
    table = timeline.table  # type: ignore[attr-defined]
    runs = table[table["run_index"] >= 0].copy()
    runs["occurrence"] = runs.groupby(["run_index", "event_name"]).cumcount()
    out: dict[str, list[float]] = {}
    for (name, occ), group in runs.groupby(["event_name", "occurrence"], sort=False):
        out[f"{name}|{occ}"] = group.sort_values("run_index")["duration_ms"].tolist()
    Path(dump).write_text(json.dumps(out))


def _child_inspector(trace: str, dump: str | None) -> dict[str, float]:
    started = time.perf_counter()
    from executorch.devtools import Inspector

    imported = time.perf_counter()
    inspector = Inspector(etdump_path=trace)
    frame = inspector.to_dataframe()
    done = time.perf_counter()
    if dump:
        out: dict[str, list[float]] = {}
        seen: dict[str, int] = {}
        # Rows keep the file's event order inside a block, so the n-th row of a name is occurrence n.
        for _, row in frame[frame["event_block_name"] == "Execute"].iterrows():
            name = str(row["event_name"])
            occ = seen.get(name, 0)
            seen[name] = occ + 1
            out[f"{name}|{occ}"] = [float(x) for x in row["raw"]]
        Path(dump).write_text(json.dumps(out))
    return {"total_s": done - imported, "import_s": imported - started, "work_s": done - imported,
            "rows": len(frame)}


def _run_child(side: str, trace: Path, dump: Path | None) -> dict[str, float]:
    cmd = [sys.executable, "-W", "ignore", "-m", "benchmarks.analysis_speed", side, str(trace)]
    if dump is not None:
        cmd.append(str(dump))
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{side} analysis child failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare_dumps(ours: dict[str, list[float]], theirs: dict[str, list[float]]) -> dict[str, object]:
    """Do both decodings hold the same events with the same per-run durations?"""
    missing = sorted(set(theirs) ^ set(ours))
    worst = 0.0
    values = 0
    mismatched = []
    for key in sorted(set(theirs) & set(ours)):
        a, b = ours[key], theirs[key]
        if len(a) != len(b):
            mismatched.append(key)
            continue
        values += len(a)
        diff = max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)
        worst = max(worst, diff)
    e2e = ours.get("Method::execute|0", [])
    # 1e-9 ms = 1 ps: both sides convert the same integer nanoseconds, only float rounding may differ.
    identical = not missing and not mismatched and worst <= 1e-9 and bool(e2e)
    return {"identical": identical, "events": len(set(theirs) & set(ours)), "values_compared": values,
            "runs": len(e2e), "max_abs_diff_ms": worst, "only_one_side": missing[:5],
            "length_mismatch": mismatched[:5]}


def measure(trace: Path, repeats: int) -> dict[str, object]:
    """Median of ``repeats`` fresh processes per side (alternating), plus the agreement check."""
    ours, theirs = [], []
    with tempfile.TemporaryDirectory(prefix="sme2_bench_") as tmp:
        dump_ours, dump_theirs = Path(tmp) / "ours.json", Path(tmp) / "inspector.json"
        for i in range(repeats):
            ours.append(_run_child("ours", trace, dump_ours if i == 0 else None))
            theirs.append(_run_child("inspector", trace, dump_theirs if i == 0 else None))
        check = compare_dumps(json.loads(dump_ours.read_text()), json.loads(dump_theirs.read_text()))
    analysis_s = statistics.median(r["total_s"] for r in ours)
    inspector_s = statistics.median(r["total_s"] for r in theirs)
    return {
        "analysis_s": analysis_s,
        "analysis_import_s": statistics.median(r["import_s"] for r in ours),
        "inspector_s": inspector_s,
        "inspector_import_s": statistics.median(r["import_s"] for r in theirs),
        "analysis_speedup_vs_inspector": inspector_s / analysis_s,
        "analysis_runs_s": [r["total_s"] for r in ours],
        "inspector_runs_s": [r["total_s"] for r in theirs],
        "identical": check,
    }


if __name__ == "__main__":
    side, trace_arg = sys.argv[1], sys.argv[2]
    dump_arg = sys.argv[3] if len(sys.argv) > 3 else None
    child = _child_ours if side == "ours" else _child_inspector
    print(json.dumps(child(trace_arg, dump_arg)))
