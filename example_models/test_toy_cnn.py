"""Performance suite for ``toy_cnn``: latency vs the stored baseline in every configuration, and
the SME2 on/off speedup when two runner builds are given.

Run: ``pytest example_models/test_toy_cnn.py`` (local runtime) or with ``--sme2-device=android
--sme2-runner ON --sme2-runner-off OFF`` on a phone. Create or refresh baselines with
``--sme2-update-baseline``.
"""

import pytest

from example_models.suite import SMALL_MODEL_LATENCY_PCT, model_configs


# The margin (example_models/suite.py: SMALL_MODEL_LATENCY_PCT) is set from the noise measured on the
# CI VM across sessions (benchmarks/README.md): a quiet phone can gate at 5 %, a shared 2-core VM cannot.
@pytest.mark.parametrize(("dtype", "backend"), model_configs("toy_cnn"))
@pytest.mark.sme2_threshold(latency_pct=SMALL_MODEL_LATENCY_PCT)
def test_latency(dtype, backend, exported_model, sme2_runner, sme2_baseline):
    profile = sme2_runner.profile(exported_model)
    assert profile.model["dtype"] == dtype and profile.model["backend"] == backend
    sme2_baseline.check(profile)


@pytest.mark.sme2_model("toy_cnn", dtype="fp32", backend="xnnpack")
@pytest.mark.sme2_threshold(latency_pct=SMALL_MODEL_LATENCY_PCT, min_speedup=1.2)
def test_sme2_speedup(exported_model, sme2_runner, sme2_baseline):
    """SME2 on vs off, interleaved; skipped on the local runtime, which has no SME2 build switch."""
    pair = sme2_runner.profile_on_off(exported_model)
    sme2_baseline.check(pair)
