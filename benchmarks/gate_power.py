"""Gate power: A/A false alarms and detection of real slowdowns, measured with the real LocalRunner.

Models: ``toy_cnn`` on its 1x3x32x32 input (the baseline) and the *same* model on a slightly wider
input (1x3x32x34, 1x3x32x36): genuinely more work per execution, nothing synthesized. Their true
cost ratio is measured separately with many interleaved blocks (:func:`true_ratios`).

One repetition of an experiment measures three arms in interleaved blocks, alternating the order
every block (A B C, C B A, ...) so drift hits all arms alike:

- A = baseline ``.pte``; B = candidate ``.pte`` (the same file for A/A); C = a *fresh* measurement of
  the candidate, used only if the gate asks to re-measure (``gate_confirmed``'s confirmation).

Every block is one ``LocalRunner.run`` (program load + executions, as the plugin's blocks are) with
``EXECUTIONS`` executions. A *design* (warm-up w, runs r, blocks k) uses executions ``w .. w+r`` of
the first k blocks — a subset of real measurements, so several designs are judged on the same data
without inventing samples. The gate is the library's own ``gate_confirmed`` with ``GateConfig``
defaults (only the margin varies where a row says so).

The wall time a design needs per comparison (``gate_time_s``) is what the plugin spends against a
stored baseline: measuring the candidate (its blocks' load time plus the executions the design
uses), the gate's statistics, and the confirming measurement when the gate asks for one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: Variants: name -> input (height, width). Costs scale with the input area; the true ratio is measured.
VARIANTS = {"base": (32, 32), "slow5": (32, 34), "slow10": (32, 36)}
#: Executions per measured block: enough for every design judged (warm-up + runs <= 60).
EXECUTIONS = 60


@dataclass(frozen=True)
class Design:
    """How much one arm measures: ``blocks`` runner loads of ``warmup`` + ``runs`` executions."""

    warmup: int
    runs: int
    blocks: int

    @property
    def label(self) -> str:
        return f"w{self.warmup}/r{self.runs}/b{self.blocks}"


def default_design() -> Design:
    from pytest_sme2.options import Sme2Options

    o = Sme2Options()
    return Design(o.warmup, o.runs, o.blocks)


@dataclass
class Block:
    """One real runner block: every execution time (ms) and the block's wall time (s)."""

    e2e_ms: np.ndarray
    wall_s: float

    def used(self, design: Design) -> np.ndarray:
        return self.e2e_ms[design.warmup : design.warmup + design.runs]

    def wall_for(self, design: Design) -> float:
        """Wall time had the block run only ``warmup + runs`` executions: load etc. + those executions."""
        fixed = self.wall_s - float(self.e2e_ms.sum()) / 1e3
        return fixed + float(self.e2e_ms[: design.warmup + design.runs].sum()) / 1e3


def export_variants(cache_dir: Path) -> dict[str, Any]:
    """Export toy_cnn for every variant input size (cached by content in ``cache_dir``)."""
    import torch

    import example_models  # noqa: F401 - registers toy_cnn
    from example_models.models import INPUT_SEED
    from pytest_sme2.export import export_model
    from pytest_sme2.models import get_model

    spec = get_model("toy_cnn")
    out = {}
    for name, (h, w) in VARIANTS.items():
        x = torch.randn(1, 3, h, w, generator=torch.Generator().manual_seed(INPUT_SEED))
        out[name] = export_model(spec, inputs=(x,), cache_dir=cache_dir, progress=None)
    return out


def run_block(runner: Any, exported: Any, executions: int, threads: int, out_dir: Path) -> Block:
    from pytest_sme2.runners.base import RunRequest

    request = RunRequest(pte=exported.pte_path, runs=executions, warmup=0, threads=threads, out_dir=out_dir,
                         inputs=tuple(exported.input_files) or None, label="bench", mode="timing")
    started = time.perf_counter()
    result = runner.run(request)
    return Block(np.asarray(result.e2e_ms, dtype=float), time.perf_counter() - started)


def interleaved(runner: Any, arms: Sequence[tuple[str, Any]], blocks: int, *, executions: int, threads: int,
                out_dir: Path) -> dict[str, list[Block]]:
    """Measure every arm ``blocks`` times, reversing the arm order every block (ABC CBA ...)."""
    out: dict[str, list[Block]] = {name: [] for name, _ in arms}
    for k in range(blocks):
        order = arms if k % 2 == 0 else list(reversed(arms))
        for name, exported in order:
            out[name].append(run_block(runner, exported, executions, threads, out_dir))
    return out


def samples(blocks: Sequence[Block], design: Design) -> Any:
    from pytest_sme2.gate import Samples

    used = [b.used(design) for b in blocks[: design.blocks]]
    pooled = np.concatenate(used)
    return Samples(tuple(pooled.tolist()), block_sizes=tuple(len(u) for u in used))


