"""The count baseline (pytest_sme2.store.baseline): keyed without the host, and its counts read back exactly.

The identity is the committed emulated baseline's (recorded on a Zen 4 host); the counts written are hand-written
(SYNTHETIC: they test the file format, not a model).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_sme2.evidence.instructions import LABEL, InstructionCounts
from pytest_sme2.store.baseline import Baseline, BaselineStore, counts_identity, identity_id

pytestmark = pytest.mark.fast

BASELINES = Path(__file__).parents[2] / ".sme2_baselines"
EMULATED = next(BASELINES.glob("example_models_test_toy_cnn.py_test_sme2_speedup*"))


def _identity() -> dict[str, object]:
    return dict(json.loads(EMULATED.read_text())["identity"])


def test_the_count_identity_is_the_emulated_cpu_not_the_host() -> None:
    zen4 = _identity()
    assert "; on AuthenticAMD family 25 model 17" in zen4["emulator"]  # what a baseline of emulated time is keyed on
    intel = {**zen4, "emulator": zen4["emulator"].replace("AuthenticAMD family 25 model 17", "GenuineIntel family 6 "
                                                          "model 207"), "logical_cpus": 8,
             "summary": "another host"}
    assert identity_id(zen4) != identity_id(intel)
    assert counts_identity(zen4) == counts_identity(intel)
    keyed = counts_identity(zen4)
    assert keyed["emulator"] == "qemu-aarch64 11.1.3, -cpu max, SVE 512 bit, SVL 256 bit; SME2 yes"
    assert keyed["counted"] == LABEL and keyed["variant"] == "sme2_on" and "logical_cpus" not in keyed
    # Another emulated CPU or QEMU is another count baseline.
    assert counts_identity({**zen4, "emulator": zen4["emulator"].replace("11.1.3", "11.2.0")}) != keyed
    assert counts_identity({**zen4, "isa": ["asimd"]}) != keyed


def test_a_count_baseline_reads_back_with_both_arms(tmp_path: Path) -> None:
    on = InstructionCounts(total=10, by_kind={"sme": 4, "scalar": 6}, by_mnemonic={"fmopa za": 2}, cpu="max",
                           qemu_version="11.1.3")
    off = InstructionCounts(total=30, by_kind={"neon": 24, "scalar": 6}, cpu="max,sme=off", qemu_version="11.1.3")
    store = BaselineStore(tmp_path)
    written = store.save(Baseline(test_id="t.py::test_a", identity=counts_identity(_identity()), samples_ms=(41.0,),
                                  block_sizes=(1,), instructions=on, instructions_off=off))
    back = store.read(written)
    assert back.instructions == on and back.instructions_off == off
    assert written == store.path_for("t.py::test_a", counts_identity(_identity()))
