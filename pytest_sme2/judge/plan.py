"""Step 1 of :func:`pytest_sme2.judge.judge`: choose how a measured profile is judged (a :class:`Plan`).

The plan says what is done with the profile (recorded as the baseline, written, compared, or judged for its evidence
only), which comparison judges it (:class:`~pytest_sme2.gate.verdict.Comparison`: unchanged, session, runtime,
stored), what must be measured beside it (the baseline's artifact, re-measured in this session, rebuilt from the
baseline's commit when the artifact store lacks it) and why (the notes the verdict carries). Choosing reads the
baseline and artifact stores (and may rebuild); it measures nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_sme2.device.codepaths import changed_objects
from pytest_sme2.gate.calibration import DriftCalibration
from pytest_sme2.gate.verdict import Comparison, GateConfig
from pytest_sme2.measure.profile import Profile
from pytest_sme2.measure.rebuild import Rebuilder
from pytest_sme2.measure.recipe import Measurement
from pytest_sme2.measure.runtimes import Reference as RuntimeReference
from pytest_sme2.measure.runtimes import Runtimes, runtime_library_names
from pytest_sme2.measure.sequential import Looks
from pytest_sme2.runners.base import Runner
from pytest_sme2.runners.worker import REFERENCE_RUNTIME, RuntimePair
from pytest_sme2.store.artifacts import Artifact, ArtifactStore, comparable_builds, is_runtime
from pytest_sme2.store.baseline import Baseline, BaselineStore, Lookup, counts_identity

#: ``calibrate(test_id, identity_id)``: the drift calibration of one test on one device identity
Calibrate = Callable[[str, str], DriftCalibration]


#: What a plan does with the profile (:attr:`Plan.action`).
#: judged for its evidence only: an emulated device measured without ``--sme2-emulated-timing``
EVIDENCE_ONLY = "evidence-only"
#: written as the baseline (``--sme2-update-baseline``)
WRITE = "write"
#: no baseline for this identity, and the policy requires one
NO_BASELINE = "no-baseline"
#: no baseline for this identity: recorded as the baseline, not gated
RECORD = "record"
#: compared with its baseline
COMPARE = "compare"


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
class Plan:
    """How one profile is judged: what is done with it, which comparison judges it, what is measured beside it, why."""

    #: :data:`EVIDENCE_ONLY`, :data:`WRITE`, :data:`NO_BASELINE`, :data:`RECORD` or :data:`COMPARE`
    action: str
    #: the test's baseline file for this identity
    path: Path
    #: the thresholds as the caller asked for them (absolute checks, the speedup and memory are judged with these)
    config: GateConfig
    #: what the latency is judged with: ``config`` with a sequential measurement's looks (``session``) or the drift
    #: calibration of a cross-session comparison (``stored``, ``runtime``)
    judged: GateConfig
    #: why the measurement cannot be trusted ("" when it can): it is then never recorded nor compared in this session
    invalid: str = ""
    #: the baseline store's answer for this test and identity (None when the profile is written or evidence only)
    lookup: Lookup | None = None
    #: the comparison (None unless compared)
    comparison: Comparison | None = None
    #: the baseline compared with
    baseline: Baseline | None = None
    #: ``session``: the baseline's artifact, measured again now in blocks interleaved with the candidate's
    reference: Measurement | None = None
    #: ``session``: when the interleaved measurement may stop (measured until decided)
    looks: Looks | None = None
    #: why this comparison, and what it cannot see: the verdict's notes
    notes: tuple[str, ...] = ()
    #: ``runtime-session``: what measures the reference and the candidate (two runtimes in worker processes,
    #: :class:`~pytest_sme2.runners.worker.RuntimePair`), instead of the test's runner; :meth:`close` stops it
    runner: RuntimePair | None = None
    #: instructions executed under emulation are gated (``config.instructions``): the count baseline's lookup
    counts: Lookup | None = None
    #: ... and what they are compared as: unchanged (the program, inputs and build the counts depend on are the
    #: count baseline's) or stored (something of them changed); None without a count baseline
    count_comparison: Comparison | None = None

    def close(self) -> None:
        """Stop the processes this plan started (the two runtimes of a ``runtime-session`` comparison)."""
        if self.runner is not None:
            self.runner.close()


def choose_plan(profile: Profile, off: Profile | None, *, test_id: str, runner: Runner, baselines: BaselineStore,
                artifacts: ArtifactStore, config: GateConfig, policy: Policy, rebuilder: Rebuilder | None = None,
                calibrate: Calibrate | None = None, runtimes: Runtimes | None = None) -> Plan:
    """Which comparison judges ``profile`` (the SME2-on arm of a pair when ``off`` is given), and what it needs: its
    time (:func:`time_plan`) and, when counted and gated, its instructions executed under emulation.

    ``runtimes``: where the baseline's runtime is installed when the runtime changed (:mod:`measure.runtimes`), to
    measure it beside this one (``runtime-session``); None: a runtime change is compared with the stored samples."""
    plan = time_plan(profile, off, test_id=test_id, runner=runner, baselines=baselines, artifacts=artifacts,
                     config=config, policy=policy, rebuilder=rebuilder, calibrate=calibrate, runtimes=runtimes)
    if config.instructions is None or profile.instructions is None:
        return plan
    counts = baselines.lookup(test_id, counts_identity(profile.identity))
    stored = counts.baseline
    if stored is None or stored.instructions is None:
        return replace(plan, counts=counts)
    same = (stored.artifact is not None and profile.artifact is not None
            and not count_differences(stored.artifact, profile.artifact))
    return replace(plan, counts=counts, count_comparison=Comparison.UNCHANGED if same else Comparison.STORED)


def count_differences(baseline: Artifact, candidate: Artifact) -> list[str]:
    """What changed of what instructions executed under emulation depend on: the program, the inputs, the runner
    build (its binary, libraries, QEMU and CPU). Not the measurement's runs or the host's environment."""
    mine, theirs = comparable_builds(baseline.build, candidate.build)
    return [what for what, changed in (("program", baseline.pte_sha256 != candidate.pte_sha256),
                                       ("inputs", baseline.inputs_sha256 != candidate.inputs_sha256),
                                       ("runner build", mine != theirs)) if changed]


def time_plan(profile: Profile, off: Profile | None, *, test_id: str, runner: Runner, baselines: BaselineStore,
              artifacts: ArtifactStore, config: GateConfig, policy: Policy, rebuilder: Rebuilder | None = None,
              calibrate: Calibrate | None = None, runtimes: Runtimes | None = None) -> Plan:
    """How the time of ``profile`` (the SME2-on arm of a pair when ``off`` is given) is judged, and what it needs.

    ``runtimes``: as :func:`choose_plan`."""
    path = baselines.path_for(test_id, profile.identity)
    invalid = profile.invalid_reason or (off.invalid_reason if off is not None else "")
    if not config.time_gated:
        return Plan(EVIDENCE_ONLY, path, config, config, invalid)
    if policy.update_baseline:
        return Plan(WRITE, path, config, config, invalid)
    lookup = baselines.lookup(test_id, profile.identity)
    if lookup.baseline is None:
        return Plan(NO_BASELINE if policy.require_baseline else RECORD, path, config, config, invalid, lookup)

    baseline = lookup.baseline
    notes: list[str] = []
    ref_m: Measurement | None = None
    looks: Looks | None = None
    runtime_runner: RuntimePair | None = None
    other: RuntimeReference | None = None  # the baseline's runtime installed beside this one (a runtime change)
    judged = config  # the configuration the verdict is judged with (a sequential measurement's looks change it)
    changes = baseline.artifact.differences(profile.artifact) if (baseline.artifact and profile.artifact) else []
    if baseline.artifact is not None and profile.artifact is not None and not changes:
        comparison = Comparison.UNCHANGED
        notes.append("unchanged artifact (same program, inputs and build as the baseline): only the machine can "
                     "differ, so a slower median is reported as drift, not gated")
        # Absolute checks (budgets, min_speedup) still gate: a failing one is measured again like any other.
    else:
        ref = (reference_measurement(baseline.artifact, profile, runner, artifacts) if baseline.artifact
               else Reference(None, "the baseline does not record its artifact"))
        # Another executorch release: the baseline's, installed beside this one, or pytest-sme2's own runner built
        # against its SDK (or why not)
        other = (runtime_reference(runtimes, baseline.artifact, profile, runner, rebuilder)
                 if runtimes is not None and baseline.artifact is not None and not invalid else None)
        rebuilt = ""
        if ref.missing and rebuilder is not None and baseline.artifact is not None and not invalid:
            # A fresh runner (no artifact cache): the baseline's program, rebuilt from its commit and proven by its hash
            # (by the exporter of the baseline's runtime, when it is installed)
            attempt = rebuilder.rebuild(baseline.rebuild, baseline.artifact, lookup.path, artifacts,
                                        other.folder if other is not None and other.ok else None)
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
        rebuilt_alone = rebuilt
        if rebuilt and ref.measurement is None and not (ref.missing or ref.missing_build):  # another reason
            rebuilt = f"{rebuilt}; {ref.why}"
        why = rebuilt or ref.why
        what = "; ".join(changes) or "the artifact is unknown"
        if ref.measurement is not None and profile.measurement is not None and not invalid:
            comparison = Comparison.SESSION
            ref_m = ref.measurement
            notes.append(f"changed since the baseline: {what}; compared with the baseline's artifact re-measured "
                         "in this session, in interleaved blocks")
            if rebuilt:
                notes.append(rebuilt)
            # Measured until decided (issue 18 defect 12): looks at about half, all, 1.5x and 2x the blocks, each at
            # the Bonferroni share of the error; the gate judges at that same confidence.
            looks = Looks.for_blocks(profile.measurement.blocks, config.confidence)
            judged = looks.gate_config(config)
        elif ref.runtime_changed:
            # The baseline's artifact on its own runtime, beside the change on this one; else the stored samples
            beside = (runtime_session(baseline.artifact, profile, other, artifacts, runner)
                      if other is not None and other.ok and baseline.artifact is not None
                      else Reference(None, other.message if other is not None else ""))
            if beside.measurement is not None and other is not None and profile.measurement is not None:
                comparison = Comparison.RUNTIME_SESSION
                ref_m, runtime_runner = beside.measurement, other.runner
                old, new = other.versions
                notes.append(f"changed since the baseline: {what}; a runtime change (executorch {old} -> {new}), "
                             f"compared in this session: {other.message}")
                if rebuilt_alone:
                    notes.append(rebuilt_alone)
                looks = Looks.for_blocks(profile.measurement.blocks, config.confidence)
                judged = looks.gate_config(config)
            else:
                comparison = Comparison.RUNTIME
                notes.append(f"changed since the baseline: {what}; compared with the stored samples of "
                             f"{baseline.created or 'an earlier session'} ({why}): a runtime change is gated only "
                             "beyond the margin plus the drift allowance (re-record the baseline on this runtime, "
                             "--sme2-update-baseline, to gate later changes in the same session)")
                if beside.why:
                    notes.append(beside.why)
        else:
            comparison = Comparison.STORED
            notes.append(f"changed since the baseline: {what}; compared with the stored samples of "
                         f"{baseline.created or 'an earlier session'} ({why or 'the measurement is invalid'})")
    if other is not None and other.runner is not None and runtime_runner is None:
        other.runner.close()  # started, but not what this comparison measures with
    if comparison.widened:
        judged, allowance_note = calibrated(judged, calibrate, test_id, baseline.identity_id)
        notes.append(allowance_note)
    if comparison is Comparison.UNCHANGED and baseline.artifact is not None and not baseline.artifact.recipe:
        notes.append("the baseline records no measurement recipe (written by an earlier pytest-sme2): its runs, "
                     "warm-up, measuring code and SME2-off arm are not compared; --sme2-update-baseline records them")
    unknown = baseline.artifact.unrecorded() if baseline.artifact is not None else []
    if unknown:
        notes.append(f"the baseline does not record {', '.join(unknown)} (written by an earlier pytest-sme2, or a "
                     "runner whose process cannot be read): not compared; --sme2-update-baseline records them")
    return Plan(COMPARE, path, config, judged, invalid, lookup, comparison, baseline, ref_m, looks, tuple(notes),
                runtime_runner)


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
        return store.runner(sha) or (builds or {}).get(sha)

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


def runtime_reference(runtimes: Runtimes, baseline: Artifact, candidate: Profile, runner: Runner,
                      rebuilder: Rebuilder | None = None) -> RuntimeReference | None:
    """The baseline's runtime installed and started beside this one (the local runtime), or pytest-sme2's own runner
    built against the baseline's executorch (``rebuilder.runner_target``: a device that runs it), or why not; None when
    the runtime did not change (or the test runs neither, or cannot say how it was measured)."""
    m = candidate.measurement
    if m is None:
        return None
    current = dict(runner.build_identity(m.variant))
    if not runner.in_process:
        if rebuilder is None or rebuilder.runner_target is None or is_runtime(baseline.build):
            return None
        return runtimes.runner_reference(rebuilder.runner_target, baseline.build, current,
                                         cache=rebuilder.runner_cache, wheel=None)
    if not (is_runtime(baseline.build) and is_runtime(current)):
        return None
    mine, now = comparable_builds(baseline.build, current)
    return runtimes.reference(baseline.build, current) if mine != now else None


def runtime_session(baseline: Artifact, candidate: Profile, other: RuntimeReference, store: ArtifactStore,
                    runner: Runner) -> Reference:
    """How to measure the baseline's artifact on its runtime (``other``, started), beside the candidate on this one:
    the reference arm's :class:`Measurement`, or why not (the store lacks the program, or something else than the
    runtime changed that a reference measured now would hide)."""
    m = candidate.measurement
    assert m is not None
    pte = store.get(baseline.pte_sha256)
    inputs = [store.get(sha) for sha in baseline.inputs_sha256]
    if pte is None or any(p is None for p in inputs):
        return Reference(None, _not_held(store, [baseline.pte_sha256, *baseline.inputs_sha256],
                                         f"the baseline's runtime was installed, but the artifact store {store.root} "
                                         "does not hold the baseline's program and inputs; compared with the stored "
                                         "samples instead"))
    now = candidate.artifact
    moved = [c for c in (baseline.code_path_differences(now) if now is not None else [])
             if not c.startswith(("effective", "shared objects"))]  # sizing is the session's: both arms share it
    if baseline.shared_objects is not None and now is not None and now.shared_objects is not None:
        # The two runtimes' own libraries differ by design; any other (torch's, the C runtime's) would run as it does
        # now in both arms, and hide its change.
        current = runner.runner_for(m.variant)  # pytest-sme2's own runner loads its SDK's libraries from lib/ beside it
        own = runtime_library_names(other.lib_dir, current.resolve().parent / "lib" if current is not None else None)
        objects = [c for c in changed_objects(baseline.shared_objects, now.shared_objects)
                   if c.lstrip("+-").split(" ")[0] not in own]
        if objects:
            moved.append(f"shared objects changed ({', '.join(objects)})")
    if moved:
        return Reference(None, f"the baseline's runtime was installed, but more than the runtime changed "
                               f"({'; '.join(moved)}), which a reference measured now would hide; compared with the "
                               "stored samples instead")
    held = tuple(p for p in inputs if p is not None)
    if other.binary is not None:
        # pytest-sme2's own runner is its own timing build: the rebuilt binary gives the latency as the baseline's did
        timing = str(baseline.build.get("timing_runner_sha256", ""))
        if timing and timing != baseline.build.get("runner_sha256"):
            return Reference(None, "the baseline's latency came from another timing build than its runner, which is "
                                   "not rebuilt against its executorch; compared with the stored samples instead")
        return Reference(replace(m, pte=pte, inputs=held, build=other.binary,
                                 timing_build=other.binary if timing else None, label=f"{m.label}_reference"))
    return Reference(replace(m, pte=pte, inputs=held, variant=REFERENCE_RUNTIME, label=f"{m.label}_reference"))


def _not_held(store: ArtifactStore, shas: Sequence[str], missing: str) -> str:
    """Why the store has no usable copy: the damaged copies it removed, said, else ``missing``."""
    damaged = [store.damaged[sha] for sha in shas if sha in store.damaged]
    return "; ".join(damaged) if damaged else missing


def _describe(build: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {str(v)[:12]}" for k, v in build.items() if k not in ("runner", "path")) or "unknown"


def calibrated(config: GateConfig, calibrate: Calibrate | None, test_id: str,
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
