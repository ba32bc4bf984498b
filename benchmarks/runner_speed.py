"""Our runner against the Python runtime, the tracer's cost in our runner, and the cost of the emulated SME2
on/off test: side by side in one run (issue 17).

    python benchmarks/runner_speed.py            # every configuration, ~10 min here
    python benchmarks/runner_speed.py --quick    # toy_cnn fp32/xnnpack, 4 rounds: a smoke run, not an estimate
    python benchmarks/run.py --only runner       # the same, as a section of the benchmark script

Everything is a real run on this machine; 1 runtime thread everywhere.

1. **Our runner vs the Python runtime** (:func:`compare`). Per example configuration, rounds of four blocks, one
   per arm, in the order A B C D, then D C B A (drift and other sessions' load hit every arm alike): ours
   untraced (``sme2_runner`` without ``--etdump_path``: no tracer attached), ours traced (``--etdump_path``),
   the Python runtime untraced and traced (``LocalRunner`` modes ``timing`` and ``trace``). A block is one
   runner process, or one program load in this process: warm-ups, then executions sized to ~0.25 s. Clocks:

   - ours: each execution's ``Iteration`` line (a steady clock around ``Method::execute()``; the inputs are
     set outside it), in both modes;
   - the Python runtime, untraced: ``perf_counter_ns`` around ``Method.execute(inputs)``, a *wider* span: it
     also copies the inputs in and clones the outputs (the pybindings call);
   - traced, both runtimes: the trace's ``Method::execute`` events, the same span on both sides.

   "ours / Python, untraced" is what each device reports as its untraced latency (the spans differ, and the
   tables say so); "ours / Python, traced Method::execute" compares the two runtimes on an identical span.
   A ratio is the median of every measured execution of one arm over the other's, with the exact 95 %
   Hodges-Lehmann interval on block medians (``stats.block_ratio_ci``, the gate's: blocks are the independent
   units). A/A noise: ours untraced, even blocks against odd ones, the same way.

2. **The tracer's cost in our runner**, from the same rounds: ours traced / ours untraced (``Iteration`` clock
   on both sides), and per event: (traced - untraced median) / events per execution of the trace
   (``read_etdump``: every event of an execution, operators and framework events, as ``tracing_overhead.py``
   counts them). The Python runtime's traced/untraced (its ``perf_counter_ns`` clock) is printed beside it.

3. **Start-up** (:func:`startup`): one-execution untraced runs of our runner, one process each: the wall time
   from ``Popen`` to exit against the runner's own ``Model loaded in X ms`` line and its one execution; the
   rest is process start, dynamic linking of the SDK's libraries, runtime init and exit. Beside it (full run),
   a fresh ``python`` running the Python runtime once (import, load, one execution): what the local device
   pays once per session.

4. **The emulated on/off test** (:func:`emulated`): the README's emulated command for one example suite,
   ``python -m pytest example_models/test_<model>.py -k sme2_speedup --sme2-device=qemu`` at the emulated
   device's defaults (6 blocks x (1 + 3) executions per arm; blocks disturbed by other load are measured
   again), with fresh baseline and artifact directories. The export and the runner builds are made (or found
   in the cache) first and timed apart, so the command's wall time is a CI run with ``.sme2_cache`` cached.
   From the traces it wrote: the EMULATED time per execution of each arm (``Method::execute``, median) and the
   off/on ratio of emulated time. QEMU emulates SME more slowly than NEON, so that ratio says nothing about a
   device and is never called a speedup here.

Results of the script: ``benchmarks/results/runner_speed.txt`` (what it printed) and ``.json`` (every number of
the tables with its interval, block design, round orders and preempted shares per configuration; every start-up
process; each emulated command, its design, checks and per-arm block counts).
``run.py``'s section writes nothing but its own output. Exports and runner builds are cached in ``.sme2_cache``
of the checkout, where the plugin looks for them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a clean checkout: make the repo importable
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results"
CACHE = ROOT / ".sme2_cache"

#: (model, dtype, backend) of the runtime comparison; portable only for toy_cnn (MobileNetV3 on the portable
#: kernels takes ~0.3 s per execution: 8 rounds of it would be the whole budget).
CONFIGS = (
    ("toy_cnn", "fp32", "xnnpack"), ("toy_cnn", "int8", "xnnpack"), ("toy_cnn", "fp32", "portable"),
    ("mobilenet_v3_small", "fp32", "xnnpack"), ("mobilenet_v3_small", "int8", "xnnpack"),
    ("tiny_transformer", "fp32", "xnnpack"), ("tiny_transformer", "int8", "xnnpack"),
)
#: The example suites whose test_sme2_speedup runs on the emulated device (each is fp32/xnnpack).
EMULATED_MODELS = ("toy_cnn", "mobilenet_v3_small", "tiny_transformer")
#: The configuration the emulated on/off tests export (their sme2_model markers).
EMULATED_CONFIG = ("fp32", "xnnpack")

#: The arms of a round, in A B C D order.
ARMS = ("ours", "ours_traced", "python", "python_traced")
#: Aim for this much execution time per block; at least MIN_RUNS measured executions either way.
BLOCK_TARGET_S = 0.25
QUICK_BLOCK_TARGET_S = 0.1
MIN_RUNS = 3
MAX_RUNS = 2000

LOADED_LINE = re.compile(r"Model loaded in ([0-9.eE+-]+) ms")

Say = Callable[[str], None]


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ------------------------------------------------------------------------------------- 1 + 2: runtimes


@dataclass
class Config:
    """One configuration's blocks: measured ms per execution, one list per block, per clock."""

    model: str
    dtype: str
    backend: str
    runs: int = 0
    warmup: int = 0
    #: ours untraced (Iteration lines)
    ours: list[list[float]] = field(default_factory=list)
    #: ours traced: Iteration lines, and the trace's Method::execute
    ours_traced_clock: list[list[float]] = field(default_factory=list)
    ours_traced_trace: list[list[float]] = field(default_factory=list)
    #: the Python runtime untraced (perf_counter_ns around Method.execute(inputs))
    python: list[list[float]] = field(default_factory=list)
    #: the Python runtime traced: perf_counter_ns, and the trace's Method::execute
    python_traced_clock: list[list[float]] = field(default_factory=list)
    python_traced_trace: list[list[float]] = field(default_factory=list)
    events_per_execution: float = 0.0
    preempted: dict[str, list[float]] = field(default_factory=lambda: {arm: [] for arm in ARMS})
    order: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.model} {self.dtype}/{self.backend}"

    @property
    def label(self) -> str:
        return f"{self.model}_{self.dtype}_{self.backend}"


