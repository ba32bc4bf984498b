"""Paired vs unpaired, per comparison kind: A/A false alarms, detection at 10 % and 20 %, interval widths.

    python benchmarks/gate_paired.py            # ~1-2 min: 400 A/A + 200 per slowdown, every row
    python benchmarks/gate_paired.py --quick    # a smoke run (tests/test_benchmarks.py): rates are not estimates

Offline, on REAL measurements: ``benchmarks/data/aa_toy_cnn_fp32_xnnpack.json`` (``record_aa.py``: 1000 rounds of
two blocks of the same ``.pte``, interleaved A B / B A, 3 warm-ups + 30 runs each, toy_cnn ~80 µs per execution on
this project's shared 2-core VM). A *round* is the recorded A block and the B block measured beside it. One
repetition draws rounds at random (without replacement) and builds what the gate sees, with the library's own
``gate.decide`` (confirmation included: the re-measurement is another draw of rounds) at the suite's margin:

- ``session (paired)``: reference = the A blocks, candidate = the B blocks of the same rounds, both carrying the
  round ids, so the gate judges them paired (``stats.paired_ratio_ci``) — a same-session comparison;
- ``session (unpaired, before)``: the same samples without round ids: the unpaired block interval
  (``stats.block_ratio_ci``) the gate used before issue 18;
- ``stored``: reference = A blocks of *other* rounds (an earlier session's stored samples, no pairing), judged at
  the margin + the drift allowance (this repository's 50 %, and 0 % for the interval alone);
- ``unchanged``: the same samples as ``stored``, the same artifact: a change beyond the margin is ``drift``.

The "precision stop" kinds measure every measurement *outside* a same-session pair (the stored baseline, the
candidate measured alone, its confirming re-measurement) with the plugin's precision rule in place
(``pytest_sme2.measure.sequential.Precision``, a look after every block from the 6th; the "looks 6/10/15" rows: the plan
tried first): it stops at the first look where the 95 %
interval of the median of the block medians is within ±target (a quarter, or half, of the margin). Their
``rounds`` column is the blocks the candidate's measurements took (15 without the rule).

Injected, multiplicatively, on real blocks: the model's slowdown (B blocks x 1.10 or x 1.20) and a common drift of
the machine per round (both blocks of round k x exp(N(0, s)), s = 0, 3 %, 6 %), which pairing cancels. Widths are
the first measurement's 95 % interval, high / low - 1, median over repetitions.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.console import shown_path  # noqa: E402

AA_DATA = ROOT / "benchmarks" / "data" / "aa_toy_cnn_fp32_xnnpack.json"
RESULTS = ROOT / "benchmarks" / "results"
#: (slowdown, repetitions at full size)
EFFECTS = ((1.0, 400), (1.10, 200), (1.20, 200))
DRIFTS = (0.0, 0.03, 0.06)
KINDS = ("session (paired)", "session (unpaired, before)", "stored (+50% allowance)", "stored (+0% allowance)",
         "unchanged")
#: group-sequential plans (measure.sequential.Looks) judged like "session (paired)", with the stopping rule in
#: place: kind name -> the rounds looked at
SEQUENTIAL = {"session (paired, looks 7/11/15)": (7, 11, 15), "session (paired, looks 8/15/22/30)": (8, 15, 22, 30)}
#: measurements outside a pair stopped for precision (pytest_sme2.measure.sequential.Precision): kind -> target / margin
PRECISION = {"stored (+0%), precision stop ±m/4": 0.25, "stored (+0%), precision stop ±m/2": 0.5,
             "stored (+0%), precision ±m/2, looks 6/10/15": 0.5,
             "unchanged, precision stop ±m/4": 0.25, "unchanged, precision stop ±m/2": 0.5,
             "unchanged, precision ±m/2, looks 6/10/15": 0.5}


def load_rounds(path: Path = AA_DATA, warmup: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The recorded measured runs (ms) as arrays [round, run] for arm A and arm B (block k of each: round k).

    ``warmup``: executions left out at the start of each recorded block (None = the recording's warm-ups); fewer
    than were recorded studies a shorter warm-up (its later warm-ups become runs, as they would have been)."""
    data = json.loads(path.read_text())
    w = data["warmup"] if warmup is None else warmup
    arms: dict[str, list[list[float]]] = {"A": [], "B": []}
    for block in data["blocks"]:
        arms[block["arm"]].append([x / 1e3 for x in block["e2e_us"][w:]])
    n = min(len(arms["A"]), len(arms["B"]))
    return np.asarray(arms["A"][:n]), np.asarray(arms["B"][:n])


