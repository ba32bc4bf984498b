"""Accepted changes: a checked-in JSON file that stops flagging a known step without touching thresholds.

``sme2_acknowledged.json`` (``pytest-sme2 history --ack FILE``)::

    {"schema_version": 1,
     "acknowledged": [
       {"test": "tests/test_perf.py::test_latency*", "device": "a92033e3b449",
        "commits": "1a2b3c4..5d6e7f8", "reason": "wider first conv: +12 %, accepted in #123"}]}

``test`` is a test id or a glob; ``device`` an identity id (or its first characters, or ``*``); ``commits`` the
commit that made the change, or a range ``A..B`` of them (as ``git log A..B``: after A, up to B), by the commits the
series was measured on; ``metric`` (optional, default every metric) is ``e2e``, ``ratio`` or ``category:NAME``.
A step matched by an entry is listed as acknowledged with the reason and does not count as a regression. An entry
that matches no step of the history is *stale* and is listed so it can be removed (the change left the window, the
test was renamed, or the range is wrong).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_sme2.errors import ConfigError
from pytest_sme2.history.series import FoundStep, Series
from pytest_sme2.store.files import read_json

SCHEMA_VERSION = 1
DEFAULT_FILE = "sme2_acknowledged.json"


@dataclass(frozen=True)
class Acknowledgement:
    test: str
    device: str
    commits: str
    reason: str
    metric: str = ""

    def describe(self) -> str:
        return f"{self.test} on {self.device} at {self.commits}: {self.reason}"


def load(path: str | Path) -> list[Acknowledgement]:
    """The file's entries; a missing file is no entries, a malformed one a ConfigError naming the file and field."""
    p = Path(path)
    if not p.is_file():
        return []
    data = read_json(p, what="acknowledgements file",
                     fix="see docs/history.md#acknowledging-a-change for the format")
    entries = data.get("acknowledged") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f'{p}: no "acknowledged" list; write {{"schema_version": 1, "acknowledged": [...]}} '
                          "(docs/history.md#acknowledging-a-change)")
    out = []
    for i, e in enumerate(entries):
        missing = [k for k in ("test", "device", "commits", "reason") if not (isinstance(e, dict) and e.get(k))]
        if missing:
            raise ConfigError(f"{p}: entry {i + 1} has no {', '.join(missing)}; every entry names the test, the "
                              "device (identity id or *), the commits (C or A..B) and the reason")
        out.append(Acknowledgement(test=str(e["test"]), device=str(e["device"]), commits=str(e["commits"]),
                                   reason=str(e["reason"]), metric=str(e.get("metric", ""))))
    return out


def _position(series: Series, commit: str) -> int | None:
    for i, p in enumerate(series.points):
        if commit and p.commit.startswith(commit):
            return i
    return None


def matches(ack: Acknowledgement, step: FoundStep, series: Series) -> bool:
    if not fnmatch.fnmatchcase(step.test_id, ack.test) and step.test_id != ack.test:
        return False
    if ack.device != "*" and not step.identity_id.startswith(ack.device):
        return False
    if ack.metric and ack.metric != step.metric:
        return False
    if ".." in ack.commits:
        first, _, last = ack.commits.partition("..")
        lo = _position(series, first) if first else -1
        hi = _position(series, last)
        return lo is not None and hi is not None and lo <= step.index - 1 and hi >= step.index
    return step.after_commit.startswith(ack.commits)


def apply(steps: Sequence[FoundStep], series: Sequence[Series], acks: Sequence[Acknowledgement]
          ) -> tuple[list[FoundStep], list[Acknowledgement]]:
    """The steps with ``acknowledged`` set where an entry matches, and the stale entries (matching no step)."""
    by_key = {(s.test_id, s.identity_id, s.metric): s for s in series}
    used: set[int] = set()
    out = []
    for step in steps:
        s = by_key[(step.test_id, step.identity_id, step.metric)]
        hit = next((i for i, a in enumerate(acks) if matches(a, step, s)), None)
        if hit is not None:
            used.add(hit)
        out.append(step if hit is None else replace(step, acknowledged=acks[hit].reason))
    return out, [a for i, a in enumerate(acks) if i not in used]


def to_dict(ack: Acknowledgement) -> dict[str, Any]:
    return {k: v for k, v in ack.__dict__.items() if v}
