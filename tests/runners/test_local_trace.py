"""The local runtime's own traces: recorded in this test run, checked against executorch and the real runner.

Every trace here is written now, by the executorch Python runtime running a ``.pte`` from
``tests/data`` in trace mode. Three independent references check it:

- executorch's own decoder (``deserialize_from_etdump_flatcc``) and its ``Inspector`` read the same
  file: every event, every ``Method::execute`` and every category sum must agree with ours;
- the recorded ``executor_runner`` trace of the same ``.pte`` (``tests/data``): the same operators
  in the same order, and for MobileNetV3 category shares within a stated tolerance;
- the Python clock around each call: every traced ``Method::execute`` lies inside it.

A runtime without the event tracer is not simulated with made-up data: the wrappers below call the
real runtime with the tracer off, or drop its (real) output file, as executorch 1.4 does.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.analysis.run import analyze
from pytest_sme2.evidence.categories import NAMED_CATEGORIES, OTHER, categorize, op_type_of
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.measure.blocks import disturbance_of
from pytest_sme2.measure.profile import profile_exported
from pytest_sme2.measure.recipe import ProgramFile
from pytest_sme2.runners.base import RunRequest, RunResult
from pytest_sme2.runners.local import LocalRunner

pytestmark = pytest.mark.fast

DATA = Path(__file__).parents[1] / "data"
MOBILENET = "mobilenet_v3_small_like_fp32_xnnpack.pte"
#: .pte -> (its input file, executions, the recorded executor_runner trace of the same .pte)
PROGRAMS = {
    "toy_cnn_fp32_xnnpack.pte": ("toy_cnn_input_fp32.bin", 30, "toy_cnn_fp32_xnnpack_simd-on_t1"),
    "toy_cnn_fp16_xnnpack.pte": ("toy_cnn_input_fp16.bin", 30, "toy_cnn_fp16_xnnpack_simd-on_t1"),
    "toy_cnn_int8_xnnpack.pte": ("toy_cnn_input_fp32.bin", 30, "toy_cnn_int8_xnnpack_simd-on_t1"),
    "toy_cnn_fp32_portable.pte": ("toy_cnn_input_fp32.bin", 4, "toy_cnn_fp32_portable_simd-on_t1"),
    MOBILENET: ("mobilenet_v3_small_like_input_fp32.bin", 100, "mobilenet_v3_small_like_fp32_xnnpack_simd-on_t1"),
}
WARMUP = 2
CONTAINERS = {"Method::execute", "DELEGATE_CALL", "OPERATOR_CALL", "Program::load_method", "Method::init"}


def _request(pte: str, out_dir: Path, **overrides: Any) -> RunRequest:
    input_file, runs, _ = PROGRAMS[pte]
    fields: dict[str, Any] = {"pte": DATA / pte, "runs": runs, "warmup": WARMUP, "threads": 1,
                              "inputs": (DATA / input_file,), "out_dir": out_dir}
    fields.update(overrides)
    return RunRequest(**fields)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], RunResult]:
    """``traced(pte)`` -> a trace-mode RunResult of that .pte, recorded once per module."""
    out = tmp_path_factory.mktemp("local_traces")
    cache: dict[str, RunResult] = {}

    def run(pte: str) -> RunResult:
        if pte not in cache:
            cache[pte] = LocalRunner().run(_request(pte, out))
        return cache[pte]

    return run


def _events(etdump: Any) -> list[tuple[int, str, Any]]:
    return [(bi, b.name, e.profile_event) for bi, b in enumerate(etdump.run_data) for e in b.events or []
            if e.profile_event is not None]


def _label(pe: Any) -> str:
    return str(pe.name or pe.delegate_debug_id_str or "")


def _execute_blocks(etdump: Any) -> list[Any]:
    return [b for b in etdump.run_data
            if any(e.profile_event is not None and e.profile_event.name == "Method::execute" for e in b.events or [])]


def _leaf_labels(blocks: Any) -> list[str]:
    return [_label(e.profile_event) for e in blocks.events if e.profile_event is not None
            and _label(e.profile_event) not in CONTAINERS]


# ------------------------------------------------------------------- against executorch's decoders


@pytest.mark.parametrize("pte", list(PROGRAMS))
def test_fresh_local_trace_matches_executorch_decoder(pte: str, traced: Callable[[str], RunResult],
                                                      reference_etdump: Any) -> None:
    result = traced(pte)
    assert result.per_operator and result.trace_path is not None
    ref = reference_etdump(result.trace_path)
    executions = WARMUP + PROGRAMS[pte][1]
    # One load block, then one block per execution of this run: the trace is this block's, whole.
    assert [b.name for b in ref.run_data] == ["Default"] + ["Execute"] * executions
    events = _events(ref)
    table = read_etdump(result.trace_path).table
    assert table["event_name"].tolist() == [_label(pe) for _, _, pe in events]
    assert table["block_index"].tolist() == [bi for bi, _, _ in events]
    assert table["start_ns"].tolist() == [pe.start_time for _, _, pe in events]
    assert table["end_ns"].tolist() == [pe.end_time for _, _, pe in events]
    # The result's E2E is each execution's Method::execute, as executorch decodes it.
    expected = [sum((e.profile_event.end_time - e.profile_event.start_time) / 1e6 for e in b.events
                    if e.profile_event is not None and e.profile_event.name == "Method::execute")
                for b in _execute_blocks(ref)]
    assert list(result.e2e_ms) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("pte", ["toy_cnn_fp32_xnnpack.pte", "toy_cnn_fp32_portable.pte"])
def test_fresh_local_e2e_matches_inspector(pte: str, traced: Callable[[str], RunResult]) -> None:
    from executorch.devtools import Inspector

    result = traced(pte)
    inspector = Inspector(etdump_path=str(result.trace_path))
    raw = [ev.perf_data.raw for b in inspector.event_blocks for ev in b.events if ev.name == "Method::execute"]
    assert len(raw) == 1 and len(raw[0]) == len(result.e2e_ms)
    for run, (ours, theirs) in enumerate(zip(result.e2e_ms, raw[0], strict=True)):
        assert abs(ours - theirs) <= 1e-3, f"run {run}: ours {ours} ms, Inspector {theirs} ms"


@pytest.mark.parametrize("pte", list(PROGRAMS))
def test_every_traced_execution_lies_inside_its_python_call(pte: str, traced: Callable[[str], RunResult]) -> None:
    """Same clock (monotonic) on both sides: Method::execute runs inside the Python call around it."""
    result = traced(pte)
    wall = result.metadata["python_wall_ms"]
    assert len(wall) == len(result.e2e_ms) == len(result.cpu_ms)
    assert all(w >= t for w, t in zip(wall, result.e2e_ms, strict=True))
    gap = result.metadata["python_minus_trace_median_us"]
    print(f"\n{pte}: Python call minus Method::execute, median {gap:.1f} us")


@pytest.mark.parametrize("pte", list(PROGRAMS))
def test_analysis_of_a_fresh_trace_equals_an_independent_sum(pte: str, traced: Callable[[str], RunResult],
                                                             reference_etdump: Any) -> None:
    """Category totals and portable time, summed here from executorch's decode of the same file."""
    result = traced(pte)
    assert result.trace_path is not None
    analysis = analyze(read_etdump(result.trace_path), warmup=WARMUP)
    runs = _execute_blocks(reference_etdump(result.trace_path))[WARMUP:]
    sums: dict[str, float] = dict.fromkeys(NAMED_CATEGORIES, 0.0)
    portable = 0.0
    e2e = []
    for block in runs:
        for e in block.events:
            pe = e.profile_event
            if pe is None:
                continue
            label, ms = _label(pe), (pe.end_time - pe.start_time) / 1e6
            if label == "Method::execute":
                e2e.append(ms)
            elif label not in CONTAINERS:
                category = categorize(op_type_of(label))
                if category in sums:  # an uncategorized operator is part of Other, the remainder of E2E
                    sums[category] += ms
                portable += ms if label.startswith("native_call_") else 0.0
    means = {c: v / len(runs) for c, v in sums.items()}
    means[OTHER] = statistics.fmean(e2e) - sum(means.values())
    for category, value in means.items():
        assert analysis.category_totals_ms[category] == pytest.approx(value, rel=1e-9, abs=1e-12), category
    assert analysis.portable_ms == pytest.approx(portable / len(runs), rel=1e-9, abs=1e-12)
    assert analysis.per_operator and analysis.runs_measured == PROGRAMS[pte][1]


