"""The verdict-checks table shows instruction checks as counts (instructions executed under emulation), not as ms.

Counts: the recorded toy_cnn arms of tests/data/instruction_counts.json (real QEMU runs), judged by the gate's own
functions; what the table must print is recomputed here from the recording.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_sme2.evidence.instructions import InstructionCounts
from pytest_sme2.gate.instructions import instruction_checks
from pytest_sme2.gate.verdict import Comparison, Status, Verdict
from pytest_sme2.report.tables import checks_table
from pytest_sme2.results import TestResult

pytestmark = pytest.mark.fast

RECORDING = Path(__file__).parents[1] / "data" / "instruction_counts.json"


def recorded(arm: str) -> InstructionCounts:
    arms = json.loads(RECORDING.read_text())["arms"]
    return InstructionCounts.from_dict(arms[f"toy_cnn_fp32_xnnpack/{arm}"]["counts"])


def test_instruction_checks_are_counts_in_the_checks_table() -> None:
    on, off = recorded("sme2_on"), recorded("sme2_off")
    checks = instruction_checks(on, on, tolerance=0.0, comparison=Comparison.STORED, reference_off=off, off=off)
    verdict = Verdict(Status.PASS, tuple(checks), comparison=Comparison.STORED)
    table = checks_table(TestResult("t::toy", verdict=verdict))
    assert table is not None
    text = {str(row[0].value): [str(cell.value) for cell in row] for row in table.rows}
    assert f"{on.total:,} -> {on.total:,} instructions (+0.000%)" in text["instructions"]
    assert f"{off.total:,} -> {off.total:,} instructions (+0.000%)" in text["instructions_off"]
    ratio = f"off {off.total:,} -> on {on.total:,} instructions ({on.total / off.total:.3f}×)"
    assert ratio in text["sme2_instructions"]
    assert "0 SME instructions in the SME2-off arm" in text["sme2_off_instructions"]
    assert "exact" in text["instructions"]
    # never spelt as milliseconds (the ms columns stay empty for counts)
    assert not any(f"{on.total}.000" in cell for row in text.values() for cell in row)
