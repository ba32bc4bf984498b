"""Reports on the real recorded traces: markdown, charts, Chrome trace, results JSON, HTML fragments.

The simd-on/simd-off pairs in tests/data (the x86 stand-in for SME2 on/off: same runtime, XNNPACK
with and without its AVX kernels) drive every comparison. Numbers asserted in a report are
recomputed here straight from the trace table (``read_etdump``), not from ``analyze``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_sme2.analysis.onoff import OnOffComparison
from pytest_sme2.analysis.recommendations import (
    NO_SME2_KERNEL,
    PORTABLE_OPERATOR,
    REGRESSION,
    Recommendation,
    recommend,
)
from pytest_sme2.analysis.run import analyze, analyze_e2e, merge
from pytest_sme2.errors import ConfigError
from pytest_sme2.evidence.categories import CATEGORIES
from pytest_sme2.evidence.kernels import (
    isa_suffix,
    kernel_log_from_dict,
    kernel_rows,
    parse_xnnpack_log,
    read_xnnpack_log,
    side_by_side,
)
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.gate.checks import speedup_check
from pytest_sme2.gate.decide import gate
from pytest_sme2.gate.verdict import GateConfig, Status
from pytest_sme2.measure.profile import Profile
from pytest_sme2.report import charts
from pytest_sme2.report.cells import cell_text
from pytest_sme2.report.chrome_trace import etdump_to_chrome_trace, etdumps_to_chrome_trace
from pytest_sme2.report.comparison import compare_on_off
from pytest_sme2.report.html import COLUMNS, header_cells, html_section, row_cells, summary_block
from pytest_sme2.report.kernel_view import side_by_side_table
from pytest_sme2.report.markdown import render_combined, render_markdown, render_table
from pytest_sme2.report.tables import category_table, device_summary, identity_table, recommendations
from pytest_sme2.results import (
    SessionResults,
    TestResult,
    append_step_summary,
    delta_text,
    github_step_summary,
    load_results,
    write_results,
)
from pytest_sme2.runners.base import RunResult
from pytest_sme2.store.baseline import Baseline

pytestmark = pytest.mark.fast

DATA = Path(__file__).parents[1] / "data"
TT = "tiny_transformer_fp32_xnnpack"
MN = "mobilenet_v3_small_like_fp32_xnnpack"
SVG_NS = "{http://www.w3.org/2000/svg}"


# ------------------------------------------------------------------------------------ builders


def recorded_profile(stem: str, variant: str | None) -> Profile:
    """A Profile of one recorded trace: its analysis plus the facts its manifest records."""
    man = json.loads((DATA / f"{stem}.json").read_text())
    analysis = analyze(read_etdump(DATA / f"{stem}.etdump"), kernel_log=read_xnnpack_log(DATA / f"{stem}.xnnlog"))
    identity = {"device_kind": "host", "arch": "x86_64", "cpu_model": man["cpu_model"],
                "cores": man["logical_cpus"], "sme2": False, "dtype": man["dtype"], "backend": man["backend"],
                "threads": man["threads"]}
    return Profile(
        model={"name": man["model"], "dtype": man["dtype"], "backend": man["backend"],
               "pte_path": man["files"]["pte"], "executorch_version": man["executorch_version"]},
        variant=variant, runner="host", build=man["runner"], threads=man["threads"], identity=identity,
        analysis=analysis,
        device={"kind": "host", "arch": "x86_64", "cpu_name": man["cpu_model"], "logical_cpus": man["logical_cpus"],
                "sme2": False, "os_version": man["os"]},
    )


def _replayed(profile: Profile, blocks: int = 5) -> Profile:
    """``profile`` as the replaying stand-in runner measures it: the recorded runs once per block."""
    return replace(profile, analysis=merge([profile.analysis] * blocks, source=profile.analysis.source))


def on_off_result(model: str, **kwargs: Any) -> TestResult:
    off = recorded_profile(f"{model}_simd-off_t1", "sme2_off")
    on = recorded_profile(f"{model}_simd-on_t1", "sme2_on")
    # The gate judges the speedup on blocks: each recorded trace replayed in 5, as the stand-in runner does;
    # the reports show the traces as recorded.
    config = GateConfig(min_speedup=kwargs.get("min_speedup"))
    speedup = speedup_check(_replayed(off).samples(), _replayed(on).samples(), config)
    return TestResult(f"tests/test_perf.py::test_sme2[{model}]", outcome="passed", profile=on, profile_off=off,
                      comparison=compare_on_off(off.analysis, on.analysis, speedup=speedup, **kwargs))


def regression_result() -> TestResult:
    """A baseline recorded with simd-on, a candidate measured with simd-off: a real 2.3x slowdown.

    Each arm is its recorded trace replayed in 5 blocks (one process each, as the stand-in runner does):
    the gate judges blocks, and one process per arm is too few blocks for any verdict.
    """
    base = _replayed(recorded_profile(f"{MN}_simd-on_t1", None))
    cur = _replayed(recorded_profile(f"{MN}_simd-off_t1", None))
    a = base.analysis
    built = Baseline(test_id="tests/test_perf.py::test_latency[mobilenet]", identity=base.identity,
                     samples_ms=a.measured_ms, block_sizes=a.block_sizes,
                     category_totals_ms=a.category_totals_ms, category_per_run_ms=a.category_per_run_ms,
                     category_block_sizes=a.block_sizes, per_operator=True,
                     created="2026-11-20T10:00:00+00:00", tool_version="0.1.0")
    # As the plugin sees it: read back from its file (baseline files keep 6 decimals).
    baseline = Baseline.from_dict(json.loads(json.dumps(built.to_dict())))
    verdict = gate(baseline.samples(), cur.samples(), GateConfig())
    return TestResult(baseline.test_id, outcome="failed", profile=cur, baseline=baseline,
                      baseline_path=".sme2_baselines/test_latency.json", verdict=verdict)


@pytest.fixture(scope="module")
def tt() -> TestResult:
    return on_off_result(TT)


@pytest.fixture(scope="module")
def mn() -> TestResult:
    return on_off_result(MN, min_speedup=2.0)


@pytest.fixture(scope="module")
def regression() -> TestResult:
    return regression_result()


@pytest.fixture(scope="module")
def session(tt: TestResult, mn: TestResult, regression: TestResult) -> SessionResults:
    # The config as the plugin records it, every option of the session (copied from a real --sme2-json file,
    # runs/warmup/blocks/paths changed): the report must pick out what a reader needs.
    config = {"device": "host", "runner": "/opt/et/on/executor_runner", "runner_off": "/opt/et/off/executor_runner",
              "libcxx": None, "serial": None, "runs": 29, "warmup": 1, "blocks": 5, "threads": 1, "timeout": 600.0,
              "baseline_dir": "/project/.sme2_baselines", "update_baseline": False, "margin": 5.0, "strict": False,
              "no_confirm": False, "json": "r.json", "markdown": "r.md", "cache_dir": "/project/.sme2_cache",
              "out_dir": None, "models": [], "big_cores": None, "cooldown": 0.0, "fixed_performance": False}
    return SessionResults(tests=(tt, mn, regression), created="2026-11-22T05:33:11+00:00",
                          environment={"executorch_version": "1.4.1", "host": "recorder",
                                       "config_file": "pyproject.toml"},
                          config=config)


# ------------------------------------------------------------------------ independent numbers


def trace_table(stem: str) -> Any:
    return read_etdump(DATA / f"{stem}.etdump").table


def e2e_by_hand(stem: str) -> np.ndarray:
    """Per-run E2E: the Method::execute rows of each run, summed (run 0 first)."""
    t = trace_table(stem)
    rows = t[t["event_name"] == "Method::execute"]
    return rows.groupby("run_index")["duration_ms"].sum().sort_index().to_numpy()


def per_run_total(stem: str, name_pattern: str) -> float:
    """Mean per measured run (runs 1..N-1) of the durations of events whose name matches."""
    t = trace_table(stem)
    rows = t[(t["run_index"] >= 1) & t["event_name"].str.contains(name_pattern, regex=True)]
    return float(rows["duration_ms"].sum()) / (t["run_index"].max())


def section(md: str, test_id: str, heading: str) -> str:
    """The text of one ``### heading`` inside the section of ``test_id``."""
    start = md.index(f"`{test_id}`\n")
    part = md[start:]
    nxt = part.find("\n## ", 1)
    part = part if nxt < 0 else part[:nxt]
    h = part.index(f"### {heading}")
    rest = part[h:]
    end = rest.find("\n### ", 1)
    return rest if end < 0 else rest[:end]


