"""Tracing overhead of the local runtime, per example model: traced and untraced blocks, interleaved.

    python benchmarks/tracing_overhead.py            # every model x fp32/int8 x xnnpack/portable
    python benchmarks/tracing_overhead.py --quick    # fewer blocks, for a smoke run
    python benchmarks/tracing_overhead.py --models toy_cnn --dtypes fp32 --backends xnnpack --pairs 10

For each configuration the real ``LocalRunner`` runs blocks of the exported ``.pte`` (one program
load + warm-ups + executions, as the plugin's blocks are) in the two run modes, alternating
untraced/traced and traced/untraced (ABBA), so drift and other work on the machine hit both alike.
Per configuration it reports:

- **untraced**: ``perf_counter_ns`` around each ``Method.execute`` call, tracer off (``timing``);
- **traced, Python clock**: the same clock in traced blocks (``enable_etdump=True``): what the
  tracer costs as seen from outside the call;
- **traced, Method::execute**: the E2E the trace itself gives (what a traced block reports);
- the ratio traced/untraced (Python clock) with a 95 % block-bootstrap interval, the per-pair
  ratios' range, and the A/A noise: the same ratio between the even and the odd untraced blocks;
- the analysis cost per test: reading and analyzing one traced block's ETDump (``read_etdump`` +
  ``analyze``, modules already imported), the trace's size and events per execution;
- each block's disturbance (``RunResult.load.preempted_share``): a disturbed run says so.

Medians everywhere. Results go to ``benchmarks/results/tracing_overhead.txt`` (the printed table)
and ``.json`` (every block). Exports are cached in ``.sme2_cache`` of the checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a clean checkout: make the repo importable
    sys.path.insert(0, str(ROOT))

MODELS = ("toy_cnn", "mobilenet_v3_small", "tiny_transformer")
DTYPES = ("fp32", "int8")
BACKENDS = ("xnnpack", "portable")
#: Aim for this much execution time per block; at least MIN_RUNS measured executions either way.
BLOCK_TARGET_S = 0.4
MIN_RUNS = 3
MAX_RUNS = 300
RESULTS = ROOT / "benchmarks" / "results"


@dataclass
class Config:
    model: str
    dtype: str
    backend: str
    runs: int = 0
    warmup: int = 0
    untraced: list[list[float]] = field(default_factory=list)
    traced_wall: list[list[float]] = field(default_factory=list)
    traced_e2e: list[list[float]] = field(default_factory=list)
    analysis_s: list[float] = field(default_factory=list)
    trace_bytes: list[int] = field(default_factory=list)
    events_per_run: float = 0.0
    preempted: dict[str, list[float]] = field(default_factory=lambda: {"untraced": [], "traced": []})

    @property
    def name(self) -> str:
        return f"{self.model} {self.dtype}/{self.backend}"


def cpu_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {"nproc": os.cpu_count(), "python": platform.python_version()}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return facts
    for key in ("vendor_id", "cpu family", "model", "model name", "stepping"):
        for line in text.splitlines():
            if line.split(":")[0].strip() == key:
                facts[key] = line.split(":", 1)[1].strip()
                break
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    facts["avx512f"] = "avx512f" in flags
    facts["avx2"] = "avx2" in flags
    return facts


def _measured(values: Any, warmup: int) -> list[float]:
    return [float(x) for x in list(values)[warmup:]]


def measure(config: Config, exported: Any, pairs: int, out_dir: Path, say: Any) -> None:
    from pytest_sme2.analysis.run import analyze
    from pytest_sme2.evidence.trace import read_etdump
    from pytest_sme2.runners.base import MODE_TIMING, MODE_TRACE, RunRequest
    from pytest_sme2.runners.local import LocalRunner

    runner = LocalRunner()
    inputs = tuple(exported.input_files) or None

    def request(mode: str, runs: int, warmup: int) -> RunRequest:
        return RunRequest(pte=exported.pte_path, runs=runs, warmup=warmup, threads=1, out_dir=out_dir, inputs=inputs,
                          mode=mode, label=config.name.replace(" ", "_").replace("/", "_"))

    # Size the blocks from one short untraced block: ~BLOCK_TARGET_S of executions each.
    probe = runner.run(request(MODE_TIMING, 2, 1))
    per_run_s = statistics.median(probe.measured_ms) / 1e3
    config.runs = int(min(MAX_RUNS, max(MIN_RUNS, BLOCK_TARGET_S / per_run_s)))
    config.warmup = 1 if per_run_s > 0.05 else 3
    say(f"  {config.name}: ~{per_run_s * 1e3:.3f} ms per execution -> blocks of {config.warmup} + {config.runs}")
    for k in range(pairs):
        for mode in ((MODE_TIMING, MODE_TRACE) if k % 2 == 0 else (MODE_TRACE, MODE_TIMING)):
            result = runner.run(request(mode, config.runs, config.warmup))
            preempted = result.load.preempted_share if result.load else float("nan")
            if mode == MODE_TIMING:
                config.untraced.append(_measured(result.e2e_ms, config.warmup))
                config.preempted["untraced"].append(preempted)
                continue
            if not result.per_operator or result.trace_path is None:
                raise SystemExit(f"{config.name}: the traced block recorded no trace: {result.per_operator_note}")
            config.traced_wall.append(_measured(result.metadata["python_wall_ms"], config.warmup))
            config.traced_e2e.append(_measured(result.e2e_ms, config.warmup))
            config.preempted["traced"].append(preempted)
            started = time.perf_counter()
            timeline = read_etdump(result.trace_path)
            analyze(timeline, warmup=config.warmup)
            config.analysis_s.append(time.perf_counter() - started)
            config.trace_bytes.append(result.trace_path.stat().st_size)
            config.events_per_run = len(timeline.table[timeline.table["run_index"] >= 0]) / timeline.num_runs
            result.trace_path.unlink()  # a long run would otherwise keep every block's trace


def summarize(config: Config) -> dict[str, Any]:
    from benchmarks.former_stats import ratio_of_medians_ci

    def pooled(blocks: list[list[float]]) -> np.ndarray:
        return np.concatenate([np.asarray(b) for b in blocks])

    def sizes(blocks: list[list[float]]) -> list[int]:
        return [len(b) for b in blocks]

    untraced, wall, e2e = pooled(config.untraced), pooled(config.traced_wall), pooled(config.traced_e2e)
    ratio = ratio_of_medians_ci(untraced, wall, baseline_blocks=sizes(config.untraced),
                                candidate_blocks=sizes(config.traced_wall))
    gate_view = ratio_of_medians_ci(untraced, e2e, baseline_blocks=sizes(config.untraced),
                                    candidate_blocks=sizes(config.traced_e2e))
    pair_ratios = [statistics.median(t) / statistics.median(u)
                   for u, t in zip(config.untraced, config.traced_wall, strict=True)]
    even, odd = config.untraced[0::2], config.untraced[1::2]
    aa = ratio_of_medians_ci(pooled(even), pooled(odd), baseline_blocks=sizes(even), candidate_blocks=sizes(odd))
    untraced_ms, wall_ms = float(np.median(untraced)), float(np.median(wall))
    noise = max(abs(aa.estimate - 1), aa.half_width_rel)
    overhead = ratio.estimate - 1
    below_noise = abs(overhead) <= noise or (ratio.low <= 1 <= ratio.high)
    return {
        "model": config.model, "dtype": config.dtype, "backend": config.backend,
        "blocks_per_mode": len(config.untraced), "warmup": config.warmup, "runs_per_block": config.runs,
        "untraced_ms": untraced_ms, "traced_wall_ms": wall_ms, "traced_e2e_ms": float(np.median(e2e)),
        "ratio": ratio.to_dict(), "pair_ratio_median": statistics.median(pair_ratios),
        "pair_ratio_min": min(pair_ratios), "pair_ratio_max": max(pair_ratios),
        "aa_untraced": aa.to_dict(), "noise": noise, "overhead_below_noise": below_noise,
        "traced_e2e_over_untraced": gate_view.to_dict(),
        "overhead_us_per_execution": (wall_ms - untraced_ms) * 1e3,
        "events_per_execution": config.events_per_run,
        "overhead_us_per_event": ((wall_ms - untraced_ms) * 1e3 / config.events_per_run
                                  if config.events_per_run else None),
        "python_minus_trace_us": (wall_ms - float(np.median(e2e))) * 1e3,
        "analysis_ms": 1e3 * statistics.median(config.analysis_s),
        "trace_kb": statistics.median(config.trace_bytes) / 1e3,
        "preempted_untraced": statistics.median(config.preempted["untraced"]),
        "preempted_traced": statistics.median(config.preempted["traced"]),
    }


def table(rows: list[dict[str, Any]]) -> list[str]:
    head = (f"{'model':30s} {'untraced':>9s} {'traced':>9s} {'ratio [95% CI]':>22s} {'pairs min..max':>14s} "
            f"{'A/A noise':>9s} {'verdict':>12s} {'M::exec':>9s} {'us/event':>8s} {'analysis':>9s} {'trace':>8s} "
            f"{'preempted':>9s}")
    lines = [head, "-" * len(head)]
    for r in rows:
        iv = r["ratio"]
        verdict = "below noise" if r["overhead_below_noise"] else f"{100 * (iv['estimate'] - 1):+.1f} %"
        per_event = "" if r["overhead_us_per_event"] is None else f"{r['overhead_us_per_event']:.2f}"
        name = f"{r['model']} {r['dtype']}/{r['backend']}"
        ci = f"{iv['estimate']:7.3f} [{iv['low']:.3f},{iv['high']:.3f}]"
        spread = f"{r['pair_ratio_min']:6.3f}..{r['pair_ratio_max']:.3f}"
        preempted = f"{100 * r['preempted_untraced']:4.0f}/{100 * r['preempted_traced']:.0f}%"
        lines.append(
            f"{name:30s} {r['untraced_ms']:8.3f}m {r['traced_wall_ms']:8.3f}m {ci} {spread} {100 * r['noise']:8.1f}% "
            f"{verdict:>12s} {r['traced_e2e_ms']:8.3f}m {per_event:>8s} {r['analysis_ms']:7.1f}ms "
            f"{r['trace_kb']:6.0f}kB {preempted:>9s}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=("fp32", "fp16", "int8"))
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--pairs", type=int, default=6, help="traced+untraced block pairs per configuration")
    parser.add_argument("--quick", action="store_true", help="3 pairs (a smoke run, not an estimate)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for tracing_overhead.{txt,json}")
    parser.add_argument("--cache-dir", type=Path, default=ROOT / ".sme2_cache")
    args = parser.parse_args(argv)
    pairs = 3 if args.quick else args.pairs

    import example_models  # noqa: F401 - registers the example models
    from benchmarks.console import Console
    from pytest_sme2.program.export import export_model

    console = Console()
    say, out_lines = console.say, console.lines

    started = time.time()
    facts = cpu_facts()
    from importlib.metadata import version

    say(f"tracing overhead of the local runtime ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    say(f"  CPU: {facts.get('model name', '?')} family {facts.get('cpu family', '?')} model {facts.get('model', '?')} "
        f"(avx512f {'yes' if facts.get('avx512f') else 'no'}, avx2 {'yes' if facts.get('avx2') else 'no'}), "
        f"{facts['nproc']} CPUs; executorch {version('executorch')}, torch {version('torch')}; 1 runtime thread")
    load_start = [round(x, 2) for x in os.getloadavg()]
    say(f"  load average at start: {load_start}; {pairs} pairs of blocks per configuration (ABBA)")
    configs = [Config(m, d, b) for m in args.models for d in args.dtypes for b in args.backends]
    rows = []
    with tempfile.TemporaryDirectory(prefix="sme2_tracing_") as tmp:
        for config in configs:
            exported = export_model(config.model, dtype=config.dtype, backend=config.backend,
                                    cache_dir=args.cache_dir, progress=lambda line: print(f"  .. {line}", flush=True))
            measure(config, exported, pairs, Path(tmp), say)
            rows.append(summarize(config))
    load_end = [round(x, 2) for x in os.getloadavg()]
    say()
    say("untraced / traced = median E2E per execution from the Python clock (m = ms), tracer off / on; ratio = "
        "traced/untraced with a 95 % block-bootstrap CI; pairs = per-pair ratios; A/A noise = the larger of "
        "|ratio-1| and the CI half-width between even and odd untraced blocks; verdict: below noise when the "
        "ratio's CI holds 1 or |ratio-1| <= noise; M::exec = median Method::execute of the traced blocks (what "
        "they report as E2E); us/event = (traced - untraced) per trace event; analysis = read_etdump + analyze "
        "of one block's trace; preempted = median preempted share of the untraced/traced blocks")
    for line in table(rows):
        say(line)
    say(f"  load average at end: {load_end}; total {time.time() - started:.0f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tracing_overhead.txt").write_text("\n".join(out_lines) + "\n", encoding="utf-8")
    detail = {"schema_version": 1, "cpu": facts, "pairs": pairs, "loadavg_start": load_start, "loadavg_end": load_end,
              "configurations": rows,
              "blocks": [{"name": c.name, "untraced_ms": c.untraced, "traced_wall_ms": c.traced_wall,
                          "traced_e2e_ms": c.traced_e2e, "analysis_s": c.analysis_s, "preempted": c.preempted}
                         for c in configs]}
    (args.out / "tracing_overhead.json").write_text(json.dumps(detail, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"configurations": [{k: r[k] for k in ("model", "dtype", "backend", "untraced_ms",
                                                           "traced_wall_ms", "overhead_below_noise", "analysis_ms")}
                                         for r in rows], "loadavg": load_end}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