@dataclass(frozen=True)
class Draw:
    """One measurement's worth of rounds: which rounds, and the machine's drift in each."""

    rounds: np.ndarray
    drift: np.ndarray


def samples(arm: np.ndarray, draw: Draw, runs: int, factor: float, ids: tuple[str, ...]) -> Any:
    from pytest_sme2.gate.verdict import Samples

    values = arm[draw.rounds, :runs] * draw.drift[:, None] * factor
    return Samples(tuple(values.ravel().tolist()), (runs,) * len(draw.rounds), rounds=ids)


def consecutive_picks(rng: np.random.Generator, n: int, blocks: int) -> np.ndarray:
    """Rounds as a real measurement takes them: the first measurement and its confirmation are ``2 * blocks``
    consecutive recorded rounds from a random start; the stored reference (an earlier session) is another window of
    ``blocks`` consecutive rounds, disjoint from them and from the ``blocks`` rounds before them."""
    span = 2 * blocks

    def others(start: int) -> list[int]:
        return [s for s in range(0, n - blocks + 1) if s + blocks <= start - blocks or s >= start + span]

    # A start is possible when some reference window fits beside it (a short recording leaves only some starts).
    starts = [s for s in range(0, n - span + 1) if others(s)]
    if not starts:
        raise SystemExit(f"{n} recorded rounds cannot hold {span} consecutive rounds and {blocks} more a gap apart")
    start = int(starts[int(rng.integers(len(starts)))])
    free = others(start)
    other = int(free[int(rng.integers(len(free)))])
    return np.concatenate([np.arange(start, start + span), np.arange(other, other + blocks)])


def one(kind: str, a: np.ndarray, b: np.ndarray, rng: np.random.Generator, *, blocks: int, runs: int,
        slowdown: float, drift_sd: float, margin: float, consecutive: bool = False) -> tuple[str, int, float, int]:
    """(status, attempts, first interval width, rounds measured) of one repetition of ``kind``.

    ``consecutive``: the rounds of each measurement are consecutive in the recording (:func:`consecutive_picks`), so
    the machine's own drift between neighbouring rounds is kept; else drawn at random from the whole recording."""
    from pytest_sme2.gate.decide import decide
    from pytest_sme2.gate.verdict import Comparison, GateConfig

    looks = SEQUENTIAL.get(kind)
    blocks = looks[-1] if looks else blocks
    picks = consecutive_picks(rng, a.shape[0], blocks) if consecutive else rng.choice(a.shape[0], size=3 * blocks,
                                                                                      replace=False)
    draws = [Draw(picks[i * blocks:(i + 1) * blocks], np.exp(rng.normal(0.0, drift_sd, blocks))) for i in range(3)]
    tag = f"{rng.integers(1 << 30)}"
    ids = [tuple(f"{tag}.{i}.{k}" for k in range(blocks)) for i in range(3)]
    paired = kind.startswith("session (paired")
    if looks:
        return sequential(a, b, draws, ids, runs=runs, slowdown=slowdown, margin=margin, looks=looks)
    if kind in PRECISION:
        return precision_stopped(kind, a, b, draws, runs=runs, blocks=blocks, slowdown=slowdown, margin=margin)
    if kind.startswith("session"):
        comparison, allowance = Comparison.SESSION, 0.0

        def pair(i: int) -> tuple[Any, Any]:
            use = ids[i] if paired else ()
            return samples(a, draws[i], runs, 1.0, use), samples(b, draws[i], runs, slowdown, use)

        ref, cand = pair(0)

        def again() -> tuple[Any, Any, Any]:
            r, c = pair(1)
            return r, c, None
    else:
        comparison = Comparison.UNCHANGED if kind == "unchanged" else Comparison.STORED
        allowance = 0.5 if "+50%" in kind else 0.0
        ref = samples(a, draws[2], runs, 1.0, ())
        cand = samples(b, draws[0], runs, slowdown, ())

        def again() -> tuple[Any, Any, Any]:
            return ref, samples(b, draws[1], runs, slowdown, ()), None

    config = GateConfig(margin=margin, drift_allowance=allowance)
    verdict = decide((ref, cand, None), again, config, comparison=comparison)
    first = decide((ref, cand, None), None, config, comparison=comparison).e2e
    iv = first.interval if first is not None else None
    width = iv.high / iv.low - 1 if iv is not None else math.nan
    return verdict.status.value, verdict.attempts, width, blocks * verdict.attempts


