"""The kernels that ran, from blocks a counting process's log gave (:func:`executed_kernels_of_lines`), as from an
in_asm log. The real counting process against a real in_asm process: ``tests/runners/test_qemu_counts.py``."""

from __future__ import annotations

import pytest

from pytest_sme2.errors import TraceError
from pytest_sme2.evidence.qemu_log import executed_kernels, executed_kernels_of_lines

pytestmark = pytest.mark.fast


def test_blocks_without_an_instruction_line_say_no_kernel_ran() -> None:
    maps = ["7f0000000000-7f0000001000 r-xp 00000000 00:00 0 /lib/libx.so"]
    with pytest.raises(TraceError, match="no translated block was executed"):
        executed_kernels_of_lines([[b"not an instruction"]], maps, {})


def test_lines_split_out_of_a_log_give_what_the_log_gives() -> None:
    log = ("----------------\nIN: f\n0x7f0000000010:  d503201f  nop\n0x7f0000000014:  4f801000  fmla v0.4s, v0.4s, "
           "v0.s[0]\n\n----------------\nIN:\n0x7f0000000020:  d65f03c0  ret\n")
    maps = ["7f0000000000-7f0000001000 r-xp 00000000 00:00 0 /lib/libx.so"]
    blocks = [[b"0x7f0000000010:  d503201f  nop", b"0x7f0000000014:  4f801000  fmla v0.4s, v0.4s, v0.s[0]"],
              [b"0x7f0000000020:  d65f03c0  ret\n"]]
    assert executed_kernels_of_lines(blocks, maps, {}, source="s") == executed_kernels(log, maps, {}, source="s")