def host_runner() -> Any:
    """Our runner for this host, built from the installed executorch wheel (cached in ``.sme2_cache/runners``)."""
    from pytest_sme2.runners import make_runner

    return make_runner("host", runner_cache=CACHE / "runners")


def export(model: str, dtype: str, backend: str) -> Any:
    import example_models  # noqa: F401 - registers the example models
    from pytest_sme2.program.export import export_model

    return export_model(model, dtype=dtype, backend=backend, cache_dir=CACHE,
                        progress=lambda line: print(f"  .. {line}", file=sys.stderr, flush=True))


def _measured(values: Any, warmup: int) -> list[float]:
    return [float(x) for x in list(values)[warmup:]]


def compare(config: Config, exported: Any, ours_runner: Any, rounds: int, out_dir: Path, *,
            block_target_s: float = BLOCK_TARGET_S) -> None:
    """``rounds`` rounds of the four arms (A B C D, then D C B A) into ``config``."""
    from pytest_sme2.evidence.trace import read_etdump
    from pytest_sme2.runners.base import MODE_TIMING, MODE_TRACE, RunRequest
    from pytest_sme2.runners.local import LocalRunner

    python_runner = LocalRunner()
    inputs = tuple(exported.input_files) or None

    def request(mode: str, runs: int, warmup: int) -> RunRequest:
        return RunRequest(pte=exported.pte_path, runs=runs, warmup=warmup, threads=1, out_dir=out_dir, inputs=inputs,
                          mode=mode, label=config.label)

    # Size the blocks from one short untraced block of ours.
    probe = ours_runner.run(request(MODE_TIMING, 2, 1))
    per_run_s = statistics.median(probe.measured_ms) / 1e3
    config.runs = int(min(MAX_RUNS, max(MIN_RUNS, block_target_s / per_run_s)))
    config.warmup = 1 if per_run_s > 0.05 else 3
    for k in range(rounds):
        order = ARMS if k % 2 == 0 else ARMS[::-1]
        config.order.append("".join("ABCD"[ARMS.index(a)] for a in order))
        for arm in order:
            traced = arm.endswith("_traced")
            runner = ours_runner if arm.startswith("ours") else python_runner
            result = runner.run(request(MODE_TRACE if traced else MODE_TIMING, config.runs, config.warmup))
            config.preempted[arm].append(result.load.preempted_share if result.load else float("nan"))
            if not traced:
                (config.ours if arm == "ours" else config.python).append(_measured(result.e2e_ms, config.warmup))
                continue
            if result.trace_path is None or not result.per_operator:
                raise SystemExit(f"{config.name}: the traced {arm} block recorded no trace: {result.per_operator_note}")
            trace = _measured(result.e2e_ms, config.warmup)
            if arm == "ours_traced":
                config.ours_traced_clock.append(_measured(result.metadata["log_iteration_ms"], config.warmup))
                config.ours_traced_trace.append(trace)
                timeline = read_etdump(result.trace_path)
                table = timeline.table
                config.events_per_execution = len(table[table["run_index"] >= 0]) / timeline.num_runs
            else:
                config.python_traced_clock.append(_measured(result.metadata["python_wall_ms"], config.warmup))
                config.python_traced_trace.append(trace)
            result.trace_path.unlink()  # a long run would otherwise keep every block's trace


