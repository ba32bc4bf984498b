"""The emulated Armv9 device (``--sme2-device=qemu``): real Arm code with SME2 on and off, under QEMU.

One pytest project, run for real in a subprocess: toy_cnn fp32 and int8 on XNNPACK, measured SME2 off/on on the
aarch64 runner under ``qemu-aarch64`` (``-cpu max`` and ``-cpu max,sme=off``), and three arms made wrong on
purpose, each of which must fail its on/off test with the reason:

- ``test_forced_off.py``: the SME2-on arm forced onto the ``sme=off`` CPU (``pytest_sme2.runners.qemu.CPUS``
  patched by the test module) — XNNPACK falls back from its SME2 kernels, fp32 and int8;
- ``test_perturbed.py``: the SME2-on arm fed another input (every value x1.5), so the two arms compute
  different outputs.

The project runs once per test run (``-n 2``: the first worker runs it under a lock, the other reads its
files), first on the host (a baseline of this machine for ``test_profile``), then on the emulated device.
Every expectation is read from what the runs produced: the trace's operator names, the kernels QEMU logged,
the outputs files — checked here with rules of this file, not pytest_sme2's.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.runners.build import RunnerBuild
from pytest_sme2.store.files import file_lock

pytestmark = pytest.mark.slow

EXAMPLE_MODELS = Path(__file__).parents[2] / "example_models" / "models.py"
#: Short measurements: these tests check what was run and judged, not a latency (emulated time is no device time).
PLAIN = ["-p", "no:cacheprovider", "-p", "no:randomly", "-rs"]
FAST = ["--sme2-busy-limit=100", "--sme2-blocks=2", "--sme2-runs=1", "--sme2-warmup=0", *PLAIN]

ON_OFF = """
@pytest.mark.sme2_model("toy_cnn", dtype="{dtype}", backend="xnnpack")
@pytest.mark.sme2_threshold(min_speedup=1.2)
def test_on_off_{dtype}(exported_model, sme2_runner, sme2_baseline):
    sme2_baseline.check(sme2_runner.profile_on_off(exported_model))
"""
PAIRS = "import pytest\n" + ON_OFF.format(dtype="fp32") + ON_OFF.format(dtype="int8") + textwrap.dedent("""
    @pytest.mark.sme2_model("toy_cnn", dtype="fp32", backend="xnnpack")
    def test_profile(exported_model, sme2_runner, sme2_baseline):
        sme2_baseline.check(sme2_runner.profile(exported_model))
    """)
FORCED_OFF = textwrap.dedent("""\
    import pytest
    from pytest_sme2.runners import qemu
    from pytest_sme2.runners.base import SME2_ON

    @pytest.fixture(autouse=True)
    def sme2_on_arm_on_the_sme_off_cpu(monkeypatch):
        monkeypatch.setattr(qemu, "CPUS", {**qemu.CPUS, SME2_ON: qemu.CPU_SME2_OFF})
    """) + ON_OFF.format(dtype="fp32") + ON_OFF.format(dtype="int8")
PERTURBED = textwrap.dedent("""\
    import numpy as np
    import pytest
    from pytest_sme2.runners.base import SME2_ON
    from pytest_sme2.runners.qemu import QemuRunner

    @pytest.fixture(autouse=True)
    def sme2_on_arm_gets_another_input(monkeypatch, tmp_path):
        command = QemuRunner.command

        def perturbed(self, request, runner, trace_path):
            cmd = command(self, request, runner, trace_path)
            if request.variant == SME2_ON:
                at = cmd.index("--inputs") + 1
                files = []
                for path in cmd[at].split(","):
                    out = tmp_path / ("x1.5_" + path.rsplit("/", 1)[-1])
                    (np.fromfile(path, dtype=np.float32) * np.float32(1.5)).tofile(out)
                    files.append(str(out))
                cmd[at] = ",".join(files)
            return cmd

        monkeypatch.setattr(QemuRunner, "command", perturbed)
    """) + ON_OFF.format(dtype="fp32")

#: KleidiAI's SME/SME2 routines by name (``kai_<op>_..._sme`` / ``..._sme2_mopa``): this file's own rule.
KAI_SME = re.compile(r"^kai_\w*_sme2?(_|$)")


@dataclass(frozen=True)
class Sessions:
    """What the project's two runs left: their output, the JSON results, the reports, the baselines."""

    project: Path
    host_out: str
    #: the emulated session with the qemu device's defaults (evidence only: one execution per arm)
    out: str
    returncode: int
    #: test_profile again, with --sme2-emulated-timing (emulated time measured, gated and recorded)
    timed_out: str

    @property
    def results(self) -> dict[str, Any]:
        doc = json.loads((self.project / "r.json").read_text())
        return {t["test_id"]: t for t in doc["tests"]}

    def test(self, node: str) -> dict[str, Any]:
        return self.results[node]

    def check(self, node: str, name: str) -> dict[str, Any]:
        return next(c for c in self.test(node)["verdict"]["checks"] if c["name"] == name)


