"""Measure until decided: a group-sequential plan for paired (interleaved) comparisons.

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

from dataclasses import dataclass, replace

from .gate import GateConfig
from .rule import Comparison, Status
from .stats import min_paired_rounds


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
    return comparison is Comparison.SESSION

