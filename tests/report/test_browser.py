"""The pytest-html page with our extras, rendered in headless Chromium.

A tiny pytester session runs pytest-html (``--html``) with a conftest that adds what the plugin adds:
``html_section`` as an extras item, ``header_cells``/``row_cells`` as results-table columns and
``summary_block`` in the summary. Chromium renders the page once to dump the DOM after pytest-html's
script has built the table, and once to take a screenshot; the checks look at both.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pytest_sme2.evidence.categories import CATEGORIES
from pytest_sme2.report.charts import CATEGORY_COLORS
from pytest_sme2.results import SessionResults, write_results
from report.builders import TT, on_off_result, regression_result

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason="needs Debian's chromium at /usr/bin/chromium (apt install chromium)"),
]

CONFTEST = '''
import pytest
import pytest_html

from pytest_sme2.report.html import COLUMNS, header_cells, html_section, row_cells, summary_block
from pytest_sme2.results import load_results

RESULTS = load_results({results!r})
BY_NAME = {{t.test_id.split("::")[-1]: t for t in RESULTS.tests}}


def pytest_html_results_summary(prefix, summary, postfix):
    prefix.append(summary_block(RESULTS))


def pytest_html_results_table_header(cells):
    heads = header_cells()
    cells[2:2] = [heads[k] for k in COLUMNS]


def pytest_html_results_table_row(report, cells):
    test = BY_NAME.get(report.nodeid.split("::")[-1])
    values = row_cells(test) if test is not None else {{k: "<td></td>" for k in COLUMNS}}
    cells[2:2] = [values[k] for k in COLUMNS]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    test = BY_NAME.get(item.name)
    if report.when == "call" and test is not None:
        report.extras = [*getattr(report, "extras", []), pytest_html.extras.html(html_section(test))]
'''

CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--hide-scrollbars", "--virtual-time-budget=4000")


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CHROMIUM), *CHROME_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=90, check=True)


def png_pixels(path: Path) -> tuple[int, int, bytes]:
    """Width, height and RGB bytes of an 8-bit RGB/RGBA PNG (what Chromium writes), decoded by hand.

    PIL is used when installed (fast); otherwise the scanlines are unfiltered here with zlib and
    plain Python, which is slower but needs nothing beyond the standard library.
    """
    try:
        from PIL import Image
    except ImportError:
        pass
    else:
        with Image.open(path) as im:
            rgb = im.convert("RGB")
            return rgb.width, rgb.height, rgb.tobytes()
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    height = depth = ctype = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert depth == 8 and ctype in (2, 6), (depth, ctype)
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    out = bytearray()
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        prev = line
        out += line if bpp == 3 else bytes(v for j, v in enumerate(line) if j % 4 != 3)
    return width, height, bytes(out)


def test_pytest_html_page_with_sme2_extras_renders(pytester: pytest.Pytester, tmp_path: Path) -> None:
    # The recorded results, named after the two tests of the inner session.
    on_off = replace(on_off_result(TT), test_id="test_page.py::test_sme2_on_off")
    reg = replace(regression_result(), test_id="test_page.py::test_latency_regression")
    results_path = write_results(tmp_path / "results.json", SessionResults((on_off, reg)))
    pytester.makeconftest(CONFTEST.format(results=str(results_path)))
    pytester.makepyfile(test_page="def test_sme2_on_off():\n    pass\n\ndef test_latency_regression():\n    pass\n")
    report = tmp_path / "report.html"
    run = pytester.runpytest_subprocess("-p", "no:sme2", "-p", "no:cacheprovider", f"--html={report}",
                                        "--self-contained-html", "-o", "render_collapsed=none")
    run.assert_outcomes(passed=2)
    assert report.is_file()

    profile = tmp_path / "chromium-profile"
    dom = chromium("--dump-dom", report.as_uri(), profile=profile).stdout
    # pytest-html's script built the rows and inserted our extras and cells.
    assert dom.count('class="sme2-section"') == 2
    # (Exact attribute text: the page also embeds the report data as an escaped JSON blob.)
    assert dom.count('class="sme2-chart sme2-chart-categories"') == 2
    assert dom.count('class="sme2-chart sme2-chart-latency"') == 2
    assert len(re.findall(r'<rect class="sme2-seg"', dom)) == 2 * len(CATEGORIES) + 2 * len(CATEGORIES)
    # off+on of the on/off test, current+baseline of the regression (each replayed in 5 blocks)
    assert len(re.findall(r'<circle class="sme2-pt"', dom)) == 2 * 29 + 2 * 5 * 29
    assert dom.count('class="sme2-col-median"') == 2 + 1  # two rows and the header
    assert re.search(r'sme2-count-regression" data-count="1"', dom)
    # Numbers drawn on the charts carry their unit; a single-build runner is not labelled "runner (runner)".
    assert len(re.findall(r">median \d+\.\d+ ms<", dom)) == 3 and re.search(r">baseline \d+\.\d+ ms<", dom)
    assert "<th>Runner</th>" in dom and "runner (runner)" not in dom.lower()

    shot = tmp_path / "report.png"
    chromium("--window-size=1400,4000", f"--screenshot={shot}", report.as_uri(), profile=profile)
    width, height, rgb = png_pixels(shot)
    assert (width, height) == (1400, 4000)
    pixels = np.frombuffer(rgb, dtype=np.uint8).reshape(-1, 3)
    non_white = int((pixels != 255).any(axis=1).sum())
    assert non_white > 0.05 * len(pixels), "the page is (nearly) blank"
    # The charts are painted: the category colours of the stacks and operator bars cover visible areas.
    counts = {c: int((pixels == np.frombuffer(bytes.fromhex(CATEGORY_COLORS[c][1:]), dtype=np.uint8)).all(axis=1).sum())
              for c in ("Convolution", "GEMM", "Other")}
    assert all(n > 400 for n in counts.values()), counts
    keep = Path(shutil.copy(shot, tmp_path / "sme2-report-screenshot.png"))
    print(f"screenshot: {keep}")