def _ratio(baseline: list[list[float]], candidate: list[list[float]]) -> dict[str, Any]:
    """candidate / baseline: median ratio and the exact block interval (``stats.block_ratio_ci``)."""
    from pytest_sme2.gate.stats import block_ratio_ci

    effect = block_ratio_ci([x for b in baseline for x in b], [x for b in candidate for x in b],
                            baseline_blocks=[len(b) for b in baseline], candidate_blocks=[len(b) for b in candidate])
    iv = effect.interval
    return {"estimate": effect.estimate, "low": iv.low if iv else None, "high": iv.high if iv else None,
            "coverage": iv.coverage if iv else None, "p_value": effect.p_value, "reason": effect.reason}


def _median(blocks: list[list[float]]) -> float:
    return statistics.median(x for b in blocks for x in b)


def summarize(config: Config) -> dict[str, Any]:
    ours, ours_traced = _median(config.ours), _median(config.ours_traced_clock)
    python, python_traced = _median(config.python), _median(config.python_traced_clock)
    events = config.events_per_execution
    aa = _ratio(config.ours[0::2], config.ours[1::2])
    tracer = _ratio(config.ours, config.ours_traced_clock)
    noise = max([abs(aa["estimate"] - 1), *(abs(aa[k] - 1) for k in ("low", "high") if aa[k] is not None)])
    holds_one = tracer["low"] is not None and tracer["low"] <= 1 <= tracer["high"]
    return {
        "model": config.model, "dtype": config.dtype, "backend": config.backend,
        "blocks_per_arm": len(config.ours), "warmup": config.warmup, "runs_per_block": config.runs,
        "order": config.order,
        "ours_untraced_ms": ours, "ours_traced_ms": ours_traced,
        "ours_traced_execute_ms": _median(config.ours_traced_trace),
        "python_untraced_ms": python, "python_traced_ms": python_traced,
        "python_traced_execute_ms": _median(config.python_traced_trace),
        "ours_over_python_untraced": _ratio(config.python, config.ours),
        "ours_over_python_traced_execute": _ratio(config.python_traced_trace, config.ours_traced_trace),
        "aa_ours_untraced": aa, "noise": noise,
        "tracer_ours": tracer, "tracer_below_noise": holds_one or abs(tracer["estimate"] - 1) <= noise,
        "tracer_python": _ratio(config.python, config.python_traced_clock),
        "events_per_execution": events,
        "tracer_us_per_event": (ours_traced - ours) * 1e3 / events if events else None,
        "tracer_python_us_per_event": (python_traced - python) * 1e3 / events if events else None,
        "preempted_median": {arm: statistics.median(v) for arm, v in config.preempted.items() if v},
    }


