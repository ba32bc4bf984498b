"""A measured profile against its stored baseline: choose the comparison, measure what it needs, get the verdict.

This is the library half of ``sme2_baseline.check()`` (the plugin only applies the result):

1. The baseline is looked up by test and *identity* (device identity + threads/dtype/backend/variant).
   None for this device: the profile is recorded as the baseline and **not gated** (unless the policy
   requires a baseline: then the caller fails the test with the command that creates one). A baseline of
   the first release (no identity) is named and never compared.
2. The profile's *artifact* (program, inputs, runtime or runner build) is compared with the baseline's:
   - the same -> :attr:`~pytest_sme2.gate.verdict.Comparison.UNCHANGED`: a slower median is machine drift,
     reported as ``drift``, never failed;
   - changed, and the artifact store holds the baseline's artifact -> the baseline's artifact is measured
     again in this session, in blocks interleaved with the candidate's
     (:attr:`~pytest_sme2.gate.verdict.Comparison.SESSION`), and the gate judges that ratio;
   - changed, and the baseline's artifact is not available -> the stored samples, with the margin widened by
     the drift allowance (:attr:`~pytest_sme2.gate.verdict.Comparison.STORED`), and the verdict says so.
3. A regression or an inconclusive verdict is measured once more and decided on both measurements pooled
   (:func:`pytest_sme2.gate.decide.decide`), whatever the comparison (an unchanged artifact's budgets too).

The SME2 kernel evidence (:func:`sme2_evidence`: the arms' XNNPACK logs, what the device reports, whether
the test requires SME2 kernels) is judged with every verdict, recorded or gated.

Measurements that could not be trusted (a busy machine, a throttling phone) are never written as baselines,
and neither is an SME2-on arm whose log shows it ran no SME2 kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from pytest_sme2.device.identity import reports_sme2
from pytest_sme2.evidence.categories import CategoryRules
from pytest_sme2.evidence.kernels import KernelLog
from pytest_sme2.evidence.memory import Memory
from pytest_sme2.evidence.numerics import NumericsComparison
from pytest_sme2.gate.calibration import DriftCalibration
from pytest_sme2.gate.checks import (
    EVIDENCE_CHECKS,
    REQUIRED_BY_MARKER,
    REQUIRED_BY_ON_OFF,
    Sme2Evidence,
    sme2_kernel_checks,
)
from pytest_sme2.gate.decide import decide, gate, measured_status
from pytest_sme2.gate.memory import ADDED, with_memory
from pytest_sme2.gate.verdict import TIME_NOT_GATED, Comparison, GateConfig, MemoryThresholds, Samples, Status, Verdict
from pytest_sme2.measure.pair import Pair, decide_speedup, measure_pair, remeasure, with_speedup
from pytest_sme2.measure.profile import Profile, measure
from pytest_sme2.measure.rebuild import Rebuilder
from pytest_sme2.measure.recipe import Measurement
from pytest_sme2.measure.sequential import Looks, settled
from pytest_sme2.progress import Progress
from pytest_sme2.runners.base import MODE_TIMING, Runner
from pytest_sme2.store.artifacts import Artifact, ArtifactStore, comparable_builds, is_runtime
from pytest_sme2.store.baseline import (
    NO_BASELINE_RECORDED,
    Baseline,
    BaselineStore,
    Lookup,
    OtherBaseline,
    Recipe,
    identity_diff,
    identity_id,
    now_iso,
    other_baselines,
)

#: Judgement outcomes.
GATED = "gated"
RECORDED = "recorded"
WRITTEN = "written"
MISSING = "missing"
NOT_WRITTEN = "not-written"
#: ``calibrate(test_id, identity_id)``: the drift calibration of one test on one device identity
Calibrate = Callable[[str, str], DriftCalibration]


@dataclass(frozen=True)
class Policy:
    """What the caller asked for, besides the gate's thresholds."""

    update_baseline: bool = False
    #: a missing baseline is an error (CI that needs every test gated); else it is recorded, not gated
    require_baseline: bool = False
    #: re-measure once before a regression or an inconclusive verdict stands
    confirm: bool = True
    tool_version: str = ""
    #: the command that creates a missing baseline, with every option of this run (for messages)
    create_command: str = ""


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
        store.put(binary, mode=0o755)
    # The timing build gives the latency when the artifact names it: keep it too, to re-measure it later.
    timing = profile.artifact.build.get("timing_runner_sha256") if profile.artifact is not None else None
    timing_binary = runner.binary_for(m.variant, MODE_TIMING) if runner.has_build(m.variant, MODE_TIMING) else None
    if timing and m.timing_build is None and timing_binary is not None:
        store.put(timing_binary, mode=0o755)
    elif timing and m.timing_build is not None and Path(m.timing_build).is_file():
        store.put(m.timing_build, mode=0o755)