@pytest.fixture(scope="session")
def emulated(sme2_shared_cache: Path, aarch64_runner_build: RunnerBuild, host_runner_build: RunnerBuild,
             sme2_qemu: Path, example_export: Callable[[str, str], Any]) -> Sessions:
    """Run the project on the host, then on the emulated device — once per test run, whichever worker is first."""
    project = sme2_shared_cache.parent / "qemu_project"
    with file_lock(sme2_shared_cache.parent / ".qemu_project.lock"):
        done = project / "done.json"
        if not done.is_file():
            for dtype in ("fp32", "int8"):
                example_export(dtype, "xnnpack")
            project.mkdir(exist_ok=True)
            (project / "pytest.ini").write_text(f"[pytest]\nsme2_models = {EXAMPLE_MODELS}\n")
            (project / "test_pairs.py").write_text(PAIRS)
            (project / "test_forced_off.py").write_text(FORCED_OFF)
            (project / "test_perturbed.py").write_text(PERTURBED)
            pytest_ = [sys.executable, "-m", "pytest", f"--sme2-cache-dir={sme2_shared_cache}"]
            host = subprocess.run([*pytest_, *FAST, "--sme2-device=host", "test_pairs.py::test_profile"], cwd=project,
                                  capture_output=True, text=True, timeout=900, check=False)
            assert host.returncode == 0, host.stdout[-3000:] + host.stderr[-2000:]
            # The qemu device's own defaults: what the README's emulated command runs.
            # Its runs in the project (not in pytest's temp dir, which other sessions on a shared machine rotate away
            # before these tests read the outputs files).
            qemu = subprocess.run([*pytest_, *PLAIN, "--sme2-device=qemu", "--sme2-json=r.json", "--sme2-markdown=r.md",
                                   "--html=r.html", "--self-contained-html", "--sme2-out-dir=runs"], cwd=project,
                                  capture_output=True, text=True, timeout=1800, check=False)
            timed = subprocess.run([*pytest_, *FAST, "--sme2-device=qemu", "--sme2-emulated-timing",
                                    "--sme2-json=timed.json", "test_pairs.py::test_profile"], cwd=project,
                                   capture_output=True, text=True, timeout=900, check=False)
            done.write_text(json.dumps({"host_out": host.stdout, "out": qemu.stdout + qemu.stderr,
                                        "returncode": qemu.returncode, "timed_out": timed.stdout + timed.stderr}))
        ran = json.loads(done.read_text())
    return Sessions(project, ran["host_out"], ran["out"], ran["returncode"], ran["timed_out"])


PAIR_TESTS = ["test_pairs.py::test_on_off_fp32", "test_pairs.py::test_on_off_int8"]


