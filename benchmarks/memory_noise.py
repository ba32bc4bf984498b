"""The noise of peak memory on this VM, across blocks and sessions, and what measuring memory costs (issue 21).

    python benchmarks/memory_noise.py                       # 5 sessions x 6 blocks, every runner available
    python benchmarks/memory_noise.py --quick               # 2 sessions x 3 blocks, toy_cnn only
    python benchmarks/memory_noise.py --runner PATH --qemu-runner PATH --qemu PATH

A **session** is a fresh Python process (as a pytest session is); in it every runner runs **blocks** of the same
``.pte`` (one program load + executions each, as the plugin's blocks are), untraced, interleaved across runners.
The programs are the recorded ones in ``tests/data`` (toy_cnn and the MobileNetV3-like model, fp32/xnnpack), so no
export is timed. Runners:

- ``local``: the executorch Python runtime in the session's process; peak =
  :class:`pytest_sme2.evidence.memory.PeakDelta` (the rise of the process' VmHWM over its RSS before the load);
- ``host``: pytest-sme2's own runner (``pytest-sme2 build-runner``), a process per block; peak = the VmHWM it
  prints at exit (and its VmRSS before it opened the program). ``wait4``'s ``ru_maxrss`` is printed beside it to
  show why it is not used: Linux carries the high-water mark of the process that exec'd the runner (this Python
  process) into it;
- ``qemu``: the aarch64 build of that runner under ``qemu-aarch64`` (toy_cnn only, 1 execution: emulated time is
  slow); peak = the qemu-user process', emulator included.

Per runner and model it reports the peak's median, the spread within a session (max/min of its blocks) and between
sessions (each session's median against the median of all sessions), and the planned memory (which must be the same
in every block: it is read from the program). The **default peak margin** is the largest between-session deviation
of a runner-process or local median, rounded up: :data:`pytest_sme2.gate.verdict.PEAK_MARGIN` must not be below it.

The cost of measuring: reading the plan and the size from the ``.pte`` (``memory_of`` minus the run), resetting
and reading VmHWM around a local block (``PeakDelta``), and parsing the runner's lines. Results go to
``benchmarks/results/memory_noise.txt`` and ``.json`` (every block).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a clean checkout: make the repo importable
    sys.path.insert(0, str(ROOT))

DATA = ROOT / "tests" / "data"
PROGRAMS = {
    "toy_cnn": (DATA / "toy_cnn_fp32_xnnpack.pte", DATA / "toy_cnn_input_fp32.bin"),
    "mobilenet_v3_small_like": (DATA / "mobilenet_v3_small_like_fp32_xnnpack.pte",
                                DATA / "mobilenet_v3_small_like_input_fp32.bin"),
}
RESULTS = ROOT / "benchmarks" / "results"
RUNS = 5


# ------------------------------------------------------------------------------------------ one session


def session(blocks: int, models: list[str], *, runner: str | None, qemu_runner: str | None, qemu: str | None,
            sysroot: str) -> dict[str, Any]:
    """Blocks of every (runner, model) in this process, interleaved; every block's peak, load and planned bytes."""
    from pytest_sme2.evidence.memory import memory_of
    from pytest_sme2.runners.base import MODE_TIMING, RunRequest
    from pytest_sme2.runners.local import LocalRunner

    runners: dict[str, Any] = {"local": LocalRunner()}
    if runner:
        from pytest_sme2.runners.host import HostRunner

        runners["host"] = HostRunner(runner, timing={None: runner})  # its own runner is both builds
    if qemu_runner and qemu:
        from pytest_sme2.runners.qemu import QemuRunner

        runners["qemu"] = QemuRunner(qemu_runner, qemu=Path(qemu), sysroot=sysroot)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(blocks):
            for name, r in runners.items():
                for model in models:
                    if name == "qemu" and model != "toy_cnn":
                        continue
                    pte, inp = PROGRAMS[model]
                    runs = 1 if name == "qemu" else RUNS
                    request = RunRequest(pte=pte, runs=runs, warmup=1, out_dir=Path(tmp), inputs=(inp,),
                                         mode=MODE_TIMING)
                    result = r.run(request)
                    t0 = time.perf_counter()
                    memory = memory_of(pte, [result.metadata])
                    read_s = time.perf_counter() - t0
                    rec = out.setdefault(f"{name} {model}", {"peak_kb": [], "ru_maxrss_kb": [], "start_kb": [],
                                                              "load_ms": [], "planned": [], "read_ms": [],
                                                              "source": ""})
                    rec["peak_kb"].append(memory.peak_kb[0] if memory.peak_kb else None)
                    rec["ru_maxrss_kb"].append(result.metadata.get("ru_maxrss_kb"))
                    rec["start_kb"].append(memory.start_kb[0] if memory.start_kb else None)
                    rec["load_ms"].append(memory.load_ms[0] if memory.load_ms else None)
                    rec["planned"].append(memory.planned_total)
                    rec["read_ms"].append(read_s * 1e3)
                    rec["source"] = str(memory.peak_source)
    return out


