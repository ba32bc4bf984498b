"""Plain-text tables for the terminal: the seeds' category table and the top operators."""

from __future__ import annotations

from ..analysis import Analysis
from ..categories import CATEGORIES


def category_table(analysis: Analysis, *, title: str = "Category totals (ms per run)") -> str:
    """The category breakdown with ms and %, and the category sum checked against E2E."""
    lines = [f"{title}:"]
    shares = analysis.category_share
    for cat in sorted(CATEGORIES, key=lambda c: -analysis.category_totals_ms[c]):
        ms = analysis.category_totals_ms[cat]
        lines.append(f"  - {cat + ':':<15}{ms:>10.3f}  ({shares[cat] * 100:5.1f}%)")
    lines.append("---")
    lines.append(f"Total (category sum): {sum(analysis.category_totals_ms.values()):.3f} ms")
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
    if not analysis.operator_details:
        return ""
    lines = [f"Top operators (of {len(analysis.operator_details)}):",
             f"  {'operator':<44}{'category':<15}{'calls':>6}{'avg ms':>10}{'total ms':>10}{'share':>8}  backend"]
    for op in analysis.operator_details[:top]:
        lines.append(
            f"  {op.name[:43]:<44}{op.category:<15}{op.count:>6.0f}{op.avg_ms:>10.4f}{op.total_ms:>10.4f}"
            f"{op.share * 100:>7.1f}%  {op.backend}" + (f"  [{op.kernel_hint}]" if op.kernel_hint else "")
        )
    return "\n".join(lines)


def bottleneck_lines(analysis: Analysis) -> str:
    if not analysis.bottlenecks:
        return "No bottleneck above 5% of E2E."
    return "Bottlenecks (> 5% of E2E):\n" + "\n".join(
        f"  - [{b.kind}] {b.name}: {b.total_ms:.3f} ms ({b.share * 100:.1f}%) — {b.advice}"
        for b in sorted(analysis.bottlenecks, key=lambda b: -b.share)
    )

