"""XNNPACK debug logs -> which micro-kernels were selected, and SME2 evidence.

A runner built with XNNPACK's debug log level prints, once per kernel configuration at lazy init,
lines like ``Note (XNNPACK): Using igemm microkernel 'xnn_f32_igemm_minmax_ukernel_7x32__avx512f_broadcast'``.
They prove which kernels were *selected for this CPU*, not which operator ran which tile, so a kernel
hint for an operator is "the widest selected kernel of the matching kind and data type".

SME2 kernels end in ``__neonsme2`` (SME: ``__neonsme``) and wrap KleidiAI ``kai_*_sme2_*`` routines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import TraceError

_USING = re.compile(r"Using\s+(\w+)\s+microkernel\s+'([^']+)'")
_RUNNING = re.compile(r"running operator \d+:\d+ \((.+)\) \(xnn_run_operator")
_TILE = re.compile(r"_(\d+)x(\d+)(?:c\d+)?(?:s\d+)?__")
_KAI = re.compile(r"\bkai_\w+")


def isa_of(kernel: str) -> str:
    """The ISA part of a kernel name: ``xnn_..._7x32__avx512f_broadcast`` -> ``avx512f``."""
    if kernel.startswith("kai_"):
        m = re.search(r"_(sme2|sme|neon|sve2?)(?:_|$)", kernel)
        return m.group(1) if m else "kleidiai"
    if "__" not in kernel:
        return "unknown"
    return kernel.rsplit("__", 1)[1].split("_", 1)[0]


def is_sme2(kernel: str) -> bool:
    """True for SME2 kernels: XNNPACK ``__neonsme2`` names or KleidiAI ``kai_*sme2*`` routines."""
    isa = isa_of(kernel)
    return isa in ("neonsme2", "sme2") or ("sme2" in kernel.lower() and kernel.startswith("kai_"))


def is_sme(kernel: str) -> bool:
    """True for SME (v1) or SME2 kernels."""
    return is_sme2(kernel) or isa_of(kernel) in ("neonsme", "sme")


@dataclass(frozen=True)
class KernelSelection:
    """One selected micro-kernel: its XNNPACK config kind (gemm, igemm, dwconv, ...) and name."""

    kind: str
    name: str

    @property
    def isa(self) -> str:
        return isa_of(self.name)

    @property
    def sme2(self) -> bool:
        return is_sme2(self.name)

    @property
    def dtype(self) -> str:
        """Data-type prefix: ``xnn_f32_igemm...`` -> ``f32``; ``xnn_qs8_qc8w_...`` -> ``qs8``."""
        parts = self.name.split("_")
        return parts[1] if len(parts) > 1 and parts[0] == "xnn" else ""

    @property
    def tile(self) -> int:
        m = _TILE.search(self.name)
        return int(m.group(1)) * int(m.group(2)) if m else 0

    def to_dict(self) -> dict[str, str | bool]:
        return {"kind": self.kind, "name": self.name, "isa": self.isa, "sme2": self.sme2}


# op-type pattern -> XNNPACK kernel kind; first match wins (IGEMM before GEMM).
_KIND_OF_OP: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bIGEMM\b"), "igemm"),
    (re.compile(r"\bDWConv\b"), "dwconv"),
    (re.compile(r"\bGEMM\b|Fully Connected|Batch Matrix Multiply"), "gemm"),
    (re.compile(r"^Convolution"), "igemm"),
    (re.compile(r"^Transpose"), "transposec"),
    (re.compile(r"^(Add|Multiply|Subtract|Divide|Minimum|Maximum)\b"), "binary"),
    (re.compile(r"^(HardSwish|GELU|Clamp|Sigmoid|Tanh|Convert)\b"), "unary"),
)
# XNNPACK operator data types -> kernel name prefixes
_DTYPE_OF_OP = {
    "F32": ("f32",), "F16": ("f16",), "PF32": ("pf32",), "PF16": ("pf16",),
    "QC8": ("qs8", "qd8"), "QS8": ("qs8",), "QU8": ("qu8",), "QP8": ("qp8",), "PQS8": ("pqs8",),
    "X32": ("x32",), "X16": ("x16",), "X8": ("x8",),
}
_OP_DTYPE = re.compile(r"\(([^)]*)\)")
_UNARY_NAME = {"HardSwish": "hswish", "GELU": "gelu", "Clamp": "clamp", "Sigmoid": "sigmoid",
               "Tanh": "tanh", "Convert": "cvt"}
_BINARY_NAME = {"Add": "vadd", "Multiply": "vmul", "Subtract": "vsub", "Divide": "vdiv",
                "Minimum": "vmin", "Maximum": "vmax"}


@dataclass(frozen=True)
class KernelLog:
    """Kernels selected in one XNNPACK debug log, and the operator labels it ran."""

    source: str
    kernels: tuple[KernelSelection, ...]
    operators: tuple[str, ...]
    kleidiai: tuple[str, ...] = ()

    @property
    def sme2_kernels(self) -> tuple[str, ...]:
        names = [k.name for k in self.kernels if k.sme2] + [k for k in self.kleidiai if is_sme2(k)]
        return tuple(dict.fromkeys(names))

    @property
    def isas(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(k.isa for k in self.kernels))

    def hint_for(self, op_type: str) -> str | None:
        """The kernel that most plausibly ran ``op_type`` (widest tile of its kind and dtype)."""
        kind = next((k for pat, k in _KIND_OF_OP if pat.search(op_type)), None)
        if kind is None:
            return None
        candidates = [k for k in self.kernels if k.kind == kind]
        m = _OP_DTYPE.search(op_type)
        if m:
            tokens = [t.strip() for t in m.group(1).split(",")]
            prefixes = [p for t in tokens[1:] or tokens for p in _DTYPE_OF_OP.get(t, ())]
            if prefixes:
                typed = [k for k in candidates if k.dtype in prefixes]
                candidates = typed or candidates
        word = op_type.split(" ", 1)[0]
        fragment = _UNARY_NAME.get(word) if kind == "unary" else _BINARY_NAME.get(word) if kind == "binary" else None
        if fragment:
            candidates = [k for k in candidates if fragment in k.name]
        if not candidates:
            return None
        return max(candidates, key=lambda k: (k.sme2, k.tile)).name

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "kernels": [k.to_dict() for k in self.kernels],
            "sme2_kernels": list(self.sme2_kernels),
            "isas": list(self.isas),
        }


def parse_xnnpack_log(text: str, *, source: str = "<log>") -> KernelLog:
    """Parse the text of an XNNPACK debug log (stderr of a logging runner build)."""
    kernels = dict.fromkeys(KernelSelection(kind, name) for kind, name in _USING.findall(text))
    operators = tuple(dict.fromkeys(_RUNNING.findall(text)))
    kleidiai = tuple(dict.fromkeys(_KAI.findall(text)))
    return KernelLog(source=source, kernels=tuple(kernels), operators=operators, kleidiai=kleidiai)


def read_xnnpack_log(path: str | Path) -> KernelLog:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise TraceError(f"XNNPACK log {p} does not exist; pass the runner's stderr log") from None
    return parse_xnnpack_log(text, source=str(p))


@dataclass(frozen=True)
class KernelDiffRow:
    kind: str
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    both: tuple[str, ...]


def compare_kernels(a: KernelLog, b: KernelLog) -> list[KernelDiffRow]:
    """Side by side: per kernel kind, the kernels only build A selected, only B, and both."""
    kinds: Iterable[str] = dict.fromkeys([k.kind for k in a.kernels] + [k.kind for k in b.kernels])
    rows = []
    for kind in kinds:
        na = {k.name for k in a.kernels if k.kind == kind}
        nb = {k.name for k in b.kernels if k.kind == kind}
        rows.append(KernelDiffRow(kind, tuple(sorted(na - nb)), tuple(sorted(nb - na)), tuple(sorted(na & nb))))
    return rows
