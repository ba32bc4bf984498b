"""pytest-sme2 benchmarks (issue #6): speed of the analysis, export cache, plugin and timer, the
power of the regression gate (A/A false alarms, detection of real 5 % / 10 % slowdowns), and our runner
against the Python runtime with the cost of the emulated SME2 on/off test (issue 17) on this machine.

    python benchmarks/run.py            # full run, < 10 min on a 2-core VM
    python benchmarks/run.py --quick    # fewer repetitions, < 2 min
    python benchmarks/run.py --only timer,analysis

Prints a table per section and ends with one JSON object on the last line (the keys of issue #6;
a section left out with ``--only`` has its keys set to null). Every number comes from a real
measurement in this run; how each is measured is in the docstring of its module:
``analysis_speed``, ``export_speed``, ``plugin_overhead``, ``gate_power``, ``noise``, ``runner_speed``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a clean checkout: make the repo importable
    sys.path.insert(0, str(ROOT))

from benchmarks import (  # noqa: E402
    analysis_speed,
    export_speed,
    gate_power,
    memory_noise,
    noise,
    plugin_overhead,
    runner_speed,
)
from benchmarks.console import Console  # noqa: E402

TRACE = ROOT / "benchmarks" / "data" / "mobilenet_v3_small_like_fp32_xnnpack_simd-on_t1_n1000.etdump"
#: A/A repetitions added to the 50 of the main experiment in a full run (see section_gate).
AA_EXTRA_REPS = 300
SECTIONS = ("analysis", "export", "timer", "plugin", "gate", "noise", "runner", "memory")
KEYS = (
    "analysis_s", "inspector_s", "analysis_speedup_vs_inspector", "export_cold_s", "export_cached_s",
    "export_cache_speedup", "plugin_overhead_ms", "timer_overhead_us", "aa_false_alarm_rate",
    "detect_rate_10pct", "detect_rate_5pct", "gate_time_s",
    # issue 17, toy_cnn fp32/xnnpack: ours/python untraced, ours traced/untraced, one runner process, the emulated
    # on/off command (s)
    "runner_vs_python_ratio", "runner_tracer_ratio", "runner_start_ms", "emulated_on_off_s",
    # issue 21: peak memory of a runner process, largest deviation between sessions and spread within one (relative),
    # reading plan + size from the .pte (ms), the local runtime's VmHWM reset + reads per block (µs)
    "peak_between_session_dev", "peak_within_session_spread", "memory_read_ms", "peak_delta_us",
)


def machine() -> dict[str, Any]:
    """nproc, CPU model and RAM, as the README's machine description needs them."""
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_gb = math.nan
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                ram_gb = int(line.split()[1]) / 1024**2
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "ram_gb": round(ram_gb, 1), "python": platform.python_version(),
            "platform": platform.platform()}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


CONSOLE = Console()
say, progress = CONSOLE.say, CONSOLE.progress


# ------------------------------------------------------------------------------------------ sections


def section_analysis(quick: bool) -> dict[str, Any]:
    r = analysis_speed.measure(TRACE, repeats=1 if quick else 3)
    check = r["identical"]
    say(f"  trace: {TRACE.name} ({TRACE.stat().st_size / 1e6:.1f} MB, {check['runs']} runs)")
    say(f"  ours (fresh process: import + read + parse + categorize + stats + JSON): {r['analysis_s']:.3f} s "
        f"(of which imports {r['analysis_import_s']:.3f} s); runs {_fmt_list(r['analysis_runs_s'])}")
    say(f"  Inspector (fresh process: Inspector() + to_dataframe(), its import NOT counted): "
        f"{r['inspector_s']:.3f} s; runs {_fmt_list(r['inspector_runs_s'])}; "
        f"its import {r['inspector_import_s']:.2f} s")
    say(f"  speedup: {r['analysis_speedup_vs_inspector']:.1f}x "
        f"({(r['inspector_s'] + r['inspector_import_s']) / r['analysis_s']:.1f}x if Inspector's import counted)")
    say(f"  identical results: {'YES' if check['identical'] else 'NO'} — {check['events']} events x "
        f"{check['runs']} runs = {check['values_compared']} durations compared (E2E per run = Method::execute, "
        f"every operator), max |diff| {check['max_abs_diff_ms']:.2e} ms")
    return r