def row(text: str, first: str) -> list[str]:
    """Cells of the markdown table row whose first cell is ``first``."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n{text}")


def num(cell: str) -> float:
    return float(re.sub(r"[^0-9.+\-]", "", cell.split("(", maxsplit=1)[0]))


# ------------------------------------------------------------------------------------- markdown


SEED_SECTIONS = ("Metadata", "Latency Comparison", "Operator Category Breakdown", "Bottlenecks (> 5% of E2E)",
                 "Acceleration Analysis", "Portable vs Delegated", "Top Operators", "Kernel Insights",
                 "Recommendations")


def test_markdown_has_every_seed_section_with_metadata(session: SessionResults, tt: TestResult) -> None:
    md = render_markdown(session)
    for heading in SEED_SECTIONS:
        assert section(md, tt.test_id, heading)
    meta = section(md, tt.test_id, "Metadata")
    assert row(meta, "Model")[1] == "tiny_transformer · fp32 · xnnpack"
    assert row(meta, "ExecuTorch")[1] == "1.4.1"
    assert row(meta, "Date (UTC)")[1] == "2026-11-22T05:33:11+00:00"
    assert "simd-off" in row(meta, "Runner (SME2 off)")[1] and "simd-on" in row(meta, "Runner (SME2 on)")[1]
    assert "AMD EPYC" in row(meta, "Device")[1] and "SME2: no" in row(meta, "Device")[1]
    assert f"{TT}_simd-on_t1.etdump" in row(meta, "Analyzed")[1]
    assert "runs=29" in row(meta, "Config")[1] and row(meta, "Config File")[1] == "`pyproject.toml`"


def test_markdown_config_row_shows_the_options_a_reader_needs(session: SessionResults, tt: TestResult) -> None:
    config = row(section(render_markdown(session), tt.test_id, "Metadata"), "Config")[1]
    assert config == ("device=host · runs=29 × blocks=5 · warmup=1 · threads=1 · margin=5% · strict=no · "
                      "update-baseline=no")
    # Runner paths, output files and internal settings stay in the JSON.
    assert SessionResults.from_dict(session.to_dict()).config["runner"] == "/opt/et/on/executor_runner"


def test_markdown_analyzed_names_the_model_program_and_traces(session: SessionResults, tt: TestResult) -> None:
    analyzed = row(section(render_markdown(session), tt.test_id, "Metadata"), "Analyzed")[1]
    lines = analyzed.split("<br>")
    assert lines[0] == "tiny_transformer fp32 xnnpack, `tiny_transformer_fp32_xnnpack.pte`"
    for i, arm in ((1, "off"), (2, "on")):
        stem = DATA / f"{TT}_simd-{arm}_t1"
        assert lines[i] == f"SME2 {arm}: trace `{stem}.etdump`, XNNPACK log `{stem}.xnnlog`"


def test_markdown_analyzed_names_every_block_of_a_pooled_measurement() -> None:
    # Two blocks pooled as the plugin pools them: the analysis' own source is then only the .pte's name.
    stems = [f"{MN}_simd-on_t1", f"{MN}_simd-on_t2"]
    blocks = [analyze(read_etdump(DATA / f"{stem}.etdump")) for stem in stems]
    base = recorded_profile(stems[0], None)
    pte = str(base.model["pte_path"])
    runs = tuple(RunResult("host", b.e2e_per_run_ms, b.warmup, 1, "simd-on", trace_path=DATA / f"{stem}.etdump")
                 for b, stem in zip(blocks, stems, strict=True))
    profile = replace(base, analysis=merge(blocks, source=Path(pte).name), runs=runs)
    md = render_markdown(SessionResults((TestResult("t::pooled", profile=profile),)))
    meta = section(md, "t::pooled", "Metadata")
    assert row(meta, "Analyzed")[1] == (f"mobilenet_v3_small_like fp32 xnnpack, `{pte}`<br>"
                                        f"trace `{DATA / stems[0]}.etdump` and 1 more block(s)")
    assert row(meta, "Runs")[1].startswith(f"{sum(b.runs_measured for b in blocks)} measured in 2 block(s)")


@pytest.mark.parametrize("model", [TT, MN])
def test_markdown_latency_table_equals_method_execute_by_hand(session: SessionResults, model: str) -> None:
    test_id = f"tests/test_perf.py::test_sme2[{model}]"
    lat = section(render_markdown(session), test_id, "Latency Comparison")
    off, on = e2e_by_hand(f"{model}_simd-off_t1"), e2e_by_hand(f"{model}_simd-on_t1")
    for label, fn in (("Median", np.median), ("Mean", np.mean), ("Min", np.min), ("Max", np.max),
                      ("P90", lambda x: np.percentile(x, 90)), ("Std dev", lambda x: np.std(x, ddof=1))):
        cells = row(lat, label)
        assert num(cells[1]) == pytest.approx(fn(off[1:]), abs=5e-4), label
        assert num(cells[2]) == pytest.approx(fn(on[1:]), abs=5e-4), label
    cold = row(lat, "Cold (run 0)")
    assert (num(cold[1]), num(cold[2])) == (pytest.approx(off[0], abs=5e-4), pytest.approx(on[0], abs=5e-4))
    assert row(lat, "Runs measured")[1:3] == [str(off.size - 1), str(on.size - 1)]
    speedup = float(np.median(off[1:]) / np.median(on[1:]))
    assert f"**Speedup: {speedup:.2f}×**" in lat


def test_markdown_categories_equal_sums_by_hand(session: SessionResults, tt: TestResult) -> None:
    cats = section(render_markdown(session), tt.test_id, "Operator Category Breakdown")
    gemm = "^(?:Fully Connected|Batch Matrix Multiply) "
    off_gemm = per_run_total(f"{TT}_simd-off_t1", gemm)
    on_gemm = per_run_total(f"{TT}_simd-on_t1", gemm)
    off_mean, on_mean = e2e_by_hand(f"{TT}_simd-off_t1")[1:].mean(), e2e_by_hand(f"{TT}_simd-on_t1")[1:].mean()
    cells = row(cats, "GEMM")
    assert num(cells[1]) == pytest.approx(off_gemm, abs=5e-4)
    assert num(cells[3]) == pytest.approx(on_gemm, abs=5e-4)
    assert num(cells[2]) == pytest.approx(off_gemm / off_mean * 100, abs=0.05)
    assert num(cells[4]) == pytest.approx(on_gemm / on_mean * 100, abs=0.05)
    assert num(cells[5]) == pytest.approx((on_gemm / on_mean - off_gemm / off_mean) * 100, abs=0.05)
    total = row(cats, "**E2E (mean)**")
    assert (num(total[1]), num(total[3])) == (pytest.approx(off_mean, abs=5e-4), pytest.approx(on_mean, abs=5e-4))
    # The five rows add up to E2E: Other closes the sum.
    shown = [num(row(cats, c)[3]) for c in CATEGORIES]
    assert sum(shown) == pytest.approx(on_mean, abs=3e-3)
    assert "**Bottleneck shift:** GEMM stays the largest category" in cats


def test_markdown_portable_operator_drives_a_recommendation(session: SessionResults, tt: TestResult) -> None:
    md = render_markdown(session)
    on_mean = e2e_by_hand(f"{TT}_simd-on_t1")[1:].mean()
    norm = per_run_total(f"{TT}_simd-on_t1", r"^native_call_native_layer_norm\.out$")
    share = f"{norm / on_mean * 100:.1f}%"
    assert share == "8.2%"  # the recorded trace: five portable layer norms, 8.2 % of E2E
    portable = section(md, tt.test_id, "Portable vs Delegated")
    assert num(row(portable, "`native_call_native_layer_norm.out`")[3]) == pytest.approx(norm, abs=5e-4)
    recs = section(md, tt.test_id, "Recommendations")
    line = next(x for x in recs.splitlines() if "native_call_native_layer_norm.out" in x)
    assert f"portable kernels at {share} of E2E" in line and "Delegate it" in line
    bottlenecks = section(md, tt.test_id, "Bottlenecks (> 5% of E2E)")
    assert row(bottlenecks, "portable")[3] == share


def test_markdown_acceleration_lists_real_operator_speedups(session: SessionResults, tt: TestResult) -> None:
    acc = section(render_markdown(session), tt.test_id, "Acceleration Analysis")
    fc = "^Fully Connected "
    off, on = per_run_total(f"{TT}_simd-off_t1", fc), per_run_total(f"{TT}_simd-on_t1", fc)
    cells = row(acc, "`Fully Connected (NC, F32) GEMM`")
    assert num(cells[2]) == pytest.approx(off, abs=5e-4) and num(cells[3]) == pytest.approx(on, abs=5e-4)
    assert cells[4] == f"{off / on:.2f}×"
    # The portable layer norm did not speed up (the SIMD switch only touches XNNPACK).
    slow = acc.split("**Not accelerated**")[1]
    assert "`native_call_native_layer_norm.out`" in slow and "portable" in slow


def test_markdown_kernel_insights_side_by_side_and_sme2_callout(session: SessionResults, tt: TestResult) -> None:
    kern = section(render_markdown(session), tt.test_id, "Kernel Insights")
    on_log = (DATA / f"{TT}_simd-on_t1.xnnlog").read_text()
    off_log = (DATA / f"{TT}_simd-off_t1.xnnlog").read_text()
    on_gemm = set(re.findall(r"Using gemm microkernel '([^']+)'", on_log))
    off_gemm = set(re.findall(r"Using gemm microkernel '([^']+)'", off_log))
    cells = row(kern, "gemm")
    for name in sorted(on_gemm - off_gemm):
        assert f"`{name}`" in cells[2]
    for name in sorted(off_gemm - on_gemm):
        assert f"`{name}`" in cells[1]
    assert "SME2 on with no SME2 kernel" in kern  # x86 logs name no __neonsme2 kernel
    assert "| transposec | `xnn_x32_transposec_ukernel__2x4_scalar_int` | scalar | no |" in kern


def test_markdown_single_profile_and_verdict_only() -> None:
    single = TestResult("t::single", profile=recorded_profile("mobilenet_v3_small_like_int8_xnnpack_simd-on_t1", None))
    md = render_markdown(SessionResults((single,), created="2026-11-22T00:00:00+00:00"))
    assert "### Latency\n" in md and "### Acceleration Analysis" not in md and "### Regression Verdict" not in md
    e2e = e2e_by_hand("mobilenet_v3_small_like_int8_xnnpack_simd-on_t1")
    assert num(row(section(md, "t::single", "Latency"), "Median")[1]) == pytest.approx(np.median(e2e[1:]), abs=5e-4)
    assert "| Convolution |" in section(md, "t::single", "Operator Category Breakdown")
    assert "| gemm |" in section(md, "t::single", "Kernel Insights") or "| igemm |" in md

    reg = regression_result()
    verdict_only = TestResult(reg.test_id, verdict=reg.verdict, model={"name": "mobilenet_v3_small_like"})
    md = render_markdown(SessionResults((verdict_only,)))
    assert "### Regression Verdict" in md and "### Latency" not in md and "### Recommendations" in md
    assert "E2E latency regressed" in section(md, reg.test_id, "Recommendations")


def test_e2e_only_results_render_without_categories() -> None:
    # What the local runtime gives: E2E per run and nothing else (here the recorded Method::execute times).
    off_e, on_e = e2e_by_hand(f"{TT}_simd-off_t1"), e2e_by_hand(f"{TT}_simd-on_t1")
    a_off = analyze_e2e(tuple(off_e.tolist()), warmup=1, source="local runtime (off)")
    a_on = analyze_e2e(tuple(on_e.tolist()), warmup=1, source="local runtime (on)")
    p_off = replace(recorded_profile(f"{TT}_simd-off_t1", "sme2_off"), analysis=a_off)
    p_on = replace(recorded_profile(f"{TT}_simd-on_t1", "sme2_on"), analysis=a_on)
    test = TestResult("t::e2e_only", profile=p_on, profile_off=p_off, comparison=compare_on_off(a_off, a_on))
    md = render_markdown(SessionResults((test,)))
    assert "No per-operator trace" in section(md, "t::e2e_only", "Operator Category Breakdown")
    assert "### Acceleration Analysis" not in md and "### Top Operators" not in md
    speedup = float(np.median(off_e[1:]) / np.median(on_e[1:]))
    assert f"**Speedup: {speedup:.2f}×**" in md
    assert "Only end-to-end latency was recorded" in section(md, "t::e2e_only", "Recommendations")
    frag = html_section(test)
    kinds = [(s.get("class") or "").split()[-1] for s in svgs_in(frag)]
    assert kinds == ["sme2-chart-latency", "sme2-chart-speedup"]
    assert github_step_summary(SessionResults(())) == "### pytest-sme2: no performance test ran\n"


def test_markdown_regression_verdict_numbers(session: SessionResults, regression: TestResult) -> None:
    md = render_markdown(session)
    verdict = section(md, regression.test_id, "Regression Verdict")
    base = e2e_by_hand(f"{MN}_simd-on_t1")[1:]
    cur = e2e_by_hand(f"{MN}_simd-off_t1")[1:]
    cells = row(verdict, "`e2e`")
    assert cells[1] == "regression"
    assert num(cells[2]) == pytest.approx(np.median(base), abs=5e-4)
    assert num(cells[3]) == pytest.approx(np.median(cur), abs=5e-4)
    assert cells[4].startswith(f"{(np.median(cur) / np.median(base) - 1) * 100:+.1f}%")
    assert "❌ **REGRESSION**" in verdict
    summary = md.split("## Summary")[1].split("\n## ")[0]
    assert summary.index(regression.test_id) < summary.index(f"test_sme2[{TT}]")  # problems first


def test_bottleneck_shift_sentence_when_the_dominant_category_changes() -> None:
    # Hand-made inputs (not a measurement): GEMM 80 % -> 20 %, Data Movement 10 % -> 50 %.
    on = recorded_profile(f"{TT}_simd-on_t1", None).analysis
    per_run_off = {"Convolution": (0.0,) * 4, "GEMM": (8.0,) * 4, "Data Movement": (1.0,) * 4,
                   "Elementwise": (0.5,) * 4, "Other": (0.5,) * 4}
    per_run_on = {"Convolution": (0.0,) * 4, "GEMM": (1.0,) * 4, "Data Movement": (2.5,) * 4,
                  "Elementwise": (0.5,) * 4, "Other": (1.0,) * 4}
    stats = on.e2e
    a_off = replace(on, e2e_per_run_ms=(10.0,) * 5, warmup=1, runs_total=5,
                    e2e=replace(stats, mean=10.0, median=10.0, cold=10.0, count=4),
                    category_totals_ms={k: v[0] for k, v in per_run_off.items()}, category_per_run_ms=per_run_off)
    a_on = replace(on, e2e_per_run_ms=(5.0,) * 5, warmup=1, runs_total=5,
                   e2e=replace(stats, mean=5.0, median=5.0, cold=5.0, count=4),
                   category_totals_ms={k: v[0] for k, v in per_run_on.items()}, category_per_run_ms=per_run_on)
    cmp = compare_on_off(a_off, a_on)
    assert cmp.dominant_off == "GEMM" and cmp.dominant_on == "Data Movement"
    assert cmp.shift[0] == ("Data Movement became the largest category with SME2 on (10.0% → 50.0% of E2E), "
                            "overtaking GEMM (80.0% → 20.0%).")
    assert cmp.category("Data Movement").share_change_pp == pytest.approx(40.0)  # type: ignore[union-attr]


def test_render_combined_across_devices(session: SessionResults) -> None:
    t2 = TestResult(f"tests/test_perf.py::test_sme2[{MN}]",
                    profile=recorded_profile(f"{MN}_simd-on_t2", "sme2_on"))
    other = SessionResults((t2,), created="2026-11-23T00:00:00+00:00")
    md = render_combined([session, other])
    assert "## Devices" in md and "## Results across devices" in md and "## Where the time goes on each device" in md
    line = next(x for x in md.splitlines() if x.startswith(f"| `tests/test_perf.py::test_sme2[{MN}]`"))
    med_t1 = np.median(e2e_by_hand(f"{MN}_simd-on_t1")[1:])
    med_t2 = np.median(e2e_by_hand(f"{MN}_simd-on_t2")[1:])
    assert f"{med_t1:.3f} ms" in line and f"{med_t2:.3f} ms" in line
    assert "AMD EPYC #2" in md  # same CPU twice: the second session's column is told apart
    headings = re.findall(r"^(#+) Recommendations$", md, flags=re.M)
    assert headings == ["####"] * 4  # per-test sections sit one level under their device


# --------------------------------------------------------------------------------------- charts


def svg_root(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def by_class(root: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [e for e in root.iter(f"{SVG_NS}{tag}") if cls in (e.get("class") or "").split()]


def test_stacked_bars_one_rect_per_category_sized_by_value(tt: TestResult) -> None:
    off, on = tt.profile_off.analysis, tt.profile.analysis  # type: ignore[union-attr]
    svg = charts.category_stacked_bars([("SME2 off", off.category_totals_ms), ("SME2 on", on.category_totals_ms)])
    segs = by_class(svg_root(svg), "rect", "sme2-seg")
    assert len(segs) == 2 * len(CATEGORIES)
    assert [s.get("data-category") for s in segs] == list(CATEGORIES) * 2
    gemm_off = per_run_total(f"{TT}_simd-off_t1", "^(?:Fully Connected|Batch Matrix Multiply) ")
    assert float(segs[1].get("data-value", "")) == pytest.approx(gemm_off, abs=1e-6)
    scales = [float(s.get("width", "")) / float(s.get("data-value", "")) for s in segs
              if float(s.get("data-value", "")) > 0.05]
    assert max(scales) - min(scales) < 0.05 * max(scales) + 1  # one px-per-ms scale (coordinates are rounded)
    width_off = sum(float(s.get("width", "")) for s in segs[:5])
    width_on = sum(float(s.get("width", "")) for s in segs[5:])
    assert width_off / width_on == pytest.approx(off.e2e.mean / on.e2e.mean, rel=0.02)
    for s in segs:
        assert s.get("fill") == charts.CATEGORY_COLORS[s.get("data-category", "")]


def test_same_colour_for_a_category_in_every_chart(tt: TestResult) -> None:
    on = tt.profile.analysis  # type: ignore[union-attr]
    fills: dict[str, set[str]] = {}
    stacked = svg_root(charts.category_stacked_bars([("on", on.category_totals_ms)]))
    ops = svg_root(charts.operator_bars(on.operator_details, 10))
    for el in by_class(stacked, "rect", "sme2-seg") + by_class(ops, "rect", "sme2-op"):
        fills.setdefault(el.get("data-category", ""), set()).add(el.get("fill", ""))
    assert {"GEMM", "Data Movement", "Elementwise", "Other"} <= set(fills)
    assert all(len(v) == 1 for v in fills.values()), fills
    assert all(v == {charts.CATEGORY_COLORS[k]} for k, v in fills.items())
    assert len(set(charts.CATEGORY_COLORS.values())) == len(CATEGORIES)


def test_latency_chart_points_cold_run_and_baseline(tt: TestResult) -> None:
    a = tt.profile.analysis  # type: ignore[union-attr]
    e2e = e2e_by_hand(f"{TT}_simd-on_t1")
    svg = charts.latency_samples_chart(a.measured_ms, cold_ms=a.e2e.cold, baseline_ms=4.8, title="t")
    root = svg_root(svg)
    pts = by_class(root, "circle", "sme2-pt")
    assert len(pts) == e2e.size - 1
    values = [float(p.get("data-value", "")) for p in pts]
    assert values == pytest.approx(e2e[1:].tolist(), abs=1e-6)
    ys = [float(p.get("cy", "")) for p in pts]
    order = np.argsort(values)
    assert all(ys[order[i]] >= ys[order[i + 1]] for i in range(len(ys) - 1))  # larger value, higher on screen
    cold = by_class(root, "path", "sme2-cold")
    assert len(cold) == 1 and float(cold[0].get("data-value", "")) == pytest.approx(e2e[0], abs=1e-6)
    assert len(by_class(root, "line", "sme2-baseline")) == 1
    # A cold run far above the rest (toy CNN: 0.278 vs 0.079 ms) is marked off scale, not squashing the plot.
    toy = e2e_by_hand("toy_cnn_fp32_xnnpack_simd-on_t1")
    svg = charts.latency_samples_chart(toy[1:].tolist(), cold_ms=float(toy[0]))
    assert len(by_class(svg_root(svg), "path", "sme2-offscale")) == 1


def test_charts_escape_text_and_are_deterministic(tt: TestResult) -> None:
    label = 'a<b & "c">'
    svg = charts.category_stacked_bars([(label, {"GEMM": 1.0})], title="x < y & z")
    root = svg_root(svg)
    assert any(label in (t.text or "") for t in root.iter(f"{SVG_NS}text"))
    assert root.find(f"{SVG_NS}title").text == "x < y & z"  # type: ignore[union-attr]
    on = tt.profile.analysis  # type: ignore[union-attr]
    assert charts.operator_bars(on.operator_details) == charts.operator_bars(on.operator_details)
    bars = [charts.SpeedupBar(c.category, c.speedup, None, None) for c in tt.comparison.categories  # type: ignore[union-attr]
            if c.on_ms > 0]
    assert len(by_class(svg_root(charts.speedup_bars(bars)), "rect", "sme2-speedup")) == len(bars)


_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?")
_UNIT_AFTER = re.compile(r"\s?(?:ms|%|×)")


def numbers_without_unit(svg: ET.Element) -> list[str]:
    """Texts on a chart holding a number not followed by ms, % or × (run numbers excepted)."""
    latency = "sme2-chart-latency" in (svg.get("class") or "")
    bad = []
    for t in svg.iter(f"{SVG_NS}text"):
        content = t.text or ""
        if latency and content.isdigit():
            continue  # the run-order axis: run 0, 5, 10 ... are counts, not measurements
        for m in _NUMBER.finditer(content):
            if re.search(r"\brun\s*$", content[: m.start()]):
                continue  # "cold run 0", "run 0 = cold"
            if not _UNIT_AFTER.match(content, m.end()):
                bad.append(content)
    return bad


def test_every_number_on_a_chart_has_a_unit(tt: TestResult, regression: TestResult) -> None:
    svgs = svgs_in(html_section(tt)) + svgs_in(html_section(regression))
    toy = e2e_by_hand("toy_cnn_fp32_xnnpack_simd-on_t1")
    svgs.append(svg_root(charts.latency_samples_chart(toy[1:].tolist(), cold_ms=float(toy[0]), baseline_ms=0.08)))
    assert len(svgs) == 8
    texts = [t.text or "" for s in svgs for t in s.iter(f"{SVG_NS}text")]
    assert sum(bool(_NUMBER.search(t)) for t in texts) > 100  # the charts do print numbers
    assert [bad for s in svgs for bad in numbers_without_unit(s)] == []
    # The sub-0.1 ms toy CNN reads in the tables' precision, not rounded to 3 decimals.
    median = float(np.median(toy[1:]))
    assert median < 0.1 and any(t == f"median {median:.4f} ms" for t in texts)


# ---------------------------------------------------------------------------------- chrome trace


def test_chrome_trace_has_every_event_nested_in_its_parent() -> None:
    timeline = read_etdump(DATA / f"{TT}_simd-on_t1.etdump")
    doc = json.loads(json.dumps(etdump_to_chrome_trace(timeline)))
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(events) == len(timeline.table)
    t = timeline.table
    by_kind: dict[str, int] = {}
    for e in events:
        by_kind[e["cat"]] = by_kind.get(e["cat"], 0) + 1
    assert by_kind == t["kind"].value_counts().to_dict()
    names = {e["name"] for e in events}
    assert {"Method::execute", "DELEGATE_CALL", "OPERATOR_CALL", "native_call_native_layer_norm.out"} <= names
    execs = {e["tid"]: e for e in events if e["name"] == "Method::execute"}
    assert len(execs) == timeline.num_runs
    calls = {(e["tid"], e["args"]["instruction_id"]): e for e in events
             if e["cat"] in ("delegate_call", "operator_call")}
    eps = 1e-6
    for e in events:
        if e["cat"] == "load":
            assert e["tid"] == 0
            continue
        parent = execs[e["tid"]]
        assert parent["ts"] - eps <= e["ts"] and e["ts"] + e["dur"] <= parent["ts"] + parent["dur"] + eps
        if e["cat"] == "operator":
            call = calls[(e["tid"], e["args"]["instruction_id"])]
            assert call["ts"] - eps <= e["ts"] and e["ts"] + e["dur"] <= call["ts"] + call["dur"] + eps
            assert e["args"]["category"] in CATEGORIES
    e2e = e2e_by_hand(f"{TT}_simd-on_t1")
    assert [execs[r + 1]["dur"] / 1000 for r in range(e2e.size)] == pytest.approx(e2e.tolist(), abs=1e-6)
    threads = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert threads[0] == "load / init" and threads[1] == "run 0 (cold)" and threads[2] == "run 1"


def test_chrome_trace_two_builds_in_one_file() -> None:
    off = read_etdump(DATA / f"{TT}_simd-off_t1.etdump")
    on = read_etdump(DATA / f"{TT}_simd-on_t1.etdump")
    doc = etdumps_to_chrome_trace([("SME2 off", off), ("SME2 on", on)])
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in x} == {1, 2}
    assert sum(e["pid"] == 1 for e in x) == len(off.table) and sum(e["pid"] == 2 for e in x) == len(on.table)
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert names == {1: "SME2 off", 2: "SME2 on"}


# -------------------------------------------------------------------------------------- results


def test_results_round_trip(session: SessionResults, tmp_path: Path) -> None:
    again = SessionResults.from_dict(json.loads(json.dumps(session.to_dict())))
    assert again == session
    path = write_results(tmp_path / "out" / "results.json", session)
    loaded = load_results(path)
    assert loaded == session
    assert render_markdown(loaded) == render_markdown(session)  # everything a report needs is in the file
    cmp = session.tests[0].comparison
    assert cmp is not None and OnOffComparison.from_dict(json.loads(json.dumps(cmp.to_dict()))) == cmp
    assert json.loads(path.read_text())["counts"] == {
        "regression": 1, "bug": 0, "failed": 0, "invalid": 0, "inconclusive": 0, "drift": 0, "improvement": 0,
        "pass": 1, "recorded": 0, "baseline-written": 0, "measured": 1, "skipped": 0}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        ("{\"schema_version\": 1, \"tests\": [", "is not valid JSON"),
        (json.dumps({"schema_version": 1, "test_id": "x", "samples_ms": [1.0]}), "is not a pytest-sme2 results file"),
        (json.dumps({"tests": []}), "has no integer schema_version"),
        (json.dumps({"schema_version": 99, "tests": []}), "upgrade pytest-sme2"),
        (json.dumps({"schema_version": 1, "tests": [{"test_id": "t::x", "verdict": {"checks": []}}]}),
         "test t::x does not match the results schema"),
    ],
)
def test_load_results_errors_name_the_file_and_the_fix(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        load_results(path)
    assert str(path) in str(info.value)


def test_step_summary_appended_when_github_sets_it(session: SessionResults, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert append_step_summary(session) == summary
    text = summary.read_text()
    assert text.startswith("earlier step\n### pytest-sme2: 3 tests — 1 regression, 1 pass, 1 measured")
    lines = [x for x in text.splitlines() if x.startswith("| ❌")]
    assert len(lines) == 1 and "test_latency[mobilenet]" in lines[0] and "**regression**" in lines[0]
    median_on = np.median(e2e_by_hand(f"{TT}_simd-on_t1")[1:])
    assert f"| {median_on:.3f} |" in github_step_summary(session)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    assert append_step_summary(session) is None


# ------------------------------------------------------------------------------------------ HTML


def svgs_in(fragment: str) -> list[ET.Element]:
    return [ET.fromstring(s) for s in re.findall(r"<svg .*?</svg>", fragment, flags=re.S)]


def test_html_section_on_off(tt: TestResult) -> None:
    frag = html_section(tt)
    kinds = [(s.get("class") or "").split()[-1] for s in svgs_in(frag)]
    assert kinds == ["sme2-chart-categories", "sme2-chart-latency", "sme2-chart-speedup", "sme2-chart-operators"]
    assert frag.count("<style>") == 1 and "#results-table .sme2-table td" in frag
    assert "native_call_native_layer_norm.out" in frag and "sme2-tag-portable" in frag
    assert "cpu_model" in frag and "AMD EPYC" in frag and "simd-on" in frag
    iv = tt.comparison.speedup  # type: ignore[union-attr]
    assert f"{iv.estimate:.2f}× (95% CI {iv.low:.2f}×–{iv.high:.2f}×)" in frag
    assert "<script" not in frag


def test_html_section_baseline_and_escaping(regression: TestResult) -> None:
    weird = replace(regression, test_id='t.py::test[<b>&"x"]')
    frag = html_section(weird)
    assert "<b>&" not in frag and "&lt;b&gt;&amp;&quot;x&quot;" in frag
    latency = next(s for s in svgs_in(frag) if "sme2-chart-latency" in (s.get("class") or ""))
    assert len(by_class(latency, "line", "sme2-baseline")) == 1
    assert "REGRESSION".lower() in frag and "Verdict checks" in frag
    assert "<th>baseline ms</th><th>%</th><th>current ms</th>" in frag  # categories: baseline vs current


def off_on_gemm_ratio(t: TestResult) -> float:
    """Mean GEMM time per run, off / on: the speedup shown when there is no interval."""
    assert t.profile_off is not None and t.profile is not None
    return float(np.mean(t.profile_off.analysis.category_per_run_ms["GEMM"])
                 / np.mean(t.profile.analysis.category_per_run_ms["GEMM"]))


def test_html_and_markdown_show_one_category_table(session: SessionResults, tt: TestResult) -> None:
    table = category_table(tt)
    assert table is not None
    md = section(render_markdown(session), tt.test_id, "Operator Category Breakdown")
    frag = html_section(tt)
    html_table = frag.split("<h4>Operator categories</h4>", 1)[1].split("</table>", 1)[0]
    html_rows = [[re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr)]
                 for tr in re.findall(r"<tr>(.*?)</tr>", html_table)]
    assert html_rows[0] == [col.title for col in table.columns]
    gemm = json.loads(json.dumps(table.to_dict()))["rows"][1]
    assert gemm[0] == {"kind": "category", "value": "GEMM"} and gemm[6]["kind"] == "ratio"
    # One recorded trace per arm is one block: no interval is claimed for the category speedup.
    assert "low" not in gemm[6] and gemm[6]["value"] == pytest.approx(off_on_gemm_ratio(tt), rel=1e-9)
    for cells_, html_row in zip(table.rows, html_rows[1:], strict=True):
        texts = [cell_text(x) for x in cells_]
        assert html_row == texts
        assert [x.strip("*") for x in row(md, texts[0] if texts[0] != "E2E (mean)" else "**E2E (mean)**")] == texts


def test_identity_table_shows_any_keys_nested_values_and_the_identity(tt: TestResult) -> None:
    # Hand-made device facts (not a measurement), in the shapes a device identity brings: nested
    # mappings, lists, lists of mappings.
    facts = {"device_identity": {"vendor": "Arm", "family": "Cortex-X", "model": "Cortex-X925", "stepping": "r0p1",
                                 "summary": "Arm Cortex-X925 r0p1 (MediaTek Dimensity 9400)"},
             "isa_features": ["sme2", "sve2", "i8mm"],
             "clusters": [{"cpus": [0, 1, 2, 3], "max_khz": 2000000}, {"cpus": [4, 5], "max_khz": 3600000}],
             "runner_sha256": {"sme2_on": "e678bfeb", "sme2_off": "31778236"}, "sme2": True}
    assert tt.profile is not None
    test = replace(tt, profile=replace(tt.profile, identity={**tt.profile.identity, **facts}, device={}))
    table = identity_table(test)
    assert table is not None and table.keyed
    values = {cell_text(r[0]): cell_text(r[1]) for r in table.rows}
    assert table.rows[0][0].value == "Device"
    assert values["Device"] == "Arm Cortex-X925 r0p1 (MediaTek Dimensity 9400), SME2: yes"
    assert values["device_identity"] == "vendor=Arm, family=Cortex-X, model=Cortex-X925, stepping=r0p1"
    assert values["isa_features"] == "sme2, sve2, i8mm"
    assert values["clusters"] == "cpus=0,1,2,3 max_khz=2000000; cpus=4,5 max_khz=3600000"
    assert values["runner_sha256"] == "sme2_on=e678bfeb, sme2_off=31778236"
    assert values["cpu_model"].startswith("AMD EPYC")
    frag = html_section(test)
    assert "<th><b>Device</b></th>" not in frag and "Arm Cortex-X925 r0p1 (MediaTek Dimensity 9400), SME2: yes" in frag
    assert "cpus=0,1,2,3 max_khz=2000000; cpus=4,5 max_khz=3600000" in frag and "{&quot;" not in frag
    meta = section(render_markdown(SessionResults((test,))), test.test_id, "Metadata")
    assert row(meta, "Device")[1] == "**Arm Cortex-X925 r0p1 (MediaTek Dimensity 9400), SME2: yes**"
    assert row(meta, "isa_features")[1] == "sme2, sve2, i8mm"
    # Without a summary the identity's parts name the device; a bare string is the summary itself.
    parts = {"device_identity": {"vendor": "Arm", "model": "Cortex-A725"}, "sme2": False}
    assert device_summary({}, parts) == "Arm, Cortex-A725, SME2: no"
    assert device_summary({}, {"identity": "Apple M4"}) == "Apple M4"


def test_identity_table_with_missing_facts_and_the_runner_label(regression: TestResult) -> None:
    assert regression.profile is not None and regression.profile.variant is None
    frag = html_section(regression)
    assert not re.search(r"runner \(runner\)", frag, flags=re.I)  # a single build has no variant to name
    assert "<th>Runner</th><td>host · simd-off · 1 thread</td>" in frag
    bare = replace(regression, profile=replace(regression.profile, identity={}, device={}, build=""))
    values = {cell_text(r[0]): cell_text(r[1]) for r in identity_table(bare).rows}  # type: ignore[union-attr]
    assert values == {"Device": "—", "Runner": "host · build unknown · 1 thread",
                      "Baseline": "145 samples in 5 blocks, created 2026-11-20T10:00:00+00:00",
                      "Baseline file": ".sme2_baselines/test_latency.json"}
    assert "runner (" not in html_section(bare).lower()


def test_row_cells_and_summary_block(session: SessionResults, regression: TestResult, tt: TestResult) -> None:
    cells = row_cells(regression)
    assert tuple(cells) == COLUMNS == tuple(header_cells())
    assert all(c.startswith("<td") and c.endswith("</td>") for c in cells.values())
    delta = (np.median(e2e_by_hand(f"{MN}_simd-off_t1")[1:]) / np.median(e2e_by_hand(f"{MN}_simd-on_t1")[1:]) - 1)
    assert f">{delta * 100:+.1f}%<" in cells["delta"] and ">regression<" in cells["verdict"]
    assert "×" in row_cells(tt)["speedup"] and ">—<" in row_cells(tt)["delta"]
    block = summary_block(session)
    counts = dict(re.findall(r'sme2-count-([\w-]+)" data-count="(\d+)"', block))
    assert counts == {"regression": "1", "bug": "0", "failed": "0", "invalid": "0", "inconclusive": "0", "drift": "0",
                      "improvement": "0", "pass": "1", "recorded": "0", "baseline-written": "0", "measured": "1",
                      "skipped": "0"}
    assert regression.test_id in block


# ------------------------------------------------------------------------------------ kernels etc.


def test_kernel_view_isa_suffix_and_stored_log_round_trip() -> None:
    assert isa_suffix("xnn_x32_transposec_ukernel__2x4_scalar_int") == "scalar"
    assert isa_suffix("xnn_x16_transposec_ukernel__16x16_reuse_switch_avx2") == "avx2"
    assert isa_suffix("xnn_f32_gemm_minmax_ukernel_7x32__avx512f_broadcast") == "avx512f"
    assert isa_suffix("xnn_f32_gemm_minmax_ukernel_6x8__aarch64_neonfma_ld128") == "aarch64_neonfma"
    assert isa_suffix("xnn_pf32_gemm_minmax_ukernel_32x32c4__neonsme2") == "neonsme2"
    log = read_xnnpack_log(DATA / f"{MN}_simd-on_t1.xnnlog")
    again = kernel_log_from_dict(json.loads(json.dumps(log.to_dict())))
    assert again.kernels == log.kernels and again.sme2_kernels == log.sme2_kernels
    rows = kernel_rows(log)
    assert len(rows) == len(log.kernels) and not any(r.sme2 for r in rows)
    off = read_xnnpack_log(DATA / f"{MN}_simd-off_t1.xnnlog")
    sbs = side_by_side(off, log)
    changed = [r.changed for r in sbs]
    assert changed == sorted(changed, reverse=True)  # differing kinds first
    table = side_by_side_table(off, log)
    assert table is not None and "| gemm |" in "\n".join(render_table(table))


def test_sme2_kernel_evidence_when_the_on_log_names_one(tt: TestResult) -> None:
    # A log line in XNNPACK's format naming an SME2 kernel (the x86 recordings have none).
    sme2_log = parse_xnnpack_log("Note (XNNPACK): Using gemm microkernel "
                                 "'xnn_pf32_gemm_minmax_ukernel_32x32c4__neonsme2'.", source="arm.xnnlog")
    off, on = tt.profile_off.analysis, tt.profile.analysis  # type: ignore[union-attr]
    cmp = compare_on_off(off, on, on_kernels=sme2_log)
    assert cmp.kernels is not None and not cmp.kernels.sme2_missing
    assert cmp.findings[-1] == ("SME2 on selected 1 SME2 kernel, e.g. "
                                "`xnn_pf32_gemm_minmax_ukernel_32x32c4__neonsme2`.")
    result = replace(tt, comparison=cmp)
    assert not any("no SME2 kernel" in r.text for r in recommendations(result))
    assert any("no SME2 kernel" in r.text for r in recommendations(tt))


def test_report_modules_do_not_import_pytest() -> None:
    code = ("import sys; import pytest_sme2.report.html, pytest_sme2.report.markdown, "
            "pytest_sme2.report.chrome_trace, pytest_sme2.results, pytest_sme2.report.text; "
            "assert 'pytest' not in sys.modules and '_pytest' not in sys.modules, 'pytest imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
    # Recommendations are analysis: they sit below the report package and never import it.
    code = ("import sys; import pytest_sme2.analysis.recommendations; "
            "assert not [m for m in sys.modules if m.startswith('pytest_sme2.report')], 'report imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_recommendations_are_data_naming_what_they_are_about(tt: TestResult, regression: TestResult) -> None:
    assert tt.profile is not None and tt.profile_off is not None
    recs = recommend(tt.profile.analysis, off=tt.profile_off.analysis, comparison=tt.comparison)
    assert [r.priority for r in recs] == sorted(r.priority for r in recs)
    norm = next(r for r in recs if r.topic == PORTABLE_OPERATOR)
    assert norm.subject == "native_call_native_layer_norm.out" and "8.2% of E2E" in norm.text
    assert next(r for r in recs if r.topic == NO_SME2_KERNEL).subject == "SME2 on"
    assert all(Recommendation.from_dict(json.loads(json.dumps(r.to_dict()))) == r for r in recs)
    assert recommendations(tt) == recs
    first = recommendations(regression)[0]
    assert first.topic == REGRESSION
    assert first.text.startswith(f"E2E latency regressed {delta_text(regression.headline)}")


def test_regression_verdict_is_real(regression: TestResult) -> None:
    # Guard for the fixtures above: the simd-off candidate against the simd-on baseline is a regression.
    assert regression.verdict is not None and regression.verdict.status is Status.REGRESSION


def test_a_test_that_measured_nothing_gets_no_recommendation() -> None:
    """A skipped SME2 on/off test (the local runtime has none) was shown "Nothing to act on: no bottleneck above 5 %
    of E2E stands out and the measurement is stable" in the HTML report: of a measurement that never ran."""
    skipped = TestResult("example_models/test_toy_cnn.py::test_sme2_speedup", outcome="skipped",
                         model={"name": "toy_cnn"})
    assert recommend(None) == () and recommendations(skipped) == ()
    assert "Recommendations" not in html_section(skipped)
