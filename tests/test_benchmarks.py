"""The benchmark script (``benchmarks/run.py``, issue #6): its JSON line, and its pieces on real data.

The full benchmark takes minutes; these tests run a fast section of the real script and the
analysis-vs-Inspector agreement check on a small recorded trace, in well under a minute.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SUMMARY_KEYS = (
    "analysis_s", "inspector_s", "analysis_speedup_vs_inspector", "export_cold_s", "export_cached_s",
    "export_cache_speedup", "plugin_overhead_ms", "timer_overhead_us", "aa_false_alarm_rate",
    "detect_rate_10pct", "detect_rate_5pct", "gate_time_s",
)


def test_quick_timer_section_ends_with_a_json_line_holding_every_key() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--only", "timer"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(SUMMARY_KEYS) <= set(summary)
    assert 0 < summary["timer_overhead_us"] < 100  # a clock read costs tens of ns, not milliseconds
    # Sections left out are null, never a made-up number.
    assert summary["aa_false_alarm_rate"] is None and summary["analysis_s"] is None
    assert "load average at start" in proc.stdout


def test_unknown_section_is_a_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--only", "nope"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 2
    assert "unknown section" in proc.stderr


@pytest.mark.slow
def test_our_decoding_equals_the_inspectors_on_a_recorded_trace(data_dir: Path) -> None:
    """The identity check the benchmark prints, on a 30-run trace: every duration of every run agrees."""
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.analysis_speed import measure
    finally:
        sys.path.remove(str(ROOT))
    result = measure(data_dir / "mobilenet_v3_small_like_fp32_xnnpack_simd-on_t1.etdump", repeats=1)
    check = result["identical"]
    assert check["identical"], check
    assert check["runs"] == 30 and check["events"] > 100
    assert check["values_compared"] == check["events"] * 30
    assert result["analysis_s"] > 0 and result["inspector_s"] > 0


def test_clopper_pearson_upper_bound() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.gate_power import clopper_pearson_upper
    finally:
        sys.path.remove(str(ROOT))
    # 0 of n: the bound solves (1 - p)^n = 0.05 exactly.
    assert math.isclose(clopper_pearson_upper(0, 50), 1 - 0.05 ** (1 / 50), rel_tol=1e-9)
    assert clopper_pearson_upper(50, 50) == 1.0
    assert 0.02 < clopper_pearson_upper(1, 100) < 0.05  # tables: 0.0466


def test_gate_variants_trims_only_blocks_far_above_the_arm() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.gate_variants import trimmed
    finally:
        sys.path.remove(str(ROOT))
    # Blocks of 33 executions (3 warm-ups): four near 0.042 ms, one at 0.060 ms (a disturbed block).
    levels = [0.0420, 0.0422, 0.0600, 0.0419, 0.0421]
    blocks = [np.full(33, level) for level in levels]
    kept = trimmed(blocks, 5)
    assert [float(b[0]) for b in kept] == [0.0420, 0.0422, 0.0419, 0.0421]
    # Within max(5 %, 3 MAD) of the median block nothing goes, and only the first k blocks count.
    assert len(trimmed([np.full(33, v) for v in (1.0, 1.03, 0.98, 1.04, 1.0)], 5)) == 5
    assert len(trimmed(blocks, 2)) == 2


def test_gate_variants_rejects_bad_repetition_counts() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gate_variants.py"), "--reps", "5,0,1"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert "--reps takes three positive counts" in proc.stderr