@dataclass(frozen=True)
class Reference:
    """How to measure the baseline's artifact now, or why it cannot be (``measurement`` None)."""

    measurement: Measurement | None
    why: str = ""
    #: the reason is another runtime (executorch, or the libraries a runner loads), not a missing file: the verdict
    #: is then :attr:`~pytest_sme2.gate.verdict.Comparison.RUNTIME`
    runtime_changed: bool = False
    #: the reason is that the store lacks the baseline's program or inputs (which :mod:`pytest_sme2.measure.rebuild` can
    #: rebuild from the commit they were recorded at)
    missing: bool = False
    #: the reason is that the store lacks the baseline's runner build with this sha256 (pytest-sme2's own runner can be
    #: rebuilt from its source at the baseline's commit)
    missing_build: str = ""


def reference_measurement(baseline: Artifact, candidate: Profile, runner: Runner, store: ArtifactStore,
                          builds: Mapping[str, Path] | None = None) -> Reference:
    """How to measure the baseline's artifact now, or why it cannot be (the store lacks it, another runtime).

    ``builds`` are runner binaries by sha256 besides the store's (rebuilt ones, which must stay beside the libraries
    they load)."""
    def build_of(sha: str) -> Path | None:
        return store.get(sha) or (builds or {}).get(sha)

    m = candidate.measurement
    if m is None:
        return Reference(None, "the candidate does not say how it was measured")
    pte = store.get(baseline.pte_sha256)
    inputs = [store.get(sha) for sha in baseline.inputs_sha256]
    if pte is None or any(p is None for p in inputs):
        return Reference(None, _not_held(store, [baseline.pte_sha256, *baseline.inputs_sha256],
                                         f"the artifact store {store.root} does not hold the baseline's program and "
                                         "inputs"),
                         missing=True)
    build: Path | None = None
    timing_build: Path | None = None
    current = dict(runner.build_identity(m.variant))
    if is_runtime(baseline.build) or is_runtime(current):
        mine, now = comparable_builds(baseline.build, current)
        if mine != now:
            return Reference(None, (f"the baseline ran on another runtime ({_describe(baseline.build)}; this one is "
                                    f"{_describe(current)}), which cannot run in this process"), runtime_changed=True)
    else:
        libs = baseline.build.get("libraries")
        now_libs = candidate.artifact.build.get("libraries") if candidate.artifact is not None else None
        if libs is not None and libs != now_libs:
            changed = sorted(k for k in {*libs, *(now_libs or {})} if libs.get(k) != (now_libs or {}).get(k))
            return Reference(None, (f"the baseline's runner loaded other shared libraries ({', '.join(changed)}); "
                                    "the store keeps runner binaries, not the libraries they load, so the baseline's "
                                    "build cannot run here"), runtime_changed=True)
        sha = str(baseline.build.get("runner_sha256", ""))
        if sha and sha != current.get("runner_sha256"):
            build = build_of(sha)
            if build is None:
                return Reference(None, _not_held(store, [sha], f"the artifact store {store.root} does not hold the "
                                                 f"baseline's runner build ({sha[:12]})"), missing_build=sha)
        timing_sha = str(baseline.build.get("timing_runner_sha256", ""))
        if timing_sha and timing_sha != current.get("timing_runner_sha256"):
            # The baseline's latency came from another timing build: re-measure that one, or the comparison
            # would time the current timing build twice and hide its change.
            timing_build = build_of(timing_sha)
            if timing_build is None:
                return Reference(None, _not_held(store, [timing_sha], f"the artifact store {store.root} does not "
                                                 f"hold the baseline's timing build ({timing_sha[:12]})"),
                                 missing_build=timing_sha)
    ran_with = baseline.code_path_differences(candidate.artifact) if candidate.artifact is not None else []
    moved = [c for c in ran_with if not c.startswith("effective")]  # sizing is the session's: both arms share it
    if moved:
        # The store keeps programs and runner binaries, not the libraries or environment they ran with: the baseline's
        # artifact measured now would run with the candidate's, and hide exactly that change.
        return Reference(None, f"what the runner ran with changed ({'; '.join(moved)}), and only the candidate's "
                               "can run here", runtime_changed=True)
    return Reference(replace(m, pte=pte, inputs=tuple(p for p in inputs if p is not None), build=build,
                             timing_build=timing_build, label=f"{m.label}_reference"))


