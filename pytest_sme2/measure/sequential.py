"""Measure until decided: when a measurement may stop before its last block.

Two rules, one per kind of measurement:

- **A comparison with the baseline's artifact re-measured beside the candidate** (interleaved, paired) stops when
  its *verdict* is settled (:class:`Looks`, :func:`settled`, below).
- **Every other measurement** (the candidate measured alone before it is judged, an on/off or backend pair)
  stops when its *median is known precisely enough* (:class:`Precision`): at a look, every arm's 95 % interval of
  the median of its block medians is narrower than ``±target`` (half the test's latency margin in the plugin).
  The rule reads the spread of the blocks, never their level, so it cannot steer a measurement towards a verdict;
  what it costs in false alarms and detection is measured with the rule in place (``benchmarks/gate_paired.py``,
  the "precision stop" rows). A measurement too noisy to reach the target runs every planned block, as before.

The paired rule:

An interleaved comparison (the baseline's artifact re-measured beside the candidate) is looked at after a few
rounds (:attr:`Looks.rounds`, e.g. after 8, 15, 22 and 30 for 15 blocks) and stops at the first look whose verdict is
settled (pass, regression or improvement); otherwise it goes on to the last look. Looking several times and
stopping when a look is decided inflates the error of a fixed-size interval (optional stopping), so every look,
the last included, uses the Bonferroni share of the error: with L looks at 95 % overall each look's interval is
a ``1 - 0.05 / L`` one (98.75 % for 4 looks), and the probability that *any* look claims a change that is not
there stays at or below 5 %. The gate then judges the stopped measurement at that same per-look confidence
(:meth:`Looks.gate_config`), so the verdict is the look's.

What it buys and costs (``benchmarks/gate_paired.py``, real A/A rounds, per comparison kind): the rounds
measured per comparison, with A/A false alarms and detection measured with the stopping rule in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pytest_sme2.gate.rule import Comparison, Status
from pytest_sme2.gate.stats import median_interval, min_paired_rounds
from pytest_sme2.gate.verdict import GateConfig


@dataclass(frozen=True)
class Looks:
    """When to look at an interleaved measurement (rounds measured so far), and at what confidence overall."""

    rounds: tuple[int, ...]
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if not self.rounds or list(self.rounds) != sorted(set(self.rounds)) or self.rounds[0] < 1:
            raise ValueError(f"looks must be increasing round counts, got {self.rounds}")

    #: how many looks the error is shared over (kept when the plan is cut short by :meth:`within`)
    planned: int = 0

    @property
    def per_look(self) -> float:
        """Each look's confidence: the Bonferroni share of the error over the planned looks."""
        return 1 - (1 - self.confidence) / max(self.planned, len(self.rounds))

    @property
    def last(self) -> int:
        return self.rounds[-1]

    def gate_config(self, config: GateConfig) -> GateConfig:
        """The gate's configuration for a measurement taken with these looks: its confidence is the look's."""
        return replace(config, confidence=self.per_look)

    @classmethod
    def for_blocks(cls, blocks: int, confidence: float = 0.95) -> Looks:
        """The plan for a measurement of ``blocks`` rounds: look at about half of them, at all of them, and, when
        the verdict is still close, go on to 1.5x and 2x (the rounds saved on clear verdicts are spent on close
        ones). Fewer blocks than a look's interval needs (8 at 95 % over 4 looks): one look at ``blocks``, a fixed
        design at ``confidence`` (nothing to stop early)."""
        per_look = 1 - (1 - confidence) / 4
        first = min_paired_rounds(per_look)
        if blocks < first:
            return cls((blocks,), confidence)
        rounds = sorted({max(first, blocks // 2), blocks, (3 * blocks) // 2, 2 * blocks})
        return cls(tuple(rounds), confidence)

    def within(self, blocks: int) -> Looks:
        """The same plan cut at ``blocks`` rounds (a time budget allowed no more); the confidence per look stays."""
        blocks = min(blocks, self.last)
        kept = (*(r for r in self.rounds if r < blocks), blocks)
        return replace(self, rounds=kept, planned=max(self.planned, len(self.rounds)))


def settled(status: Status) -> bool:
    """Is a look's verdict settled (nothing more to measure for it)? Pass, regression and improvement are."""
    return status in (Status.PASS, Status.REGRESSION, Status.IMPROVEMENT)


def applies(comparison: Comparison) -> bool:
    """Only an interleaved comparison with a reference measured beside the candidate can stop early."""
    return comparison.in_session



#: The first look of a measurement stopped for precision: the fewest blocks whose order-statistic interval of the
#: median reaches 95 % (6: [min, max] covers 96.9 %), which is also the fewest rounds of a 95 % paired interval
#: (a pair's speedup is judged on its own rounds).
PRECISION_FIRST_LOOK = 6
#: The confidence of the interval the precision rule reads.
PRECISION_CONFIDENCE = 0.95


@dataclass(frozen=True)
class Precision:
    """Stop measuring once the median is known to ``±target`` (relative: 0.025 = ±2.5 %); 0 = never stop early."""

    target: float

    def looks(self, blocks: int) -> Looks | None:
        """When to look at a measurement of (up to) ``blocks`` blocks: after every block from the 6th (the rule reads
        the spread, never the level, so looking often cannot steer a verdict; and a single outlying block, which
        keeps [min, max] of 6 wide, no longer holds the measurement until a later fixed look: from 9 blocks the
        interval drops the extremes). None when nothing can stop early (no target, or 6 blocks or fewer)."""
        if self.target <= 0 or blocks <= PRECISION_FIRST_LOOK:
            return None
        return Looks(tuple(range(PRECISION_FIRST_LOOK, blocks + 1)), PRECISION_CONFIDENCE)

    def half_width(self, block_medians: Sequence[float]) -> float | None:
        """The 95 % interval of the median of ``block_medians``, as ± a share of the median; None below 6 blocks."""
        iv, _ = median_interval(block_medians, confidence=PRECISION_CONFIDENCE)
        if iv is None or iv.estimate <= 0:
            return None
        return (iv.high - iv.low) / 2 / iv.estimate

    def reached(self, arms: Sequence[Sequence[float]]) -> str:
        """Why the measurement may stop (every arm's median known to the target), or "" to go on measuring."""
        widths = [self.half_width(arm) for arm in arms]
        if not widths or any(w is None or w > self.target for w in widths):
            return ""
        known = max(w for w in widths if w is not None)
        return (f"the median was known to ±{known:.1%} (the {PRECISION_CONFIDENCE:.0%} interval of the block "
                f"medians{', every arm' if len(arms) > 1 else ''}; target ±{self.target:.1%})")
