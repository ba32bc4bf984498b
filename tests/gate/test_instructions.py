"""The gate on instructions executed under emulation (pytest_sme2.gate.instructions): its comparison logic.

SYNTHETIC COUNTS: every InstructionCounts here is hand-written to exercise the rules (exact, tolerance, unchanged,
another CPU, on/off), not a recording; no number here claims to be what a model executes. The real counts are
judged end to end in tests/judge/test_instruction_gate.py (real QEMU runs).
"""

from __future__ import annotations

import pytest

from pytest_sme2.evidence.instructions import LABEL, InstructionCounts
from pytest_sme2.gate.instructions import (
    INSTRUCTIONS,
    INSTRUCTIONS_OFF,
    SME2_INSTRUCTIONS,
    SME2_OFF_INSTRUCTIONS,
    count_check,
    instruction_checks,
    on_off_checks,
    with_instructions,
)
from pytest_sme2.gate.verdict import Comparison, Status, Verdict

pytestmark = pytest.mark.fast


def synthetic(neon: int, sme: int = 0, *, cpu: str = "max", scalar: int = 1000, load_store: int = 500,
              fmla: int = 0, fmopa: int = 0, qemu: str = "11.1.3") -> InstructionCounts:
    """A hand-written (synthetic) count: the kinds sum to the total, as the contract says."""
    kinds = {"sme": sme, "sve": 0, "neon": neon, "load_store": load_store, "scalar": scalar, "undecoded": 0}
    return InstructionCounts(total=sum(kinds.values()), by_kind=kinds,
                             by_mnemonic={k: v for k, v in (("fmla v", fmla), ("fmopa za", fmopa)) if v},
                             cpu=cpu, qemu_version=qemu)


def test_exact_any_instruction_more_is_a_regression_naming_what_moved() -> None:
    before, after = synthetic(10_000, fmla=4000), synthetic(10_001, fmla=4001)
    check = count_check(before, after, 0.0, Comparison.STORED)
    assert check.status is Status.REGRESSION and check.name == INSTRUCTIONS
    assert "11,500 -> 11,501" in check.message and "(+1," in check.message
    assert "neon +1" in check.message and "fmla v +1" in check.message and "exact" in check.message
    assert LABEL in check.message and "ms" not in check.message.split()


def test_fewer_is_an_improvement_and_equal_a_pass() -> None:
    assert count_check(synthetic(10_000), synthetic(9_000), 0.0, Comparison.STORED).status is Status.IMPROVEMENT
    same = count_check(synthetic(10_000), synthetic(10_000), 0.0, Comparison.STORED)
    assert same.status is Status.PASS and "identical" in same.message


def test_a_tolerance_passes_within_and_fails_beyond() -> None:
    base = synthetic(8_500)  # total 10,000
    assert count_check(base, synthetic(8_700), 0.05, Comparison.STORED).status is Status.PASS  # +2 %
    over = count_check(base, synthetic(9_100), 0.05, Comparison.STORED)  # +6 %
    assert over.status is Status.REGRESSION and "±5%" in over.message


def test_an_unchanged_artifact_that_counts_differently_is_a_bug_not_the_machine() -> None:
    check = count_check(synthetic(10_000), synthetic(10_002), 0.05, Comparison.UNCHANGED)
    assert check.status is Status.BUG and "cannot be the machine" in check.message
    assert count_check(synthetic(10_000), synthetic(10_000), 0.0, Comparison.UNCHANGED).status is Status.PASS


def test_another_cpu_or_qemu_is_not_compared() -> None:
    other_cpu = count_check(synthetic(10_000), synthetic(10_000, cpu="max,sme=off"), 0.0, Comparison.STORED)
    assert other_cpu.status is Status.INCONCLUSIVE and "-cpu max," in other_cpu.message
    other_qemu = count_check(synthetic(10_000), synthetic(10_000, qemu="11.2.0"), 0.0, Comparison.STORED)
    assert other_qemu.status is Status.INCONCLUSIVE and "QEMU 11.2.0" in other_qemu.message


def test_on_off_reports_the_ratio_and_the_move_from_fmla_to_fmopa_never_a_speedup() -> None:
    off = synthetic(20_000, cpu="max,sme=off", fmla=8000)
    on = synthetic(2_000, sme=3_000, fmopa=1_000)
    ratio, evidence = on_off_checks(off, on)
    assert ratio.name == SME2_INSTRUCTIONS and ratio.advisory and ratio.status is Status.PASS
    assert f"on/off {on.total / off.total:.3f}×" in ratio.message
    assert "neon 20,000 -> 2,000" in ratio.message and "sme 0 -> 3,000" in ratio.message  # 10x: the two counts
    assert "fmla v 8,000 -> 0" in ratio.message and "fmopa za 0 -> 1,000" in ratio.message
    assert "speedup" not in ratio.message.replace("no speedup", "")
    assert evidence.name == SME2_OFF_INSTRUCTIONS and evidence.status is Status.PASS


def test_an_off_arm_that_ran_sme_fails_with_the_counts() -> None:
    off = synthetic(2_000, sme=3_000, fmopa=1_000)  # the off arm ran on an SME CPU
    _, evidence = on_off_checks(off, synthetic(2_000, sme=3_000, fmopa=1_000))
    assert evidence.status is Status.REGRESSION
    assert "executed 3,000 SME instructions (fmopa za 1,000)" in evidence.message


def test_instruction_checks_gate_both_arms_only_when_asked() -> None:
    off, on = synthetic(20_000, cpu="max,sme=off"), synthetic(2_000, sme=3_000)
    reported = instruction_checks(None, on, tolerance=None, comparison=None, off=off)
    assert [c.name for c in reported] == [SME2_INSTRUCTIONS, SME2_OFF_INSTRUCTIONS]
    wider = synthetic(2_100, sme=3_150)
    gated = instruction_checks(on, wider, tolerance=0.0, comparison=Comparison.STORED, reference_off=off, off=off)
    assert [(c.name, c.status) for c in gated[:2]] == [(INSTRUCTIONS, Status.REGRESSION),
                                                       (INSTRUCTIONS_OFF, Status.PASS)]
    verdict = with_instructions(Verdict(Status.PASS, ()), gated)
    assert verdict.status is Status.REGRESSION and verdict.failed
