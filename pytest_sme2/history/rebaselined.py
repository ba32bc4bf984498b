"""Baselines re-recorded in a change, compared with the merge-base's: a slower baseline is never written silently.

A change that makes a model slower and commits ``--sme2-update-baseline`` output is *unchanged* in its own CI (its
artifact is the new baseline's), so without this the step from the old baseline to the new one is never judged.
Here every baseline file that differs from its version at ``git merge-base HEAD <base ref>`` is read twice — as it
was there (``git show``) and as it is now — and the two are compared by the rule two sessions get
(:func:`pytest_sme2.judge.compare_recorded`: another device identity is refused, an unchanged artifact is drift,
a changed one is gated at the margin plus the drift allowance). Each delta is reported; a regression fails unless an
entry of the acknowledgement file (``sme2_acknowledged.json``, :mod:`pytest_sme2.history.acknowledge`) accepts it:
its ``test`` and ``device`` match, and its ``commits`` name a commit since the merge-base that changed the file, or a
range holding one (``A..`` reaches to HEAD and the work tree, for a change not committed yet).

Run by ``pytest-sme2 rebaselined --base origin/main`` and, in CI, by the plugin at the end of a session when a base
ref is known (``--sme2-base-ref``; on a GitHub pull request ``origin/$GITHUB_BASE_REF``).
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_sme2.errors import ConfigError, Sme2Error
from pytest_sme2.gate.calibration import DriftCalibration
from pytest_sme2.gate.instructions import INSTRUCTIONS, INSTRUCTIONS_OFF, count_check
from pytest_sme2.gate.verdict import Comparison, GateConfig, Verdict, overall
from pytest_sme2.history.acknowledge import Acknowledgement
from pytest_sme2.store.baseline import Baseline
from pytest_sme2.store.gitinfo import git


@dataclass(frozen=True)
class Rebaselined:
    """One baseline file re-recorded since the merge-base, and its step from the old to the new."""

    path: str
    test_id: str
    identity_id: str
    #: the verdict of the new baseline against the old one; None when refused (another identity) or unreadable
    verdict: Verdict | None
    #: why it was not compared, when it was not
    not_compared: str = ""
    #: the commits since the merge-base that changed the file (empty: changed in the work tree only)
    commits: tuple[str, ...] = ()
    #: the acknowledgement's reason, when one accepts the step
    acknowledged: str = ""

    @property
    def failed(self) -> bool:
        return self.verdict is not None and self.verdict.failed and not self.acknowledged

    def describe(self) -> str:
        """``REGRESSION tests/x.py::t (baseline file): median 1.0 -> 1.3 ms (+30.0 %) ...`` with what to do."""
        head = f"{self.test_id} ({self.path})"
        if self.verdict is None:
            return f"NOT COMPARED {head}: {self.not_compared}"
        e2e = self.verdict.e2e
        counts = next((c for c in self.verdict.checks if c.name == INSTRUCTIONS), None)
        delta = (f": median {e2e.baseline:.4g} -> {e2e.candidate:.4g} ms ({e2e.delta_pct:+.1f} %)"
                 if e2e is not None and e2e.interval else f": {e2e.message}" if e2e is not None else
                 f": {counts.message}" if counts is not None else "")
        line = f"{self.verdict.status.value.upper()} {head}{delta}"
        if self.acknowledged:
            return f"{line}; acknowledged: {self.acknowledged}"
        if self.failed:
            where = ", ".join(c[:10] for c in self.commits) or "the work tree"
            counted = any(c.name == INSTRUCTIONS for c in self.verdict.checks)
            what = ("executes more instructions under emulation than the merge-base's" if counted else
                    "is slower than the merge-base's" if self.verdict.status.value == "regression" else
                    "cannot be told from the machines' drift between the two recordings: no drift allowance is "
                    "calibrated for it (run main a few times on this device to build its history) or set by hand "
                    "(--sme2-drift-allowance)")
            line += (f"; the baseline re-recorded in {where} {what}. Accept it with an entry "
                     f'in sme2_acknowledged.json: {{"test": "{self.test_id}", "device": "{self.identity_id[:12]}", '
                     f'"commits": "{self.commits[-1][:10] if self.commits else "<merge-base>.."}", "reason": "..."}}'
                     ", or fix the slowdown")
        return line


@dataclass(frozen=True)
class RebaselineReport:
    """Every baseline file that differs from the merge-base's: re-recorded, added or removed."""

    base_ref: str
    merge_base: str
    rebaselined: tuple[Rebaselined, ...] = ()
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return any(r.failed for r in self.rebaselined)

    def lines(self) -> list[str]:
        out = [f"baselines against the merge-base {self.merge_base[:10]} with {self.base_ref}: "
               f"{len(self.rebaselined)} re-recorded, {len(self.added)} added, {len(self.removed)} removed"]
        out += [r.describe() for r in self.rebaselined]
        out += [f"ADDED {p}: a new baseline, nothing to compare it with" for p in self.added]
        out += [f"REMOVED {p}" for p in self.removed]
        return out


