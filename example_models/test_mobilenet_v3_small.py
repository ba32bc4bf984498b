"""Performance suite for ``mobilenet_v3_small``: latency and its dominant operator categories vs the stored baseline
in every configuration, XNNPACK vs the portable kernels, and the SME2 on/off speedup when two runner builds
are given.

Run: ``pytest example_models/test_mobilenet_v3_small.py`` (local runtime) or with ``--sme2-device=android
--sme2-runner ON --sme2-runner-off OFF`` on a phone; ``--sme2-device=qemu`` runs the SME2 on/off test on any Linux
machine (emulated). Create or refresh baselines with
``--sme2-update-baseline``.
"""

import pytest

from example_models.suite import CATEGORY_PCT, LATENCY_PCT, model_configs


# The margin and why it holds on a noisy VM: example_models/suite.py (LATENCY_PCT).
@pytest.mark.parametrize(("dtype", "backend"), model_configs("mobilenet_v3_small"))
@pytest.mark.sme2_threshold(latency_pct=LATENCY_PCT, categories={"GEMM": CATEGORY_PCT, "Convolution": CATEGORY_PCT})
def test_latency(dtype, backend, exported_model, sme2_runner, sme2_baseline):
    profile = sme2_runner.profile(exported_model)
    assert profile.model["dtype"] == dtype and profile.model["backend"] == backend
    sme2_baseline.check(profile)


@pytest.mark.sme2_model("mobilenet_v3_small", dtype="fp32", backend="xnnpack")
@pytest.mark.sme2_threshold(latency_pct=LATENCY_PCT, min_speedup=1.2)
def test_sme2_speedup(exported_model, sme2_runner, sme2_baseline):
    """SME2 on vs off, interleaved; skipped on the local runtime, which has no SME2 build switch: on any Linux
    machine `--sme2-device=qemu` runs it (emulated), on SME2 hardware `--sme2-device=android` or `host`."""
    pair = sme2_runner.profile_on_off(exported_model)
    sme2_baseline.check(pair)


@pytest.mark.sme2_model("mobilenet_v3_small", dtype="fp32", backend="xnnpack")
@pytest.mark.sme2_threshold(latency_pct=LATENCY_PCT, min_speedup=2.0)
def test_xnnpack_vs_portable(exported_model, sme2_runner, sme2_baseline):
    """The XNNPACK export against the portable kernels, interleaved on the local runtime: the speedup is gated
    and the reports show it per operator category (as SME2 on/off does on a device)."""
    pair = sme2_runner.compare_backends(exported_model, "portable", "xnnpack")
    sme2_baseline.check(pair)
