"""The gate's defect tests (issue 12), in one place.

DOCSTRING_PLACEHOLDER
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from emulated_device.fixtures import MakePhone
from standin import make_standin

from pytest_sme2.analysis import analyze
from pytest_sme2.baseline import Baseline, BaselineStore
from pytest_sme2.errors import BaselineError, RunnerError
from pytest_sme2.runners.android import AndroidRunner
from pytest_sme2.runners.base import RunRequest
from pytest_sme2.runners.host import HostRunner, check_what_ran
from pytest_sme2.trace import KIND_LEAF, Timeline, read_etdump

DATA = Path(__file__).parent / "data"
NAMED = ("Convolution", "GEMM", "Data Movement", "Elementwise")

# ------------------------------------------------------------------- defect 4: nested leaf events

#: A real recording with portable ops between delegate calls; no recorded trace nests leaf events
#: (checked for every trace in tests/data and the shared recordings), so the nested timelines below
#: are constructed from this one's own events.
NESTING_SOURCE = DATA / "tiny_transformer_fp32_xnnpack_simd-on_t1.etdump"


def _with_rows(timeline: Timeline, extra: pd.DataFrame, label: str) -> Timeline:
    table = pd.concat([timeline.table, extra], ignore_index=True)
    return Timeline(source=f"{timeline.source} ({label})", table=table, etdump_version=timeline.etdump_version)


def _union_ms(intervals: list[tuple[int, int]]) -> float:
    """Length of the union of [start, end) intervals in ns, as ms: sort and merge, plain Python."""
    total, cur_start, cur_end = 0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None and cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None and cur_start is not None:
        total += cur_end - cur_start
    return total / 1e6


def test_inner_events_inside_a_recorded_operator_add_nothing() -> None:
    """Defect 4: each leaf event also recorded as an inner event of itself (a kernel that emits its own event).

    Constructed from the real tiny_transformer recording: every leaf event is duplicated with its
    recorded span, so it lies fully inside the original. Counted once, every category and Other is
    exactly what the untouched recording gives; summed twice, the named categories exceed E2E and
    Other goes negative (as in the issue: Convolution 20.9 ms on a 10.8 ms E2E).
    """
    original = read_etdump(NESTING_SOURCE)
    leaves = original.table[original.table["kind"] == KIND_LEAF]
    nested = _with_rows(original, leaves.copy(), "every leaf event nested in a copy of itself")
    want, got = analyze(original, warmup=1), analyze(nested, warmup=1)
    for cat, per_run in want.category_per_run_ms.items():
        assert got.category_per_run_ms[cat] == pytest.approx(per_run, rel=1e-12, abs=1e-12), cat
    assert min(got.category_per_run_ms["Other"]) >= 0
    named_sum = np.sum([got.category_per_run_ms[c] for c in NAMED], axis=0)
    assert (named_sum <= np.asarray(got.measured_ms)).all()
    assert sum(o.total_ms for o in got.operator_details) == pytest.approx(
        sum(o.total_ms for o in want.operator_details), rel=1e-12)


def test_overlapping_leaf_events_count_their_union() -> None:
    """Defect 4: partly overlapping leaf events count the union of their spans, computed here independently.

    Constructed from the real tiny_transformer recording: in every run, a copy of each leaf event
    (its recorded duration) is moved to start in the middle of the event before it, so it overlaps
    that event partly and often the next one too.
    """
    original = read_etdump(NESTING_SOURCE)
    leaves = original.table[(original.table["kind"] == KIND_LEAF)].sort_values(["run_index", "start_ns"])
    leaves = leaves[leaves["end_ns"] > leaves["start_ns"]]
    moved = []
    for _, run in leaves.groupby("run_index"):
        rows = run.to_dict("records")
        for before, row in itertools.pairwise(rows):
            copy = dict(row)
            copy["start_ns"] = (before["start_ns"] + before["end_ns"]) // 2
            copy["end_ns"] = copy["start_ns"] + (row["end_ns"] - row["start_ns"])
            moved.append(copy)
    timeline = _with_rows(original, pd.DataFrame(moved, columns=original.table.columns), "overlapping copies")
    got = analyze(timeline, warmup=1)

    table = timeline.table
    union = []
    for run in range(1, timeline.num_runs):
        events = table[(table["run_index"] == run) & (table["kind"] == KIND_LEAF)]
        union.append(_union_ms(list(zip(events["start_ns"].tolist(), events["end_ns"].tolist(), strict=True))))
    assert sum(o.total_ms for o in got.operator_details) == pytest.approx(float(np.mean(union)), rel=1e-9)
    named_sum = np.sum([got.category_per_run_ms[c] for c in NAMED], axis=0)
    assert (named_sum <= np.asarray(union) + 1e-9).all()
    assert min(got.category_per_run_ms["Other"]) >= 0
    assert got.category_totals_ms["Other"] >= 0


def test_a_baseline_with_a_negative_other_is_not_written(tmp_path: Path) -> None:
    """Defect 4: named categories adding up to more than E2E (a negative Other) are refused before writing."""
    bad = Baseline(test_id="t.py::test_a", identity={"arch": "x"}, samples_ms=(1.0, 1.1), block_sizes=(2,),
                   category_per_run_ms={"Convolution": (1.5, 0.9), "Other": (-0.5, 0.2)}, category_block_sizes=(2,),
                   per_operator=True)
    with pytest.raises(BaselineError, match=r"not writing the baseline for t\.py::test_a") as info:
        BaselineStore(tmp_path).save(bad)
    assert "more than the end-to-end time" in str(info.value) and "Other -0.5 ms in 1 run(s)" in str(info.value)
    assert not list(tmp_path.iterdir())
    # Anything else the next run would refuse is refused too, with the reader's own reason.
    cut = Baseline(test_id="t.py::test_a", identity={"arch": "x"}, samples_ms=(1.0, 1.1), block_sizes=(3,))
    with pytest.raises(BaselineError, match=r"it would not read back .*'block_sizes' must be positive whole numbers"):
        BaselineStore(tmp_path).save(cut)
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------- defect 5: the runner's count and log are checked

TOY_PTE = DATA / "toy_cnn_fp32_xnnpack.pte"
TOY_INPUT = DATA / "toy_cnn_input_fp32.bin"
TOY_TRACE = DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"
#: a real executor_runner log (30 executions, its success line 'Model executed successfully 30 time(s)')
RECORDED_LOG = DATA / "toy_cnn_fp16_xnnpack_simd-on_t1.log"


def _five(tmp_path: Path) -> RunRequest:
    return RunRequest(pte=TOY_PTE, runs=4, warmup=1, out_dir=tmp_path / "out", inputs=(TOY_INPUT,), timeout_s=120.0)


def test_host_runner_refuses_a_runner_that_ignores_num_executions(tmp_path: Path) -> None:
    """Defect 5: asked for 5 executions, a runner that replays all 30 recorded runs is an error, not 30 samples."""
    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE, fault="ignore_count"))
    with pytest.raises(RunnerError, match=r"asked for 5 executions \(--num_executions=5\), the trace holds 30") as info:
        runner.run(_five(tmp_path))
    assert "honours --num_executions" in str(info.value) and ".log" in str(info.value)
    # The honest stand-in, asked the same, gives exactly 5.
    assert len(HostRunner(make_standin(tmp_path / "ok", trace=TOY_TRACE)).run(_five(tmp_path)).e2e_ms) == 5


def test_android_runner_refuses_a_runner_that_ignores_num_executions(make_emulated_phone: MakePhone,
                                                                     tmp_path: Path) -> None:
    """Defect 5 on Android: the same check (the Android runner reads its result with the host's code)."""
    phone = make_emulated_phone()
    runner = AndroidRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE, fault="ignore_count"),
                           serial=phone.serial, timeout_s=60.0)
    with pytest.raises(RunnerError, match=r"asked for 5 executions \(--num_executions=5\), the trace holds 30") as info:
        runner.run(_five(tmp_path))
    assert f"on Android device {phone.serial}" in str(info.value)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda log: log.replace("Model executed successfully 30 time(s)", "Model executed"),
         r"its log has no 'Model executed successfully 30 time\(s\)' line"),
        (lambda log: log.replace("Model executed successfully 30 time(s)", "Model executed successfully 29 time(s)"),
         r"asked for 30 executions \(--num_executions=30\), its log says 'Model executed successfully 29 time\(s\)'"),
    ],
    ids=["no-success-line", "other-count"],
)
def test_a_runner_log_without_its_success_line_is_an_error(tmp_path: Path, edit: Callable[[str], str],
                                                           match: str) -> None:
    """Defect 5: a log in executor_runner's format must end with the success line for the executions asked."""
    request = RunRequest(pte=TOY_PTE, runs=29, warmup=1)
    log = RECORDED_LOG.read_text()
    check_what_ran("executor_runner x", request, 30, log, cmd=["x"], log_path=RECORDED_LOG, log_tail="")  # as recorded
    with pytest.raises(RunnerError, match=match):
        check_what_ran("executor_runner x", request, 30, edit(log), cmd=["x"], log_path=RECORDED_LOG, log_tail="")
    # A build with logging off prints nothing: then the trace's count is all there is to check.
    check_what_ran("executor_runner x", request, 30, "", cmd=["x"], log_path=RECORDED_LOG, log_tail="")