def section_export(quick: bool) -> dict[str, Any]:
    r = export_speed.measure("toy_cnn")
    say(f"  {r['model']} fp32/xnnpack: cold {r['export_cold_s']:.2f} s (fresh cache dir, first lowering in a "
        f"fresh process), cached {r['export_cached_s'] * 1e3:.1f} ms -> {r['export_cache_speedup']:.0f}x")
    return r


def section_timer(quick: bool) -> dict[str, Any]:
    from pytest_sme2.runners.local import timer_overhead_ns

    samples = 20_000 if quick else 200_000
    ns = timer_overhead_ns(samples)
    say(f"  perf_counter_ns back-to-back (median of {samples}): {ns:.0f} ns = {ns / 1e3:.3f} us per execution")
    return {"timer_overhead_us": ns / 1e3, "timer_overhead_ns": ns}


def section_plugin(quick: bool, busy_limit: float | None = None) -> dict[str, Any]:
    r = plugin_overhead.measure(2 if quick else 8, busy_limit=busy_limit)
    ratios = r["cross_session_ratios"]
    say(f"  {r['tests']} tests, toy_cnn fp32/xnnpack, default options and gate, cached export, baseline check")
    say(f"  cross-session A/A (same .pte, baseline written by the previous session, margin 5%): verdicts "
        f"{r['verdicts']}, {r['confirmed_attempts']} re-measured; candidate/baseline median ratios "
        f"{min(ratios, default=math.nan):.3f}..{max(ratios, default=math.nan):.3f}")
    say(f"  per test: duration {r['test_duration_ms']:.1f} ms, timed executions {r['executions_ms_per_test']:.1f} ms "
        f"-> plugin overhead {r['plugin_overhead_ms']:.1f} ms (median, {r['plugin_overhead_basis']}); "
        f"first test {r['first_test_overhead_ms']:.0f} ms (one-time runtime import)")
    return r


