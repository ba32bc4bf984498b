"""The PR view: the newest run against the run at the PR's merge-base (or a named ref), as a compact markdown
table for a PR comment or ``$GITHUB_STEP_SUMMARY``.

The numbers are the gate's: every status, median and change with its interval is read from the stored verdicts
of the head run, never recomputed. ``regressed``, ``improved``, ``unchanged`` (pass and drift) and ``invalid``
(invalid, inconclusive, failed) count the head run's tests by their gate status, so they add up to what the
session's ``sme2 verdicts`` line said; ``new`` and ``missing`` count tests present in only one of the two runs
(a new test is also counted under its status). Tests the gate did not judge (recorded, measured,
baseline-written) are counted as ``not gated``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_sme2.errors import ConfigError
from pytest_sme2.history.records import HistoryRecord
from pytest_sme2.history.store import StoredRun
from pytest_sme2.store.gitinfo import git
from pytest_sme2.units import fmt_range, fmt_signed_pct

COLUMNS = ("regressed", "improved", "unchanged", "new", "missing", "invalid")
STATUS_COLUMN = {"regression": "regressed", "improvement": "improved", "pass": "unchanged", "drift": "unchanged",
                 "invalid": "invalid", "inconclusive": "invalid", "failed": "invalid"}
NOT_GATED = "not gated"
ICONS = {"regressed": "❌", "improved": "🚀", "unchanged": "✅", "invalid": "⛔", NOT_GATED: "🆕"}


@dataclass(frozen=True)
class Row:
    test_id: str
    label: str
    identity_id: str
    column: str
    head: HistoryRecord | None
    base: HistoryRecord | None


@dataclass(frozen=True)
class PrView:
    head: StoredRun
    base: StoredRun | None
    base_ref: str
    #: how the base run was found ("" = at the merge-base itself)
    base_note: str
    rows: tuple[Row, ...]

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys((*COLUMNS, NOT_GATED), 0)
        for r in self.rows:
            if r.head is not None:
                out[r.column] += 1
                if r.base is None and self.base is not None:
                    out["new"] += 1
            else:
                out["missing"] += 1
        return out


def column_of(status: str) -> str:
    return STATUS_COLUMN.get(status, NOT_GATED)


def find_base(runs: Sequence[StoredRun], ref: str, cwd: Path, *, head_commit: str) -> tuple[StoredRun | None, str, str]:
    """The newest run at ``git merge-base HEAD ref``, else at its nearest ancestor with a run (said in the note)."""
    base_commit = git(["merge-base", head_commit or "HEAD", ref], cwd)
    if not base_commit:
        raise ConfigError(f"git merge-base {head_commit or 'HEAD'} {ref} failed in {cwd}: name a ref that exists "
                          "(--base origin/main; in GitHub Actions fetch it: actions/checkout with fetch-depth: 0)")
    by_commit: dict[str, StoredRun] = {}
    for r in runs:
        if r.run.commit:
            by_commit[r.run.commit] = r  # runs are oldest first: the newest run of a commit wins
    ancestors = (git(["rev-list", "--max-count=200", base_commit], cwd) or "").split()
    for distance, commit in enumerate(ancestors):
        if commit in by_commit:
            note = "" if distance == 0 else (f"no run at the merge-base {base_commit[:10]}; compared with the run "
                                             f"at {commit[:10]}, {distance} commit(s) older")
            return by_commit[commit], base_commit, note
    return None, base_commit, f"no run at the merge-base {base_commit[:10]} or its 200 ancestors"


def pr_view(head: StoredRun, base: StoredRun | None, *, base_ref: str, base_note: str = "") -> PrView:
    def key(r: HistoryRecord) -> tuple[str, str]:
        return (r.test_id, r.identity_id)

    base_map = {key(r): r for r in base.records} if base else {}
    head_map = {key(r): r for r in head.records}
    rows = [Row(r.test_id, r.label, r.identity_id, column_of(r.status), r, base_map.get(key(r)))
            for r in head.records]
    rows += [Row(r.test_id, r.label, r.identity_id, "missing", None, r) for k, r in base_map.items()
             if k not in head_map]
    return PrView(head=head, base=base, base_ref=base_ref, base_note=base_note, rows=tuple(rows))


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.4g} ms"


def _gate_delta(r: HistoryRecord) -> str:
    if r.delta_pct is None:
        return "—"
    ci = f" ({fmt_range(r.delta_ci_pct[0], r.delta_ci_pct[1], fmt_signed_pct)})" if r.delta_ci_pct else ""
    return f"{r.delta_pct:+.1f}%{ci}"


def render_markdown(view: PrView, *, title: str = "pytest-sme2: performance against the merge-base") -> str:
    counts = view.counts()
    head = view.head.run
    cols = [c for c in (*COLUMNS, NOT_GATED) if c in COLUMNS or counts[c]]
    lines = [f"### {title}", ""]
    base = (f"`{view.base.run.commit[:10]}` (merge-base with `{view.base_ref}`)" if view.base
            else f"none (merge-base with `{view.base_ref}`)")
    lines.append(f"Head `{head.commit[:10] or 'unknown'}` ({head.branch or 'no branch'}) against {base}.")
    if view.base_note:
        lines.append(f"> {view.base_note}")
    lines += ["", "| " + " | ".join(cols) + " |", "|" + "---:|" * len(cols),
              "| " + " | ".join(str(counts[c]) for c in cols) + " |", ""]
    shown = [r for r in view.rows if r.column != "unchanged" or (r.base is None and view.base is not None)]
    if shown:
        lines += ["| | test | device | status | vs baseline (gate, 95% CI) | median: merge-base → head |",
                  "|---|---|---|---|---:|---:|"]
        for r in sorted(shown, key=lambda r: (*COLUMNS, NOT_GATED).index(r.column) if r.column in COLUMNS
                        else 9):
            status = r.head.status if r.head else "missing"
            new = " (new)" if r.head is not None and r.base is None and view.base is not None else ""
            lines.append(f"| {ICONS.get(r.column, '❔')} | `{r.test_id}`{new} | `{r.identity_id}` | {status} | "
                         f"{_gate_delta(r.head) if r.head else '—'} | "
                         f"{_ms(r.base.median_ms if r.base else None)} → {_ms(r.head.median_ms if r.head else None)} |")
        lines.append("")
    unchanged = counts["unchanged"]
    if unchanged:
        lines.append(f"{unchanged} test(s) unchanged (pass or drift) are not listed.")
    return "\n".join(lines) + "\n"
