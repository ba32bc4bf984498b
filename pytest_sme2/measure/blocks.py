"""The block engine: a measurement's runs in blocks, on a machine that may be busy.

:func:`measure_blocks` runs the blocks of one arm, or of two interleaved (ABBA...) so drift hits both alike. It sizes
the blocks after the first (:func:`_size_blocks`: more runs for a model too fast for its blocks, fewer for one too
slow), fits them to a time budget after the second (:func:`_fit_budget`), and stops early at a look of a sequential
plan (:mod:`pytest_sme2.measure.sequential`: the verdict is settled, or the median is precise enough).

**A busy machine is not a slower model.** Every run reports how much of its wall time the measuring
thread (or runner process) was preempted, and the host's load and steal time
(:class:`~pytest_sme2.device.load.HostWindow` covers the runs too short for their own). A block over the limits
below (:func:`disturbance_of`) is measured again, up to ``blocks`` more times; if the machine stays busy the
measurement is invalid with that evidence, which the gate reports as ``invalid``, never ``regression``.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from pytest_sme2.device.load import HostWindow
from pytest_sme2.measure.recipe import PREEMPTED_LIMIT, Measurement
from pytest_sme2.measure.sequential import Looks, Precision
from pytest_sme2.progress import Progress
from pytest_sme2.runners.base import Runner, RunResult

# A block whose measuring thread was preempted (or waited for a CPU) for more than its ``Measurement.busy_limit``
# (:data:`~pytest_sme2.measure.recipe.PREEMPTED_LIMIT` unless set) ran on a busy machine.
#: A runner subprocess' CPU/wall also covers its start-up and program load: only a gross shortfall counts.
PROCESS_PREEMPTED_LIMIT = 0.30
#: ... or whose host lost more than this share of CPU time to steal (other tenants of the VM host).
STEAL_LIMIT = 0.10
#: ... or whose host gave more than this share of its CPU time to other processes (``BlockLoad.others_busy_share``):
#: one busy process on the other core of this 2-CPU VM slowed XNNPACK 4-14 % without preempting the measuring thread
#: (benchmarks/results/disturbance.txt, MobileNetV3, 1 thread: host busy 51 % alone and 100 % beside one burner, the
#: block's own share 50 %, so others ~1 % vs ~50 %). A quarter of the host is halfway between the two.
HOST_BUSY_LIMIT = 0.25

#: A time budget never cuts a measurement below this many blocks (the gate's interval needs >= 4 per arm,
#: and a confirmation pools two measurements) or runs per block.
MIN_BLOCKS = 6
MIN_RUNS = 3
#: ... and the warm-up a block keeps when a time budget or ``max_block_ms`` shrinks it: a model that slow has no
#: seconds-long lazy initialisation to warm up (portable programs' first execution after a load: 0.997-1.002 of the
#: block median, benchmarks/data/aa_*_portable.json).
SLOW_BLOCK_WARMUP = 1

#: A block whose runs take under ``Measurement.min_block_ms`` (the plugin's default:
#: :data:`pytest_sme2.options.MIN_BLOCK_MS`) gets more runs, its executions, warm-up included, at most this many
#: times the runs asked for.
SHORT_BLOCK_RUNS_FACTOR = 3


def disturbance_of(result: RunResult, limit: float = PREEMPTED_LIMIT) -> str:
    """Why ``result`` ran on a busy machine, with the evidence; "" when it did not (or nothing was recorded).

    One runtime thread timed by its own CPU clock: preempted for more than ``PREEMPTED_LIMIT`` of the block,
    or waiting for a CPU that long. A thread pool idles by design, so only its wait for a CPU counts; a
    runner subprocess' CPU/wall also holds its start-up, so only a gross shortfall counts there. Any: more
    than ``STEAL_LIMIT`` of the host's time stolen by the VM host, or more than ``HOST_BUSY_LIMIT`` of it used by
    other processes (a busy neighbour on the other core slows XNNPACK without preempting it).
    """
    load = result.load
    if load is None or limit >= 1.0:
        return ""
    from pytest_sme2.device.load import SOURCE_THREAD

    busy = False
    delay = load.run_delay_share
    if delay is not None and delay > limit:
        busy = True
    elif load.source == SOURCE_THREAD and load.threads == 1:
        busy = load.preempted_share > limit
    elif load.source != SOURCE_THREAD and load.threads == 1:
        busy = load.preempted_share > max(limit, PROCESS_PREEMPTED_LIMIT)
    if load.steal_share is not None and load.steal_share > STEAL_LIMIT:
        busy = True
    others = load.others_busy_share
    if others is not None and others > HOST_BUSY_LIMIT:
        busy = True
    return load.describe() if busy else ""


Block = list[RunResult]


def _run_block(runner: Runner, measurement: Measurement) -> Block:
    return [runner.run(measurement.request(mode)) for mode in measurement.modes]


def _block_disturbance(block: Block, limit: float) -> str:
    return next((d for d in (disturbance_of(r, limit) for r in block) if d), "")


def _fit_budget(arms: Sequence[Measurement], round_s: float, blocks: int) -> tuple[list[Measurement], int, str]:
    """Runs per block and blocks that fit the arms' time budget, from the time one round of blocks took."""
    budget = arms[0].time_budget_s
    if budget <= 0 or round_s * blocks <= budget:
        return list(arms), blocks, ""
    m = arms[0]
    per_execution = round_s / sum(a.warmup + a.runs for a in arms)
    warmup = min(m.warmup, SLOW_BLOCK_WARMUP)
    per_round = budget / blocks
    runs = max(MIN_RUNS, min(m.runs, int(per_round / (per_execution * len(arms))) - warmup))
    new_blocks = blocks
    round_after = per_execution * len(arms) * (warmup + runs)
    if round_after * blocks > budget:
        new_blocks = max(MIN_BLOCKS, int(budget / round_after))
    note = (f"time budget {budget:g} s: {new_blocks} blocks of {warmup} warm-up + {runs} runs from the third "
            f"(a block of {m.warmup + m.runs} executions took {round_s / len(arms):.1f} s)")
    return [replace(a, runs=runs, warmup=warmup) for a in arms], min(blocks, new_blocks), note


