"""``pytest-sme2 history ...``: list runs, find steps, list current regressions, the PR view, the trend page.

Exit codes (as the other commands): 0 ok; 1 ``regressions`` found current regressions (or creep with
``--fail-on creep``); 2 bad input (a store file that is not ours, a bad acknowledgement file, a ref git does not know).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pytest_sme2.history import acknowledge
from pytest_sme2.history.changepoints import MAX_PVALUE, MIN_PCT, MIN_SIZE
from pytest_sme2.history.creep import BOUND_PCT, WINDOW, Creep, creep_of
from pytest_sme2.history.series import E2E, INSTRUCTIONS, RATIO, FoundStep, Series, all_steps, build_series, short
from pytest_sme2.history.store import HistoryStore, StoredRun
from pytest_sme2.options import RUN_COUNT, percent, probability

DEFAULT_STORE = Path(".sme2_history")
#: What the commands read, for ``pytest_sme2.cli.refuse_overlapping_files``: the store's run files and --ack.
STORE_AND_ACK = (("--store", "store", "runs/*/*.jsonl"), ("--ack", "ack"))


def add_parser(sub: Any) -> None:
    p = sub.add_parser("history", help="the history store: runs, steps across commits, regressions, PR view, page",
                       description="Every pytest-sme2 session appends its results to a history store "
                       "(--sme2-history, default .sme2_history beside the baselines). These commands read it "
                       "(docs/history.md).")
    # A bare ``pytest-sme2 history`` lists the runs of the default store: what a user looks for first.
    hs = p.add_subparsers(dest="history_command", metavar="SUBCOMMAND",
                          help="default: list (the stored runs of .sme2_history)")

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--store", type=Path, default=DEFAULT_STORE, help="history directory (default .sme2_history)")
        q.add_argument("--ack", type=Path, default=Path(acknowledge.DEFAULT_FILE),
                       help=f"acknowledged changes (default {acknowledge.DEFAULT_FILE}; missing = none)")
        q.add_argument("--min-size", type=RUN_COUNT, default=MIN_SIZE,
                       help=f"runs needed on each side of a step (default {MIN_SIZE})")
        q.add_argument("--max-pvalue", type=probability, default=MAX_PVALUE,
                       help=f"t-test p-value a step must be below (default {MAX_PVALUE})")
        q.add_argument("--min-pct", type=percent, default=MIN_PCT,
                       help=f"smallest step reported, percent (default {MIN_PCT:g})")
        q.add_argument("--metrics", choices=("e2e", "all"), default="all",
                       help="e2e = the gate's median only; all = also the categories and on/off ratios (default)")
        q.add_argument("--creep-window", type=RUN_COUNT, default=WINDOW,
                       help=f"runs of one unchanged artifact looked at for creep (default {WINDOW})")
        q.add_argument("--creep-bound", type=percent, default=BOUND_PCT,
                       help=f"creep over the window that is reported, percent (default {BOUND_PCT:g})")

    q = hs.add_parser("list", help="the stored runs, oldest first")
    q.add_argument("--store", type=Path, default=DEFAULT_STORE)
    q = hs.add_parser("steps", help="the steps found in every series, with commit range, size and confidence")
    common(q)
    q.add_argument("--json", type=Path, help="also write the steps, creep and stale acknowledgements as JSON")
    q.set_defaults(files_read=STORE_AND_ACK, files_written=(("--json", "json"),))
    q = hs.add_parser("regressions", help="plain text: the current regressions (exit 1 when there are any)")
    common(q)
    q.add_argument("--fail-on", choices=("creep",), action="append", default=[],
                   help="creep also fails (default: creep is reported, not failed; docs/history.md says why)")
    q = hs.add_parser("pr", help="markdown: the newest run against the run at the merge-base with --base")
    q.add_argument("--store", type=Path, default=DEFAULT_STORE)
    q.add_argument("--base", default="origin/main", help="the PR's base ref (default origin/main): its merge-base "
                   "with the head run's commit is compared")
    q.add_argument("--head", default="", help="the head run: a run id or commit (prefix); default the newest run")
    q.add_argument("--repo", type=Path, default=Path(), help="the git work tree (default .)")
    q.add_argument("--out", type=Path, help="write the markdown here (default: print it)")
    q.add_argument("--step-summary", action="store_true",
                   help="also append it to $GITHUB_STEP_SUMMARY (when set)")
    q.set_defaults(files_read=STORE_AND_ACK[:1], files_written=(("--out", "out"),))
    q = hs.add_parser("page", help="write the static trend page (HTML, works offline)")
    common(q)
    q.add_argument("--out", type=Path, default=Path("sme2_history.html"), help="default sme2_history.html")
    q.set_defaults(files_read=STORE_AND_ACK, files_written=(("--out", "out"),))


def _store(args: argparse.Namespace) -> HistoryStore:
    """The store ``--store`` names, checked to exist (a typo must fail, not read as an empty history)."""
    return HistoryStore(args.store).require(args.history_command or "list")


def _analyse(args: argparse.Namespace) -> tuple[list[Series], list[FoundStep], list[Creep], list[Any], int]:
    store = _store(args)
    runs = store.runs()
    frame = store.frame(runs)
    series = build_series(frame, [E2E] if args.metrics == "e2e" else None)
    steps = all_steps(series, min_size=args.min_size, max_pvalue=args.max_pvalue, min_pct=args.min_pct)
    steps, stale = acknowledge.apply(steps, series, acknowledge.load(args.ack))
    creeps = [c for s in series if (c := creep_of(s, window=args.creep_window, bound_pct=args.creep_bound))]
    return series, steps, creeps, stale, len(runs)


def step_line(s: FoundStep) -> str:
    ack = f"  [acknowledged: {s.acknowledged}]" if s.acknowledged else ""
    unit = {RATIO: "×", INSTRUCTIONS: " instructions executed under emulation"}.get(s.metric, " ms")
    spec = ",.0f" if s.metric == INSTRUCTIONS else ".4g"
    return (f"{s.kind.upper():<11} {s.test_id} [{s.identity_id}] {s.metric}: {s.pct:+.1f}% "
            f"({s.before:{spec}} -> {s.after:{spec}}{unit}) at {s.commit_range}, confidence {s.confidence:.4f}, "
            f"{'artifact changed' if s.artifact_changed else 'same artifact'}, {s.runs_after} run(s) since{ack}")


def cmd_list(args: argparse.Namespace) -> int:
    runs = _store(args).runs()
    if not runs:
        print(f"no runs in {args.store}")
        return 0
    for r in runs:
        statuses: dict[str, int] = {}
        for rec in r.records:
            statuses[rec.status] = statuses.get(rec.status, 0) + 1
        counts = ", ".join(f"{n} {k}" for k, n in sorted(statuses.items()))
        dirty = " (dirty)" if r.run.dirty else ""
        print(f"{r.run.time}  {short(r.run.commit)}{dirty}  {r.run.branch or '-'}  {r.run.run_id}  {counts}")
    return 0


def cmd_steps(args: argparse.Namespace) -> int:
    series, steps, creeps, stale, nruns = _analyse(args)
    print(f"{nruns} run(s), {len({(s.test_id, s.identity_id) for s in series})} test(s) x device, "
          f"{len(series)} series: {len(steps)} step(s)")
    for s in steps:
        print(step_line(s))
    for c in creeps:
        print(f"CREEP       {c.test_id} [{c.identity_id}]: {c.pct:+.1f}% over the last {c.runs} runs of one artifact "
              f"({c.commit_range})")
    for a in stale:
        print(f"STALE ACK   {a.describe()} matches no step in the history: remove it from {args.ack}")
    if args.json:
        from pytest_sme2.store.files import write_atomic

        doc = {"schema_version": 1, "steps": [s.to_dict() for s in steps], "creep": [c.__dict__ for c in creeps],
               "stale_acknowledgements": [acknowledge.to_dict(a) for a in stale]}
        write_atomic(args.json, json.dumps(doc, indent=2) + "\n", what="history steps")
    return 0


def current_regressions(series: list[Series], steps: list[FoundStep], runs: list[StoredRun]
                        ) -> tuple[list[str], list[str]]:
    """The newest run's regressions by its stored verdicts, and each series whose newest step is an
    unacknowledged regression across a changed artifact (a step later undone by an improvement is not current);
    then, apart, the newest steps of an *unchanged* artifact: the machine, which the gate never fails (drift)."""
    lines = []
    if runs:
        head = runs[-1]
        for rec in head.records:
            if rec.status == "regression":
                delta = f" {rec.delta_pct:+.1f}%" if rec.delta_pct is not None else ""
                lines.append(f"REGRESSION  {rec.test_id} [{rec.identity_id}]{delta} (gate verdict of run "
                             f"{head.run.run_id} at {short(head.run.commit)})")
    newest: dict[tuple[str, str, str], FoundStep] = {}
    for s in steps:
        newest[(s.test_id, s.identity_id, s.metric)] = s
    drift: list[str] = []
    for s in newest.values():
        if s.kind == "regression" and not s.acknowledged:
            (lines if s.artifact_changed else drift).append(step_line(s))
    return lines, drift


def cmd_regressions(args: argparse.Namespace) -> int:
    series, steps, creeps, stale, nruns = _analyse(args)
    if not nruns:
        from pytest_sme2.errors import ConfigError

        # A gate over nothing is not green: an empty store is a wrong --store, or a history that was never kept.
        raise ConfigError(f"no runs in the history store {args.store}, so nothing to judge; run the suite first "
                          "(every session appends to --sme2-history) or pass --store DIR of the store it appends to")
    lines, drift = current_regressions(series, steps, _store(args).runs())
    for line in lines:
        print(line)
    for line in drift:
        print(f"DRIFT       {line.split(maxsplit=1)[1]} (same artifact: the machine, reported, not failed)")
    for c in creeps:
        print(f"CREEP       {c.test_id} [{c.identity_id}]: {c.pct:+.1f}% over the last {c.runs} runs of one artifact "
              f"({c.commit_range}){'' if 'creep' in args.fail_on else ' (reported, not failed)'}")
    for a in stale:
        print(f"STALE ACK   {a.describe()} matches no step in the history: remove it from {args.ack}")
    if not lines:
        print("no current regressions")
    return 1 if lines or (creeps and "creep" in args.fail_on) else 0


def cmd_pr(args: argparse.Namespace) -> int:
    from pytest_sme2.errors import ConfigError
    from pytest_sme2.history.pr import find_base, pr_view, render_markdown
    from pytest_sme2.store.files import write_atomic

    runs = _store(args).runs()
    if not runs:
        raise ConfigError(f"no runs in {args.store}: run the suite first (every session appends to --sme2-history)")
    head = runs[-1]
    if args.head:
        matching = [r for r in runs
                    if r.run.run_id == args.head or (r.run.commit and r.run.commit.startswith(args.head))]
        if not matching:
            raise ConfigError(f"--head {args.head}: no run with that id or commit in {args.store} "
                              "(pytest-sme2 history list shows them)")
        head = matching[-1]
    earlier = [r for r in runs if r is not head and r.run.time <= head.run.time]
    base, _, note = find_base(earlier, args.base, args.repo, head_commit=head.run.commit)
    text = render_markdown(pr_view(head, base, base_ref=args.base, base_note=note))
    if args.out:
        write_atomic(args.out, text, what="PR markdown")
    else:
        print(text, end="")
    if args.step_summary:
        from pytest_sme2.results import append_to_step_summary

        append_to_step_summary(text)
    return 0


def cmd_page(args: argparse.Namespace) -> int:
    from pytest_sme2.history.trend import render_page
    from pytest_sme2.store.files import write_atomic

    series, steps, creeps, _, nruns = _analyse(args)
    write_atomic(args.out, render_page(series, steps, creeps), what="trend page")
    print(f"wrote {args.out}: {nruns} run(s), {len(steps)} step(s)")
    return 0


COMMANDS = {"list": cmd_list, "steps": cmd_steps, "regressions": cmd_regressions, "pr": cmd_pr, "page": cmd_page}


def run(args: argparse.Namespace) -> int:
    if args.history_command is None:
        args.store = DEFAULT_STORE
        return cmd_list(args)
    return COMMANDS[args.history_command](args)
