"""Results built from the recorded traces for the report tests, and the numbers computed by hand to check them.

The simd-on/simd-off pairs in tests/data (the x86 stand-in for SME2 on/off: same runtime, XNNPACK with and without
its AVX kernels) drive every comparison. Numbers asserted in a report are recomputed here straight from the trace
table (``read_etdump``), not from ``analyze``.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pytest_sme2.analysis.run import analyze, merge
from pytest_sme2.evidence.kernels import (
    read_xnnpack_log,
)
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.gate.checks import speedup_check
from pytest_sme2.gate.decide import gate
from pytest_sme2.gate.verdict import GateConfig
from pytest_sme2.measure.profile import Profile
from pytest_sme2.report.comparison import compare_on_off
from pytest_sme2.results import (
    SessionResults,
    TestResult,
)
from pytest_sme2.store.baseline import Baseline

DATA = Path(__file__).parents[1] / "data"



TT = "tiny_transformer_fp32_xnnpack"



MN = "mobilenet_v3_small_like_fp32_xnnpack"



SVG_NS = "{http://www.w3.org/2000/svg}"



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



def svg_root(svg: str) -> ET.Element:
    return ET.fromstring(svg)



def by_class(root: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [e for e in root.iter(f"{SVG_NS}{tag}") if cls in (e.get("class") or "").split()]



def svgs_in(fragment: str) -> list[ET.Element]:
    return [ET.fromstring(s) for s in re.findall(r"<svg .*?</svg>", fragment, flags=re.S)]


def session_results(tt: TestResult, mn: TestResult, regression: TestResult) -> SessionResults:
    """The three results as one session, with the config the plugin records."""
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
