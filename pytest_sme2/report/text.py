"""Plain text for the terminal: the seeds' category list, the top operators, bottlenecks, latency.

The category list keeps the seeds' layout (largest first, the category sum checked against E2E);
its numbers and every other table come from :mod:`.tables`, as in the markdown and HTML reports.
"""

from __future__ import annotations

from pytest_sme2.analysis.run import Analysis
from pytest_sme2.report.cells import Cell, Kind, Table, cell_text
from pytest_sme2.report.tables import analysis_category_table, analysis_operator_table


def _plain(cell: Cell) -> str:
    out = cell_text(cell)
    return f"{out} ({cell.note})" if cell.note else out


def render_table(table: Table, *, indent: str = "  ") -> str:
    """The table in aligned columns (numbers right-aligned) under its title, notes after it."""
    grid = [[c.title for c in table.columns], *[[_plain(x) for x in row] for row in table.rows]]
    widths = [max(len(r[i]) for r in grid) for i in range(len(table.columns))]
    lines = [f"{table.title}:"]
    for row in grid:
        cells = [v.rjust(w) if col.numeric else v.ljust(w)
                 for v, w, col in zip(row, widths, table.columns, strict=True)]
        lines.append((indent + "  ".join(cells)).rstrip())
    lines += [f"({note})" for note in table.notes]
    return "\n".join(lines)


def category_table(analysis: Analysis, *, title: str = "Category totals (ms per run)") -> str:
    """The category breakdown with ms and %, and the category sum checked against E2E."""
    table = analysis_category_table(analysis)
    rows = [r for r in table.rows if r[0].kind is Kind.CATEGORY]
    lines = [f"{title}:"]
    for name, ms, share in sorted(rows, key=lambda r: -float(r[1].value or 0.0)):
        lines.append(f"  - {cell_text(name) + ':':<15}{float(ms.value or 0.0):>10.3f}  ({cell_text(share):>6})")
    lines.append("---")
    lines.append(f"Total (category sum): {sum(float(r[1].value or 0.0) for r in rows):.3f} ms")
    lines.append(f"E2E (Method::execute, mean of {analysis.runs_measured} measured runs): {analysis.e2e.mean:.3f} ms")
    if not analysis.per_operator:
        lines.append("(no per-operator trace: everything is Other; see the note above)")
    return "\n".join(lines)


def latency_line(analysis: Analysis) -> str:
    s = analysis.e2e
    cold = f"cold {s.cold:.3f}, " if s.cold is not None else ""
    # Pooled blocks have already dropped their own warm-ups (merge() keeps measured runs only).
    warmup = f", {analysis.warmup} warm-up excluded" if analysis.warmup else ""
    return (
        f"E2E ms: {cold}median {s.median:.3f}, mean {s.mean:.3f}, min {s.min:.3f}, max {s.max:.3f}, "
        f"p90 {s.p90:.3f}, std {s.std:.3f}, CV {s.cv * 100:.1f}% "
        f"({analysis.runs_measured} measured{warmup})"
    )


def operator_table(analysis: Analysis, *, top: int = 10) -> str:
    """The ``top`` operators by time per run ("" without a per-operator trace)."""
    table = analysis_operator_table(analysis, top)
    return render_table(table) if table is not None else ""


def bottleneck_lines(analysis: Analysis) -> str:
    if not analysis.bottlenecks:
        return "No bottleneck above 5% of E2E."
    return "Bottlenecks (> 5% of E2E):\n" + "\n".join(
        f"  - [{b.kind}] {b.name}: {b.total_ms:.3f} ms ({b.share * 100:.1f}%) — {b.advice}"
        for b in sorted(analysis.bottlenecks, key=lambda b: -b.share)
    )
