"""Step 3 of :func:`pytest_sme2.judge.judge`: decide, purely, from an executed plan's measurements to a Verdict.

No runner and no files: the samples, evidence and memory come from :class:`~pytest_sme2.judge.execute.Measured`, the
comparison and thresholds from the :class:`~pytest_sme2.judge.plan.Plan`. The gate
(:func:`pytest_sme2.gate.decide.decide`) measures once more only through the function the execution gave
(``Measured.again``), when the first measurement leaves the verdict unsettled.
"""

from __future__ import annotations

from dataclasses import replace

from pytest_sme2.evidence.memory import Memory
from pytest_sme2.gate.checks import Sme2Evidence, sme2_kernel_checks
from pytest_sme2.gate.decide import decide, gate
from pytest_sme2.gate.instructions import INSTRUCTIONS, instruction_checks, with_instructions
from pytest_sme2.gate.memory import with_memory
from pytest_sme2.gate.verdict import TIME_NOT_GATED, Check, GateConfig, MemoryThresholds, Status, Verdict
from pytest_sme2.judge.execute import Measured
from pytest_sme2.judge.plan import COMPARE, EVIDENCE_ONLY, RECORD, Plan
from pytest_sme2.measure.pair import Pair, decide_speedup, with_speedup
from pytest_sme2.measure.profile import Profile


def decide_plan(plan: Plan, measured: Measured) -> Verdict:
    """The verdict of an executed plan: the latency against the baseline by the plan's comparison, the absolute checks,
    the pair's speedup on its own interleaved arms, the SME2 evidence, memory, and the instructions executed under
    emulation (against the count baseline when they are gated; a pair's on/off counts whenever both arms have them)."""
    return _with_instructions(_decide_time(plan, measured), plan, measured)


def _with_instructions(verdict: Verdict, plan: Plan, measured: Measured) -> Verdict:
    off = measured.off.instructions if measured.off is not None else None
    candidate = measured.profile.instructions
    tolerance = plan.config.instructions
    stored = plan.counts.baseline if plan.counts is not None else None
    checks = instruction_checks(stored.instructions if stored else None, candidate, tolerance=tolerance,
                                comparison=plan.count_comparison, reference_off=stored.instructions_off if stored
                                else None, off=off)
    if tolerance is not None and candidate is None:
        checks.append(Check(INSTRUCTIONS, Status.INCONCLUSIVE, (
            f"not counted: {measured.profile.runner} cannot count instructions executed under emulation; only "
            "--sme2-device=qemu counts them"), advisory=True))
    return with_instructions(verdict, checks)


def _decide_time(plan: Plan, measured: Measured) -> Verdict:
    profile, off, evidence, config = measured.profile, measured.off, measured.evidence, plan.config
    if plan.action == EVIDENCE_ONLY:
        # An emulated device measured for its evidence: the kernel and numerics checks (and the absolute ones: budgets,
        # the ungated on/off ratio); its latency shown, never compared with the emulated baseline nor recorded as one (a
        # baseline of emulated time is measured in full, with ``--sme2-emulated-timing``), never measured again.
        return _with_memory(gate(None, profile.samples(), config, off=off.samples() if off is not None else None,
                                 evidence=evidence, notes=(TIME_NOT_GATED,)), None, profile, off, config)
    if plan.action != COMPARE or plan.baseline is None or measured.base is None or plan.comparison is None:
        verdict = _with_memory(gate(None, profile.samples(), config, off=off.samples() if off is not None else None,
                                    evidence=evidence), None, profile, off, config)
        if plan.action == RECORD and plan.invalid:
            verdict = replace(verdict, status=Status.REGRESSION if blocking_evidence(evidence) else Status.INVALID)
        return verdict
    base, cand = measured.base, measured.candidate.samples()
    if off is None:
        verdict = decide((base, cand, None), measured.again, plan.judged,
                         comparison=plan.comparison, notes=plan.notes, evidence=evidence)
    else:
        # The latency is judged against the baseline; the speedup on the pair's own interleaved arms, confirmed on
        # the pair measured again (measure.pair) — never the pair's off arm over another measurement's on arm.
        verdict = decide((base, cand, None), measured.again,
                         replace(plan.judged, min_speedup=None), comparison=plan.comparison, notes=plan.notes,
                         evidence=evidence)
        pair = Pair(off, profile)
        verdict = with_speedup(verdict, decide_speedup(pair, config, measured.again_pair))
    # Memory: against the baseline's artifact measured in this session when there is one, else the stored memory.
    reference = measured.reference
    return _with_memory(verdict, reference.memory if reference is not None else plan.baseline.memory,
                        measured.candidate, off, config)


def blocking_evidence(evidence: Sme2Evidence | None) -> str:
    """Why this measurement must not become a baseline, from its kernel evidence ("" when it may)."""
    failed = [c for c in sme2_kernel_checks(evidence) if c.status in (Status.REGRESSION, Status.INVALID)]
    return failed[0].message if failed else ""


def _with_memory(verdict: Verdict, reference: Memory | None, profile: Profile, off: Profile | None,
                 config: GateConfig) -> Verdict:
    """The verdict with the memory checks of :mod:`pytest_sme2.gate.memory` (planned, peak, budgets, SME2 on/off)."""
    return with_memory(verdict, reference, profile.memory, config.memory or MemoryThresholds(),
                       emulated=config.emulated, off=off.memory if off is not None else None)
