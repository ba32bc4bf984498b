"""The report tables (``pytest_sme2.report.tables``): the identity table of any device's facts."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from pytest_sme2.report.cells import cell_text
from pytest_sme2.report.html import html_section
from pytest_sme2.report.markdown import render_markdown
from pytest_sme2.report.tables import device_summary, identity_table
from pytest_sme2.results import (
    SessionResults,
    TestResult,
)
from report.builders import row, section

pytestmark = pytest.mark.fast

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
