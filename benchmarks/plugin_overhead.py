"""Plugin overhead per test: what the plugin adds around the measured executions.

Two real pytest sessions (subprocesses, the real LocalRunner, no stubs) run N identical tests of
``toy_cnn`` (fp32/XNNPACK) with the default ``--sme2-*`` options:

1. ``--sme2-update-baseline``: warms the export cache and writes every test's baseline (not timed);
2. the timed session: each test takes ``exported_model`` (a cache hit), ``sme2_runner.profile``
   (blocks x (warm-up + runs) executions) and ``sme2_baseline.check`` (gate against the baseline).

Per test, overhead = the test's duration as pytest reports it (setup + call + teardown, from the
JUnit XML) minus the time of every timed execution the runner recorded for that test (warm-ups
included, from ``--sme2-json``). What remains is fixture setup with the cached export, program
loads, input reading, analysis, the baseline lookup and the gate's statistics. The first test also
pays the one-time import of the executorch runtime (seconds); it is reported apart and left out.

The timed session uses the default gate, confirmation included. A confirming re-measurement is more
executions that the results file does not list, so the overhead median is taken over the tests
judged in one attempt; only when fewer than three were, the re-measurement's executions are
estimated as equal to the first measurement's (said so in the output).

The verdicts double as a *cross-session* A/A test: the same ``.pte``, its baseline written by the
previous session moments before — the situation of a stored baseline, without interleaving.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: Where toy_cnn is registered: the temp project names it as a user's project names its models.
MODELS_FILE = ROOT / "example_models" / "models.py"

TEST_FILE = '''
import pytest


@pytest.mark.sme2_model("toy_cnn", dtype="fp32", backend="xnnpack")
@pytest.mark.parametrize("i", range({n}))
def test_latency(i, exported_model, sme2_runner, sme2_baseline):
    sme2_baseline.check(sme2_runner.profile(exported_model))
'''


def _pytest(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
           "-W", "ignore", "--rootdir", str(tmp), "--sme2-cache-dir", str(tmp / "cache"),
           "--sme2-baseline-dir", str(tmp / "baselines"), f"--sme2-models={MODELS_FILE}", "test_bench.py", *args]
    return subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, check=False)


def measure(tests: int, busy_limit: float | None = None) -> dict[str, Any]:
    """``busy_limit``: the sessions' ``--sme2-busy-limit`` (None = the plugin's default; 100 = off, for a run beside
    other CPU-bound work, where the default would find every block disturbed and write no baseline)."""
    busy = () if busy_limit is None else (f"--sme2-busy-limit={busy_limit:g}",)
    with tempfile.TemporaryDirectory(prefix="sme2_plugin_bench_") as name:
        tmp = Path(name)
        (tmp / "test_bench.py").write_text(TEST_FILE.format(n=tests))
        warm = _pytest(tmp, "--sme2-update-baseline", *busy)
        if warm.returncode != 0:
            raise RuntimeError(f"baseline session failed (exit {warm.returncode}):\n{warm.stdout[-3000:]}")
        timed = _pytest(tmp, "--junitxml", str(tmp / "junit.xml"), "--sme2-json", str(tmp / "results.json"), *busy)
        durations = {
            case.get("name", ""): float(case.get("time", "nan"))
            for case in ET.parse(tmp / "junit.xml").getroot().iter("testcase")
        }
        results = json.loads((tmp / "results.json").read_text())
    executed, attempts, verdicts, ratios = {}, {}, {}, {}
    for test in results["tests"]:
        name = test["test_id"].split("::")[-1]
        executed[name] = sum(sum(r["e2e_ms"]) for r in test["profile"]["runs"]) / 1e3
        verdict = test.get("verdict") or {}
        verdicts[name] = verdict.get("status", "?")
        attempts[name] = int(verdict.get("attempts", 1))
        e2e = next((c for c in verdict.get("checks", []) if c.get("name") == "e2e"), None)
        if e2e and e2e.get("interval"):
            ratios[name] = float(e2e["interval"]["estimate"])
    order = sorted(durations, key=lambda n: int(n.split("[")[-1].rstrip("]")))
    overhead_ms = {n: (durations[n] - executed[n] * attempts[n]) * 1e3 for n in order}
    later = order[1:] or order
    single = [n for n in later if attempts[n] == 1]
    basis = single if len(single) >= 3 else later
    return {
        "plugin_overhead_ms": statistics.median(overhead_ms[n] for n in basis),
        "plugin_overhead_basis": "tests judged in one attempt" if basis is single else
        "all tests 2..N, re-measurements estimated as equal to the first measurement",
        "plugin_overhead_ms_all": [overhead_ms[n] for n in order],
        "first_test_overhead_ms": overhead_ms[order[0]],
        "executions_ms_per_test": statistics.median(executed[n] * 1e3 for n in order),
        "test_duration_ms": statistics.median(durations[n] * 1e3 for n in order),
        "tests": len(order),
        "session_exit": timed.returncode,
        "verdicts": {v: sum(x == v for x in verdicts.values()) for v in sorted(set(verdicts.values()))},
        "regressions": sum(v == "regression" for v in verdicts.values()),
        "confirmed_attempts": sum(a > 1 for a in attempts.values()),
        "cross_session_ratios": [ratios[n] for n in order if n in ratios],
    }
