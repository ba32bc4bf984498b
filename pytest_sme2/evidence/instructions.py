"""Instructions executed under emulation: what one method execution of a program did, counted, not timed.

QEMU user mode executes the runner's aarch64 code translation block by translation block. Counting the
instructions of every block each time it executes (between the runner's markers around the method execution,
so start-up is not counted) gives a number that depends on the program, its inputs, the runtime and the
emulated CPU, and not on the host that emulates it nor on how busy that host is. It is never a time and never
a speedup: reports say "instructions executed under emulation".

This module is the data: one frozen :class:`InstructionCounts` per (program, emulated CPU), and its JSON form.
Producing it (the QEMU route) lives with the QEMU runner; judging it lives in :mod:`pytest_sme2.gate`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_sme2.errors import check_schema_version

SCHEMA_VERSION = 1
#: What every counted instruction is, exactly one of these (disjoint; they sum to ``total``):
#: ``sme`` SME/SME2 (``smstart``/``smstop``, ``za`` operands, outer products such as ``fmopa``), ``sve`` SVE and
#: streaming-SVE data processing (``z``/``p`` registers), ``neon`` Advanced SIMD data processing (``v`` registers),
#: ``load_store`` every load and store (scalar, NEON, SVE; SME ``ld1w za`` counts as ``sme``), ``scalar`` the rest
#: (integer, scalar FP, branches, system), ``undecoded`` what QEMU's disassembler cannot name.
INSTRUCTION_KINDS = ("sme", "sve", "neon", "load_store", "scalar", "undecoded")
#: The label every shown count carries.
LABEL = "instructions executed under emulation"



def count_ratio(off: int, on: int) -> float | None:
    """The SME2-on arm's count over the SME2-off arm's: a ratio of counts, never a speedup; None when the off arm
    counted nothing (the gate's text, the reports and the ``count`` CLI's table all show this one ratio)."""
    return on / off if off else None

def _ints(data: Mapping[str, Any] | None) -> Mapping[str, int]:
    return {str(k): int(v) for k, v in dict(data or {}).items()}


@dataclass(frozen=True)
class InstructionCounts:
    """Instructions executed under emulation by one method execution (per execution when ``executions`` > 1).

    ``by_kind`` sums to ``total`` over :data:`INSTRUCTION_KINDS`; ``by_library`` sums to ``total`` over the
    libraries (the runner's own binary by its file name; code outside every mapping as ``[unknown]``);
    ``by_symbol`` counts instructions inside exported functions (``library!symbol``), the rest of a library is
    not listed there; ``sme2_symbols`` names the keys of ``by_symbol`` that are SME2 kernels; ``by_mnemonic``
    keeps the multiply-accumulate and SME mnemonics with their register file (``fmopa za``, ``fmla v``).
    """

    total: int
    by_kind: Mapping[str, int]
    by_library: Mapping[str, int] = field(default_factory=dict)
    by_symbol: Mapping[str, int] = field(default_factory=dict)
    sme2_symbols: tuple[str, ...] = ()
    by_mnemonic: Mapping[str, int] = field(default_factory=dict)
    #: QEMU's ``-cpu`` value the counts were taken under (``max``, ``max,sme=off``)
    cpu: str = ""
    #: the emulator's version: QEMU's translation is what executes, so a new QEMU may count differently
    qemu_version: str = ""
    #: method executions counted; every count above is per execution
    executions: int = 1

    @property
    def sme2_instructions(self) -> int:
        """Instructions executed inside SME2 kernels."""
        return sum(self.by_symbol.get(s, 0) for s in self.sme2_symbols)

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "label": LABEL, "total": self.total, "by_kind": dict(self.by_kind),
                "by_library": dict(self.by_library), "by_symbol": dict(self.by_symbol),
                "sme2_symbols": list(self.sme2_symbols), "by_mnemonic": dict(self.by_mnemonic), "cpu": self.cpu,
                "qemu_version": self.qemu_version, "executions": self.executions}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InstructionCounts:
        check_schema_version(data, reads=SCHEMA_VERSION, what="instruction counts", missing=SCHEMA_VERSION)
        return cls(total=int(data["total"]), by_kind=_ints(data.get("by_kind")),
                   by_library=_ints(data.get("by_library")), by_symbol=_ints(data.get("by_symbol")),
                   sme2_symbols=tuple(str(s) for s in data.get("sme2_symbols", ())),
                   by_mnemonic=_ints(data.get("by_mnemonic")), cpu=str(data.get("cpu", "")),
                   qemu_version=str(data.get("qemu_version", "")), executions=int(data.get("executions", 1)))
