"""The inline SVG charts (``pytest_sme2.report.charts``) on the recorded traces: bars sized by value, one colour per
category, every number with its unit.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from pytest_sme2.evidence.categories import CATEGORIES
from pytest_sme2.report import charts
from pytest_sme2.report.html import html_section
from pytest_sme2.results import (
    TestResult,
)
from report.builders import SVG_NS, TT, by_class, e2e_by_hand, per_run_total, svg_root, svgs_in

pytestmark = pytest.mark.fast

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