def test_the_session_ran_every_test(emulated: Sessions) -> None:
    outcomes = {k: t["outcome"] for k, t in emulated.results.items()}
    assert outcomes == {
        **dict.fromkeys(PAIR_TESTS, "passed"), "test_pairs.py::test_profile": "passed",
        "test_forced_off.py::test_on_off_fp32": "failed", "test_forced_off.py::test_on_off_int8": "failed",
        "test_perturbed.py::test_on_off_fp32": "failed"}, emulated.out[-4000:]
    assert emulated.returncode == 1


# ------------------------------------------------------------------------------------------ what passes


@pytest.mark.parametrize("node", PAIR_TESTS)
def test_on_off_gates_kernels_and_numerics_not_the_speedup(emulated: Sessions, node: str) -> None:
    dtype = node.rsplit("_", 1)[-1]
    kernels = emulated.check(node, "sme2_kernels")
    assert kernels["status"] == "pass" and not kernels["advisory"]
    assert {"fp32": "(NHWC, PF32)", "int8": "(NHWC, PQS8, QS8, QC8W)"}[dtype] in kernels["message"]
    numerics = emulated.check(node, "numerics")
    assert numerics["status"] == "pass" and not numerics["advisory"]
    assert "SME2 off and on agree" in numerics["message"]
    # 1 block per arm is too few for an interval: the emulated ratio is still ungated, never "not judged".
    speedup = emulated.check(node, "min_speedup")
    assert speedup["advisory"] and speedup["message"].startswith("not a device: not gated")
    assert "min_speedup 1.20x applies on a device" in speedup["message"]
    assert all(c["status"] == "pass" or c["advisory"] for c in emulated.test(node)["verdict"]["checks"])


@pytest.mark.parametrize("node", PAIR_TESTS)
def test_the_arms_traces_name_sme_operators_only_when_on(emulated: Sessions, node: str) -> None:
    t = emulated.test(node)
    gemms = {arm: [o["name"] for o in t[arm]["analysis"]["operator_details"]
                   if re.match(r"(Convolution|Fully Connected) \(", o["name"])] for arm in ("profile", "profile_off")}
    assert gemms["profile"] and gemms["profile_off"]
    # XNNPACK names its SME packed-LHS operators by their packed types (PF32, PQS8); the SME2-off CPU has none.
    assert all(re.search(r"\((NHWC|NC), P(F32|QS8)\b", name) for name in gemms["profile"])
    assert not any(re.search(r"\bP(F32|F16|QS8)\b", name) for name in gemms["profile_off"])


@pytest.mark.parametrize("node", PAIR_TESTS)
def test_qemu_logged_sme2_kernels_on_the_on_arm_only(emulated: Sessions, node: str) -> None:
    t = emulated.test(node)
    on = t["profile"]["analysis"]["executed_kernels"]["functions"]
    off = t["profile_off"]["analysis"]["executed_kernels"]["functions"]
    on_sme2 = [f["name"] for f in on if f["sme2"]]
    assert on_sme2 and all("sme2" in name for name in on_sme2)
    assert any(name.startswith("kai_run_matmul") for name in on_sme2)
    assert [f["name"] for f in off if f["sme2"]] == []
    assert [f["name"] for f in off if KAI_SME.match(f["name"])] == []
    # Both arms ran the same program: most of what executed is common to both.
    assert len({f["name"] for f in on} & {f["name"] for f in off}) > 100


@pytest.mark.parametrize("node", PAIR_TESTS)
def test_the_outputs_of_both_arms_agree_within_the_dtype_tolerance(emulated: Sessions, node: str) -> None:
    import numpy as np

    from pytest_sme2.evidence.numerics import read_outputs

    t = emulated.test(node)
    last = {arm: [r["metadata"]["outputs_path"] for r in t[arm]["runs"] if r["metadata"].get("outputs_path")][-1]
            for arm in ("profile", "profile_off")}
    on, off = (read_outputs(last[arm])[0].values.astype(np.float64) for arm in ("profile", "profile_off"))
    worst = float(np.max(np.abs(on - off)) / np.max(np.abs(off)))
    # int8 kernels requantize to the same grid (measured bitwise equal); fp32 differs in accumulation order only.
    assert worst <= {"fp32": 1e-5, "int8": 0.0}[node.rsplit("_", 1)[-1]]


