"""The trend page: an overview of every series first, latency on an honest scale, zoom over a long history.

The series are real recorded sessions (``benchmarks/data/history_toy_cnn_sessions.jsonl``); the 1,000-run store is
those sessions replayed in rotation by ``benchmarks/history_store_1000.py`` (only run ids, times and commit ids are
made up). The browser test renders the page in headless Chromium, as a reader opens it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sme2.history.records import HistoryRecord, RunInfo
from pytest_sme2.history.series import build_series, steps_of
from pytest_sme2.history.store import HistoryStore
from pytest_sme2.history.trend import MIN_SPAN_PCT, TOP, H, latency_chart, render_page

REPO = Path(__file__).resolve().parents[2]
BUILDER = REPO / "benchmarks" / "history_store_1000.py"
CHROMIUM = Path("/usr/bin/chromium")
PLOT = H - TOP - 46  # the plot's height (BOTTOM = 46)


def _store(tmp_path: Path, medians: list[float], baseline: float | None = None) -> HistoryStore:
    store = HistoryStore(tmp_path / "h")
    for i, m in enumerate(medians):
        store.append(RunInfo(run_id=f"r{i:03d}", time=f"2026-11-27T10:{i:02d}:00+00:00", commit=f"{i:x}" * 40,
                             branch="main"),
                     [HistoryRecord(test_id="t::toy", label="toy_cnn fp32 xnnpack", identity_id="dev1",
                                    identity="AMD EPYC", artifact_id="a1", status="pass", median_ms=m,
                                    baseline_ms=baseline)])
    return store


def _cys(svg: str) -> list[float]:
    return [float(y) for y in re.findall(r'<circle class="point" [^>]*cy="([0-9.]+)"', svg)]


def test_a_3_percent_move_is_drawn_as_3_percent_not_as_the_whole_chart(tmp_path: Path) -> None:
    # toy_cnn's recorded medians of two sessions of one artifact (0.080214, 0.080459 ms) and one 3 % above
    series = build_series(_store(tmp_path, [0.080214, 0.080459, 0.080214 * 1.03], baseline=0.080459).frame())
    svg = latency_chart(series[0], [])
    cys = _cys(svg)
    # The axis spans at least +-5 % around the baseline, so 3 % takes well under a third of the plot's height.
    assert 0 < max(cys) - min(cys) < PLOT * 3 / (2 * MIN_SPAN_PCT)
    assert "y: -5.6% … +5.6% against the current baseline, 0.0805 ms" in svg


def test_the_page_opens_with_an_overview_of_every_series(tmp_path: Path) -> None:
    from history.test_history import recorded

    sizes = recorded("light", 32)[:12] + recorded("light", 36)[:12]  # a real step: input 32x32 -> 36x36
    store = _store(tmp_path, sizes, baseline=sizes[0])
    series = build_series(store.frame())
    steps = [s for se in series for s in steps_of(se)]
    assert len(steps) == 1
    page = render_page(series, steps)
    overview = page[page.index("<h2>Overview</h2>"):page.index("<section")]
    row = re.search(r"<tr class='overview regression'>(.*?)</tr>", overview)
    assert row is not None, overview
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))
    last, prev = sizes[-1], sizes[-2]
    assert cells[3] == "24" and cells[4] == f"{last:.4f} ms"
    assert cells[5] == f"{(last / sizes[0] - 1) * 100:+.1f}%" and cells[6] == f"{(last / prev - 1) * 100:+.1f}%"
    assert cells[7].startswith(f"1; newest {steps[0].pct:+.1f}% at <code>{steps[0].commit_range}</code>")
    assert cells[8].startswith('<svg class="spark"')
    assert page.index("<h2>Overview</h2>") < page.index("<table class='steps'") < page.index("<section")


def _chromium(*args: str, profile: Path) -> str:
    flags = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
             "--disable-sync", "--disable-component-update", "--hide-scrollbars", "--virtual-time-budget=4000")
    return subprocess.run([str(CHROMIUM), *flags, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=120, check=True).stdout


def _shown_points(dom: str) -> int:
    return sum(1 for c in re.findall(r'<circle class="point"[^>]*>', dom) if "display: none" not in c)


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt install chromium)")
def test_a_1000_run_history_in_chromium_has_the_overview_charts_and_zoom(tmp_path: Path) -> None:
    from report.test_browser import png_pixels

    store = tmp_path / "store"
    subprocess.run([sys.executable, str(BUILDER), str(store)], check=True, capture_output=True, timeout=300)
    page = tmp_path / "history.html"
    subprocess.run([sys.executable, "-m", "pytest_sme2", "history", "page", "--store", str(store), "--out", str(page)],
                   check=True, capture_output=True, timeout=300)
    dom = _chromium("--dump-dom", page.as_uri(), profile=tmp_path / "p1")
    assert dom.count("<tr class=\"overview") == 2 and dom.count('<svg class="spark"') == 2
    assert dom.count("runs 1–1000 of 1000 in view") == 2  # the script ran and placed every run
    assert _shown_points(dom) == 0  # 1,000 runs in view: the line alone
    assert dom.count('class="step"') >= 2
    zoomed = _chromium("--dump-dom", page.as_uri() + "#last=30", profile=tmp_path / "p2")
    assert zoomed.count("runs 971–1000 of 1000 in view") == 2
    assert _shown_points(zoomed) == 2 * 30  # the last 30 runs of each latency chart, as dots
    shot = tmp_path / "history.png"
    _chromium("--window-size=1400,2000", f"--screenshot={shot}", page.as_uri(), profile=tmp_path / "p3")
    _, _, rgb = png_pixels(shot)
    purple = sum(1 for i in range(0, len(rgb), 3) if rgb[i:i + 3] == bytes((0x82, 0x50, 0xDF)))
    assert purple > 2000  # the latency lines (and the sparklines) are drawn
