"""Numerics of a pair: do the two arms (SME2 on and off) compute the same outputs?

pytest-sme2's runner writes the outputs of its last execution (``--output_file``) beside each traced run's
trace, from the same inputs in both arms. SME2 kernels change the order of floating-point accumulation and the
packing of quantized operands, not the function: on this project's emulated device the outputs of SME2 on and
off were bitwise equal for int8 and ~2e-7 apart (relative) for fp32. A kernel that computes something else — a
wrong packing, a broken fallback — shows as outputs that disagree beyond a tolerance fit for the dtype, whatever
the timing says. Real on/off devices can use the same check.

The file format (written by ``runners/cpp/sme2_runner.cpp``): a line ``sme2_outputs 1 <count>``, then per
output a line ``tensor <index> <scalar type> <nbytes> <d0>x<d1>...`` followed by the raw bytes and a newline
(``other <index>`` for a non-tensor output).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pytest_sme2.errors import TraceError

SCHEMA_VERSION = 1

#: ExecuTorch ``ScalarType`` codes -> numpy dtypes (the ones a model's outputs take).
SCALAR_TYPES = {0: np.uint8, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.int64, 5: np.float16, 6: np.float32,
                7: np.float64, 11: np.bool_}

#: Largest allowed difference, relative to the largest magnitude of the reference output, per model dtype.
#: fp32: accumulation order only (measured 2.3e-7); fp16: half-precision rounding of the same; int8: the
#: outputs are dequantized floats, and a requantization that rounds the other way moves one step of the
#: 8-bit grid (1/127 of the range) — more than that is another computation.
TOLERANCE = {"fp32": 1e-5, "fp16": 1e-2, "int8": 1.0 / 127}
DEFAULT_TOLERANCE = 1e-5


@dataclass(frozen=True)
class Output:
    index: int
    values: np.ndarray[Any, Any]
    shape: tuple[int, ...]


def read_outputs(path: str | Path) -> tuple[Output, ...]:
    """The tensor outputs in a runner's ``--output_file``; a file in another format is a TraceError naming it."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise TraceError(f"cannot read the outputs file {p}: {exc.strerror}") from None
    head, _, rest = data.partition(b"\n")
    if not head.startswith(b"sme2_outputs 1 "):
        raise TraceError(f"{p} is not an outputs file written by pytest-sme2's runner (first line {head[:40]!r})")
    outputs: list[Output] = []
    try:
        for _ in range(int(head.split()[2])):
            line, _, rest = rest.partition(b"\n")
            fields = line.split()
            if fields[0] == b"other":
                continue
            index, code, nbytes = int(fields[1]), int(fields[2]), int(fields[3])
            shape = tuple(int(d) for d in fields[4].split(b"x")) if len(fields) > 4 else ()
            raw, rest = rest[:nbytes], rest[nbytes + 1:]
            if len(raw) != nbytes or code not in SCALAR_TYPES:
                raise ValueError(f"output {index}: {len(raw)} of {nbytes} bytes, scalar type {code}")
            outputs.append(Output(index, np.frombuffer(raw, dtype=SCALAR_TYPES[code]), shape))
    except (IndexError, ValueError) as exc:
        raise TraceError(f"the outputs file {p} is cut or malformed ({exc}); run the measurement again") from None
    return tuple(outputs)


@dataclass(frozen=True)
class NumericsComparison:
    """How far the candidate's outputs are from the reference's: worst absolute and relative difference."""

    outputs: int
    max_abs: float
    #: max_abs / the largest magnitude of the reference output it was found in
    max_rel: float
    tolerance: float
    dtype: str
    bitwise_equal: bool
    #: why the outputs cannot be compared at all (a count or shape mismatch), "" when they can
    mismatch: str = ""

    @property
    def agree(self) -> bool:
        return not self.mismatch and self.max_rel <= self.tolerance

    def describe(self) -> str:
        if self.mismatch:
            return self.mismatch
        if self.bitwise_equal:
            return f"{self.outputs} output(s) bitwise equal"
        return (f"{self.outputs} output(s): max abs difference {self.max_abs:.3g}, relative {self.max_rel:.3g} "
                f"(tolerance for {self.dtype}: {self.tolerance:.3g})")

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "outputs": self.outputs, "max_abs": self.max_abs,
                "max_rel": self.max_rel, "tolerance": self.tolerance, "dtype": self.dtype,
                "bitwise_equal": self.bitwise_equal, "mismatch": self.mismatch, "agree": self.agree}


def compare_outputs(reference: tuple[Output, ...], candidate: tuple[Output, ...], dtype: str) -> NumericsComparison:
    """Compare two runs' outputs with the tolerance of ``dtype`` (``fp32``, ``fp16``, ``int8``)."""
    tol = TOLERANCE.get(dtype, DEFAULT_TOLERANCE)
    if len(reference) != len(candidate):
        return NumericsComparison(len(candidate), float("inf"), float("inf"), tol, dtype, False,
                                  f"{len(reference)} outputs against {len(candidate)}")
    max_abs = max_rel = 0.0
    equal = True
    for a, b in zip(reference, candidate, strict=True):
        if a.shape != b.shape or a.values.dtype != b.values.dtype:
            return NumericsComparison(len(candidate), float("inf"), float("inf"), tol, dtype, False,
                                      f"output {a.index}: {a.values.dtype}{list(a.shape)} against "
                                      f"{b.values.dtype}{list(b.shape)}")
        equal = equal and a.values.tobytes() == b.values.tobytes()
        x, y = a.values.astype(np.float64), b.values.astype(np.float64)
        if x.size == 0:
            continue
        diff = float(np.max(np.abs(x - y)))
        scale = float(np.max(np.abs(x))) or 1.0
        max_abs, max_rel = max(max_abs, diff), max(max_rel, diff / scale)
    return NumericsComparison(len(candidate), max_abs, max_rel, tol, dtype, equal)