# --------------------------------------------------------------- against the recorded executor_runner


@pytest.mark.parametrize("pte", list(PROGRAMS))
def test_local_runtime_traces_the_operators_the_runner_traced(pte: str, traced: Callable[[str], RunResult],
                                                              reference_etdump: Any) -> None:
    """The same .pte gives the same operator events, in the same order, in both runtimes."""
    result = traced(pte)
    local = _execute_blocks(reference_etdump(result.trace_path))
    recorded = _execute_blocks(reference_etdump(DATA / f"{PROGRAMS[pte][2]}.etdump"))
    assert _leaf_labels(local[1]) == _leaf_labels(recorded[1])
    assert all(_leaf_labels(b) == _leaf_labels(local[1]) for b in local)


#: Largest difference in a category's share (percentage points) between the local runtime and the
#: recorded executor_runner trace of MobileNetV3. Why not tighter: the recording ran on a Zen 4 CPU
#: (AVX-512 kernels), while this machine kind also comes as Zen 3 (AVX2 kernels, ~3x slower), and the
#: two kernel sets do not slow every operator alike; XNNPACK operator times are whole microseconds,
#: so truncation moves ~0.5 us per operator out of the operators, a larger share of the faster CPU's
#: run; and the runtimes differ (executor_runner 1.4.1, the 1.5.1 wheel).
SHARE_TOLERANCE_PP = 6.0
#: Below this preempted share, with nothing else the disturbance check reads (a busy neighbour, steal), the local
#: block counts as undisturbed, and the analysis's own shares (means, Other included) are compared too; otherwise
#: they carry the disturbance and are only printed. 1 %: a 4 ms preemption inside one operator moves its category's
#: mean share by ~0.9 points, so the gate's 5 % could move shares by 3-4 points on top of the CPUs' difference.
QUIET_PREEMPTED = 0.01


