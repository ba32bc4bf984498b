"""The history store: append-only, one JSON-lines file per run, written atomically.

Layout: ``<store>/runs/<YYYY-MM>/<UTC time>-<commit[:10]>-<run id>.jsonl``. The first line is the run
(:class:`~.records.RunInfo`, with ``kind`` and ``schema_version``), each further line one test's
:class:`~.records.HistoryRecord`.

Why this format (docs/history.md has the comparison):
- *append-only and safe for concurrent writers without a lock*: a run adds a new file under a unique name and
  never opens another; two CI jobs, two branches or a cache restored over a commit never write the same file;
- *killed runs leave nothing half-written*: the file is written whole with :func:`~pytest_sme2.store.files.write_atomic`
  (temp file, fsync, rename) at session end;
- *mergeable in git*: new files never conflict (one SQLite file or one shared JSON-lines file would conflict on
  every concurrent branch);
- *small*: ~0.8 kB per test per run; 1,000 runs of the example suite (15 tests) are 11.8 MB, 1.1 MB gzipped
  (benchmarks/README.md, "History"). Reading them into a pandas frame takes ~1 s (measured there too).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_sme2.errors import Sme2Error, check_schema_version
from pytest_sme2.history.records import KIND, SCHEMA_VERSION, HistoryRecord, RunInfo
from pytest_sme2.store.files import TMP_PREFIX, write_atomic

RUNS_DIR = "runs"


class HistoryError(Sme2Error):
    """The history store cannot be read (a file that is not ours, a newer schema)."""


@dataclass(frozen=True)
class StoredRun:
    run: RunInfo
    records: tuple[HistoryRecord, ...]
    path: Path


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


class HistoryStore:
    """The runs under ``root``: :meth:`append` one, :meth:`runs` all (oldest first), :meth:`frame` as pandas."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path_for(self, run: RunInfo) -> Path:
        stamp = run.time.replace(":", "").replace("-", "").replace("+0000", "Z")[:15]
        commit = (run.commit or "nocommit")[:10]
        return self.root / RUNS_DIR / run.time[:7] / f"{stamp}-{commit}-{run.run_id}.jsonl"

    def append(self, run: RunInfo, records: Sequence[HistoryRecord]) -> Path:
        """Write one run with its records as a new file (atomically); never touches another run's file."""
        lines = [json.dumps(run.to_dict(), separators=(",", ":"), sort_keys=True)]
        lines += [json.dumps(r.to_dict(), separators=(",", ":"), sort_keys=True) for r in records]
        return write_atomic(self.path_for(run), "\n".join(lines) + "\n", what="history run")

    def require(self, command: str = "list") -> HistoryStore:
        """This store, checked to be one ``pytest-sme2 history <command>`` can read: an existing directory (a typo in
        ``--store`` must not read as an empty history, and so as "no current regressions"). Raises HistoryError."""
        where = "" if self.root.is_absolute() else f" (relative to {Path.cwd()})"
        fix = f"name the store: pytest-sme2 history {command} --store DIR"
        if not self.root.exists():
            raise HistoryError(f"no history store at {self.root}{where}: each pytest session with pytest-sme2 appends "
                               "its run to --sme2-history (default .sme2_history beside the baselines); run pytest "
                               f"here first, or {fix}")
        if not self.root.is_dir():
            raise HistoryError(f"history store {self.root} is a file, not a directory: a store is the directory "
                               f"pytest sessions append their runs to (--sme2-history); {fix}")
        runs = self.root / RUNS_DIR
        if runs.exists() and not runs.is_dir():
            raise HistoryError(f"history store {self.root}: {runs} is a file, not the directory of runs; remove it "
                               "(the next session recreates it) or restore the store from git")
        return self

    def files(self) -> list[Path]:
        base = self.root / RUNS_DIR
        if not base.is_dir():
            return []
        return sorted(p for p in base.glob("*/*.jsonl") if not p.name.startswith(TMP_PREFIX))

    def runs(self) -> list[StoredRun]:
        """Every stored run, oldest first (by its time, then its file name)."""
        out = [read_run(p) for p in self.files()]
        return sorted(out, key=lambda r: (r.run.time, r.path.name))

    def frame(self, runs: Iterable[StoredRun] | None = None) -> Any:
        """One row per record, with the run's columns (``run_id``, ``time``, ``commit``, ``branch``...) and an
        ``order`` column (0 = the oldest run)."""
        import pandas as pd

        rows = []
        for order, stored in enumerate(self.runs() if runs is None else runs):
            run = stored.run.__dict__
            for rec in stored.records:
                rows.append({**{k: run[k] for k in ("run_id", "time", "commit", "branch", "commit_source", "dirty")},
                             "order": order, **rec.__dict__})
        columns = ["run_id", "time", "commit", "branch", "commit_source", "dirty", "order",
                   *HistoryRecord.__dataclass_fields__]
        return pd.DataFrame(rows, columns=columns)


def read_run(path: Path) -> StoredRun:
    """One run file; a file that is not a history run, or of a newer schema, is a HistoryError naming it."""
    try:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        header = json.loads(lines[0]) if lines else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HistoryError(f"{path}: not a pytest-sme2 history run ({exc}); "
                           "remove the file or restore it from git") from None
    if not isinstance(header, dict) or header.get("kind") != KIND:
        raise HistoryError(f"{path}: not a pytest-sme2 history run (its first line has no kind {KIND!r}); "
                           "remove it from the history directory")
    check_schema_version(header, reads=SCHEMA_VERSION, what="history run", source=path, error=HistoryError,
                         missing=SCHEMA_VERSION, fix="remove it from the history directory")
    try:
        records = tuple(HistoryRecord.from_dict(json.loads(line)) for line in lines[1:])
    except (KeyError, ValueError, TypeError) as exc:
        raise HistoryError(f"{path}: a record does not parse ({exc}); remove the file or restore it from git") from None
    for number, record in enumerate(records, start=2):
        problem = record.problem()
        if problem:
            # Left out of a series it would be a silent gap in step detection; the file was edited or damaged.
            raise HistoryError(f"{path}: line {number} ({record.test_id}): {problem}; no measurement has it: remove "
                               "the file or restore it from git")
    return StoredRun(RunInfo.from_dict(header), records, path)


def append_results(root: str | Path, results: Any, *, cwd: Path, environ: Any = None) -> tuple[Path, RunInfo] | None:
    """Append one session's results (a ``SessionResults``) to the store at ``root`` as one new run file.

    The commit and branch come from git at ``cwd`` (the project's rootdir), else CI variables
    (:mod:`.gitinfo`). Returns the file and the run, or None when no test of the session is kept (all skipped).
    """
    import platform

    from pytest_sme2.history.records import records_from_results
    from pytest_sme2.store.baseline import now_iso
    from pytest_sme2.store.gitinfo import commit_info
    from pytest_sme2.version import __version__

    records = records_from_results(results)
    if not records:
        return None
    info = commit_info(cwd, environ)
    run = RunInfo(run_id=new_run_id(), time=now_iso(), commit=info.commit, branch=info.branch,
                  commit_source=info.source, dirty=info.dirty, tool_version=__version__, host=platform.node())
    return HistoryStore(root).append(run, records), run
