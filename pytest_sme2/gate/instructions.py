"""How instructions executed under emulation are judged (the counts are :mod:`pytest_sme2.evidence.instructions`).

A count is not a sample: the same program, inputs, runner build and emulated CPU execute the same instructions on
every host and in every repetition, so there is no noise to allow for and no interval to compute. The gate compares
the totals of one execution with the count baseline's:

- more than ``tolerance`` (relative; 0 = exact, the default) more instructions is a **regression**, fewer beyond it an
  **improvement**, and the message names the kinds and mnemonics that moved (``neon +51,200``, ``fmla v +12,288``);
- an *unchanged* artifact (same program, inputs, runner build, QEMU and CPU) that counts differently is a **bug**
  (:data:`Status.BUG`): nothing that decides the count changed, so the counter or its data is wrong, never the
  machine;
- counts of another emulated CPU or another QEMU are not compared (**inconclusive**, with what to do): QEMU's
  translation is what executes.

An SME2 on/off pair is reported as the count ratio and the kinds that moved (the SME2-on arm's GEMM work moving from
NEON ``fmla`` to SME ``fmopa``), never as a speedup or a time; an SME2-off arm that executed SME instructions fails,
with the counts as the evidence. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from pytest_sme2.evidence.instructions import INSTRUCTION_KINDS, LABEL, InstructionCounts, count_ratio
from pytest_sme2.gate.verdict import Check, Comparison, Status, Verdict, overall

#: The checks: the measured arm's count against its baseline, the SME2-off arm's, the on/off ratio (reported), and
#: the SME2-off arm's SME instructions (evidence).
INSTRUCTIONS = "instructions"
INSTRUCTIONS_OFF = "instructions_off"
SME2_INSTRUCTIONS = "sme2_instructions"
SME2_OFF_INSTRUCTIONS = "sme2_off_instructions"
INSTRUCTION_CHECKS = (INSTRUCTIONS, INSTRUCTIONS_OFF, SME2_INSTRUCTIONS, SME2_OFF_INSTRUCTIONS)
#: The checks that compare with the count baseline (a passing one decided something against a baseline).
GATED_COUNTS = (INSTRUCTIONS, INSTRUCTIONS_OFF)
#: Notes of the instruction checks start with this (the terminal shows them under the test's line).
NOTE_PREFIX = "instructions: "
#: How many moved kinds and mnemonics a message names.
SHOWN = 4


def n(value: float) -> str:
    """A count with thousands separators: ``1,234,567``."""
    return f"{int(value):,}"


def _moves(before: Mapping[str, int], after: Mapping[str, int], keys: tuple[str, ...] | None = None) -> list[str]:
    """What moved between two tallies, largest move first: ``neon +51,200 (+5.0%)``, ``fmopa za 0 -> 1,536``."""
    names = keys if keys is not None else tuple(dict.fromkeys([*before, *after]))
    moved = [(k, before.get(k, 0), after.get(k, 0)) for k in names if before.get(k, 0) != after.get(k, 0)]
    moved.sort(key=lambda m: -abs(m[2] - m[1]))
    out = []
    for k, a, b in moved[:SHOWN]:
        # A move of more than 10x reads better as its two counts than as a percentage of thousands.
        out.append(f"{k} {b - a:+,} ({(b / a - 1) * 100:+.1f}%)" if a and b and 0.1 < b / a < 10
                   else f"{k} {n(a)} -> {n(b)}")
    if len(moved) > SHOWN:
        out.append(f"{len(moved) - SHOWN} more")
    return out


def moved_text(before: InstructionCounts, after: InstructionCounts) -> str:
    """The kinds and the multiply-accumulate/SME mnemonics that moved, or "" when none did."""
    kinds = _moves(before.by_kind, after.by_kind, INSTRUCTION_KINDS)
    mnemonics = _moves(before.by_mnemonic, after.by_mnemonic)
    parts = [f"kinds: {', '.join(kinds)}"] if kinds else []
    if mnemonics:
        parts.append(f"mnemonics: {', '.join(mnemonics)}")
    return "; ".join(parts)


def not_comparable(reference: InstructionCounts, candidate: InstructionCounts) -> str:
    """Why two counts cannot be compared ("" when they can): another emulated CPU or another QEMU."""
    if reference.cpu != candidate.cpu:
        return f"the baseline counted under -cpu {reference.cpu or '?'}, this run under -cpu {candidate.cpu or '?'}"
    if reference.qemu_version != candidate.qemu_version:
        return (f"the baseline counted under QEMU {reference.qemu_version or '?'}, this run under QEMU "
                f"{candidate.qemu_version or '?'} (QEMU's translation is what executes, so another QEMU may count "
                "differently)")
    return ""


def count_check(reference: InstructionCounts, candidate: InstructionCounts, tolerance: float,
                comparison: Comparison | None, *, name: str = INSTRUCTIONS, arm: str = "") -> Check:
    """``candidate``'s total against ``reference``'s: beyond ``tolerance`` more is a regression (0 = exact)."""
    of = f" ({arm})" if arm else ""
    ref, cand = reference.total, candidate.total
    why = not_comparable(reference, candidate)
    if why:
        return Check(name, Status.INCONCLUSIVE, (
            f"not compared{of}: {why}; re-record the count baseline with this emulator (--sme2-update-baseline)"),
            baseline=ref, candidate=cand)
    delta = cand - ref
    change = f"{n(ref)} -> {n(cand)} {LABEL} per execution ({delta:+,}"
    change += f", {delta / ref * 100:+.3f}%)" if ref else ")"
    moved = moved_text(reference, candidate)
    where = f"{change}; {moved}" if moved else change
    limit = "exact" if not tolerance else f"±{tolerance * 100:g}%"
    if comparison is Comparison.UNCHANGED:
        if reference.to_dict() != candidate.to_dict():
            return Check(name, Status.BUG, (
                f"the unchanged artifact (same program, inputs, runner build, QEMU and CPU){of} now executes {where}: "
                "a count depends on nothing else, so this cannot be the machine; the counter or the baseline is "
                "wrong (report it as a pytest-sme2 bug, with both files)"), margin=tolerance, baseline=ref,
                candidate=cand)
        return Check(name, Status.PASS, f"{n(cand)} {LABEL} per execution{of}, identical to the baseline",
                     margin=tolerance, baseline=ref, candidate=cand)
    allowed = ref * tolerance
    if delta > allowed:
        return Check(name, Status.REGRESSION, f"more work{of}: {where} (allowed: {limit})", margin=tolerance,
                     baseline=ref, candidate=cand)
    if -delta > allowed:
        return Check(name, Status.IMPROVEMENT, f"less work{of}: {where} (allowed: {limit})", margin=tolerance,
                     baseline=ref, candidate=cand)
    same = (f"{n(cand)} {LABEL} per execution{of}, identical to the baseline" if not delta and not moved
            else f"within {limit}{of}: {where}")
    return Check(name, Status.PASS, same, margin=tolerance, baseline=ref, candidate=cand)


def ratio_text(off: InstructionCounts, on: InstructionCounts) -> str:
    """``SME2 on 41,234 vs off 98,765 instructions executed under emulation per execution: 0.418× (...)``."""
    ratio = count_ratio(off.total, on.total)
    head = (f"SME2 on {n(on.total)} vs off {n(off.total)} {LABEL} per execution: on/off "
            f"{'nan' if ratio is None else f'{ratio:.3f}'}× (a count, "
            "not a time: no speedup follows from it)")
    moved = moved_text(off, on)
    return f"{head}; off -> on {moved}" if moved else head


def on_off_checks(off: InstructionCounts, on: InstructionCounts) -> list[Check]:
    """The on/off pair's counts: the ratio and what moved (reported), and the SME2-off arm's SME instructions
    (a regression of the comparison: that arm ran SME2, so the pair compares nothing)."""
    checks = [Check(SME2_INSTRUCTIONS, Status.PASS, ratio_text(off, on), advisory=True, baseline=off.total,
                    candidate=on.total)]
    sme = off.by_kind.get("sme", 0)
    in_kernels = off.sme2_instructions
    if sme or in_kernels:
        found = []
        if sme:
            mnemonics = [f"{k} {n(v)}" for k, v in sorted(off.by_mnemonic.items(), key=lambda kv: -kv[1])
                         if v and (k.endswith(" za") or k.startswith("sm"))][:SHOWN]
            found.append(f"{n(sme)} SME instructions" + (f" ({', '.join(mnemonics)})" if mnemonics else ""))
        if in_kernels:
            kernels = sorted((s for s in off.sme2_symbols if off.by_symbol.get(s)), key=lambda s: -off.by_symbol[s])
            found.append(f"{n(in_kernels)} inside SME2 kernels (e.g. {kernels[0]})" if kernels else
                         f"{n(in_kernels)} inside SME2 kernels")
        cpu = f" (-cpu {off.cpu})" if off.cpu else ""
        checks.append(Check(SME2_OFF_INSTRUCTIONS, Status.REGRESSION, (
            f"the SME2-off arm{cpu} executed {' and '.join(found)} of its {n(off.total)} {LABEL} per execution: it "
            "ran SME2, so this is not an SME2 on/off comparison (turn SME off in the emulated CPU, -cpu max,sme=off, "
            "or build that arm without SME2)"), baseline=0, candidate=sme or in_kernels))
    else:
        checks.append(Check(SME2_OFF_INSTRUCTIONS, Status.PASS, (
            f"the SME2-off arm executed no SME instruction (of {n(off.total)} {LABEL} per execution)"),
            baseline=0, candidate=0))
    return checks


def instruction_checks(reference: InstructionCounts | None, candidate: InstructionCounts | None, *,
                       tolerance: float | None, comparison: Comparison | None,
                       reference_off: InstructionCounts | None = None, off: InstructionCounts | None = None
                       ) -> list[Check]:
    """Every instruction check there is data for: the arms against the count baseline (when ``tolerance`` is not
    None: counts are gated), and a pair's on/off checks (whenever both arms were counted)."""
    checks: list[Check] = []
    if tolerance is not None and comparison is not None:
        if reference is not None and candidate is not None:
            checks.append(count_check(reference, candidate, tolerance, comparison,
                                      arm="SME2 on" if off is not None else ""))
        if reference_off is not None and off is not None:
            checks.append(count_check(reference_off, off, tolerance, comparison, name=INSTRUCTIONS_OFF,
                                      arm="SME2 off"))
    if off is not None and candidate is not None:
        checks.extend(on_off_checks(off, candidate))
    return checks


def with_instructions(verdict: Verdict, checks: list[Check], notes: tuple[str, ...] = ()) -> Verdict:
    """``verdict`` with the instruction checks (and their notes) added and its status recomputed."""
    if not checks and not notes:
        return verdict
    all_checks = (*verdict.checks, *checks)
    return replace(verdict, checks=all_checks, status=overall(all_checks), notes=(*verdict.notes, *notes))


def failed_evidence(checks: list[Check] | tuple[Check, ...]) -> str:
    """Why a measurement must not become a count baseline ("" when it may): an SME2-off arm that ran SME2."""
    bad = [c for c in checks if c.name == SME2_OFF_INSTRUCTIONS and c.status is Status.REGRESSION]
    return bad[0].message if bad else ""