def rebaselined(baseline_dir: Path, *, base_ref: str, config: GateConfig,
                acknowledgements: Sequence[Acknowledgement] = (),
                calibrate: Callable[[str, str], DriftCalibration] | None = None) -> RebaselineReport:
    """Compare every baseline file in ``baseline_dir`` that differs from its version at the merge-base of HEAD and
    ``base_ref`` with that version. Raises :class:`~pytest_sme2.errors.ConfigError` outside a git work tree or when
    the merge-base cannot be found (a ref not fetched). ``calibrate``: the drift allowance of each test on its device
    from the history (:mod:`pytest_sme2.gate.calibration`), when ``config`` sets none by hand."""
    from pytest_sme2.judge import Recorded, compare_recorded

    where = baseline_dir if baseline_dir.is_dir() else baseline_dir.parent
    top = git(["rev-parse", "--show-toplevel"], where)
    if not top:
        raise ConfigError(f"{baseline_dir} is not in a git work tree, so there is no merge-base to compare its "
                          "baselines with; run in a clone of the project")
    root = Path(top)
    merge_base = git(["merge-base", "HEAD", base_ref], root)
    if not merge_base:
        raise ConfigError(f"git merge-base HEAD {base_ref} failed in {root}: name a ref that exists (--base "
                          "origin/main; in GitHub Actions fetch it: actions/checkout with fetch-depth: 0)")
    relative = baseline_dir.resolve().relative_to(root.resolve()).as_posix()
    changes = git(["diff", "--no-renames", "--name-status", merge_base, "--", relative], root) or ""
    found: list[Rebaselined] = []
    added, removed = [], []
    for line in changes.splitlines():
        status, _, path = line.partition("\t")
        if not path.endswith(".json"):
            continue
        if status.startswith("A"):
            added.append(path)
            continue
        if status.startswith("D"):
            removed.append(path)
            continue
        old_text = git(["show", f"{merge_base}:{path}"], root, timeout=30)
        try:
            old = Baseline.from_dict(json.loads(old_text or ""), source=f"{path} at {merge_base[:10]}")
            new = Baseline.from_dict(json.loads((root / path).read_text(encoding="utf-8")), source=path)
        except (ValueError, OSError, Sme2Error):
            continue  # not a baseline (another JSON file in the directory), or one the session itself reports
        commits = tuple((git(["log", "--format=%H", f"{merge_base}..HEAD", "--", path], root) or "").split())
        if new.instructions is not None and old.instructions is not None:
            # A count baseline: its step is judged on the counts, exactly (its one emulated execution is no sample).
            entry = Rebaselined(path, new.test_id, new.identity_id, counts_step(old, new), "", commits)
        else:
            outcome = compare_recorded(Recorded(old.samples(), old.identity, old.artifact, old.memory),
                                       Recorded(new.samples(), new.identity, new.artifact, new.memory), config,
                                       test_id=new.test_id, calibrate=calibrate)
            refused = f"recorded on another device identity ({'; '.join(outcome.refused)})" if outcome.refused else ""
            entry = Rebaselined(path, new.test_id, new.identity_id, outcome.verdict, refused, commits)
        if entry.verdict is not None and entry.verdict.failed:
            reason = next((a.reason for a in acknowledgements if _accepts(a, entry, root)), "")
            entry = replace(entry, acknowledged=reason)
        found.append(entry)
    return RebaselineReport(base_ref, merge_base, tuple(found), tuple(added), tuple(removed))


def counts_step(old: Baseline, new: Baseline) -> Verdict:
    """A re-recorded count baseline against the merge-base's: more instructions executed under emulation is a
    regression (exactly, as the gate judges them), fewer an improvement."""
    checks = [count_check(a, b, 0.0, Comparison.STORED, name=name)
              for name, a, b in ((INSTRUCTIONS, old.instructions, new.instructions),
                                 (INSTRUCTIONS_OFF, old.instructions_off, new.instructions_off))
              if a is not None and b is not None]
    return Verdict(overall(checks), tuple(checks), comparison=Comparison.STORED)


def _accepts(ack: Acknowledgement, entry: Rebaselined, root: Path) -> bool:
    if not (fnmatch.fnmatchcase(entry.test_id, ack.test) or entry.test_id == ack.test):
        return False
    if ack.device != "*" and not entry.identity_id.startswith(ack.device):
        return False
    if ack.metric not in ("", "e2e", INSTRUCTIONS):
        return False
    if ".." not in ack.commits:
        return any(c.startswith(ack.commits) for c in entry.commits)
    first, _, last = ack.commits.partition("..")
    if not entry.commits:
        return not last  # changed in the work tree only: an open range reaches it
    listed = git(["rev-list", f"{first}..{last or 'HEAD'}"], root)
    return listed is not None and bool(set(listed.split()) & set(entry.commits))


__all__ = ["RebaselineReport", "Rebaselined", "rebaselined"]
