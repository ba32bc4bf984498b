"""Samples, profiles and measurements made of the recorded toy_cnn trace, for the tests of several modules.

Everything here is read from ``tests/data`` (see ``TRACES_README.md``): the toy_cnn program, its input and the trace
recorded from it, and the MobileNetV3-like recordings the pair tests replay. Nothing is invented: a test that
needs a change adds it to these runs in a known amount.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_sme2.analysis.run import analyze
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.gate.checks import REQUIRED_BY_ON_OFF, Sme2Evidence
from pytest_sme2.gate.verdict import Samples
from pytest_sme2.measure.profile import Profile
from pytest_sme2.measure.recipe import Measurement

DATA = Path(__file__).parent / "data"
TOY_PTE = DATA / "toy_cnn_fp32_xnnpack.pte"
TOY_INPUT = DATA / "toy_cnn_input_fp32.bin"
TOY_TRACE = DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"
MOBILE = "mobilenet_v3_small_like_fp32_xnnpack"


def toy_samples(first: int, last: int, blocks: tuple[int, ...], *, data_movement_plus_ms: float = 0.0,
                label: str = "first measurement") -> Samples:
    """Runs ``first..last-1`` of the recorded toy_cnn trace (E2E and categories), in ``blocks``.

    ``data_movement_plus_ms`` adds a known change to every run's Data Movement (and E2E): a category that is
    0.0 ms in the recording (XNNPACK lays toy_cnn's transposes out at 0 us) growing.
    """
    analysis = analyze(read_etdump(TOY_TRACE), warmup=0)
    e2e = [x + data_movement_plus_ms for x in analysis.e2e_per_run_ms[first:last]]
    cats = {c: tuple(v[first:last]) for c, v in analysis.category_per_run_ms.items()}
    cats["Data Movement"] = tuple(x + data_movement_plus_ms for x in cats["Data Movement"])
    assert sum(blocks) == last - first
    return Samples(tuple(e2e), blocks, cats, blocks, label=label)


def toy_profile(invalid_reason: str = "") -> Profile:
    """A host profile of the recorded toy_cnn trace (first run as warm-up)."""
    return Profile(model={"name": "toy_cnn", "dtype": "fp32", "backend": "xnnpack"}, variant=None, runner="host",
                   build="", threads=1, identity={"arch": "test"},
                   analysis=analyze(read_etdump(TOY_TRACE), warmup=1), invalid_reason=invalid_reason)


def standin_measurement(tmp_path: Path, **kwargs: object) -> Measurement:
    """A measurement of the toy_cnn program and input; ``kwargs`` override the runs, warm-up and blocks."""
    settings = {"runs": 4, "warmup": 1, "blocks": 2, "busy_limit": 1.0, **kwargs}  # what is compared, not how much
    return Measurement(pte=TOY_PTE, inputs=(TOY_INPUT,), label="toy_cnn_fp32_xnnpack", out_dir=tmp_path / "out",
                       model={"name": "toy_cnn", "dtype": "fp32", "backend": "xnnpack"}, **settings)  # type: ignore[arg-type]


def phone_evidence(**kw: Any) -> Sme2Evidence:
    """SME2 kernel evidence from the emulated SME2 phone, an on/off pair asking for it; ``kw`` overrides any field."""
    fields: dict[str, Any] = {"required_by": REQUIRED_BY_ON_OFF, "device_sme2": True, "device": "EmuPhone SME2", **kw}
    return Sme2Evidence(**fields)
