"""A history store of 1,000 runs built from the REAL recorded sessions, to look at the trend page at scale.

Nothing is invented: every median, block median and category median is one recorded on this project's VM
(``benchmarks/data/history_toy_cnn_sessions.jsonl``, recorded by ``benchmarks/record_history.py``), replayed in
rotation. Only the run ids, times and commit ids are made up (labels, not measurements).

- ``toy_cnn_w`` (156 recorded sessions, input sizes 32..36: real slowdowns of a changed model): the runs of each
  size in recording order, cycled, 200 runs per size (sizes 32, 33, 34, 36, 32): four real steps.
- ``test_perf.py::test_latency`` (16 full recorded sessions of one unchanged artifact: status, baseline, categories):
  cycled over all 1,000 runs.

Usage: ``python benchmarks/history_store_1000.py OUT_DIR [--runs 1000]`` then
``pytest-sme2 history page --store OUT_DIR --out history.html``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
from itertools import cycle
from pathlib import Path

from pytest_sme2.history.records import HistoryRecord, RunInfo
from pytest_sme2.history.store import HistoryStore

DATA = Path(__file__).resolve().parent / "data" / "history_toy_cnn_sessions.jsonl"
PLAN = (32, 33, 34, 36, 32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args()
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    full = [r for r in rows if r["bench"]["plan"] == "unchanged"]
    by_size = {s: [r for r in rows if r["bench"]["plan"] == "light" and r["bench"]["size"] == s] for s in PLAN}
    per_size = max(1, args.runs // len(PLAN))
    light = [r for s in PLAN for r, _ in zip(cycle(by_size[s]), range(per_size), strict=False)]
    identity = full[0]
    # the toy_cnn_w runs were recorded without a gate: their baseline is the median of the recorded size-32 medians
    baseline = float(statistics.median(r["median_ms"] for r in by_size[32]))
    store = HistoryStore(args.out)
    for i, (a, b) in enumerate(zip(light, cycle(full), strict=False)):
        if i >= args.runs:
            break
        info = RunInfo(run_id=f"replay{i:04d}", time=f"2026-{1 + i // 84 % 12:02d}-{1 + i % 28:02d}T12:00:00+00:00",
                       commit=hashlib.sha1(f"replay {i}".encode()).hexdigest(), branch="main", commit_source="replay")
        size = a["bench"]["size"]
        light_record = HistoryRecord(
            test_id="test_perf.py::test_toy_cnn_w", label="toy_cnn_w fp32 xnnpack", identity_id=identity["identity_id"],
            identity=identity["identity"], artifact_id=f"size{size}", status="pass", median_ms=a["median_ms"],
            baseline_ms=baseline, block_medians_ms=tuple(a["block_medians_ms"]))
        status = b["status"] if b["status"] != "recorded" else "pass"  # the first session recorded the baseline
        full_record = HistoryRecord.from_dict({k: v for k, v in b.items() if k != "bench"} | {"status": status})
        store.append(info, [light_record, full_record])
    print(f"wrote {min(args.runs, len(light))} runs to {args.out}")


if __name__ == "__main__":
    main()
