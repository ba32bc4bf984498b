"""The stopping rules (``pytest_sme2.measure.sequential``): the sequential plan's looks and the precision rule."""

from __future__ import annotations

import numpy as np
import pytest
from recorded import toy_samples

from pytest_sme2.gate.decide import gate
from pytest_sme2.gate.verdict import GateConfig

pytestmark = pytest.mark.fast


def test_the_sequential_plan_looks_at_half_all_and_twice_the_blocks_at_the_bonferroni_share() -> None:
    """15 blocks -> looks after 8, 15, 22 and 30 rounds, each at 1 - 0.05/4; cut by a budget, the
    share stays; too few blocks for a look's interval: one fixed look at the asked confidence."""
    from pytest_sme2.measure.sequential import Looks

    plan = Looks.for_blocks(15)
    assert plan.rounds == (8, 15, 22, 30) and plan.per_look == pytest.approx(0.9875)
    cut = plan.within(12)
    assert cut.rounds == (8, 12) and cut.per_look == pytest.approx(0.9875)
    assert Looks.for_blocks(6).rounds == (6,) and Looks.for_blocks(6).per_look == pytest.approx(0.95)
    assert plan.gate_config(GateConfig(margin=0.05)).confidence == pytest.approx(0.9875)
    # The verdict and the reports name the level the look used, not a fixed 95 %.
    blocks = (3, 3, 3, 3, 2)
    e2e = gate(toy_samples(1, 15, blocks), toy_samples(15, 29, blocks), plan.gate_config(GateConfig())).e2e
    assert e2e is not None and "98.75% CI" in e2e.message
    from pytest_sme2.report.html import _check_text

    assert "98.75% CI" in _check_text(e2e)



def test_the_precision_plan_looks_after_six_blocks_half_way_and_at_the_last() -> None:
    """A measurement outside a same-session pair stops when its median is known to ±target: looks
    after every block from the 6th (6: the fewest whose [min, max] covers 96.9 %; from 9 the interval drops the
    extremes, so one outlying block does not hold a measurement to the end); nothing to look at without a target
    or with 6 blocks or fewer. The rule reads the spread of the block medians, never their level."""
    from pytest_sme2.measure.sequential import Precision

    rule = Precision(0.05)
    assert rule.looks(15) is not None and rule.looks(15).rounds == tuple(range(6, 16))  # type: ignore[union-attr]
    assert rule.looks(7).rounds == (6, 7)  # type: ignore[union-attr]
    assert rule.looks(6) is None and Precision(0.0).looks(15) is None
    tight = [100.0, 101.0, 99.5, 100.5, 100.2, 99.8]  # [min, max] = 99.5 .. 101: ±0.75 %
    assert rule.half_width(tight) == pytest.approx((101.0 - 99.5) / 2 / float(np.median(tight)))
    assert rule.half_width(tight[:5]) is None
    assert "known to ±0.7%" in rule.reached([tight])
    assert rule.reached([[x * 1.3 for x in tight]]) != ""  # 30 % slower, as precise: the level does not matter
    wide = [*tight[:5], 115.0]  # one slow block: ±7.5 %
    assert rule.reached([wide]) == "" and rule.reached([tight, wide]) == ""  # every arm must be precise
    assert Precision(0.1).reached([tight, wide]).endswith("every arm; target ±10.0%)")
