"""SME evidence from trace operator names: the rules, the recorded traces, the analysis, the gate, the reports."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from recorded import DATA, phone_evidence

from pytest_sme2.analysis.run import Analysis, analyze, merge
from pytest_sme2.errors import ConfigError
from pytest_sme2.evidence.kernels import parse_xnnpack_log, read_xnnpack_log
from pytest_sme2.evidence.qemu_log import ExecutedFunction, ExecutedKernels, RegionInstructions
from pytest_sme2.evidence.sme import (
    OperatorRules,
    TraceEvidence,
    default_rules,
    merge_evidence,
    trace_evidence,
)
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.gate.checks import (
    REQUIRED_BY_MARKER,
    SME2_KERNELS,
    SME2_OFF_KERNELS,
    sme2_kernel_checks,
)
from pytest_sme2.gate.verdict import GateConfig, Status
from pytest_sme2.judge import sme2_evidence
from pytest_sme2.measure.profile import Profile
from pytest_sme2.report.html import html_section
from pytest_sme2.report.markdown import render_markdown
from pytest_sme2.results import SessionResults, TestResult

# The ETDump names of one .pte under qemu-aarch64 11.1.3, -cpu max vs -cpu max,sme=off (executorch 1.5.1).
SME2_ON = ["Convolution (NHWC, PF32) IGEMM #1", "Fully Connected (NC, PF32) GEMM #1",
           "Convolution (NHWC, PQS8, QS8, QC8W) IGEMM #2", "Fully Connected (NC, PQS8, QC8W) GEMM #1"]
SME2_OFF = ["Convolution (NHWC, F32) IGEMM #1", "Fully Connected (NC, F32) GEMM #1", "Convolution (NHWC, QC8) IGEMM #2",
            "Fully Connected (NC, QS8, QC8W) GEMM #1"]
DYNAMIC_INT8 = "Fully Connected (NC, QP8, F32, QC8W) GEMM"  # the same name with SME2 on and off


def _op_types(stem: str) -> list[str]:
    return list(read_etdump(DATA / f"{stem}.etdump").operators()["op_type"])


# ------------------------------------------------------------------------------------------ rules


def test_sme2_on_names_are_sme_and_off_names_are_not() -> None:
    on, off = trace_evidence(SME2_ON), trace_evidence(SME2_OFF)
    assert on.sme == tuple(n.rsplit(" #", 1)[0] for n in SME2_ON) and on.not_sme == ()
    assert off.sme == () and off.not_sme == tuple(n.rsplit(" #", 1)[0] for n in SME2_OFF)
    assert on.has_sme and not off.has_sme
    dyn = trace_evidence([DYNAMIC_INT8, "Convert (NC, F32, QP8) #1"])
    assert dyn.undetermined == (DYNAMIC_INT8,) and not dyn.has_sme and dyn.other == ("Convert (NC, F32, QP8)",)
    more = trace_evidence(["Pack LH (X32) #1", "Batch Matrix Multiply (NC, PF16) GEMM",
                           "Convolution (NHWC, PF32) DWConv", "Convolution (NHWC, F32) DWConv",
                           "Dynamic Fully Connected (NC, PF32) GEMM", "Batch Matrix Multiply (NC, F32) GEMM"])
    assert more.sme == ("Pack LH (X32)", "Batch Matrix Multiply (NC, PF16) GEMM",
                        "Dynamic Fully Connected (NC, PF32) GEMM")
    # depthwise convolutions never run a GEMM: not on the SME path, not "could have been" either
    assert more.other == ("Convolution (NHWC, PF32) DWConv", "Convolution (NHWC, F32) DWConv")
    assert more.not_sme == ("Batch Matrix Multiply (NC, F32) GEMM",)


@pytest.mark.parametrize("stem", sorted(p.stem for p in DATA.glob("*.etdump")))
def test_recorded_x86_traces_have_no_sme_operator(stem: str) -> None:
    names = _op_types(stem)
    ev = trace_evidence(names, source=stem)
    assert not ev.has_sme and ev.sme == () and ev.undetermined == ()
    distinct = set(names)
    assert set(ev.not_sme + ev.other) == distinct  # every operator type lands in exactly one group
    assert len(ev.not_sme + ev.other) == len(distinct)
    gemms = {n for n in distinct if re.search(r" (I?GEMM)$", n)}
    assert set(ev.not_sme) == gemms
    assert set(ev.portable) == {n for n in distinct if n.startswith("native_call_")}
    assert ev.left_off_sme == ev.not_sme + ev.portable


def test_the_portable_trace_is_all_portable_and_the_transformer_lists_what_is_left() -> None:
    portable = trace_evidence(_op_types("toy_cnn_fp32_portable_simd-on_t1"))
    assert portable.gemm_like == () and len(portable.portable) == 8 and portable.summary().startswith("no GEMM-like")
    tt = trace_evidence(_op_types("tiny_transformer_fp32_xnnpack_simd-on_t1"))
    assert set(tt.not_sme) == {"Fully Connected (NC, F32) GEMM", "Batch Matrix Multiply (NC, F32) GEMM"}
    assert set(tt.portable) == {"native_call_expand_copy.out", "native_call_native_layer_norm.out"}
    assert tt.summary().startswith("0 of 2 GEMM-like operators on the SME path; off it: ")


def test_every_packed_operator_type_of_the_arm_wheel_is_sme(aarch64_runner_build: Any) -> None:
    """The operator-type strings in executorch 1.5.1's aarch64 XNNPACK: every GEMM-family type with a packed
    data type (PF32, PF16, PQS8) is SME with its micro-kernel type appended, QP8 ones are undetermined, the rest
    not SME; the three Pack LH types are SME."""
    # The aarch64 wheel's XNNPACK backend, as the session's cross-built runner loads it (its lib/ link).
    blob = (Path(aarch64_runner_build.path).parent / "lib" / "libexecutorch_backend_xnnpack.so").read_bytes()
    # The linker merges string tails ("Fully Connected (NC, PF32)" inside "Dynamic Fully Connected (NC, PF32)"):
    # read every suffix that starts with a family name.
    found = set(re.findall(rb"((?:Dynamic )?Fully Connected|Batch Matrix Multiply|Convolution|Deconvolution)"
                           rb" \(((?:NC|NHWC)(?:, [A-Z0-9_]+)+)\)\x00", blob))
    types = {f"{op.decode()} ({dt.decode()})" for op, dt in found}
    assert "Fully Connected (NC, PQS8, QC8W)" in types and "Convolution (NHWC, PF32)" in types and len(types) > 40
    packed = {t for t in types if re.search(r"\b(PF32|PF16|PQS8)\b", t)}
    assert len(packed) >= 8
    for t in types:
        kernel = "IGEMM" if t.startswith(("Convolution", "Deconvolution")) else "GEMM"
        expected = "sme" if t in packed else "undetermined" if ", QP8" in t else "not_sme"
        assert default_rules().evidence_of(f"{t} {kernel}") == expected, t
    for pack in (b"Pack LH (X8)", b"Pack LH (X16)", b"Pack LH (X32)"):
        assert pack + b"\x00" in blob
        assert default_rules().evidence_of(pack.decode()) == "sme"


def test_the_shipped_rules_name_their_sources_and_bad_rules_are_refused(tmp_path: Path) -> None:
    rules = default_rules()
    assert [r.id for r in rules.rules][:2] == ["packed-lhs-gemm", "pack-lh"]
    assert all(r.source.startswith("XNNPACK src/") and r.meaning for r in rules.rules)
    assert "75db3c093b6d74fe90b8df82670cd8a01102ba38" in rules.checked_against
    bad = tmp_path / "rules.json"
    bad.write_text(json.dumps({"schema_version": 1, "rules": [{"id": "x", "evidence": "maybe", "meaning": "m",
                                                                "source": "s"}]}))
    with pytest.raises(ConfigError, match="evidence 'maybe'; allowed: sme, not_sme, undetermined, other"):
        OperatorRules.load(bad)
    bad.write_text(json.dumps({"schema_version": 1, "rules": [{"id": "x", "evidence": "sme"}]}))
    with pytest.raises(ConfigError, match="rule #0 lacks 'meaning'"):
        OperatorRules.load(bad)
    bad.write_text(json.dumps({"schema_version": 1, "rules": [{"id": "x", "evidence": "sme", "meaning": "m",
                                                                "source": "s", "dtypes": "(PF32"}]}))
    with pytest.raises(ConfigError, match="bad regex"):
        OperatorRules.load(bad)
    bad.write_text("{}")
    with pytest.raises(ConfigError, match="has no integer schema_version"):
        OperatorRules.load(bad)
    own = OperatorRules.from_dict({"schema_version": 1, "rules": [
        {"id": "mine", "evidence": "sme", "meaning": "m", "source": "s", "operator": "^My GEMM$"}]}, source="own")
    assert trace_evidence(["My GEMM (NC, F32) GEMM", "Fully Connected (NC, PF32) GEMM"], rules=own).sme == (
        "My GEMM (NC, F32) GEMM",)


def test_evidence_round_trips_and_merges() -> None:
    ev = trace_evidence([*SME2_ON, DYNAMIC_INT8, "Add (ND) #1", "native_call_add.out"], source="t.etdump")
    assert TraceEvidence.from_dict(json.loads(json.dumps(ev.to_dict()))) == ev
    with pytest.raises(ConfigError, match="newer"):
        TraceEvidence.from_dict({"schema_version": 2})
    other = trace_evidence(["Add (ND)", "Transpose (ND, X32)", *SME2_ON[:1]])
    merged = merge_evidence([ev, other])
    assert merged is not None and merged.sme == ev.sme and merged.other == (*ev.other, "Transpose (ND, X32)")
    assert merge_evidence([]) is None


# --------------------------------------------------------------------------------------- analysis


def _executed() -> ExecutedKernels:
    return ExecutedKernels(source="in_asm.log", blocks=9, functions=(
        ExecutedFunction("/x/libexecutorch_backend_xnnpack.so",
                         "kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa", 3),
        ExecutedFunction("/x/libc.so.6", "memcpy", 2)),
        unmapped=(RegionInstructions("/x/libexecutorch_backend_xnnpack.so", 4, 120, (("fmla v", 12), ("sdot v", 2))),))


def test_analysis_carries_the_evidence_and_keeps_its_old_form_without_it() -> None:
    timeline = read_etdump(DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump")
    plain = analyze(timeline)
    d = plain.to_dict()
    assert "trace_evidence" not in d and "executed_kernels" not in d
    assert Analysis.from_dict(d).trace_evidence is None
    ev = trace_evidence(timeline.operators()["op_type"], source=timeline.source)
    full = analyze(timeline, trace_evidence=ev, executed_kernels=_executed())
    again = Analysis.from_dict(json.loads(json.dumps(full.to_dict())))
    assert again.trace_evidence == ev and again.executed_kernels == _executed()
    pooled = merge([full, full])
    assert pooled.trace_evidence == ev and pooled.executed_kernels == _executed()


# ------------------------------------------------------------------------------------------- gate


SME2_LOG = "Note (XNNPACK): Using gemm microkernel 'xnn_pf32_gemm_minmax_ukernel_1x32__neonsme2'\n"


def test_a_trace_without_sme_operators_fails_an_sme2_on_arm_on_an_sme2_device() -> None:
    off_names = trace_evidence(SME2_OFF, source="on.etdump")
    (check,) = sme2_kernel_checks(phone_evidence(trace=off_names))
    assert check.name == SME2_KERNELS and check.status is Status.REGRESSION and not check.advisory
    assert "no SME operator" in check.message and "the trace (on.etdump)" in check.message
    assert "Convolution (NHWC, F32) IGEMM" in check.message and "and 1 more" in check.message
    (ok,) = sme2_kernel_checks(phone_evidence(trace=trace_evidence(SME2_ON)))
    assert ok.status is Status.PASS and "Convolution (NHWC, PF32) IGEMM" in ok.message
    # Only QP8 GEMMs: the names cannot tell; advisory unless the marker enforces it.
    (qp8,) = sme2_kernel_checks(phone_evidence(trace=trace_evidence([DYNAMIC_INT8])))
    assert qp8.status is Status.INCONCLUSIVE and qp8.advisory and "QP8" in qp8.message
    (strict,) = sme2_kernel_checks(phone_evidence(trace=trace_evidence([DYNAMIC_INT8]), required_by=REQUIRED_BY_MARKER,
                                             enforced=True))
    assert strict.status is Status.INCONCLUSIVE and not strict.advisory
    (unknown,) = sme2_kernel_checks(phone_evidence(trace=off_names, device_sme2=None))
    assert unknown.status is Status.INCONCLUSIVE and "does not say whether it has SME2" in unknown.message
    (na,) = sme2_kernel_checks(phone_evidence(trace=off_names, device_sme2=False, device="x86 host"))
    assert na.status is Status.INCONCLUSIVE and na.advisory and "reports no SME2" in na.message


def test_trace_and_log_are_judged_together() -> None:
    sme2_log = parse_xnnpack_log(SME2_LOG, source="arm.xnnlog")
    x86_log = read_xnnpack_log(DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.xnnlog")
    # Either source showing SME2 absent decides, and the message carries both findings.
    (check,) = sme2_kernel_checks(phone_evidence(log=sme2_log, trace=trace_evidence(SME2_OFF, source="on.etdump")))
    assert check.status is Status.REGRESSION and "no SME operator" in check.message
    assert "Also: the XNNPACK log (arm.xnnlog) names 1 SME2 kernel" in check.message
    (check,) = sme2_kernel_checks(phone_evidence(log=x86_log, trace=trace_evidence(SME2_ON)))
    assert check.status is Status.REGRESSION and check.message.startswith("no SME2 kernel")
    assert "Also: the trace names 4 operators on XNNPACK's SME packed-LHS path" in check.message
    (both,) = sme2_kernel_checks(phone_evidence(log=sme2_log, trace=trace_evidence(SME2_ON)))
    assert both.status is Status.PASS
    # The log cannot tell (no debug build), the trace can.
    (check,) = sme2_kernel_checks(phone_evidence(log=parse_xnnpack_log("", source="empty.log"),
                                            trace=trace_evidence(SME2_ON)))
    assert check.status is Status.PASS and "Also: not checked" in check.message


def test_sme_operators_in_the_off_arms_trace_make_the_comparison_invalid() -> None:
    checks = sme2_kernel_checks(phone_evidence(trace=trace_evidence(SME2_ON), off_trace=trace_evidence(SME2_ON,
                                                                                                   source="off.etdump")))
    off = next(c for c in checks if c.name == SME2_OFF_KERNELS)
    assert off.status is Status.INVALID and "trace (off.etdump) names 4 operator(s)" in off.message
    assert "-cpu max,sme=off" in off.message and off.message.endswith("not an SME2 on/off comparison")
    assert [c.name for c in sme2_kernel_checks(phone_evidence(trace=trace_evidence(SME2_ON),
                                                         off_trace=trace_evidence(SME2_OFF)))] == [SME2_KERNELS]


def _profile(names: list[str], *, sme2: bool, variant: str) -> Profile:
    analysis = analyze(read_etdump(DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"),
                       trace_evidence=trace_evidence(names, source=f"{variant}.etdump"))
    return Profile(model={"name": "toy_cnn"}, variant=variant, runner="host", build="", threads=1,
                   identity={"summary": "QEMU -cpu max"}, device={"sme2": sme2}, analysis=analysis)


def test_judge_passes_each_arms_trace_evidence_to_the_gate() -> None:
    on, off = _profile(SME2_OFF, sme2=True, variant="on"), _profile(SME2_ON, sme2=True, variant="off")
    ev = sme2_evidence(on, off, GateConfig())
    assert ev is not None and ev.trace == on.analysis.trace_evidence and ev.off_trace == off.analysis.trace_evidence
    statuses = {c.name: c.status for c in sme2_kernel_checks(ev)}
    assert statuses == {SME2_KERNELS: Status.REGRESSION, SME2_OFF_KERNELS: Status.INVALID}
    # Nothing required, no off arm: no evidence to judge.
    assert sme2_evidence(on, None, GateConfig()) is None
    assert sme2_evidence(on, None, GateConfig(require_sme2_kernels=True)) is not None


# ---------------------------------------------------------------------------------------- reports


def test_reports_show_the_trace_evidence_and_the_kernels_that_ran() -> None:
    profile = _profile([*SME2_ON, DYNAMIC_INT8, *SME2_OFF[:1], "native_call_add.out"], sme2=True, variant="on")
    profile = replace(profile, analysis=replace(profile.analysis, executed_kernels=_executed()))
    result = TestResult("t::evidence", outcome="passed", profile=profile)
    md = render_markdown(SessionResults((result,), created="2026-11-22T00:00:00+00:00"))
    kernels = md.split("### Kernel Insights", 1)[1]
    assert "_No XNNPACK kernel log for this test: kernel selection is not known._" in kernels
    assert "trace: 4 of 6 GEMM-like operators on the SME path (e.g. `Convolution (NHWC, PF32) IGEMM`)" in kernels
    assert "executed under QEMU: 1 SME2 function ran, e.g. `kai_kernel_matmul_clamp_f32_f32p2vlx1_" in kernels
    assert "**Operators and the SME path, on (trace)**" in kernels and "**Kernels that ran, on (QEMU)**" in kernels
    assert "| `Convolution (NHWC, F32) IGEMM` | off the SME path |" in kernels
    assert f"| `{DYNAMIC_INT8}` | name does not tell |" in kernels
    assert "| `native_call_add.out` | portable kernels |" in kernels
    assert "(not exported) fmla v 12, sdot v 2" in kernels
    assert "memcpy" not in kernels  # the C library's functions are not kernels
    html = html_section(result)
    assert "<summary>Operators and the SME path, on (trace) (7)</summary>" in html
    assert "<summary>Kernels that ran, on (QEMU) (2)</summary>" in html
    assert "kai_kernel_matmul_clamp_f32_f32p2vlx1_f32p2vlx1biasf32_sme2_mopa" in html