def _operator_shares(trace: Path, warmup: int) -> dict[str, float]:
    """Named categories' shares (%) of operator time, from per-operator medians over the measured runs.

    A preemption by other work lands in one operator of one run (or between operators, in Other):
    the median over runs of each operator ignores it, while means, per-run shares and Other take it
    in whole. So this compares where the operators' time goes, on any machine load.
    """
    ops = read_etdump(trace).operators()
    ops = ops[ops["run_index"] >= warmup]
    per_category = ops.groupby(["event_name", "category"])["duration_ms"].median().groupby("category").sum()
    total = float(per_category.sum())
    return {c: 100 * float(per_category.get(c, 0.0)) / total for c in NAMED_CATEGORIES}


def test_mobilenet_category_shares_match_the_executor_runner_trace(traced: Callable[[str], RunResult]) -> None:
    result = traced(MOBILENET)
    assert result.trace_path is not None and result.load is not None
    recorded = DATA / f"{PROGRAMS[MOBILENET][2]}.etdump"
    local, runner = analyze(read_etdump(result.trace_path), warmup=WARMUP), analyze(read_etdump(recorded), warmup=1)
    ours, theirs = _operator_shares(result.trace_path, WARMUP), _operator_shares(recorded, 1)
    lines = [f"{c:14s} local {ours.get(c, math.nan):5.1f} % of operator time, {100 * local.category_share[c]:5.1f} % "
             f"of E2E | executor_runner {theirs.get(c, math.nan):5.1f} / {100 * runner.category_share[c]:5.1f} %"
             for c in local.category_share]
    quiet = result.load.preempted_share < QUIET_PREEMPTED and not disturbance_of(result)
    verdict = "quiet: E2E shares compared too" if quiet else "disturbed: E2E shares printed"
    print("\nMobileNetV3 fp32/xnnpack, 1 thread, category shares:\n" + "\n".join(lines)
          + f"\nlocal median E2E {local.e2e.median:.3f} ms, runner {runner.e2e.median:.3f} ms; local block: "
          f"{result.load.describe()} ({verdict})")
    for category in NAMED_CATEGORIES:
        assert abs(ours[category] - theirs[category]) <= SHARE_TOLERANCE_PP, category
    ranking = sorted(ours, key=ours.__getitem__, reverse=True)
    assert ranking[:2] == sorted(theirs, key=theirs.__getitem__, reverse=True)[:2] == ["GEMM", "Convolution"]
    if quiet:
        for category, share in local.category_share.items():
            assert abs(100 * (share - runner.category_share[category])) <= SHARE_TOLERANCE_PP, category


# ------------------------------------------------------------------------ a runtime without a tracer


