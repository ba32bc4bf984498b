"""The lab end to end: emulated phones behind one real adb server, a pool of them, pytest-xdist routing each test.

The phones are emulated (tests/emulated_device): two with the SME2 profile (one the pool connects itself with
``--sme2-adb-connect``, as an STF device is connected), one without SME2, one unauthorized. Their runner is the
stand-in replaying the recorded toy_cnn trace (tests/standin): what is under test is where each test runs, not what
the runner computes, so no number here is asserted beyond the recorded one being read back.
"""

from __future__ import annotations

import json
import re
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

RECORDED = textwrap.dedent(f"""\
    import pytest
    from pathlib import Path

    class Recorded:
        name, dtype, backend = "toy_cnn", "fp32", "xnnpack"
        pte_path, input_files = Path({str(TOY_PTE)!r}), (Path({str(TOY_INPUT)!r}),)

        def to_dict(self):
            return {{"name": self.name, "dtype": self.dtype, "backend": self.backend}}
    """)

TESTS = RECORDED + textwrap.dedent("""\

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
    def test_matrix(sme2_runner, sme2_baseline):
        sme2_baseline.check(sme2_runner.profile(Recorded()))

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
    results, markdown, html = tmp_path / "results.json", tmp_path / "report.md", tmp_path / "report.html"
    outcome = pytester.runpytest(
        "-n", "auto", "--sme2-pool=adb", f"--sme2-adb-connect={remote.address}", f"--sme2-runner={on}",
        "--sme2-blocks=1", "--sme2-runs=5", "--sme2-warmup=0", f"--sme2-json={results}", f"--sme2-markdown={markdown}",
        f"--html={html}", "-p", "no:cacheprovider", "-rs")
    text = outcome.stdout.str()
    # The pool, printed once: three devices, the unauthorized one left out with what to do.
    assert text.count("sme2 device pool: 3 device(s), 1 left out") == 1, text
    assert "is unauthorized: this computer's adb key has not been accepted" in text
    assert "SME2 yes" in text and "SME2 no" in text
    # What the phones report: uid 2000 without an su (not rooted), the profile's governor, no SVL in their /proc.
    assert text.count("; not rooted; governor schedutil") == 3, text
    assert "SVL" not in text.split("rootdir:")[0]
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
    # Which device ran which test, in every report; the matrix test's row has a cell on each SME2 phone.
    devices = {r[0]["device"] for r in records.values() if r[0]["device"]}
    assert devices == {"EmuPhone_SME2", "EmuPhone_SME2_2", "EmuPhone_NoSME"}
    assert "MEASURED         test_lab.py::test_no_sme2 on EmuPhone_NoSME" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("test_lab.py::test_matrix "))
    assert row.count("recorded") == 2 and "—" in row, row  # recorded on both SME2 phones, not on the other
    report = markdown.read_text()
    assert "## Tests by device" in report and "| Device (pool) | `EmuPhone_NoSME` |" in report
    assert "EmuPhone_SME2 (SME2)" in report and "EmuPhone_NoSME (no SME2)" in report
    page = html.read_text()
    assert "Tests by device" in page and "EmuPhone_SME2_2 (SME2)" in page
    # Each device's run of the matrix test recorded a baseline of its own.
    baselines = sorted(p.name for p in (pytester.path / ".sme2_baselines").rglob("*.json"))
    assert len(baselines) == 2 and [b for b in baselines if "EmuPhone_SME2_2" in b], baselines


DROP_TESTS = RECORDED + textwrap.dedent("""\

    @pytest.mark.sme2_device("sme2")
    @pytest.mark.parametrize("n", range(3))
    def test_sme2(n, sme2_runner):
        sme2_runner.profile(Recorded())

    @pytest.mark.sme2_device("sme2", matrix=True)
    def test_matrix(sme2_runner):
        sme2_runner.profile(Recorded())

    @pytest.mark.sme2_device("no-sme2")
    def test_no_sme2(sme2_runner):
        sme2_runner.profile(Recorded())
    """)


def test_a_phone_unplugged_mid_test_makes_it_invalid_and_its_next_test_moves(
    make_emulated_phone: MakePhone, adb_server: AdbServer, tmp_path: Path, pytester: pytest.Pytester,
) -> None:
    first, nosme, second = (make_emulated_phone("sme2_phone"), make_emulated_phone("nosme_phone"),
                            make_emulated_phone("sme2_phone"))
    # The pool names two phones of one model in address order; the second is the one unplugged.
    kept, doomed = sorted((first, second), key=lambda p: p.address)
    doomed_name = "EmuPhone_SME2_2"
    # Each runner process waits 2 s before it replays the trace: time to pull the cable while it runs.
    on = make_standin(tmp_path / "on", trace=TOY_TRACE, pause_s=2.0)
    pytester.makepyfile(test_drop=DROP_TESTS)
    results = tmp_path / "results.json"

    def unplug_once_its_first_runner_started() -> None:
        if poll(lambda: any("--etdump_path" in c for c in doomed.history.commands), timeout=300):
            time.sleep(0.5)
            doomed.go_offline()  # the cable pulled: its adbd drops the transport and refuses to reconnect

    unplug = threading.Thread(target=unplug_once_its_first_runner_started)
    unplug.start()
    try:
        outcome = pytester.runpytest(
            "-n", "auto", "--sme2-pool=adb", f"--sme2-runner={on}", "--sme2-blocks=1", "--sme2-runs=5",
            "--sme2-warmup=0", f"--sme2-json={results}", "-p", "no:cacheprovider", "-rs", "-v")
    finally:
        unplug.join()
        doomed.come_online()
    text = outcome.stdout.str()
    runs_on_doomed = [c for c in doomed.history.commands if "--etdump_path" in c]
    assert len(runs_on_doomed) == 1, runs_on_doomed  # it dropped in its first test and ran nothing after
    records = _records(results)
    assert all(len(r) == 1 for r in records.values()), records  # exactly once
    # The test it dropped in: INVALID with the reason, nothing of its run recorded; reported, not passed.
    dropped = records[f"test_drop.py::test_matrix[{doomed_name}]"][0]
    assert dropped["device"] == doomed_name and dropped["verdict"]["status"] == "invalid"
    assert f"device {doomed_name} (adb {doomed.serial}) dropped during this test" in dropped["note"]
    assert dropped["profile"] is None
    assert dropped["outcome"] == "skipped"
    # The test it held next went to the other SME2 phone, and said so.
    moved = re.findall(rf"sme2 lab: test_drop.py::(test_sme2\[\d\])@sme2:sme2: {doomed_name} dropped before it ran",
                       text)
    assert len(moved) == 1, text
    assert _serial(records[f"test_drop.py::{moved[0]}"][0]) == kept.serial
    assert {_serial(records[f"test_drop.py::test_sme2[{n}]"][0]) for n in range(3)} == {kept.serial}
    assert _serial(records["test_drop.py::test_matrix[EmuPhone_SME2]"][0]) == kept.serial
    assert _serial(records["test_drop.py::test_no_sme2"][0]) == nosme.serial
    outcome.assert_outcomes(passed=5, skipped=1)


def test_without_xdist_the_session_holds_the_pools_first_device(
    make_emulated_phone: MakePhone, tmp_path: Path, pytester: pytest.Pytester,
) -> None:
    nosme, sme2 = make_emulated_phone("nosme_phone"), make_emulated_phone("sme2_phone")
    on = make_standin(tmp_path / "on", trace=TOY_TRACE)
    pytester.makepyfile(test_one=DROP_TESTS)
    results = tmp_path / "results.json"
    outcome = pytester.runpytest("--sme2-pool=adb", f"--sme2-runner={on}", "--sme2-blocks=1", "--sme2-runs=5",
                                 "--sme2-warmup=0", f"--sme2-json={results}", "-p", "no:cacheprovider", "-rs")
    # EmuPhone_NoSME comes first by name: the one test it serves runs there, the others say how to reach theirs.
    outcome.assert_outcomes(passed=1, skipped=4)
    outcome.stdout.fnmatch_lines([
        "*without pytest-xdist this session holds EmuPhone_NoSME only: -n auto gives one worker per device*",
        "*runs on EmuPhone_SME2 of the pool, and this session's workers hold EmuPhone_NoSME: run with pytest-xdist, "
        "one worker per device (-n auto)*"])
    (record,) = json.loads(results.read_text())["tests"]
    assert record["test_id"] == "test_one.py::test_no_sme2" and record["device"] == "EmuPhone_NoSME"
    assert _serial(record) == nosme.serial and not [c for c in sme2.history.commands if "--etdump_path" in c]
