"""A pytester project that gates one example model in few runs, for the tests that run the plugin end to end."""

from __future__ import annotations

from pathlib import Path

EXAMPLE_MODELS = Path(__file__).parents[1] / "example_models" / "models.py"
#: Few runs and blocks: these tests check what the plugin does with a verdict, not the verdict's power.
FAST = ["--sme2-runs", "4", "--sme2-warmup", "1", "--sme2-blocks", "4", "--sme2-busy-limit=100",
        "-p", "no:cacheprovider", "-p", "no:randomly"]
#: One gated latency test of toy_cnn int8 (a 50% threshold: only what the test injects fails it).
GATED_TEST = """
    import pytest

    @pytest.mark.sme2_model("toy_cnn", dtype="int8")
    @pytest.mark.sme2_threshold(latency_pct=50)
    def test_latency(exported_model, sme2_runner, sme2_baseline):
        sme2_baseline.check(sme2_runner.profile(exported_model))
"""
