"""The ``sme2_baseline`` fixture's object: looks up the baseline, has the gate judge, applies the verdict."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from .markers import parse_threshold_marker
from .measure import OnOff, Sme2Runner
from .records import record
from .session import Sme2Session, call


class Sme2Baseline:
    """The ``sme2_baseline`` fixture: compares a profile with the stored baseline and the thresholds."""

    def __init__(self, session: Sme2Session, item: pytest.Item, runner: Sme2Runner) -> None:
        self._session = session
        self._item = item
        self._runner = runner

    def gate_config(self) -> Any:
        from ..gate import GateConfig

        t = parse_threshold_marker(self._item)
        o = self._session.options
        return GateConfig(
            margin=(t.latency_pct if t.latency_pct is not None else o.margin) / 100,
            strict=o.strict,
            category_margins={k: v / 100 for k, v in t.categories.items()},
            p50_ms=t.p50_ms, p90_ms=t.p90_ms, min_speedup=t.min_speedup,
        )

    def check(self, result: Any) -> Any:
        """Judge ``result`` (a Profile, or an on/off pair) and fail the test on a regression."""
        from ..baseline import Baseline, BaselineStore, fingerprint_diff, now_iso
        from ..gate import Check, Status, Verdict, gate_confirmed, speedup_check

        if not (isinstance(result, OnOff) or hasattr(result, "fingerprint")):
            pytest.fail(f"sme2_baseline.check() takes what sme2_runner.profile() or profile_on_off() returned; got "
                        f"{type(result).__name__} {result!r:.60}", pytrace=False)
        config = self.gate_config()
        o = self._session.options
        rec = record(self._item)
        extra_checks: list[Check] = []
        profile = result
        if isinstance(result, OnOff):
            profile = result.on
            extra_checks.append(speedup_check(result.off.samples_ms, result.on.samples_ms,
                                              min_speedup=config.min_speedup, config=config,
                                              off_blocks=result.off.analysis.block_sizes,
                                              on_blocks=result.on.analysis.block_sizes))
            from ..report.comparison import compare_on_off

            rec.comparison = compare_on_off(result.off.analysis, result.on.analysis).to_dict()
        store = BaselineStore(o.baseline_dir)
        rec.baseline_path = str(store.path_for(self._item.nodeid, profile.fingerprint))
        if o.update_baseline:
            # The old file is not read: a corrupt one must not stop the update that replaces it.
            stats = profile.analysis.e2e.to_dict()
            baseline = Baseline(
                test_id=self._item.nodeid, fingerprint=profile.fingerprint, samples_ms=profile.samples_ms,
                category_totals_ms=dict(profile.analysis.category_totals_ms),
                category_per_run_ms=dict(profile.analysis.category_per_run_ms) if profile.per_operator else {},
                per_operator=profile.per_operator, stats=stats,
                top_operators=tuple(op.to_dict() for op in profile.analysis.operator_details[:10]),
                created=now_iso(), tool_version=_version(), block_sizes=profile.analysis.block_sizes,
            )
            path = call(lambda: store.save(baseline))
            rec.baseline_written = True
            rec.baseline = baseline.to_dict()
            rec.note = f"baseline written: {path}"
            verdict = Verdict(_overall_extra(extra_checks), tuple(extra_checks), strict=config.strict)
            rec.verdict = verdict.to_dict()
            self._fail_if(verdict)
            return verdict
        lookup = call(lambda: store.lookup(self._item.nodeid, profile.fingerprint))
        if lookup.baseline is None:
            lines = [f"no baseline for {self._item.nodeid} on this device/runner (fingerprint "
                     f"{lookup.path.stem.rsplit('@', 1)[-1]}): expected {lookup.path}"]
            for other_path, other in lookup.others:
                diff = "; ".join(fingerprint_diff(other.fingerprint, profile.fingerprint)) or "?"
                lines.append(f"  a baseline exists for another fingerprint ({other_path.name}); differs in: {diff}")
            lines.append(f"create it with: pytest {self._item.nodeid!r} --sme2-update-baseline "
                         f"(and --sme2-device={o.device} as now), then commit {o.baseline_dir.name}/")
            rec.note = "\n".join(lines)
            pytest.fail(rec.note, pytrace=False)
        rec.baseline = lookup.baseline.to_dict()
        confirm = not o.no_confirm and self._runner.remeasure is not None
        measure = self._runner.remeasure or (lambda: profile)
        verdict, _pooled = gate_confirmed(lookup.baseline.samples(), lambda: _samples_of(measure()), config,
                                       first=profile.samples(), confirm=confirm)
        if extra_checks:
            checks = (*verdict.checks, *extra_checks)
            statuses = {c.status for c in extra_checks if not c.advisory}
            status = verdict.status
            for s in (Status.INVALID, Status.REGRESSION, Status.INCONCLUSIVE):
                if s in statuses and status not in (Status.INVALID, Status.REGRESSION):
                    status = s
            verdict = replace(verdict, status=status, checks=checks)
        rec.verdict = verdict.to_dict()
        rec.note = verdict.summary()
        self._fail_if(verdict)
        return verdict

    def _fail_if(self, verdict: Any) -> None:
        if verdict.failed:
            head = f"sme2 {verdict.status.value.upper()}: {self._item.nodeid}"
            pytest.fail(f"{head}\n{verdict.summary()}", pytrace=False)


def _overall_extra(checks: list[Any]) -> Any:
    from ..gate import Status

    statuses = {c.status for c in checks if not c.advisory}
    for s in (Status.INVALID, Status.REGRESSION, Status.INCONCLUSIVE):
        if s in statuses:
            return s
    return Status.PASS


def _samples_of(result: Any) -> Any:
    return result.samples()


def _version() -> str:
    from .. import __version__

    return __version__
