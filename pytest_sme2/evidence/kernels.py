"""XNNPACK debug logs -> which micro-kernels were selected, and SME2 evidence.

A runner built with XNNPACK's debug log level prints, once per kernel configuration at lazy init,
lines like ``Note (XNNPACK): Using igemm microkernel 'xnn_f32_igemm_minmax_ukernel_7x32__avx512f_broadcast'``.
They prove which kernels were *selected for this CPU*, not which operator ran which tile, so a kernel
hint for an operator is "the widest selected kernel of the matching kind and data type".

SME2 kernels end in ``__neonsme2`` (SME: ``__neonsme``) and wrap KleidiAI ``kai_*_sme2_*`` routines.

At debug level the log also has one ``running operator i:j (<label>)`` line per operator per execution.
The label is ``<operator type> <micro-kernel type>`` (``Convolution (NHWC, F32) IGEMM``, ``Add (ND)
Default``); XNNPACK's profiler names the same operator in the ETDump ``<label> #k``, except that it drops
the micro-kernel type when it is ``Default``, ``Transpose`` or ``Reduce`` (``Add (ND) #1``): the join
(:func:`etdump_name`) tries the label, then the label without its last word. That joins every label of
the recorded fp32 logs in ``tests/data``; in the int8 MobileNet recording the trace names no ``HardSwish``
operator (its events read ``Invalid Unary Op``) and counts fewer ``Convert`` calls than the log, so a
label can stay unjoined and the counts of the two sources can differ (reports show both).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_sme2.errors import TraceError

#: what XNNPACK writes on each line of its log, even without a kernel to name ("Note (XNNPACK): l1_data_cache...")
XNNPACK_MARK = "(XNNPACK)"
_USING = re.compile(r"Using\s+(\w+)\s+microkernel\s+'([^']+)'")
_RUNNING = re.compile(r"running operator \d+:\d+ \((.+)\) \(xnn_run_operator")
# executor_runner's own summary line: how many executions the log covers
_EXECUTED = re.compile(r"Model executed successfully (\d+) time")
_ITERATION = re.compile(r"Iteration \d+ of \d+:")
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


# ISA tokens as XNNPACK spells them after the ``__`` of a kernel name. Tile sizes, unroll factors and
# strategy words (``2x4``, ``u32``, ``reuse``, ``rr2``) sit around them in no fixed order
# (``..._transposec_ukernel__16x16_reuse_switch_avx2``), so the ISA is found by vocabulary, not position.
_ISA_TOKEN = re.compile(
    r"^(scalar|sse\w*|ssse3|avx\w*|fma3|f16c|neon\w*|sme2?|sve2?|aarch64|aarch32|armsimd32|"
    r"wasm\w*|rvv\w*|hvx|amx\w*)$"
)


def isa_suffix(kernel: str) -> str:
    """The ISA a kernel was written for: ``xnn_..._7x32__avx512f_broadcast`` -> ``avx512f``.

    Unlike :func:`isa_of`, tile and strategy tokens in front of the ISA are
    skipped (``xnn_x32_transposec_ukernel__2x4_scalar_int`` -> ``scalar``, not ``2x4``), and
    ``aarch64_neonfma`` stays whole.
    """
    if kernel.startswith("kai_") or "__" not in kernel:
        return isa_of(kernel)
    tokens = kernel.rsplit("__", 1)[1].split("_")
    for i, token in enumerate(tokens):
        if _ISA_TOKEN.match(token):
            if token in ("aarch64", "aarch32") and i + 1 < len(tokens) and tokens[i + 1].startswith("neon"):
                return f"{token}_{tokens[i + 1]}"
            return token
    return isa_of(kernel)


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
    # Kinds below were added for the operator -> kernel-kind table; the kinds above keep their order, so
    # the kernel hints of the operators they match are unchanged.
    (re.compile(r"^Max Pooling"), "maxpool"),
    (re.compile(r"^Average Pooling"), "avgpool"),
    (re.compile(r"^(Mean|Sum)\b|\bReduce2?\b"), "reduce"),
    (re.compile(r"^Softmax"), "raddstoreexpminusmax"),
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


def operator_kind(op_type: str) -> str | None:
    """The XNNPACK kernel kind (config category) that runs ``op_type``: ``... IGEMM`` -> ``igemm``; None if unknown.

    ``op_type`` is an operator label as the log or the ETDump names it (``Convolution (NHWC, F32) IGEMM``,
    ``Add (ND)``); operators without a micro-kernel of their own (``Static Reshape``) have none.
    """
    return next((kind for pat, kind in _KIND_OF_OP if pat.search(op_type)), None)


def etdump_name(label: str, names: Iterable[str]) -> str | None:
    """The ETDump operator type (``op_type``, without `` #k``) that a log's ``running operator`` label names.

    The label itself when the trace has it, else the label without its last word (the micro-kernel type the
    profiler leaves out: ``Add (ND) Default`` -> ``Add (ND)``); None when the trace has neither.
    """
    have = set(names)
    if label in have:
        return label
    shorter = label.rsplit(" ", 1)[0] if " " in label else ""
    return shorter if shorter in have else None


@dataclass(frozen=True)
class KernelLog:
    """Kernels selected in one XNNPACK debug log, and the operator labels it ran.

    ``operator_calls`` counts the ``running operator`` lines per label, in first-seen order, over the
    ``executions`` the log covers (executor_runner's ``Model executed successfully N time(s)``).
    """

    source: str
    kernels: tuple[KernelSelection, ...]
    operators: tuple[str, ...]
    kleidiai: tuple[str, ...] = ()
    operator_calls: tuple[tuple[str, int], ...] = ()
    executions: int = 1
    #: the runner build that wrote the log (``<path> (sha256 ...)``), "" when not known
    build: str = ""

    @property
    def sme2_kernels(self) -> tuple[str, ...]:
        names = [k.name for k in self.kernels if k.sme2] + [k for k in self.kleidiai if is_sme2(k)]
        return tuple(dict.fromkeys(names))

    @property
    def isas(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(isa_suffix(k.name) for k in self.kernels))

    def hint_for(self, op_type: str) -> str | None:
        """The kernel that most plausibly ran ``op_type`` (widest tile of its kind and dtype)."""
        kind = operator_kind(op_type)
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
            "operators": [{"label": label, "calls": calls} for label, calls in self.operator_calls],
            "executions": self.executions,
            "build": self.build,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KernelLog:
        """Rebuild a log from :meth:`to_dict` (as an analysis stores it).

        The stored form keeps every selected kernel, the SME2 KleidiAI routines and the operator labels with
        their call counts; it drops non-SME2 KleidiAI names, which nothing downstream needs.
        """
        kernels = tuple(KernelSelection(str(k["kind"]), str(k["name"]))
                        for k in data.get("kernels", ()) if isinstance(k, Mapping))
        names = {k.name for k in kernels}
        kleidiai = tuple(str(n) for n in data.get("sme2_kernels", ()) if str(n) not in names)
        calls = tuple((str(o["label"]), int(o["calls"])) for o in data.get("operators", ()) if isinstance(o, Mapping))
        return cls(source=str(data.get("source", "")), kernels=kernels, operators=tuple(c[0] for c in calls),
                   kleidiai=kleidiai, operator_calls=calls, executions=int(data.get("executions", 1) or 1),
                   build=str(data.get("build", "")))


def parse_xnnpack_log(text: str, *, source: str = "<log>", build: str = "") -> KernelLog:
    """Parse the text of an XNNPACK debug log (stderr of a logging runner build, or its logcat lines)."""
    kernels = dict.fromkeys(KernelSelection(kind, name) for kind, name in _USING.findall(text))
    calls: dict[str, int] = {}
    for label in _RUNNING.findall(text):
        calls[label] = calls.get(label, 0) + 1
    kleidiai = tuple(dict.fromkeys(_KAI.findall(text)))
    executed = _EXECUTED.findall(text)
    executions = int(executed[-1]) if executed else len(_ITERATION.findall(text))
    return KernelLog(source=source, kernels=tuple(kernels), operators=tuple(calls), kleidiai=kleidiai,
                     operator_calls=tuple(calls.items()), executions=max(1, executions), build=build)


def read_xnnpack_log(path: str | Path) -> KernelLog:
    """A file the user names as an XNNPACK log: refused when it is not one (it would be ignored without a word)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise TraceError(f"XNNPACK log {p} does not exist; pass the runner's stderr log") from None
    except OSError as exc:
        raise TraceError(f"cannot read XNNPACK log {p}: {exc.strerror or exc}") from None
    if XNNPACK_MARK not in text:
        raise TraceError(f"{p} is not an XNNPACK log: no line of it is XNNPACK's ('Note (XNNPACK): ...'). Pass the "
                         "stderr of an XNNPACK-logging runner build (Debug, XNN_LOG_LEVEL=5) that ran the same model")
    return parse_xnnpack_log(text, source=str(p))


@dataclass(frozen=True)
class KernelDiffRow:
    kind: str
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    both: tuple[str, ...]


@dataclass(frozen=True)
class OperatorKernel:
    """One operator label the log ran, joined to the trace: its kernel kind and the kernel that kind selected.

    ``etdump`` is the ETDump operator type of the same operator (None when the trace has no such
    operator); ``kernel`` is :meth:`KernelLog.hint_for` (the widest selected kernel of the kind and
    data type: the log proves selection, not which tile ran).
    """

    label: str
    etdump: str | None
    kind: str | None
    calls_per_execution: float
    kernel: str | None

    @property
    def sme2(self) -> bool:
        return self.kernel is not None and is_sme2(self.kernel)


def operator_kernels(log: KernelLog, etdump_names: Iterable[str] = ()) -> list[OperatorKernel]:
    """Every operator label of the log's ``running operator`` lines, with its kind, kernel and ETDump name."""
    names = tuple(etdump_names)
    return [OperatorKernel(label, etdump_name(label, names), operator_kind(label), calls / log.executions,
                           log.hint_for(label))
            for label, calls in log.operator_calls]


def compare_kernels(a: KernelLog, b: KernelLog) -> list[KernelDiffRow]:
    """Side by side: per kernel kind, the kernels only build A selected, only B, and both."""
    kinds: Iterable[str] = dict.fromkeys([k.kind for k in a.kernels] + [k.kind for k in b.kernels])
    rows = []
    for kind in kinds:
        na = {k.name for k in a.kernels if k.kind == kind}
        nb = {k.name for k in b.kernels if k.kind == kind}
        rows.append(KernelDiffRow(kind, tuple(sorted(na - nb)), tuple(sorted(nb - na)), tuple(sorted(na & nb))))
    return rows


@dataclass(frozen=True)
class KernelRow:
    """One selected kernel: its XNNPACK config kind, full name, ISA suffix and whether it is SME2."""

    kind: str
    kernel: str
    isa: str
    sme2: bool

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "kernel": self.kernel, "isa": self.isa, "sme2": self.sme2}


@dataclass(frozen=True)
class SideBySideRow:
    """Per kernel kind: the kernels only one build selected, and those both selected."""

    kind: str
    only_off: tuple[str, ...]
    only_on: tuple[str, ...]
    both: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.only_off or self.only_on)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "only_off": list(self.only_off), "only_on": list(self.only_on),
                "both": list(self.both)}


