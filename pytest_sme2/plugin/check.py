"""The ``sme2_baseline`` fixture's object: the library judges the profile; this applies the result to the test.

Applying means: record what was measured and concluded (for the terminal section and the reports), and
fail the test when the verdict fails it — a confirmed regression always; what ``--sme2-fail-on`` names (where ``CI``
is set: a missing baseline, and an invalid or inconclusive verdict that left something undecided, with what to do);
every invalid and inconclusive with ``--sme2-strict``. No verdict is computed here.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_sme2.errors import Sme2Error
from pytest_sme2.plugin.markers import min_speedup_without_pair, parse_threshold_marker
from pytest_sme2.plugin.measure import Sme2Runner
from pytest_sme2.plugin.records import result_of, test_id, update
from pytest_sme2.plugin.session import Sme2Session, call


class Sme2Baseline:
    """The ``sme2_baseline`` fixture: compares a profile with the stored baseline and the thresholds."""

    def __init__(self, session: Sme2Session, item: pytest.Item, runner: Sme2Runner) -> None:
        self._session = session
        self._item = item
        self._runner = runner

    def gate_config(self) -> Any:
        from pytest_sme2.gate.verdict import PEAK_MARGIN, GateConfig, MemoryThresholds

        t = parse_threshold_marker(self._item)
        o = self._session.options
        return GateConfig(
            margin=t.margin_pct(o.margin) / 100,
            strict=o.strict, fail_on=tuple(s for s in o.fail_on if s != "missing"),
            category_margins={k: v / 100 for k, v in t.categories.items()},
            p50_ms=t.p50_ms, p90_ms=t.p90_ms, min_speedup=t.min_speedup,
            drift_allowance=o.drift_allowance / 100 if o.drift_allowance is not None else None,
            require_sme2_kernels=t.require_sme2_kernels,
            emulated=self.emulated(), time_gated=self._runner.time_gated(),
            instructions=t.instructions(o.count_instructions),
            memory=MemoryThresholds(
                planned_growth=(t.planned_pct or 0.0) / 100,
                peak_margin=t.peak_pct / 100 if t.peak_pct is not None else PEAK_MARGIN,
                planned_mb=t.planned_mb, peak_mb=t.peak_mb,
            ),
        )

    def emulated(self) -> bool:
        """The device is emulated (QEMU, or an Android emulator whose identity names it): its time is no device's."""
        return self._runner.runner.emulated

    def rebuilder(self, profile: Any) -> Any:
        """How a missing reference program of this test is rebuilt (measure.rebuild), and the recipe its baseline
        records: the registered model of its ``sme2_model`` marker, in the dtype and backend ``profile`` measured."""
        from functools import partial
        from pathlib import Path

        from pytest_sme2.measure.rebuild import Rebuilder, recipe_for
        from pytest_sme2.models import get_model
        from pytest_sme2.plugin.measure import MODEL_REQUEST_KEY
        from pytest_sme2.runners.registry import device

        o = self._session.options
        # pytest-sme2's own runner, where the device runs it: a baseline's build of it can be rebuilt too
        target = device(o.device).own_runner if o.own_runner else None
        make = partial(Rebuilder, cache_dir=o.cache_dir, progress=self._session.progress, runner_target=target,
                       runner_cache=o.cache_dir / "runners", aarch64_wheel=o.aarch64_wheel,
                       lock_file=self._session.host_lock)
        request = self._item.stash.get(MODEL_REQUEST_KEY, None)
        if request is None or not isinstance(request.model, str) or request.inputs is not None:
            return make(None, why_not=(
                "only models registered with register_model and used without inputs= can be rebuilt in another "
                "process; this test's model is built in the test itself"))
        try:
            source = Path(get_model(request.model).origin.rpartition(":")[0])
        except Sme2Error as exc:
            return make(None, why_not=str(exc))
        if not source.is_file():
            return make(None, why_not=f"the model {request.model!r} is not registered by a .py file")
        model = getattr(profile, "model", {}) or {}
        return make(recipe_for(request.model, str(model.get("dtype", request.dtype)),
                               str(model.get("backend", request.backend)), source))

    def runtimes(self) -> Any:
        """Where a changed local runtime's previous executorch is installed, to be measured beside this one."""
        from pytest_sme2.measure.runtimes import Runtimes

        o = self._session.options
        return Runtimes(o.runtimes, why_off="--sme2-runtimes=none", progress=self._session.progress,
                        lock_file=self._session.host_lock, log_dir=o.cache_dir / "runtimes-logs")

    def check(self, result: Any) -> Any:
        """Judge ``result`` (a Profile, or an on/off pair) and fail the test on a regression."""
        from pytest_sme2.judge import GATED, MISSING, NOT_WRITTEN, RECORDED, WRITTEN, judge
        from pytest_sme2.measure.pair import Pair as OnOff

        if not (isinstance(result, OnOff) or hasattr(result, "measurement")):
            pytest.fail(f"sme2_baseline.check() takes what sme2_runner.profile() or profile_on_off() returned; got "
                        f"{type(result).__name__} {result!r:.60}", pytrace=False)
        if not isinstance(result, OnOff):
            min_speedup_without_pair(self._item, parse_threshold_marker(self._item))
        session = self._session
        o = session.options
        profile, off = (result.on, result.off) if isinstance(result, OnOff) else (result, None)
        update(self._item, profile=profile, profile_off=off)
        config, policy = self.gate_config(), session.policy(test_id(self._item))
        with session.third_party(test_id(self._item)):
            judgement = call(lambda: judge(
                profile, test_id=test_id(self._item), runner=self._runner.runner, baselines=session.baselines,
                artifacts=session.artifacts, config=config, policy=policy, off=off, rules=session.rules,
                progress=session.progress, rebuilder=self.rebuilder(profile), calibrate=session.calibrate,
                runtimes=self.runtimes()))
        session.status.clear()
        judgement = _with_machine(judgement, session)
        verdict = judgement.verdict
        if isinstance(result, OnOff):
            from pytest_sme2.report.pair import report_of

            # The reports render the pair with the speedup check the verdict gated (decided in measure.pair).
            update(self._item, comparison=report_of(result, verdict, emulated=config.emulated))
        update(self._item, baseline_path=str(judgement.baseline_path), baseline=judgement.baseline,
               reference=judgement.reference)
        if judgement.candidate is not None and judgement.candidate is not profile and off is None:
            # The candidate as measured beside the baseline's artifact. A pair keeps its own on arm: the reports show
            # its off and on arms side by side, and their speedup is the pair's (the verdict's E2E line gives the
            # numbers measured beside the baseline's artifact).
            update(self._item, profile=judgement.candidate)
        update(self._item, verdict=verdict, baseline_written=judgement.outcome == WRITTEN,
               recorded=judgement.outcome == RECORDED, note=judgement.message,
               warnings=tuple(dict.fromkeys([*result_of(self._item).warnings, *judgement.warnings])),  # the export's
               other_baselines=tuple(judgement.others))
        if judgement.outcome == MISSING:
            pytest.fail(judgement.message, pytrace=False)
        if judgement.outcome == NOT_WRITTEN and o.update_baseline:
            pytest.fail(judgement.message, pytrace=False)
        if verdict.failed:
            head = f"sme2 {verdict.status.value.upper()}: {self._item.nodeid}"
            body = judgement.message if judgement.outcome == GATED else f"{judgement.message}\n{verdict.summary()}"
            if verdict.undecided_text():
                body += f"\n{verdict.undecided_text()}"
            pytest.fail(f"{head}\n{body}", pytrace=False)
        return verdict


def _with_machine(judgement: Any, session: Sme2Session) -> Any:
    """The judgement with a stored comparison judged against the machine's move, as the session's unchanged tests
    measured it (:mod:`pytest_sme2.gate.suite`); an unchanged test's move is kept as one more control."""
    from dataclasses import replace

    from pytest_sme2.gate.suite import Machine, as_machine, control_ratio
    from pytest_sme2.judge import GATED

    verdict = judgement.verdict
    ratio = control_ratio(verdict)
    if ratio is not None:
        session.controls.append(ratio)
        return judgement
    adjusted = as_machine(verdict, Machine(tuple(session.controls)))
    if adjusted is verdict:
        return judgement
    return replace(judgement, verdict=adjusted,
                   message=adjusted.summary() if judgement.outcome == GATED else judgement.message)