def _fmt_ratio(r: dict[str, Any]) -> str:
    if r["low"] is None:
        return f"{r['estimate']:.3f} [n/a]"
    return f"{r['estimate']:.3f} [{r['low']:.3f},{r['high']:.3f}]"


def _ms(value: float) -> str:
    return f"{value:.4f}" if value < 1 else f"{value:.3f}" if value < 100 else f"{value:.1f}"


def runtime_table(rows: list[dict[str, Any]]) -> list[str]:
    head = (f"{'configuration':32s} {'ours':>9s} {'python':>9s} {'ours/python untraced':>23s} "
            f"{'ours/python traced M::exec':>27s} {'A/A noise':>9s}")
    lines = ["our runner vs the Python runtime, untraced (ms per execution, median; [95 % block interval])",
             head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['model'] + ' ' + r['dtype'] + '/' + r['backend']:32s} {_ms(r['ours_untraced_ms']):>9s} "
                     f"{_ms(r['python_untraced_ms']):>9s} {_fmt_ratio(r['ours_over_python_untraced']):>23s} "
                     f"{_fmt_ratio(r['ours_over_python_traced_execute']):>27s} {100 * r['noise']:8.1f}%")
    lines.append("  ours = Iteration lines (Method::execute() only); python = perf_counter_ns around "
                 "Method.execute(inputs), which also copies inputs in and clones outputs; traced M::exec = the "
                 "trace's Method::execute on both sides (same span, both traced); A/A noise = the larger of "
                 "|ratio-1| and the interval's reach between even and odd untraced blocks of ours")
    head = (f"{'configuration':32s} {'untraced':>9s} {'traced':>9s} {'traced/untraced':>23s} {'verdict':>12s} "
            f"{'events':>6s} {'us/event':>8s} {'python t/u':>10s} {'py us/ev':>8s}")
    lines += ["", "the tracer's cost in our runner (ms per execution, Iteration clock in both modes)", head,
              "-" * len(head)]
    for r in rows:
        t = r["tracer_ours"]
        verdict = "below noise" if r["tracer_below_noise"] else f"{100 * (t['estimate'] - 1):+.1f} %"
        per_event = "" if r["tracer_us_per_event"] is None else f"{r['tracer_us_per_event']:.2f}"
        py_event = "" if r["tracer_python_us_per_event"] is None else f"{r['tracer_python_us_per_event']:.2f}"
        lines.append(f"{r['model'] + ' ' + r['dtype'] + '/' + r['backend']:32s} {_ms(r['ours_untraced_ms']):>9s} "
                     f"{_ms(r['ours_traced_ms']):>9s} {_fmt_ratio(t):>23s} {verdict:>12s} "
                     f"{r['events_per_execution']:6.0f} {per_event:>8s} {r['tracer_python']['estimate']:10.3f} "
                     f"{py_event:>8s}")
    lines.append("  verdict: below noise when the interval holds 1 or |ratio-1| <= the A/A noise; events = trace "
                 "events per execution; python t/u = the Python runtime's traced/untraced in the same rounds (its own "
                 "clock)")
    return lines


# ------------------------------------------------------------------------------------------- 3: start-up

_PYTHON_CHILD = """
import json, sys, time
from pathlib import Path
t0 = time.perf_counter()
from pytest_sme2.runners.base import MODE_TIMING, RunRequest
from pytest_sme2.runners.local import LocalRunner
r = LocalRunner().run(RunRequest(pte=Path(sys.argv[1]), runs=1, warmup=0, inputs=(Path(sys.argv[2]),),
                                 mode=MODE_TIMING, out_dir=Path(sys.argv[3])))
print(json.dumps({"in_process_s": time.perf_counter() - t0, "load_ms": r.metadata["load_ms"], "exec_ms": r.e2e_ms[0]}))
"""