def kernel_log_from_dict(data: Mapping[str, Any]) -> KernelLog:
    """Rebuild a :class:`KernelLog` from ``KernelLog.to_dict()`` (as stored in an analysis)."""
    return KernelLog.from_dict(data)


def kernel_rows(log: KernelLog) -> list[KernelRow]:
    """One row per selected kernel, grouped by kind (in the order the log first used each kind)."""
    order = {kind: i for i, kind in enumerate(dict.fromkeys(k.kind for k in log.kernels))}
    rows = [KernelRow(k.kind, k.name, isa_suffix(k.name), k.sme2) for k in log.kernels]
    rows += [KernelRow("kleidiai", name, isa_suffix(name), is_sme2(name)) for name in log.kleidiai]
    order.setdefault("kleidiai", len(order))
    return sorted(rows, key=lambda r: (order[r.kind], r.kernel))


def isa_counts(log: KernelLog) -> dict[str, int]:
    """How many selected kernels target each ISA, most used first (ties by name)."""
    counts: dict[str, int] = {}
    for row in kernel_rows(log):
        counts[row.isa] = counts.get(row.isa, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def side_by_side(off: KernelLog, on: KernelLog) -> list[SideBySideRow]:
    """Kinds whose selection differs first, then the kinds both builds agree on."""
    rows = [SideBySideRow(r.kind, r.only_a, r.only_b, r.both) for r in compare_kernels(off, on)]
    return sorted(rows, key=lambda r: not r.changed)  # stable: keeps the log order within each group
