"""The HTML fragments of the pytest-html report (``pytest_sme2.report.html``) on the recorded results."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest

from pytest_sme2.report.cells import cell_text
from pytest_sme2.report.html import COLUMNS, header_cells, html_section, row_cells, summary_block
from pytest_sme2.report.markdown import render_markdown
from pytest_sme2.report.tables import category_table
from pytest_sme2.results import (
    SessionResults,
    TestResult,
)
from report.builders import MN, by_class, e2e_by_hand, row, section, svgs_in

pytestmark = pytest.mark.fast

def off_on_gemm_ratio(t: TestResult) -> float:
    """Mean GEMM time per run, off / on: the speedup shown when there is no interval."""
    assert t.profile_off is not None and t.profile is not None
    return float(np.mean(t.profile_off.analysis.category_per_run_ms["GEMM"])
                 / np.mean(t.profile.analysis.category_per_run_ms["GEMM"]))


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
