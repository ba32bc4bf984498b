"""Gate variants judged on the same real measurements: what might buy detection power on a noisy VM.

    python benchmarks/gate_variants.py                  # ~2-3 min here: 300 A/A, 150 ~10 %, 100 ~5 % repetitions
    python benchmarks/gate_variants.py --reps 60,30,20  # a quicker look

Not part of ``run.py``: an experiment behind the "what stands in the way of 95 %" paragraph of
``benchmarks/README.md``. One repetition measures three arms in interleaved blocks with the real
``LocalRunner`` exactly as ``gate_power`` does (A = baseline ``toy_cnn``, B = candidate, C = a fresh
measurement of the candidate for confirmation; 10 blocks each). Every variant is then judged on
those same samples, so the differences between rows are the variants', not the machine's:

- ``default``: the library's ``gate.decide`` (confirmation pooled both ways, issue 18 defect 6) on this experiment's
  design (3 warm-ups, 30 runs, 5 blocks), unpaired (the arms' blocks are judged without their rounds: a stored
  comparison's interval; ``benchmarks/gate_paired.py`` has the paired same-session one);
- ``trim``: the same after dropping "disturbed" blocks (median above the arm's median of block
  medians by more than max(5 %, 3 MAD));
- ``pooled-confirm``: the rule this experiment proposed before ``decide`` adopted pooling: a first regression is
  confirmed when the pooled first + second measurement is a regression and the second is not a pass;
- ``10 vs 5`` / ``10 vs 10``: baseline / candidate blocks.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import gate_power  # noqa: E402

BLOCKS = 10
EXECUTIONS = 33  # warm-up 3 + runs 30
Arms = dict[str, list[np.ndarray]]


def collect(reps: dict[str, int], progress: Callable[[str], None] = print,
            cache_dir: Path | None = None) -> dict[str, list[Arms]]:
    """``reps[name]`` repetitions of arms A/B/C per experiment (aa, slow10, slow5), real measurements; the programs
    come from the export cache ``cache_dir`` (default: a temporary one)."""
    from pytest_sme2.runners.local import LocalRunner

    runner = LocalRunner()
    with tempfile.TemporaryDirectory() as tmp:
        exported = gate_power.export_variants(cache_dir or Path(tmp) / "cache")
        out: dict[str, list[Arms]] = {}
        for name, n in reps.items():
            candidate = exported["base" if name == "aa" else name]
            out[name] = []
            for rep in range(n):
                arms = gate_power.interleaved(runner, [("A", exported["base"]), ("B", candidate), ("C", candidate)],
                                              BLOCKS, executions=EXECUTIONS, threads=1, out_dir=Path(tmp))
                out[name].append({k: [b.e2e_ms for b in v] for k, v in arms.items()})
                if (rep + 1) % 50 == 0:
                    progress(f"  .. {name}: {rep + 1}/{n}")
    return out


def samples(blocks: Sequence[np.ndarray], k: int, warmup: int = 3, runs: int = 30) -> Any:
    from pytest_sme2.gate.verdict import Samples

    used = [np.asarray(b)[warmup : warmup + runs] for b in blocks[:k]]
    return Samples(tuple(np.concatenate(used).tolist()), block_sizes=tuple(len(u) for u in used))


def trimmed(blocks: Sequence[np.ndarray], k: int, floor: float = 0.05, mads: float = 3.0) -> list[np.ndarray]:
    """The first ``k`` blocks without those whose median is far above the arm's median of block medians."""
    blocks = list(blocks[:k])
    medians = np.array([np.median(b[3:33]) for b in blocks])
    ref = float(np.median(medians))
    mad = float(np.median(np.abs(medians - ref))) * 1.4826
    limit = ref + max(floor * ref, mads * mad)
    return [b for b, m in zip(blocks, medians, strict=True) if m <= limit]


def judge(variant: str, arms: Arms, margin: float) -> str:
    from pytest_sme2.gate.decide import decide, gate
    from pytest_sme2.gate.verdict import GateConfig, Status

    config = GateConfig(margin=margin)
    a, b, c = arms["A"], arms["B"], arms["C"]

    def confirmed(base: Any, first: Any, second: Any) -> str:
        return decide((base, first, None), lambda: (base, second, None), config).status.value

    if variant == "trim":
        ta, tb, tc = trimmed(a, 5), trimmed(b, 5), trimmed(c, 5)
        return confirmed(samples(ta, len(ta)), samples(tb, len(tb)), samples(tc, len(tc)))
    if variant == "pooled-confirm":
        base, first, second = samples(a, 5), samples(b, 5), samples(c, 5)
        one = gate(base, first, config)
        if one.status is Status.REGRESSION:
            two, pooled = gate(base, second, config), gate(base, first.pooled(second), config)
            confirmed = pooled.status is Status.REGRESSION and two.status in (Status.REGRESSION, Status.INCONCLUSIVE)
            return "regression" if confirmed else "inconclusive"
        if one.status is Status.INCONCLUSIVE:
            return gate(base, first.pooled(second), config).status.value
        return one.status.value
    kb, kc = {"default": (5, 5), "10 vs 5": (10, 5), "10 vs 10": (10, 10)}[variant]
    return confirmed(samples(a, kb), samples(b, kc), samples(c, kc))


VARIANTS = ("default", "trim", "pooled-confirm", "10 vs 5", "10 vs 10")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", default="300,150,100", help="repetitions for aa,slow10,slow5 (default 300,150,100)")
    parser.add_argument("--margin", type=float, default=5.0, help="margin in percent (default 5)")
    parser.add_argument("--cache-dir", type=Path, help="export cache (default: a temporary one); gate_power.py "
                        "exports the same programs")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.reps.split(",")]
    if len(counts) != 3 or min(counts) < 1:
        parser.error("--reps takes three positive counts: aa,slow10,slow5")
    reps = dict(zip(("aa", "slow10", "slow5"), counts, strict=True))
    print(f"collecting {reps} repetitions x 3 arms x {BLOCKS} blocks of {EXECUTIONS} executions (toy_cnn, LocalRunner)")
    data = collect(reps, cache_dir=args.cache_dir)
    print(f"\nshare of comparisons called a regression (margin {args.margin:g} %)")
    print(f"{'variant':16s}" + "".join(f"{name:>18s}" for name in reps))
    for variant in VARIANTS:
        cells = []
        for arms_list in data.values():
            hits = sum(judge(variant, arms, args.margin / 100) == "regression" for arms in arms_list)
            cells.append(f"{hits:>5d}/{len(arms_list):<4d}{hits / len(arms_list):>7.1%}")
        print(f"{variant:16s}" + "".join(f"{c:>18s}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
