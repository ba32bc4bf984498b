"""The on/off count ratio is one rule (``count_ratio``) in every place that shows it: the terminal line, the markdown
and the ``count`` CLI's table show it only when the SME2-off arm counted something (never a ratio over zero)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from recorded import DATA

from pytest_sme2.evidence.instructions import InstructionCounts, count_ratio
from pytest_sme2.report.instruction_table import counts_table
from pytest_sme2.report.instructions import instructions_line, instructions_markdown
from pytest_sme2.results import TestResult

pytestmark = pytest.mark.fast

_ARMS = json.loads((DATA / "instruction_counts.json").read_text())["arms"]
ON = InstructionCounts.from_dict(_ARMS["toy_cnn_fp32_xnnpack/sme2_on"]["counts"])
OFF = InstructionCounts.from_dict(_ARMS["toy_cnn_fp32_xnnpack/sme2_off"]["counts"])
NOTHING = dataclasses.replace(OFF, total=0)


def _counted(tt: TestResult, off: InstructionCounts) -> TestResult:
    assert tt.profile is not None and tt.profile_off is not None
    return dataclasses.replace(tt, profile=dataclasses.replace(tt.profile, instructions=ON),
                               profile_off=dataclasses.replace(tt.profile_off, instructions=off))


def test_the_ratio_is_on_over_off_and_none_over_zero() -> None:
    assert count_ratio(OFF.total, ON.total) == ON.total / OFF.total  # 767,054 / 1,673,616 recorded
    assert count_ratio(0, ON.total) is None


def test_every_report_shows_the_same_ratio_and_none_over_zero(tt: TestResult) -> None:
    said = f"on/off {ON.total / OFF.total:.3f}×"
    assert said in instructions_line(_counted(tt, OFF)) and said in "\n".join(instructions_markdown(_counted(tt, OFF)))
    assert f"{ON.total / OFF.total:.2f}" in counts_table({"sme2_off": OFF, "sme2_on": ON}).splitlines()[2]
    assert "on/off" not in instructions_line(_counted(tt, NOTHING))
    assert "on/off" not in "\n".join(instructions_markdown(_counted(tt, NOTHING)))
    assert counts_table({"sme2_off": NOTHING, "sme2_on": ON}).splitlines()[2].endswith(" -")
