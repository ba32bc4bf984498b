"""The lab on arm64 emulated phones: the pool reads what QEMU's CPUs report, and the real aarch64 runner runs each test
where it should (SME2 on ``-cpu max``, none on ``-cpu max,sme=off``). Times here are emulated time, never a phone's."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from emulated_device.fixtures import MakePhone

import pytest_sme2.gate.verdict  # noqa: F401  (numpy loads once per process: before pytester's in-process runs)
from pytest_sme2.runners.build import RunnerBuild

pytestmark = pytest.mark.emulated_device


def test_each_test_runs_real_arm_code_on_the_phone_that_serves_it(
    make_emulated_phone: MakePhone, aarch64_runner_build: RunnerBuild,
    example_export: Callable[[str, str], Any], tmp_path: Path, pytester: pytest.Pytester,
) -> None:
    sme2, nosme = make_emulated_phone("sme2_phone", arm64=True), make_emulated_phone("nosme_phone", arm64=True)
    fp32 = example_export("fp32", "xnnpack")
    pytester.makepyfile(test_arm=textwrap.dedent(f"""\
        import pytest
        from pathlib import Path

        class Exported:
            name, dtype, backend = "toy_cnn", "fp32", "xnnpack"
            pte_path = Path({str(fp32.pte_path)!r})
            input_files = tuple(Path(p) for p in {[str(p) for p in fp32.input_files]!r})

            def to_dict(self):
                return {{"name": self.name, "dtype": self.dtype, "backend": self.backend}}

        @pytest.mark.sme2_device("sme2")
        def test_sme2(sme2_runner):
            sme2_runner.profile(Exported())

        @pytest.mark.sme2_device("no-sme2")
        def test_no_sme2(sme2_runner):
            sme2_runner.profile(Exported())

        @pytest.mark.sme2_device(matrix=True)
        def test_everywhere(sme2_runner):
            sme2_runner.profile(Exported())
        """))
    results = tmp_path / "results.json"
    libs = (aarch64_runner_build.path.parent / "lib").resolve()
    outcome = pytester.runpytest(
        "-n", "auto", "--sme2-pool=adb", f"--sme2-runner={aarch64_runner_build.path}", f"--sme2-runner-libs={libs}",
        "--sme2-blocks=1", "--sme2-runs=2", "--sme2-warmup=0", "--sme2-busy-limit=100", f"--sme2-json={results}",
        "-p", "no:cacheprovider", "-rs")
    text = outcome.stdout.str()
    outcome.assert_outcomes(passed=4)
    # The pool's lines say what QEMU's CPUs report, and that the phones are emulated.
    pool = text.split("rootdir:")[0]
    assert pool.count("EMULATED (Android emulator") == 2, pool
    assert "EmuPhone_SME2: adb" in pool and "SME2 yes" in pool and "SME2 no" in pool
    records = {r["test_id"].partition("::")[2]: r for r in json.loads(results.read_text())["tests"]}
    assert len(records) == 4
    where = {name: r["profile"]["device"]["serial"] for name, r in records.items()}
    assert where == {"test_sme2": sme2.serial, "test_no_sme2": nosme.serial,
                     "test_everywhere[EmuPhone_SME2]": sme2.serial, "test_everywhere[EmuPhone_NoSME]": nosme.serial}
    cpus = {name: r["profile"]["identity"]["emulator"] for name, r in records.items()}
    assert "-cpu max" in cpus["test_sme2"] and "sme=off" not in cpus["test_sme2"]
    assert "-cpu max,sme=off" in cpus["test_no_sme2"]
    # The real runner ran once per test on each phone: two tests each.
    for phone in (sme2, nosme):
        runs = [c for c in phone.history.commands if "--etdump_path" in c]
        assert len(runs) == 2, runs
