"""Counting a program's arms: only on a device that counts instructions, and said so when it cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sme2.errors import ConfigError
from pytest_sme2.measure.counts import count_arms
from pytest_sme2.measure.recipe import ProgramFile
from pytest_sme2.runners.local import LocalRunner

pytestmark = pytest.mark.fast


def test_a_device_that_cannot_count_instructions_is_refused_with_the_one_that_can(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot count executed instructions.*--device qemu"):
        count_arms(LocalRunner(), ProgramFile(tmp_path / "model.pte"), out_dir=tmp_path, label="model")
