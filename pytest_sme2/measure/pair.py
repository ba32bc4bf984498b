"""Pairs: two measurements taken together, in interleaved blocks (:func:`measure_pair`, ABBA...), so drift and the
machine's state hit both arms alike — SME2 off vs on (two runner builds), two backends, and a changed artifact vs the
baseline's own artifact (the gate's same-session reference).

The speedup ``median(off) / median(on)`` of two builds of one model means something only between measurements taken
together. This module is the one place that

- measures a pair (:func:`measure_on_off`; :func:`profile_on_off` for a registered variant pair), and names the
  SME2-off arm in the measured arm's artifact (:func:`with_off_arm`: the speedup depends on it, so a new SME2-off
  runner is a changed artifact);
- judges the speedup on **its own interleaved pair**, and confirms a failing or undecided one by measuring the
  **pair** again (:func:`decide_speedup`) — never the off arm of one measurement over the on arm of another (the
  same-session comparison with a baseline measures the on arm a second time, beside the baseline's artifact,
  minutes later: that measurement judges latency, not the speedup);
- merges that check into the test's verdict (:func:`with_speedup`); what the reports render from the decided check
  is built in :func:`pytest_sme2.report.pair.report_of`: every report shows the gated number.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_sme2.analysis.run import Analysis
from pytest_sme2.errors import ConfigError
from pytest_sme2.evidence.categories import CategoryRules
from pytest_sme2.evidence.kernels import KernelLog
from pytest_sme2.evidence.qemu_log import ExecutedKernels
from pytest_sme2.gate.decide import decide
from pytest_sme2.gate.verdict import Comparison, GateConfig, Samples, Verdict, overall
from pytest_sme2.measure.blocks import Block, measure_blocks, precision_plan
from pytest_sme2.measure.hostlock import heavy_work, measuring
from pytest_sme2.measure.profile import Profile, profile_of, reading_time
from pytest_sme2.measure.recipe import ExportedLike, Measurement
from pytest_sme2.measure.sequential import Looks
from pytest_sme2.progress import Progress
from pytest_sme2.runners.base import SME2_OFF, SME2_ON, Runner

#: The checks :func:`decide_speedup` contributes to a verdict.
SPEEDUP_CHECKS = ("speedup", "min_speedup")


@dataclass(frozen=True)
class Pair:
    """Two interleaved measurements of one model: ``off`` the slower build (SME2 off, or a backend), ``on`` the one
    checked against the baseline (SME2 on, or the faster backend); labels name them in reports."""

    off: Profile
    on: Profile
    off_label: str = "SME2 off"
    on_label: str = "SME2 on"

    def samples(self) -> tuple[Samples, Samples]:
        """The speedup's samples, ``(off, on)``: both from this one interleaved measurement."""
        return self.off.samples(), self.on.samples()


def with_off_arm(on: Profile, off: Profile) -> Profile:
    """``on`` with its artifact's recipe naming the off arm's program and build: what the pair's speedup is over."""
    if on.artifact is None or off.artifact is None:
        return on
    off_arm = {"pte_sha256": off.artifact.pte_sha256,
               "build": {k: v for k, v in off.artifact.build.items() if k != "path"}}
    artifact = replace(on.artifact, recipe={**on.artifact.recipe, "off_arm": off_arm})
    return replace(on, artifact=artifact)


def measure_pair(runner: Runner, a: Measurement, b: Measurement, *, kernel_logs: Sequence[KernelLog | None] = (),
                 rules: CategoryRules | None = None, progress: Progress | None = None,
                 what: str = "", executed: Sequence[ExecutedKernels | None] = (), looks: Looks | None = None,
                 stop: Callable[[Profile, Profile], bool] | None = None) -> tuple[Profile, Profile]:
    """Measure ``a`` and ``b`` in interleaved blocks (A,B / B,A / ...); returns their profiles.

    With ``looks`` and ``stop`` the pair is measured group-sequentially (:mod:`pytest_sme2.measure.sequential`): at each
    look before the last, ``stop(profile of a, profile of b)`` on the rounds so far may end it (the verdict is
    settled). Without them, a pair whose arms ask for a precision stops once both medians are that precise.
    """
    if a.blocks != b.blocks:
        raise ConfigError(f"an interleaved comparison needs the same number of blocks per arm ({a.blocks} != "
                          f"{b.blocks})")
    label = what or f"{a.label} vs {b.label}"
    logs = [*list(kernel_logs), None, None]
    ran = [*list(executed), None, None]

    # Every run is analyzed once: a look profiles the rounds so far, the result all of them, from the same analyses.
    analyzed: tuple[dict[int, Analysis], dict[int, Analysis]] = ({}, {})

    def settled(per_arm: list[list[Block]]) -> str:  # passed to measure_blocks only when there is a ``stop``
        assert stop is not None and looks is not None
        so_far = [profile_of(runner, m, blocks, kernel_log=logs[i], rules=rules, disturbance="", invalid="",
                           executed=ran[i], analyzed=analyzed[i])
                  for i, (m, blocks) in enumerate(zip((a, b), per_arm, strict=True))]
        return (f"the verdict was settled (looks at {', '.join(map(str, looks.rounds))} rounds, {looks.per_look:.2%} "
                "each)") if stop(so_far[0], so_far[1]) else ""

    rule: Callable[[list[list[Block]]], str] | None = settled if stop else None
    if stop is None:
        looks, rule = precision_plan([a, b])
    with measuring(a.lock_file or b.lock_file, what=label, progress=progress):
        (blocks_a, blocks_b), note, invalid, rounds = measure_blocks(
            runner, [a, b], blocks=a.blocks, progress=progress, what=label, looks=looks, stop=rule,
            reading_s=reading_time(logs, rules, ran))
    with heavy_work(a.lock_file or b.lock_file, what=f"{label}: analysis", progress=progress):
        return (profile_of(runner, a, blocks_a, kernel_log=logs[0], rules=rules, disturbance=note, invalid=invalid,
                         executed=ran[0], rounds=rounds, analyzed=analyzed[0]),
                profile_of(runner, b, blocks_b, kernel_log=logs[1], rules=rules, disturbance=note, invalid=invalid,
                         executed=ran[1], rounds=rounds, analyzed=analyzed[1]))


