"""Gate power: A/A false alarms, interval coverage and detection of real slowdowns, with the real LocalRunner.

    python benchmarks/gate_power.py            # the full run: ~15-25 min here; writes results/gate_power.{txt,json}
    python benchmarks/gate_power.py --quick    # a smoke run (a minute or two): rates are not estimates

Models: ``toy_cnn`` on its 1x3x32x32 input (the baseline) and the *same* model on wider inputs
(1x3x32x34, 1x3x32x36, 1x3x32x39): genuinely more work per execution, nothing synthesized. Their true
cost ratio is measured separately with many interleaved blocks (:func:`true_ratios`).

One repetition of an experiment measures three arms in interleaved blocks, alternating the order
every block (A B C, C B A, ...) so drift hits all arms alike:

- A = baseline ``.pte``; B = candidate ``.pte`` (the same file for A/A); C = a *fresh* measurement of
  the candidate, used only if the gate asks to re-measure (the confirmation of ``gate.decide``).

Every block is one ``LocalRunner.run`` (program load + executions, as the plugin's blocks are) with
``EXECUTIONS`` executions. A *design* (warm-up w, runs r, blocks k) uses executions ``w .. w+r`` of
the first k blocks — a subset of real measurements, so several designs are judged on the same data
without inventing samples. The gate is the library's own ``gate.decide`` (a same-session comparison, confirmation
included) with ``GateConfig`` defaults; only the margin varies where a row says so.

The wall time a design needs per comparison (``gate_time_s``) is what the plugin spends against a
stored baseline: measuring the candidate (its blocks' load time plus the executions the design
uses), the gate's statistics, and the confirming measurement when the gate asks for one.

Coverage is judged on the first measurement (A vs B): does the gate's 95 % interval contain the true
ratio (1 for A/A; the separately measured ratio for the slowdowns, itself uncertain by its own CI)?
The former method (two-stage block bootstrap + Mann-Whitney on all runs, first verdict only) is
judged on the same data for comparison. All of this is within one session: against a baseline
stored by an *earlier* session the machine itself moves (benchmarks/README.md, "Between sessions"),
which no interval computed from the measurements can see.
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
VARIANTS = {"base": (32, 32), "slow5": (32, 34), "slow10": (32, 36), "slow20": (32, 39)}
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
    from pytest_sme2.models import get_model
    from pytest_sme2.program.export import export_model

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
    from pytest_sme2.gate.verdict import Samples

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
    from benchmarks.former_stats import median_ci

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
    #: the gate's own time (statistics only, confirmation included)
    gate_s: float = 0.0


def judge(arm_a: Sequence[Block], arm_b: Sequence[Block], arm_c: Sequence[Block], *, design: Design,
          margin: float) -> Outcome:
    """The default gate with a confirming re-measurement (arm C), and its wall time per comparison.

    The reference (arm A) is the same blocks in the confirmation: this study measures the gate's rule, the
    plugin's same-session comparison re-measures both arms.
    """
    from pytest_sme2.gate.decide import decide
    from pytest_sme2.gate.verdict import Comparison, GateConfig

    config = GateConfig(margin=margin)
    confirm_used = False
    reference = samples(arm_a, design)

    def remeasure() -> Any:
        nonlocal confirm_used
        confirm_used = True
        return reference, samples(arm_c, design), None

    started = time.perf_counter()
    verdict = decide((reference, samples(arm_b, design), None), remeasure, config, comparison=Comparison.SESSION)
    gate_s = time.perf_counter() - started
    wall = gate_s + sum(b.wall_for(design) for b in arm_b[: design.blocks])
    if confirm_used:
        wall += sum(b.wall_for(design) for b in arm_c[: design.blocks])
    e2e = verdict.e2e
    iv = e2e.interval if e2e is not None else None
    return Outcome(verdict.status.value, verdict.attempts, iv.half_width_rel if iv else math.nan,
                   iv.estimate if iv else math.nan, wall, gate_s)


@dataclass(frozen=True)
class Evaluation:
    """A design and margin to judge every repetition with."""

    design: Design
    margin: float

    @property
    def label(self) -> str:
        return f"{self.design.label} m{self.margin * 100:g}%"


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
            out[ev.label].append(judge(arms["A"], arms["B"], arms["C"], design=ev.design, margin=ev.margin))
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


# ------------------------------------------------------------------------------- the power study
#
# ``python benchmarks/gate_power.py``: every design below judged on the same interleaved blocks.

#: (warm-up, runs, blocks): about 150 measured executions per arm each, and 10 x 30 for "more".
DESIGNS = (Design(3, 30, 5), Design(3, 25, 6), Design(3, 20, 8), Design(3, 15, 10), Design(3, 10, 15),
           Design(3, 30, 10))
#: The design the former method (two-stage bootstrap + Mann-Whitney on runs) is also judged on.
OLD_DESIGN = Design(3, 30, 5)
EXPERIMENTS = {"aa": "base", "slow5": "slow5", "slow10": "slow10", "slow20": "slow20"}


@dataclass
class FirstLook:
    """The first measurement (A vs B) of one design: the gate's interval, and the former method's."""

    covered: bool
    #: half the interval's width on the log scale (~ relative half-width)
    half_width: float
    headline_inside: bool
    low: float = math.nan
    high: float = math.nan
    #: the interval's own point estimate (Hodges-Lehmann ratio of block medians)
    shift: float = math.nan
    old_status: str | None = None
    old_covered: bool | None = None


def old_first_verdict(a: Any, b: Any, margin: float, alpha: float = 0.01) -> tuple[str, Any]:
    """The gate before issue 12: two-stage block bootstrap interval, Mann-Whitney p on all runs."""
    from benchmarks.former_stats import min_mann_whitney_p, ratio_of_medians_ci
    from pytest_sme2.gate.stats import mann_whitney_p

    iv = ratio_of_medians_ci(a.e2e_ms, b.e2e_ms, baseline_blocks=a.block_sizes, candidate_blocks=b.block_sizes)
    p = mann_whitney_p(a.e2e_ms, b.e2e_ms)
    if iv.low > 1 + margin:
        ok = p < alpha and min_mann_whitney_p(len(a.e2e_ms), len(b.e2e_ms)) < alpha
        return ("regression" if ok else "inconclusive"), iv
    if iv.high < 1 - margin:
        return "improvement", iv
    return ("pass" if iv.high < 1 + margin else "inconclusive"), iv


def first_look(arm_a: Sequence[Block], arm_b: Sequence[Block], design: Design, margin: float,
               truth: float) -> FirstLook:
    from pytest_sme2.gate.stats import block_ratio_ci

    a, b = samples(arm_a, design), samples(arm_b, design)
    effect = block_ratio_ci(a.e2e_ms, b.e2e_ms, baseline_blocks=a.block_sizes, candidate_blocks=b.block_sizes)
    iv = effect.interval
    if iv is None:
        look = FirstLook(False, math.nan, False)
    else:
        look = FirstLook(iv.low <= truth <= iv.high, math.log(iv.high / iv.low) / 2, iv.low <= iv.estimate <= iv.high,
                         iv.low, iv.high, effect.shift)
    if design == OLD_DESIGN:
        status, old = old_first_verdict(a, b, margin)
        look.old_status, look.old_covered = status, old.low <= truth <= old.high
    return look


def study(runner: Any, exported: Mapping[str, Any], *, reps: Mapping[str, int], truths: Mapping[str, float],
          margin: float, out_dir: Path, progress: Callable[[str], None] | None = None,
          designs: Sequence[Design] = DESIGNS) -> dict[str, dict[str, Any]]:
    """Every experiment: ``reps`` fresh interleaved repetitions, each judged by every design.

    Per design: the gate (``gate.decide``, confirmation included) and the first measurement's interval against
    the true ratio.
    """
    blocks = max(d.blocks for d in designs)
    executions = max(d.warmup + d.runs for d in designs)
    out: dict[str, dict[str, Any]] = {}
    for exp, n in reps.items():
        candidate = exported[EXPERIMENTS[exp]]
        truth = truths[exp]
        rows: dict[str, dict[str, list[Any]]] = {d.label: {"gate": [], "first": []}
                                                 for d in designs}
        for rep in range(n):
            arms = interleaved(runner, [("A", exported["base"]), ("B", candidate), ("C", candidate)], blocks,
                               executions=executions, threads=1, out_dir=out_dir)
            for d in designs:
                row = rows[d.label]
                row["gate"].append(judge(arms["A"], arms["B"], arms["C"], design=d, margin=margin))
                row["first"].append(first_look(arms["A"], arms["B"], d, margin, truth))
            if progress and (rep + 1) % 25 == 0:
                progress(f"{exp}: {rep + 1}/{n} repetitions")
        out[exp] = {label: summarize_design(row, consensus=exp != "aa") for label, row in rows.items()}
    return out


def summarize_design(row: Mapping[str, Sequence[Any]], *, consensus: bool = True) -> dict[str, Any]:
    """Rates of one design in one experiment.

    ``coverage`` is judged against the separately measured true ratio, itself uncertain by ~±1.5 %
    (its CI) and measured on other runs of each block (10..110, not 3..33); ``coverage_consensus``
    against the median of this experiment's own Hodges-Lehmann estimates over all repetitions
    (hundreds of blocks). For A/A both use the exact truth, 1.
    """
    gate_rows, first = row["gate"], row["first"]
    n = len(first)
    out = summarize(gate_rows)
    shifts = [f.shift for f in first if not math.isnan(f.shift)]
    centre = float(np.median(shifts)) if consensus and shifts else 1.0
    widths = [f.half_width for f in first if not math.isnan(f.half_width)]
    out.update({
        "coverage": sum(f.covered for f in first) / n,
        "consensus_ratio": centre,
        "coverage_consensus": sum(f.low <= centre <= f.high for f in first) / n,
        "intervals": [[round(f.low, 5), round(f.high, 5)] for f in first],
        "median_log_half_width": float(np.median(widths)) if widths else math.nan,
        "headline_outside": sum(not f.headline_inside for f in first) / n,
        "mean_gate_ms": float(np.mean([o.gate_s for o in gate_rows])) * 1e3,
    })
    old = [f for f in first if f.old_status is not None]
    if old:
        out["old_first_regressions"] = sum(f.old_status == "regression" for f in old)
        out["old_first_regression_rate"] = out["old_first_regressions"] / len(old)
        out["old_coverage"] = sum(bool(f.old_covered) for f in old) / len(old)
    return out


def report(results: Mapping[str, Mapping[str, Any]], truths: Mapping[str, float], designs: Sequence[Design],
           margin: float) -> list[str]:
    """The tables of one study, as text lines."""
    lines = [f"margin {margin:.0%}; rates = share of comparisons called a regression after confirmation "
             "[95 % upper bound, Clopper-Pearson]; coverage = first measurement's 95 % interval contains the true "
             "ratio; CI ± = median half-width (log scale); s/cmp = measuring the candidate + the gate (+ the "
             "confirming measurement when used)", ""]
    slow = [e for e in results if e != "aa"]
    head = (f"{'design':14s} {'exec/arm':>8s} {'A/A false alarms':>22s} {'A/A cov':>8s} "
            + "".join(f"{'cov ' + e:>12s}" for e in slow)
            + "".join(f"{'detect ' + e:>14s}" for e in slow)
            + f" {'CI ±':>6s} {'s/cmp':>6s} {'gate ms':>8s}")
    lines.append(head)
    for d in designs:
        aa = results["aa"][d.label]
        k, n = aa["counts"].get("regression", 0), aa["n"]
        cells = [f"{d.blocks}x{d.runs}".ljust(14), f"{d.blocks * (d.warmup + d.runs):8d}",
                 f"{k:>4d}/{n:<4d} [{clopper_pearson_upper(k, n):6.2%}]".rjust(22), f"{aa['coverage']:8.1%}"]
        cells += [f"{results[e][d.label]['coverage']:12.1%}" for e in slow]
        cells += [f"{results[e][d.label]['regression_rate']:14.1%}" for e in slow]
        walls = [results[e][d.label]["mean_wall_s"] for e in results]
        gms = [results[e][d.label]["mean_gate_ms"] for e in results]
        cells += [f"{aa['median_log_half_width']:6.1%}", f"{np.mean(walls):6.3f}", f"{np.mean(gms):8.2f}"]
        lines.append(" ".join(cells))
    lines += ["", "coverage of the slowdowns against the median of their own repetitions' estimates (ratio):"]
    for d in designs:
        lines.append(f"  {d.blocks}x{d.runs}".ljust(16) + "  ".join(
            f"{e} {results[e][d.label]['coverage_consensus']:6.1%} ({results[e][d.label]['consensus_ratio']:.3f})"
            for e in slow))
    if "old_coverage" in results["aa"].get(OLD_DESIGN.label, {}):
        lines += ["", f"the former method on {OLD_DESIGN.blocks}x{OLD_DESIGN.runs} (bootstrap + Mann-Whitney on runs), "
                      "first measurement only, same data:"]
        for e in results:
            r = results[e][OLD_DESIGN.label]
            lines.append(f"  {e:8s} coverage {r['old_coverage']:6.1%} (new {r['coverage']:6.1%}), "
                         f"regression {r['old_first_regressions']}/{r['n']} = {r['old_first_regression_rate']:.1%}")
    lines += ["", "verdicts per experiment (gate, confirmed):"]
    for d in designs:
        lines.append(f"  {d.blocks}x{d.runs}: " + "; ".join(f"{e} {results[e][d.label]['counts']}" for e in results))
    lines += ["", "true ratios: " + ", ".join(f"{e} {t:.3f}" for e, t in truths.items())]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import json
    import os
    import sys
    import tempfile

    root = Path(__file__).resolve().parent.parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from benchmarks.console import Console
    from benchmarks.run import machine
    from pytest_sme2.runners.local import LocalRunner

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 10 A/A and 5 repetitions per slowdown")
    parser.add_argument("--reps-aa", type=int, default=400, help="A/A repetitions (default 400: 0 false alarms "
                        "then bound the rate below 0.75 %%)")
    parser.add_argument("--reps", type=int, default=100, help="repetitions per slowdown (default 100)")
    parser.add_argument("--rounds", type=int, default=60, help="interleaved rounds for the true ratios (default 60)")
    parser.add_argument("--margin", type=float, default=5.0, help="margin in percent (default 5)")
    parser.add_argument("--cache-dir", type=Path, help="export cache (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=root / "benchmarks" / "results" / "gate_power",
                        help="results stem: writes STEM.txt and STEM.json (default benchmarks/results/gate_power)")
    args = parser.parse_args(argv)
    reps_aa, reps, rounds = (10, 5, 6) if args.quick else (args.reps_aa, args.reps, args.rounds)
    margin = args.margin / 100
    console = Console()
    say, progress, lines = console.say, console.progress, console.lines
    load_start = [round(x, 2) for x in os.getloadavg()]
    started = time.perf_counter()
    facts = machine()
    say(f"gate_power {'(quick) ' if args.quick else ''}{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
        f"{facts['nproc']} CPUs, {facts['cpu']}, load average at start {load_start}")
    runner = LocalRunner()
    say(f"runner: {runner.build}; toy_cnn fp32/XNNPACK, 1 thread")
    with tempfile.TemporaryDirectory() as tmp:
        exported = export_variants(args.cache_dir or Path(tmp) / "cache")
        true = true_ratios(runner, exported, rounds, threads=1, out_dir=Path(tmp))
        say(f"true cost ratios ({rounds} interleaved rounds of 100 runs; median of per-round ratios, 95 % CI):")
        for name, (h, w) in VARIANTS.items():
            t = true[name]
            say(f"  {name:7s} 1x3x{h}x{w}: {t['median_ms'] * 1e3:6.1f} us, ratio {t['ratio']:.3f} "
                f"({t['ci_low']:.3f}..{t['ci_high']:.3f})")
        truths = {exp: (1.0 if exp == "aa" else float(true[EXPERIMENTS[exp]]["ratio"])) for exp in EXPERIMENTS}
        counts = {exp: (reps_aa if exp == "aa" else reps) for exp in EXPERIMENTS}
        say(f"repetitions: {counts}; each = 3 arms x {max(d.blocks for d in DESIGNS)} blocks of "
            f"{max(d.warmup + d.runs for d in DESIGNS)} executions, interleaved")
        results = study(runner, exported, reps=counts, truths=truths, margin=margin, out_dir=Path(tmp),
                        progress=progress)
    say()
    for line in report(results, truths, DESIGNS, margin):
        say(line)
    load_end = [round(x, 2) for x in os.getloadavg()]
    total = time.perf_counter() - started
    say(f"\nload average at end {load_end}; {total:.0f} s in all")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    summary = {"mode": "quick" if args.quick else "full", "margin": margin, "loadavg_start": load_start,
               "loadavg_end": load_end, "total_s": round(total, 1), "machine": facts, "runner": runner.build,
               "true_ratios": true, "repetitions": counts, "designs": [d.label for d in DESIGNS],
               "results": results}
    args.out.with_suffix(".json").write_text(json.dumps(summary, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {args.out.with_suffix('.txt')} and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
