"""SME2 off vs on: end-to-end speedup, category speedups, bottleneck shift, operators, kernel evidence.

:func:`compare_on_off` takes the two analyses of one model (same trace kind, same warm-up) and
returns an :class:`~pytest_sme2.analysis.onoff.OnOffComparison` (the numbers, :mod:`pytest_sme2.analysis.onoff`)
with the sentences the reports print. Speedups are
``off / on`` (2.0 = twice as fast with SME2); end-to-end and per-category speedups are ratios of
medians with the gate's block interval (:func:`pytest_sme2.gate.stats.block_ratio_ci`), operator
speedups are ratios of per-run totals (the analysis keeps no per-run operator values).

The seeds' key insight is the *shift*: once SME2 shrinks Convolution/GEMM, another category (often
Data Movement, or portable operators in Other) becomes the largest. The shift is reported in
percentage points of E2E per category, and in one sentence when the dominant category changes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pytest_sme2.analysis.onoff import OnOffComparison, category_shifts, kernel_evidence, operator_speedups
from pytest_sme2.analysis.run import Analysis
from pytest_sme2.evidence.kernels import KernelLog
from pytest_sme2.gate.checks import speedup_check
from pytest_sme2.gate.verdict import Check, GateConfig, Samples
from pytest_sme2.units import fmt_range

#: A category must move by more than this many percentage points of E2E to be called a shift.
SHIFT_PP = 2.0


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def _speedup_sentence(cmp: OnOffComparison) -> str:
    iv = cmp.speedup
    where = (f"median {cmp.off_e2e.median:.3f} → {cmp.on_e2e.median:.3f} ms, "
             f"95% CI {fmt_range(iv.low, iv.high)}")
    if cmp.emulated:
        return (f"Emulated time, not device time: {cmp.on_label} took {1 / iv.estimate:.2f}× the emulated time of "
                f"{cmp.off_label} ({where}). QEMU translates every instruction and emulates SME more slowly than "
                "NEON, so this is no SME2 speedup; what this device shows is which kernels ran and whether the "
                "outputs agree.")
    if iv.low > 1:
        return f"{cmp.on_label} is {iv.estimate:.2f}× faster end to end than {cmp.off_label} ({where})."
    if iv.high < 1:
        return f"{cmp.on_label} is SLOWER end to end than {cmp.off_label}: {iv.estimate:.2f}× ({where})."
    return (f"No clear end-to-end difference between {cmp.off_label} and {cmp.on_label}: "
            f"{iv.estimate:.2f}×, and the interval includes 1× ({where}).")


def _shift_sentences(cmp: OnOffComparison) -> tuple[str, ...]:
    out: list[str] = []
    iv = cmp.speedup
    if cmp.per_operator and cmp.categories:
        by_name = {c.category: c for c in cmp.categories}
        d_off, d_on = cmp.dominant_off, cmp.dominant_on
        c_off, c_on = by_name[d_off], by_name[d_on]
        if d_off != d_on:
            out.append(
                f"{d_on} became the largest category with {cmp.on_label} ({_pct(c_on.off_share)} → "
                f"{_pct(c_on.on_share)} of E2E), overtaking {d_off} ({_pct(c_off.off_share)} → "
                f"{_pct(c_off.on_share)})."
            )
        else:
            out.append(f"{d_on} stays the largest category ({_pct(c_on.off_share)} of E2E with "
                       f"{cmp.off_label}, {_pct(c_on.on_share)} with {cmp.on_label}).")
        grown = max(cmp.categories, key=lambda c: c.share_change_pp)
        # The new dominant category already has its sentence; otherwise name the biggest riser.
        if grown.share_change_pp > SHIFT_PP and not (d_off != d_on and grown.category == d_on):
            how = (f"it sped up {grown.speedup:.2f}×" if math.isfinite(grown.speedup)
                   else "its time did not shrink")
            out.append(
                f"{grown.category} grew from {_pct(grown.off_share)} to {_pct(grown.on_share)} of E2E "
                f"({grown.share_change_pp:+.1f} pp; {grown.off_ms:.3f} → {grown.on_ms:.3f} ms): {how} "
                f"against {iv.estimate:.2f}× end to end, so it weighs more now."
            )
    return tuple(out)


def _kernel_sentence(cmp: OnOffComparison) -> str:
    ev = cmp.kernels
    if (ev is None or ev.on is None) and cmp.other_kernel_evidence:
        return cmp.other_kernel_evidence
    if ev is None:
        return "No XNNPACK kernel log for either build: which kernels ran is not confirmed."
    if ev.on is None:
        return f"No XNNPACK kernel log for {cmp.on_label}: SME2 kernel use is not confirmed."
    if ev.sme2_missing:
        isas = ", ".join(list(ev.isas("on"))[:4])
        return f"{cmp.on_label} selected no SME2 kernel: its XNNPACK log names none (kernels target {isas})."
    n = len(ev.on_sme2_kernels)
    if n:
        return f"{cmp.on_label} selected {n} SME2 kernel{'s' if n != 1 else ''}, e.g. `{ev.on_sme2_kernels[0]}`."
    return f"The XNNPACK log of {cmp.on_label} names no kernel at all: was it written by a debug-logging build?"


def _otherkernel_evidence(off: Analysis, on: Analysis, off_label: str, on_label: str) -> str:
    """SME2 kernel use from the traces' operator names and an emulator's executed-kernel log ("" without either)."""
    parts = []
    for label, a in ((on_label, on), (off_label, off)):
        ran = a.executed_kernels
        if ran is not None:
            n = len(ran.sme2_functions)
            parts.append(f"{label} executed {n} SME2 kernel function{'s' if n != 1 else ''} under QEMU" + (
                f" (e.g. `{ran.sme2_functions[0].name}`)" if n else ""))
        elif a.trace_evidence is not None and a.trace_evidence.gemm_like:
            ev = a.trace_evidence
            parts.append(f"{label}'s trace has {len(ev.sme)} of {len(ev.gemm_like)} GEMM-like operators on the SME "
                         "packed path")
    return ("; ".join(parts) + ".") if parts else ""


def builds_sentence(off_build: Mapping[str, Any], on_build: Mapping[str, Any], off_label: str = "SME2 off",
                    on_label: str = "SME2 on") -> str:
    """Which it was: two runner builds (SME2 kernels compiled in and out), or one runner on two CPUs.

    From the arms' artifacts (``Artifact.build``): the runner binaries' sha256 and, on the emulated device, the
    CPU each arm ran on. "" when an arm does not say. One build whose arms do not say their CPUs (a phone) is
    not claimed to have run on two CPUs: on one CPU both arms run the same kernels, and only the device (an
    emulator's description, the trace evidence) can tell otherwise.
    """
    a, b = off_build.get("runner_sha256"), on_build.get("runner_sha256")
    if not a or not b:
        return ""
    if a != b:
        return (f"Two runner builds: {off_label} ran {str(a)[:12]}, {on_label} ran {str(b)[:12]} (SME2 compiled out "
                "and in): the comparison is of the builds on one CPU.")
    cpus = (off_build.get("cpu"), on_build.get("cpu"))
    if all(cpus) and cpus[0] != cpus[1]:
        return (f"One runner build for both arms (sha256 {str(a)[:12]}): the difference is the CPU's ({off_label}: "
                f"-cpu {cpus[0]}, {on_label}: -cpu {cpus[1]}), not the build's — XNNPACK picks SME2 kernels from the "
                "CPU's features.")
    return (f"One runner build for both arms (sha256 {str(a)[:12]}), not two builds: XNNPACK picks SME2 kernels from "
            "the CPU's features, so the arms differ only if the device ran them on different CPUs (an emulator "
            "configured so says where in its description); on one CPU both arms run the same kernels.")


def compare_on_off(
    off: Analysis,
    on: Analysis,
    *,
    off_kernels: KernelLog | None = None,
    on_kernels: KernelLog | None = None,
    min_speedup: float | None = None,
    config: GateConfig | None = None,
    off_label: str = "SME2 off",
    on_label: str = "SME2 on",
    speedup: Check | None = None,
    emulated: bool = False,
    builds: str = "",
) -> OnOffComparison:
    """Compare the SME2-off and SME2-on analyses of one model.

    Kernel logs default to the ones stored in the analyses (``Analysis.kernel_log``). With
    ``min_speedup`` the speedup check is judged on its CI's lower bound (pass / regression /
    inconclusive), otherwise it is advisory. ``speedup``: the speedup check decided for the pair
    (:func:`report.pair.report_of` always passes it, so the reports render the gated number); without it (an
    analysis read from files, no verdict) the ratio of the analyses' own runs is shown, with the same rule.
    """
    cfg = config or GateConfig(min_speedup=min_speedup)
    check = speedup if speedup is not None else speedup_check(
        Samples(off.measured_ms, off.block_sizes), Samples(on.measured_ms, on.block_sizes), cfg)
    per_op = off.per_operator and on.per_operator
    operators, only_off, only_on = operator_speedups(off, on) if per_op else ((), (), ())
    cmp = OnOffComparison(
        off_label=off_label, on_label=on_label, off_source=off.source, on_source=on.source,
        off_e2e=off.e2e, on_e2e=on.e2e, speedup_check=check, per_operator=per_op,
        categories=category_shifts(off, on, cfg) if per_op else (),
        operators=operators, only_off=only_off, only_on=only_on,
        kernels=kernel_evidence(off, on, off_kernels, on_kernels), emulated=emulated,
        other_kernel_evidence=_otherkernel_evidence(off, on, off_label, on_label),
    )
    shift = _shift_sentences(cmp)
    findings = (_speedup_sentence(cmp), *shift, _kernel_sentence(cmp), *([builds] if builds else []))
    return replace(cmp, findings=findings, shift=shift)
