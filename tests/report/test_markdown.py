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
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pytest_sme2.analysis.recommendations import (
    NO_SME2_KERNEL,
    PORTABLE_OPERATOR,
    REGRESSION,
    Recommendation,
    recommend,
)
from pytest_sme2.analysis.run import analyze, analyze_e2e, merge
from pytest_sme2.evidence.categories import CATEGORIES
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.gate.verdict import Status
from pytest_sme2.report.comparison import compare_on_off
from pytest_sme2.report.html import html_section
from pytest_sme2.report.markdown import render_combined, render_markdown
from pytest_sme2.report.tables import recommendations
from pytest_sme2.results import (
    SessionResults,
    TestResult,
    delta_text,
    github_step_summary,
)
from pytest_sme2.runners.base import RunResult
from report.builders import (
    DATA,
    MN,
    TT,
    e2e_by_hand,
    num,
    per_run_total,
    recorded_profile,
    regression_result,
    row,
    section,
    svgs_in,
)

pytestmark = pytest.mark.fast


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


# ------------------------------------------------------------------------------------ kernels etc.


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