def startup(exported: Any, ours_runner: Any, n: int, out_dir: Path, *, python_processes: int = 0) -> dict[str, Any]:
    """``n`` one-execution processes of our runner (untraced), and ``python_processes`` fresh Python runtimes,
    alternating; medians."""
    from pytest_sme2.runners.base import MODE_TIMING, RunRequest

    req = RunRequest(pte=exported.pte_path, runs=1, warmup=0, threads=1, out_dir=out_dir,
                     inputs=tuple(exported.input_files) or None, mode=MODE_TIMING)
    cmd = ours_runner.command(req, ours_runner.binary_for(None, MODE_TIMING), None)
    ours: list[dict[str, float]] = []
    python: list[dict[str, float]] = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    for i in range(max(n, python_processes)):
        if i < n:
            started = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=out_dir, check=False, timeout=120)
            wall_ms = (time.perf_counter() - started) * 1e3
            loaded = LOADED_LINE.search(proc.stderr)
            iterations = re.findall(r"Iteration 1 of 1: ([0-9.eE+-]+) ms", proc.stderr)
            if proc.returncode != 0 or loaded is None or not iterations:
                raise SystemExit(f"our runner failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-1500:]}")
            ours.append({"wall_ms": wall_ms, "load_ms": float(loaded.group(1)), "exec_ms": float(iterations[0])})
        if i < python_processes:
            started = time.perf_counter()
            proc = subprocess.run([sys.executable, "-c", _PYTHON_CHILD, str(exported.pte_path),
                                   str(exported.input_files[0]), str(out_dir)],
                                  capture_output=True, text=True, cwd=out_dir, env=env, check=False, timeout=300)
            wall_ms = (time.perf_counter() - started) * 1e3
            if proc.returncode != 0:
                raise SystemExit(f"the Python runtime child failed ({proc.returncode}):\n{proc.stderr[-1500:]}")
            python.append({"wall_ms": wall_ms, **json.loads(proc.stdout.strip().splitlines()[-1])})

    def med(rows: list[dict[str, float]], key: str) -> float | None:
        return statistics.median(r[key] for r in rows) if rows else None

    wall, loaded_ms, exec_ms = med(ours, "wall_ms"), med(ours, "load_ms"), med(ours, "exec_ms")
    assert wall is not None and loaded_ms is not None and exec_ms is not None
    return {
        "processes": n, "ours_wall_ms": wall, "ours_wall_min_ms": min(r["wall_ms"] for r in ours),
        "ours_wall_max_ms": max(r["wall_ms"] for r in ours), "ours_load_ms": loaded_ms, "ours_exec_ms": exec_ms,
        "ours_rest_ms": statistics.median(r["wall_ms"] - r["load_ms"] - r["exec_ms"] for r in ours),
        "python_processes": python_processes, "python_wall_ms": med(python, "wall_ms"),
        "python_load_ms": med(python, "load_ms"), "python_exec_ms": med(python, "exec_ms"),
        "ours_runs": ours, "python_runs": python,
    }


def startup_table(rows: list[dict[str, Any]]) -> list[str]:
    head = (f"{'configuration':32s} {'wall':>8s} {'min..max':>13s} {'load line':>9s} {'1 exec':>9s} {'rest':>8s} "
            f"{'python: fresh process':>22s} {'its load':>8s}")
    lines = ["start-up of our runner: one process per 1-execution untraced run (ms, median)", head, "-" * len(head)]
    for r in rows:
        py = "" if r["python_wall_ms"] is None else f"{r['python_wall_ms']:.0f} ({r['python_processes']}x)"
        py_load = "" if r["python_load_ms"] is None else f"{r['python_load_ms']:.2f}"
        spread = f"{r['ours_wall_min_ms']:6.1f}..{r['ours_wall_max_ms']:<6.1f}"
        lines.append(f"{r['name']:32s} {r['ours_wall_ms']:8.2f} {spread} {r['ours_load_ms']:9.3f} "
                     f"{_ms(r['ours_exec_ms']):>9s} {r['ours_rest_ms']:8.2f} {py:>22s} {py_load:>8s}")
    lines.append("  wall = Popen to exit as the parent sees it; load line = the runner's 'Model loaded in X ms' "
                 "(Program::load + load_method); rest = wall - load - execution: process start, dynamic linking of "
                 "the SDK's libraries, runtime init, exit; python: a fresh `python` running the Python runtime once "
                 "(imports, load, one execution), what the local device pays once per session")
    return lines


# --------------------------------------------------------------------------------- 4: emulated on/off test


