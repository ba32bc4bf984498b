"""History across commits: every run remembered, steps found, a trend page, a PR view (docs/history.md).

- ``records``      — one test's result of one run -> a small :class:`HistoryRecord` (what the store keeps);
- ``gitinfo``      — the commit and branch a run measured (git, else CI variables, else "unknown");
- ``store``        — the append-only store: one JSON-lines file per run, written atomically;
- ``changepoints`` — steps in a series (E-divisive means with a t-test, as Apache Otava does);
- ``acknowledge``  — the checked-in file of accepted changes, and its stale entries;
- ``creep``        — slow drift of an unchanged artifact over N runs;
- ``pr``           — the PR view: one run against the merge-base's run, from the stored verdicts;
- ``trend``        — the static trend page (one chart per test and device).

Nothing here imports pytest: the plugin's session-end hook and ``pytest-sme2 history`` call the same functions.
"""
