"""The benchmark script (``benchmarks/run.py``): its JSON line, and its pieces on real data.

The full benchmark takes minutes; these tests run a fast section of the real script and the
analysis-vs-Inspector agreement check on a small recorded trace, in well under a minute.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SUMMARY_KEYS = (
    "analysis_s", "inspector_s", "analysis_speedup_vs_inspector", "export_cold_s", "export_cached_s",
    "export_cache_speedup", "plugin_overhead_ms", "timer_overhead_us", "aa_false_alarm_rate",
    "detect_rate_10pct", "detect_rate_5pct", "gate_time_s",
)


def test_quick_timer_section_ends_with_a_json_line_holding_every_key() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--only", "timer"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(SUMMARY_KEYS) <= set(summary)
    assert 0 < summary["timer_overhead_us"] < 100  # a clock read costs tens of ns, not milliseconds
    # Sections left out are null, never a made-up number.
    assert summary["aa_false_alarm_rate"] is None and summary["analysis_s"] is None
    assert "load average at start" in proc.stdout


def _bench(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """A benchmark script in a fresh process, as a user runs it from the repository (its own imports, its own cwd)."""
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _section(stdout: str, name: str) -> str:
    """What ``run.py`` printed under ``[name]``: up to the next section, or to its summary table."""
    text = stdout.split(f"\n[{name}]\n", 1)[1]
    return min(text.split("\n[", 1)[0], text.split("\nsummary\n", 1)[0], key=len)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory,
              sme2_shared_cache: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``python benchmarks/run.py --quick`` as the README gives it (~70 s here), run once, every detail saved
    (``--save``): the tests of its every section, of its memory section and of ``runner_speed.py --quick`` (which is
    run.py's runner section, run alone) read this one run. The gate section's models go to the tests' shared export
    cache, as ``gate_power.py --quick``'s do below: whichever runs first exports them."""
    saved = tmp_path_factory.mktemp("bench_quick") / "details.json"
    # The busy check is off for the plugin section (as for gate_sessions below): beside other tests on two cores the
    # default finds every block disturbed and writes no baseline, which is the gate's rule, not a broken benchmark.
    proc = _bench(str(ROOT / "benchmarks" / "run.py"), "--quick", "--busy-limit", "100",
                  "--cache-dir", str(sme2_shared_cache), "--save", str(saved))
    return proc, saved


