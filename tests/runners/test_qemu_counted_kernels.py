"""One emulated process per arm when a test counts: the counting process's blocks say which kernels ran.

The kernel evidence of a counting run must be the evidence a separate ``-d in_asm`` process gives (the same exported
functions ran, the same SME2 kernels), so a test that counts needs no second process per arm (issue 30: the emulated
command on a host where QEMU's SME2 is slow). Real QEMU, toy_cnn fp32/XNNPACK, SME2 on and off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_sme2.errors import TraceError
from pytest_sme2.evidence.qemu_log import executed_kernels, executed_kernels_of_lines
from pytest_sme2.runners.base import SME2_OFF, SME2_ON, RunRequest
from pytest_sme2.runners.qemu import QemuRunner

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def emulated(aarch64_runner_build: Any, sme2_qemu: Path) -> QemuRunner:
    return QemuRunner(aarch64_runner_build.path, qemu=sme2_qemu, sysroot=aarch64_runner_build.sysroot,
                      runtime=aarch64_runner_build.runtime())


def _request(exported: Any, arm: str, out: Path, *, warmup: int) -> RunRequest:
    return RunRequest(pte=exported.pte_path, runs=1, warmup=warmup, out_dir=out, inputs=tuple(exported.input_files),
                      variant=arm, label="toy_cnn")


@pytest.mark.parametrize("arm", [SME2_ON, SME2_OFF])
def test_the_counting_process_names_the_kernels_an_in_asm_process_names(arm: str, emulated: QemuRunner,
                                                                         example_export: Any,
                                                                         tmp_path: Path) -> None:
    toy_cnn = example_export("fp32", "xnnpack")
    counted = emulated.record_counted(_request(toy_cnn, arm, tmp_path / "counted", warmup=1))
    in_asm = emulated.record_executed(_request(toy_cnn, arm, tmp_path / "in_asm", warmup=0))

    def names(functions: Any) -> set[str]:
        return {f"{Path(f.library).name}!{f.name}" for f in functions}

    # the same exported functions ran (by file name: the counting process runs a staged link of the runner), in
    # the same libraries: the runtime's and the runner (the C library's depend on the environment and outputs)
    assert names(counted.executed.functions) == names(in_asm.functions)
    assert {Path(r.library).name for r in counted.executed.unmapped} == {Path(r.library).name for r in in_asm.unmapped}
    assert names(counted.executed.sme2_functions) == names(in_asm.sme2_functions)
    if arm == SME2_ON:
        assert counted.executed.sme2_functions, "the SME2-on arm ran no SME2 kernel"
        # and they are the functions whose instructions were counted as SME2 kernels
        assert {s.split("!", 1)[1] for s in counted.counts.sme2_symbols} <= {
            f.name for f in counted.executed.sme2_functions}
    else:
        assert not counted.executed.sme2_functions and not counted.counts.sme2_symbols


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
