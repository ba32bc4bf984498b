"""Change-point quality on real recorded series, and the cost of the history store and page for 1,000 runs.

    python benchmarks/changepoints.py                 # ~1 min: quality grid + store/page cost
    python benchmarks/changepoints.py --save benchmarks/results/history.json

**Data.** ``benchmarks/data/history_toy_cnn_sessions.jsonl``, recorded by ``benchmarks/record_history.py``
(toy_cnn fp32 XNNPACK, local runtime, 15 blocks x 10 traced runs per point, each point from its own process):
``unchanged`` = consecutive real pytest sessions of the unchanged model (32x32 input; full history records, as the
plugin stores them); ``light`` = rounds of one fresh process each measuring input 32 (unchanged), 35 and 36 (real
model changes: measured ~+10 % and ~+20 %) once, interleaved. The value of a point is the median of its 150 runs
(the gate's median). The quality numbers use the ``light`` series (more points for the machine time); the sessions
are a cross-check of the noise level and of false steps.

**False steps per 100 unchanged runs.** (a) The real unchanged 32x32 points in recording order, searched as CI
would: after every new run the whole series so far is searched, and every distinct step position ever reported
counts once. (b) 200 series of 100 runs built by block bootstrap of the same points (blocks of 5 consecutive
points, so local drift is kept), searched once each.

**Detection and delay.** A series is a random contiguous stretch of 15 real unchanged points followed by the real
points of one changed size in a random order; the changed runs arrive one at a time and the delay is the number of
changed runs after which a step near the change (4 runs before it to 1 after) is first reported (``min_size`` at
best). 200 trials per size; detected = within 10 changed runs; "exact" = placed within +-1 run of the change.

**Cost.** A synthetic store of 1,000 runs of the example suite (its 15 kept tests per run: 18 collected, the three
SME2 on/off tests skip on the local runtime) whose records are real recorded records (a pytest session's) with their
numbers redrawn from real ones: 15 block medians sampled from all recorded points, their median, the categories
scaled to it; the three backend-pair tests carry a ratio: its size on disk, gzip size
(what git stores), the time to append, to read it into pandas, to find the steps, and the page's size and time.
These records are built from real numbers for SIZE and COST only; no quality number uses them.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DATA = ROOT / "benchmarks" / "data" / "history_toy_cnn_sessions.jsonl"
#: Real model changes recorded (input sizes; 32 is the unchanged model).
CHANGED_SIZES = (33, 34, 35, 36)
GRID = [(ms, pct, p) for ms in (2, 3, 4) for pct in (3.0, 5.0, 8.0) for p in (0.01, 0.001)]


def load(path: Path = DATA) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def series(rows: list[dict[str, Any]], plan: str, size: int) -> list[float]:
    return [r["median_ms"] for r in rows if r["bench"]["plan"] == plan and r["bench"]["size"] == size]


def online_false_steps(values: list[float], **tuning: Any) -> int:
    from pytest_sme2.history.changepoints import find_steps

    seen: set[int] = set()
    for n in range(2, len(values) + 1):
        seen |= {s.index for s in find_steps(values[:n], **tuning)}
    return len(seen)


def bootstrap(values: list[float], n: int, block: int, rng: random.Random) -> list[float]:
    out: list[float] = []
    while len(out) < n:
        start = rng.randrange(0, len(values) - block + 1)
        out += values[start:start + block]
    return out[:n]


def delay(unchanged: list[float], changed: list[float], rng: random.Random, *, pre: int = 15, limit: int = 10,
          **tuning: Any) -> tuple[int | None, bool]:
    """(changed runs until a step near the change is reported, whether it was placed within +-1 run of it).

    Near = from 4 runs before the change to 1 after: a cluster of disturbed sessions just before a real change
    (the recorded series has them) makes the search put the step a few runs early."""
    from pytest_sme2.history.changepoints import find_steps

    start = rng.randrange(0, len(unchanged) - pre + 1)
    base = unchanged[start:start + pre]
    after = rng.sample(changed, len(changed))
    while len(after) < limit:
        after += rng.sample(changed, len(changed))
    for k in range(1, limit + 1):
        found = [s.index for s in find_steps(base + after[:k], **tuning) if pre - 4 <= s.index <= pre + 1]
        if found:
            return k, any(abs(i - pre) <= 1 for i in found)
    return None, False


def quality(rows: list[dict[str, Any]], trials: int = 200, seed: int = 20) -> dict[str, Any]:
    from pytest_sme2.history.changepoints import find_steps

    sessions = series(rows, "unchanged", 32)
    real = series(rows, "light", 32)
    changed = {size: series(rows, "light", size) for size in CHANGED_SIZES}
    changed = {size: pts for size, pts in changed.items() if len(pts) >= 5}
    ref = float(np.median(real))
    out: dict[str, Any] = {
        "points": {"pytest_sessions_32": len(sessions), "light_32": len(real),
                   **{f"light_{size}": len(pts) for size, pts in changed.items()}},
        "sessions_cv_pct": float(np.std(sessions, ddof=1) / np.mean(sessions) * 100) if len(sessions) > 1 else None,
        "unchanged_cv_pct": float(np.std(real, ddof=1) / np.mean(real) * 100),
        "unchanged_range_pct": float((max(real) / min(real) - 1) * 100),
        "step_pct": {size: float((np.median(pts) / ref - 1) * 100) for size, pts in changed.items()},
        "grid": [],
    }
    for min_size, min_pct, p in GRID:
        tuning = {"min_size": min_size, "min_pct": min_pct, "max_pvalue": p}
        rng = random.Random(seed)
        online = online_false_steps(real, **tuning)
        boot = [len(find_steps(bootstrap(real, 100, 5, rng), **tuning)) for _ in range(trials)]
        row: dict[str, Any] = {**tuning, "false_per_100_online": online / len(real) * 100,
                               "false_per_100_bootstrap": float(np.mean(boot)),
                               "sessions_false_steps": len(find_steps(sessions, **tuning))}
        for size, pts in changed.items():
            outcomes = [delay(real, pts, rng, **tuning) for _ in range(trials)]
            found = [d for d, _ in outcomes if d is not None]
            row[f"detect_{size}"] = len(found) / trials
            row[f"exact_{size}"] = sum(exact for _, exact in outcomes) / trials
            row[f"delay_{size}_median"] = float(np.median(found)) if found else None
            row[f"delay_{size}_p90"] = float(np.percentile(found, 90)) if found else None
        out["grid"].append(row)
    # Creep of an unchanged artifact: the Theil-Sen drift over every window of WINDOW consecutive real points, and
    # over 1,000 block-bootstrap windows, is what an unchanged series shows; the bound must sit above it.
    from pytest_sme2.history.creep import WINDOW, theil_sen_pct

    rng = random.Random(seed + 1)
    sliding = [theil_sen_pct(real[i:i + WINDOW]) for i in range(0, len(real) - WINDOW + 1)]
    boot = [theil_sen_pct(bootstrap(real, WINDOW, 5, rng)) for _ in range(1000)]
    sess = [theil_sen_pct(sessions[i:i + WINDOW]) for i in range(0, len(sessions) - WINDOW + 1)]
    out["creep"] = {"window": WINDOW,
                    "sliding_abs_max_pct": float(max(map(abs, sliding))) if sliding else None,
                    "sessions_abs_max_pct": float(max(map(abs, sess))) if sess else None,
                    "bootstrap_abs_p95_pct": float(np.percentile(np.abs(boot), 95)),
                    "bootstrap_abs_p99_pct": float(np.percentile(np.abs(boot), 99)),
                    "bootstrap_abs_max_pct": float(np.max(np.abs(boot)))}
    return out


def cost(rows: list[dict[str, Any]], runs: int = 1000, seed: int = 1) -> dict[str, Any]:
    from pytest_sme2.history.records import HistoryRecord, RunInfo
    from pytest_sme2.history.series import all_steps, build_series
    from pytest_sme2.history.store import HistoryStore
    from pytest_sme2.history.trend import render_page

    tests = [f"example_models/test_{m}.py::test_latency[{c}]" for m in ("mobilenet_v3_small", "tiny_transformer",
                                                                         "toy_cnn")
             for c in ("fp32-xnnpack", "int8-xnnpack", "fp32-portable", "int8-portable")]
    pairs = [f"example_models/test_{m}.py::test_xnnpack_vs_portable" for m in
             ("mobilenet_v3_small", "tiny_transformer", "toy_cnn")]
    real = [{k: v for k, v in r.items() if k != "bench"} for r in rows if r["bench"]["plan"] == "unchanged"]
    pool = [b for r in rows for b in r.get("block_medians_ms", ())]
    rng = random.Random(seed)
    out: dict[str, Any] = {"runs": runs, "records_per_run": len(tests) + len(pairs)}
    with tempfile.TemporaryDirectory() as tmp:
        store = HistoryStore(Path(tmp) / "h")
        started = time.perf_counter()
        for i in range(runs):
            run = RunInfo(run_id=f"{i:012x}", time=f"2026-{1 + i // 300:02d}-{1 + i % 28:02d}T{i % 24:02d}:00:00+00:00",
                          commit=f"{rng.getrandbits(160):040x}", branch="main", commit_source="git", host="vm",
                          tool_version="0.1.0")
            recs = []
            for t in tests + pairs:
                d = dict(rng.choice(real))
                d["test_id"] = t
                # Numbers as varied as real ones (so gzip sees real entropy): 15 real block medians drawn from every
                # recorded point, the median of them, and the record's categories scaled to that median.
                blocks = rng.sample(pool, 15)
                median = float(np.median(blocks))
                scale = median / d["median_ms"]
                d.update(block_medians_ms=blocks, median_ms=round(median, 6),
                         category_ms={k: round(v * scale, 6) for k, v in d.get("category_ms", {}).items()})
                if t in pairs:
                    d["ratio"] = [round(rng.uniform(4, 6), 4), 3.9, 6.1]
                    d["ratio_label"] = "speedup portable → xnnpack"
                recs.append(HistoryRecord.from_dict(d))
            store.append(run, recs)
        out["append_ms_per_run"] = (time.perf_counter() - started) / runs * 1e3
        files = store.files()
        out["bytes"] = sum(p.stat().st_size for p in files)
        out["files"] = len(files)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(store.root, arcname="h")
        out["tar_gz_bytes"] = len(buf.getvalue())
        started = time.perf_counter()
        frame = store.frame()
        out["read_s"] = time.perf_counter() - started
        started = time.perf_counter()
        ser = build_series(frame, ["e2e"])
        steps = all_steps(ser)
        out["steps_e2e_s"] = time.perf_counter() - started
        out["series_e2e"] = len(ser)
        started = time.perf_counter()
        ser_all = build_series(frame)
        steps_all = all_steps(ser_all)
        out["steps_all_s"] = time.perf_counter() - started
        out["series_all"] = len(ser_all)
        started = time.perf_counter()
        page = render_page(ser_all, steps_all)
        out["page_s"] = time.perf_counter() - started
        out["page_bytes"] = len(page.encode())
        out["page_gzip_bytes"] = len(gzip.compress(page.encode()))
        out["false_steps_in_shuffled_1000"] = len(steps)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--runs", type=int, default=1000, help="runs in the cost store (default 1000)")
    parser.add_argument("--save", type=Path)
    args = parser.parse_args(argv)
    rows = load()
    q = quality(rows, trials=args.trials)
    steps = q["step_pct"]
    print(f"points: {q['points']}; unchanged CV {q['unchanged_cv_pct']:.2f} %, range {q['unchanged_range_pct']:.1f} % "
          f"(pytest sessions: CV {q['sessions_cv_pct'] or float('nan'):.2f} %); real steps: "
          + ", ".join(f"{s}x{s} {p:+.1f} %" for s, p in steps.items()))
    print(f"{'min_size':>8} {'min_pct':>7} {'p':>6} | {'false/100 online':>16} {'bootstrap':>9} | "
          + " | ".join(f"{f'{p:+.0f}% found/exact':>10} {'delay':>5}" for p in steps.values()))
    for r in q["grid"]:
        print(f"{r['min_size']:>8} {r['min_pct']:>7g} {r['max_pvalue']:>6g} | {r['false_per_100_online']:>16.1f} "
              f"{r['false_per_100_bootstrap']:>9.2f} | "
              + " | ".join(f"{r[f'detect_{s}']:>5.2f}/{r[f'exact_{s}']:.2f} "
                           f"{r[f'delay_{s}_median'] or float('nan'):>5.1f}" for s in steps)
              + f" | sessions {r['sessions_false_steps']}")
    cr = q["creep"]
    print(f"creep over {cr['window']} unchanged runs: sliding max |{cr['sliding_abs_max_pct'] or float('nan'):.1f}| %, "
          f"pytest sessions max |{cr['sessions_abs_max_pct'] or float('nan'):.1f}| %, bootstrap |p95| "
          f"{cr['bootstrap_abs_p95_pct']:.1f} %, |p99| {cr['bootstrap_abs_p99_pct']:.1f} %, "
          f"max {cr['bootstrap_abs_max_pct']:.1f} %")
    c = cost(rows, runs=args.runs)
    print(f"store, {c['runs']} runs x {c['records_per_run']} tests: {c['bytes'] / 1e6:.2f} MB in {c['files']} files "
          f"({c['bytes'] / c['runs'] / c['records_per_run']:.0f} B per record), "
          f"{c['tar_gz_bytes'] / 1e6:.2f} MB gzipped; "
          f"append {c['append_ms_per_run']:.1f} ms/run, read {c['read_s']:.2f} s, steps e2e {c['steps_e2e_s']:.2f} s "
          f"({c['series_e2e']} series), all metrics {c['steps_all_s']:.2f} s ({c['series_all']} series); page "
          f"{c['page_bytes'] / 1e6:.2f} MB ({c['page_gzip_bytes'] / 1e6:.2f} MB gzipped) in {c['page_s']:.2f} s")
    if args.save:
        args.save.write_text(json.dumps({"quality": q, "cost": c}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
