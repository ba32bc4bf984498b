"""Green must mean something was gated. Where ``CI`` is set the defaults fail closed.

A missing baseline fails (with the command that records it) instead of recording into a workspace CI throws away,
and a session whose performance tests gated nothing is not green; ``--sme2-fail-on`` chooses what fails besides a
regression (missing, invalid, inconclusive, drift, or none). On a developer's machine the first run still records
and exits 0. These runs set ``CI`` themselves (``tests/conftest.py`` removes it from every test's environment).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gated_project import EXAMPLE_MODELS, FAST, GATED_TEST

from pytest_sme2.gate.decide import gate
from pytest_sme2.gate.verdict import Check, Comparison, GateConfig, Samples, Status, Verdict
from pytest_sme2.options import FAIL_ON_CI, Sme2Options, ci_environment, fail_on_list
from pytest_sme2.plugin.config import resolve_fail_on
from pytest_sme2.plugin.reports import nothing_gated

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def export_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One export cache for this file's sessions, module-scoped so that under ``-n`` its tests run on one worker
    (tests/conftest.py's scheduler) and toy_cnn int8 is exported once, not once per worker. Not the workers'
    shared cache: its measuring lock would make these sessions take turns with the other worker's measurements."""
    return tmp_path_factory.mktemp("fail_closed_cache")


@pytest.fixture
def run(pytester: pytest.Pytester, export_cache: Path, monkeypatch: pytest.MonkeyPatch):
    pytester.makeini(f"[pytest]\nsme2_models = {EXAMPLE_MODELS}\n")

    def _run(*args: str, ci: bool) -> pytest.RunResult:
        if ci:
            monkeypatch.setenv("CI", "true")
        else:
            monkeypatch.delenv("CI", raising=False)
        return pytester.runpytest_subprocess(f"--sme2-cache-dir={export_cache}", *FAST, *args, timeout=600)

    return _run


def test_in_ci_a_missing_baseline_fails_with_the_command_and_on_a_laptop_it_records(pytester, run) -> None:
    pytester.makepyfile(test_model=GATED_TEST)
    result = run(ci=True)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "no baseline for this device" in out and "--sme2-update-baseline" in out
    assert not list((pytester.path / ".sme2_baselines").glob("*.json")), "CI must not record into its workspace"

    laptop = run(ci=False)
    laptop.assert_outcomes(passed=1)
    assert "recorded, not gated" in laptop.stdout.str()
    assert laptop.ret == 0

    gated = run(ci=True)  # the baseline exists now: CI gates it (an unchanged artifact: pass or drift)
    gated.assert_outcomes(passed=1)
    assert gated.ret == 0, gated.stdout.str()[-1500:]


def test_ci_opts_in_to_record_with_fail_on_none(pytester, run) -> None:
    pytester.makepyfile(test_model=GATED_TEST)
    result = run("--sme2-fail-on=none", ci=True)
    result.assert_outcomes(passed=1)
    assert result.ret == 0
    assert "recorded, not gated" in result.stdout.str()


def test_in_ci_a_session_that_gated_nothing_is_not_green(pytester, run) -> None:
    # Every test passes, but none compares with a baseline: only measured.
    pytester.makepyfile(test_model="""
        import pytest

        @pytest.mark.sme2_model("toy_cnn", dtype="int8")
        def test_profile(exported_model, sme2_runner):
            sme2_runner.profile(exported_model)
    """)
    result = run(ci=True)
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "none was compared with a baseline" in result.stdout.str()
    assert run(ci=False).ret == 0  # the same session on a developer's machine


def test_fail_on_values_and_the_ci_default(pytester) -> None:
    assert fail_on_list("missing, inconclusive") == ("missing", "inconclusive")
    assert fail_on_list("none") == ()
    for bad in ("bogus", "", "missing,bogus"):
        with pytest.raises(Exception, match="allowed are a comma list"):
            fail_on_list(bad)
    assert ci_environment({"CI": "true"}) and ci_environment({"CI": "1"})
    assert not ci_environment({}) and not ci_environment({"CI": "false"}) and not ci_environment({"CI": "0"})
    pytester.makepyfile(test_model=GATED_TEST)
    result = pytester.runpytest("--sme2-fail-on=bogus")  # refused at start-up: in this process, no new interpreter
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "allowed are a comma list of missing, invalid, inconclusive, drift, or none" in result.stderr.str()


