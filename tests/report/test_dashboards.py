"""Results in the dashboards' formats (Bencher BMF, github-action-benchmark, pytest-benchmark), checked against each
format's documented JSON Schema and back against the results they came from.

The results are built from real recorded traces (tests/data): each trace's measured runs are its latency samples,
taken in consecutive blocks as a runner process records them (a stand-in for the block structure only: runs of one
process vary less than separate processes do). Expected medians and intervals are computed here with numpy and
the order statistics, not by the module under test.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from pytest_sme2.analysis.run import analyze
from pytest_sme2.cli import main
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.measure.profile import Profile
from pytest_sme2.report.dashboards import BMF, FORMATS, GAB, PYTEST_BENCHMARK, render, schema
from pytest_sme2.results import SessionResults, TestResult, load_results, write_results

DATA = Path(__file__).parents[1] / "data"
TOY = "example_models/test_toy_cnn.py::test_latency[fp32]"
ONOFF = "example_models/test_mobilenet_v3_small.py::test_simd_speedup"
EMU = "example_models/test_toy_cnn.py::test_sme2_speedup"
INVALID = "example_models/test_toy_cnn.py::test_latency[int8]"


def _profile(trace: Path, blocks: int, *, variant: str | None = None, emulated: bool = False,
             invalid: str = "") -> Profile:
    analysis = analyze(read_etdump(trace))
    samples = analysis.measured_ms
    size, extra = divmod(len(samples), blocks)
    sizes = tuple(size + (1 if i < extra else 0) for i in range(blocks))
    identity = {"device_kind": "qemu", "emulator": "qemu-aarch64 11.1.3"} if emulated else {"device_kind": "host"}
    return Profile(model={"name": trace.stem}, variant=variant, runner="host", build="recorded", threads=1,
                   identity=identity, analysis=analysis, latency_ms=samples, latency_blocks=sizes,
                   invalid_reason=invalid)


def _results() -> SessionResults:
    toy = _profile(DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump", 6)
    on = _profile(DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-on_t1.etdump", 7, variant="simd-on")
    off = _profile(DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-off_t1.etdump", 7, variant="simd-off")
    qemu = DATA / "qemu_aarch64"
    emu_on = _profile(qemu / "toy_cnn_fp32_xnnpack_qemu-sme2-on_t1.etdump", 1, variant="sme2-on", emulated=True)
    emu_off = _profile(qemu / "toy_cnn_fp32_xnnpack_qemu-sme2-off_t1.etdump", 1, variant="sme2-off", emulated=True)
    bad = _profile(DATA / "toy_cnn_int8_xnnpack_simd-on_t1.etdump", 6, invalid="the machine stayed busy")
    return SessionResults(tests=(
        TestResult(TOY, outcome="passed", profile=toy),
        TestResult(ONOFF, outcome="passed", profile=on, profile_off=off),
        TestResult(EMU, outcome="passed", profile=emu_on, profile_off=emu_off),
        TestResult(INVALID, outcome="passed", profile=bad),
    ), created="2026-11-27T10:00:00+00:00", environment={"host": "vm", "python": "3.11.7"})


def _expected(profile: Profile) -> tuple[float, float | None, float | None]:
    """Median of the samples, and the 95 % order-statistic interval of the block medians (None when too few)."""
    samples = np.asarray(profile.latency_ms)
    edges = np.cumsum((0, *profile.latency_blocks))
    medians = np.sort([np.median(samples[a:b]) for a, b in itertools.pairwise(edges)])
    n = medians.size
    # the largest k with P(Bin(n, 1/2) < k) <= 2.5 %: the k-th smallest and k-th largest block medians
    k = max((j for j in range(1, n + 1) if sum(math.comb(n, i) for i in range(j)) / 2**n <= 0.025), default=0)
    if k == 0:
        return float(np.median(samples)), None, None
    return float(np.median(samples)), float(medians[k - 1]), float(medians[n - k])


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_validates_against_its_documented_schema(fmt: str) -> None:
    doc = render(_results(), fmt)
    jsonschema.Draft7Validator.check_schema(schema(fmt))
    jsonschema.validate(doc, schema(fmt), cls=jsonschema.Draft7Validator)
    # The schemas can fail: a value given as a string, as a careless writer would, is refused.
    broken: Any = json.loads(json.dumps(doc))
    if fmt == BMF:
        broken[TOY]["latency"]["value"] = "0.08"
    elif fmt == GAB:
        broken[0]["value"] = "0.08"
    else:
        broken["benchmarks"][0]["stats"]["median"] = "0.08"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema(fmt), cls=jsonschema.Draft7Validator)


def test_bmf_round_trip_gives_back_each_arms_median_and_interval_in_ns() -> None:
    results = _results()
    doc = render(results, BMF)
    toy, onoff, emu = results.tests[0], results.tests[1], results.tests[2]
    assert toy.profile is not None and onoff.profile is not None and onoff.profile_off is not None
    expected = {TOY: toy.profile, f"{ONOFF} [simd-on]": onoff.profile, f"{ONOFF} [simd-off]": onoff.profile_off}
    for name, profile in expected.items():
        median, low, high = _expected(profile)
        assert low is not None and high is not None and low <= median <= high
        assert doc[name]["latency"] == pytest.approx(
            {"value": median * 1e6, "lower_value": low * 1e6, "upper_value": high * 1e6}, rel=1e-12)
    # Emulated time is its own measure and its names say so; one block gives no interval; invalid is left out.
    assert emu.profile is not None
    emulated = doc[f"{EMU} [sme2-on] (emulated)"]
    assert list(emulated) == ["emulated-latency"]
    assert emulated["emulated-latency"] == {"value": pytest.approx(_expected(emu.profile)[0] * 1e6, rel=1e-12)}
    assert not any(name.startswith(INVALID) for name in doc)
    assert len(doc) == 5


def test_gab_round_trip_gives_back_medians_in_ms_with_the_interval_as_range() -> None:
    results = _results()
    entries = {e["name"]: e for e in render(results, GAB)}
    assert results.tests[0].profile is not None
    median, low, high = _expected(results.tests[0].profile)
    assert entries[TOY]["unit"] == "ms" and entries[TOY]["value"] == pytest.approx(median, rel=1e-12)
    assert f"{low:.6g}..{high:.6g} ms" in entries[TOY]["range"]
    emulated = entries[f"{EMU} [sme2-off] (emulated)"]
    assert "EMULATED" in emulated["extra"] and emulated["range"] == "no interval (1 block)"
    assert len(entries) == 5


def test_pytest_benchmark_round_trip_keeps_every_sample_in_seconds() -> None:
    results = _results()
    doc = render(results, PYTEST_BENCHMARK)
    bench = {b["fullname"]: b for b in doc["benchmarks"]}
    profile = results.tests[0].profile
    assert profile is not None
    stats = bench[TOY]["stats"]
    seconds = np.asarray(profile.latency_ms) / 1e3
    assert stats["data"] == pytest.approx(seconds.tolist(), rel=1e-12)
    assert stats["median"] == pytest.approx(float(np.median(seconds)), rel=1e-12)
    assert stats["rounds"] == len(seconds) and stats["min"] == pytest.approx(float(seconds.min()))
    assert stats["stddev"] == pytest.approx(float(np.std(seconds, ddof=1)))
    # pytest-benchmark's quartiles: even counts take the halves' medians (29 runs here: odd, "method 3")
    x = np.sort(seconds)
    n, k = x.size, x.size // 4
    assert n % 4 == 1 and stats["q1"] == pytest.approx(0.25 * x[k - 1] + 0.75 * x[k])
    assert bench[f"{EMU} [sme2-on] (emulated)"]["group"] == "pytest-sme2 (emulated)"


def test_report_command_writes_each_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = write_results(tmp_path / "res.json", _results())
    for fmt in FORMATS:
        out = tmp_path / f"out_{fmt}.json"
        assert main(["report", str(results), "--format", fmt, "--out", str(out)]) == 0
        assert json.loads(out.read_text()) == json.loads(json.dumps(render(_results(), fmt)))
    capsys.readouterr()
    assert main(["report", str(results), "--format", "bmf"]) == 0
    assert TOY in json.loads(capsys.readouterr().out)
    assert main(["report", str(results), str(results), "--format", "gab"]) == 2
    assert "--format gab takes one results file, got 2" in capsys.readouterr().err


EXAMPLE_MODELS = Path(__file__).parents[2] / "example_models" / "models.py"


@pytest.mark.slow
def test_the_plugin_writes_every_format_from_a_real_session(pytester: pytest.Pytester) -> None:
    """A real toy_cnn session on the local runtime with the three options: each file validates, and its value is the
    median of the latency samples the session's --sme2-json holds."""
    pytester.makeini(f"[pytest]\nsme2_models = {EXAMPLE_MODELS}\n")
    pytester.makepyfile(test_perf="""
        import pytest

        @pytest.mark.sme2_model("toy_cnn", dtype="fp32")
        def test_toy(exported_model, sme2_runner, sme2_baseline):
            sme2_baseline.check(sme2_runner.profile(exported_model))
    """)
    result = pytester.runpytest_subprocess(
        "--sme2-runs=6", "--sme2-warmup=2", "--sme2-blocks=4", "--sme2-busy-limit=100", "-p", "no:cacheprovider",
        "-p", "no:randomly", "--sme2-json=res.json", "--sme2-bmf=bmf.json", "--sme2-gab=gab.json",
        "--sme2-pytest-benchmark=pb.json", timeout=600)
    result.assert_outcomes(passed=1)
    profile = load_results(pytester.path / "res.json").tests[0].profile
    assert profile is not None and len(profile.samples_ms) >= 4 * 6
    median = float(np.median(profile.samples_ms))
    docs = {fmt: json.loads((pytester.path / f"{name}.json").read_text())
            for fmt, name in ((BMF, "bmf"), (GAB, "gab"), (PYTEST_BENCHMARK, "pb"))}
    for fmt, doc in docs.items():
        jsonschema.validate(doc, schema(fmt), cls=jsonschema.Draft7Validator)
    assert docs[BMF]["test_perf.py::test_toy"]["latency"]["value"] == pytest.approx(median * 1e6, rel=1e-12)
    assert docs[GAB][0]["value"] == pytest.approx(median, rel=1e-12)
    assert docs[PYTEST_BENCHMARK]["benchmarks"][0]["stats"]["median"] == pytest.approx(median / 1e3, rel=1e-12)
