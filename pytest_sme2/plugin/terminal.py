"""The ``sme2 performance`` section at the end of the terminal output: one line per test, then the counts."""

from __future__ import annotations

from typing import Any

import pytest

from .records import RESULTS_KEY
from .session import worker_id


def write_summary(terminalreporter: Any, config: pytest.Config) -> None:
    records = config.stash.get(RESULTS_KEY, [])
    if not records or worker_id(config) is not None:
        return
    from ..gate import Status
    from ..report.results import BASELINE_WRITTEN, FAILED, SKIPPED, TestResult, delta_text, speedup_text

    tr = terminalreporter
    tr.write_sep("=", "sme2 performance")
    tests = [TestResult.from_dict(r) for r in records]
    for t in tests:
        h = t.headline
        line = f"{h.status.upper():<16} {t.test_id}"
        if h.median_ms is not None:
            line += f"  median {h.median_ms:.4f} ms"
        if h.delta_pct is not None:
            line += f"  delta {delta_text(h)}"
        if h.speedup is not None:
            line += f"  SME2 speedup {speedup_text(h.speedup)}"
        bad = (Status.REGRESSION.value, FAILED)
        markup = {"red": True} if h.status in bad else (
            {"yellow": True} if h.status in (Status.INCONCLUSIVE.value, Status.INVALID.value, SKIPPED)
            else {"green": True})
        tr.write_line(line, **markup)
        if h.status in (BASELINE_WRITTEN, SKIPPED) and t.note:
            tr.write_line(f"    {t.note.splitlines()[0]}")
        elif h.status in (Status.INCONCLUSIVE.value, Status.INVALID.value) and t.verdict is not None:
            # Not a failure (unless --sme2-strict), so say why here: it must not read as a pass.
            for check in t.verdict.checks:
                if check.status.value == h.status and not check.advisory:
                    tr.write_line(f"    {check.name}: {check.message}")
    counts: dict[str, int] = {}
    for t in tests:
        counts[t.status] = counts.get(t.status, 0) + 1
    tr.write_line("sme2 verdicts: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))