@pytest.mark.slow
def test_quick_benchmark_run_exits_0_and_prints_every_section(
        quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """``python benchmarks/run.py --quick`` as the README gives it runs every section to the end."""
    proc, _ = quick_run
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    for section in ("analysis", "export", "timer", "plugin", "gate"):
        assert f"\n[{section}]\n" in proc.stdout, section
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    # every section of a quick run measured its keys: none is left null
    assert all(summary[k] is not None for k in SUMMARY_KEYS), summary
    assert summary["plugin_overhead_ms"] > 0 and 0 <= summary["aa_false_alarm_rate"] <= 1


@pytest.mark.slow
@pytest.mark.parametrize("script", ["gate_power.py", "tracing_overhead.py"])
def test_quick_runs_of_the_gate_and_tracing_benchmarks_exit_0(script: str, tmp_path: Path,
                                                            sme2_shared_cache: Path) -> None:
    """The benchmarks with a quick mode of their own run it to the end.

    ~20 s each here (gate_sessions.py --quick has its own test below). Their results go to a temp dir, never over
    the committed ``benchmarks/results``; their models come from the tests' shared export cache (exported there once:
    run.py's gate section exports gate_power's too, and ``example_export`` toy_cnn fp32/xnnpack).
    """
    stem = script.removesuffix(".py")
    extra = {"gate_power.py": ["--out", str(tmp_path / stem), "--cache-dir", str(sme2_shared_cache)],
             "tracing_overhead.py": ["--models", "toy_cnn", "--dtypes", "fp32", "--out", str(tmp_path),
                                     "--cache-dir", str(sme2_shared_cache)]}[script]
    proc = _bench(str(ROOT / "benchmarks" / script), "--quick", *extra, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == [f"{stem}.json", f"{stem}.txt"]
    text = (tmp_path / written[1]).read_text()
    assert text.strip() and text.splitlines()[0] in proc.stdout  # the results file is what it printed


def test_unknown_section_is_a_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--only", "nope"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 2
    assert "unknown section" in proc.stderr


@pytest.mark.slow
def test_our_decoding_equals_the_inspectors_on_a_recorded_trace(
        quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """The identity check the benchmark prints, as the quick run above made it on the recorded 1000-run MobileNetV3
    trace (``benchmarks/analysis_speed.py``): every duration of every run agrees."""
    proc, saved = quick_run
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads(saved.read_text())["sections"]["analysis"]
    check = result["identical"]
    assert check["identical"], check
    assert check["runs"] == 1000 and check["events"] > 100
    assert check["values_compared"] == check["events"] * 1000
    assert result["analysis_s"] > 0 and result["inspector_s"] > 0
    assert "identical results: YES" in _section(proc.stdout, "analysis")


def test_clopper_pearson_upper_bound() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.gate_power import clopper_pearson_upper
    finally:
        sys.path.remove(str(ROOT))
    # 0 of n: the bound solves (1 - p)^n = 0.05 exactly.
    assert math.isclose(clopper_pearson_upper(0, 50), 1 - 0.05 ** (1 / 50), rel_tol=1e-9)
    assert clopper_pearson_upper(50, 50) == 1.0
    assert 0.02 < clopper_pearson_upper(1, 100) < 0.05  # tables: 0.0466


def test_gate_variants_trims_only_blocks_far_above_the_arm() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.gate_variants import trimmed
    finally:
        sys.path.remove(str(ROOT))
    # Blocks of 33 executions (3 warm-ups): four near 0.042 ms, one at 0.060 ms (a disturbed block).
    levels = [0.0420, 0.0422, 0.0600, 0.0419, 0.0421]
    blocks = [np.full(33, level) for level in levels]
    kept = trimmed(blocks, 5)
    assert [float(b[0]) for b in kept] == [0.0420, 0.0422, 0.0419, 0.0421]
    # Within max(5 %, 3 MAD) of the median block nothing goes, and only the first k blocks count.
    assert len(trimmed([np.full(33, v) for v in (1.0, 1.03, 0.98, 1.04, 1.0)], 5)) == 5
    assert len(trimmed(blocks, 2)) == 2


@pytest.mark.slow
def test_gate_variants_runs_to_the_end_on_real_measurements(sme2_shared_cache: Path) -> None:
    """benchmarks/gate_variants.py calls the library's gate as it is now (it once imported a function the gate no
    longer had, and nothing noticed): one A/A and one repetition per slowdown, every variant judged. Its programs are
    gate_power's, from the workers' export cache (whichever benchmark runs first exports them)."""
    proc = _bench(str(ROOT / "benchmarks" / "gate_variants.py"), "--reps", "1,1,1", "--cache-dir",
                  str(sme2_shared_cache), timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split()[0] for line in proc.stdout.splitlines() if line.split()[:1] and line.split()[0] in
            ("default", "trim", "pooled-confirm", "10")]
    assert rows == ["default", "trim", "pooled-confirm", "10", "10"], proc.stdout[-2000:]


def test_gate_variants_rejects_bad_repetition_counts() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gate_variants.py"), "--reps", "5,0,1"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert "--reps takes three positive counts" in proc.stderr


def _benchmark(name: str) -> Any:
    """The module ``benchmarks/<name>.py``, imported from the repository."""
    sys.path.insert(0, str(ROOT))
    try:
        return importlib.import_module(f"benchmarks.{name}")
    finally:
        sys.path.remove(str(ROOT))


def test_replay_runner_gives_back_a_judgements_runs_in_order_and_measures_what_it_lacks() -> None:
    """Judging one measurement at a second margin replays its runs; a run it never made is measured for real."""
    gate_sessions = _benchmark("gate_sessions")

    class Counting:
        name = "counting"

        def __init__(self) -> None:
            self.calls = 0

        def run(self, request: Any) -> tuple[str, int]:
            self.calls += 1
            return (str(request.pte), self.calls)

        def identity(self) -> dict[str, str]:
            return {"cpu": "x"}

    real = Counting()
    runner = gate_sessions.ReplayRunner(real)
    ref, cand = (SimpleNamespace(pte=Path(p), inputs=(Path("in.bin"),), mode="trace") for p in ("ref.pte", "cand.pte"))
    runner.record()
    first = [runner.run(ref), runner.run(cand), runner.run(cand), runner.run(ref)]
    assert real.calls == 4
    runner.replay()
    # Per program, in the order measured, whatever the other program did in between.
    assert [runner.run(cand), runner.run(ref), runner.run(ref), runner.run(cand)] == [
        first[1], first[0], first[3], first[2]]
    assert real.calls == 4 and runner.live_runs == 0
    assert runner.run(ref) == ("ref.pte", 5)  # the tape is used up: measured for real, and counted
    assert runner.live_runs == 1
    # Every replay starts from the tape's beginning: a third judgement that measures again (a stored comparison
    # inconclusive at margin + allowance, after two that confirmed) gets the strictest one's runs, not a used-up tape
    # (15 live runs in a stored comparison).
    runner.replay()
    assert [runner.run(ref), runner.run(ref), runner.run(cand)] == [first[0], first[3], first[1]]
    assert real.calls == 5 and runner.live_runs == 0
    assert runner.name == "counting" and runner.identity() == {"cpu": "x"}


@pytest.mark.slow
def test_gate_sessions_quick_run_judges_each_mode_in_a_later_process(tmp_path: Path, sme2_shared_cache: Path) -> None:
    """``gate_sessions.py --quick`` end to end (1.5-2 min): real exports, sessions in fresh processes, burners.

    Rates of a smoke run mean nothing; what is checked is that each experiment measured what it says: the A/A
    candidate is the same program on other inputs, a baseline is judged only by a later process, every judged
    verdict used the comparison its experiment names, every setting judged the same runs, and burners ran.
    The busy check is off (``--busy-limit 100``): beside other tests on two cores every measurement would be
    disturbed, nothing recorded and nothing judged — the gate's rule, which the benchmark's full run reports.
    Its toy_cnn programs come from the tests' shared export cache: the 32x32 one is ``example_export``'s, the 36 and 39
    wide ones gate_power's slow10 and slow20 (run.py's gate section and gate_power.py export them above).
    """
    gate_sessions = _benchmark("gate_sessions")
    stem = tmp_path / "gate_sessions"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gate_sessions.py"), "--quick", "--busy-limit", "100",
         "--out", str(stem), "--work-dir", str(tmp_path / "work"), "--cache-dir", str(sme2_shared_cache)],
        cwd=ROOT, capture_output=True, text=True, timeout=1500, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "uptime at start" in proc.stdout and "uptime at end" in proc.stdout
    data = json.loads(stem.with_suffix(".json").read_text())
    text = stem.with_suffix(".txt").read_text()
    for section in ("1. A/A across sessions", "2. Real slowdowns", "3. Verdicts with competing CPU burners"):
        assert section in text
    same = data["equivalence"]
    assert same["pte_sha256"] == same["equiv_pte_sha256"] and same["inputs_sha256"] != same["equiv_inputs_sha256"]
    assert {"slow10", "slow20"} <= set(data["true_ratios"]) and data["true_ratios"]["slow20"]["ratio"] > 1

    def rows(table: dict[str, Any]) -> list[dict[str, Any]]:
        return [dict(zip(table["columns"], row, strict=True)) for row in table["rows"]]

    normal, burn = rows(data["normal_rows"]), rows(data["burner_rows"])
    assert normal and burn
    assert {r["experiment"] for r in normal} == set(gate_sessions.EXPERIMENTS)
    assert all(r["source_session"] < r["session"] for r in normal + burn)
    allowance = data["settings"]["drift_allowance"]
    judged: dict[tuple[int, int, str], list[tuple[float, float]]] = {}
    for r in normal + burn:
        mode = gate_sessions.EXPERIMENTS[r["experiment"]][0]
        if r["status"] != "invalid":  # an invalid candidate is never compared in the same session
            assert r["comparison"] == mode, r
        if r["experiment"] == "unchanged":
            assert r["status"] != "regression", r
        # A same-session comparison is measured until decided (measure/sequential.py): where the strictest margin
        # settled at an early look, a wider one may need the later rounds, which the replay measures live.
        assert r["live_runs_in_replay"] == 0 or mode == "session", r
        judged.setdefault((r["session"], r["slot"], r["experiment"]), []).append((r["margin"], r["allowance"]))
    for (_, _, experiment), settings in judged.items():
        assert settings == gate_sessions.gate_settings(gate_sessions.EXPERIMENTS[experiment][0], allowance)
    assert {r["burners"] for r in burn} == {0, 1, 2}
    pids = data["session_pids"]
    assert len(set(pids)) == len(pids) == len(data["sessions"]) and os.getpid() not in pids


@pytest.mark.slow
def test_runner_speed_quick_measures_every_arm_side_by_side(quick_run: tuple[subprocess.CompletedProcess[str], Path],
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``runner_speed.py --quick`` end to end (20-60 s): our runner and the Python runtime in ABBA rounds, start-up,
    and the emulated on/off command at the emulated device's defaults. Structure only: timings live in benchmarks/.

    The measurement is run.py --quick's runner section (``runner_speed.measure_all(quick=True)``, what the script
    runs), measured once above; the script's own ``main`` then writes its files in this process from that real
    measurement (``measure_all`` replays it and what it printed), and the script starts as a script."""
    proc, saved = quick_run
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    measured: dict[str, Any] = json.loads(saved.read_text())["sections"]["runner"]
    printed = [line.removeprefix("  ") for line in _section(proc.stdout, "runner").splitlines()]
    runner_speed = _benchmark("runner_speed")

    def replay(quick: bool, say: Any, **kwargs: Any) -> dict[str, Any]:
        assert quick and not kwargs.get("emulated_models") and not kwargs.get("rounds")
        for line in printed:
            say(line)
        return measured

    monkeypatch.setattr(runner_speed, "measure_all", replay)
    assert runner_speed.main(["--quick", "--out", str(tmp_path)]) == 0
    script = _bench(str(ROOT / "benchmarks" / "runner_speed.py"), "--help", timeout=120)
    assert script.returncode == 0 and "--quick" in script.stdout, script.stderr[-2000:]

    data = json.loads((tmp_path / "runner_speed.json").read_text())
    text = (tmp_path / "runner_speed.txt").read_text()
    [row] = data["runtimes"]
    assert (row["model"], row["dtype"], row["backend"]) == ("toy_cnn", "fp32", "xnnpack")
    assert row["blocks_per_arm"] == 4 and row["order"] == ["ABCD", "DCBA", "ABCD", "DCBA"]
    for key in ("ours_untraced_ms", "ours_traced_ms", "python_untraced_ms", "python_traced_ms"):
        assert row[key] > 0
    # The headline is the ratio of the arms' medians; the interval comes from 4 vs 4 block medians.
    ratio = row["ours_over_python_untraced"]
    assert ratio["estimate"] == pytest.approx(row["ours_untraced_ms"] / row["python_untraced_ms"])
    assert ratio["low"] <= ratio["high"] and ratio["coverage"] > 0.95
    assert row["events_per_execution"] > 2  # Method::execute, the delegate call, XNNPACK's operators
    [start] = data["startup"]
    assert start["ours_wall_ms"] > start["ours_load_ms"] > 0
    if shutil.which("qemu-aarch64") and shutil.which("aarch64-linux-gnu-g++"):
        [emu] = data["emulated"]
        # The emulated device's defaults: one traced execution per arm (the evidence and outputs).
        assert emu["emulated"] and emu["design"] == {"blocks": 1, "warmup": 0, "runs": 1}
        for arm in ("sme2_on", "sme2_off"):
            assert emu["arms"][arm]["blocks"] == 1 and emu["arms"][arm]["executions_per_block"] == 1
        assert "EMULATED" in text and "NOT device time" in text
    else:
        assert data["emulated_skipped"]


@pytest.mark.slow
def test_quick_memory_section_measures_peak_noise_and_its_cost(
        quick_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """run.py's memory section (memory_noise.py --quick: toy_cnn, 2 sessions x 3 blocks), in the quick run above, ends
    with its keys; the runner-process noise is a fraction, the local runtime's VmHWM reset and reads a fraction of a
    millisecond."""
    proc, _ = quick_run
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert 0 < summary["peak_delta_us"] < 50_000 and 0 < summary["memory_read_ms"] < 1_000
    memory = _section(proc.stdout, "memory")
    assert "host toy_cnn" in memory and "local toy_cnn" in memory  # the runner builds here (SDK installed)
    assert 0 <= summary["peak_between_session_dev"] < 1 and 0 <= summary["peak_within_session_spread"] < 1


def test_quick_run_of_the_paired_gate_study_exits_0_with_every_comparison_kind() -> None:
    """benchmarks/gate_paired.py (offline, on the recorded A/A rounds) runs to the end (~2 s)."""
    proc = _bench(str(ROOT / "benchmarks" / "gate_paired.py"), "--quick", timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    for kind in ("session (paired)", "session (unpaired, before)", "stored (+50% allowance)", "unchanged"):
        assert kind in proc.stdout


def test_ci_green_rates_read_consecutive_windows_and_count_inconclusive_as_red() -> None:
    """benchmarks/ci_green.py (offline, recorded A/A rounds) says what "not decided is not green"
    costs. Its windows are consecutive rounds (one start round each), and red now counts inconclusive too."""
    sys.path.insert(0, str(ROOT))
    from benchmarks import ci_green

    recording = ci_green.RECORDINGS[2]  # toy_cnn portable: 13 ms executions, 3 warm-ups + 10 runs as recorded
    a, b, sizing = ci_green.load(recording)
    assert sizing == (3, 10) and a.shape == b.shape
    assert ci_green.sizing(0.04) == (3, 27) and ci_green.sizing(300.0) == (1, 3)  # the plugin's block sizing
    rows = ci_green.study_one(recording, margin=0.05, quick=True)
    for row in rows:
        assert row["red_now"] == pytest.approx(row["regression"] + row["inconclusive"])
        assert row["green_before"] == pytest.approx(row["green_now"] + row["inconclusive"])
    slow = next(r for r in rows if r["kind"] == "session" and r["slowdown"] > 1)
    assert slow["red_now"] == 1.0  # a real +10 % at a 5 % margin, measured beside its reference: never green here


def test_the_calibrated_fallback_study_runs_and_never_passes_without_history() -> None:
    """benchmarks/gate_calibrated.py judges the cross-session fallback on the real separate
    sessions (results/gate_sessions.json, data/history_toy_cnn_sessions.jsonl), calibrated beside hand-set.

    What must hold whatever the numbers: a comparison whose history was too short is inconclusive, never a pass; on
    the quiet separate sessions the calibrated allowance is a few percent, not the hand-set 50 % that caught nothing.
    """
    sys.path.insert(0, str(ROOT))
    from benchmarks import gate_calibrated

    rows = gate_calibrated.sessions_run() + gate_calibrated.light_run()
    short = [r for r in rows if r["allowance"] is None]
    assert short and all(r["calibrated"] == "inconclusive" for r in short)
    quiet = [r for r in rows if r["source"] == "gate_sessions" and r["allowance"] is not None]
    assert quiet and all(0.005 < r["allowance"] < 0.10 for r in quiet)
    slow20 = [r for r in quiet if r["experiment"] == "stored-slow20"]
    assert all(r["hand-set 50%"] == "pass" for r in slow20), "a hand-set 50 % passes a real 20 % slowdown"
    assert all(r["calibrated"] == "regression" for r in slow20), "the calibrated allowance catches it"
    proc = _bench(str(ROOT / "benchmarks" / "gate_calibrated.py"), "--quick", timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "calibrated, history >= 5" in proc.stdout
