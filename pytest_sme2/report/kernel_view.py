"""Kernel view: which XNNPACK micro-kernels a runner build selected, as report tables.

Two views, both from :mod:`pytest_sme2.evidence.kernels` logs and their rows (``kernel_rows``, ``side_by_side``):
one build's kernel table (kind, kernel, ISA suffix, SME2 yes/no) and the side-by-side of two builds (what only
SME2-off selected, what only SME2-on selected, what both share). The seeds' ``generate_kernel_view.py`` printed the
same two tables from CSV files; here they come straight from the parsed log, as :class:`~.cells.Table` data the
report formats render.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_sme2.analysis.run import Analysis
from pytest_sme2.evidence.kernels import KernelLog, is_sme2, kernel_rows, side_by_side
from pytest_sme2.evidence.qemu_log import ExecutedKernels
from pytest_sme2.evidence.sme import NOT_SME, OTHER, SME, UNDETERMINED, TraceEvidence
from pytest_sme2.report import cells
from pytest_sme2.report.cells import Cell, Column, Table


def _code_lines(names: Sequence[str]) -> Cell:
    return cells.text("\n".join(f"`{n}`" for n in names)) if names else cells.text("—")


def kernel_table(log: KernelLog) -> Table | None:
    """One build's kernels: kind, kernel, ISA suffix, SME2 (None when the log selected none)."""
    rows = [[cells.text(r.kind), cells.code(r.kernel), cells.text(r.isa), cells.text("yes" if r.sme2 else "no",
                                                                                     strong=r.sme2)]
            for r in kernel_rows(log)]
    if not rows:
        return None
    columns = (Column("kind"), Column("kernel"), Column("ISA"), Column("SME2"))
    return Table(f"Kernels selected ({log.source})", columns, tuple(tuple(r) for r in rows))


def side_by_side_table(off: KernelLog, on: KernelLog, *, off_label: str = "SME2 off",
                       on_label: str = "SME2 on") -> Table | None:
    """Per kernel kind: the kernels only each build selected, and how many both selected."""
    rows = [(cells.text(r.kind), _code_lines(r.only_off), _code_lines(r.only_on), cells.count(len(r.both)))
            for r in side_by_side(off, on)]
    if not rows:
        return None
    columns = (Column("kind"), Column(f"only {off_label}"), Column(f"only {on_label}"), Column("in both", numeric=True))
    return Table("Kernels side by side", columns, tuple(rows))


#: How each trace-evidence group reads in a table.
_EVIDENCE_WORDS = {SME: "SME path", NOT_SME: "off the SME path", UNDETERMINED: "name does not tell",
                   "portable": "portable kernels", OTHER: "not a GEMM"}
_TRACE_NOTE = ("From the trace's operator names: XNNPACK names its SME/KleidiAI GEMMs by their packed-LHS data types "
               "(PF32, PF16, PQS8; Pack LH), so a name proves the SME path ran (SME or SME2: the device says which). "
               "QP8 GEMMs have one name on both paths. Rules: pytest_sme2/data/sme_operator_rules.json.")
_EXECUTED_NOTE = ("From QEMU's -d in_asm log: an exported function is listed when any of its code ran at least once "
                  "(ran, not how long). XNNPACK's own micro-kernels are not exported: the rows marked (not exported) "
                  "count the instruction classes of the code that ran outside every export, per library "
                  "(za: SME array, z: SVE/streaming, v: NEON).")


def trace_evidence_table(ev: TraceEvidence, *, title: str = "Operators and the SME path (trace)") -> Table | None:
    """GEMM-like and portable operators of a trace, each with its SME evidence (None when there is none)."""
    groups = ((SME, ev.sme), (NOT_SME, ev.not_sme), (UNDETERMINED, ev.undetermined), ("portable", ev.portable))
    rows = [(cells.code(name), cells.text(_EVIDENCE_WORDS[kind], strong=kind == SME))
            for kind, names in groups for name in names]
    if not rows:
        return None
    return Table(title, (Column("operator"), Column("evidence")), tuple(rows), (_TRACE_NOTE,))


def operator_evidence_table(a: Analysis) -> Table | None:
    """Every operator of a traced analysis, by time per run, with what its name says about SME (None without
    operators or evidence): SME path, off it, the name does not tell (QP8), not a GEMM, portable kernels."""
    ev = a.trace_evidence
    if ev is None or not a.operator_details:
        return None
    rows = []
    for o in a.operator_details:
        kind = ev.kind_of(o.name) or OTHER
        word = "portable" if kind == OTHER and o.backend == "portable" else kind
        rows.append((cells.code(o.name), cells.category(o.category), cells.ms(o.total_ms),
                     cells.share(o.share, bar=o.category), cells.text(_EVIDENCE_WORDS[word], strong=kind == SME)))
    on_sme = sum(o.share for o in a.operator_details if ev.kind_of(o.name) == SME)
    columns = (Column("operator"), Column("category"), Column("ms per run", numeric=True),
               Column("% of E2E", numeric=True), Column("SME evidence"))
    title = f"SME evidence per operator (trace names; {on_sme:.1%} of E2E on the SME path)"
    return Table(title, columns, tuple(rows), (_TRACE_NOTE,))


def _kernel_like(name: str) -> bool:
    """KleidiAI routines and XNNPACK micro-kernels, not the C library or the runtime's own functions."""
    return name.startswith("kai_") or "ukernel" in name or is_sme2(name)


def executed_kernels_table(ek: ExecutedKernels, *, title: str = "Kernels that ran (QEMU)") -> Table | None:
    """The exported kernels that ran (KleidiAI/XNNPACK names; SME2 marked), then per library the instruction
    classes of the code outside the exports. None when neither has a row."""
    rows = [(cells.text(f.library.rsplit("/", 1)[-1]), cells.code(f.name),
             cells.text("yes" if f.sme2 else "no", strong=f.sme2), cells.count(f.blocks))
            for f in ek.functions if _kernel_like(f.name)]
    rows += [(cells.text(r.library.rsplit("/", 1)[-1]),
              cells.text("(not exported) " + (", ".join(f"{k} {n}" for k, n in r.classes[:6]) or "no counted class")),
              cells.text("—"), cells.count(r.blocks))
             for r in ek.unmapped if r.classes]
    if not rows:
        return None
    columns = (Column("library"), Column("function / instruction classes"), Column("SME2"),
               Column("blocks", numeric=True))
    return Table(title, columns, tuple(rows), (_EXECUTED_NOTE,))