def sequential(a: np.ndarray, b: np.ndarray, draws: list[Draw], ids: list[tuple[str, ...]], *, runs: int,
               slowdown: float, margin: float, looks: tuple[int, ...]) -> tuple[str, int, float, int]:
    """A same-session paired comparison measured with the stopping rule in place: each measurement (the first and
    the confirming one) stops at the first look whose verdict, at the per-look confidence, is settled."""
    from pytest_sme2.gate.decide import decide, gate, measured_status
    from pytest_sme2.gate.verdict import Comparison, GateConfig
    from pytest_sme2.measure.sequential import Looks, settled

    plan = Looks(looks)
    config = plan.gate_config(GateConfig(margin=margin))
    used = [0]

    def measure(i: int) -> tuple[Any, Any]:
        for n in plan.rounds:
            part = Draw(draws[i].rounds[:n], draws[i].drift[:n])
            ref, cand = samples(a, part, runs, 1.0, ids[i][:n]), samples(b, part, runs, slowdown, ids[i][:n])
            if settled(measured_status(gate(ref, cand, config, comparison=Comparison.SESSION))) or n == plan.last:
                used[0] += n
                return ref, cand
        raise AssertionError("unreachable")

    ref, cand = measure(0)
    first = gate(ref, cand, config, comparison=Comparison.SESSION).e2e
    iv = first.interval if first is not None else None

    def again() -> tuple[Any, Any, Any]:
        r, c = measure(1)
        return r, c, None

    verdict = decide((ref, cand, None), again, config, comparison=Comparison.SESSION)
    return verdict.status.value, verdict.attempts, (iv.high / iv.low - 1) if iv is not None else math.nan, used[0]


def precision_stopped(kind: str, a: np.ndarray, b: np.ndarray, draws: list[Draw], *, runs: int, blocks: int,
                      slowdown: float, margin: float) -> tuple[str, int, float, int]:
    """A stored or unchanged comparison whose measurements (baseline, candidate, confirmation) each stop by the
    precision rule: at the first look where the median of the block medians is known to ±target."""
    from pytest_sme2.gate.decide import decide
    from pytest_sme2.gate.verdict import Comparison, GateConfig
    from pytest_sme2.measure.sequential import Precision

    rule = Precision(PRECISION[kind] * margin)
    plan = rule.looks(blocks)
    if plan is not None and "looks 6/10/15" in kind:  # the plan before looks at every block from the 6th
        plan = replace(plan, rounds=(6, 10, blocks))
    used = [0]

    def measure(arm: np.ndarray, draw: Draw, factor: float, count: bool = True) -> Any:
        for n in plan.rounds if plan else (blocks,):
            part = Draw(draw.rounds[:n], draw.drift[:n])
            medians = np.median(arm[part.rounds, :runs], axis=1) * part.drift * factor
            if n == blocks or rule.reached([medians.tolist()]):
                used[0] += n if count else 0
                return samples(arm, part, runs, factor, ())
        raise AssertionError("unreachable")

    comparison = Comparison.UNCHANGED if kind.startswith("unchanged") else Comparison.STORED
    ref = measure(a, draws[2], 1.0, count=False)
    cand = measure(b, draws[0], slowdown)

    def again() -> tuple[Any, Any, Any]:
        return ref, measure(b, draws[1], slowdown), None

    config = GateConfig(margin=margin, drift_allowance=0.0)  # "+0%": a hand-set 0 % (issue 28: none is undecided)
    first = decide((ref, cand, None), None, config, comparison=comparison).e2e
    verdict = decide((ref, cand, None), again, config, comparison=comparison)
    iv = first.interval if first is not None else None
    return verdict.status.value, verdict.attempts, (iv.high / iv.low - 1) if iv is not None else math.nan, used[0]


