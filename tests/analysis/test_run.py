"""Analysis on the real recorded traces, checked against numbers computed here from executorch's decoding.

The reference side never touches our Timeline: it walks the raw ``deserialize_from_etdump_flatcc``
events, takes E2E from ``Method::execute``, sums leaf events per run, and categorizes them with a
hand-written table of every operator type that occurs in the recordings.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from pytest_sme2.analysis.run import Analysis, analyze, analyze_e2e, merge
from pytest_sme2.errors import ConfigError
from pytest_sme2.evidence.trace import KIND_LEAF, Timeline, read_etdump

pytestmark = pytest.mark.fast

DATA = Path(__file__).parents[1] / "data"
TRACES = sorted(DATA.glob("*.etdump"))
TRACE_IDS = [p.name.removesuffix(".etdump") for p in TRACES]
N1000 = (Path(__file__).parents[2] / "benchmarks" / "data"
         / "mobilenet_v3_small_like_fp32_xnnpack_simd-on_t1_n1000.etdump")
CATS = ("Convolution", "GEMM", "Data Movement", "Elementwise", "Other")
NAMED = CATS[:4]
REL = 1e-9

# Every operator type in the recordings, categorized by hand (the spec's rules applied by a person).
HAND_CATEGORY = {
    "Add (ND)": "Elementwise",
    "Clamp (NC)": "Elementwise",
    "Divide (ND)": "Elementwise",
    "Multiply (ND)": "Elementwise",
    "HardSwish (NC)": "Elementwise",
    "Invalid Unary Op": "Elementwise",
    "GELU (NC)": "Elementwise",
    "native_call_add.out": "Elementwise",
    "native_call_relu.out": "Elementwise",
    "Convolution (NHWC, F32) DWConv": "Convolution",
    "Convolution (NHWC, F32) IGEMM": "Convolution",
    "Convolution (NHWC, F16) IGEMM": "Convolution",
    "Convolution (NHWC, QC8) DWConv": "Convolution",
    "Convolution (NHWC, QC8) IGEMM": "Convolution",
    "native_call_convolution.out": "Convolution",
    "Fully Connected (NC, F32) GEMM": "GEMM",
    "Fully Connected (NC, F16) GEMM": "GEMM",
    "Fully Connected (NC, QS8, QC8W) GEMM": "GEMM",
    "Batch Matrix Multiply (NC, F32) GEMM": "GEMM",
    "native_call_addmm.out": "GEMM",
    "Static Reshape (NC)": "Data Movement",
    "Transpose (ND, X32)": "Data Movement",
    "Transpose (ND, X16)": "Data Movement",
    "Transpose (ND, X8)": "Data Movement",
    "Convert (NC)": "Data Movement",
    "native_call__to_dim_order_copy.out": "Data Movement",
    "native_call_expand_copy.out": "Data Movement",
    "native_call_permute_copy.out": "Data Movement",
    "Mean (ND) Reduce2": "Other",
    "Mean (ND)": "Other",
    "Max Pooling (NHWC, F32)": "Other",
    "Max Pooling (NHWC, F16)": "Other",
    "Max Pooling (NHWC, S8)": "Other",
    "Softmax (NC, F32)": "Other",
    "native_call_native_layer_norm.out": "Other",
    "native_call__native_batch_norm_legit_no_training.out": "Other",
    "native_call_max_pool2d_with_indices.out": "Other",
    "native_call_mean.out": "Other",
}


@dataclass
class Reference:
    """What a trace says, computed here from executorch's raw events."""

    e2e: list[float]
    measured: list[float]
    category_per_run: dict[str, list[float]]
    op_calls: dict[str, int] = field(default_factory=dict)
    op_total: dict[str, float] = field(default_factory=dict)
    op_delegated: dict[str, bool] = field(default_factory=dict)
    portable_total: float = 0.0
    delegated_total: float = 0.0

    @property
    def n(self) -> int:
        return len(self.measured)

    @property
    def mean_e2e(self) -> float:
        return math.fsum(self.measured) / self.n

    def category_mean(self, cat: str) -> float:
        return math.fsum(self.category_per_run[cat]) / self.n