def section_gate(quick: bool, cache_dir: Path) -> dict[str, Any]:
    from pytest_sme2.runners.local import LocalRunner

    default = gate_power.default_design()
    evaluations = [gate_power.Evaluation(default, 0.05)]
    if not quick:
        # Alternatives judged on the same measurements: margins, more runs and blocks, a longer warm-up.
        evaluations += [
            gate_power.Evaluation(default, 0.10), gate_power.Evaluation(default, 0.25),
            gate_power.Evaluation(gate_power.Design(default.warmup, 50, 7), 0.05),
            gate_power.Evaluation(gate_power.Design(10, default.runs, default.blocks), 0.05),
        ]
    reps = 4 if quick else 50
    rounds = 6 if quick else 40
    runner = LocalRunner()
    exported = gate_power.export_variants(cache_dir)
    out_dir = Path(tempfile.mkdtemp(prefix="sme2_gate_bench_"))
    ratios = gate_power.true_ratios(runner, exported, rounds, threads=1, out_dir=out_dir)
    say(f"  true cost ratios (toy_cnn input HxW, {rounds} interleaved rounds of 100 runs, median of per-round ratios):")
    for name, (h, w) in gate_power.VARIANTS.items():
        t = ratios[name]
        say(f"    {name:7s} 1x3x{h}x{w}: {t['median_ms'] * 1e3:6.1f} us, ratio {t['ratio']:.3f} "
            f"(95% CI {t['ci_low']:.3f}..{t['ci_high']:.3f})")
    experiments = _gate_experiments(runner, exported, reps, evaluations, out_dir)
    say(f"  {reps} repetitions each; rate = share of comparisons the gate calls a regression (after confirmation);"
        " [95% upper bound]")
    _gate_table(evaluations, experiments)
    d = evaluations[0].label
    for n in ("aa", "slow5", "slow10"):
        say(f"  verdicts, default gate, {n}: {experiments[n][d]['counts']}")
    pinned: dict[str, Any] = {}
    if not quick and hasattr(os, "sched_setaffinity"):
        # The same default gate with this process pinned to one core (what `taskset -c 0 pytest` does):
        # does pinning buy precision on a shared VM? Threads=1, so the runtime runs on this thread.
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {min(before)})
        try:
            pinned = _gate_experiments(runner, exported, 30, evaluations[:1], out_dir)
        finally:
            os.sched_setaffinity(0, before)
        say(f"  the default gate again, this process pinned to CPU {min(before)} (30 repetitions each):")
        _gate_table(evaluations[:1], pinned)
    aa, s5, s10 = (experiments[n][d] for n in ("aa", "slow5", "slow10"))
    aa_false, aa_n = aa["counts"].get("regression", 0), aa["n"]
    aa_by_margin: dict[str, dict[str, float]] = {}
    if not quick:
        # 50 A/A comparisons can only bound the false-alarm rate below ~6 %; showing <= 1 % takes ~300
        # without a false alarm. More A/A repetitions with the default design (only the executions it
        # uses, so they are cheap), judged at the default margin and the wider ones, pooled with the
        # 50 above.
        started = time.perf_counter()
        margins = [ev for ev in evaluations if ev.design == default]
        extra = gate_power.run_experiment(runner, exported["base"], exported["base"], reps=AA_EXTRA_REPS,
                                          evaluations=margins, threads=1, out_dir=out_dir,
                                          progress=progress, name="aa (more)",
                                          executions=default.warmup + default.runs)
        say(f"  A/A, {AA_EXTRA_REPS} more repetitions ({time.perf_counter() - started:.0f} s), pooled with the "
            f"50 above:")
        for ev in margins:
            false = experiments["aa"][ev.label]["counts"].get("regression", 0)
            false += sum(o.status == "regression" for o in extra[ev.label])
            n = experiments["aa"][ev.label]["n"] + len(extra[ev.label])
            upper = gate_power.clopper_pearson_upper(false, n)
            aa_by_margin[ev.label] = {"false_alarms": false, "n": n, "rate": false / n, "upper95": upper}
            say(f"    {ev.label:20s} {false} false alarms in {n} = {false / n:.2%} (95% upper bound {upper:.2%})")
        aa_false, aa_n = aa_by_margin[d]["false_alarms"], aa_by_margin[d]["n"]
    return {
        "aa_false_alarm_rate": aa_false / aa_n,
        "aa_comparisons": aa_n,
        "aa_false_alarm_upper95": gate_power.clopper_pearson_upper(aa_false, aa_n),
        "aa_by_margin": aa_by_margin,
        "detect_rate_5pct": s5["regression_rate"],
        "detect_rate_10pct": s10["regression_rate"],
        "gate_time_s": (aa["mean_wall_s"] + s5["mean_wall_s"] + s10["mean_wall_s"]) / 3,
        "default_gate": d,
        "true_ratios": ratios,
        "experiments": experiments,
        "pinned": pinned,
    }


def _gate_experiments(runner: Any, exported: dict[str, Any], reps: int,
                      evaluations: list[gate_power.Evaluation], out_dir: Path,
                      ) -> dict[str, dict[str, Any]]:
    """A/A, ~5 % and ~10 % experiments judged by every evaluation: their summaries."""
    experiments: dict[str, dict[str, Any]] = {}
    for name, cand in (("aa", "base"), ("slow5", "slow5"), ("slow10", "slow10")):
        started = time.perf_counter()
        outcomes = gate_power.run_experiment(runner, exported["base"], exported[cand], reps=reps,
                                             evaluations=evaluations, threads=1, out_dir=out_dir,
                                             progress=progress, name=name)
        experiments[name] = {label: gate_power.summarize(v) for label, v in outcomes.items()}
        experiments[name]["_wall_s"] = time.perf_counter() - started
    return experiments