def test_every_report_says_emulated(emulated: Sessions) -> None:
    for node in PAIR_TESTS:
        assert emulated.test(node)["emulated"] is True
        line = next(line for line in emulated.out.splitlines() if node in line and "median" in line)
        assert "(emulated)" in line
        assert "speedup" not in line.lower()  # an emulated ratio is never presented as a speedup
    md = (emulated.project / "r.md").read_text()
    assert "emulated" in md.lower() and "test_on_off_int8" in md
    assert "**Speedup:" not in md and "**Emulated time ratio (not a speedup" in md
    page = html.unescape((emulated.project / "r.html").read_text())
    assert "EMULATED" in page and "emulated" in page


def test_by_default_the_emulated_device_runs_each_arm_once_and_gates_no_time(emulated: Sessions) -> None:
    """Emulated time gates nothing of the SME2 question, and one tiny_transformer fp32 execution with SME2
    on took 48 s under QEMU on an Intel Xeon: the default is the evidence (the trace, QEMU's log of the kernels that
    ran) and the outputs, from one execution per arm, its time shown as emulated, never compared or recorded."""
    for node in [*PAIR_TESTS, "test_pairs.py::test_profile"]:
        t = emulated.test(node)
        for arm in ("profile", "profile_off") if node in PAIR_TESTS else ("profile",):
            m = t[arm]["measurement"]
            assert (m["blocks"], m["runs"], m["warmup"]) == (1, 1, 0), (node, arm)
            assert [(r["warmup"], len(r["e2e_ms"])) for r in t[arm]["runs"]] == [(0, 1)], (node, arm)
            assert t[arm]["analysis"]["executed_kernels"] is not None  # + the one in_asm execution
        assert t["verdict"]["notes"][0].startswith("emulated time, not gated: measured for the kernel evidence")
        assert not [c for c in t["verdict"]["checks"] if c["name"] in ("e2e", "latency")]
        assert t["status"] == "pass" and not t["recorded"]
    # No baseline of emulated time is recorded from one execution.
    baselines = [json.loads(p.read_text())["identity"] for p in (emulated.project / ".sme2_baselines").glob("*.json")]
    assert not [i for i in baselines if i.get("emulator") and i.get("variant")]
    assert "sme2: emulated time, not gated: measured for the kernel evidence and the outputs" in emulated.out


def test_identity_names_the_emulator_and_keeps_baselines_apart(emulated: Sessions) -> None:
    profile = emulated.test("test_pairs.py::test_profile")["profile"]
    assert re.match(r"qemu-aarch64 \d+\.\d+(\.\d+)?, -cpu max, .*SME2 yes", profile["identity"]["emulator"])
    assert profile["identity"]["arch"] == "aarch64" and "sme2" in profile["identity"]["isa"]
    # The host run recorded a baseline of this machine for test_profile; the emulated run with
    # --sme2-emulated-timing did not compare with it: it recorded its own, and says the other device's exists.
    assert "RECORDED" in emulated.host_out
    baselines = sorted((emulated.project / ".sme2_baselines").glob("test_pairs.py_test_profile--*.json"))
    assert len(baselines) == 2
    identities = [json.loads(p.read_text())["identity"] for p in baselines]
    assert sorted(bool(i.get("emulator")) for i in identities) == [False, True]
    timed = json.loads((emulated.project / "timed.json").read_text())["tests"]
    assert [(t["test_id"], t["status"]) for t in timed] == [("test_pairs.py::test_profile", "recorded")]
    assert len(timed[0]["profile"]["runs"]) == 2  # --sme2-blocks=2: measured as asked
    assert re.search(r"^sme2: no baselines for this device \(QEMU [0-9.]+ on .*\); baselines exist for: .* \(arch "
                     r"x86_64 != aarch64; emulated != real hardware; .*\) \[1 test\(s\)\]", emulated.timed_out, re.M)