def _size_blocks(arms: Sequence[Measurement], first: Sequence[Block]) -> tuple[list[Measurement], str]:
    """Runs per block after the first, from each arm's first block (``first``): the time per execution there.

    - An arm whose measured runs took under its ``min_block_ms`` (a model that runs in tens of microseconds) gets
      more runs: its executions, warm-up included, up to :data:`SHORT_BLOCK_RUNS_FACTOR` x the runs asked for.
    - An arm whose executions, warm-up included, took over its ``max_block_ms`` (a model on the portable kernels:
      hundreds of ms per execution) gets one warm-up and the runs that fit, at least :data:`MIN_RUNS`: its block
      median is precise from a few runs, and the time goes to the blocks, the gate's independent units.

    Like a time budget's shrinking it is the machine's and the model's, not the recipe's (``Measurement.recipe``
    keeps the runs and warm-up asked for)."""
    sized, short, long = [], [], []
    for arm, block in zip(arms, first, strict=True):
        per_execution = _block_median(block)
        name = f"{arm.variant} " if arm.variant and len(arms) > 1 else ""
        if per_execution <= 0:
            sized.append(arm)
        elif arm.min_block_ms > 0 and per_execution * arm.runs < arm.min_block_ms:
            most = SHORT_BLOCK_RUNS_FACTOR * arm.runs - arm.warmup
            runs = max(arm.runs, min(most, math.ceil(arm.min_block_ms / per_execution)))
            sized.append(replace(arm, runs=runs))
            if runs > arm.runs:
                short.append(f"{name}{runs} runs per block after the first (its {arm.runs} took "
                             f"{per_execution * arm.runs:.2f} ms)")
        elif arm.max_block_ms > 0 and per_execution * (arm.warmup + arm.runs) > arm.max_block_ms:
            warmup = min(arm.warmup, SLOW_BLOCK_WARMUP)
            runs = max(MIN_RUNS, min(arm.runs, int(arm.max_block_ms / per_execution) - warmup))
            sized.append(replace(arm, runs=runs, warmup=warmup))
            if (runs, warmup) != (arm.runs, arm.warmup):
                executions = arm.warmup + arm.runs
                long.append(f"{name}{warmup} warm-up + {runs} runs per block after the first (its {executions} "
                            f"executions took {per_execution * executions:.0f} ms)")
        else:
            sized.append(arm)
    notes = []
    if short:
        notes.append(f"short blocks (under {arms[0].min_block_ms:g} ms of runs): {', '.join(short)}")
    if long:
        notes.append(f"long blocks (over {arms[0].max_block_ms:g} ms of executions): {', '.join(long)}")
    return sized, "; ".join(notes)