def costs(samples: int = 200) -> dict[str, float]:
    """What measuring costs, per block: the VmHWM reset + reads of the local runtime, parsing the runner's lines."""
    from pytest_sme2.evidence.memory import PeakDelta, runner_log_memory

    t0 = time.perf_counter()
    for _ in range(samples):
        p = PeakDelta()
        p.start()
        p.peak_kb()
    delta_us = (time.perf_counter() - t0) / samples * 1e6
    log = ("Model loaded in 1.250000 ms.\nsme2_runner planned_memory: buffers=1 total_bytes=12400 sizes=12400\n"
           + "Iteration 1 of 30: 0.1 ms\n" * 30 + "sme2_runner peak_rss_kb: 5432\n")
    t0 = time.perf_counter()
    for _ in range(samples):
        runner_log_memory(log)
    parse_us = (time.perf_counter() - t0) / samples * 1e6
    return {"peak_delta_us": delta_us, "runner_lines_parse_us": parse_us}


# ------------------------------------------------------------------------------------------ across sessions


def _dev(values: list[float], center: float) -> float:
    return max(abs(v / center - 1) for v in values) if center else float("nan")


def summarize(sessions: list[dict[str, Any]]) -> dict[str, Any]:
    keys = sorted({k for s in sessions for k in s})
    rows: dict[str, Any] = {}
    for key in keys:
        per = [s[key] for s in sessions if key in s]
        peaks = [[p for p in r["peak_kb"] if p is not None] for r in per]
        medians = [statistics.median(p) for p in peaks if p]
        overall = statistics.median([p for ps in peaks for p in ps]) if medians else None
        # Spread within a session, relative to the median of all (a local rise can be 0 KiB: no ratio of extremes).
        within = max((max(p) - min(p)) / overall for p in peaks if p) if medians and overall else None
        maxrss = [x for r in per for x in r["ru_maxrss_kb"] if x is not None]
        starts = [x for r in per for x in r["start_kb"] if x is not None]
        rows[key] = {
            "source": per[0]["source"], "sessions": len(per), "blocks": sum(len(p) for p in peaks),
            "peak_median_kb": overall, "session_medians_kb": medians,
            "within_session_spread": within,
            "between_session_dev": _dev(medians, overall) if medians and overall else None,
            "ru_maxrss_median_kb": statistics.median(maxrss) if maxrss else None,
            "start_median_kb": statistics.median(starts) if starts else None,
            "planned_bytes": sorted({p for r in per for p in r["planned"]}),
            "load_median_ms": statistics.median([x for r in per for x in r["load_ms"] if x is not None] or [0.0]),
            "read_ms_median": statistics.median([x for r in per for x in r["read_ms"]]),
        }
    # The gate's margin is for runner processes (the local runtime's rise is reported, not gated: see its rows).
    process = [r for r in rows.values() if r["source"] in ("process", "emulator")]
    worst = max((r["between_session_dev"] for r in process if r["between_session_dev"] is not None), default=None)
    within = max((r["within_session_spread"] for r in process if r["within_session_spread"] is not None),
                 default=None)
    return {"rows": rows, "worst_between_session_dev": worst, "worst_within_session_spread": within,
            "read_ms_max": max((r["read_ms_median"] for r in rows.values()), default=None)}