def emulated(model: str, work: Path, say: Say) -> dict[str, Any]:
    """Time the README's emulated on/off command for ``model``'s suite; read each arm's emulated times."""
    from pytest_sme2.evidence.trace import read_etdump
    from pytest_sme2.gate.stats import block_ratio_ci
    from pytest_sme2.runners.build import TARGET_LINUX_AARCH64, build_runner

    started = time.perf_counter()
    export(model, *EMULATED_CONFIG)
    export_s = time.perf_counter() - started
    started = time.perf_counter()
    build = build_runner(TARGET_LINUX_AARCH64, cache_dir=CACHE / "runners",
                         progress=lambda line: print(f"  .. {line}", file=sys.stderr, flush=True))
    build_s = time.perf_counter() - started
    run = work / model
    out, results = run / "out", run / "sme2.json"
    cmd = [sys.executable, "-m", "pytest", f"example_models/test_{model}.py", "-k", "sme2_speedup",
           "--sme2-device=qemu", f"--sme2-baseline-dir={run / 'baselines'}", f"--sme2-artifact-dir={run / 'artifacts'}",
           f"--sme2-out-dir={out}", f"--sme2-json={results}", "-p", "no:cacheprovider", "-q"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    load_before = load()
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=1800)
    wall_s = time.perf_counter() - started
    load_after = load()
    if proc.returncode != 0 or not results.is_file():
        raise SystemExit(f"the emulated on/off command failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                         f"{(proc.stdout + proc.stderr)[-3000:]}")
    test = json.loads(results.read_text())["tests"][0]
    warmup = int((test["profile"].get("measurement") or {}).get("warmup", 1))
    measurement = test["profile"].get("measurement") or {}
    arms: dict[str, Any] = {}
    samples: dict[str, list[list[float]]] = {}
    for arm in ("sme2_on", "sme2_off"):
        blocks = []
        for trace in sorted(out.rglob(f"*_{arm}.etdump")):
            blocks.append([float(x) for x in read_etdump(trace).e2e_ms_per_run()[warmup:]])
        if not blocks:
            raise SystemExit(f"the emulated on/off command wrote no {arm} traces under {out}")
        samples[arm] = blocks
        medians = [statistics.median(b) for b in blocks]
        arms[arm] = {"blocks": len(blocks), "executions_per_block": warmup + len(blocks[0]),
                     "median_ms": _median(blocks), "block_median_min_ms": min(medians),
                     "block_median_max_ms": max(medians), "in_asm_runs": len(list(out.rglob(f"*_{arm}.in_asm")))}
    effect = block_ratio_ci([x for b in samples["sme2_on"] for x in b], [x for b in samples["sme2_off"] for x in b],
                            baseline_blocks=[len(b) for b in samples["sme2_on"]],
                            candidate_blocks=[len(b) for b in samples["sme2_off"]])
    verdict = test.get("verdict") or {}
    row = {
        "model": model, "dtype": EMULATED_CONFIG[0], "backend": EMULATED_CONFIG[1], "command": cmd,
        "wall_s": wall_s, "export_s": export_s, "runner_build_s": build_s, "runner_built": build.built,
        "design": {k: measurement.get(k) for k in ("blocks", "warmup", "runs")},
        "status": test.get("status"), "checks": {c["name"]: c["status"] for c in verdict.get("checks", [])},
        "emulated": bool(test.get("emulated")), "arms": arms,
        "emulated_off_over_on": {"estimate": effect.estimate,
                                 "low": effect.interval.low if effect.interval else None,
                                 "high": effect.interval.high if effect.interval else None},
        "disturbance": {arm: (test.get(key) or {}).get("disturbance", "") for arm, key in
                        (("sme2_on", "profile"), ("sme2_off", "profile_off"))},
        "loadavg_before": load_before, "loadavg_after": load_after,
        "pytest_tail": proc.stdout.strip().splitlines()[-1:],
    }
    say(f"  {model}: {wall_s:.1f} s, verdict {row['status']}, load {load_before[0]} -> {load_after[0]}")
    return row


def collect_only_s() -> float:
    """The same pytest command with --collect-only: interpreter, plugin and suite import, no runs."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "example_models/test_toy_cnn.py", "-k", "sme2_speedup",
                    "--sme2-device=qemu", "--collect-only", "-q", "-p", "no:cacheprovider"],
                   cwd=ROOT, env=env, capture_output=True, check=True, timeout=600)
    return time.perf_counter() - started


def emulated_table(rows: list[dict[str, Any]], collect_s: float | None) -> list[str]:
    head = (f"{'model (fp32/xnnpack)':22s} {'command':>8s} {'blocks on/off':>13s} {'EMULATED ms/exec on':>20s} "
            f"{'off':>10s} {'EMULATED off/on time':>24s} {'verdict':>9s} {'kernels':>8s} {'numerics':>8s} "
            f"{'load':>11s}")
    lines = ["the emulated SME2 on/off test (QEMU; emulated time, NOT device time, never a speedup)", head,
             "-" * len(head)]
    for r in rows:
        on, off, q = r["arms"]["sme2_on"], r["arms"]["sme2_off"], r["emulated_off_over_on"]
        iv = f"{q['estimate']:.2f} [{q['low']:.2f},{q['high']:.2f}]" if q["low"] is not None else f"{q['estimate']:.2f}"
        checks = r["checks"]
        lines.append(f"{r['model']:22s} {r['wall_s']:7.1f}s {on['blocks']:>6d}/{off['blocks']:<6d} "
                     f"{on['median_ms']:20.1f} {off['median_ms']:10.1f} {iv:>24s} {r['status']!s:>9s} "
                     f"{checks.get('sme2_kernels', '-'):>8s} {checks.get('numerics', '-'):>8s} "
                     f"{r['loadavg_before'][0]:5.2f}->{r['loadavg_after'][0]:<5.2f}")
    design = rows[0]["design"] if rows else {}
    setup = ", ".join(f"{r['model']} {r['export_s'] + r['runner_build_s']:.1f} s" for r in rows)
    lines.append(f"  command = wall time of `python -m pytest example_models/test_<model>.py -k sme2_speedup "
                 f"--sme2-device=qemu` (design {design.get('blocks')} blocks x ({design.get('warmup')} + "
                 f"{design.get('runs')}) executions per arm; a block disturbed by other load is measured again, so "
                 "more blocks than 6 means re-measured ones), export and runner builds cached beforehand "
                 f"(setup, not counted: {setup})"
                 + (f"; of it, pytest start + collection alone: {collect_s:.1f} s" if collect_s is not None else ""))
    lines.append("  EMULATED ms/exec = median Method::execute of each arm's traces under QEMU (-cpu max vs "
                 "max,sme=off); off/on time = the ratio of those emulated times with its block interval: QEMU "
                 "emulates SME more slowly than NEON, so it says nothing about a device's speedup")
    return lines


# ------------------------------------------------------------------------------------------------ driver


def measure_all(quick: bool, say: Say, *, emulated_models: tuple[str, ...] | None = None,
                configs: tuple[tuple[str, str, str], ...] | None = None, rounds: int | None = None) -> dict[str, Any]:
    """Every measurement of this module (``quick``: toy_cnn fp32/xnnpack, 4 rounds, one emulated suite).

    ``emulated_models`` None = the default suites, () = none.
    """
    from pytest_sme2.errors import Sme2Error

    configs = configs or (CONFIGS[:1] if quick else CONFIGS)
    rounds = rounds or (4 if quick else 10)
    models = emulated_models if emulated_models is not None else EMULATED_MODELS[:1] if quick else EMULATED_MODELS
    details: dict[str, Any] = {"quick": quick, "rounds": rounds, "loadavg": {"start": load()}}
    with tempfile.TemporaryDirectory(prefix="sme2_runner_speed_") as tmp:
        work = Path(tmp)
        try:
            ours_runner = host_runner()
        except Sme2Error as exc:  # no compiler or no SDK here: say so, measure nothing made up
            say(f"  our runner cannot be built here, runtime comparison skipped: {exc}")
            ours_runner = None
        runtime_rows: list[dict[str, Any]] = []
        startup_rows: list[dict[str, Any]] = []
        if ours_runner is not None:
            say(f"  runtimes: {len(configs)} configuration(s) x {rounds} rounds of 4 blocks (A B C D / D C B A): "
                f"{', '.join(ARMS)}; load {load()}")
            for model, dtype, backend in configs:
                exported = export(model, dtype, backend)
                config = Config(model, dtype, backend)
                compare(config, exported, ours_runner, rounds, work,
                        block_target_s=QUICK_BLOCK_TARGET_S if quick else BLOCK_TARGET_S)
                row = summarize(config)
                runtime_rows.append(row)
                say(f"    {config.name}: blocks of {config.warmup} + {config.runs}; ours "
                    f"{_ms(row['ours_untraced_ms'])} ms, python {_ms(row['python_untraced_ms'])} ms; load {load()}")
                first = not startup_rows
                python_processes = (0 if quick else 3) if first else 0
                start = startup(exported, ours_runner, 3 if quick else 9, work, python_processes=python_processes)
                startup_rows.append({"name": config.name, **start})
            details["loadavg"]["runtimes"] = load()
            for line in [*runtime_table(runtime_rows), "", *startup_table(startup_rows)]:
                say(line)
        details["runtimes"] = runtime_rows
        details["startup"] = startup_rows
        emulated_rows: list[dict[str, Any]] = []
        skipped = ""
        say("")
        say(f"  emulated on/off: {len(models)} suite(s), one pytest process each; load {load()}")
        try:
            from pytest_sme2.runners.qemu import find_qemu

            find_qemu()
            for model in models:
                emulated_rows.append(emulated(model, work, say))
        except Sme2Error as exc:  # no QEMU or no cross compiler here
            skipped = str(exc)
            say(f"  the emulated on/off test cannot run here, skipped: {exc}")
        collect_s = None if quick or not emulated_rows else collect_only_s()
        if emulated_rows:
            for line in emulated_table(emulated_rows, collect_s):
                say(line)
        details["emulated"] = emulated_rows
        details["emulated_skipped"] = skipped
        details["collect_only_s"] = collect_s
    details["loadavg"]["end"] = load()
    first_row = runtime_rows[0] if runtime_rows else None
    details["summary"] = {
        "runner_vs_python_ratio": first_row["ours_over_python_untraced"]["estimate"] if first_row else None,
        "runner_tracer_ratio": first_row["tracer_ours"]["estimate"] if first_row else None,
        "runner_start_ms": startup_rows[0]["ours_wall_ms"] if startup_rows else None,
        "emulated_on_off_s": emulated_rows[0]["wall_s"] if emulated_rows else None,
    }
    return details


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="toy_cnn fp32/xnnpack only, 4 rounds, the toy_cnn emulated suite: a smoke run")
    parser.add_argument("--rounds", type=int, help="rounds of the four arms per configuration (default 10; quick 4)")
    parser.add_argument("--emulated", nargs="*", choices=EMULATED_MODELS,
                        help="emulated suites to time (default: all; quick: toy_cnn); none: --emulated with no name")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for runner_speed.{txt,json}")
    args = parser.parse_args(argv)
    out_lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        out_lines.append(text)

    from importlib.metadata import version

    from benchmarks.tracing_overhead import cpu_facts

    facts = cpu_facts()
    started = time.time()
    say(f"our runner vs the Python runtime, the tracer's cost, the emulated on/off test "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}{', quick' if args.quick else ''})")
    say(f"  CPU: {facts.get('model name', '?')} family {facts.get('cpu family', '?')} model {facts.get('model', '?')} "
        f"(avx512f {'yes' if facts.get('avx512f') else 'no'}), {facts['nproc']} CPUs; executorch "
        f"{version('executorch')}; 1 runtime thread; load average at start {load()}")
    emulated_models = None if args.emulated is None else tuple(args.emulated)
    details = measure_all(args.quick, say, emulated_models=emulated_models, rounds=args.rounds)
    say(f"  load average at end: {details['loadavg']['end']}; total {time.time() - started:.0f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "runner_speed.txt").write_text("\n".join(out_lines) + "\n", encoding="utf-8")
    detail = {"schema_version": 1, "cpu": facts, **details}
    (args.out / "runner_speed.json").write_text(json.dumps(detail, indent=1, default=str) + "\n", encoding="utf-8")
    print(json.dumps(details["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