def measure_blocks(
    runner: Runner, arms: Sequence[Measurement], *, blocks: int, progress: Progress | None, what: str,
    looks: Looks | None = None, stop: Callable[[list[list[Block]]], str] | None = None,
    reading_s: Callable[[int, Block], float] | None = None,
) -> tuple[list[list[Block]], str, str, tuple[str, ...]]:
    """Run ``blocks`` clean blocks of every arm, interleaved (ABBA...) when there are two.

    A block (of every arm: the arms' blocks are re-run together, so interleaving stays balanced) that ran
    on a busy machine is measured again, up to ``blocks`` more times. After the first round a model too fast for
    its blocks gets more runs, one too slow fewer (:func:`_size_blocks`); after the second, a time budget may shrink
    the runs per block and the blocks (:func:`_fit_budget`). Returns the blocks per arm, a note on
    what was re-measured or shrunk, the invalid reason when the machine stayed busy, and the id of each kept
    round (block i of every arm ran in round i: the gate pairs them, :func:`pytest_sme2.gate.checks.paired`).

    ``looks`` (a plan of :mod:`measure.sequential`) replaces ``blocks``: rounds are measured up to its last look,
    and at every earlier look ``stop(blocks per arm)`` may end the measurement by saying why (the verdict is
    settled, or the median is known precisely enough; "" = go on). A time budget that shrank the blocks cuts the
    plan there (:meth:`measure.sequential.Looks.within`). ``reading_s(arm, block)`` reads a block's traces as
    the profile will and returns the seconds it took: the budget counts it, since reading every block's traces comes
    after the blocks (toy_cnn's 80 µs XNNPACK blocks: reading took ~10x measuring, and a 5 s budget took 63 s).
    """
    if looks is not None:
        blocks = looks.last
    arms = list(arms)
    token = os.urandom(4).hex()  # this measurement's rounds pair with nothing else's
    rounds: list[str] = []
    per_arm: list[list[Block]] = [[] for _ in arms]
    disturbed_seen: list[str] = []
    notes: list[str] = []
    retries = blocks
    b = 0
    window = HostWindow()
    window.prime()  # ~0.1 s on 2 CPUs: the first blocks get the host just before them as their window
    budget = arms[0].time_budget_s
    spent = reading = 0.0  # seconds measuring so far; seconds reading one round's traces (known from the second)
    while len(per_arm[0]) < blocks:
        if 0 < budget <= spent + reading * len(rounds):
            # What _fit_budget predicted from one round can miss (a block's fixed cost of loading and tracing, blocks
            # measured again on a busy machine): the budget is the time spent, not only the time predicted. Once it
            # is spent nothing is measured again (a disturbed block then makes the measurement invalid), and the
            # measurement ends as soon as it has the blocks the gate needs.
            retries = 0
            if len(rounds) >= MIN_BLOCKS:
                notes.append(f"time budget {budget:g} s spent after {len(rounds)} of {blocks} blocks")
                break
        order = list(range(len(arms))) if b % 2 == 0 else list(reversed(range(len(arms))))
        started = time.perf_counter()
        got = {}
        for i in order:
            if progress:
                arm = f", {arms[i].variant or arms[i].label}" if len(arms) > 1 else ""
                progress(f"{what}: block {len(per_arm[0]) + 1}/{blocks}{arm}")
            got[i] = _run_block(runner, arms[i])
        round_s = time.perf_counter() - started
        spent += round_s
        window.mark()
        got = {i: _with_window(got[i], window.others_share()) for i in order}
        b += 1
        evidence = [d for d in (_block_disturbance(got[i], arms[i].busy_limit) for i in order) if d]
        if b == 1:
            arms, filled = _size_blocks(arms, [got[i] for i in range(len(arms))])
            notes += [filled] if filled else []
        if b == 2:
            # The budget reads the second round: the first carries one-time start-up (the session's first block of
            # MobileNetV3 took 4.2 s for 13 executions of 2 ms: the runtime's import), which would cut the warm-up
            # of a model that fits the budget many times over.
            base = arms[0].blocks if looks is not None else blocks
            if reading_s is not None and budget > 0:
                reading = sum(reading_s(i, got[i]) for i in order)
            arms, fitted_blocks, fitted = _fit_budget(arms, round_s + reading, base)
            notes += [fitted] if fitted else []
            if looks is not None:
                looks = looks.within(fitted_blocks) if fitted else looks
                blocks = looks.last
            else:
                blocks = fitted_blocks
            # Blocks measured again count against the budget too: as many as the blocks that fit, not as asked (a
            # busy machine measured 1001 blocks again under a 5 s budget of 231).
            retries = min(retries, blocks)
        if evidence and retries > 0:
            retries -= 1
            disturbed_seen.append(evidence[0])
            if progress:
                progress(f"{what}: block disturbed ({evidence[0]}), measuring it again")
            continue
        for i in order:
            per_arm[i].append(got[i])
        rounds.append(f"{token}.{len(rounds)}")
        if not evidence and looks is not None and stop is not None and len(rounds) in looks.rounds[:-1]:
            why = stop(per_arm)
            if why:
                notes.append(f"stopped after {len(rounds)} of up to {looks.last} rounds: {why}")
                break
        if evidence:
            disturbed_seen.append(evidence[0])
            reason = (f"the machine stayed busy: {len(disturbed_seen)} blocks disturbed, {len(disturbed_seen) - 1} "
                      f"measured again (last: {evidence[0]}); the numbers are not the model's. Measure on a quiet "
                      "machine")
            return per_arm, "; ".join([*notes, _note(disturbed_seen)]), reason, tuple(rounds)
    return per_arm, "; ".join(n for n in [*notes, _note(disturbed_seen)] if n), "", tuple(rounds)