def reference(etdump: Any, warmup: int) -> Reference:
    runs = [
        b for b in etdump.run_data
        if any(e.profile_event is not None and e.profile_event.name == "Method::execute" for e in b.events)
    ]
    e2e, cats = [], {c: [] for c in CATS}
    ref = Reference(e2e=e2e, measured=[], category_per_run=cats)
    for index, block in enumerate(runs):
        sums = dict.fromkeys(NAMED, 0.0)
        run_e2e = 0.0
        for ev in block.events:
            pe = ev.profile_event
            if pe is None:
                continue
            ms = (pe.end_time - pe.start_time) / 1e6
            if pe.name == "Method::execute":
                run_e2e += ms
                continue
            if pe.name in ("DELEGATE_CALL", "OPERATOR_CALL"):
                continue
            label = pe.name or pe.delegate_debug_id_str
            op = re.sub(r" #\d+$", "", label)
            cat = HAND_CATEGORY[op]
            if cat != "Other":
                sums[cat] += ms
            if index >= warmup:
                ref.op_calls[op] = ref.op_calls.get(op, 0) + 1
                ref.op_total[op] = ref.op_total.get(op, 0.0) + ms
                delegated = bool(pe.delegate_debug_id_str) or pe.delegate_debug_id_int not in (None, -1)
                ref.op_delegated[op] = ref.op_delegated.get(op, True) and delegated
                if delegated:
                    ref.delegated_total += ms
                else:
                    ref.portable_total += ms
        e2e.append(run_e2e)
        if index >= warmup:
            ref.measured.append(run_e2e)
            for c in NAMED:
                cats[c].append(sums[c])
            cats["Other"].append(run_e2e - sum(sums.values()))
    return ref


def approx(x: Any) -> Any:
    return pytest.approx(x, rel=REL, abs=1e-12)


@pytest.fixture(scope="module")
def ours() -> Any:
    cache: dict[tuple[Path, int], Analysis] = {}

    def get(path: Path, warmup: int = 1) -> Analysis:
        if (path, warmup) not in cache:
            cache[path, warmup] = analyze(read_etdump(path), warmup=warmup)
        return cache[path, warmup]

    return get


# ---------------------------------------------------------------------- E2E and categories per trace


@pytest.mark.parametrize("path", TRACES, ids=TRACE_IDS)
def test_e2e_matches_reference(path: Path, reference_etdump: Any, ours: Any) -> None:
    ref = reference(reference_etdump(path), warmup=1)
    a = ours(path)
    assert list(a.e2e_per_run_ms) == approx(ref.e2e)
    assert list(a.measured_ms) == approx(ref.measured)
    assert a.e2e.cold == approx(ref.e2e[0])
    assert a.e2e.count == len(ref.measured) == 29
    assert a.e2e.mean == approx(ref.mean_e2e)
    assert a.e2e.median == approx(statistics.median(ref.measured))
    assert a.e2e.min == approx(min(ref.measured))
    assert a.e2e.max == approx(max(ref.measured))
    assert a.e2e.std == approx(statistics.stdev(ref.measured))


@pytest.mark.parametrize("path", TRACES, ids=TRACE_IDS)
def test_categories_match_reference(path: Path, reference_etdump: Any, ours: Any) -> None:
    ref = reference(reference_etdump(path), warmup=1)
    a = ours(path)
    assert set(a.category_totals_ms) == set(CATS)
    for cat in CATS:
        assert a.category_totals_ms[cat] == approx(ref.category_mean(cat)), cat
        assert list(a.category_per_run_ms[cat]) == approx(ref.category_per_run[cat]), cat
    # Other closes the sum: the five categories add up to the mean E2E.
    assert math.fsum(a.category_totals_ms.values()) == pytest.approx(a.e2e.mean, rel=1e-12)
    assert a.category_totals_ms["Other"] == approx(a.e2e.mean - sum(a.category_totals_ms[c] for c in NAMED))
    for cat in CATS:
        assert a.category_share[cat] == approx(ref.category_mean(cat) / ref.mean_e2e)


@pytest.mark.parametrize("path", TRACES, ids=TRACE_IDS)
def test_operator_details_match_reference(path: Path, reference_etdump: Any, ours: Any) -> None:
    ref = reference(reference_etdump(path), warmup=1)
    a = ours(path)
    details = {o.name: o for o in a.operator_details}
    assert set(details) == set(ref.op_calls)
    for name, op in details.items():
        calls, total = ref.op_calls[name], ref.op_total[name]
        assert op.category == HAND_CATEGORY[name]
        assert op.count == approx(calls / ref.n)
        assert op.total_ms == approx(total / ref.n)
        assert op.avg_ms == approx(total / calls)
        assert op.share == approx(total / ref.n / ref.mean_e2e)
        assert op.delegated is ref.op_delegated[name]
        assert op.backend == ("XNNPACK" if op.delegated else "portable")
    totals = [o.total_ms for o in a.operator_details]
    assert totals == sorted(totals, reverse=True)
    assert a.portable_ms == approx(ref.portable_total / ref.n)
    assert a.delegated_ms == approx(ref.delegated_total / ref.n)