def true_ratios(runner: Any, exported: Mapping[str, Any], rounds: int, *, threads: int, out_dir: Path,
                executions: int = 110, warmup: int = 10) -> dict[str, dict[str, float]]:
    """Cost of each variant relative to ``base``: many interleaved blocks, ratio of per-round medians.

    Each round measures every variant once (rotating order); the ratio of a round is
    median(variant) / median(base) over that round's runs, and the reported ratio is the median over
    rounds with a bootstrap 95 % CI — drift between rounds cancels because each round is paired.
    """
    from pytest_sme2.stats import median_ci

    names = list(exported)
    per_round: dict[str, list[float]] = {n: [] for n in names}
    for k in range(rounds):
        order = names[k % len(names):] + names[: k % len(names)]
        for name in order:
            block = run_block(runner, exported[name], executions, threads, out_dir)
            per_round[name].append(float(np.median(block.e2e_ms[warmup:])))
    base = np.asarray(per_round["base"])
    out = {}
    for name in names:
        ratios = np.asarray(per_round[name]) / base
        iv = median_ci(ratios)
        out[name] = {"median_ms": float(np.median(per_round[name])), "ratio": iv.estimate,
                     "ci_low": iv.low, "ci_high": iv.high, "rounds": rounds}
    return out


@dataclass
class Outcome:
    """One design judged on one repetition."""

    status: str
    attempts: int
    half_width: float
    ratio: float
    wall_s: float


def judge(arm_a: Sequence[Block], arm_b: Sequence[Block], arm_c: Sequence[Block], *, design: Design,
          margin: float, resamples: int | None = None) -> Outcome:
    """The default gate with a confirming re-measurement (arm C), and its wall time per comparison."""
    from pytest_sme2.gate import GateConfig, gate_confirmed

    config = GateConfig(margin=margin) if resamples is None else GateConfig(margin=margin, resamples=resamples)
    confirm_used = False

    def remeasure() -> Any:
        nonlocal confirm_used
        confirm_used = True
        return samples(arm_c, design)

    started = time.perf_counter()
    verdict, _ = gate_confirmed(samples(arm_a, design), remeasure, config, first=samples(arm_b, design))
    gate_s = time.perf_counter() - started
    wall = gate_s + sum(b.wall_for(design) for b in arm_b[: design.blocks])
    if confirm_used:
        wall += sum(b.wall_for(design) for b in arm_c[: design.blocks])
    e2e = verdict.e2e
    iv = e2e.interval if e2e is not None else None
    return Outcome(verdict.status.value, verdict.attempts, iv.half_width_rel if iv else math.nan,
                   iv.estimate if iv else math.nan, wall)


@dataclass(frozen=True)
class Evaluation:
    """A design and margin to judge every repetition with."""

    design: Design
    margin: float
    #: bootstrap resamples; None = the library default
    resamples: int | None = None

    @property
    def label(self) -> str:
        extra = f" B={self.resamples}" if self.resamples else ""
        return f"{self.design.label} m{self.margin * 100:g}%{extra}"


def run_experiment(runner: Any, base: Any, candidate: Any, *, reps: int, evaluations: Sequence[Evaluation],
                   threads: int, out_dir: Path, progress: Callable[[str], None] | None = None,
                   name: str = "", executions: int = EXECUTIONS) -> dict[str, list[Outcome]]:
    """``reps`` independent repetitions (fresh interleaved measurements each), judged by every evaluation."""
    blocks = max(e.design.blocks for e in evaluations)
    out: dict[str, list[Outcome]] = {e.label: [] for e in evaluations}
    for rep in range(reps):
        arms = interleaved(runner, [("A", base), ("B", candidate), ("C", candidate)], blocks, executions=executions,
                           threads=threads, out_dir=out_dir)
        for ev in evaluations:
            out[ev.label].append(judge(arms["A"], arms["B"], arms["C"], design=ev.design, margin=ev.margin,
                                       resamples=ev.resamples))
        if progress and (rep + 1) % 25 == 0:
            progress(f"{name}: {rep + 1}/{reps} repetitions")
    return out


def summarize(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """Rates of each verdict, with a 95 % upper bound on the regression rate (exact binomial)."""
    n = len(outcomes)
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    regressions = counts.get("regression", 0)
    return {
        "n": n,
        "regression_rate": regressions / n if n else math.nan,
        "regression_rate_upper95": clopper_pearson_upper(regressions, n),
        "counts": counts,
        "confirm_rate": sum(o.attempts > 1 for o in outcomes) / n if n else math.nan,
        "median_half_width": float(np.median([o.half_width for o in outcomes])) if n else math.nan,
        "median_ratio": float(np.median([o.ratio for o in outcomes])) if n else math.nan,
        # How far the point estimate really wanders between repetitions (half the central 95 % range):
        # compare with median_half_width, the precision the bootstrap interval claims.
        "ratio_spread": float(np.subtract(*np.percentile([o.ratio for o in outcomes], [97.5, 2.5])) / 2)
        if n else math.nan,
        "mean_wall_s": float(np.mean([o.wall_s for o in outcomes])) if n else math.nan,
    }


def clopper_pearson_upper(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided upper confidence bound of a binomial rate (bisection on the binomial tail)."""
    if n == 0:
        return math.nan
    if k >= n:
        return 1.0
    alpha = 1 - confidence

    def tail(p: float) -> float:  # P(X <= k | n, p)
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))

    lo, hi = k / n, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if tail(mid) > alpha:
            lo = mid
        else:
            hi = mid
    return hi
