"""A program stored in an artifact store and the candidate profile that measured it: what the judge's reference
measurement reads (tests/store/test_artifacts_runner.py, tests/measure/test_rebuild.py)."""

from __future__ import annotations

from pathlib import Path

from pytest_sme2.measure.profile import Profile
from pytest_sme2.measure.recipe import Measurement
from pytest_sme2.store.artifacts import ArtifactStore


def stored_candidate(tmp_path: Path, store: ArtifactStore) -> tuple[str, tuple[str, ...], Profile]:
    """A ``model.pte`` and ``input_0.bin`` (their names as bytes) written to ``tmp_path`` and put in ``store``: their
    sha256s and a host profile that measured them (its other fields are not read by the reference measurement)."""
    for name in ("model.pte", "input_0.bin"):
        (tmp_path / name).write_bytes(name.encode())
    pte, inputs = store.put(tmp_path / "model.pte"), (store.put(tmp_path / "input_0.bin"),)
    measurement = Measurement(pte=tmp_path / "model.pte", inputs=(tmp_path / "input_0.bin",), label="m")
    candidate = Profile(model={}, variant=None, runner="host", build="", threads=1, identity={},
                        analysis=None, measurement=measurement)  # type: ignore[arg-type]  # not read here
    return pte, inputs, candidate