def study(*, quick: bool = False, blocks: int = 15, runs: int = 10, margin: float = 0.05,
          seed: int = 18, data: Path = AA_DATA, warmup: int | None = None, consecutive: bool = False
          ) -> dict[str, Any]:
    a, b = load_rounds(data, warmup)
    if a.shape[1] < runs:
        left_out = "the recording's warm-ups" if warmup is None else f"{warmup} warm-up(s)"
        raise SystemExit(f"{data} has {a.shape[1]} runs per block after {left_out}: ask for --runs {a.shape[1]} or "
                         "fewer")
    needed = 3 * max(blocks, *(looks[-1] for looks in SEQUENTIAL.values()))
    if a.shape[0] < needed:
        raise SystemExit(f"{data} has {a.shape[0]} recorded rounds; a repetition draws {needed} distinct ones (three "
                         f"measurements of up to {needed // 3} rounds): record more (record_aa.py --blocks {needed})")
    rng = np.random.default_rng(seed)
    rows = []
    # Consecutive windows keep the machine's own drift: nothing is injected on top.
    drifts = (0.0,) if consecutive else DRIFTS if not quick else (0.03,)
    for drift_sd in drifts:
        for kind in (*KINDS, *SEQUENTIAL, *PRECISION):
            for slowdown, reps in EFFECTS:
                n = 20 if quick else reps
                got = [one(kind, a, b, rng, blocks=blocks, runs=runs, slowdown=slowdown, drift_sd=drift_sd,
                           margin=margin, consecutive=consecutive) for _ in range(n)]
                statuses = [g[0] for g in got]
                rows.append({
                    "kind": kind, "drift_sd": drift_sd, "slowdown": slowdown, "repetitions": n,
                    "regression": statuses.count("regression") / n, "pass": statuses.count("pass") / n,
                    "inconclusive": statuses.count("inconclusive") / n, "drift": statuses.count("drift") / n,
                    "remeasured": sum(g[1] > 1 for g in got) / n,
                    "median_width": float(np.nanmedian([g[2] for g in got])),
                    "mean_rounds": float(np.mean([g[3] for g in got])),
                })
    coverage = [c for n in ((15,) if quick else (8, 15, 30)) for c in consecutive_coverage(a, b, rounds=n, runs=runs)]
    return {"blocks": blocks, "runs": runs, "warmup": warmup, "margin": margin, "source": shown_path(data),
            "rounds_recorded": int(a.shape[0]), "rows": rows, "coverage": coverage,
            "rounds_taken": "consecutive windows" if consecutive else "drawn at random from the whole recording"}


def consecutive_coverage(a: np.ndarray, b: np.ndarray, *, rounds: int, runs: int) -> list[dict[str, Any]]:
    """Coverage of the true ratio 1 on disjoint windows of *consecutive* recorded rounds (the machine's own drift and
    any dependence between neighbouring rounds kept, nothing injected): paired and unpaired, at 95 % and at the
    per-look level of the plugin's sequential plan (98.75 %)."""
    from pytest_sme2.gate.stats import block_ratio_ci, paired_ratio_ci

    sizes = (runs,) * rounds
    out = []
    for confidence in (0.95, 0.9875):
        hits: dict[str, list[bool]] = {"paired": [], "unpaired": []}
        widths: dict[str, list[float]] = {"paired": [], "unpaired": []}
        for start in range(0, a.shape[0] - rounds + 1, rounds):
            x, y = a[start:start + rounds, :runs].ravel(), b[start:start + rounds, :runs].ravel()
            for name, fn in (("paired", paired_ratio_ci), ("unpaired", block_ratio_ci)):
                iv = fn(x, y, baseline_blocks=sizes, candidate_blocks=sizes, confidence=confidence).interval
                if iv is not None:
                    hits[name].append(iv.low <= 1.0 <= iv.high)
                    widths[name].append(iv.high / iv.low - 1)
        for name, covered in hits.items():
            out.append({"interval": name, "confidence": confidence, "rounds": rounds, "runs": runs,
                        "windows": len(covered), "coverage": float(np.mean(covered)),
                        "median_width": float(np.median(widths[name]))})
    return out


