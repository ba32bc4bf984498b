"""Instructions executed under emulation as text: one column per arm, rows by kind and by library, then the
exported functions that executed the most (SME2 kernels marked). Counts, never times: the ratio column is a ratio
of counts, not a speedup."""

from __future__ import annotations

from collections.abc import Mapping

from pytest_sme2.evidence.instructions import INSTRUCTION_KINDS, LABEL, InstructionCounts, count_ratio

#: Exported functions listed per arm.
TOP_FUNCTIONS = 5
_ARM_NAMES = {"sme2_on": "SME2 on", "sme2_off": "SME2 off"}


def counts_table(arms: Mapping[str, InstructionCounts], *, what: str = "") -> str:
    """``what`` (a model label) and each arm's counts side by side; with two arms, the second's count over the
    first's per row."""
    names = list(arms)
    first = arms[names[0]]
    head = f"{LABEL}{f' by {what}' if what else ''}: one method execution, QEMU {first.qemu_version}"
    cols = [f"{_ARM_NAMES.get(n, n)} (-cpu {arms[n].cpu})" for n in names]
    ratio = len(names) == 2
    width = max(14, *(len(c) for c in cols))
    rows = [("total", [a.total for a in arms.values()])]
    rows += [(f"  {k}", [a.by_kind.get(k, 0) for a in arms.values()]) for k in INSTRUCTION_KINDS]
    libraries = dict.fromkeys(lib for a in arms.values() for lib in a.by_library)
    rows += [(f"  {lib}", [a.by_library.get(lib, 0) for a in arms.values()]) for lib in libraries]
    label_width = max(len(r[0]) for r in rows)
    lines = [head, " " * label_width + "".join(f"  {c:>{width}}" for c in cols)
             + (f"  {'count ' + names[1].split('_')[-1] + '/' + names[0].split('_')[-1]:>14}" if ratio else "")]
    for label, values in rows:
        line = f"{label:<{label_width}}" + "".join(f"  {v:>{width},}" for v in values)
        if ratio:
            r = count_ratio(values[0], values[1])
            line += f"  {(f'{r:.2f}' if r is not None else '-'):>14}"
        lines.append(line)
    for name, counts in arms.items():
        top = list(counts.by_symbol.items())[:TOP_FUNCTIONS]
        if top:
            lines.append(f"{_ARM_NAMES.get(name, name)}: exported functions executing the most (* SME2 kernel):")
            lines += [f"  {n:>{width},}  {s}{' *' if s in counts.sme2_symbols else ''}" for s, n in top]
    return "\n".join(lines)
