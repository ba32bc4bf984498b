"""The session's tests together (``pytest_sme2.gate.suite``), end to end: a real pytest session whose stored
comparisons moved with its unchanged tests reports the machine, not each test's regression.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

MACHINE_TEST = """
    import os
    import pytest, torch

    VALUE = float(os.environ.get("SME2_TEST_VALUE", "1"))

    # Another program and other inputs than the changed tests': an unchanged test keeps its artifact in the store,
    # which would give the changed tests their baselines' artifacts to re-measure (a same-session comparison).
    @pytest.mark.parametrize("n", [1, 2])
    @pytest.mark.sme2_model("toy_cnn", dtype="int8", inputs=(torch.full((1, 3, 32, 32), 0.5),))
    @pytest.mark.sme2_threshold(latency_pct=50)
    def test_a_unchanged(n, exported_model, sme2_runner, sme2_baseline):
        sme2_baseline.check(sme2_runner.profile(exported_model))

    # Other input values, the same shape: a changed artifact that runs as fast (toy_cnn's time does not depend on them)
    @pytest.mark.parametrize("n", [1, 2])
    @pytest.mark.sme2_model("toy_cnn", dtype="fp32", inputs=(torch.full((1, 3, 32, 32), VALUE),))
    @pytest.mark.sme2_threshold(latency_pct=50)
    def test_z_changed(n, exported_model, sme2_runner, sme2_baseline):
        sme2_baseline.check(sme2_runner.profile(exported_model))
"""


@pytest.mark.slow
def test_a_session_whose_stored_comparisons_moved_with_its_unchanged_tests_reports_the_machine(
        pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end. The baselines are recorded, then their samples divided by 3: as if recorded when the machine ran 3x
    faster than now (real samples, a known factor, as the benchmarks inject drift). The changed tests find no artifact
    store (a fresh runner), so they are stored comparisons: each a regression of ~+200 % on its own."""
    import json

    pytester.makeini(f"[pytest]\nsme2_models = {ROOT / 'example_models' / 'models.py'}\n")
    pytester.makepyfile(test_machine=MACHINE_TEST)
    cache = tmp_path_factory.getbasetemp() / "suite_cache"
    # A hand-set 0 % drift allowance: the stored comparisons at the bare margin (without it, and without a history
    # that calibrates one, they are not decided).
    fast = (f"--sme2-cache-dir={cache}", "--sme2-runs", "4", "--sme2-warmup", "1", "--sme2-blocks", "6",
            "--sme2-busy-limit=100", "--sme2-drift-allowance=0", "-p", "no:cacheprovider", "-p", "no:randomly")
    monkeypatch.setenv("SME2_TEST_VALUE", "1")
    pytester.runpytest_subprocess(*fast, "--sme2-update-baseline", timeout=600).assert_outcomes(passed=4)
    for path in (pytester.path / ".sme2_baselines").glob("*.json"):
        data = json.loads(path.read_text())
        data["samples_ms"] = [x / 3 for x in data["samples_ms"]]
        path.write_text(json.dumps(data))
    monkeypatch.setenv("SME2_TEST_VALUE", "2")
    empty = f"--sme2-artifact-dir={tmp_path_factory.mktemp('no_artifacts')}"
    result = pytester.runpytest_subprocess(*fast, empty, timeout=600)
    out = result.stdout.str()
    result.assert_outcomes(passed=4)
    assert "2 of 2 stored comparisons moved +" in out and "together: the machine, not 2 regressions" in out, out[-3000:]
    assert out.count("the machine, not a regression: the session's 2 unchanged test(s) moved +") == 2
    # Without the unchanged tests in the session nothing tells the machine from a common change: they fail.
    alone = pytester.runpytest_subprocess(*fast, empty, "-k", "test_z", timeout=600)
    alone.assert_outcomes(failed=2)
    assert "no unchanged test in this session tells the machine from a change common to them" in alone.stdout.str()