def _with_window(block: Block, window: tuple[float, float] | None) -> Block:
    """The runs of ``block``, those too short for their own host evidence given their window's (``HostWindow``)."""
    if window is None:
        return block
    share, seconds = window
    return [replace(r, load=replace(r.load, window_others_share=share, window_s=seconds))
            if r.load is not None and r.load.host_busy_share is None else r for r in block]


def _block_median(block: Block) -> float:
    """The median latency of one block (its untraced timing run when it has one): what the precision rule reads."""
    timing = [r for r in block if r.metadata.get("mode", "trace") == "timing"]
    measured = (timing or block)[0].measured_ms
    return statistics.median(measured) if measured else 0.0


def precision_plan(arms: Sequence[Measurement]) -> tuple[Looks | None, Callable[[list[list[Block]]], str] | None]:
    """The looks and the stop rule of measuring ``arms`` until their medians are precise (all arms ask for it)."""
    target = min(a.precision for a in arms)
    rule = Precision(target)
    looks = rule.looks(arms[0].blocks)
    if looks is None:
        return None, None

    def precise(per_arm: list[list[Block]]) -> str:
        return rule.reached([[_block_median(b) for b in blocks] for blocks in per_arm])

    return looks, precise


def _note(disturbed: list[str]) -> str:
    if not disturbed:
        return ""
    return f"re-measured {len(disturbed)} block(s) disturbed by other load (e.g. {disturbed[0]})"

