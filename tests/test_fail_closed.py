"""Issue 18 defect 5: green must mean something was gated. Where ``CI`` is set the defaults fail closed.

A missing baseline fails (with the command that records it) instead of recording into a workspace CI throws away,
and a session whose performance tests gated nothing is not green; ``--sme2-fail-on`` chooses what fails besides a
regression (missing, invalid, inconclusive, drift, or none). On a developer's machine the first run still records
and exits 0. These runs set ``CI`` themselves (``tests/conftest.py`` removes it from every test's environment).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sme2.gate import Check, Status, Verdict
from pytest_sme2.options import Sme2Options, ci_environment, fail_on_list
from pytest_sme2.plugin.reports import nothing_gated

pytestmark = pytest.mark.slow

EXAMPLE_MODELS = Path(__file__).parent.parent / "example_models" / "models.py"
FAST = ["--sme2-runs", "4", "--sme2-warmup", "1", "--sme2-blocks", "4", "--sme2-busy-limit=100",
        "-p", "no:cacheprovider", "-p", "no:randomly"]

GATED_TEST = """
    import pytest

    @pytest.mark.sme2_model("toy_cnn", dtype="int8")
    @pytest.mark.sme2_threshold(latency_pct=50)
    def test_latency(exported_model, sme2_runner, sme2_baseline):
        sme2_baseline.check(sme2_runner.profile(exported_model))
"""


@pytest.fixture
def run(pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    cache = tmp_path_factory.getbasetemp() / "fail_closed_cache"
    pytester.makeini(f"[pytest]\nsme2_models = {EXAMPLE_MODELS}\n")

    def _run(*args: str, ci: bool) -> pytest.RunResult:
        if ci:
            monkeypatch.setenv("CI", "true")
        else:
            monkeypatch.delenv("CI", raising=False)
        return pytester.runpytest_subprocess(f"--sme2-cache-dir={cache}", *FAST, *args, timeout=600)

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


def test_fail_on_values_and_the_ci_default(pytester, run) -> None:
    assert fail_on_list("missing, inconclusive") == ("missing", "inconclusive")
    assert fail_on_list("none") == ()
    for bad in ("bogus", "", "missing,bogus"):
        with pytest.raises(Exception, match="allowed are a comma list"):
            fail_on_list(bad)
    assert ci_environment({"CI": "true"}) and ci_environment({"CI": "1"})
    assert not ci_environment({}) and not ci_environment({"CI": "false"}) and not ci_environment({"CI": "0"})
    pytester.makepyfile(test_model=GATED_TEST)
    result = run("--sme2-fail-on=bogus", ci=False)
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
    recorded = [{"outcome": "passed", "verdict": {"status": "pass", "comparison": None}}]
    gated = [*recorded, {"outcome": "passed", "verdict": {"status": "drift", "comparison": "unchanged"}}]
    assert nothing_gated(measured, closed) and nothing_gated(recorded, closed)
    assert not nothing_gated(gated, closed)
    assert not nothing_gated(measured, open_)
    assert not nothing_gated([{"outcome": "skipped"}], closed)  # pytest's exit 5 covers a session of skips
    assert not nothing_gated([], closed)
