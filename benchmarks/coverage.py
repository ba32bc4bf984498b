"""Interval coverage on recorded real A/A blocks, offline: the block interval, the former bootstrap, a paired variant.

    python benchmarks/coverage.py                                   # the committed recording, ~1-2 min
    python benchmarks/coverage.py benchmarks/data/other.json --no-old  # another recording, no bootstrap

Reads a file written by ``benchmarks/record_aa.py``: blocks of one ``.pte`` recorded as two
interleaved arms (A B B A ...), so the true ratio is exactly 1. The blocks are cut into consecutive
windows of k A/B block pairs — what one session measures — and each window is judged:

- ``block``: :func:`pytest_sme2.gate.stats.block_ratio_ci`, the gate's interval (Hodges-Lehmann on block
  medians, exact Mann-Whitney);
- ``bootstrap``: the former :func:`pytest_sme2.gate.stats.ratio_of_medians_ci` (blocks, then runs);
- ``paired``: the exact Wilcoxon signed-rank Hodges-Lehmann interval of the per-pair log ratios
  (Walsh averages) — usable only when both arms are measured interleaved in one session, and only
  from 6 pairs (5 pairs reach 93.75 % at most);
- ``far``: the block interval with the baseline taken from a window half the recording away: a
  stand-in for a baseline stored earlier, when the machine may have moved.

Coverage = share of windows whose 95 % interval contains 1. Also the share of windows the rank
tests call significant: the block test at 5 %, Mann-Whitney on all runs at 1 %.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_DATA = ROOT / "benchmarks" / "data" / "aa_toy_cnn_fp32_xnnpack.json"
#: (blocks, runs) per arm
DESIGNS = ((5, 30), (6, 25), (8, 20), (10, 15), (15, 10), (10, 30))


def load(path: Path) -> tuple[dict[str, Any], dict[str, list[np.ndarray]]]:
    """The recording and the measured runs of each block per arm, in recording order."""
    data = json.loads(path.read_text())
    w = data["warmup"]
    arms: dict[str, list[np.ndarray]] = {"A": [], "B": []}
    for block in data["blocks"]:
        arms[block["arm"]].append(np.asarray(block["e2e_us"][w:], dtype=float))
    return data, arms


def signed_rank_interval(diffs: np.ndarray, confidence: float = 0.95) -> tuple[float, float] | None:
    """Exact Hodges-Lehmann interval of the centre of paired differences (Walsh averages); None if too few."""
    n = diffs.size
    total = n * (n + 1) // 2
    counts = np.zeros(total + 1)
    counts[0] = 1
    for i in range(1, n + 1):
        counts[i:] = counts[i:] + counts[:-i].copy()
    coverage = 1 - 2 * np.cumsum(counts)[: (total + 1) // 2] / counts.sum()
    ok = np.flatnonzero(coverage >= confidence - 1e-12)
    if ok.size == 0:
        return None
    k = int(ok[-1]) + 1
    i, j = np.triu_indices(n)
    walsh = np.sort((diffs[i] + diffs[j]) / 2)
    return float(walsh[k - 1]), float(walsh[-k])


def judge(arms: dict[str, list[np.ndarray]], blocks: int, runs: int, *, old: bool) -> dict[str, Any]:
    from benchmarks.former_stats import ratio_of_medians_ci
    from pytest_sme2.gate.stats import block_medians, block_ratio_ci, mann_whitney_p

    a_all, b_all = arms["A"], arms["B"]
    windows = min(len(a_all), len(b_all)) // blocks
    sizes = (runs,) * blocks

    def window(arm: list[np.ndarray], i: int) -> np.ndarray:
        return np.concatenate([x[:runs] for x in arm[i * blocks:(i + 1) * blocks]])

    hits: dict[str, list[bool]] = {"block": [], "bootstrap": [], "paired": [], "far": []}
    widths: dict[str, list[float]] = {k: [] for k in hits}
    rank5 = runs1 = 0
    for i in range(windows):
        a, b = window(a_all, i), window(b_all, i)
        effect = block_ratio_ci(a, b, baseline_blocks=sizes, candidate_blocks=sizes)
        iv = effect.interval
        assert iv is not None
        hits["block"].append(iv.low <= 1 <= iv.high)
        widths["block"].append(math.log(iv.high / iv.low) / 2)
        rank5 += effect.p_value < 0.05
        runs1 += mann_whitney_p(a, b) < 0.01
        if old:
            boot = ratio_of_medians_ci(a, b, baseline_blocks=sizes, candidate_blocks=sizes)
            hits["bootstrap"].append(boot.low <= 1 <= boot.high)
            widths["bootstrap"].append(math.log(boot.high / boot.low) / 2)
        paired = signed_rank_interval(np.log(block_medians(b, sizes)) - np.log(block_medians(a, sizes)))
        if paired is not None:
            hits["paired"].append(paired[0] <= 0 <= paired[1])
            widths["paired"].append((paired[1] - paired[0]) / 2)
        far = block_ratio_ci(window(a_all, (i + windows // 2) % windows), b, baseline_blocks=sizes,
                             candidate_blocks=sizes).interval
        assert far is not None
        hits["far"].append(far.low <= 1 <= far.high)
        widths["far"].append(math.log(far.high / far.low) / 2)
    out: dict[str, Any] = {"windows": windows, "block_rank_p_below_5pct": rank5 / windows,
                           "runs_mann_whitney_p_below_1pct": runs1 / windows}
    for name, h in hits.items():
        out[name] = {"coverage": sum(h) / len(h), "n": len(h),
                     "median_half_width": float(np.median(widths[name]))} if h else None
    return out


def describe(data: dict[str, Any], arms: dict[str, list[np.ndarray]]) -> list[str]:
    medians = np.log([np.median(x) for arm in (arms["A"], arms["B"]) for x in arm])
    order = np.log([np.median(np.asarray(b["e2e_us"][data["warmup"]:])) for b in data["blocks"]])
    centred = order - np.median(order)
    within = np.median([1.4826 * np.median(np.abs(np.log(x) - np.median(np.log(x)))) for a in arms.values() for x in a])
    lag1 = float(np.corrcoef(centred[:-1], centred[1:])[0, 1])
    return [
        f"{data['pte']} on {data['runner']}, {data['threads']} thread; {len(data['blocks'])} blocks of "
        f"{data['warmup']} + {data['runs']} executions, recorded {data['recorded_utc']} UTC in {data['elapsed_s']} s, "
        f"load average {data['loadavg_start']} -> {data['loadavg_end']}",
        f"median block median {math.exp(float(np.median(medians))):.1f} us; block medians: robust sd "
        f"{1.4826 * float(np.median(np.abs(medians - np.median(medians)))):.1%}, lag-1 correlation {lag1:.2f}; "
        f"runs within a block: robust CV {within:.1%}",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA, help="a record_aa.py file")
    parser.add_argument("--no-old", action="store_true", help="skip the (slow) former bootstrap")
    parser.add_argument("--out", type=Path, help="also write the text here")
    args = parser.parse_args(argv)
    data, arms = load(args.data)
    lines = describe(data, arms)
    lines.append("coverage of 1 by the 95 % interval [median half-width, log scale]; windows of k A/B pairs")
    lines.append(f"{'blocks x runs':14s} {'windows':>7s} {'block':>16s} {'bootstrap':>16s} {'paired':>16s} "
                 f"{'far baseline':>16s} {'block p<5%':>11s} {'runs MW p<1%':>13s}")
    for blocks, runs in DESIGNS:
        r = judge(arms, blocks, runs, old=not args.no_old and blocks <= 8)
        cells = []
        for name in ("block", "bootstrap", "paired", "far"):
            v = r[name]
            cells.append(f"{v['coverage']:6.1%} [{v['median_half_width']:5.1%}]" if v else "-")
        lines.append(f"{blocks:>3d} x {runs:<8d} {r['windows']:7d} " + " ".join(f"{c:>16s}" for c in cells)
                     + f" {r['block_rank_p_below_5pct']:11.1%} {r['runs_mann_whitney_p_below_1pct']:13.1%}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