@pytest.mark.parametrize("status", [Status.INVALID, Status.INCONCLUSIVE, Status.DRIFT])
def test_fail_on_names_what_fails_besides_a_regression(status: Status) -> None:
    verdict = Verdict(status, (Check("e2e", status, "x"),))
    assert not verdict.failed
    assert Verdict(status, verdict.checks, fail_on=(status.value,)).failed
    assert not Verdict(status, verdict.checks, fail_on=("missing",)).failed
    assert Verdict(Status.REGRESSION, verdict.checks).failed  # a regression always fails
    assert Verdict.from_dict(Verdict(status, verdict.checks, fail_on=(status.value,)).to_dict()).failed


def test_nothing_gated_counts_only_comparisons_with_a_baseline() -> None:
    closed, open_ = Sme2Options(fail_on=("missing",)), Sme2Options(fail_on=())
    measured = [{"outcome": "passed", "verdict": None}]
    recorded = [{"outcome": "passed", "verdict": Verdict(Status.PASS, ()).to_dict()}]
    drift = Verdict(Status.DRIFT, (Check("e2e", Status.DRIFT, "x"),), comparison=Comparison.UNCHANGED)
    gated = [*recorded, {"outcome": "passed", "verdict": drift.to_dict()}]
    assert nothing_gated(measured, closed) and nothing_gated(recorded, closed)
    assert not nothing_gated(gated, closed)
    assert not nothing_gated(measured, open_)
    assert not nothing_gated([{"outcome": "skipped"}], closed)  # pytest's exit 5 covers a session of skips
    assert not nothing_gated([], closed)
    # The emulated device's default judges the kernel evidence and the outputs, not emulated time: that is
    # gated when those checks passed, and not when only advisory ones ran.
    from pytest_sme2.gate.verdict import TIME_NOT_GATED

    def evidence(*checks: dict[str, object]) -> list[dict[str, object]]:
        return [{"outcome": "passed", "verdict": {"status": "pass", "comparison": None, "notes": [TIME_NOT_GATED],
                                                  "checks": list(checks)}}]

    assert not nothing_gated(evidence({"name": "sme2_kernels", "status": "pass", "advisory": False},
                                      {"name": "numerics", "status": "pass", "advisory": False}), closed)
    assert nothing_gated(evidence({"name": "min_speedup", "status": "inconclusive", "advisory": True}), closed)
    assert nothing_gated(evidence({"name": "sme2_kernels", "status": "pass", "advisory": True}), closed)


# ---------------------------------------------------------------- in CI, not decided is not green

BUSY = "preempted 38% of wall time; load 2.9 on 2 CPUs"


def _samples(invalid: str = "") -> Samples:
    # Block medians 1.00 .. 1.05 ms: only the gate's bookkeeping is under test here, not an interval.
    values = tuple(1.0 + 0.01 * (i % 6) for i in range(60))
    return Samples(values, (10,) * 6, invalid_reason=invalid)


def _verdict(status: Status, comparison: Comparison, fail_on: tuple[str, ...] = FAIL_ON_CI) -> Verdict:
    return Verdict(status, (Check("validity" if status is Status.INVALID else "e2e", status, BUSY),),
                   comparison=comparison, fail_on=fail_on)


def test_in_ci_the_default_fails_what_a_changed_artifact_left_undecided(monkeypatch: pytest.MonkeyPatch) -> None:
    """With CI set, an invalid or inconclusive verdict of a changed artifact fails by default, with the reason and
    what to do; drift of an unchanged one does not."""
    monkeypatch.setenv("CI", "true")
    default = resolve_fail_on(None, strict=False, require_baseline=False)
    assert {"missing", "invalid", "inconclusive"} <= set(default) and "drift" not in default
    monkeypatch.delenv("CI")
    assert resolve_fail_on(None, strict=False, require_baseline=False) == ()  # a developer's machine
    for comparison in (Comparison.SESSION, Comparison.STORED, Comparison.RUNTIME):
        for status in (Status.INVALID, Status.INCONCLUSIVE):
            verdict = _verdict(status, comparison, default)
            assert verdict.failed and verdict.undecided, (status, comparison)
            assert "not decided" in verdict.undecided_text() and "--sme2-fail-on=none" in verdict.undecided_text()
            assert not _verdict(status, comparison, ("missing",)).failed  # the deliberate opt-out
            assert not _verdict(status, comparison, ()).failed
    assert "quiet runner" in _verdict(Status.INVALID, Comparison.SESSION, default).undecided_text()
    assert "--sme2-blocks" in _verdict(Status.INCONCLUSIVE, Comparison.SESSION, default).undecided_text()
    assert not _verdict(Status.DRIFT, Comparison.UNCHANGED, default).failed
    assert not _verdict(Status.PASS, Comparison.SESSION, default).undecided_text()