def measure_on_off(runner: Runner, off: Measurement, on: Measurement, *,
                   kernel_logs: Sequence[KernelLog | None] = (), executed: Sequence[ExecutedKernels | None] = (),
                   rules: CategoryRules | None = None, progress: Progress | None = None, what: str = "",
                   off_label: str = "SME2 off", on_label: str = "SME2 on") -> Pair:
    """Measure ``off`` and ``on`` in interleaved blocks: one :class:`Pair`."""
    a, b = measure_pair(runner, off, on, kernel_logs=kernel_logs, rules=rules, progress=progress,
                        what=what or f"{on.label} {off_label}/{on_label}", executed=executed)
    return Pair(a, with_off_arm(b, a), off_label, on_label)


def remeasure(runner: Runner, pair: Pair, *, rules: CategoryRules | None = None,
              progress: Progress | None = None) -> Pair:
    """The same pair measured again, both arms, interleaved (their own programs, builds and settings)."""
    if pair.off.measurement is None or pair.on.measurement is None:
        raise ConfigError("this pair does not say how it was measured (it was read from an old results file)")
    return measure_on_off(runner, pair.off.measurement, pair.on.measurement, rules=rules, progress=progress,
                          what=f"{pair.on.measurement.label} {pair.off_label}/{pair.on_label} (confirming)",
                          off_label=pair.off_label, on_label=pair.on_label)


def decide_speedup(pair: Pair, config: GateConfig, measure_again: Callable[[], Pair] | None) -> Verdict:
    """The pair's speedup check, decided on the pair and confirmed on a re-measured pair (:func:`gate.decide`'s rule).

    Only the speedup: budgets and the comparison with a baseline are the latency verdict's.
    """
    own = replace(config, p50_ms=None, p90_ms=None)
    off, on = pair.samples()

    def again() -> tuple[Samples | None, Samples, Samples | None]:
        assert measure_again is not None
        fresh = measure_again()
        o, n = fresh.samples()
        return None, n, o

    # The pair is measured in this session, interleaved: a same-session design, confirmed like one.
    return decide((None, on, off), again if measure_again is not None else None, own, comparison=Comparison.SESSION)


def with_speedup(verdict: Verdict, speedup: Verdict) -> Verdict:
    """``verdict`` (latency, budgets, evidence) with the pair's speedup check (and its validity, if only it failed)."""
    names = {c.name for c in verdict.checks}
    checks = (*verdict.checks, *(c for c in speedup.checks if c.name not in names))
    return replace(verdict, checks=checks, status=overall(checks), attempts=max(verdict.attempts, speedup.attempts))


def profile_on_off(
    exported: ExportedLike,
    runner: Runner,
    *,
    runs: int,
    warmup: int = 1,
    threads: int = 1,
    out_dir: Any = None,
    blocks: int = 4,
    timeout_s: float = 600.0,
    kernel_logs: Mapping[str, KernelLog] | None = None,
    label: str | None = None,
    latency: str | None = None,
    rules: CategoryRules | None = None,
    progress: Progress | None = None,
) -> Pair:
    """Measure the SME2-off and SME2-on builds of ``runner`` in interleaved blocks."""
    available = runner.variants()
    missing = [v for v in (SME2_ON, SME2_OFF) if v not in available]
    if missing:
        raise ConfigError(
            f"the {runner.name} runner has no {' / '.join(missing)} build: an SME2 on/off comparison needs two "
            "executor_runner builds (--sme2-runner for SME2 on, --sme2-runner-off for SME2 off)"
        )
    settings: dict[str, Any] = {"runs": runs, "warmup": warmup, "threads": threads, "blocks": blocks,
                                "timeout_s": timeout_s, "label": label}
    if out_dir is not None:
        settings["out_dir"] = out_dir
    if latency is not None:
        settings["latency"] = latency
    base = Measurement.of(exported, **settings)
    logs = kernel_logs or {}
    return measure_on_off(runner, replace(base, variant=SME2_OFF), replace(base, variant=SME2_ON),
                          kernel_logs=(logs.get(SME2_OFF), logs.get(SME2_ON)), rules=rules, progress=progress,
                          what=f"{exported.name} SME2 off/on")


__all__ = ["SPEEDUP_CHECKS", "Pair", "decide_speedup", "measure_on_off", "measure_pair", "profile_on_off", "remeasure",
           "with_off_arm", "with_speedup"]
