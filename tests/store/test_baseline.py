"""The baseline store (``pytest_sme2.store.baseline``): what it refuses to write."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sme2.errors import BaselineError
from pytest_sme2.store.baseline import Baseline, BaselineStore

pytestmark = pytest.mark.fast


def test_a_baseline_with_a_negative_other_is_not_written(tmp_path: Path) -> None:
    """Named categories adding up to more than E2E (a negative Other) are refused before writing."""
    bad = Baseline(test_id="t.py::test_a", identity={"arch": "x"}, samples_ms=(1.0, 1.1), block_sizes=(2,),
                   category_per_run_ms={"Convolution": (1.5, 0.9), "Other": (-0.5, 0.2)}, category_block_sizes=(2,),
                   per_operator=True)
    with pytest.raises(BaselineError, match=r"not writing the baseline for t\.py::test_a") as info:
        BaselineStore(tmp_path).save(bad)
    assert "more than the end-to-end time" in str(info.value) and "Other -0.5 ms in 1 run(s)" in str(info.value)
    assert not list(tmp_path.iterdir())
    # Anything else the next run would refuse is refused too, with the reader's own reason.
    cut = Baseline(test_id="t.py::test_a", identity={"arch": "x"}, samples_ms=(1.0, 1.1), block_sizes=(3,))
    with pytest.raises(BaselineError, match=r"it would not read back .*'block_sizes' must be positive whole numbers"):
        BaselineStore(tmp_path).save(cut)
    assert not list(tmp_path.iterdir())
