"""``benchmarks/ci_green.py`` counts the windows that missed in episodes: overlapping windows are one event.

Consecutive windows of one recording overlap (a window starts every round, a measurement spans up to 60 rounds), so
a single stretch where the machine moved one arm shows up in many windows in a row. The rate over windows stays the
published figure; the episodes say how many separate events it comes from.
"""

from __future__ import annotations

from benchmarks.ci_green import episodes


def test_overlapping_missed_windows_are_one_episode_and_each_orientation_is_its_own() -> None:
    need = 60
    windows = [(1, s, "pass") for s in (56, 72, 73, 79)] + [(1, s, "inconclusive") for s in range(0, 50)]
    assert episodes(windows, need, red=False) == 1  # 56..79: every start within 60 rounds of the previous one
    windows += [(1, 140, "pass"), (0, 72, "improvement")]
    assert episodes(windows, need, red=False) == 3  # 140 is 61 rounds past 79; the other orientation counts apart
    assert episodes(windows, need, red=True) == 1  # the inconclusive starts 0..49, one stretch
    assert episodes([(0, 5, "regression"), (0, 64, "regression"), (0, 65, "pass")], need, red=True) == 1
    assert episodes([(0, 5, "regression"), (0, 65, "regression")], need, red=True) == 2  # windows [5, 65), [65, 125)
    assert episodes([], need, red=True) == 0