def _gate_table(evaluations: list[gate_power.Evaluation], experiments: dict[str, dict[str, Any]]) -> None:
    say(f"  {'design / margin':34s} {'A/A false alarm':>20s} {'detect ~5%':>11s} {'detect ~10%':>12s} "
        f"{'CI ±':>7s} {'A/A spread':>11s} {'s/comparison':>13s}")
    for ev in evaluations:
        aa, s5, s10 = (experiments[n][ev.label] for n in ("aa", "slow5", "slow10"))
        walls = [aa["mean_wall_s"], s5["mean_wall_s"], s10["mean_wall_s"]]
        say(f"  {ev.label:34s} {aa['regression_rate']:7.1%} [{aa['regression_rate_upper95']:5.1%}]   "
            f"{s5['regression_rate']:10.1%} {s10['regression_rate']:12.1%} {aa['median_half_width']:7.2%} "
            f"{aa['ratio_spread']:11.2%} {sum(walls) / 3:13.3f}")
    say("  CI ± = median half-width of the interval the gate reports; A/A spread = half the 2.5..97.5 % range of the "
        "A/A ratio estimates across repetitions (what the interval should cover)")


def section_noise(quick: bool, cache_dir: Path) -> dict[str, Any]:
    exported = gate_power.export_variants(cache_dir)["base"]
    design = gate_power.default_design()
    rounds = 1 if quick else 2
    r = noise.measure(exported, rounds=rounds, blocks=design.blocks, warmup=design.warmup, runs=design.runs,
                      configs=noise.CONFIGS[:2] if quick else noise.CONFIGS)
    say(f"  toy_cnn fp32/xnnpack, {rounds} round(s) of one process per config x {design.label}")
    say(f"  {'config':10s} {'median':>9s} {'CV runs':>8s} {'robust CV':>10s} {'CV blocks':>10s} {'p90/p50':>8s} "
        f"{'A/A CI ±':>9s}")
    for name, v in r.items():
        say(f"  {name:10s} {v['median_ms'] * 1e3:7.1f}us {v['cv']:8.1%} {v['robust_cv']:10.1%} "
            f"{v['block_median_cv']:10.1%} "
            f"{v['p90_over_p50']:8.3f} {v['aa_ci_half_width']:9.2%}")
    return {"noise": r}


def section_runner(quick: bool) -> dict[str, Any]:
    # The module's tables, indented; it writes no result files from here (runner_speed.py does, run alone).
    r = runner_speed.measure_all(quick, lambda text: say(f"  {text}" if text else ""))
    return {**r, **r["summary"]}


def section_memory(quick: bool) -> dict[str, Any]:
    """memory_noise.py: peak memory across blocks and sessions, with pytest-sme2's runner for this host when it builds
    (toy_cnn only, 2 sessions x 3 blocks when quick)."""
    from pytest_sme2.runners.build import TARGET_HOST, BuildError, build_runner

    try:
        runner: str | None = str(build_runner(TARGET_HOST, cache_dir=ROOT / ".sme2_cache" / "runners").path)
    except BuildError as exc:
        say(f"  no runner for this host ({exc}): the local runtime only")
        runner = None
    models = ["toy_cnn"] if quick else list(memory_noise.PROGRAMS)
    r = memory_noise.measure(2 if quick else 5, 3 if quick else 6, models, runner=runner,
                             say=lambda text: say(f"  {text}"))
    for line in r["lines"]:
        say(f"  {line}")
    return {k: v for k, v in r.items() if k not in ("sessions", "lines")}