@pytest.mark.parametrize("path", TRACES, ids=TRACE_IDS)
def test_bottlenecks_are_everything_above_five_percent(path: Path, reference_etdump: Any, ours: Any) -> None:
    ref = reference(reference_etdump(path), warmup=1)
    a = ours(path)
    expected = {("category", c) for c in CATS if ref.category_mean(c) / ref.mean_e2e > 0.05}
    for name, total in ref.op_total.items():
        if total / ref.n / ref.mean_e2e > 0.05:
            expected.add(("operator" if ref.op_delegated[name] else "portable", name))
    assert {(b.kind, b.name) for b in a.bottlenecks} == expected
    assert all(b.share > 0.05 for b in a.bottlenecks)


def test_hand_computed_operators_in_mobilenet(reference_etdump: Any, ours: Any) -> None:
    """The README's description of MobileNetV3: 42 Fully Connected and 18 portable copies per run."""
    a = ours(DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-on_t1.etdump")
    details = {o.name: o for o in a.operator_details}
    assert details["Fully Connected (NC, F32) GEMM"].count == 42
    copy = details["native_call__to_dim_order_copy.out"]
    assert copy.count == 18
    assert copy.backend == "portable"
    assert not copy.delegated
    assert a.portable_ms == approx(copy.total_ms)
    int8 = {o.name: o for o in ours(DATA / "mobilenet_v3_small_like_int8_xnnpack_simd-on_t1.etdump").operator_details}
    assert int8["Invalid Unary Op"].count == 19
    assert int8["Invalid Unary Op"].category == "Elementwise"


def test_portable_only_model_has_no_delegated_time(ours: Any) -> None:
    a = ours(DATA / "toy_cnn_fp32_portable_simd-on_t1.etdump")
    assert a.delegated_ms == 0
    assert a.portable_ms > 0.9 * a.e2e.mean
    assert a.dominant_category == "Convolution"
    assert ("portable", "native_call_convolution.out") in {(b.kind, b.name) for b in a.bottlenecks}


# --------------------------------------------------------------------------------------- warmup


@pytest.mark.parametrize("warmup", [0, 1, 5, 29])
def test_warmup(warmup: int, reference_etdump: Any) -> None:
    path = DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-off_t1.etdump"
    ref = reference(reference_etdump(path), warmup=warmup)
    a = analyze(read_etdump(path), warmup=warmup)
    assert a.warmup == warmup
    assert a.runs_total == 30
    assert a.runs_measured == 30 - warmup == ref.n
    assert list(a.e2e_per_run_ms) == approx(ref.e2e)  # every run is kept
    assert list(a.measured_ms) == approx(ref.e2e[warmup:])
    assert a.e2e.mean == approx(ref.mean_e2e)
    assert a.e2e.cold == (None if warmup == 0 else approx(ref.e2e[0]))
    for cat in CATS:
        assert a.category_totals_ms[cat] == approx(ref.category_mean(cat))
    d = a.to_dict()["runs"]
    assert d == {"total": 30, "warmup": warmup, "measured": 30 - warmup}


def test_warmup_zero_includes_the_cold_run_in_statistics(ours: Any) -> None:
    path = DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"
    cold_in, cold_out = ours(path, 0), ours(path, 1)
    assert cold_in.e2e.max == cold_in.e2e_per_run_ms[0] > cold_out.e2e.max  # run 0 is 3.5x slower
    assert cold_in.e2e.mean > cold_out.e2e.mean


@pytest.mark.parametrize("warmup", [30, 31, 100, -1])
def test_bad_warmup_is_a_config_error(warmup: int) -> None:
    path = DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"
    with pytest.raises(ConfigError) as info:
        analyze(read_etdump(path), warmup=warmup)
    if warmup >= 30:
        assert str(path) in str(info.value)
        assert "30 run(s)" in str(info.value)


def test_analyze_e2e_only() -> None:
    samples = (5.0, 2.0, 3.0, 4.0)
    a = analyze_e2e(samples, warmup=1, source="local")
    assert not a.per_operator
    assert a.e2e.cold == 5.0
    assert a.e2e.mean == 3.0
    assert a.category_totals_ms == {"Convolution": 0.0, "GEMM": 0.0, "Data Movement": 0.0, "Elementwise": 0.0,
                                    "Other": 3.0}
    assert a.category_per_run_ms["Other"] == (2.0, 3.0, 4.0)
    assert a.operator_details == ()
    with pytest.raises(ConfigError):
        analyze_e2e(samples, warmup=4, source="local")


# ------------------------------------------------------------------------------------ SME2 on/off


PAIRS = [
    ("mobilenet_v3_small_like_fp32_xnnpack_simd-on_t1", "mobilenet_v3_small_like_fp32_xnnpack_simd-off_t1"),
    ("tiny_transformer_fp32_xnnpack_simd-on_t1", "tiny_transformer_fp32_xnnpack_simd-off_t1"),
]


@pytest.mark.parametrize(("on", "off"), PAIRS, ids=["mobilenet", "tiny_transformer"])
def test_simd_off_slows_matrix_categories_not_data_movement(
    on: str, off: str, reference_etdump: Any, ours: Any
) -> None:
    ref_on = reference(reference_etdump(DATA / f"{on}.etdump"), warmup=1)
    ref_off = reference(reference_etdump(DATA / f"{off}.etdump"), warmup=1)
    a_on, a_off = ours(DATA / f"{on}.etdump"), ours(DATA / f"{off}.etdump")

    gemm = ref_off.category_mean("GEMM") / ref_on.category_mean("GEMM")
    moves = ref_off.category_mean("Data Movement") / ref_on.category_mean("Data Movement")
    assert gemm > 1.5, f"GEMM only {gemm:.2f}x slower without the SIMD kernels"
    assert a_off.category_totals_ms["GEMM"] / a_on.category_totals_ms["GEMM"] == approx(gemm)
    # Data Movement is not matrix math: it changes far less than GEMM does.
    assert 1 / 1.5 < moves < 1.5
    assert abs(math.log(moves)) < abs(math.log(gemm)) / 3
    if ref_on.category_mean("Convolution") > 0:
        conv = ref_off.category_mean("Convolution") / ref_on.category_mean("Convolution")
        assert conv > 1.5
        assert a_off.category_totals_ms["Convolution"] / a_on.category_totals_ms["Convolution"] == approx(conv)
    else:
        assert a_on.category_totals_ms["Convolution"] == a_off.category_totals_ms["Convolution"] == 0.0
    assert a_off.e2e.median > 1.5 * a_on.e2e.median


# ------------------------------------------------------------------------------- JSON round trip

SPEC_KEYS = {"schema_version", "runs", "e2e_ms", "category_totals_ms", "category_share", "operator_details",
             "bottlenecks", "portable_ms", "delegated_ms"}


@pytest.mark.parametrize("path", TRACES, ids=TRACE_IDS)
def test_to_dict_from_dict_round_trip(path: Path, ours: Any) -> None:
    a = ours(path)
    again = Analysis.from_dict(json.loads(json.dumps(a.to_dict())))
    assert again == a
    assert again.to_dict() == a.to_dict()


def test_summary_keys_as_the_spec(ours: Any) -> None:
    d = json.loads(json.dumps(ours(DATA / "tiny_transformer_fp32_xnnpack_simd-on_t1.etdump").to_dict()))
    assert set(d) >= SPEC_KEYS
    assert d["schema_version"] == 1
    assert set(d["runs"]) == {"total", "warmup", "measured"}
    assert {"cold", "median", "mean", "min", "max", "p90", "std", "per_run"} <= set(d["e2e_ms"])
    assert len(d["e2e_ms"]["per_run"]) == 30
    assert list(d["category_totals_ms"]) == list(CATS)
    assert set(d["category_share"]) == set(CATS)
    assert d["operator_details"]
    for op in d["operator_details"]:
        assert {"name", "category", "count", "avg_ms", "total_ms", "share", "delegated"} <= set(op)
        assert op["category"] in CATS
        assert isinstance(op["delegated"], bool)
    for b in d["bottlenecks"]:
        assert {"kind", "name", "total_ms", "share", "advice"} <= set(b)
    assert isinstance(d["portable_ms"], float)
    assert isinstance(d["delegated_ms"], float)


def test_from_dict_refuses_newer_schema(ours: Any) -> None:
    d = ours(DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump").to_dict()
    d["schema_version"] = 2
    with pytest.raises(ConfigError, match="upgrade"):
        Analysis.from_dict(d)


# -------------------------------------------------------------------------------------- merge


def _sub_timeline(timeline: Timeline, runs: range) -> Timeline:
    """The given runs of a timeline, renumbered from 0 (what a separate runner process would record)."""
    table = timeline.table
    part = table[table["run_index"].isin(list(runs))].copy()
    part["run_index"] -= runs.start
    return Timeline(timeline.source, part.reset_index(drop=True), timeline.etdump_version)


@pytest.mark.parametrize("path", [DATA / "mobilenet_v3_small_like_int8_xnnpack_simd-on_t1.etdump",
                                  DATA / "tiny_transformer_fp32_xnnpack_simd-off_t1.etdump"],
                         ids=["mobilenet_int8", "tiny_transformer_off"])
def test_merge_of_two_halves_equals_the_whole(path: Path) -> None:
    timeline = read_etdump(path)
    whole = analyze(timeline, warmup=1)
    first = analyze(_sub_timeline(timeline, range(0, 13)), warmup=1)
    second = analyze(_sub_timeline(timeline, range(13, 30)), warmup=0)
    assert first.runs_measured + second.runs_measured == whole.runs_measured == 29
    merged = merge([first, second])
    assert merged.measured_ms == whole.measured_ms
    # The blocks are remembered (the gate resamples them), and survive the JSON round trip.
    assert merged.block_sizes == (12, 17) and whole.block_sizes == ()
    assert Analysis.from_dict(json.loads(json.dumps(merged.to_dict()))).block_sizes == (12, 17)
    assert merge([merged, second]).block_sizes == (12, 17, 17)
    assert merged.e2e.cold == whole.e2e.cold
    for stat in ("count", "median", "mean", "min", "max", "p90", "std"):
        assert getattr(merged.e2e, stat) == approx(getattr(whole.e2e, stat)), stat
    for cat in CATS:
        assert merged.category_totals_ms[cat] == approx(whole.category_totals_ms[cat]), cat
        assert list(merged.category_per_run_ms[cat]) == approx(list(whole.category_per_run_ms[cat])), cat
    ops_whole = {o.name: o for o in whole.operator_details}
    ops_merged = {o.name: o for o in merged.operator_details}
    assert set(ops_merged) == set(ops_whole)
    for name, op in ops_whole.items():
        m = ops_merged[name]
        for attr in ("count", "avg_ms", "total_ms", "share"):
            assert getattr(m, attr) == approx(getattr(op, attr)), (name, attr)
        assert (m.category, m.delegated, m.backend) == (op.category, op.delegated, op.backend)
    assert merged.portable_ms == approx(whole.portable_ms)
    assert merged.delegated_ms == approx(whole.delegated_ms)
    assert {(b.kind, b.name) for b in merged.bottlenecks} == {(b.kind, b.name) for b in whole.bottlenecks}


def test_merge_of_one_and_of_none(ours: Any) -> None:
    a = ours(DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump")
    assert merge([a]) is a
    with pytest.raises(ValueError):
        merge([])


# ------------------------------------------------------------------------------ the 1000-run trace


def test_thousand_run_trace() -> None:
    # CPU time, not wall time: waiting for a CPU beside another xdist worker is not the parser's (~0.3-0.4 s here; a
    # quadratic parser would take minutes). Its speed is measured in benchmarks/run.py (analysis_s).
    t0 = time.process_time()
    timeline = read_etdump(N1000)
    a = analyze(timeline)
    elapsed = time.process_time() - t0
    assert elapsed < 5, f"parsing + analyzing 1000 runs took {elapsed:.1f} s of CPU"
    assert timeline.num_runs == a.runs_total == 1000
    assert a.runs_measured == 999
    assert len(timeline.table) == 2 + 1000 * 184
    # README: run 0 = 3.65 ms, steady median 1.86 ms.
    assert abs(a.e2e.cold - 3.65) <= 0.005
    assert abs(a.e2e.median - 1.86) <= 0.005
    # The runner's own log times each execute() around Method::execute: a few us more, every run.
    log = N1000.with_suffix(".log").read_text(encoding="utf-8")
    iterations = np.array([float(x) for x in re.findall(r"Iteration \d+ of 1000: ([\d.]+) ms", log)])
    assert iterations.size == 1000
    gap = iterations - np.asarray(a.e2e_per_run_ms)
    assert gap.min() >= 0
    assert gap.max() < 0.05
    assert math.fsum(a.category_totals_ms.values()) == pytest.approx(a.e2e.mean, rel=1e-12)
    per_run = timeline.operators().groupby("run_index").size()
    assert (per_run == 164).all()
    assert len(per_run) == 1000


def test_category_per_run_sums_to_e2e_per_run(ours: Any) -> None:
    a = ours(DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-on_t2.etdump")
    frame = pd.DataFrame({c: a.category_per_run_ms[c] for c in CATS})
    assert frame.sum(axis=1).to_numpy() == approx(list(a.measured_ms))
    assert (frame[list(NAMED)] >= 0).all().all()
    # Per run Other is what the operators do not cover: runtime overhead, so it is positive here.
    assert (frame["Other"] > 0).all()


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
    """Each leaf event also recorded as an inner event of itself (a kernel that emits its own event).

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
    """Partly overlapping leaf events count the union of their spans, computed here independently.

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