def upper95(k: int, n: int) -> float:
    """Exact one-sided 95 % upper bound of a rate with k of n (Clopper-Pearson; k = 0: 1 - 0.05^(1/n))."""
    if k == 0:
        return 1 - 0.05 ** (1 / n)
    lo, hi = k / n, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        tail = sum(math.comb(n, i) * mid**i * (1 - mid) ** (n - i) for i in range(k + 1))
        lo, hi = (mid, hi) if tail > 0.05 else (lo, mid)
    return hi


def render(result: dict[str, Any]) -> str:
    lines = [f"Gate by comparison kind on real recorded A/A rounds ({result['source']}, {result['rounds_recorded']} "
             f"rounds), design {result['blocks']} blocks x {result['runs']} runs, margin {result['margin']:.0%}; "
             f"confirmation included; rounds of a measurement: {result.get('rounds_taken', 'drawn at random')}",
             f"{'kind':36s} {'drift':>5s} {'effect':>6s} {'n':>4s} {'regr.':>6s} {'pass':>6s} {'incon.':>6s} "
             f"{'drift':>6s} {'re-meas.':>8s} {'width':>6s} {'rounds':>6s}"]
    for r in result["rows"]:
        extra = ""
        if r["slowdown"] == 1.0 and not r["kind"].startswith("unchanged"):
            k = round(r["regression"] * r["repetitions"])
            extra = f"  false alarms {k}/{r['repetitions']} (95% upper {upper95(k, r['repetitions']):.2%})"
        lines.append(
            f"{r['kind']:36s} {r['drift_sd']:5.0%} {r['slowdown'] - 1:+6.0%} {r['repetitions']:4d} "
            f"{r['regression']:6.1%} {r['pass']:6.1%} {r['inconclusive']:6.1%} {r['drift']:6.1%} "
            f"{r['remeasured']:8.1%} {r['median_width']:6.1%} {r['mean_rounds']:6.1f}{extra}")
    lines += ["", "Coverage of the true ratio 1 on disjoint windows of consecutive recorded rounds (nothing injected)",
              f"{'interval':9s} {'level':>7s} {'rounds':>6s} {'windows':>7s} {'coverage':>8s} {'width':>6s}"]
    for c in result["coverage"]:
        lines.append(f"{c['interval']:9s} {c['confidence']:7.2%} {c['rounds']:6d} {c['windows']:7d} "
                     f"{c['coverage']:8.1%} {c['median_width']:6.1%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 repetitions per row, one drift: a smoke run")
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--margin", type=float, default=5.0, help="the gate's margin in percent (default 5)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="warm-ups left out of each recorded block (default: the recording's)")
    parser.add_argument("--consecutive", action="store_true",
                        help="each measurement takes consecutive recorded rounds (as a real one does), not rounds "
                        "drawn from the whole recording; no drift injected (the machine's own is in the windows)")
    parser.add_argument("--data", type=Path, default=AA_DATA,
                        help=f"recorded A/A rounds (record_aa.py; default {AA_DATA.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    result = study(quick=args.quick, blocks=args.blocks, runs=args.runs, margin=args.margin / 100, data=args.data,
                   warmup=args.warmup, consecutive=args.consecutive)
    text = render(result)
    print(text)
    if not args.quick:
        RESULTS.mkdir(exist_ok=True)
        stem = (f"gate_paired_b{args.blocks}_r{args.runs}" + (f"_w{args.warmup}" if args.warmup is not None else "")
                + (f"_m{args.margin:g}" if args.margin != 5.0 else "")
                + ("" if args.data == AA_DATA else f"_{args.data.stem.removeprefix('aa_')}")
                + ("_consecutive" if args.consecutive else ""))
        (RESULTS / f"{stem}.txt").write_text(text + "\n")
        (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
