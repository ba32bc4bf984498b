"""How far one test drifts between sessions on one device: the drift allowance of a cross-session comparison.

A ``stored`` or ``runtime`` comparison judges a changed artifact against samples of another session, so the
machine's move between the two sessions is inside the measured change. The allowance that widens its margin is
measured, not set by hand: the history store (``.sme2_history/``) holds each session's median of every test on
every device identity, and sessions of the same artifact differ only by the machine. Like conbench's lookback
z-score (the last N results of the same benchmark on the same hardware, their mean and spread, a z threshold),
:func:`calibrate` takes the last :data:`WINDOW` trusted sessions of the test on the identity, the spread of their log
medians around each artifact's own mean (pooled over the artifacts, ``n - k`` degrees of freedom), and allows

    exp(t * sqrt(2) * s) - 1

where ``s`` is that spread and ``t`` Student's one-sided quantile at the gate's confidence: the change between two
sessions (the baseline's and this one) has twice one session's variance, and ``t`` pays for estimating ``s`` from few
sessions. A session's median includes its own sampling noise, which the gate's interval counts again: the allowance
errs wide, never narrow.

Too little history (fewer than :data:`MIN_SESSIONS` trusted sessions of an artifact, i.e. fewer than
``MIN_SESSIONS - 1`` degrees of freedom) gives no allowance: the comparison cannot be decided, and the rule
(:mod:`pytest_sme2.gate.rule`) makes it ``inconclusive``, never ``pass``.

Pure: points in, a :class:`DriftCalibration` out. Reading the store is :mod:`pytest_sme2.history.calibration`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

#: The lookback: the newest sessions of the test on the device that calibrate its allowance.
WINDOW = 30
#: Sessions of one artifact needed before the spread is estimated (4 degrees of freedom: t 2.78 at 97.5 %).
MIN_SESSIONS = 5
#: What a user does about too little history.
WHAT_TO_DO = ("run the suite a few times on an unchanged main on this device (each session's history record "
              "calibrates the allowance), or cache .sme2_artifacts/ so the baseline's artifact is re-measured in the "
              "session; --sme2-drift-allowance PCT sets one by hand (uncalibrated)")


@dataclass(frozen=True)
class DriftCalibration:
    """The measured between-session variation of one test on one device identity, and the allowance it gives.

    ``allowance`` is relative (0.06 = 6 %), None when the history is too short (``why`` says what it holds).
    """

    #: trusted sessions in the window (all artifacts)
    sessions: int = 0
    #: degrees of freedom of the spread: sessions minus artifacts
    degrees: int = 0
    #: the pooled standard deviation of log session medians around their artifact's mean (None: too few sessions)
    spread: float | None = None
    allowance: float | None = None
    #: the one-sided confidence the allowance is set at
    confidence: float = 0.975
    #: where the sessions came from (the history directory)
    source: str = ""
    #: "" when calibrated; else why not (too few sessions, no history, an unreadable store)
    why: str = ""

    @property
    def calibrated(self) -> bool:
        return self.allowance is not None

    def describe(self) -> str:
        """``6.1% drift allowance calibrated from 12 sessions of this test on this device (...)``, or why not."""
        if self.allowance is None:
            return f"no calibrated drift allowance: {self.why}"
        return (f"{self.allowance * 100:.1f}% drift allowance calibrated from {self.sessions} sessions of this test on "
                f"this device ({self.degrees} degrees of freedom, spread {self.spread * 100 if self.spread else 0:.2f}%"
                f"{', ' + self.source if self.source else ''})")

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DriftCalibration:
        def opt(key: str) -> float | None:
            v = d.get(key)
            return None if v is None else float(v)

        return cls(sessions=int(d.get("sessions", 0)), degrees=int(d.get("degrees", 0)), spread=opt("spread"),
                   allowance=opt("allowance"), confidence=float(d.get("confidence", 0.975)),
                   source=str(d.get("source", "")), why=str(d.get("why", "")))


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile at ``p`` with ``df`` degrees of freedom (Cornish-Fisher, within 0.3 % for df >= 4).

    numpy has no t distribution and scipy is not a dependency for one quantile: the expansion (Abramowitz & Stegun
    26.7.5) gives 2.769 for the exact 2.776 at df 4, p 0.975, and converges fast above.
    """
    z = NormalDist().inv_cdf(p)
    n = float(df)
    return (z + (z ** 3 + z) / (4 * n) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * n ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * n ** 3))


def calibrate(points: Sequence[tuple[str, float]], *, confidence: float = 0.95, window: int = WINDOW,
              min_sessions: int = MIN_SESSIONS, source: str = "") -> DriftCalibration:
    """The allowance from ``points`` = (artifact id, session median in ms) of one test on one device, oldest first.

    ``confidence`` is the gate's two-sided confidence: the allowance is set at its one-sided share (0.975 for 0.95),
    the side a slowdown is judged on.
    """
    one_sided = 1 - (1 - confidence) / 2
    kept = [(a, m) for a, m in points if a and m > 0 and math.isfinite(m)][-window:]
    groups: dict[str, list[float]] = defaultdict(list)
    for artifact, median in kept:
        groups[artifact].append(math.log(median))
    degrees = len(kept) - len(groups)
    largest = max((len(v) for v in groups.values()), default=0)
    if degrees < min_sessions - 1:
        why = (f"the history{f' ({source})' if source else ''} holds {len(kept)} trusted session(s) of this test on "
               f"this device ({largest} of one artifact at most); calibrating needs {min_sessions} sessions of one "
               f"unchanged artifact ({min_sessions - 1} degrees of freedom, pooled over artifacts): {WHAT_TO_DO}")
        return DriftCalibration(sessions=len(kept), degrees=max(degrees, 0), confidence=one_sided, source=source,
                                why=why)
    squares = sum((x - sum(v) / len(v)) ** 2 for v in groups.values() for x in v)
    spread = math.sqrt(squares / degrees)
    allowance = math.expm1(t_quantile(one_sided, degrees) * math.sqrt(2) * spread)
    return DriftCalibration(sessions=len(kept), degrees=degrees, spread=spread, allowance=allowance,
                            confidence=one_sided, source=source)


__all__ = ["MIN_SESSIONS", "WHAT_TO_DO", "WINDOW", "DriftCalibration", "calibrate", "t_quantile"]
