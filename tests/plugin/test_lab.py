"""The lab end to end: emulated phones behind one real adb server, a pool of them, pytest-xdist routing each test.

The phones are emulated (tests/emulated_device): two with the SME2 profile (one the pool connects itself with
``--sme2-adb-connect``, as an STF device is connected), one without SME2, one unauthorized. Their runner is the
stand-in replaying the recorded toy_cnn trace (tests/standin): what is under test is where each test runs, not what
the runner computes, so no number here is asserted beyond the recorded one being read back.
"""

from __future__ import annotations

import json
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from emulated_device.device import EmulatedPhone
from emulated_device.fixtures import AdbServer, MakePhone, poll
from standin import make_standin

import pytest_sme2.gate.verdict  # noqa: F401  (numpy loads once per process: before pytester's in-process runs)

pytestmark = pytest.mark.emulated_device

DATA = Path(__file__).parents[1] / "data"
TOY_PTE = DATA / "toy_cnn_fp32_xnnpack.pte"
TOY_INPUT = DATA / "toy_cnn_input_fp32.bin"
TOY_TRACE = DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"

TESTS = textwrap.dedent(f"""\
    import pytest
    from pathlib import Path

    class Recorded:
        name, dtype, backend = "toy_cnn", "fp32", "xnnpack"
        pte_path, input_files = Path({str(TOY_PTE)!r}), (Path({str(TOY_INPUT)!r}),)

        def to_dict(self):
            return {{"name": self.name, "dtype": self.dtype, "backend": self.backend}}

    @pytest.mark.parametrize("n", range(4))
    def test_any(n, sme2_runner):
        sme2_runner.profile(Recorded())

    @pytest.mark.sme2_device("sme2")
    @pytest.mark.parametrize("n", range(3))
    def test_sme2(n, sme2_runner):
        sme2_runner.profile(Recorded())

    @pytest.mark.sme2_device("no-sme2")
    def test_no_sme2(sme2_runner):
        sme2_runner.profile(Recorded())

    @pytest.mark.sme2_device("sme2,svl>=4096")
    def test_long_vectors(sme2_runner):
        sme2_runner.profile(Recorded())

    @pytest.mark.sme2_device("sme2", matrix=True)
    def test_matrix(sme2_runner):
        sme2_runner.profile(Recorded())

    def test_plain():
        pass
    """)


def _records(path: Path) -> dict[str, list[dict[str, Any]]]:
    """test id -> every record of it in the results file (a test that ran twice has two)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for record in json.loads(path.read_text())["tests"]:
        out.setdefault(record["test_id"], []).append(record)
    return out


def _serial(record: dict[str, Any]) -> str:
    return str(record["profile"]["device"]["serial"])


def _lab(make_emulated_phone: MakePhone, adb_server: AdbServer) -> tuple[EmulatedPhone, EmulatedPhone, EmulatedPhone]:
    """An SME2 phone and one without SME2 on the adb server, one SME2 phone the pool must `adb connect` itself, and
    an unauthorized phone."""
    sme2, nosme, remote = (make_emulated_phone("sme2_phone"), make_emulated_phone("nosme_phone"),
                           make_emulated_phone("sme2_phone"))
    make_emulated_phone("sme2_phone", unauthorized=True)
    adb_server.client().disconnect(remote.address)
    assert poll(lambda: adb_server.state(remote.address) == "absent")
    return sme2, nosme, remote


def test_every_test_runs_once_on_a_device_that_serves_it(
    make_emulated_phone: MakePhone, adb_server: AdbServer, tmp_path: Path, pytester: pytest.Pytester,
) -> None:
    sme2, nosme, remote = _lab(make_emulated_phone, adb_server)
    on = make_standin(tmp_path / "on", trace=TOY_TRACE)
    pytester.makepyfile(test_lab=TESTS)
    results = tmp_path / "results.json"
    outcome = pytester.runpytest(
        "-n", "auto", "--sme2-pool=adb", f"--sme2-adb-connect={remote.address}", f"--sme2-runner={on}",
        "--sme2-blocks=1", "--sme2-runs=5", "--sme2-warmup=0", f"--sme2-json={results}", "-p", "no:cacheprovider",
        "-rs", "-v")
    text = outcome.stdout.str()
    # The pool, printed once: three devices, the unauthorized one left out with what to do.
    assert text.count("sme2 device pool: 3 device(s), 1 left out") == 1, text
    assert "is unauthorized: this computer's adb key has not been accepted" in text
    assert "SME2 yes" in text and "SME2 no" in text
    outcome.assert_outcomes(passed=11, skipped=1)
    outcome.stdout.fnmatch_lines(["*no device of the pool can run it (needs sme2,svl>=4096)*"])
    records = _records(results)
    sme2_serials = {sme2.serial, remote.serial}
    assert all(len(r) == 1 for r in records.values()), records  # exactly once
    ran = {test_id.partition("::")[2]: _serial(r[0]) for test_id, r in records.items() if r[0]["profile"]}
    assert {ran[f"test_sme2[{n}]"] for n in range(3)} <= sme2_serials
    assert ran["test_no_sme2"] == nosme.serial
    assert {ran[f"test_any[{n}]"] for n in range(4)} <= {sme2.serial, nosme.serial, remote.serial}
    matrix = {k: v for k, v in ran.items() if k.startswith("test_matrix[")}
    assert sorted(matrix.values()) == sorted(sme2_serials)  # once on each SME2 phone, named by the device
    for name, serial in matrix.items():
        assert records[f"test_lab.py::{name}"][0]["device"] == name.removeprefix("test_matrix[").removesuffix("]")
        assert serial in sme2_serials
