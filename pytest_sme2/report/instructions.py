"""Instructions executed under emulation in every report: one line for the terminal, a table for markdown, a chart of
kinds per arm for HTML (the JSON's view is ``TestResult.instructions_view``).

Every number is labelled as what it is (:data:`~pytest_sme2.evidence.instructions.LABEL`): a count of one execution
under QEMU, the same on every host; never a time and never a speedup. How counts are judged:
:mod:`pytest_sme2.gate.instructions`.
"""

from __future__ import annotations

from pytest_sme2.evidence.instructions import INSTRUCTION_KINDS, LABEL, InstructionCounts, count_ratio
from pytest_sme2.gate.instructions import INSTRUCTION_CHECKS, INSTRUCTIONS, NOTE_PREFIX, moved_text, n
from pytest_sme2.gate.verdict import Check
from pytest_sme2.results import TestResult


def instruction_rows(test: TestResult) -> list[tuple[str, InstructionCounts]]:
    """The counted arms, SME2 off before on (or the one measured arm)."""
    cmp = test.comparison
    rows = []
    if test.profile_off is not None and test.profile_off.instructions is not None:
        rows.append((cmp.off_label if cmp else "SME2 off", test.profile_off.instructions))
    if test.profile is not None and test.profile.instructions is not None:
        rows.append((cmp.on_label if cmp else (test.profile.variant or "measured"), test.profile.instructions))
    return rows


def instruction_checks_of(test: TestResult) -> list[Check]:
    return [c for c in (test.verdict.checks if test.verdict else ()) if c.name in INSTRUCTION_CHECKS]


def instruction_notes(notes: tuple[str, ...] | list[str]) -> list[str]:
    """The notes of a verdict that are about the count baseline (recorded, written, refused)."""
    return [x for x in notes if x.startswith(NOTE_PREFIX)]


def instructions_line(test: TestResult) -> str:
    """``instructions executed under emulation: SME2 off 2,345,678, SME2 on 1,234,567 (on/off 0.526×); vs the count
    baseline: +5.000% (regression)`` or ""."""
    rows = instruction_rows(test)
    if not rows:
        return ""
    bits = [", ".join(f"{label} {n(c.total)}" for label, c in rows)]
    ratio = count_ratio(rows[0][1].total, rows[1][1].total) if len(rows) == 2 else None
    if ratio is not None:
        bits[0] += f" (on/off {ratio:.3f}×)"
    gate = next((c for c in instruction_checks_of(test) if c.name == INSTRUCTIONS), None)
    if gate is not None and gate.delta_pct == 0:
        bits.append(f"identical to the count baseline ({gate.status.value})")
    elif gate is not None and gate.delta_pct is not None:
        bits.append(f"vs the count baseline {gate.delta_pct:+.3f}% ({gate.status.value})")
    elif gate is not None:
        bits.append(f"vs the count baseline: {gate.status.value}")
    return f"{LABEL} per execution: " + "; ".join(bits)


def instructions_markdown(test: TestResult) -> list[str]:
    """A table of kinds per arm, what moved between the arms, and the instruction checks."""
    rows = instruction_rows(test)
    if not rows:
        return []
    out = ["| arm | total | " + " | ".join(INSTRUCTION_KINDS) + " | CPU |",
           "|---|---:|" + "---:|" * len(INSTRUCTION_KINDS) + "---|"]
    for label, c in rows:
        out.append(f"| {label} | {n(c.total)} | " + " | ".join(n(c.by_kind.get(k, 0)) for k in INSTRUCTION_KINDS)
                   + f" | {c.cpu} (QEMU {c.qemu_version}) |")
    if len(rows) == 2:
        moved = moved_text(rows[0][1], rows[1][1])
        ratio = count_ratio(rows[0][1].total, rows[1][1].total)
        said = ([f"on/off {ratio:.3f}× the instructions"] if ratio is not None else []) + ([moved] if moved else [])
        if said:
            out += ["", f"**{rows[0][0]} → {rows[1][0]}:** " + "; ".join(said) + "."]
    checks = instruction_checks_of(test)
    if checks:
        out += [""] + [f"- **{c.name}** ({c.status.value}): {c.message}" for c in checks]
    out += ["", f"_{LABEL[0].upper()}{LABEL[1:]}: one execution counted under QEMU, the same on every host; a count, "
            "not a time, and no speedup follows from it._"]
    return out


def instructions_chart(test: TestResult) -> str:
    """The HTML chart: kinds of instructions per arm, or "" when no arm was counted."""
    from pytest_sme2.report.charts import instruction_kind_bars

    rows = instruction_rows(test)
    if not rows:
        return ""
    return instruction_kind_bars([(label, c.by_kind) for label, c in rows], INSTRUCTION_KINDS,
                                 title=f"{LABEL[0].upper()}{LABEL[1:]}, by kind, per arm")
