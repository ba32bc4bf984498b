"""Step 4 of :func:`pytest_sme2.judge.judge`: record what the verdict allows, and say it (a :class:`Judgement`).

What is written: a baseline (recorded when there was none, or with ``--sme2-update-baseline``, never from a measurement
that cannot be trusted or whose SME2-on arm ran no SME2 kernel), the memory a baseline written before memory was
measured gains, the artifacts kept in the artifact store; and the result the caller applies (the verdict, the baseline,
the message and warnings). The history of runs is written by the caller from the result.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from pytest_sme2.evidence.instructions import LABEL
from pytest_sme2.gate.checks import EVIDENCE_CHECKS
from pytest_sme2.gate.instructions import NOTE_PREFIX, failed_evidence
from pytest_sme2.gate.memory import ADDED
from pytest_sme2.gate.verdict import Comparison, Status, Verdict
from pytest_sme2.judge.decide import blocking_evidence
from pytest_sme2.judge.execute import Measured
from pytest_sme2.judge.plan import COMPARE, EVIDENCE_ONLY, NO_BASELINE, WRITE, Plan, Policy
from pytest_sme2.measure.profile import Profile
from pytest_sme2.measure.rebuild import Rebuilder
from pytest_sme2.runners.base import MODE_TIMING, Runner
from pytest_sme2.store.artifacts import Artifact, ArtifactStore
from pytest_sme2.store.baseline import (
    NO_BASELINE_RECORDED,
    Baseline,
    BaselineStore,
    Lookup,
    OtherBaseline,
    Recipe,
    counts_identity,
    now_iso,
    other_baselines,
)

#: Judgement outcomes.
GATED = "gated"
RECORDED = "recorded"
WRITTEN = "written"
MISSING = "missing"
NOT_WRITTEN = "not-written"


@dataclass(frozen=True)
class Judgement:
    """What became of one profile: the verdict (if judged), the baseline, and what to tell the user."""

    outcome: str
    verdict: Verdict
    baseline_path: Path
    baseline: Baseline | None = None
    message: str = ""
    #: the baseline's artifact re-measured in this session (a changed artifact), for the reports
    reference: Profile | None = None
    #: the candidate as measured for the verdict (the interleaved one, in a same-session comparison)
    candidate: Profile | None = None
    #: one-line warnings about the test itself (not the verdict): shown under its terminal line, kept in the results
    warnings: tuple[str, ...] = ()
    #: baselines of this test for other devices or configurations, when none is this one's (never compared)
    others: tuple[OtherBaseline, ...] = ()

    @property
    def written(self) -> bool:
        return self.outcome in (RECORDED, WRITTEN)


def record_judgement(plan: Plan, verdict: Verdict, measured: Measured, *, test_id: str, runner: Runner,
                     baselines: BaselineStore, artifacts: ArtifactStore, policy: Policy,
                     rebuilder: Rebuilder | None = None) -> Judgement:
    """Write what ``verdict`` allows for ``plan`` (a baseline, its memory, the artifacts, the count baseline) and say
    what became of it."""
    judgement = _record_time(plan, verdict, measured, test_id=test_id, runner=runner, baselines=baselines,
                             artifacts=artifacts, policy=policy, rebuilder=rebuilder)
    if plan.counts is None:
        return judgement
    return _record_counts(judgement, plan, measured, test_id=test_id, baselines=baselines, policy=policy,
                          tool_version=policy.tool_version)


def _record_counts(judgement: Judgement, plan: Plan, measured: Measured, *, test_id: str, baselines: BaselineStore,
                   policy: Policy, tool_version: str) -> Judgement:
    """The count baseline: written with ``--sme2-update-baseline``, recorded when there is none (and the policy does
    not require one), never from a pair whose SME2-off arm ran SME2. Its own file, keyed without the host."""
    lookup = plan.counts
    assert lookup is not None
    profile, off = measured.profile, measured.off
    stored = lookup.baseline if lookup.baseline is not None and lookup.baseline.instructions is not None else None
    refused = failed_evidence(judgement.verdict.checks) or blocking_evidence(measured.evidence)
    if stored is not None and not policy.update_baseline:
        return judgement
    if stored is None and not policy.update_baseline and policy.require_baseline:
        return replace(judgement, outcome=MISSING, message="\n".join(
            [f"no count baseline ({LABEL}) for this test on this emulated CPU: expected {lookup.path}",
             f"create it with: {policy.create_command}, then commit {baselines.root.name}/"]))
    assert profile.instructions is not None  # a plan looks the count baseline up only for a counted profile
    kept = f"; the previous one {lookup.path} is kept" if stored is not None else ""
    if refused:
        note = f"{NOTE_PREFIX}count baseline not written: {refused}{kept}"
        written, outcome = None, NOT_WRITTEN if policy.update_baseline else judgement.outcome
    else:
        count_baseline = Baseline(
            test_id=test_id, identity=counts_identity(profile.identity), samples_ms=profile.samples_ms,
            block_sizes=profile.block_sizes or (len(profile.samples_ms),), artifact=profile.artifact,
            latency_source=profile.latency_source, created=now_iso(), tool_version=tool_version,
            instructions=profile.instructions, instructions_off=off.instructions if off is not None else None)
        written = baselines.save(count_baseline)
        note = (f"{NOTE_PREFIX}count baseline written (commit it): {written}" if policy.update_baseline else
                f"{NOTE_PREFIX}no count baseline for this test on this emulated CPU: recorded, not gated ({written}); "
                "commit it")
        outcome = WRITTEN if policy.update_baseline and judgement.outcome in (NOT_WRITTEN, GATED) else \
            judgement.outcome
    if judgement.outcome == NOT_WRITTEN and plan.action == EVIDENCE_ONLY and written is not None:
        # Emulated time is not written from an evidence run; the counts it took are its baseline (said once: the
        # message of a written baseline is shown under the test).
        return replace(judgement, outcome=WRITTEN, baseline_path=written, message=note)
    verdict = replace(judgement.verdict, notes=(*judgement.verdict.notes, note))
    message = f"{judgement.message}\n{note}" if judgement.message else note
    return replace(judgement, outcome=outcome, verdict=verdict, message=message)


def _record_time(plan: Plan, verdict: Verdict, measured: Measured, *, test_id: str, runner: Runner,
                 baselines: BaselineStore, artifacts: ArtifactStore, policy: Policy,
                 rebuilder: Rebuilder | None = None) -> Judgement:
    """The baseline of time (and memory): what ``verdict`` allows for ``plan``."""
    profile, path, invalid = measured.profile, plan.path, plan.invalid
    refused = blocking_evidence(measured.evidence)
    if plan.action == EVIDENCE_ONLY:
        if policy.update_baseline:
            kept = f"; the previous baseline {path} is kept" if path.is_file() else ""
            return Judgement(NOT_WRITTEN, verdict, path, message=(
                "baseline not written: a baseline of emulated time is measured in full; run with "
                f"--sme2-update-baseline --sme2-emulated-timing{kept}"))
        return Judgement(GATED, verdict, path, message=verdict.summary())
    if plan.action == WRITE:
        # A measurement that is not a good reference never replaces one that may be: the previous file stays.
        kept = (f"; the previous baseline {path} is kept" if path.is_file() else "")
        if invalid:
            return Judgement(NOT_WRITTEN, verdict, path, message=(
                f"baseline not written: this measurement is invalid ({invalid}){kept}; measure again when the device "
                "is quiet (and cool)"))
        if refused:
            return Judgement(NOT_WRITTEN, verdict, path, message=f"baseline not written: {refused}{kept}")
        failed = [c for c in verdict.checks if not c.advisory and c.name not in EVIDENCE_CHECKS
                  and c.status in (Status.REGRESSION, Status.INVALID)]
        if failed and kept:
            what = "; ".join(f"{c.name}: {c.message}" for c in failed)
            return Judgement(NOT_WRITTEN, verdict, path, message=(
                f"baseline not replaced: this measurement failed its own checks ({what}){kept}. Fix the cause (or "
                "the threshold), then run --sme2-update-baseline again"))
        baseline = _baseline_from(test_id, profile, policy.tool_version, rebuilder.recipe if rebuilder else None)
        keep_artifacts(artifacts, profile, runner)  # first: a kill between the two never leaves a baseline without it
        written = baselines.save(baseline)
        return Judgement(WRITTEN, verdict, written, baseline, f"baseline written: {written}")

    lookup = plan.lookup
    assert lookup is not None  # every plan but the two above looked its baseline up
    if plan.action != COMPARE or plan.baseline is None:
        head = f"no baseline for this device ({_identity_text(profile)}): expected {lookup.path}"
        found = other_baselines(lookup, profile.identity)
        others = _other_lines(lookup, found)
        if plan.action == NO_BASELINE:
            lines = [head, *others, f"create it with: {policy.create_command}, then commit {baselines.root.name}/"]
            return Judgement(MISSING, verdict, path, message="\n".join(lines), others=found)
        if invalid:
            return Judgement(NOT_WRITTEN, verdict, path, message="\n".join(
                [head, *others, f"not recorded: this measurement is invalid ({invalid})"]), others=found)
        if refused:
            return Judgement(NOT_WRITTEN, verdict, path, message="\n".join(
                [head, *others, f"not recorded: {refused}"]), others=found)
        baseline = _baseline_from(test_id, profile, policy.tool_version, rebuilder.recipe if rebuilder else None)
        keep_artifacts(artifacts, profile, runner)  # first: a kill between the two never leaves a baseline without it
        written = baselines.save(baseline)
        return Judgement(RECORDED, verdict, written, baseline, "\n".join(
            [f"{NO_BASELINE_RECORDED} ({written})", *others]), others=found)

    baseline = plan.baseline
    comparison = plan.comparison
    if comparison is Comparison.UNCHANGED:
        # The artifact is the baseline's: keep it (by content, once), so a CI whose artifact cache was evicted, or
        # whose baselines were recorded elsewhere, can compare a later change in the same session again.
        keep_artifacts(artifacts, profile, runner)
    gained = _add_memory(baselines, baseline, profile, comparison, invalid) if comparison is not None else baseline
    if gained is not baseline:
        verdict = replace(verdict, notes=(*verdict.notes, f"{ADDED}{lookup.path}"))
        baseline = gained
    warnings = _inputs_warning(baseline.artifact, profile.artifact)
    return Judgement(GATED, verdict, lookup.path, baseline, verdict.summary(), measured.reference, measured.candidate,
                     warnings)


def _baseline_from(test_id: str, profile: Profile, tool_version: str, rebuild: Recipe | None) -> Baseline:
    a = profile.analysis
    return Baseline(
        test_id=test_id, identity=profile.identity, samples_ms=profile.samples_ms,
        block_sizes=profile.block_sizes or (len(profile.samples_ms),), artifact=profile.artifact,
        category_per_run_ms=dict(a.category_per_run_ms) if profile.per_operator else {},
        category_block_sizes=(a.block_sizes or (a.runs_measured,)) if profile.per_operator else (),
        category_totals_ms=dict(a.category_totals_ms), per_operator=profile.per_operator,
        latency_source=profile.latency_source, stats=a.e2e.to_dict(),
        top_operators=tuple(op.to_dict() for op in a.operator_details[:10]), created=now_iso(),
        tool_version=tool_version,
        category_operators=a.delegated_operators if profile.per_operator else {}, memory=profile.memory,
        rebuild=rebuild,
    )


def keep_artifacts(store: ArtifactStore, profile: Profile, runner: Runner) -> None:
    """Put the profile's program, inputs and runner binary into the artifact store (once, by content)."""
    m = profile.measurement
    if m is None:
        return
    store.put(m.pte)
    for path in m.inputs:
        store.put(path)
    binary = m.build or runner.runner_for(m.variant)
    if binary is not None and Path(binary).is_file():
        store.put_runner(binary)
    # The timing build gives the latency when the artifact names it: keep it too, to re-measure it later.
    timing = profile.artifact.build.get("timing_runner_sha256") if profile.artifact is not None else None
    timing_binary = runner.binary_for(m.variant, MODE_TIMING) if runner.has_build(m.variant, MODE_TIMING) else None
    if timing and m.timing_build is None and timing_binary is not None:
        store.put_runner(timing_binary)
    elif timing and m.timing_build is not None and Path(m.timing_build).is_file():
        store.put_runner(m.timing_build)


