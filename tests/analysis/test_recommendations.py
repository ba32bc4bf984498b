"""``pytest-sme2 analyze`` tells the SME evidence of a trace's operator names, and its advice agrees with it.

The traces are real recordings of pytest-sme2's aarch64 runner under QEMU (``tests/data/qemu_aarch64``, EMULATED:
their times are emulated time, used here only for their operator names): ``-cpu max`` (SME2 on) and
``-cpu max,sme=off``. The expected groups below are written from the manifests' ``op_types`` by reading XNNPACK's
naming (packed PF32/PQS8 = SME path), not computed with the library under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_sme2.analysis.recommendations import NO_KERNEL_LOG, recommend
from pytest_sme2.analysis.run import analyze_trace
from pytest_sme2.cli import main
from pytest_sme2.evidence.trace import read_etdump

pytestmark = pytest.mark.fast

QEMU = Path(__file__).parents[1] / "data" / "qemu_aarch64"
QP8 = "Fully Connected (NC, QP8, F32, QC8W) GEMM"
# trace stem -> (sme, not_sme, undetermined) as the names read
EXPECTED = {
    "toy_cnn_fp32_xnnpack_qemu-sme2-on_t1": (["Convolution (NHWC, PF32) IGEMM", "Fully Connected (NC, PF32) GEMM"],
                                             [], []),
    "toy_cnn_fp32_xnnpack_qemu-sme2-off_t1": ([], ["Convolution (NHWC, F32) IGEMM", "Fully Connected (NC, F32) GEMM"],
                                              []),
    "toy_cnn_int8_xnnpack_qemu-sme2-on_t1": (["Convolution (NHWC, PQS8, QS8, QC8W) IGEMM",
                                              "Fully Connected (NC, PQS8, QC8W) GEMM"], [], []),
    "toy_cnn_int8_xnnpack_qemu-sme2-off_t1": ([], ["Convolution (NHWC, QC8) IGEMM",
                                                   "Fully Connected (NC, QS8, QC8W) GEMM"], []),
    "toy_cnn_int8dyn_xnnpack_qemu-sme2-on_t1": (["Convolution (NHWC, PF32) IGEMM"], [], [QP8]),
    "toy_cnn_int8dyn_xnnpack_qemu-sme2-off_t1": ([], ["Convolution (NHWC, F32) IGEMM"], [QP8]),
}


def _analyze(capsys: pytest.CaptureFixture[str], tmp_path: Path, stem: str) -> tuple[str, dict[str, object]]:
    capsys.readouterr()
    out_json = tmp_path / "summary.json"
    assert main(["analyze", str(QEMU / f"{stem}.etdump"), "--json", str(out_json)]) == 0
    return capsys.readouterr().out, json.loads(out_json.read_text())


def _row(out: str, name: str) -> str:
    """The operator's row in the SME evidence table."""
    table = out[out.index("SME evidence per operator"):]
    return next(line for line in table.splitlines() if line.strip().startswith(name))


def test_the_manifests_name_the_operators_the_expectations_cover() -> None:
    for stem, groups in EXPECTED.items():
        manifest = json.loads((QEMU / f"{stem}.json").read_text())
        assert manifest["emulated"] is True
        assert {n for g in groups for n in g} <= set(manifest["op_types"]), stem


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_analyze_reports_each_operators_sme_evidence_in_the_terminal_and_the_json(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, stem: str) -> None:
    sme, not_sme, undetermined = EXPECTED[stem]
    out, summary = _analyze(capsys, tmp_path, stem)
    evidence = summary["trace_evidence"]
    assert isinstance(evidence, dict)
    assert (evidence["sme"], evidence["not_sme"], evidence["undetermined"]) == (sme, not_sme, undetermined)
    assert "Add (ND)" in evidence["other"]
    assert f"SME evidence: {len(sme)} of {len(sme) + len(not_sme) + len(undetermined)} GEMM-like" in out
    for name in sme:
        assert _row(out, name).endswith("  SME path")
    for name in not_sme:
        assert _row(out, name).endswith("  off the SME path")
    for name in undetermined:
        assert _row(out, name).endswith("  name does not tell")
    assert _row(out, "Add (ND)").endswith("  not a GEMM")


def test_advice_on_a_trace_that_shows_the_sme_path_does_not_ask_for_sme2_kernels(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out, summary = _analyze(capsys, tmp_path, "toy_cnn_int8_xnnpack_qemu-sme2-on_t1")
    advice = [b["advice"] for b in summary["bottlenecks"] if b["name"] == "Convolution" and b["kind"] == "category"]
    assert advice and "__neonsme2" not in advice[0] and "check that" not in advice[0]
    assert "on XNNPACK's SME path (e.g. `Convolution (NHWC, PQS8, QS8, QC8W) IGEMM`" in advice[0]
    assert "__neonsme2" not in out
    op = next(b["advice"] for b in summary["bottlenecks"] if b["kind"] == "operator")
    assert op.endswith("on XNNPACK's SME path (SME or SME2 kernels: the CPU's features say which)")


def test_advice_on_a_trace_off_the_sme_path_names_the_operators_and_what_to_check(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _, summary = _analyze(capsys, tmp_path, "toy_cnn_fp32_xnnpack_qemu-sme2-off_t1")
    advice = next(b["advice"] for b in summary["bottlenecks"] if b["name"] == "Convolution")
    assert "ran off XNNPACK's SME path (e.g. `Convolution (NHWC, F32) IGEMM`)" in advice
    assert "check that the CPU reports sme2" in advice and "on XNNPACK's SME path (e.g." not in advice


def test_a_qp8_name_alone_never_claims_sme(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out, _ = _analyze(capsys, tmp_path, "toy_cnn_int8dyn_xnnpack_qemu-sme2-off_t1")
    assert "0 of 2 GEMM-like operators on the SME path" in out and "1 QP8 GEMM the name does not tell" in out
    assert "; 0.0% of E2E on the SME path)" in out
    analysis = analyze_trace(read_etdump(QEMU / "toy_cnn_int8dyn_xnnpack_qemu-sme2-off_t1.etdump"))
    assert analysis.trace_evidence is not None and not analysis.trace_evidence.has_sme
    (rec,) = [r for r in recommend(analysis) if r.topic == NO_KERNEL_LOG]
    assert rec.text.startswith("The trace cannot tell whether SME2 ran")
    # Beside an operator that did take the SME path, the QP8 one still reads "name does not tell".
    out, _ = _analyze(capsys, tmp_path, "toy_cnn_int8dyn_xnnpack_qemu-sme2-on_t1")
    assert _row(out, QP8).endswith("  name does not tell")


def test_the_kernel_log_advice_says_what_the_trace_already_shows() -> None:
    analysis = analyze_trace(read_etdump(QEMU / "toy_cnn_fp32_xnnpack_qemu-sme2-on_t1.etdump"))
    (rec,) = [r for r in recommend(analysis) if r.topic == NO_KERNEL_LOG]
    assert rec.text.startswith("The trace's operator names already show XNNPACK's SME path (2 of 2 GEMM-like")
    assert "whether any is SME2" not in rec.text
