"""Memory and size: the plan and the size read from real ``.pte`` files, peaks from real runs, every check.

The planned sizes are checked against ExecuTorch's own deserializer; peaks come from real local-runtime runs of the
recorded programs in ``tests/data`` (the checks' thresholds are exercised on those peaks scaled, never on invented
ones).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sme2.errors import ExportError
from pytest_sme2.evidence.memory import Memory, PeakSource, memory_of, planned_buffers, program_size, runner_log_memory
from pytest_sme2.gate.decide import gate
from pytest_sme2.gate.memory import NOT_STORED, with_memory
from pytest_sme2.gate.verdict import (
    PEAK_MARGIN,
    Check,
    Comparison,
    GateConfig,
    MemoryThresholds,
    Samples,
    Status,
    Verdict,
)
from pytest_sme2.runners.base import MODE_TIMING, RunRequest
from pytest_sme2.store.baseline import Baseline

DATA = Path(__file__).parents[1] / "data"
REPO = Path(__file__).parents[2]
PTES = sorted(DATA.glob("*.pte"))
TOY_FP32 = DATA / "toy_cnn_fp32_xnnpack.pte"
TOY_PORTABLE = DATA / "toy_cnn_fp32_portable.pte"
TOY_INT8 = DATA / "toy_cnn_int8_xnnpack.pte"
MOBILENET = DATA / "mobilenet_v3_small_like_fp32_xnnpack.pte"


# ------------------------------------------------------------------------------------------ reading the .pte


@pytest.mark.parametrize("pte", PTES, ids=[p.stem for p in PTES])
def test_planned_buffers_are_what_executorch_deserializes(pte: Path) -> None:
    from executorch.exir._serialize._program import deserialize_pte_binary

    plan = deserialize_pte_binary(pte.read_bytes()).program.execution_plan[0]
    expected = tuple(int(s) for s in plan.non_const_buffer_sizes[1:])
    assert expected and planned_buffers(pte) == expected
    assert planned_buffers(pte, "forward") == expected


@pytest.mark.parametrize("pte", PTES, ids=[p.stem for p in PTES])
def test_program_size_accounts_for_the_weights(pte: Path) -> None:
    """The constant data holds every weight (the exported model's parameters, at their dtype) and fits in the file."""
    size = program_size(pte)
    assert size.pte_bytes == pte.stat().st_size
    assert size.constant_bytes + size.delegate_bytes <= size.pte_bytes
    if "portable" in pte.name:
        assert size.delegate_bytes == 0
    else:
        assert size.delegate_bytes > 0  # an XNNPACK payload


def test_toy_cnn_constant_data_is_its_parameters() -> None:
    """Independent count: toy_cnn's parameters in fp32, each tensor padded to ExecuTorch's 16-byte alignment."""
    import example_models  # noqa: F401  (registers the example models)
    from pytest_sme2.models import get_model

    module, _ = get_model("toy_cnn").build()
    params = [p.numel() * 4 for p in module.parameters()]
    constant = program_size(TOY_PORTABLE).constant_bytes
    assert sum(params) <= constant <= sum(params) + 64 * len(params)


def test_reading_a_non_program_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "x.pte"
    bad.write_bytes(b"\0" * 64)
    with pytest.raises(ExportError, match=str(bad)):
        planned_buffers(bad)
    with pytest.raises(ExportError, match="no method 'nope'; it has: forward"):
        planned_buffers(TOY_FP32, "nope")


def test_runner_log_lines_are_read() -> None:
    """The lines pytest-sme2's runner prints (runners/cpp/sme2_runner.cpp), as it prints them."""
    log = ("sme2_runner rss_start_kb: 5000\nModel loaded in 1.250000 ms.\n"
           "sme2_runner planned_memory: buffers=1 total_bytes=12400 sizes=12400\n"
           "Iteration 1 of 1: 0.1 ms\nsme2_runner peak_rss_kb: 400000\nsme2_runner vmhwm_kb: 5432\n")
    # The peak is VmHWM; the ru_maxrss line (which carries the parent's high-water mark) is not read as a peak.
    assert runner_log_memory(log) == {"runner_planned_bytes": [12400], "peak_rss_kb": 5432, "load_ms": 1.25,
                                      "rss_start_kb": 5000}
    assert runner_log_memory("I 00:00:00.000 executorch:executor_runner.cpp:1] Model executed successfully") == {}


# ------------------------------------------------------------------------------------------ real peaks


@pytest.fixture(scope="module")
def local_memory(tmp_path_factory: pytest.TempPathFactory) -> Memory:
    """The MobileNetV3-like program run by the local runtime: 3 loads (blocks), each with its peak and load time."""
    from pytest_sme2.runners.local import LocalRunner

    out = tmp_path_factory.mktemp("mem")
    runner = LocalRunner()
    runs = [runner.run(RunRequest(pte=MOBILENET, runs=2, warmup=1, out_dir=out, mode=MODE_TIMING)) for _ in range(3)]
    return memory_of(MOBILENET, [r.metadata for r in runs])


def test_local_runtime_records_every_number(local_memory: Memory) -> None:
    assert local_memory.planned_bytes == planned_buffers(MOBILENET)
    assert local_memory.size == program_size(MOBILENET)
    assert len(local_memory.load_ms) == 3 and all(x > 0 for x in local_memory.load_ms)
    assert local_memory.peak_source is PeakSource.DELTA
    assert len(local_memory.peak_kb) == 3
    assert "excludes the interpreter, torch" in PeakSource.DELTA.description
    # The program plans 0.6 MB and holds ~10 MB of weights that XNNPACK packs at load: the high-water rise of the
    # process covers at least the planned arena.
    assert min(local_memory.peak_kb) * 1024 >= local_memory.planned_total


# ------------------------------------------------------------------------------------------ checks


def _cfg(**kw: object) -> MemoryThresholds:
    return MemoryThresholds(**kw)  # type: ignore[arg-type]


def _verdict(comparison: Comparison | None) -> object:
    samples = Samples((1.0, 1.0, 1.0, 1.0), (1, 1, 1, 1))
    return replace(gate(samples if comparison else None, samples, GateConfig(), comparison=comparison
                        or Comparison.SESSION), comparison=comparison)


def _other_plan(memory: Memory, pte: Path) -> Memory:
    return replace(memory, planned_bytes=planned_buffers(pte), size=program_size(pte))


def _small_and_large_plans(memory: Memory) -> tuple[Memory, Memory]:
    """``memory`` with the int8 toy_cnn's plan (12400 B), and with the fp32 portable one's (196608 B)."""
    return _other_plan(memory, TOY_INT8), _other_plan(memory, TOY_PORTABLE)


def _memory_check(comparison: Comparison | None, before: Memory | None, after: Memory, name: str,
                  **thresholds: object) -> tuple[Verdict, Check]:
    """The verdict of a ``comparison`` with the memory checks of ``before`` -> ``after``, and its check ``name``."""
    v = with_memory(_verdict(comparison), before, after, _cfg(**thresholds))  # type: ignore[arg-type]
    return v, next(c for c in v.checks if c.name == name)


def test_planned_growth_is_a_regression_with_every_byte(local_memory: Memory) -> None:
    # The int8 toy_cnn plans 12400 B, the fp32 portable one 196608 B: a change of export settings.
    small, grown = _small_and_large_plans(local_memory)
    v, check = _memory_check(Comparison.SESSION, small, grown, "planned_memory")
    assert check.status is Status.REGRESSION and v.status is Status.REGRESSION and v.failed
    assert "12,400 B -> 196,608 B (+184,208 B" in check.message and "no growth allowed" in check.message
    assert "buffer 0: 12,400 -> 196,608 B (+184,208)" in check.message
    # ... and a drop is an improvement, not a failure.
    v, check = _memory_check(Comparison.SESSION, grown, small, "planned_memory")
    assert check.status is Status.IMPROVEMENT and not v.failed
    # A growth within the allowed percentage passes (+1486 % within 1500 %).
    _, check = _memory_check(Comparison.STORED, small, grown, "planned_memory", planned_growth=15.0)
    assert check.status is Status.PASS


def test_an_unchanged_artifact_whose_plan_changed_is_a_bug(local_memory: Memory) -> None:
    small, changed = _small_and_large_plans(local_memory)
    v, check = _memory_check(Comparison.UNCHANGED, small, changed, "planned_memory")
    assert check.status is Status.BUG and v.status is Status.BUG and v.failed
    assert "cannot be the machine" in check.message and "+184,208 B" in check.message


def test_peak_follows_the_comparison_kind(local_memory: Memory) -> None:
    # Real peaks (of the local runtime, labelled as a runner process': the rule is the same for every process peak);
    # the candidates are them scaled by 1.2 and 1.01.
    base = replace(local_memory, peak_source=PeakSource.PROCESS)
    grown = replace(base, peak_kb=tuple(int(k * 1.2) for k in base.peak_kb))
    same = replace(base, peak_kb=tuple(int(k * 1.01) for k in base.peak_kb))
    for comparison, status in ((Comparison.SESSION, Status.REGRESSION), (Comparison.STORED, Status.REGRESSION),
                               (Comparison.UNCHANGED, Status.DRIFT)):
        v = with_memory(_verdict(comparison), base, grown, _cfg())  # type: ignore[arg-type]
        peak = next(c for c in v.checks if c.name == "peak_memory")
        assert peak.status is status, comparison
        assert "+20.0%" in peak.message or "+19.9%" in peak.message
    v = with_memory(_verdict(Comparison.UNCHANGED), base, grown, _cfg())  # type: ignore[arg-type]
    assert not v.failed  # drift is never a regression
    # A stored comparison widens the margin by memory's own allowance between sessions, not the latency's.
    v = with_memory(_verdict(Comparison.STORED), base, grown, _cfg(peak_drift_allowance=0.2))  # type: ignore[arg-type]
    assert next(c for c in v.checks if c.name == "peak_memory").status is Status.PASS
    v = with_memory(_verdict(Comparison.SESSION), base, same, _cfg())  # type: ignore[arg-type]
    assert next(c for c in v.checks if c.name == "peak_memory").status is Status.PASS
    assert PEAK_MARGIN > 0.01


def _session_peaks(row: str = "host toy_cnn") -> list[tuple[int, ...]]:
    """The block peaks (KiB) of one runner and program in each of the 5 real sessions of benchmarks/memory_noise.py."""
    data = json.loads((Path(__file__).parents[2] / "benchmarks" / "results" / "memory_noise.json").read_text())
    return [tuple(s[row]["peak_kb"]) for s in data["sessions"]]


def test_a_stored_peak_takes_memorys_own_between_session_allowance() -> None:
    """A stored comparison gives the peak memory's own between-session allowance, not the latency's drift
    allowance (a runner's peak moved 0.57 % between real sessions): every pair of those sessions passes at 5 % + 1 %,
    and +7 % fails."""
    from pytest_sme2.judge import Recorded, compare_recorded

    sessions = _session_peaks()
    samples = Samples((1.0, 1.01, 0.99, 1.0) * 4, (4, 4, 4, 4))
    config = GateConfig(margin=0.10, drift_allowance=0.50)  # the example suite's latency settings

    def peak(old: tuple[int, ...], new: tuple[int, ...]) -> Check:
        def rec(kb: tuple[int, ...]) -> Recorded:
            return Recorded(samples, memory=Memory((12400,), peak_kb=kb, peak_source=PeakSource.PROCESS))

        verdict = compare_recorded(rec(old), rec(new), config).verdict
        assert verdict is not None
        return next(c for c in verdict.checks if c.name == "peak_memory")

    for old in sessions:
        for new in sessions:
            assert peak(old, new).status is Status.PASS
    base = sessions[0]
    for factor in (1.07, 1.5):
        grown = peak(base, tuple(int(k * factor) for k in base))
        assert grown.status is Status.REGRESSION, (factor, grown.message)
        assert "margin ±6.0% (5% + 1% a peak may move between sessions)" in grown.message
    assert peak(base, tuple(int(k * 1.04) for k in base)).status is Status.PASS
    from pytest_sme2.gate.verdict import PEAK_DRIFT_ALLOWANCE

    medians = [statistics.median(p) for p in sessions]
    moved = max(abs(a / b - 1) for a in medians for b in medians)
    assert 0.005 < moved < PEAK_DRIFT_ALLOWANCE  # what the allowance is measured from: 0.57 % apart at most


def test_the_local_runtimes_peak_is_reported_not_gated(local_memory: Memory) -> None:
    grown = replace(local_memory, peak_kb=tuple(k * 3 for k in local_memory.peak_kb))
    v = with_memory(_verdict(Comparison.SESSION), local_memory, grown, _cfg(peak_mb=0.001))  # type: ignore[arg-type]
    checks = {c.name: c for c in v.checks}
    assert checks["peak_memory"].advisory and "+200.0%" in checks["peak_memory"].message
    assert "reported, not gated" in checks["peak_memory"].message and checks["peak_budget"].advisory
    assert not v.failed


def test_peak_on_real_runs_of_the_same_program_passes(local_memory: Memory) -> None:
    """Two halves of real measurements of one program (the module fixture's blocks) do not fail each other."""
    a = replace(local_memory, peak_kb=local_memory.peak_kb[:2])
    b = replace(local_memory, peak_kb=local_memory.peak_kb[2:])
    v = with_memory(_verdict(Comparison.UNCHANGED), a, b, _cfg())  # type: ignore[arg-type]
    assert not v.failed


def test_budgets(local_memory: Memory) -> None:
    total_mb = local_memory.planned_total / 2**20
    process = replace(local_memory, peak_source=PeakSource.PROCESS)
    checks = {c.name: c for c in with_memory(_verdict(None), None, process,  # type: ignore[arg-type]
                                             _cfg(planned_mb=total_mb / 2, peak_mb=1e6)).checks}
    assert checks["planned_budget"].status is Status.REGRESSION and "606,464 B" in checks["planned_budget"].message
    assert checks["peak_budget"].status is Status.PASS
    # An emulator's process is no device: its peak is reported against a device budget, not judged.
    emulated = replace(local_memory, peak_source=PeakSource.EMULATOR)
    v = with_memory(_verdict(None), None, emulated, _cfg(peak_mb=0.001))  # type: ignore[arg-type]
    budget = next(c for c in v.checks if c.name == "peak_budget")
    assert budget.advisory and "emulator" in budget.message and not v.failed
    # A runner that reports no peak: the budget cannot be judged, and says so (never a pass, never a regression).
    v = with_memory(_verdict(None), None, replace(local_memory, peak_kb=(), peak_source=None),  # type: ignore[arg-type]
                    _cfg(peak_mb=1.0))
    assert next(c for c in v.checks if c.name == "peak_budget").status is Status.INCONCLUSIVE


def test_an_old_baseline_without_memory_is_not_gated_and_says_so(local_memory: Memory) -> None:
    committed = sorted((REPO / ".sme2_baselines").glob("*toy_cnn*int8-xnnpack*.json"))[0]
    data = json.loads(committed.read_text())
    data.pop("memory", None)  # as baselines written before memory was recorded (a run since may have added it)
    old = Baseline.from_dict(data, source=str(committed))
    assert old.memory is None
    v = with_memory(_verdict(Comparison.UNCHANGED), old.memory, local_memory, _cfg())  # type: ignore[arg-type]
    assert NOT_STORED in v.notes and not any(c.name == "planned_memory" for c in v.checks)
    # With memory it round-trips, and the latency fields are untouched.
    gained = replace(old, memory=local_memory)
    again = Baseline.from_dict(json.loads(json.dumps(gained.to_dict())))
    assert again.memory == local_memory and again.samples_ms == old.samples_ms


def test_sme2_on_off_memory_is_reported(local_memory: Memory) -> None:
    off = replace(local_memory, peak_kb=tuple(k + 1024 for k in local_memory.peak_kb))
    v = with_memory(_verdict(None), None, local_memory, _cfg(), off=off)  # type: ignore[arg-type]
    check = next(c for c in v.checks if c.name == "sme2_memory")
    assert check.advisory and "planned 606,464 B both" in check.message and "-1,024 KiB" in check.message


# ------------------------------------------------------------------------------------------ the plugin, end to end

WIDTH_TEST = """
    import os
    import pytest, torch

    WIDTH = int(os.environ.get("SME2_TEST_WIDTH", "64"))


    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = torch.nn.Linear(64, WIDTH), torch.nn.Linear(WIDTH, 64)

        def forward(self, x):
            return self.down(torch.relu(self.up(x)))


    def mlp():
        return Mlp()


    @pytest.mark.sme2_model(mlp, dtype="fp32", backend="portable", inputs=(torch.ones(1, 64),))
    @pytest.mark.sme2_threshold(latency_pct=50)
    def test_mlp(exported_model, sme2_runner, sme2_baseline):
        sme2_baseline.check(sme2_runner.profile(exported_model))
"""
FAST = ("--sme2-runs=6", "--sme2-warmup=2", "--sme2-blocks=4", "--sme2-busy-limit=100", "-p", "no:cacheprovider",
        "-p", "no:randomly")


@pytest.mark.slow
def test_a_wider_model_fails_on_planned_memory_alone(pytester: pytest.Pytester, sme2_shared_cache: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A model whose hidden layer is 64 -> 80 wide (portable: the activations are planned) fails on its
    planned memory, exactly, with the bytes, in the same run where its latency stays within the 50 % margin."""
    import textwrap

    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_width=textwrap.dedent(WIDTH_TEST))
    run = lambda *a: pytester.runpytest_subprocess(f"--sme2-cache-dir={sme2_shared_cache}", *FAST, *a,  # noqa: E731
                                                  timeout=600)
    monkeypatch.setenv("SME2_TEST_WIDTH", "64")
    run("--sme2-update-baseline").assert_outcomes(passed=1)
    (path,) = (pytester.path / ".sme2_baselines").glob("*.json")
    stored = json.loads(path.read_text())
    small = stored["memory"]["planned_bytes"]
    assert stored["memory"]["size"]["pte_bytes"] > 0 and len(stored["memory"]["peak_kb"]) == 4

    # An old baseline (no memory): gated on latency as before, memory not gated and said so; the unchanged artifact's
    # run adds the memory to the file, latency untouched.
    del stored["memory"]
    path.write_text(json.dumps(stored))
    result = run()
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "memory: the baseline records no memory" in out and "memory: added to the baseline" in out
    gained = json.loads(path.read_text())
    assert gained["memory"]["planned_bytes"] == small and gained["samples_ms"] == stored["samples_ms"]

    monkeypatch.setenv("SME2_TEST_WIDTH", "80")
    result = run("--sme2-json=results.json")
    result.assert_outcomes(failed=1)
    test = json.loads((pytester.path / "results.json").read_text())["tests"][0]
    checks = {c["name"]: c for c in test["verdict"]["checks"]}
    wide = test["memory"]["planned_bytes"]
    assert sum(wide) > sum(small)
    planned = checks["planned_memory"]
    assert planned["status"] == "regression"
    assert f"{sum(small):,} B -> {sum(wide):,} B ({sum(wide) - sum(small):+,} B" in planned["message"]
    assert checks["e2e"]["status"] != "regression"  # the latency did not fail it: planned memory alone did
    out = result.stdout.str()
    assert "[regression] planned_memory: grew:" in out
    # Every report shows it: the terminal line, markdown's table, the HTML chart (planned vs peak, baseline vs current).
    assert f"memory: planned {sum(wide):,} B ({sum(wide) - sum(small):+,} B)" in out
    from pytest_sme2.report.html import render_html
    from pytest_sme2.report.markdown import render_markdown
    from pytest_sme2.results import SessionResults

    results = SessionResults.from_dict(json.loads((pytester.path / "results.json").read_text()))
    markdown = render_markdown(results)
    assert "### Memory and Size" in markdown and f"| current | {sum(wide):,} B |" in markdown
    assert "Reported, not gated" in markdown  # the local runtime's peak
    page = render_html(results)
    assert page.count('class="sme2-mem-planned"') == 2  # the baseline's artifact re-measured, and the current one
    assert f'data-value="{sum(wide) / 2**20:.6f}"' in page


# ------------------------------------------------------------------------------------------ our runner, host and QEMU


def _runner_memory(runner: object, pte: Path, inp: Path, out: Path, variant: str | None = None) -> Memory:
    from pytest_sme2.runners.base import MODE_TRACE

    results = [runner.run(RunRequest(pte=pte, runs=1, warmup=0, out_dir=out, inputs=(inp,), mode=MODE_TRACE,  # type: ignore[attr-defined]
                                     variant=variant)) for _ in range(2)]
    assert all("ru_maxrss_kb" in r.metadata for r in results)
    return memory_of(pte, [r.metadata for r in results])


@pytest.mark.slow
def test_our_runner_reports_every_number_on_the_host(host_runner_build: object, tmp_path: Path) -> None:
    """pytest-sme2's runner: its MethodMeta agrees with the .pte's plan; its peak (VmHWM) is its own process'."""
    from pytest_sme2.runners.host import HostRunner

    memory = _runner_memory(HostRunner(host_runner_build.path), MOBILENET,  # type: ignore[attr-defined]
                            DATA / "mobilenet_v3_small_like_input_fp32.bin", tmp_path)
    assert memory.runner_planned_bytes == memory.planned_bytes == planned_buffers(MOBILENET)
    assert memory.peak_source is PeakSource.PROCESS and len(memory.peak_kb) == 2 and len(memory.load_ms) == 2
    # The process holds the .pte's weights (~10 MB, packed by XNNPACK) and the planned arena on top of its start.
    assert memory.added_median_kb is not None and memory.added_median_kb * 1024 > memory.planned_total
    # ... and it is not the pytest process' size (what wait4's ru_maxrss would have said).
    assert max(memory.peak_kb) < _status_kb_of_self("VmHWM")


def _status_kb_of_self(key: str) -> int:
    import re

    return int(re.search(rf"^{key}:\s+(\d+)", Path("/proc/self/status").read_text(), re.M).group(1))  # type: ignore[union-attr]


@pytest.mark.slow
def test_qemu_reports_the_same_plan_and_the_emulators_peak(aarch64_runner_build: object, sme2_qemu: Path,
                                                           tmp_path: Path) -> None:
    """Under QEMU the plan is the program's (exact, the same as on any device); the peak is the emulator's process."""
    from pytest_sme2.runners.base import SME2_OFF, SME2_ON
    from pytest_sme2.runners.qemu import QemuRunner

    runner = QemuRunner(aarch64_runner_build.path, qemu=sme2_qemu,  # type: ignore[attr-defined]
                        sysroot=aarch64_runner_build.sysroot)  # type: ignore[attr-defined]
    on = _runner_memory(runner, TOY_FP32, DATA / "toy_cnn_input_fp32.bin", tmp_path, SME2_ON)
    off = _runner_memory(runner, TOY_FP32, DATA / "toy_cnn_input_fp32.bin", tmp_path, SME2_OFF)
    for m in (on, off):
        assert m.runner_planned_bytes == m.planned_bytes == planned_buffers(TOY_FP32)
        assert m.peak_source is PeakSource.EMULATOR and m.start_kb and m.added_median_kb is not None
    v = with_memory(_verdict(None), None, on, _cfg(peak_mb=0.001), off=off)  # type: ignore[arg-type]
    checks = {c.name: c for c in v.checks}
    assert checks["peak_budget"].advisory and "emulator" in checks["peak_budget"].message
    assert "planned" in checks["sme2_memory"].message and not v.failed


@pytest.mark.parametrize(("given", "expected"), [(None, PeakSource.PROCESS), ("emulator", PeakSource.EMULATOR)])
def test_the_runners_own_lines_give_the_peak_of_the_kind_the_runner_says(given: str | None, expected: PeakSource,
                                                                          tmp_path: Path) -> None:
    """The log parsing shared by host, QEMU and Android runs: a phone's run passes no kind (its runner's own process),
    QEMU says emulator; an executor_runner that prints no VmHWM has no peak (wait4's ru_maxrss is never used)."""
    from pytest_sme2.runners.executor_runner import FinishedRun, result_from_log

    ours = ("sme2_runner rss_start_kb: 5100\nModel loaded in 0.400000 ms.\n"
            "sme2_runner planned_memory: buffers=1 total_bytes=12400 sizes=12400\n"
            + "".join(f"Iteration {i} of 2: 0.2 ms\n" for i in (1, 2))
            + "Model executed successfully 2 time(s) in 0.4 ms.\nsme2_runner peak_rss_kb: 402000\n"
            "sme2_runner vmhwm_kb: 6520\n")
    upstream = "".join(f"Iteration {i} of 2: 0.2 ms\n" for i in (1, 2))
    request = RunRequest(pte=TOY_INT8, runs=1, warmup=1, out_dir=tmp_path, mode=MODE_TIMING)
    metas = []
    for text in (ours, upstream):
        log = tmp_path / "run.log"
        log.write_text(text)
        meta = {"peak_source": given, "ru_maxrss_kb": 402000} if given else {}
        metas.append(result_from_log(FinishedRun(runner_name="x", runner_text="x", request=request, build="b",
                                                 cmd=["x"], run_dir=tmp_path, log_path=log, wall_s=0.1,
                                                 metadata=meta)).metadata)
    memory = memory_of(TOY_INT8, [metas[0]])
    assert memory.peak_kb == (6520,) and memory.start_kb == (5100,) and memory.peak_source is expected
    assert memory.load_ms == (0.4,) and memory.runner_planned_bytes == memory.planned_bytes == (12400,)
    none = memory_of(TOY_INT8, [metas[1]])
    assert none.peak_kb == () and none.peak_source is None and none.load_ms == ()
