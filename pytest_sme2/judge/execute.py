"""Step 2 of :func:`pytest_sme2.judge.judge`: execute a :class:`~pytest_sme2.judge.plan.Plan` (what it measures).

A ``session`` comparison measures the baseline's artifact again now, in blocks interleaved with the candidate's, until
decided; the other comparisons compare with the stored samples. What is measured once more, when the gate asks for a
confirming measurement, is given as a function (:attr:`Measured.again`, :attr:`Measured.again_pair`): it runs only if
the first measurement leaves the verdict unsettled. The SME2 evidence the arms left (XNNPACK logs, traces, outputs) is
read here too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pytest_sme2.device.identity import reports_sme2
from pytest_sme2.evidence.categories import CategoryRules
from pytest_sme2.evidence.kernels import KernelLog
from pytest_sme2.evidence.numerics import NumericsComparison
from pytest_sme2.gate.checks import REQUIRED_BY_MARKER, REQUIRED_BY_ON_OFF, Sme2Evidence
from pytest_sme2.gate.decide import Measure, gate, measured_status
from pytest_sme2.gate.verdict import Comparison, GateConfig, Samples
from pytest_sme2.judge.plan import COMPARE, Plan
from pytest_sme2.measure.pair import Pair, measure_pair, remeasure
from pytest_sme2.measure.profile import Profile, measure
from pytest_sme2.measure.sequential import settled
from pytest_sme2.progress import Progress
from pytest_sme2.runners.base import Runner


@dataclass(frozen=True)
class Measured:
    """What executing a plan measured: each arm's first measurement, its evidence, and how to measure once more."""

    #: the profile as the test measured it (the SME2-on arm of a pair)
    profile: Profile
    #: the candidate as measured for the verdict (the interleaved one, in a same-session comparison; else ``profile``)
    candidate: Profile
    #: the SME2-off arm of a pair
    off: Profile | None = None
    #: what the arms' logs, traces and outputs say about SME2 (:func:`sme2_evidence`)
    evidence: Sme2Evidence | None = None
    #: the baseline's artifact measured in this session (``session``)
    reference: Profile | None = None
    #: what the candidate is compared with: the re-measured reference's samples, or the baseline's stored ones
    base: Samples | None = None
    #: the confirming measurement of the latency, (reference, candidate, off), when the gate asks for one
    again: Measure | None = None
    #: the pair measured again (both arms, interleaved), when its speedup asks for a confirming measurement
    again_pair: Callable[[], Pair] | None = None


def execute_plan(plan: Plan, profile: Profile, off: Profile | None, *, runner: Runner,
                 rules: CategoryRules | None = None, progress: Progress | None = None,
                 confirm: bool = True) -> Measured:
    """Measure what ``plan`` needs beside ``profile``; ``confirm``: a verdict that is not settled may measure again."""
    evidence = sme2_evidence(profile, off, plan.config)
    if plan.action != COMPARE or plan.baseline is None:
        return Measured(profile, profile, off, evidence)
    base = plan.baseline.samples()
    again_pair = _once(lambda: remeasure(runner, Pair(off, profile), rules=rules, progress=progress)) if off else None
    ref_m, cand_m, looks = plan.reference, profile.measurement, plan.looks
    if plan.comparison is None or not plan.comparison.in_session or ref_m is None or cand_m is None:
        measure_again = _remeasure_stored(runner, profile, again_pair, base, rules=rules, progress=progress)
        return Measured(profile, profile, off, evidence, None, base, measure_again if confirm else None,
                        again_pair if confirm else None)
    session_config, comparison = plan.judged, plan.comparison
    # A runtime change: the two runtimes, each in its worker process (runners.worker), measure the two arms
    pair_runner = plan.runner or runner
    what = ("the baseline's artifact on the baseline's runtime" if comparison is Comparison.RUNTIME_SESSION
            else "the baseline's artifact")

    def settled_pair(ref_so_far: Profile, cand_so_far: Profile) -> bool:
        look = gate(ref_so_far.samples(), cand_so_far.samples(), session_config, comparison=comparison)
        return settled(measured_status(look))

    reference, candidate = measure_pair(pair_runner, ref_m, cand_m, rules=rules, progress=progress,
                                        what=f"{cand_m.label} vs {what}", looks=looks, stop=settled_pair)

    def again_session() -> tuple[Samples | None, Samples, Samples | None]:
        r, c = measure_pair(pair_runner, ref_m, cand_m, rules=rules, progress=progress,
                            what=f"{cand_m.label} vs {what} (confirming)", looks=looks, stop=settled_pair)
        return r.samples(), c.samples(), None

    return Measured(profile, candidate, off, evidence, reference, reference.samples(),
                    again_session if confirm else None, again_pair if confirm else None)


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
