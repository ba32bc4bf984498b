"""What the reports render for a pair measured together (:mod:`pytest_sme2.measure.pair`): its on/off comparison
with the speedup check the verdict gated, so the number gated is the number shown."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pytest_sme2.analysis.onoff import OnOffComparison
from pytest_sme2.gate.checks import speedup_check
from pytest_sme2.gate.instructions import ratio_text
from pytest_sme2.gate.verdict import GateConfig, Verdict
from pytest_sme2.measure.pair import Pair
from pytest_sme2.report.comparison import builds_sentence, compare_on_off
from pytest_sme2.runners.base import SME2_OFF
from pytest_sme2.store.artifacts import Artifact


def report_of(pair: Pair, verdict: Verdict, *, emulated: bool) -> OnOffComparison:
    """What the reports render for the pair (:class:`~pytest_sme2.analysis.onoff.OnOffComparison`), with the
    verdict's speedup check: the number gated is the number shown."""
    off, on = pair.off, pair.on
    builds = builds_sentence(_build(off.artifact), _build(on.artifact), pair.off_label,
                             pair.on_label) if off.variant == SME2_OFF else ""
    # A verdict without a speedup check (an invalid measurement) still shows the pair's ratio: on the samples the
    # gate would have judged (the latency runs), advisory — never a ratio of other runs.
    speedup = verdict.speedup or speedup_check(*pair.samples(), GateConfig(emulated=emulated))
    comparison = compare_on_off(off.analysis, on.analysis, speedup=speedup, off_label=pair.off_label,
                                on_label=pair.on_label, emulated=emulated, builds=builds)
    if off.instructions is None or on.instructions is None:
        return comparison
    # Counted under emulation: the count ratio and what moved are a finding of the pair (never a speedup).
    return replace(comparison, findings=(*comparison.findings, ratio_text(off.instructions, on.instructions)))


def _build(artifact: Artifact | None) -> Mapping[str, Any]:
    return artifact.build if artifact is not None else {}