class _TracerOff:
    """The real runtime, loading programs as a build without the event tracer does: no tracer."""

    def load_program(self, data: Any, **options: Any) -> Any:
        from executorch.runtime import Runtime

        options["enable_etdump"] = False
        return Runtime.get().load_program(data, **options)


class _WritesNothing:
    """The real runtime (tracer on); writing the ETDump does what executorch 1.4's wheel does: no file."""

    class _Program:
        def __init__(self, program: Any) -> None:
            self._program = program

        def __getattr__(self, name: str) -> Any:
            return getattr(self._program, name)

        def write_etdump_result_to_file(self, etdump_path: str, debug_path: str) -> None:
            """1.4.1 logs "No etdump data found, try rebuilding ..." and returns without a file."""

    def load_program(self, data: Any, **options: Any) -> Any:
        from executorch.runtime import Runtime

        return self._Program(Runtime.get().load_program(data, **options))


class _RecordsNoExecutions:
    """The real runtime; the ETDump written is a real one that recorded the load but no execution."""

    class _Program(_WritesNothing._Program):
        def __init__(self, program: Any, data: Any, options: dict[str, Any]) -> None:
            super().__init__(program)
            self._data, self._options = data, options

        def write_etdump_result_to_file(self, etdump_path: str, debug_path: str) -> None:
            from executorch.runtime import Runtime

            fresh = Runtime.get().load_program(self._data, **self._options)
            fresh.load_method("forward")
            fresh.write_etdump_result_to_file(etdump_path, debug_path)

    def load_program(self, data: Any, **options: Any) -> Any:
        from executorch.runtime import Runtime

        return self._Program(Runtime.get().load_program(data, **options), data, options)


@pytest.mark.parametrize(
    ("runtime", "why"),
    [
        (_TracerOff(), "recorded no ETDump (No etdump found)"),
        (_WritesNothing(), "wrote no ETDump (it is built without the event tracer)"),
        (_RecordsNoExecutions(), "holds no Method::execute events"),
    ],
    ids=["tracer-off", "writes-nothing", "no-executions"],
)
def test_runtime_without_tracer_gives_e2e_only_and_the_fix(runtime: Any, why: str, tmp_path: Path) -> None:
    runner = LocalRunner(runtime=runtime)
    result = runner.run(_request("toy_cnn_fp32_xnnpack.pte", tmp_path, runs=10))
    assert result.per_operator is False and result.trace_path is None
    note = result.per_operator_note
    assert why in note and "\n" not in note
    assert note.startswith("no per-operator timing: ") and "Fix: install executorch 1.5 or later" in note
    assert len(result.e2e_ms) == len(result.cpu_ms) == 12 and all(t > 0 for t in result.e2e_ms)
    assert "python_wall_ms" not in result.metadata, "the clock's times are the E2E here, not a cross-check"
    # Through profiling: an E2E-only analysis with the note, never a breakdown of nothing but Other.
    profile = profile_exported(ProgramFile(DATA / "toy_cnn_fp32_xnnpack.pte", (DATA / "toy_cnn_input_fp32.bin",)),
                               runner, runs=5, warmup=1, out_dir=tmp_path / "profile")
    assert profile.analysis.per_operator is False and why in profile.note


def test_traced_local_profile_has_named_categories(tmp_path: Path) -> None:
    """The default local profile is per-operator: real XNNPACK categories in the JSON."""
    profile = profile_exported(ProgramFile(DATA / "toy_cnn_fp32_xnnpack.pte", (DATA / "toy_cnn_input_fp32.bin",)),
                               LocalRunner(), runs=10, warmup=2, out_dir=tmp_path, blocks=2)
    data = profile.to_dict()
    assert data["analysis"]["per_operator"] is True and profile.note == ""
    assert data["analysis"]["category_totals_ms"]["Convolution"] > 0
    # Every operator is named and categorized; the small ones (the 10-way linear layer, transposes)
    # may read 0 us, as XNNPACK times whole microseconds, so their presence is what is asserted.
    operators = {(o["name"], o["category"], o["backend"]) for o in data["analysis"]["operator_details"]}
    assert {("Convolution (NHWC, F32) IGEMM", "Convolution", "XNNPACK"),
            ("Fully Connected (NC, F32) GEMM", "GEMM", "XNNPACK"),
            ("Transpose (ND, X32)", "Data Movement", "XNNPACK")} <= operators
    assert all(r["trace_path"] and r["load"]["source"] == "thread cpu time" for r in data["runs"])
