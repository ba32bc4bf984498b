"""A test's result (``pytest_sme2.results``): its status combines the test's outcome with its verdict."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from recorded import toy_samples
from report.builders import MN, TT, e2e_by_hand, on_off_result, recorded_profile, regression_result, session_results

from pytest_sme2.analysis.onoff import OnOffComparison
from pytest_sme2.errors import ConfigError
from pytest_sme2.gate.decide import gate
from pytest_sme2.gate.verdict import GateConfig, Status
from pytest_sme2.report.markdown import render_markdown
from pytest_sme2.results import (
    SessionResults,
    TestResult,
    append_step_summary,
    github_step_summary,
    load_results,
    write_results,
)

pytestmark = pytest.mark.fast


@pytest.fixture(scope="module")
def session() -> SessionResults:
    """The recorded on/off pairs of both models and a real regression, as one session (as the report tests have it)."""
    return session_results(on_off_result(TT), on_off_result(MN, min_speedup=2.0), regression_result())


def test_a_backend_pair_names_its_arms_by_backend_not_sme2_off() -> None:
    """A backend comparison (``compare_backends``: two exports on one runner, neither arm a variant) names its arms'
    sources and kernel evidence by their backends; an SME2 on/off pair keeps its variants' names."""
    from dataclasses import replace

    slow = recorded_profile(f"{TT}_simd-off_t1", None)
    slow = replace(slow, model={**slow.model, "backend": "portable"})
    fast = recorded_profile(f"{TT}_simd-on_t1", None)
    result = TestResult("t.py::test_xnnpack_vs_portable", outcome="passed", profile=fast, profile_off=slow)
    assert list(result.sources()) == ["portable", "xnnpack"]
    evidence = result.kernel_evidence()
    assert evidence is not None and [a["arm"] for a in evidence["arms"]] == ["portable", "xnnpack"]
    assert list(on_off_result(TT).sources()) == ["sme2_off", "sme2_on"]


def test_a_test_failing_after_check_is_failed_not_pass() -> None:
    """A functional assert after a passing check() makes the result 'failed' in JSON and HTML."""
    blocks = (4, 4, 3, 3)
    verdict = gate(toy_samples(1, 15, blocks), toy_samples(15, 29, blocks), GateConfig(margin=5.0))
    assert verdict.status is Status.PASS
    result = TestResult("t.py::test_a", outcome="failed", verdict=verdict)
    assert result.status == "failed" and result.to_dict()["status"] == "failed"
    assert TestResult("t.py::test_a", outcome="passed", verdict=verdict).status == "pass"


def test_results_round_trip(session: SessionResults, tmp_path: Path) -> None:
    again = SessionResults.from_dict(json.loads(json.dumps(session.to_dict())))
    assert again == session
    path = write_results(tmp_path / "out" / "results.json", session)
    loaded = load_results(path)
    assert loaded == session
    assert render_markdown(loaded) == render_markdown(session)  # everything a report needs is in the file
    cmp = session.tests[0].comparison
    assert cmp is not None and OnOffComparison.from_dict(json.loads(json.dumps(cmp.to_dict()))) == cmp
    assert json.loads(path.read_text())["counts"] == {
        "regression": 1, "bug": 0, "failed": 0, "invalid": 0, "inconclusive": 0, "drift": 0, "improvement": 0,
        "pass": 1, "recorded": 0, "baseline-written": 0, "measured": 1, "skipped": 0}



@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        ("{\"schema_version\": 1, \"tests\": [", "is not valid JSON"),
        (json.dumps({"schema_version": 1, "test_id": "x", "samples_ms": [1.0]}), "is not a pytest-sme2 results file"),
        (json.dumps({"tests": []}), "has no integer schema_version"),
        (json.dumps({"schema_version": 99, "tests": []}), "upgrade pytest-sme2"),
        (json.dumps({"schema_version": 1, "tests": [{"test_id": "t::x", "verdict": {"checks": []}}]}),
         "test t::x does not match the results schema"),
    ],
)
def test_load_results_errors_name_the_file_and_the_fix(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        load_results(path)
    assert str(path) in str(info.value)



def test_step_summary_appended_when_github_sets_it(session: SessionResults, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert append_step_summary(session) == summary
    text = summary.read_text()
    assert text.startswith("earlier step\n### pytest-sme2: 3 tests — 1 regression, 1 pass, 1 measured")
    lines = [x for x in text.splitlines() if x.startswith("| ❌")]
    assert len(lines) == 1 and "test_latency[mobilenet]" in lines[0] and "**regression**" in lines[0]
    median_on = np.median(e2e_by_hand(f"{TT}_simd-on_t1")[1:])
    assert f"| {median_on:.3f} |" in github_step_summary(session)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    assert append_step_summary(session) is None