def _not_held(store: ArtifactStore, shas: Sequence[str], missing: str) -> str:
    """Why the store has no usable copy: the damaged copies it removed, said, else ``missing``."""
    damaged = [store.damaged[sha] for sha in shas if sha in store.damaged]
    return "; ".join(damaged) if damaged else missing


def _describe(build: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {str(v)[:12]}" for k, v in build.items() if k not in ("runner", "path")) or "unknown"


def sme2_evidence(profile: Profile, off: Profile | None, config: GateConfig) -> Sme2Evidence | None:
    """What the gate needs to judge SME2 kernel use: the arms' XNNPACK logs and traces, the device, the requirement.

    The SME2-on arm of an on/off pair must run SME2 kernels; so must any profile whose test asks for it
    (``GateConfig.require_sme2_kernels``). None when nothing is required and the SME2-off arm has neither a
    log nor trace evidence.
    """
    reasons = [r for r, yes in ((REQUIRED_BY_ON_OFF, off is not None), (REQUIRED_BY_MARKER,
                                                                         config.require_sme2_kernels)) if yes]
    off_log = _log_of(off) if off is not None else None
    off_trace = off.analysis.trace_evidence if off is not None else None
    numerics = pair_numerics(off, profile) if off is not None else None
    if not reasons and off_log is None and off_trace is None and numerics is None:
        return None
    device_sme2 = reports_sme2(profile.device)
    if device_sme2 is None:
        device_sme2 = reports_sme2(profile.identity)
    name = (profile.identity.get("summary") or profile.device.get("name") or profile.device.get("serial")
            or "the device")
    why = profile.no_kernel_log
    return Sme2Evidence(
        required_by=" and ".join(reasons), enforced=config.require_sme2_kernels, device_sme2=device_sme2,
        device=str(name), log=_log_of(profile), off_log=off_log,
        missing_log=why or "no XNNPACK-logging build for this arm (--sme2-runner-log)",
        trace=profile.analysis.trace_evidence, off_trace=off_trace, numerics=numerics,
    )


def pair_numerics(off: Profile, on: Profile) -> NumericsComparison | None:
    """The two arms' outputs of their last traced runs (same program and inputs) compared; None without outputs.

    Only runners that write outputs (pytest-sme2's own: ``--output_file``) give them; a backend pair (two
    programs) is compared too, since both compute the same model.
    """
    from pytest_sme2.evidence.numerics import compare_outputs, read_outputs

    def last(profile: Profile) -> str | None:
        paths = [r.metadata.get("outputs_path") for r in profile.runs if r.metadata.get("outputs_path")]
        return str(paths[-1]) if paths else None

    a, b = last(off), last(on)
    if a is None or b is None:
        return None
    return compare_outputs(read_outputs(a), read_outputs(b), str(on.model.get("dtype", "fp32")))


def _log_of(profile: Profile) -> KernelLog | None:
    stored = profile.analysis.kernel_log
    return KernelLog.from_dict(stored) if stored else None


def _blocking_evidence(evidence: Sme2Evidence | None) -> str:
    """Why this measurement must not become a baseline, from its kernel evidence ("" when it may)."""
    failed = [c for c in sme2_kernel_checks(evidence) if c.status in (Status.REGRESSION, Status.INVALID)]
    return failed[0].message if failed else ""


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


def judge(
    profile: Profile,
    *,
    test_id: str,
    runner: Runner,
    baselines: BaselineStore,
    artifacts: ArtifactStore,
    config: GateConfig,
    policy: Policy,
    off: Profile | None = None,
    rules: CategoryRules | None = None,
    progress: Progress | None = None,
    rebuilder: Rebuilder | None = None,
    calibrate: Calibrate | None = None,
) -> Judgement:
    """Judge ``profile`` (the SME2-on arm of an on/off pair when ``off`` is given) against its baseline.

    ``rebuilder`` rebuilds a changed test's missing reference program from the commit its baseline was recorded at
    (:mod:`pytest_sme2.measure.rebuild`), and gives the recipe a baseline recorded now stores; None: neither.
    ``calibrate(test_id, identity_id)``: the measured between-session variation of the test on the device (the
    history store's, :mod:`pytest_sme2.history.calibration`), asked only when the comparison is with another
    session's samples (``stored``, ``runtime``); None = no history, so such a comparison is not decided unless
    ``config.drift_allowance`` is set by hand.
    """
    path = baselines.path_for(test_id, profile.identity)
    cand = profile.samples()
    off_samples = off.samples() if off is not None else None
    invalid = profile.invalid_reason or (off.invalid_reason if off is not None else "")
    evidence = sme2_evidence(profile, off, config)
    refused = _blocking_evidence(evidence)

    def absolute_only() -> Verdict:
        return _with_memory(gate(None, cand, config, off=off_samples, evidence=evidence), None, profile, off, config)

    if not config.time_gated:
        return _evidence_only(profile, off, path, config=config, policy=policy, evidence=evidence)
    if policy.update_baseline:
        # A measurement that is not a good reference never replaces one that may be: the previous file stays.
        kept = (f"; the previous baseline {path} is kept" if path.is_file() else "")
        if invalid:
            return Judgement(NOT_WRITTEN, absolute_only(), path, message=(
                f"baseline not written: this measurement is invalid ({invalid}){kept}; measure again when the device "
                "is quiet (and cool)"))
        if refused:
            return Judgement(NOT_WRITTEN, absolute_only(), path, message=f"baseline not written: {refused}{kept}")
        own = absolute_only()
        failed = [c for c in own.checks if not c.advisory and c.name not in EVIDENCE_CHECKS
                  and c.status in (Status.REGRESSION, Status.INVALID)]
        if failed and kept:
            what = "; ".join(f"{c.name}: {c.message}" for c in failed)
            return Judgement(NOT_WRITTEN, own, path, message=(
                f"baseline not replaced: this measurement failed its own checks ({what}){kept}. Fix the cause (or "
                "the threshold), then run --sme2-update-baseline again"))
        baseline = _baseline_from(test_id, profile, policy.tool_version, rebuilder.recipe if rebuilder else None)
        keep_artifacts(artifacts, profile, runner)  # first: a kill between the two never leaves a baseline without it
        written = baselines.save(baseline)
        return Judgement(WRITTEN, absolute_only(), written, baseline, f"baseline written: {written}")

    lookup = baselines.lookup(test_id, profile.identity)
    if lookup.baseline is None:
        head = f"no baseline for this device ({_identity_text(profile)}): expected {lookup.path}"
        found = other_baselines(lookup, profile.identity)
        others = _other_lines(lookup, found)
        if policy.require_baseline:
            lines = [head, *others, f"create it with: {policy.create_command}, then commit {baselines.root.name}/"]
            return Judgement(MISSING, absolute_only(), path, message="\n".join(lines), others=found)
        if invalid:
            verdict = absolute_only()
            verdict = replace(verdict, status=Status.REGRESSION if refused else Status.INVALID)
            return Judgement(NOT_WRITTEN, verdict, path, message="\n".join(
                [head, *others, f"not recorded: this measurement is invalid ({invalid})"]), others=found)
        if refused:
            return Judgement(NOT_WRITTEN, absolute_only(), path, message="\n".join(
                [head, *others, f"not recorded: {refused}"]), others=found)
        baseline = _baseline_from(test_id, profile, policy.tool_version, rebuilder.recipe if rebuilder else None)
        keep_artifacts(artifacts, profile, runner)  # first: a kill between the two never leaves a baseline without it
        written = baselines.save(baseline)
        return Judgement(RECORDED, absolute_only(), written, baseline, "\n".join(
            [f"{NO_BASELINE_RECORDED} ({written})", *others]), others=found)

    baseline = lookup.baseline
    base = baseline.samples()
    again_pair = _once(lambda: remeasure(runner, Pair(off, profile), rules=rules, progress=progress)) if off else None
    notes: list[str] = []
    reference: Profile | None = None
    candidate = profile
    measure_again: Callable[[], tuple[Samples | None, Samples, Samples | None]] | None = None
    judged = config  # the configuration the verdict is judged with (a sequential measurement's looks change it)
    changes = baseline.artifact.differences(profile.artifact) if (baseline.artifact and profile.artifact) else []
    if baseline.artifact is not None and profile.artifact is not None and not changes:
        comparison = Comparison.UNCHANGED
        # The artifact is the baseline's: keep it (by content, once), so a CI whose artifact cache was evicted, or
        # whose baselines were recorded elsewhere, can compare a later change in the same session again.
        keep_artifacts(artifacts, profile, runner)
        notes.append("unchanged artifact (same program, inputs and build as the baseline): only the machine can "
                     "differ, so a slower median is reported as drift, not gated")
        # Absolute checks (budgets, min_speedup) still gate: a failing one is measured again like any other.
        measure_again = _remeasure_stored(runner, profile, again_pair, base, rules=rules, progress=progress)
    else:
        ref = (reference_measurement(baseline.artifact, profile, runner, artifacts) if baseline.artifact
               else Reference(None, "the baseline does not record its artifact"))
        rebuilt = ""
        if ref.missing and rebuilder is not None and baseline.artifact is not None and not invalid:
            # A fresh runner (no artifact cache): the baseline's program, rebuilt from its commit and proven by its hash
            attempt = rebuilder.rebuild(baseline.rebuild, baseline.artifact, lookup.path, artifacts)
            rebuilt = attempt.message
            if attempt.ok:
                ref = reference_measurement(baseline.artifact, profile, runner, artifacts)
        builds: dict[str, Path] = {}
        while ref.missing_build and ref.missing_build not in builds and rebuilder is not None and not invalid \
                and baseline.artifact is not None:
            # pytest-sme2's own runner as the baseline ran it, built from its source at the baseline's commit
            binary, said = rebuilder.rebuild_runner(ref.missing_build, baseline.rebuild, lookup.path)
            rebuilt = f"{rebuilt}; {said}" if rebuilt else said
            if binary is None:
                break
            builds[ref.missing_build] = binary
            ref = reference_measurement(baseline.artifact, profile, runner, artifacts, builds)
        if rebuilt and ref.measurement is None and not (ref.missing or ref.missing_build):  # another reason
            rebuilt = f"{rebuilt}; {ref.why}"
        ref_m, why = ref.measurement, rebuilt or ref.why
        what = "; ".join(changes) or "the artifact is unknown"
        if ref_m is not None and profile.measurement is not None and not invalid:
            comparison = Comparison.SESSION
            notes.append(f"changed since the baseline: {what}; compared with the baseline's artifact re-measured "
                         "in this session, in interleaved blocks")
            if rebuilt:
                notes.append(rebuilt)
            cand_m = profile.measurement
            # Measured until decided (issue 18 defect 12): looks at about half, all, 1.5x and 2x the blocks, each at
            # the Bonferroni share of the error; the gate judges at that same confidence.
            looks = Looks.for_blocks(cand_m.blocks, config.confidence)
            judged = session_config = looks.gate_config(config)

            def settled_pair(ref_so_far: Profile, cand_so_far: Profile) -> bool:
                look = gate(ref_so_far.samples(), cand_so_far.samples(), session_config,
                            comparison=Comparison.SESSION)
                return settled(measured_status(look))

            reference, candidate = measure_pair(runner, ref_m, cand_m, rules=rules, progress=progress,
                                                what=f"{cand_m.label} vs the baseline's artifact", looks=looks,
                                                stop=settled_pair)
            cand = candidate.samples()
            first_ref: Samples = reference.samples()

            def again_session() -> tuple[Samples | None, Samples, Samples | None]:
                r, c = measure_pair(runner, ref_m, cand_m, rules=rules, progress=progress,
                                    what=f"{cand_m.label} vs the baseline's artifact (confirming)", looks=looks,
                                    stop=settled_pair)
                return r.samples(), c.samples(), None

            measure_again = again_session
            base = first_ref
        elif ref.runtime_changed:
            comparison = Comparison.RUNTIME
            notes.append(f"changed since the baseline: {what}; compared with the stored samples of "
                         f"{baseline.created or 'an earlier session'} ({why}): a runtime change is gated only "
                         "beyond the margin plus the drift allowance (re-record the baseline on this runtime, "
                         "--sme2-update-baseline, to gate later changes in the same session)")
            measure_again = _remeasure_stored(runner, profile, again_pair, base, rules=rules, progress=progress)
        else:
            comparison = Comparison.STORED
            notes.append(f"changed since the baseline: {what}; compared with the stored samples of "
                         f"{baseline.created or 'an earlier session'} ({why or 'the measurement is invalid'})")
            measure_again = _remeasure_stored(runner, profile, again_pair, base, rules=rules, progress=progress)
    if comparison.widened:
        judged, allowance_note = _calibrated(judged, calibrate, test_id, baseline.identity_id)
        notes.append(allowance_note)
    if comparison is Comparison.UNCHANGED and baseline.artifact is not None and not baseline.artifact.recipe:
        notes.append("the baseline records no measurement recipe (written by an earlier pytest-sme2): its runs, "
                     "warm-up, measuring code and SME2-off arm are not compared; --sme2-update-baseline records them")
    unknown = baseline.artifact.unrecorded() if baseline.artifact is not None else []
    if unknown:
        notes.append(f"the baseline does not record {', '.join(unknown)} (written by an earlier pytest-sme2, or a "
                     "runner whose process cannot be read): not compared; --sme2-update-baseline records them")
    if off is None:
        verdict = decide((base, cand, None), measure_again if policy.confirm else None, judged,
                         comparison=comparison, notes=notes, evidence=evidence)
    else:
        # The latency is judged against the baseline; the speedup on the pair's own interleaved arms, confirmed on
        # the pair measured again (measure.pair) — never the pair's off arm over another measurement's on arm.
        verdict = decide((base, cand, None), measure_again if policy.confirm else None,
                         replace(judged, min_speedup=None), comparison=comparison, notes=notes, evidence=evidence)
        pair = Pair(off, profile)
        verdict = with_speedup(verdict, decide_speedup(pair, config, again_pair if policy.confirm else None))
    # Memory: against the baseline's artifact measured in this session when there is one, else the stored memory.
    verdict = _with_memory(verdict, reference.memory if reference is not None else baseline.memory, candidate, off,
                           config)
    gained = _add_memory(baselines, baseline, profile, comparison, invalid)
    if gained is not baseline:
        verdict = replace(verdict, notes=(*verdict.notes, f"{ADDED}{lookup.path}"))
        baseline = gained
    warnings = _inputs_warning(baseline.artifact, profile.artifact)
    return Judgement(GATED, verdict, lookup.path, baseline, verdict.summary(), reference, candidate, warnings)


def _evidence_only(profile: Profile, off: Profile | None, path: Path, *, config: GateConfig, policy: Policy,
                   evidence: Sme2Evidence | None) -> Judgement:
    """An emulated device measured for its evidence: the kernel and numerics checks (and the absolute ones: budgets,
    the ungated on/off ratio); its latency shown, never compared with the emulated baseline nor recorded as one (a
    baseline of emulated time is measured in full, with ``--sme2-emulated-timing``), never measured again."""
    verdict = _with_memory(gate(None, profile.samples(), config, off=off.samples() if off is not None else None,
                                evidence=evidence, notes=(TIME_NOT_GATED,)), None, profile, off, config)
    if policy.update_baseline:
        return Judgement(NOT_WRITTEN, verdict, path, message=(
            f"baseline not written: a baseline of emulated time is measured in full; run with --sme2-update-baseline "
            f"--sme2-emulated-timing{'; the previous baseline ' + str(path) + ' is kept' if path.is_file() else ''}"))
    return Judgement(GATED, verdict, path, message=verdict.summary())


def _calibrated(config: GateConfig, calibrate: Calibrate | None, test_id: str,
                identity: str) -> tuple[GateConfig, str]:
    """``config`` with the test's drift calibration, and a note saying which allowance judges the comparison."""
    cal = calibrate(test_id, identity) if calibrate is not None else None
    config = replace(config, drift_calibration=cal)
    if config.drift_allowance is not None:
        measured = (f"; measured for this test: {cal.describe()}" if cal is not None and cal.calibrated else
                    "; no history of this test on this device calibrates it")
        return config, (f"drift allowance {config.drift_allowance * 100:g}%, set by hand (--sme2-drift-allowance), "
                        f"not calibrated{measured}")
    if cal is not None and cal.calibrated:
        return config, cal.describe()
    return config, config.rule(Comparison.STORED).undecided


def _with_memory(verdict: Verdict, reference: Memory | None, profile: Profile, off: Profile | None,
                 config: GateConfig) -> Verdict:
    """The verdict with the memory checks of :mod:`pytest_sme2.gate.memory` (planned, peak, budgets, SME2 on/off)."""
    return with_memory(verdict, reference, profile.memory, config.memory or MemoryThresholds(),
                       emulated=config.emulated, off=off.memory if off is not None else None)


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
    """Judge ``new`` against ``old`` by the rule a baseline of another session gets (see the module docstring).

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
            config, said = _calibrated(config, calibrate, test_id, identity_id(new.identity))
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


def _remeasure_stored(runner: Runner, profile: Profile, again_pair: Callable[[], Pair] | None, base: Samples, *,
                      rules: CategoryRules | None, progress: Progress | None
                      ) -> Callable[[], tuple[Samples | None, Samples, Samples | None]] | None:
    m = profile.measurement
    if m is None:
        return None
    if again_pair is not None:
        # An on/off pair is measured again as a pair: the same measurement confirms the latency and the speedup.
        return lambda: (base, again_pair().on.samples(), None)

    def again() -> tuple[Samples | None, Samples, Samples | None]:
        return base, measure(runner, m, rules=rules, progress=progress).samples(), None

    return again


_T = TypeVar("_T")


def _once(make: Callable[[], _T]) -> Callable[[], _T]:
    """``make`` called at most once; later calls return its first result."""
    done: list[_T] = []

    def call() -> _T:
        if not done:
            done.append(make())
        return done[0]

    return call


def _identity_text(profile: Profile) -> str:
    ident = profile.identity
    summary = ident.get("summary") or ident.get("description")
    if summary:
        return str(summary)
    keys = ("cpu_model", "family", "model", "stepping", "arch", "cores", "threads", "dtype", "backend")
    return ", ".join(f"{k} {ident[k]}" for k in keys if k in ident) or "unknown device"


__all__ = ["GATED", "MISSING", "NOT_WRITTEN", "RECORDED", "WRITTEN", "Judgement", "Policy", "Recorded",
           "RecordedComparison", "Reference", "compare_recorded", "judge", "keep_artifacts", "reference_measurement",
           "sme2_evidence"]