def table(summary: dict[str, Any], cost: dict[str, float]) -> list[str]:
    lines = [f"{'runner model':<34} {'peak median':>12} {'within':>8} {'between':>8} {'planned B':>10} "
             f"{'load ms':>8} {'read ms':>8}  source",
             "-" * 110]
    for key, r in summary["rows"].items():
        peak = f"{r['peak_median_kb'] / 1024:.2f} MB" if r["peak_median_kb"] is not None else "—"
        within = f"{r['within_session_spread'] * 100:.1f}%" if r["within_session_spread"] is not None else "—"
        between = f"{r['between_session_dev'] * 100:.1f}%" if r["between_session_dev"] is not None else "—"
        planned = ",".join(str(p) for p in r["planned_bytes"])
        lines.append(f"{key:<34} {peak:>12} {within:>8} {between:>8} {planned:>10} {r['load_median_ms']:>8.2f} "
                     f"{r['read_ms_median']:>8.2f}  {r['source']}"
                     + (f"; at start {r['start_median_kb'] / 1024:.1f} MB" if r["start_median_kb"] else "")
                     + (f"; wait4 ru_maxrss {r['ru_maxrss_median_kb'] / 1024:.1f} MB (the parent's, not used)"
                        if r["ru_maxrss_median_kb"] else ""))
    worst = summary["worst_between_session_dev"]
    lines.append("")
    if worst is not None:
        lines.append(f"runner processes: largest between-session deviation of a median {worst * 100:.2f}%, largest "
                     f"spread within a session {summary['worst_within_session_spread'] * 100:.2f}% (default margin "
                     "of the gate: 5 %)")
    lines.append(f"cost per local block of the VmHWM reset + reads: {cost['peak_delta_us']:.1f} µs; parsing the "
                 f"runner's memory lines: {cost['runner_lines_parse_us']:.1f} µs")
    return lines


def measure(sessions_n: int, blocks: int, models: list[str], *, runner: str | None = None,
            qemu_runner: str | None = None, qemu: str | None = None, sysroot: str = "/usr/aarch64-linux-gnu",
            say: Any = print) -> dict[str, Any]:
    """``sessions_n`` fresh processes of ``blocks`` blocks each; the summary, the costs and the printed table."""
    sessions = []
    for i in range(sessions_n):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--session", "--blocks", str(blocks), "--models",
               ",".join(models), *(["--runner", runner] if runner else []),
               *(["--qemu-runner", qemu_runner, "--qemu", qemu, "--sysroot", sysroot] if qemu_runner and qemu else [])]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        if proc.returncode != 0:
            raise RuntimeError(f"memory_noise session failed: {proc.stderr[-3000:]}")
        sessions.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        say(f"session {i + 1}/{sessions_n}: {time.perf_counter() - t0:.1f} s")
    summary = summarize(sessions)
    cost = costs()
    return {"sessions": sessions, "summary": summary, "cost": cost, "lines": table(summary, cost),
            "peak_between_session_dev": summary["worst_between_session_dev"],
            "peak_within_session_spread": summary["worst_within_session_spread"],
            "memory_read_ms": summary["read_ms_max"], "peak_delta_us": cost["peak_delta_us"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 sessions x 3 blocks, toy_cnn only")
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--runner", help="pytest-sme2's runner for this host (pytest-sme2 build-runner)")
    parser.add_argument("--qemu-runner", help="its aarch64 build; with --qemu")
    parser.add_argument("--qemu", help="qemu-aarch64 with SME2 (-cpu max)")
    parser.add_argument("--sysroot", default="/usr/aarch64-linux-gnu")
    parser.add_argument("--out", type=Path, default=RESULTS / "memory_noise", help="results stem (.txt, .json)")
    parser.add_argument("--session", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--models", default="")
    args = parser.parse_args(argv)
    models = args.models.split(",") if args.models else (["toy_cnn"] if args.quick else list(PROGRAMS))
    if args.session:
        print(json.dumps(session(args.blocks, models, runner=args.runner, qemu_runner=args.qemu_runner, qemu=args.qemu,
                                 sysroot=args.sysroot)))
        return 0
    sessions_n, blocks = (2, 3) if args.quick else (args.sessions, args.blocks)
    r = measure(sessions_n, blocks, models, runner=args.runner, qemu_runner=args.qemu_runner, qemu=args.qemu,
                sysroot=args.sysroot, say=print)
    sessions, summary, cost, lines = r["sessions"], r["summary"], r["cost"], r["lines"]
    print("\n".join(lines))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    header = [f"memory_noise: {sessions_n} sessions x {blocks} blocks, {when}, load average {os.getloadavg()[0]:.2f}",
              ""]
    args.out.with_suffix(".txt").write_text("\n".join(header + lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps({"sessions": sessions, "summary": summary, "cost": cost},
                                                        indent=1) + "\n")
    print(json.dumps({k: r[k] for k in ("peak_between_session_dev", "peak_within_session_spread", "memory_read_ms",
                                        "peak_delta_us")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