def _fmt_list(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (< 2 min)")
    parser.add_argument("--only", default="", help=f"comma list of sections: {', '.join(SECTIONS)}")
    parser.add_argument("--cache-dir", type=Path, help="export cache for the gate/noise models (default: a temp dir)")
    parser.add_argument("--save", type=Path, help="also write every detail of this run as JSON to this file")
    parser.add_argument("--busy-limit", type=float, metavar="PCT",
                        help="the plugin section's --sme2-busy-limit (default: the plugin's; 100 = off, beside other "
                        "CPU-bound work such as the test suite)")
    args = parser.parse_args(argv)
    # --quick leaves the noise study out (one fresh process per configuration, tens of seconds).
    default_sections = [s for s in SECTIONS if not (args.quick and s == "noise")]
    only = [s.strip() for s in args.only.split(",") if s.strip()] or default_sections
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    cache_dir = args.cache_dir or Path(tempfile.mkdtemp(prefix="sme2_bench_cache_"))

    started = time.perf_counter()
    info = machine()
    say(f"pytest-sme2 benchmarks ({'quick' if args.quick else 'full'}) — {info['nproc']} CPUs, {info['cpu']}, "
        f"{info['ram_gb']} GB RAM, Python {info['python']}")
    say(f"load average at start: {load()} (the machine is shared: other sessions may run)")
    details: dict[str, Any] = {"machine": info, "mode": "quick" if args.quick else "full",
                               "loadavg": {"start": load()}, "sections": {}}
    runners = {
        "analysis": lambda: section_analysis(args.quick),
        "export": lambda: section_export(args.quick),
        "timer": lambda: section_timer(args.quick),
        "plugin": lambda: section_plugin(args.quick, args.busy_limit),
        "gate": lambda: section_gate(args.quick, cache_dir),
        "noise": lambda: section_noise(args.quick, cache_dir),
        "runner": lambda: section_runner(args.quick),
        "memory": lambda: section_memory(args.quick),
    }
    summary: dict[str, Any] = dict.fromkeys(KEYS)
    for name in SECTIONS:
        if name not in only:
            continue
        say(f"\n[{name}]")
        t0 = time.perf_counter()
        result = runners[name]()
        details["sections"][name] = result
        details["loadavg"][name] = load()
        summary.update({k: result[k] for k in KEYS if k in result})
        say(f"  ({time.perf_counter() - t0:.1f} s, load average {load()})")
    summary["loadavg"] = load()
    summary["total_s"] = round(time.perf_counter() - started, 1)
    summary["mode"] = details["mode"]
    if args.save:
        args.save.write_text(json.dumps(details | {"summary": summary}, indent=1, default=str) + "\n")
    say("\n" + _summary_table(summary))
    print(json.dumps({k: (round(v, 6) if isinstance(v, float) else v) for k, v in summary.items()}))
    return 0


def _summary_table(s: dict[str, Any]) -> str:
    rows = [
        ("analysis (ours, end to end)", "analysis_s", "{:.3f} s"),
        ("Inspector parse + DataFrame", "inspector_s", "{:.3f} s"),
        ("analysis speedup vs Inspector", "analysis_speedup_vs_inspector", "{:.1f}x  (target >= 10x)"),
        ("export, cold", "export_cold_s", "{:.2f} s"),
        ("export, cached", "export_cached_s", "{:.4f} s"),
        ("export cache speedup", "export_cache_speedup", "{:.0f}x"),
        ("plugin overhead per test", "plugin_overhead_ms", "{:.1f} ms"),
        ("timer overhead per execution", "timer_overhead_us", "{:.3f} us"),
        ("A/A false-alarm rate", "aa_false_alarm_rate", "{:.1%}  (target <= 1%)"),
        ("detection, ~10% slowdown", "detect_rate_10pct", "{:.1%}  (target >= 95%)"),
        ("detection, ~5% slowdown", "detect_rate_5pct", "{:.1%}"),
        ("gate wall time per comparison", "gate_time_s", "{:.3f} s"),
        ("ours/python, untraced (toy_cnn)", "runner_vs_python_ratio", "{:.3f}"),
        ("our runner traced/untraced", "runner_tracer_ratio", "{:.3f}"),
        ("our runner, 1-execution process", "runner_start_ms", "{:.1f} ms"),
        ("emulated on/off test (toy_cnn)", "emulated_on_off_s", "{:.1f} s  (EMULATED device)"),
        ("peak memory, between sessions", "peak_between_session_dev", "{:.2%}  (runner process; margin 5%)"),
        ("peak memory, within a session", "peak_within_session_spread", "{:.2%}"),
        ("memory plan + size read", "memory_read_ms", "{:.2f} ms per profile"),
        ("local VmHWM reset + reads", "peak_delta_us", "{:.0f} us per block"),
    ]
    lines = ["summary", "-" * 60]
    for label, key, fmt in rows:
        value = s.get(key)
        lines.append(f"{label:32s} {fmt.format(value) if value is not None else 'skipped'}")
    lines.append(f"{'load average at end':32s} {s['loadavg']}   total {s['total_s']} s")
    if s.get("mode") == "quick":
        lines.append("(--quick: a handful of repetitions per rate — a smoke test of the pipeline, not an "
                     "estimate; the full run uses 50)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
