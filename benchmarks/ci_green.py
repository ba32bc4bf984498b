"""What "not decided is not green" costs in CI, on real recorded A/A rounds read in consecutive windows.

    python benchmarks/ci_green.py            # offline, ~1 min quiet (6 min at load 11): benchmarks/data/aa_*.json
    python benchmarks/ci_green.py --quick    # a smoke run (tests/test_benchmarks.py): rates are not estimates

Issue 28 item 3: where ``CI`` is set, ``--sme2-fail-on`` defaults to ``missing,invalid,inconclusive``, so a changed
artifact's ``inconclusive`` (and ``invalid``) fails the job, as a ``regression`` does. Two rates say what that costs:

- **A/A non-green**: a changed artifact whose speed did not change (a re-export, re-seeded weights, an export-recipe
  bump) is red when its verdict is ``regression`` or ``inconclusive`` (before: only ``regression``);
- **+10 % green**: a real slowdown of 10 % is green when its verdict is ``pass`` or ``improvement`` (before:
  ``inconclusive`` was green too).

Every number comes from the library's own ``gate.decide`` on REAL recorded blocks (``record_aa.py``: two arms of one
``.pte``, interleaved, true ratio 1), taken as a real measurement takes them: **consecutive** rounds from a start
round, never rounds drawn across the recording.

- ``session`` (the baseline's artifact re-measured beside the change, paired, measured until decided with the
  plugin's looks 8/15/22/30 for 15 blocks at 1 - 5 %/4 each, :mod:`pytest_sme2.measure.sequential`): reference = arm A,
  candidate = arm B (x 1.10 for the slowdown) of the same consecutive rounds; a confirming measurement, when the first
  is not settled, takes the rounds right after the first's. Every start round that leaves room for two full
  measurements (60 rounds) is one repetition, in both orientations (A as reference, then B): the windows overlap, so
  the effective sample size is nearer the disjoint windows, which each row also gives.
- ``stored`` (a fresh runner without the artifact cache: the baseline's stored samples): reference = arm A of the
  recording's first half measured as the plugin records a baseline (stopped once its median is known to ± half the
  margin, :class:`measure.sequential.Precision`), candidate = arm B of consecutive rounds in its second half
  (and confirmation after it), at the margin alone and at the example suite's margin + drift allowance (50 %).

Each recording stands for the example-suite tests whose programs it is (or is nearest to, said in the table): blocks
are cut the way the plugin sizes them for that program (``--sme2-min-block-ms`` / ``--sme2-max-block-ms``). The
suite's rate combines the per-test rates: ``1 - prod(1 - p_i)`` for A/A (an upper bound when tests' errors are
positively associated, as common-mode machine drift makes them) and the largest per-test rate for a slowdown of one
model. ``invalid`` needs busy evidence the recordings do not hold: its rate is quoted from real sessions
(``results/gate_sessions.txt``), not computed here.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.console import shown_path  # noqa: E402
from benchmarks.gate_paired import upper95  # noqa: E402
from pytest_sme2.measure.sequential import Looks  # noqa: E402

DATA = ROOT / "benchmarks" / "data"
RESULTS = ROOT / "benchmarks" / "results"
#: the example suite's latency margin (example_models/suite.py) and this repository's drift allowance (pyproject.toml)
SUITE_MARGIN = 0.10
SUITE_ALLOWANCE = 0.50
SLOWDOWN = 1.10
#: blocks per measurement (--sme2-blocks default): looks 8/15/22/30 for a same-session comparison
BLOCKS = 15


@dataclass(frozen=True)
class Recording:
    """One recorded A/A file and the example-suite tests it stands for (its blocks are cut as the plugin sizes them)."""

    file: str
    #: example-suite latency comparisons this recording stands for (test ids), and how near it is to them
    tests: tuple[str, ...]
    stands_for: str


RECORDINGS = (
    Recording("aa_toy_cnn_fp32_xnnpack.json",
              ("test_toy_cnn.py::test_latency[fp32-xnnpack]", "test_toy_cnn.py::test_xnnpack_vs_portable"),
              "the program itself (recorded at 345 us per execution); the pair's XNNPACK arm is the same program"),
    Recording("aa_toy_cnn_int8_xnnpack.json", ("test_toy_cnn.py::test_latency[int8-xnnpack]",),
              "tests/data's int8 program (40 us: 27 runs per block, as --sme2-min-block-ms gives)"),
    Recording("aa_toy_cnn_fp32_portable.json",
              ("test_toy_cnn.py::test_latency[fp32-portable]", "test_toy_cnn.py::test_latency[int8-portable]"),
              "fp32 itself; int8 portable assumed alike (not recorded)"),
    Recording("aa_mobilenet_v3_small_like_fp32_xnnpack.json",
              ("test_mobilenet_v3_small.py::test_latency[fp32-xnnpack]",
               "test_mobilenet_v3_small.py::test_latency[int8-xnnpack]",
               "test_mobilenet_v3_small.py::test_xnnpack_vs_portable"),
              "tests/data's MobileNetV3-like fp32 program; int8 and the pair's XNNPACK arm assumed alike"),
    Recording("aa_mobilenet_v3_small_fp32_portable.json",
              ("test_mobilenet_v3_small.py::test_latency[fp32-portable]",
               "test_mobilenet_v3_small.py::test_latency[int8-portable]"),
              "fp32 itself (1 + 3 runs per block, as --sme2-max-block-ms gives); int8 assumed alike"),
    Recording("aa_tiny_transformer_fp32_portable.json",
              ("test_tiny_transformer.py::test_latency[fp32-portable]",
               "test_tiny_transformer.py::test_latency[int8-portable]",
               "test_tiny_transformer.py::test_latency[fp32-xnnpack]",
               "test_tiny_transformer.py::test_latency[int8-xnnpack]",
               "test_tiny_transformer.py::test_xnnpack_vs_portable"),
              "fp32 portable itself; its XNNPACK programs are not recorded and assumed alike (a stand-in, said)"),
)


def sizing(per_execution_ms: float, runs: int = 10, warmup: int = 3) -> tuple[int, int]:
    """(warm-up, runs) per block after the first that the plugin gives a program this fast, with the default options
    (``pytest_sme2.measure.blocks._size_blocks``: ``--sme2-min-block-ms`` 2.4, ``--sme2-max-block-ms`` 1000)."""
    from pytest_sme2.measure.blocks import MIN_RUNS, SHORT_BLOCK_RUNS_FACTOR, SLOW_BLOCK_WARMUP
    from pytest_sme2.options import MAX_BLOCK_MS, MIN_BLOCK_MS

    if per_execution_ms * runs < MIN_BLOCK_MS:
        most = SHORT_BLOCK_RUNS_FACTOR * runs - warmup
        return warmup, max(runs, min(most, math.ceil(MIN_BLOCK_MS / per_execution_ms)))
    if per_execution_ms * (warmup + runs) > MAX_BLOCK_MS:
        slow_warmup = min(warmup, SLOW_BLOCK_WARMUP)
        return slow_warmup, max(MIN_RUNS, min(runs, int(MAX_BLOCK_MS / per_execution_ms) - slow_warmup))
    return warmup, runs


def load(recording: Recording) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """Arms A and B as arrays [round, run] of the measured runs (ms) the plugin's block sizing keeps, and that
    sizing (warm-up, runs)."""
    from benchmarks.gate_paired import load_rounds

    a, _ = load_rounds(DATA / recording.file)
    warmup, runs = sizing(float(np.median(a)))
    a, b = load_rounds(DATA / recording.file, warmup)
    if a.shape[1] < runs:
        raise SystemExit(f"{recording.file} has {a.shape[1]} runs per block after {warmup} warm-up(s); the plugin "
                         f"would measure {runs}: record more runs (record_aa.py --runs)")
    return a[:, :runs], b[:, :runs], (warmup, runs)


def _samples(values: np.ndarray, factor: float, rounds: tuple[str, ...] = ()) -> Any:
    from pytest_sme2.gate.verdict import Samples

    return Samples(tuple((values * factor).ravel().tolist()), (values.shape[1],) * values.shape[0], rounds=rounds)


def session(ref: np.ndarray, cand: np.ndarray, start: int, *, margin: float, slowdown: float) -> str:
    """The verdict of a same-session comparison measured from round ``start`` on, as the plugin measures it."""
    from pytest_sme2.gate.decide import decide, gate, measured_status
    from pytest_sme2.gate.verdict import Comparison, GateConfig
    from pytest_sme2.measure.sequential import settled

    looks = Looks.for_blocks(BLOCKS)
    config = looks.gate_config(GateConfig(margin=margin))
    cursor = [start]

    def measure() -> tuple[Any, Any, None]:
        s = cursor[0]
        for n in looks.rounds:
            ids = tuple(f"{s}.{k}" for k in range(n))
            r, c = _samples(ref[s:s + n], 1.0, ids), _samples(cand[s:s + n], slowdown, ids)
            if n == looks.last or settled(measured_status(gate(r, c, config, comparison=Comparison.SESSION))):
                cursor[0] = s + n
                return r, c, None
        raise AssertionError("unreachable")

    return decide(measure(), measure, config, comparison=Comparison.SESSION).status.value


def stored(ref: np.ndarray, cand: np.ndarray, base_start: int, start: int, *, margin: float, allowance: float,
           slowdown: float) -> str:
    """The verdict against a baseline recorded from round ``base_start`` on, the candidate measured from ``start``
    (both stopped by the plugin's precision rule, ± half the margin), confirmation on the rounds after it."""
    from pytest_sme2.gate.decide import decide
    from pytest_sme2.gate.verdict import Comparison, GateConfig
    from pytest_sme2.measure.sequential import Precision

    rule = Precision(margin / 2)
    plan = rule.looks(BLOCKS)
    cursor = [start]

    def measured(arm: np.ndarray, s: int, factor: float) -> tuple[Any, int]:
        for n in plan.rounds if plan else (BLOCKS,):
            medians = np.median(arm[s:s + n], axis=1) * factor
            if n == BLOCKS or rule.reached([medians.tolist()]):
                return _samples(arm[s:s + n], factor), n
        raise AssertionError("unreachable")

    base, _ = measured(ref, base_start, 1.0)

    def measure() -> tuple[Any, Any, None]:
        c, n = measured(cand, cursor[0], slowdown)
        cursor[0] += n
        return base, c, None

    config = GateConfig(margin=margin, drift_allowance=allowance)
    return decide(measure(), measure, config, comparison=Comparison.STORED).status.value


def rates(statuses: list[str]) -> dict[str, float]:
    n = len(statuses)
    return {s: statuses.count(s) / n for s in ("regression", "inconclusive", "pass", "improvement")}


def episodes(windows: list[tuple[int, int, str]], need: int, *, red: bool) -> int:
    """How many separate stretches of the recording the missed windows come from (A/A: red ones; a slowdown: green
    ones): windows of one orientation whose start rounds lie less than ``need`` rounds apart overlap, so they are
    one machine event seen several times, not several."""
    missed = {"regression", "inconclusive"} if red else {"pass", "improvement"}
    count = 0
    for orientation in {o for o, _, _ in windows}:
        starts = sorted(s for o, s, v in windows if o == orientation and v in missed)
        count += sum(1 for i, s in enumerate(starts) if i == 0 or s - starts[i - 1] >= need)
    return count


def study_one(recording: Recording, *, margin: float, quick: bool) -> list[dict[str, Any]]:
    a, b, (warmup, runs) = load(recording)
    rounds = a.shape[0]
    need = 2 * Looks.for_blocks(BLOCKS).last  # two full measurements: the first and its confirmation
    step = max(1, (rounds - need) // 6) if quick else 1
    starts = list(range(0, rounds - need + 1, step))
    rows = []
    for kind in ("session", "stored", "stored+allowance"):
        for slowdown in (1.0, SLOWDOWN):
            statuses = []
            windows: list[tuple[int, int, str]] = []  # (orientation, start round, status) of the session rows
            for orientation, (ref, cand) in enumerate(((a, b), (b, a))):
                if kind == "session":
                    got = [session(ref, cand, s, margin=margin, slowdown=slowdown) for s in starts]
                    statuses += got
                    windows += [(orientation, s, v) for s, v in zip(starts, got, strict=True)]
                else:
                    # A baseline from the first half, candidates (and their confirmations) from the second half.
                    half = rounds // 2
                    later = range(half, rounds - 2 * BLOCKS + 1, step if quick else 1)
                    allowance = SUITE_ALLOWANCE if kind == "stored+allowance" else 0.0
                    bases = range(0, half - BLOCKS + 1, max(1, (half - BLOCKS) // (3 if quick else 10)))
                    statuses += [stored(ref, cand, base, s, margin=margin, allowance=allowance, slowdown=slowdown)
                                 for base in bases for s in later[::max(1, len(later) // (4 if quick else 20))]]
            if not statuses:
                continue
            r = rates(statuses)
            rows.append({
                "recording": recording.file, "warmup": warmup, "runs": runs, "kind": kind, "margin": margin,
                "slowdown": slowdown,
                "allowance": SUITE_ALLOWANCE if kind == "stored+allowance" else 0.0,
                "repetitions": len(statuses), "rounds_recorded": rounds,
                "disjoint_windows": 2 * (rounds // need) if kind == "session" else 2 * (rounds // (2 * need)),
                # the windows that missed (A/A: red; a slowdown: green) in episodes of overlapping windows: one stretch
                # of the recording counts once (None: the stored rows' grid of baselines and candidates)
                "missed_episodes": episodes(windows, need, red=slowdown == 1.0) if kind == "session" else None,
                **r,
                # CI default (missing,invalid,inconclusive) vs before (missing): what is red, what is green
                "red_now": r["regression"] + r["inconclusive"], "red_before": r["regression"],
                "green_now": r["pass"] + r["improvement"],
                "green_before": r["pass"] + r["improvement"] + r["inconclusive"],
            })
    return rows


def suite(rows: list[dict[str, Any]], kind: str, margin: float) -> dict[str, Any]:
    """The example suite's rates for one comparison kind: every changed test's A/A, one model's +10 %."""
    by_file = {r["recording"]: r for r in rows if r["kind"] == kind and r["margin"] == margin and r["slowdown"] == 1.0}
    slow = {r["recording"]: r for r in rows if r["kind"] == kind and r["margin"] == margin and r["slowdown"] != 1.0}
    tests = [(t, rec.file) for rec in RECORDINGS if rec.file in by_file for t in rec.tests]
    ok_now = math.prod(1 - by_file[f]["red_now"] for _, f in tests)
    ok_before = math.prod(1 - by_file[f]["red_before"] for _, f in tests)
    return {"kind": kind, "margin": margin, "tests": len(tests),
            "aa_red_now": 1 - ok_now, "aa_red_before": 1 - ok_before,
            "slow_green_now_max": max((slow[f]["green_now"] for _, f in tests if f in slow), default=math.nan),
            "slow_green_before_max": max((slow[f]["green_before"] for _, f in tests if f in slow), default=math.nan)}


def study(*, quick: bool = False, margins: tuple[float, ...] = (SUITE_MARGIN, 0.05)) -> dict[str, Any]:
    present = [r for r in RECORDINGS if (DATA / r.file).is_file()]
    rows = [row for m in margins for rec in present for row in study_one(rec, margin=m, quick=quick)]
    suites = [suite(rows, kind, m) for m in margins for kind in ("session", "stored", "stored+allowance")]
    sized = {r["recording"]: (r["warmup"], r["runs"]) for r in rows}
    return {"recordings": [{"file": shown_path(DATA / r.file), "warmup": sized[r.file][0], "runs": sized[r.file][1],
                            "tests": list(r.tests), "stands_for": r.stands_for} for r in present],
            "missing": [r.file for r in RECORDINGS if r not in present], "rows": rows, "suite": suites,
            "blocks": BLOCKS, "slowdown": SLOWDOWN, "quick": quick}


def render(result: dict[str, Any]) -> str:
    lines = [f"CI green rates on real recorded A/A rounds, consecutive windows; {result['blocks']} blocks (session: "
             f"looks 8/15/22/30), +{result['slowdown'] - 1:.0%} injected on the candidate arm for the slowdown rows. "
             "red = regression or inconclusive (CI default now), before = regression only; green = pass or "
             "improvement (before: inconclusive too)"]
    for rec in result["recordings"]:
        lines.append(f"  {rec['file']}: {rec['warmup']} warm-up + {rec['runs']} runs per block, for "
                     f"{len(rec['tests'])} suite test(s): {rec['stands_for']}")
    lines.append(f"{'recording':42s} {'kind':17s} {'margin':>6s} {'effect':>6s} {'n':>5s} {'disj.':>5s} "
                 f"{'regr.':>6s} {'incon.':>6s} {'pass':>6s} {'red now':>8s} {'before':>7s} {'green now':>9s} "
                 f"{'before':>7s}")
    for r in result["rows"]:
        k = round(r["red_now"] * r["repetitions"])
        ep = r.get("missed_episodes")
        within = f" in {ep} episode(s) of overlapping windows" if ep is not None else ""
        bound = f"  (A/A red {k}/{r['repetitions']}{within}, 95% upper {upper95(k, r['repetitions']):.1%})" \
            if r["slowdown"] == 1.0 else \
            (f"  (green {round(r['green_now'] * r['repetitions'])}/{r['repetitions']}{within})" if ep else "")
        lines.append(
            f"{r['recording'].removeprefix('aa_').removesuffix('.json'):42s} {r['kind']:17s} {r['margin']:6.0%} "
            f"{r['slowdown'] - 1:+6.0%} {r['repetitions']:5d} {r['disjoint_windows']:5d} {r['regression']:6.1%} "
            f"{r['inconclusive']:6.1%} {r['pass']:6.1%} {r['red_now']:8.1%} {r['red_before']:7.1%} "
            f"{r['green_now']:9.1%} {r['green_before']:7.1%}{bound}")
    lines += ["", "The example suite (every recorded test's program changed, speed unchanged: A/A; one model +10 %):",
              f"{'kind':17s} {'margin':>6s} {'tests':>5s} {'A/A red now':>11s} {'before':>7s} "
              f"{'+10% green now (worst test)':>28s} {'before':>7s}"]
    for s in result["suite"]:
        lines.append(f"{s['kind']:17s} {s['margin']:6.0%} {s['tests']:5d} {s['aa_red_now']:11.1%} "
                     f"{s['aa_red_before']:7.1%} {s['slow_green_now_max']:28.1%} {s['slow_green_before_max']:7.1%}")
    if result["missing"]:
        lines.append(f"not recorded here (record_aa.py), left out: {', '.join(result['missing'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few windows per row: a smoke run")
    args = parser.parse_args(argv)
    result = study(quick=args.quick)
    text = render(result)
    print(text)
    if not args.quick:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "ci_green.txt").write_text(text + "\n")
        (RESULTS / "ci_green.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