# ------------------------------------------------------------------------------------------ what must fail


@pytest.mark.parametrize(("dtype", "fallback"), [("fp32", "Convolution (NHWC, F32) IGEMM"),
                                                  ("int8", "Convolution (NHWC, QC8) IGEMM")])
def test_an_sme2_on_arm_on_the_sme_off_cpu_fails_with_the_kernel_evidence(emulated: Sessions, dtype: str,
                                                                          fallback: str) -> None:
    node = f"test_forced_off.py::test_on_off_{dtype}"
    check = emulated.check(node, "sme2_kernels")
    assert check["status"] == "regression" and not check["advisory"]
    assert check["message"].startswith("no SME operator: the SME2-on arm of an on/off comparison must run SME2 "
                                       "kernels")
    assert fallback in check["message"]
    # The failure the user reads carries the same evidence.
    failure = emulated.out.split(f"_ test_on_off_{dtype} _", 1)[1] if f"_ test_on_off_{dtype} _" in emulated.out \
        else emulated.out
    assert "no SME operator" in failure and fallback in failure
    assert emulated.test(node)["profile"]["analysis"]["executed_kernels"] is not None
    assert not [f for f in emulated.test(node)["profile"]["analysis"]["executed_kernels"]["functions"] if f["sme2"]]
    assert emulated.check(node, "numerics")["status"] == "pass"  # both arms ran the same CPU


def test_a_perturbed_arm_fails_the_numerics_check(emulated: Sessions) -> None:
    node = "test_perturbed.py::test_on_off_fp32"
    check = emulated.check(node, "numerics")
    assert check["status"] == "regression" and not check["advisory"]
    assert check["message"].startswith("SME2 off and on compute different outputs: 1 output(s): max abs difference")
    assert "tolerance for fp32: 1e-05" in check["message"]
    assert "SME2 off and on compute different outputs" in emulated.out
    assert emulated.check(node, "sme2_kernels")["status"] == "pass"  # the kernels were right; the input was not


@pytest.mark.parametrize("node", PAIR_TESTS)
def test_the_reports_say_it_was_one_runner_on_two_cpus(emulated: Sessions, node: str) -> None:
    """Whether on/off was two builds or one runner on two CPUs, said from the arms' artifacts."""
    test = emulated.test(node)
    on, off = test["profile"]["artifact"]["build"], test["profile_off"]["artifact"]["build"]
    assert on["runner_sha256"] == off["runner_sha256"]  # read independently: one binary
    findings = test["comparison"]["findings"]
    assert any(f.startswith(f"One runner build for both arms (sha256 {on['runner_sha256'][:12]})") and
               "SME2 off: -cpu max,sme=off, SME2 on: -cpu max" in f for f in findings), findings


def test_two_builds_are_said_to_be_two_builds() -> None:
    from pytest_sme2.report.comparison import builds_sentence

    two = builds_sentence({"runner_sha256": "a" * 64}, {"runner_sha256": "b" * 64})
    assert two.startswith("Two runner builds: SME2 off ran aaaaaaaaaaaa, SME2 on ran bbbbbbbbbbbb")
    assert builds_sentence({}, {"runner_sha256": "b" * 64}) == ""  # an arm that does not say: nothing claimed
    # One binary whose arms do not say their CPUs (a phone): not two builds, and no claim that two CPUs ran them.
    one = builds_sentence({"runner_sha256": "a" * 64}, {"runner_sha256": "a" * 64})
    assert one.startswith("One runner build for both arms (sha256 aaaaaaaaaaaa), not two builds")
    assert "the difference is the CPU's" not in one and "on one CPU both arms run the same kernels" in one