def _other_lines(lookup: Lookup, others: tuple[OtherBaseline, ...]) -> list[str]:
    """One short line naming the other devices' baselines (the full differences: the JSON results, ``-v``)."""
    lines = []
    if others:
        lines.append("baselines exist for other devices or configurations (never compared): "
                     + "; ".join(o.describe() for o in others))
    for path in lookup.legacy:
        lines.append(f"  {path.name} was written by an earlier pytest-sme2 without the device identity: it is "
                     "never compared; delete it")
    return lines


def _add_memory(store: BaselineStore, baseline: Baseline, profile: Profile, comparison: Comparison,
                invalid: str) -> Baseline:
    """A baseline written before memory was measured gains it from a valid run of its own, unchanged artifact.

    Only ``memory`` is added: the latency samples, the artifact and the date stay as they are (the memory plan is
    part of the program, so the unchanged artifact's plan is the baseline's). Any other run leaves the file alone.
    """
    if baseline.memory is not None or profile.memory is None or comparison is not Comparison.UNCHANGED or invalid:
        return baseline
    gained = replace(baseline, memory=profile.memory)
    store.save(gained)
    return gained


def _inputs_warning(baseline: Artifact | None, current: Artifact | None) -> tuple[str, ...]:
    """A warning when the inputs differ from the baseline's: unseeded random inputs change every session.

    ``torch.randn(...)`` in a marker (evaluated at import) or a model factory without a seed gives other input
    files each session, so the artifact is never unchanged and the export cache never hits.
    """
    if baseline is None or current is None or baseline.inputs_sha256 == current.inputs_sha256:
        return ()
    before = ",".join(h[:10] for h in baseline.inputs_sha256) or "none"
    after = ",".join(h[:10] for h in current.inputs_sha256) or "none"
    same = "; the program is the same" if baseline.pte_sha256 == current.pte_sha256 else ""
    return (f"the test's inputs differ from its baseline's (sha256 {before} -> {after}){same}: if they come from "
            "torch.randn without a seed, every session is a changed artifact; seed them, e.g. torch.randn(1, 3, 32, "
            "32, generator=torch.Generator().manual_seed(0))",)


def _identity_text(profile: Profile) -> str:
    ident = profile.identity
    summary = ident.get("summary") or ident.get("description")
    if summary:
        return str(summary)
    keys = ("cpu_model", "family", "model", "stepping", "arch", "cores", "threads", "dtype", "backend")
    return ", ".join(f"{k} {ident[k]}" for k in keys if k in ident) or "unknown device"
