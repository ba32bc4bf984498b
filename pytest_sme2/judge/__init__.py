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

:func:`judge` is four steps, one module each: :func:`~pytest_sme2.judge.plan.choose_plan` chooses the comparison
(a :class:`~pytest_sme2.judge.plan.Plan`: which comparison, what to measure beside the change, why),
:func:`~pytest_sme2.judge.execute.execute_plan` measures what the plan needs,
:func:`~pytest_sme2.judge.decide.decide_plan` decides (pure: from the measurements to a
:class:`~pytest_sme2.gate.verdict.Verdict`) and :func:`~pytest_sme2.judge.record.record_judgement` records (the
baseline, its memory, the artifacts, the count baseline) and says what became of the profile. Two recorded files
are judged by :func:`~pytest_sme2.judge.recorded.compare_recorded`.
"""

from __future__ import annotations

from pytest_sme2.evidence.categories import CategoryRules
from pytest_sme2.gate.verdict import GateConfig
from pytest_sme2.judge.decide import decide_plan
from pytest_sme2.judge.execute import Measured, execute_plan, pair_numerics, sme2_evidence
from pytest_sme2.judge.plan import Calibrate, Plan, Policy, Reference, choose_plan, reference_measurement
from pytest_sme2.judge.record import (
    GATED,
    MISSING,
    NOT_WRITTEN,
    RECORDED,
    WRITTEN,
    Judgement,
    keep_artifacts,
    record_judgement,
)
from pytest_sme2.judge.recorded import Recorded, RecordedComparison, compare_recorded
from pytest_sme2.measure.profile import Profile
from pytest_sme2.measure.rebuild import Rebuilder
from pytest_sme2.measure.runtimes import Runtimes
from pytest_sme2.progress import Progress
from pytest_sme2.runners.base import Runner
from pytest_sme2.store.artifacts import ArtifactStore
from pytest_sme2.store.baseline import BaselineStore


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
    runtimes: Runtimes | None = None,
) -> Judgement:
    """Judge ``profile`` (the SME2-on arm of an on/off pair when ``off`` is given) against its baseline.

    ``rebuilder`` rebuilds a changed test's missing reference program from the commit its baseline was recorded at
    (:mod:`pytest_sme2.measure.rebuild`), and gives the recipe a baseline recorded now stores; None: neither.
    ``calibrate(test_id, identity_id)``: the measured between-session variation of the test on the device (the
    history store's, :mod:`pytest_sme2.history.calibration`), asked only when the comparison is with another
    session's samples (``stored``, ``runtime``); None = no history, so such a comparison is not decided unless
    ``config.drift_allowance`` is set by hand. ``runtimes``: where the baseline's executorch is installed when the local
    runtime changed, to measure the two runtimes side by side (:mod:`pytest_sme2.measure.runtimes`); None: such a
    change is compared with the stored samples (``runtime``).
    """
    plan = choose_plan(profile, off, test_id=test_id, runner=runner, baselines=baselines, artifacts=artifacts,
                       config=config, policy=policy, rebuilder=rebuilder, calibrate=calibrate, runtimes=runtimes)
    try:
        measured = execute_plan(plan, profile, off, runner=runner, rules=rules, progress=progress,
                                confirm=policy.confirm)
        verdict = decide_plan(plan, measured)  # may measure again (Measured.again), with the plan's runner
    finally:
        plan.close()
    return record_judgement(plan, verdict, measured, test_id=test_id, runner=runner, baselines=baselines,
                            artifacts=artifacts, policy=policy, rebuilder=rebuilder)


__all__ = ["GATED", "MISSING", "NOT_WRITTEN", "RECORDED", "WRITTEN", "Calibrate", "Judgement", "Measured", "Plan",
           "Policy", "Recorded", "RecordedComparison", "Reference", "choose_plan", "compare_recorded", "decide_plan",
           "execute_plan", "judge", "keep_artifacts", "pair_numerics", "record_judgement", "reference_measurement",
           "sme2_evidence"]