def test_an_unchanged_artifacts_invalid_fails_only_when_an_absolute_check_was_left_unjudged() -> None:
    """A busy runner measuring an unchanged artifact decided nothing a measurement could have decided: its relative
    checks never gate, so it reports, as its drift does. A budget or min_speedup it could not judge is undecided."""
    config = GateConfig(margin=0.1, fail_on=FAIL_ON_CI)
    busy = _samples(BUSY)
    plain = gate(_samples(), busy, config, comparison=Comparison.UNCHANGED)
    assert plain.status is Status.INVALID and not plain.undecided and not plain.failed
    budget = gate(_samples(), busy, GateConfig(margin=0.1, fail_on=FAIL_ON_CI, p50_ms=2.0),
                  comparison=Comparison.UNCHANGED)
    assert budget.status is Status.INVALID and budget.failed
    assert any(c.name == "p50_budget" and c.message.startswith("not judged: preempted") for c in budget.checks)
    # An on/off pair's min_speedup, judged on the pair itself (no reference): unjudged, so undecided.
    speedup = gate(None, busy, GateConfig(min_speedup=1.2, fail_on=FAIL_ON_CI), off=_samples())
    assert speedup.failed and any(c.name == "min_speedup" for c in speedup.checks)
    changed = gate(_samples(), busy, config, comparison=Comparison.SESSION)
    assert changed.status is Status.INVALID and changed.failed
    # --sme2-strict keeps failing every invalid verdict, an unchanged artifact's too.
    strict = gate(_samples(), busy, GateConfig(strict=True), comparison=Comparison.UNCHANGED)
    assert strict.failed


def test_a_session_of_undecided_verdicts_is_not_green() -> None:
    """``nothing_gated`` counted any verdict with a comparison as gated: an all-invalid or all-inconclusive session
    passed in CI with ``--sme2-fail-on=missing``. Decided means compared and not left undecided."""
    closed = Sme2Options(fail_on=("missing",))
    for status in (Status.INVALID, Status.INCONCLUSIVE):
        records = [{"outcome": "passed", "verdict": _verdict(status, Comparison.SESSION).to_dict()}] * 3
        why = nothing_gated(records, closed)
        assert "3 performance test(s) ran and none was decided" in why and status.value in why
        assert "--sme2-fail-on=none" in why
        passed = {"outcome": "passed", "verdict": _verdict(Status.PASS, Comparison.SESSION).to_dict()}
        assert not nothing_gated([*records, passed], closed)
    unchanged_busy = {"outcome": "passed", "verdict": _verdict(Status.INVALID, Comparison.UNCHANGED).to_dict()}
    assert not nothing_gated([unchanged_busy], closed)  # its hashes decided it: nothing under test changed


SIZE_TEST = """
    import os
    import pytest, torch

    SIZE = int(os.environ.get("SME2_TEST_SIZE", "32"))

    @pytest.mark.sme2_model("toy_cnn", dtype="fp32", inputs=(torch.ones(1, 3, SIZE, SIZE),))
    @pytest.mark.sme2_threshold(latency_pct=25, planned_pct=900)
    def test_latency(exported_model, sme2_runner, sme2_baseline):
        sme2_baseline.check(sme2_runner.profile(exported_model))
"""


def test_in_ci_an_inconclusive_change_fails_and_the_opt_out_reports_it(pytester, run, monkeypatch) -> None:
    """End to end: a changed model measured in 1 block per arm (no interval: inconclusive) was green in CI."""
    pytester.makepyfile(test_model=SIZE_TEST)
    few = ("--sme2-runs", "3", "--sme2-blocks", "1", "--sme2-no-confirm")
    monkeypatch.setenv("SME2_TEST_SIZE", "32")
    run("--sme2-update-baseline", *few, ci=False).assert_outcomes(passed=1)
    monkeypatch.setenv("SME2_TEST_SIZE", "96")
    result = run(*few, ci=True)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "sme2 INCONCLUSIVE" in out and "not decided: the change could not be shown" in out, out[-3000:]
    reported = run(*few, "--sme2-fail-on=missing", ci=True)
    reported.assert_outcomes(passed=1)  # the test reports it; the session that decided nothing is not green
    assert reported.ret == pytest.ExitCode.TESTS_FAILED
    assert "none was decided (verdicts: inconclusive)" in reported.stdout.str()
    opted_out = run(*few, "--sme2-fail-on=none", ci=True)
    opted_out.assert_outcomes(passed=1)
    assert opted_out.ret == 0
