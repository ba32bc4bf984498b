"""Assembling a Profile: export -> run -> analyze, the one call both front ends (CLI and plugin) use.

A :class:`~pytest_sme2.measure.recipe.Measurement` says what to run and how; :func:`measure` runs it on a runner in
blocks (:mod:`pytest_sme2.measure.blocks`) and returns a :class:`Profile`: the gate's E2E samples in blocks, the
per-operator analysis of the traced runs, the device identity, the :class:`~pytest_sme2.store.artifacts.Artifact`
measured, and the raw run results. A Profile carries its Measurement, so it can always be measured again
(:func:`remeasure`) — checking one profile never touches another. Two measurements compared in one session are
measured together, interleaved: :func:`pytest_sme2.measure.pair.measure_pair`.

**Latency and breakdown come from the runs whose tracing cost is known** (the seeds' two-run principle):
with ``latency="untraced"`` every block runs the program untraced (the local runtime with its tracer off,
or an executor_runner's timing-only build) for the gate's E2E samples and traced for the breakdown; with
``latency="traced"`` the traced runs give both (a runner that has only a traced build), and the profile
says that its latency includes the tracer's cost (:data:`TRACER_COST`). A third build, the XNNPACK-logging
one, is run once per model and session (:func:`record_kernel_log`); its log is attached to the analysis.
Every profile names where each came from: ``latency_source``, ``breakdown_source``, ``kernel_source``
(each ``"<what>: <detail>"``; see ``docs/run-modes.md``). A measurement whose machine stayed busy is an invalid
profile with the evidence (:func:`~pytest_sme2.measure.blocks.disturbance_of`).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from pytest_sme2.analysis.run import Analysis, analyze_e2e, analyze_trace, merge
from pytest_sme2.device.codepaths import SHARED_OBJECTS, code_path_environment
from pytest_sme2.device.facts import device_facts
from pytest_sme2.device.identity import LATENCY_TRACED, identity_of
from pytest_sme2.errors import ConfigError, Sme2Error
from pytest_sme2.evidence.categories import CategoryRules
from pytest_sme2.evidence.instructions import InstructionCounts
from pytest_sme2.evidence.kernels import KernelLog, parse_xnnpack_log
from pytest_sme2.evidence.memory import Memory, memory_of
from pytest_sme2.evidence.qemu_log import ExecutedKernels
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.gate.verdict import Samples
from pytest_sme2.measure.blocks import Block, measure_blocks, precision_plan
from pytest_sme2.measure.counts import WARMUP
from pytest_sme2.measure.hostlock import heavy_work, measuring
from pytest_sme2.measure.recipe import PREEMPTED_LIMIT, ExportedLike, Measurement
from pytest_sme2.progress import Progress
from pytest_sme2.runners.base import MODE_LOG, MODE_TRACE, CountedRun, Runner, RunResult, build_option
from pytest_sme2.store.artifacts import Artifact, artifact_of

SCHEMA_VERSION = 2


#: What the event tracer costs, as measured, per runner kind: said wherever latency comes from traced runs.
TRACER_COST = {
    "local": ("the event tracer costs ~0.3-0.8 µs per operator event on the local runtime (measured: "
              "benchmarks/results/tracing_overhead.txt), below this VM's noise for the example models"),
    "executor_runner": ("the event tracer costs ~0.5-1 µs per recorded operator event (measured on a v1.4.1 "
                        "executor_runner built with and without it: +4-16 µs per execution, 10-40 % of a 30-120 µs "
                        "model, negligible for ms-scale models); give timing-only builds (--sme2-runner-timing) to "
                        "take latency without it"),
}


#: Seconds between two "still running" lines of a long step in a log (not a terminal): a CI log shows it is alive.
LOG_HEARTBEAT_S = 30.0


def elapsed_text(seconds: float) -> str:
    """``1:05 elapsed``."""
    s = int(seconds)
    return f"{s // 60}:{s % 60:02d} elapsed"


class StreamProgress:
    """Progress lines (``[sme2] ...``) to a stream, for the CLI: what it is doing (model, arm, block i of n), and while
    a runner process runs (:meth:`tick`, its :attr:`~pytest_sme2.runners.host.HostRunner.heartbeat`), how long it has
    been at it — on a terminal in one line rewritten in place, in a log a line every :data:`LOG_HEARTBEAT_S`.
    ``stream`` None = whatever ``sys.stderr`` is when written."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._text = ""
        self._since = self._logged = 0.0
        self._live = False  # a transient line is on the terminal

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def __call__(self, message: str) -> None:
        self._end_live()
        print(f"[sme2] {message}", file=self.stream, flush=True)
        self._text, self._since = message, time.monotonic()
        self._logged = self._since

    def tick(self) -> None:
        if not self._text:
            return
        now = time.monotonic()
        if self._isatty():
            self.stream.write(f"\r\x1b[K[sme2] {self._text}, {elapsed_text(now - self._since)}")
            self.stream.flush()
            self._live = True
        elif now - self._logged >= LOG_HEARTBEAT_S:
            print(f"[sme2] {self._text}: still running, {elapsed_text(now - self._since)}", file=self.stream,
                  flush=True)
            self._logged = now

    def done(self) -> None:
        """The step ended: erase the line :meth:`tick` rewrote (what follows, e.g. results on stdout, starts clean)."""
        self._end_live()
        self._text = ""

    def _end_live(self) -> None:
        if self._live:
            self.stream.write("\r\x1b[K")
            self._live = False

    def _isatty(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return bool(callable(isatty) and isatty())


def progress_to(stream: TextIO) -> StreamProgress:
    """Progress lines (``[sme2] ...``) to ``stream``, chosen once."""
    return StreamProgress(stream)


#: Progress lines to whatever ``sys.stderr`` is when they are written.
stderr_progress = StreamProgress()

@dataclass(frozen=True)
class Profile:
    """One program measured on one runner build: latency samples, analysis, identity, artifact, raw runs.

    ``latency_ms`` (in ``latency_blocks``) are the gate's E2E samples; ``analysis`` is the breakdown of
    the traced runs (its own E2E statistics are those of the traced runs) with the XNNPACK kernel log of
    the arm's log build, if any. ``latency_source``, ``breakdown_source`` and ``kernel_source`` say where
    each came from, as ``"<what>: <detail>"`` (:func:`source_head` is the part before the colon).
    """

    model: Mapping[str, Any]
    variant: str | None
    runner: str
    build: str
    threads: int
    #: what a baseline is keyed on (:func:`device.identity.identity_of`); older files call it "fingerprint"
    identity: Mapping[str, Any]
    analysis: Analysis
    runs: tuple[RunResult, ...] = ()
    device: Mapping[str, Any] = field(default_factory=dict)
    invalid_reason: str = ""
    note: str = ""
    latency_ms: tuple[float, ...] = ()
    latency_blocks: tuple[int, ...] = ()
    latency_source: str = ""
    artifact: Artifact | None = None
    measurement: Measurement | None = None
    #: what the disturbance check did (re-measured blocks and why), "" when nothing happened
    disturbance: str = ""
    breakdown_source: str = ""
    kernel_source: str = ""
    #: why this arm has no XNNPACK kernel log ("" when it has one, or when the kernels QEMU executed stand in)
    no_kernel_log: str = ""
    #: planned memory, program size, load time and peak memory per block (:mod:`pytest_sme2.evidence.memory`); None
    #: for a profile stored before they were measured
    memory: Memory | None = None
    #: the id of the round each block ran in (:attr:`pytest_sme2.gate.verdict.Samples.rounds`): arms of one interleaved
    #: measurement share them, and the gate judges them paired
    rounds: tuple[str, ...] = ()
    #: instructions executed under emulation by one execution (:func:`record_counted_run`); None = not counted
    instructions: InstructionCounts | None = None

    @property
    def samples_ms(self) -> tuple[float, ...]:
        return self.latency_ms or self.analysis.measured_ms

    @property
    def block_sizes(self) -> tuple[int, ...]:
        return self.latency_blocks if self.latency_ms else self.analysis.block_sizes

    @property
    def per_operator(self) -> bool:
        return self.analysis.per_operator

    @property
    def extra_builds(self) -> bool:
        """Whether runs besides the traced build's gave numbers: untraced latency runs (a timing build, or the local
        runtime's tracer off) or an XNNPACK-logging build's kernel table."""
        return bool(self.latency_ms) or self.analysis.kernel_log is not None

    def samples(self) -> Samples:
        cats = self.analysis.category_per_run_ms if self.analysis.per_operator else {}
        cat_blocks = (self.analysis.block_sizes or (self.analysis.runs_measured,)) if cats else ()
        return Samples(self.samples_ms, self.block_sizes, cats, cat_blocks, self.invalid_reason,
                       category_operators=self.analysis.delegated_operators if cats else {},
                       rounds=self.rounds if len(self.rounds) == len(self.block_sizes) else ())

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "model": dict(self.model),
            "variant": self.variant,
            "runner": self.runner,
            "build": self.build,
            "threads": self.threads,
            "identity": dict(self.identity),
            "device": dict(self.device),
            "invalid_reason": self.invalid_reason,
            "note": self.note,
            "latency_ms": list(self.latency_ms),
            "latency_blocks": list(self.latency_blocks),
            "latency_source": self.latency_source,
            "breakdown_source": self.breakdown_source,
            "kernel_source": self.kernel_source,
            "no_kernel_log": self.no_kernel_log,
            "artifact": self.artifact.to_dict() if self.artifact else None,
            "measurement": self.measurement.to_dict() if self.measurement else None,
            "disturbance": self.disturbance,
            "rounds": list(self.rounds),
            "analysis": self.analysis.to_dict(),
            "runs": [r.to_dict() for r in self.runs],
            "memory": self.memory.to_dict() if self.memory else None,
            **({"instructions": self.instructions.to_dict()} if self.instructions else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Profile:
        art, meas = d.get("artifact"), d.get("measurement")
        return cls(
            model=dict(d.get("model", {})), variant=d.get("variant"), runner=str(d["runner"]),
            build=str(d.get("build", "")), threads=int(d.get("threads", 1)),
            identity=stored_identity(d), analysis=Analysis.from_dict(d["analysis"]),
            runs=tuple(RunResult.from_dict(r) for r in d.get("runs", [])), device=device_facts(d.get("device", {})),
            invalid_reason=str(d.get("invalid_reason", "")), note=str(d.get("note", "")),
            latency_ms=tuple(float(x) for x in d.get("latency_ms", ())),
            latency_blocks=tuple(int(n) for n in d.get("latency_blocks", ())),
            latency_source=str(d.get("latency_source", "")),
            breakdown_source=str(d.get("breakdown_source", "")),
            kernel_source=str(d.get("kernel_source", "")),
            no_kernel_log=str(d["no_kernel_log"]) if "no_kernel_log" in d else _old_no_log(d),
            artifact=Artifact.from_dict(art) if art else None,
            measurement=Measurement.from_dict(meas) if meas else None,
            disturbance=str(d.get("disturbance", "")),
            memory=Memory.maybe(d.get("memory")),
            rounds=tuple(str(r) for r in d.get("rounds", ())),
            instructions=InstructionCounts.from_dict(d["instructions"]) if d.get("instructions") else None,
        )


def _old_no_log(d: Mapping[str, Any]) -> str:
    """Why a profile from a results file written before ``no_kernel_log`` existed had no kernel log: its kernel
    source then read ``"none: <why>"``."""
    head, _, why = str(d.get("kernel_source", "")).partition(": ")
    return why if head == "none" else ""


def stored_identity(profile: Mapping[str, Any]) -> dict[str, Any]:
    """The identity a stored profile (``Profile.to_dict()``) records: under ``"identity"``, or under ``"fingerprint"``
    in files written before the two names became one; empty when it records neither."""
    value = profile.get("identity", profile.get("fingerprint"))
    return dict(value) if isinstance(value, Mapping) else {}


def record_kernel_log(runner: Runner, measurement: Measurement) -> KernelLog:
    """Run the program once on ``measurement``'s XNNPACK-logging build and parse the log it wrote.

    The log names the micro-kernels XNNPACK selected on this device (and, at debug level, the operators it
    ran); its numbers are not used. Callers run it once per build and model (the plugin caches it).
    """
    request = replace(measurement.request(MODE_LOG), runs=1, warmup=0, label=f"{measurement.label}_xnnlog")
    with heavy_work(measurement.lock_file, what=f"{measurement.label}: the XNNPACK log run"):
        result = runner.run(request)  # unmeasured, but a run beside a sibling's measurement would disturb it
    if result.log_path is None:
        raise Sme2Error(f"the {runner.name} runner's log run of {measurement.pte.name} returned no log file")
    text = result.log_path.read_text(encoding="utf-8", errors="replace")
    return parse_xnnpack_log(text, source=str(result.log_path), build=result.build)


def record_executed_kernels(runner: Runner, measurement: Measurement) -> ExecutedKernels | None:
    """On an emulated device, the kernels that executed in one execution of ``measurement`` (QEMU's own log of
    the code it translated, mapped to the libraries' exported symbols); None on a runner that cannot tell."""
    if not runner.records_executed:
        return None
    with heavy_work(measurement.lock_file, what=f"{measurement.label}: the QEMU in_asm run"):
        result = runner.record_executed(replace(measurement.request(MODE_TRACE), runs=1, warmup=0,
                                label=f"{measurement.label}_in_asm"))
    return result if isinstance(result, ExecutedKernels) else None


def record_counted_run(runner: Runner, measurement: Measurement) -> CountedRun | None:
    """On an emulated device that counts (:meth:`~pytest_sme2.runners.qemu.QemuRunner.record_counted`), the
    instructions one execution of ``measurement`` executes under emulation, as ``pytest-sme2 count`` counts them
    (:data:`~pytest_sme2.measure.counts.WARMUP` warm-up execution first: the first one packs and plans), and the
    kernels that process ran; None on a runner that cannot count."""
    if not runner.records_counts:
        return None
    with heavy_work(measurement.lock_file, what=f"{measurement.label}: counting instructions under QEMU"):
        return runner.record_counted(replace(measurement.request(MODE_TRACE), runs=1, warmup=WARMUP,
                                             label=f"{measurement.label}_counts"))


# ------------------------------------------------------------------------------------------ measuring


def analyze_run(result: RunResult, *, warmup: int, kernel_log: KernelLog | None = None,
                rules: CategoryRules | None = None, executed: ExecutedKernels | None = None) -> Analysis:
    """Analyze one run: from its trace when it has one, else from its E2E samples alone.

    A trace's operator names are also the SME evidence of the run (:func:`~pytest_sme2.analysis.run.analyze_trace`:
    XNNPACK's packed-LHS operators are its SME/KleidiAI path), on every device, at no cost.
    """
    if result.trace_path is not None:
        timeline = read_etdump(result.trace_path, rules=rules) if rules else read_etdump(result.trace_path)
        return analyze_trace(timeline, warmup=warmup, kernel_log=kernel_log, executed_kernels=executed)
    return analyze_e2e(result.e2e_ms, warmup=warmup, source=f"{result.runner} runtime ({result.build})")


def source_head(source: str) -> str:
    """The short part of a ``"<what>: <detail>"`` source text (what the terminal shows)."""
    return source.split(": ", 1)[0]


def _cost_of_tracer(runner: Runner) -> str:
    return TRACER_COST["local" if runner.in_process else "executor_runner"]


def _sources(runner: Runner, measurement: Measurement, analysis: Analysis, *, traced: list[RunResult],
             timing: list[RunResult], kernel_log: KernelLog | None) -> tuple[str, str, str, str]:
    """Where the latency, the breakdown and the kernel table came from, each as ``"<what>: <detail>"``, and why the
    arm has no kernel log ("" when it has one, or when the kernels QEMU executed stand in)."""
    local = runner.in_process  # the executorch runtime in this process, not a runner binary
    first = traced[0] if traced else None
    if timing:
        what = "local runtime, untraced runs" if local else "timing build"
        latency = (f"{what}: {timing[0].build}; untraced, one run beside each traced run of the same blocks (the "
                   "breakdown)")
    elif analysis.per_operator and first is not None:
        what = "local runtime, traced runs" if local else "trace build"
        latency = (f"{what} (latency includes the tracer's cost): {first.build}; {_cost_of_tracer(runner)}")
    else:
        latency = (f"{'local runtime' if local else 'runner'} runs without a per-operator trace: "
                   f"{first.build if first is not None else runner.name}")
    if analysis.per_operator and first is not None:
        breakdown = f"{'local runtime, traced runs' if local else 'trace build'}: {first.build}"
    else:
        note = next((r.per_operator_note for r in traced if r.per_operator_note), "")
        breakdown = f"none: no per-operator trace{f' ({note})' if note else ''}"
    if runner.emulated:
        latency = f"emulated time (QEMU, not device time), {latency}"
    executed = analysis.executed_kernels
    missing = ""
    if kernel_log is not None:
        kernels = f"log build: {kernel_log.build or 'unknown build'}, log {kernel_log.source}"
    elif executed is not None:
        kernels = f"emulator: the exported functions QEMU executed ({executed.source}); what ran, not how long"
    else:
        if local:
            missing = ("the local runtime cannot record an XNNPACK log (the executorch wheel's XNNPACK is built "
                       "without logging)")
        elif not runner.has_build(measurement.variant, MODE_LOG):
            missing = (f"no XNNPACK-logging build for this arm ({build_option(MODE_LOG, measurement.variant)}), so "
                       "which kernels ran is not recorded")
        else:
            missing = "the log build was not run for this measurement"
        kernels = f"none: {missing}"
    return latency, breakdown, kernels, missing


def profile_of(runner: Runner, measurement: Measurement, blocks: list[Block], *, kernel_log: KernelLog | None,
             rules: CategoryRules | None, disturbance: str, invalid: str,
             executed: ExecutedKernels | None = None, rounds: tuple[str, ...] = (),
             analyzed: dict[int, Analysis] | None = None) -> Profile:
    """The profile of ``blocks``. ``analyzed``: each run's analysis by ``id(run)``, filled and reused, for a caller
    that profiles a growing list of the same runs with the same ``kernel_log``, ``rules`` and ``executed`` (the looks
    of :func:`~pytest_sme2.measure.pair.measure_pair`); the caller keeps the runs alive, so their ids are theirs."""
    traced = [r for block in blocks for r in block if r.metadata.get("mode", "trace") != "timing"]
    timing = [r for block in blocks for r in block if r.metadata.get("mode", "trace") == "timing"]

    known = {} if analyzed is None else analyzed
    for r in traced:
        if id(r) not in known:  # each run's own warm-up: a time budget may have cut it after the second block
            known[id(r)] = analyze_run(r, warmup=r.warmup, kernel_log=kernel_log, rules=rules, executed=executed)
    analyses = [known[id(r)] for r in traced]
    analysis = merge(analyses, source=measurement.pte.name) if len(analyses) > 1 else analyses[0]
    reasons = [str(r.metadata["invalid_reason"]) for block in blocks for r in block if r.metadata.get("invalid_reason")]
    if invalid:
        reasons.append(invalid)
    notes = dict.fromkeys(r.per_operator_note for r in traced if r.per_operator_note)
    first = traced[0] if traced else blocks[0][0]  # the build that gave the breakdown names the profile's build
    device = first.metadata.get("device", {})
    if timing:
        latency = tuple(x for r in timing for x in r.measured_ms)
        latency_blocks = tuple(len(r.measured_ms) for r in timing)
    else:
        latency, latency_blocks = (), ()
    source, breakdown, kernels, no_log = _sources(runner, measurement, analysis, traced=traced, timing=timing,
                                        kernel_log=kernel_log)
    libraries = {path: sha for block in blocks for r in block for path, sha in r.metadata.get("libraries", {}).items()}
    mapped = [r.metadata[SHARED_OBJECTS] for block in blocks for r in block if SHARED_OBJECTS in r.metadata]
    objects = {name: sha for runs in mapped for name, sha in runs.items()} if mapped else None
    # The environment of a process on this host; a phone's runner has its own, not read here.
    environment = code_path_environment() if runner.on_this_host else None
    # Memory from the runs that give the latency (untraced when there are such: the tracer's buffers are no part of
    # the model's footprint): one program load and one process peak per block.
    try:
        memory: Memory | None = memory_of(
            measurement.pte, [r.metadata for r in (timing or traced)],
            method=str(first.metadata["method"]) if first.metadata.get("method") else None)
    except Sme2Error:
        memory = None  # a program this reader cannot read: memory is not measured (and not gated), never guessed
    return Profile(
        model=dict(measurement.model), variant=measurement.variant, runner=runner.name, build=first.build,
        threads=measurement.threads, identity=identity_of(runner, measurement), analysis=analysis,
        runs=tuple(r for block in blocks for r in block), device=device if isinstance(device, Mapping) else {},
        invalid_reason="; ".join(dict.fromkeys(reasons)), note=" ".join(notes), latency_ms=latency,
        latency_blocks=latency_blocks, latency_source=source,
        artifact=artifact_of(runner, measurement, libraries=libraries, shared_objects=objects,
                             environment=environment, executions=_executions(blocks, timing or traced)),
        measurement=measurement, disturbance=disturbance, breakdown_source=breakdown, kernel_source=kernels,
        no_kernel_log=no_log,
        memory=memory,
        rounds=rounds if len(rounds) == len(blocks) else (),
    )


def _executions(blocks: list[Block], latency_runs: list[RunResult]) -> dict[str, int] | None:
    """The warm-up and runs per block the latency came from, after block sizing (the blocks after the first, which
    sizing may have changed): the most common of them; None without runs."""
    later = [r for r in latency_runs if not any(r is first for first in blocks[0])] if len(blocks) > 1 else []
    counts = Counter((r.warmup, len(r.measured_ms)) for r in (later or latency_runs))
    if not counts:
        return None
    (warmup, runs), _ = counts.most_common(1)[0]
    return {"warmup": warmup, "runs": runs}


def reading_time(logs: Sequence[KernelLog | None], rules: CategoryRules | None,
                  executed: Sequence[ExecutedKernels | None]) -> Callable[[int, Block], float]:
    """``reading_s(arm, block)`` for :func:`~pytest_sme2.measure.blocks.measure_blocks`' time budget: reads the
    block's traces as :func:`profile_of` will and returns the seconds. Nothing is kept: a block measured again is
    dropped, and an analysis cached by ``id`` could then be handed to a later run that took its id."""
    def reading_s(arm: int, block: Block) -> float:
        started = time.perf_counter()
        for r in block:
            if r.metadata.get("mode", "trace") != "timing":
                analyze_run(r, warmup=r.warmup, kernel_log=logs[arm], rules=rules, executed=executed[arm])
        return time.perf_counter() - started

    return reading_s


def measure(runner: Runner, measurement: Measurement, *, kernel_log: KernelLog | None = None,
            rules: CategoryRules | None = None, progress: Progress | None = None,
            executed: ExecutedKernels | None = None) -> Profile:
    """Run ``measurement`` in its blocks on ``runner`` and analyze it (``executed``: the kernels an emulator saw
    run, :func:`record_executed_kernels`)."""
    looks, stop = precision_plan([measurement])
    with measuring(measurement.lock_file, what=measurement.label, progress=progress):
        (blocks,), note, invalid, rounds = measure_blocks(
            runner, [measurement], blocks=measurement.blocks, progress=progress, what=measurement.label, looks=looks,
            stop=stop, reading_s=reading_time([kernel_log], rules, [executed]))
    # Reading the traces is seconds of CPU for a big model: not beside another worker's measurement.
    with heavy_work(measurement.lock_file, what=f"{measurement.label}: analysis", progress=progress):
        return profile_of(runner, measurement, blocks, kernel_log=kernel_log, rules=rules, disturbance=note,
                        invalid=invalid, executed=executed, rounds=rounds)


def remeasure(runner: Runner, profile: Profile, *, rules: CategoryRules | None = None,
              progress: Progress | None = None) -> Profile:
    """Measure ``profile`` again, exactly as it was measured (its own program, build and settings)."""
    if profile.measurement is None:
        raise ConfigError("this profile does not say how it was measured (it was read from an old results file)")
    return measure(runner, profile.measurement, rules=rules, progress=progress)


# ------------------------------------------------------------------------------------------ front-end calls


def profile_exported(
    exported: ExportedLike,
    runner: Runner,
    *,
    runs: int,
    warmup: int = 1,
    threads: int = 1,
    out_dir: Path = Path("sme2_out"),
    variant: str | None = None,
    blocks: int = 1,
    timeout_s: float = 600.0,
    kernel_log: KernelLog | None = None,
    label: str | None = None,
    latency: str = LATENCY_TRACED,
    rules: CategoryRules | None = None,
    progress: Progress | None = None,
    busy_limit: float = PREEMPTED_LIMIT,
    lock_file: Path | None = None,
    time_budget_s: float = 0.0,
) -> Profile:
    """Run ``exported`` on ``runner`` in ``blocks`` blocks of ``warmup + runs`` executions, then analyze.

    ``busy_limit``: share of a block (0.05 = 5 %) the runtime may be preempted before it is measured again.
    ``lock_file``: the host's measuring lock (:mod:`pytest_sme2.measure.hostlock`), held for the blocks; None = none.
    ``time_budget_s``: seconds the measurement may take (0 = no limit), as the plugin's ``--sme2-time-budget``."""
    m = Measurement.of(exported, runs=runs, warmup=warmup, threads=threads, out_dir=out_dir, variant=variant,
                       blocks=blocks, timeout_s=timeout_s, label=label, latency=latency, busy_limit=busy_limit,
                       lock_file=lock_file, time_budget_s=time_budget_s)
    return measure(runner, m, kernel_log=kernel_log, rules=rules, progress=progress)
