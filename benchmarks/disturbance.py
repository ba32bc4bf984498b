"""What a competing process does to the local runner's disturbance evidence: 0, 1 and 2 CPU burners.

    python benchmarks/disturbance.py                 # MobileNetV3 (tests/data), 1 thread, 200 executions
    python benchmarks/disturbance.py --threads 1 2   # the runtime's pool at 1 and 2 threads
    python benchmarks/disturbance.py --rounds 5 --runs 300

The real ``LocalRunner`` (untraced blocks, ``timing`` mode, as the gate's samples) runs the recorded
MobileNetV3 ``.pte`` of ``tests/data`` while 0, 1 or 2 ``python -c "while True: pass"`` processes
compete for the cores. Conditions rotate round after round (0, 1, 2, 0, 1, 2, ...), so the machine's
own background load is shared between them. Per condition it reports, as medians over its blocks:

- CPU/wall per execution (``RunResult.cpu_ms / e2e_ms``): median and 10th percentile;
- the block's ``cpu_share`` (CPU over threads x wall of the whole execution loop) and its run delay
  share (schedstat: time the runtime's threads waited for a CPU);
- the median E2E and its change against the 0-burner blocks: what a gate would have seen;
- ``procs_running``, the host's busy share (all CPUs, from ``/proc/stat``), 1-minute load and steal.

The lead sets the "disturbed block" threshold from these numbers. Results go to
``benchmarks/results/disturbance.txt`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DATA = ROOT / "tests" / "data"
PTE = DATA / "mobilenet_v3_small_like_fp32_xnnpack.pte"
INPUT = DATA / "mobilenet_v3_small_like_input_fp32.bin"
RESULTS = ROOT / "benchmarks" / "results"
BURNER = [sys.executable, "-c", "while True: pass"]


def start_burners(count: int) -> list[subprocess.Popen[bytes]]:
    procs = [subprocess.Popen(BURNER) for _ in range(count)]
    time.sleep(0.3)  # past interpreter start-up
    return procs


def stop_burners(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait(timeout=10)


def block(runner: Any, threads: int, runs: int, warmup: int) -> dict[str, Any]:
    from pytest_sme2.runners.base import MODE_TIMING, RunRequest

    result = runner.run(RunRequest(pte=PTE, runs=runs, warmup=warmup, threads=threads, inputs=(INPUT,),
                                   mode=MODE_TIMING, out_dir=Path()))
    wall = np.asarray(result.measured_ms)
    cpu = np.asarray(result.cpu_ms[warmup:])
    # Per execution: the share of the pool's capacity it used (one thread: the plain CPU/wall).
    share = cpu / (threads * wall)
    load = result.load
    assert load is not None
    return {
        "median_ms": float(np.median(wall)),
        "share_median": float(np.median(share)), "share_p10": float(np.percentile(share, 10)),
        "block_cpu_share": load.cpu_share, "run_delay_share": load.run_delay_share,
        "involuntary_switches": load.involuntary_switches, "procs_running": load.procs_running,
        "loadavg_1m": load.loadavg_1m, "steal_share": load.steal_share, "host_busy_share": load.host_busy_share,
        "describe": load.describe(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", nargs="+", type=int, default=[1])
    parser.add_argument("--burners", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    from benchmarks.console import Console
    from pytest_sme2.runners.local import LocalRunner

    console = Console()
    say, lines = console.say, console.lines

    started = time.time()
    say(f"disturbance evidence of the local runner ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}): "
        f"{PTE.name}, {args.runs} executions per block (+{args.warmup} warm-up), {args.rounds} rounds, "
        f"{os.cpu_count()} CPUs")
    say(f"  load average at start: {[round(x, 2) for x in os.getloadavg()]}")
    runner = LocalRunner()
    blocks: dict[str, list[dict[str, Any]]] = {}
    for _ in range(args.rounds):
        for threads in args.threads:
            for count in args.burners:
                procs = start_burners(count)
                try:
                    blocks.setdefault(f"t{threads}-b{count}", []).append(block(runner, threads, args.runs, args.warmup))
                finally:
                    stop_burners(procs)
    say()
    head = (f"{'threads':>7s} {'burners':>7s} {'CPU/wall med':>12s} {'p10':>6s} {'block':>6s} {'run delay':>9s} "
            f"{'median ms':>9s} {'vs min':>7s} {'runnable':>8s} {'host busy':>9s} {'load':>5s} {'steal':>6s}")
    say(head)
    say("-" * len(head))
    summary: dict[str, dict[str, Any]] = {}
    for threads in args.threads:
        reference = blocks[f"t{threads}-b{min(args.burners)}"]  # the fewest burners: 0 by default
        quiet_ms = statistics.median(b["median_ms"] for b in reference)
        for count in args.burners:
            bs = blocks[f"t{threads}-b{count}"]

            def med(key: str, values: list[dict[str, Any]] = bs) -> float:
                got = [b[key] for b in values if b[key] is not None]
                return float(statistics.median(got)) if got else float("nan")

            row = {k: med(k) for k in ("share_median", "share_p10", "block_cpu_share", "run_delay_share", "median_ms",
                                       "procs_running", "host_busy_share", "loadavg_1m", "steal_share")}
            row["vs_quiet"] = row["median_ms"] / quiet_ms - 1
            summary[f"t{threads}-b{count}"] = row
            say(f"{threads:7d} {count:7d} {row['share_median']:12.3f} {row['share_p10']:6.3f} "
                f"{row['block_cpu_share']:6.3f} {row['run_delay_share']:9.3f} {row['median_ms']:9.3f} "
                f"{100 * row['vs_quiet']:+6.0f}% {row['procs_running']:8.0f} {100 * row['host_busy_share']:8.0f}% "
                f"{row['loadavg_1m']:5.1f} "
                f"{100 * row['steal_share']:5.1f}%")
    say(f"  load average at end: {[round(x, 2) for x in os.getloadavg()]}; total {time.time() - started:.0f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "disturbance.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (args.out / "disturbance.json").write_text(
        json.dumps({"schema_version": 1, "summary": summary, "blocks": blocks}, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
