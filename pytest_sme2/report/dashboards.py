"""Results in the formats the dashboards users already run take: Bencher, github-action-benchmark, pytest-benchmark.

- ``bmf``: Bencher Metric Format (https://bencher.dev/docs/reference/bencher-metric-format),
  ``{benchmark: {measure: {value, lower_value, upper_value}}}``, for ``bencher run --adapter json --file F``.
  The measure is Bencher's built-in ``latency`` (nanoseconds); an emulated device's is ``emulated-latency``.
- ``gab``: github-action-benchmark's ``customSmallerIsBetter`` input, a list of ``{name, unit, value, range,
  extra}`` (https://github.com/benchmark-action/github-action-benchmark, "Examples": custom benchmarks).
- ``pytest-benchmark``: the ``--benchmark-json`` document of pytest-benchmark, so ``pytest-benchmark compare``
  lists and compares our runs beside its own (times in seconds, as it stores them).

One row per measured arm of a test (the SME2-off and SME2-on arms of an on/off test are two): the median of the
arm's latency samples and the 95 % distribution-free interval of the median of its block medians (blocks are the
independent units, :func:`~pytest_sme2.gate.stats.median_interval`); too few blocks for one, no interval. An arm that
could not be measured (invalid) is left out: a dashboard would chart it as a number. Emulated time is named so in
every format and never charted as a device's latency. Each format has a JSON Schema in ``pytest_sme2/data/``,
written from the documented shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from pytest_sme2.errors import ConfigError
from pytest_sme2.gate.stats import block_medians, median_interval
from pytest_sme2.results import EMULATED, SessionResults
from pytest_sme2.store.files import write_atomic

BMF, GAB, PYTEST_BENCHMARK = "bmf", "gab", "pytest-benchmark"
FORMATS = (BMF, GAB, PYTEST_BENCHMARK)
#: Each format's JSON Schema, in ``pytest_sme2/data/``.
SCHEMAS = {BMF: "bmf.schema.json", GAB: "gab_custom.schema.json", PYTEST_BENCHMARK: "pytest_benchmark.schema.json"}
#: Bencher's built-in latency measure (nanoseconds), and the one emulated time goes to instead.
BMF_LATENCY, BMF_EMULATED_LATENCY = "latency", "emulated-latency"
#: The pytest-benchmark JSON version our documents follow (its ``version`` field; ``compare`` reads 3.x-5.x alike).
PYTEST_BENCHMARK_VERSION = "5.1.0"


@dataclass(frozen=True)
class Metric:
    """One measured arm of one test: its median latency and the interval of that median, in ms."""

    name: str
    test_id: str
    arm: str
    median_ms: float
    samples_ms: tuple[float, ...]
    blocks: int
    status: str
    emulated: bool
    low_ms: float | None = None
    high_ms: float | None = None
    #: what the interval covers (e.g. 0.969 for 6 blocks' "95 %" interval); None without one
    coverage: float | None = None


def metrics(results: SessionResults) -> tuple[Metric, ...]:
    """Every measured, valid arm of every test, in test order (the SME2-off arm before the SME2-on one)."""
    out = []
    for test in results.tests:
        arms = [p for p in (test.profile_off, test.profile) if p is not None]
        for profile in arms:
            samples = tuple(float(x) for x in profile.samples_ms)
            if not samples or profile.invalid_reason:
                continue
            arm = str(profile.variant or "")
            name = test.test_id + (f" [{arm}]" if arm and len(arms) > 1 else "")
            if test.emulated:
                name += f" ({EMULATED})"
            medians = block_medians(samples, profile.block_sizes)
            interval, _ = median_interval(medians)
            out.append(Metric(
                name=name, test_id=test.test_id, arm=arm, median_ms=float(np.median(samples)), samples_ms=samples,
                blocks=int(medians.size), status=test.status, emulated=test.emulated,
                low_ms=interval.low if interval else None, high_ms=interval.high if interval else None,
                coverage=interval.coverage if interval else None))
    return tuple(out)


def _interval_text(m: Metric) -> str:
    if m.low_ms is None or m.high_ms is None or m.coverage is None:
        return f"no interval ({m.blocks} block{'s' if m.blocks != 1 else ''})"
    return f"{m.coverage:.1%} CI of the median {m.low_ms:.6g}..{m.high_ms:.6g} ms"


def to_bmf(results: SessionResults) -> dict[str, Any]:
    """Bencher Metric Format: per arm, its median latency (ns) with the interval of the median as lower/upper."""
    doc: dict[str, Any] = {}
    for m in metrics(results):
        value: dict[str, float] = {"value": m.median_ms * 1e6}
        if m.low_ms is not None and m.high_ms is not None:
            value |= {"lower_value": m.low_ms * 1e6, "upper_value": m.high_ms * 1e6}
        doc.setdefault(m.name, {})[BMF_EMULATED_LATENCY if m.emulated else BMF_LATENCY] = value
    return doc


def to_gab(results: SessionResults) -> list[dict[str, Any]]:
    """github-action-benchmark ``customSmallerIsBetter``: per arm, its median latency in ms."""
    return [{"name": m.name, "unit": "ms", "value": m.median_ms, "range": _interval_text(m),
             "extra": (f"{len(m.samples_ms)} runs in {m.blocks} blocks; status {m.status}"
                       + ("; EMULATED time (QEMU), not a device's latency" if m.emulated else ""))}
            for m in metrics(results)]


def _quartiles(x: np.ndarray) -> tuple[float, float]:
    """Q1 and Q3 of sorted ``x`` as pytest-benchmark computes them: the medians of the lower and upper halves for an
    even count, the weighted order statistics of Wikipedia's "method 3" for an odd one."""
    n = int(x.size)
    if n == 1:
        return float(x[0]), float(x[0])
    if n % 2 == 0:
        return float(np.median(x[: n // 2])), float(np.median(x[n // 2:]))
    k = n // 4
    if n % 4 == 1:
        return 0.25 * float(x[k - 1]) + 0.75 * float(x[k]), 0.75 * float(x[3 * k]) + 0.25 * float(x[3 * k + 1])
    return 0.75 * float(x[k]) + 0.25 * float(x[k + 1]), 0.25 * float(x[3 * k + 1]) + 0.75 * float(x[3 * k + 2])


def _pb_stats(samples_s: np.ndarray) -> dict[str, Any]:
    """pytest-benchmark's ``stats`` of one benchmark (seconds), with its definitions: Tukey fences at 1.5 IQR,
    standard-deviation outliers beyond mean +- one sd, ``ops`` = rounds / total."""
    x = np.sort(samples_s)
    n = int(x.size)
    mean = float(x.mean())
    stddev = float(x.std(ddof=1)) if n > 1 else 0.0
    q1, q3 = _quartiles(x)
    iqr = q3 - q1
    inside = x[(x >= q1 - 1.5 * iqr) & (x <= q3 + 1.5 * iqr)]
    iqr_outliers = int(n - inside.size)
    stddev_outliers = int(np.count_nonzero((x < mean - stddev) | (x > mean + stddev)))
    total = float(x.sum())
    return {
        "min": float(x[0]), "max": float(x[-1]), "mean": mean, "stddev": stddev, "rounds": n,
        "median": float(np.median(x)), "iqr": iqr, "q1": q1, "q3": q3, "iqr_outliers": iqr_outliers,
        "stddev_outliers": stddev_outliers, "outliers": f"{stddev_outliers};{iqr_outliers}",
        "ld15iqr": float(inside[0]) if inside.size else float(x[0]),
        "hd15iqr": float(inside[-1]) if inside.size else float(x[-1]),
        "ops": n / total if total > 0 else 0.0, "total": total, "iterations": 1,
        "data": [float(v) for v in samples_s],
    }


def to_pytest_benchmark(results: SessionResults) -> dict[str, Any]:
    """A pytest-benchmark ``--benchmark-json`` document of the session: one benchmark per arm, samples as rounds."""
    env = results.environment
    benchmarks = []
    for m in metrics(results):
        name = m.name.split("::")[-1]
        benchmarks.append({
            "group": f"pytest-sme2 ({EMULATED})" if m.emulated else "pytest-sme2",
            "name": name, "fullname": m.name, "params": None, "param": m.arm or None,
            "extra_info": {"status": m.status, "blocks": m.blocks, "emulated": m.emulated,
                           "median_interval_ms": [m.low_ms, m.high_ms] if m.low_ms is not None else None},
            "options": {"disable_gc": False, "timer": "pytest-sme2 runner", "min_rounds": len(m.samples_ms),
                        "max_time": 0.0, "min_time": 0.0, "warmup": False},
            "stats": _pb_stats(np.asarray(m.samples_ms, dtype=float) / 1e3),
        })
    return {
        "machine_info": {"node": str(env.get("host", "")), "processor": "", "machine": "",
                         "python_version": str(env.get("python", "")), "system": str(env.get("platform", "")),
                         "release": "", "python_implementation": "", "python_compiler": "",
                         "python_implementation_version": "", "python_build": [],
                         "cpu": {"brand_raw": results.device_label}},
        "commit_info": {"id": None, "time": None, "author_time": None, "dirty": None, "project": "",
                        "branch": None},
        "benchmarks": benchmarks,
        "datetime": results.created,
        "version": PYTEST_BENCHMARK_VERSION,
    }


RENDERERS = {BMF: to_bmf, GAB: to_gab, PYTEST_BENCHMARK: to_pytest_benchmark}


@cache
def schema(fmt: str) -> dict[str, Any]:
    """The JSON Schema of ``fmt`` shipped with pytest-sme2."""
    text = resources.files("pytest_sme2").joinpath("data", SCHEMAS[fmt]).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def render(results: SessionResults, fmt: str) -> Any:
    """``results`` as the ``fmt`` document (a JSON value)."""
    if fmt not in RENDERERS:
        raise ConfigError(f"unknown dashboard format {fmt!r}; allowed: {', '.join(FORMATS)}")
    return RENDERERS[fmt](results)


def write_dashboard(path: str | Path, results: SessionResults, fmt: str) -> Path:
    """Write ``results`` as ``fmt`` to ``path`` atomically (a reader never sees half a file)."""
    return write_atomic(path, json.dumps(render(results, fmt), indent=1) + "\n", what=f"{fmt} results")
