"""Instructions executed under emulation by one method execution of a program, on its SME2-on and -off arms.

The emulated device counts them (:meth:`pytest_sme2.runners.qemu.QemuRunner.record_counts`): one process per arm,
one warm-up execution (the first packs weights and plans: it executes more) and one counted. A count is exact and
repeatable: the same QEMU, runner and program gave the same counts in every process and setting tried
(docs/arm-emulation.md, "Counting instructions"; the CI compares a recording):
never a time and never a speedup.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_sme2.errors import ConfigError
from pytest_sme2.evidence.instructions import InstructionCounts
from pytest_sme2.measure.hostlock import heavy_work
from pytest_sme2.runners.base import SME2_OFF, SME2_ON, Runner, RunRequest

#: Executions per counted process: the first is a warm-up, left out.
WARMUP = 1


def count_arms(runner: Runner, program: Any, *, out_dir: Path, label: str, timeout_s: float = 600.0,
               lock_file: Path | None = None) -> Mapping[str, InstructionCounts]:
    """Each arm's :class:`InstructionCounts` for ``program`` (an exported model or a ``ProgramFile``): SME2 on and
    off where ``runner`` has both (the emulated device: one binary, two CPUs), else its one build (as ``default``)."""
    if not runner.records_counts:
        raise ConfigError(f"the {runner.name} device cannot count executed instructions: they are counted under QEMU "
                          "(--device qemu), where the emulator logs every block of code it executes")
    arms: list[str | None] = [v for v in (SME2_ON, SME2_OFF) if v in runner.variants()]
    out: dict[str, InstructionCounts] = {}
    for arm in arms or [None]:
        request = RunRequest(pte=Path(program.pte_path), runs=1, warmup=WARMUP, threads=1, out_dir=out_dir,
                             inputs=tuple(program.input_files) or None, variant=arm, label=label, timeout_s=timeout_s)
        with heavy_work(lock_file, what=f"{label}: counting instructions ({arm or 'default'})"):
            counts = runner.record_counts(request)
        if counts is None:
            raise ConfigError(f"the {runner.name} device says it counts instructions but returned none")
        out[arm or "default"] = counts
    return out
