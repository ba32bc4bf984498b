"""Two recorded measurements judged as two sessions (``pytest-sme2 compare``, the PR view of re-recorded baselines).

The files hold samples, not programs: the baseline rule of another session applies (:mod:`pytest_sme2.judge`), without
the same-session re-measurement.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_sme2.evidence.memory import Memory
from pytest_sme2.gate.decide import gate
from pytest_sme2.gate.memory import with_memory
from pytest_sme2.gate.verdict import Comparison, GateConfig, MemoryThresholds, Samples, Verdict
from pytest_sme2.judge.plan import Calibrate, calibrated
from pytest_sme2.store.artifacts import Artifact
from pytest_sme2.store.baseline import identity_diff, identity_id


@dataclass(frozen=True)
class Recorded:
    """One test's measurement as a file keeps it: the samples, and the identity and artifact when it records them.

    What ``pytest-sme2 compare`` judges: two files are two sessions, so the baseline rule applies, without the
    same-session re-measurement (the files hold samples, not programs).
    """

    samples: Samples
    #: the device identity (+ threads/dtype/backend/variant); empty when the file does not record one
    identity: Mapping[str, Any] = field(default_factory=dict)
    artifact: Artifact | None = None
    #: planned memory, sizes and peaks when the file records them (baselines and results since issue 21)
    memory: Memory | None = None


@dataclass(frozen=True)
class RecordedComparison:
    """The outcome of comparing two recorded measurements: a verdict, or the refusal and why."""

    verdict: Verdict | None
    #: the identity fields that differ (``key: OLD != NEW``) when the measurements belong to other identities
    refused: tuple[str, ...] = ()
    #: which rule judged it, in words (for the output)
    rule: str = ""


def compare_recorded(old: Recorded, new: Recorded, config: GateConfig, *, test_id: str = "",
                     calibrate: Calibrate | None = None) -> RecordedComparison:
    """Judge ``new`` against ``old`` by the rule a baseline of another session gets (see :mod:`pytest_sme2.judge`).

    Other identities are refused (never compared: another CPU runs other kernels). The same artifact is
    :attr:`~pytest_sme2.gate.verdict.Comparison.UNCHANGED`: drift, reported, never failed; a changed or unknown artifact
    is :attr:`gate.verdict.Comparison.STORED`: the margin widened by ``config.drift_allowance`` (set by hand)
    or by ``config.drift_calibration``; with neither it is not decided (inconclusive).
    """
    if old.identity and new.identity and identity_id(old.identity) != identity_id(new.identity):
        return RecordedComparison(None, tuple(identity_diff(old.identity, new.identity)) or ("identity id",))
    notes = []
    if not (old.identity and new.identity):
        which = "neither file" if not (old.identity or new.identity) else ("OLD" if not old.identity else "NEW")
        notes.append(f"identity not checked: {which} records the device identity (an analysis of a trace)")
    changes = old.artifact.differences(new.artifact) if (old.artifact and new.artifact) else []
    if old.artifact is not None and new.artifact is not None and not changes:
        comparison = Comparison.UNCHANGED
        rule = ("unchanged artifact (same program, inputs and build) in two sessions: a slower median is the machine "
                "(drift), reported, never failed")
    else:
        comparison = Comparison.STORED
        what = "; ".join(changes) or "the artifact is unknown (a file does not record it)"
        if new.identity and calibrate is not None:
            config, said = calibrated(config, calibrate, test_id, identity_id(new.identity))
            allowance = f" + the drift allowance: {said}"
        elif config.drift_allowance is not None:
            allowance = f" + {config.drift_allowance * 100:g}% drift allowance (hand-set, not calibrated)"
        else:
            allowance = (" and no calibrated drift allowance, so it is not decided (--history DIR calibrates one, "
                         "--drift-allowance PCT sets one by hand)")
        rule = (f"changed since OLD ({what}); two files are two sessions: the stored-samples rule, margin "
                f"{config.margin * 100:g}%{allowance}")
    notes.append(f"rule: {rule}")
    verdict = gate(old.samples, new.samples, config, comparison=comparison, notes=notes)
    # Memory by the same comparison kind (planned memory exactly; a peak widened by memory's own allowance, or drift).
    verdict = with_memory(verdict, old.memory, new.memory, config.memory or MemoryThresholds(),
                          emulated=config.emulated)
    return RecordedComparison(verdict, (), rule)
