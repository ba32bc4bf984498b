"""Export -> run -> analyze: the one call both front ends (CLI and plugin) use.

A :class:`Measurement` says what to run and how (program, inputs, runner variant or build, runs, warm-up,
blocks, threads, and where the latency comes from); :func:`measure` runs it on a runner in blocks and
returns a :class:`Profile`: the gate's E2E samples in blocks, the per-operator analysis of the traced
runs, the device identity, the :class:`~pytest_sme2.store.artifacts.Artifact` measured, and the raw run
results. A Profile carries its Measurement, so it can always be measured again (:func:`remeasure`) —
checking one profile never touches another.

Two measurements compared in one session run in interleaved blocks (:func:`measure_pair`, ABBA...), so
drift hits both arms alike: SME2 off vs on (two runner builds), and a changed artifact vs the baseline's
own artifact (the gate's same-session reference).

**Latency and breakdown come from the runs whose tracing cost is known** (the seeds' two-run principle):
with ``latency="untraced"`` every block runs the program untraced (the local runtime with its tracer off,
or an executor_runner's timing-only build) for the gate's E2E samples and traced for the breakdown; with
``latency="traced"`` the traced runs give both (a runner that has only a traced build), and the profile
says that its latency includes the tracer's cost (:data:`TRACER_COST`). A third build, the XNNPACK-logging
one, is run once per model and session (:func:`record_kernel_log`); its log is attached to the analysis.
Every profile names where each came from: ``latency_source``, ``breakdown_source``, ``kernel_source``
(each ``"<what>: <detail>"``; see ``docs/run-modes.md``).

**A busy machine is not a slower model.** Every run reports how much of its wall time the measuring
thread (or runner process) was preempted, and the host's load and steal time. A block over the limits
below is measured again, up to ``blocks`` more times; if the machine stays busy the profile is invalid
with that evidence, which the gate reports as ``invalid``, never ``regression``.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TextIO

from pytest_sme2.analysis.run import Analysis, analyze_e2e, analyze_trace, merge
from pytest_sme2.device.codepaths import SHARED_OBJECTS, code_path_environment
from pytest_sme2.device.facts import device_facts
from pytest_sme2.device.identity import LATENCY_MODES, LATENCY_TRACED, LATENCY_UNTRACED, identity_of
from pytest_sme2.device.load import HostWindow
from pytest_sme2.errors import ConfigError, Sme2Error
from pytest_sme2.evidence.categories import CategoryRules
from pytest_sme2.evidence.kernels import KernelLog, parse_xnnpack_log
from pytest_sme2.evidence.memory import Memory, memory_of
from pytest_sme2.evidence.qemu_log import ExecutedKernels
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.gate.verdict import Samples
from pytest_sme2.measure.hostlock import heavy_work, measuring
from pytest_sme2.measure.sequential import Looks, Precision
from pytest_sme2.runners.base import (
    MODE_LOG,
    MODE_TIMING,
    MODE_TRACE,
    Runner,
    RunRequest,
    RunResult,
    build_option,
)
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

#: The version of how a measurement turns runs into numbers (which runs count, how they are timed and blocked, how
#: warm-up and disturbed blocks are handled). Bump it when that changes, as ``export.RECIPE_VERSION`` is bumped when
#: an export recipe changes: every artifact records it (``Artifact.recipe``), so a baseline measured by other
#: measuring code is a changed artifact, re-measured beside the candidate, never "unchanged".
MEASUREMENT_RECIPE = 1

#: A block whose measuring thread was preempted (or waited for a CPU) for more than this share of its wall
#: time ran on a busy machine (measured, MobileNetV3, 1 thread: quiet 0.1 %, one CPU burner on the two
#: cores 0.7 %, two burners 35 %; benchmarks/results/disturbance.txt).
PREEMPTED_LIMIT = 0.05
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

Progress = Callable[[str], None]


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


class ExportedLike(Protocol):
    """What profiling needs from an exported model (``export.ExportedModel`` satisfies it)."""

    # Read-only members: the exported model is a frozen dataclass, and profiling never changes it.
    @property
    def name(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def pte_path(self) -> Path: ...
    @property
    def input_files(self) -> tuple[Path, ...]: ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ProgramFile:
    """A ``.pte`` made elsewhere (not by :func:`~pytest_sme2.program.export.export_model`), profiled as it is.

    ``input_files`` are raw tensor files as ``executor_runner --inputs`` takes them (one per input);
    ``dtype`` and ``backend`` only label the results: nothing here can read them from the program.
    """

    pte_path: Path
    input_files: tuple[Path, ...] = ()
    dtype: str = "unknown"
    backend: str = "unknown"

    @property
    def name(self) -> str:
        return self.pte_path.stem

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "backend": self.backend, "pte_path": str(self.pte_path),
                "input_files": [str(p) for p in self.input_files]}


@dataclass(frozen=True)
class Measurement:
    """What to run and how: enough to measure a profile again, in this session or another."""

    pte: Path
    inputs: tuple[Path, ...] = ()
    #: a name for the files of this measurement (``<model>_<dtype>_<backend>``)
    label: str = ""
    #: model facts for reports (name, dtype, backend, pte_path, cache_key, ...)
    model: Mapping[str, Any] = field(default_factory=dict)
    variant: str | None = None
    #: a runner binary to run instead of the variant's (a stored reference build); None = the variant's
    build: Path | None = None
    #: the same for the variant's timing-only build (untraced latency on host/android)
    timing_build: Path | None = None
    runs: int = 30
    warmup: int = 3
    blocks: int = 5
    threads: int = 1
    timeout_s: float = 600.0
    out_dir: Path = Path("sme2_out")
    latency: str = LATENCY_TRACED
    #: a block preempted (or waiting for a CPU) for more than this share of its time is measured again;
    #: 1.0 switches the check off (see :func:`disturbance_of`)
    busy_limit: float = PREEMPTED_LIMIT
    #: seconds the blocks of one measurement may take (0 = no limit): a slow model gets fewer runs per block,
    #: then fewer blocks (never fewer than MIN_BLOCKS), decided from the second block's time (the first carries
    #: one-time start-up)
    time_budget_s: float = 0.0
    #: milliseconds the measured runs of a block should take (0 = exactly ``runs``): a model faster than that gets
    #: more runs per block after the first, its executions up to SHORT_BLOCK_RUNS_FACTOR x ``runs`` (see
    #: :func:`_size_blocks`)
    min_block_ms: float = 0.0
    #: milliseconds a block's executions, warm-up included, should take at most (0 = no limit): a slower model gets
    #: one warm-up and fewer runs per block after the first, never fewer than MIN_RUNS (see :func:`_size_blocks`)
    max_block_ms: float = 0.0
    #: the host's measuring lock (:mod:`pytest_sme2.measure.hostlock`): held for the blocks, so measurements of other
    #: processes on this host (xdist workers) never overlap them; None = not serialized
    lock_file: Path | None = None
    #: stop before ``blocks`` once the median is known to ± this share (:class:`measure.sequential.Precision`:
    #: looks after every block from the 6th); 0 = always measure every block
    precision: float = 0.0

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ConfigError(f"runs must be at least 1 (got {self.runs}); set --sme2-runs / --runs to a positive "
                              "number")
        if self.warmup < 0:
            raise ConfigError(f"warmup must be 0 or more (got {self.warmup}); set --sme2-warmup / --warmup")
        if self.blocks < 1:
            raise ConfigError(f"blocks must be at least 1 (got {self.blocks}); set --sme2-blocks / --blocks")
        if self.latency not in LATENCY_MODES:
            raise ConfigError(f"latency must be one of {', '.join(LATENCY_MODES)} (got {self.latency!r})")
        if not 0 <= self.precision < 1:
            raise ConfigError(f"precision must be a share from 0 (measure every block) to below 1 (got "
                              f"{self.precision}); set --sme2-precision to a percentage such as 2.5, or 0")

    @classmethod
    def of(cls, exported: ExportedLike, **kwargs: Any) -> Measurement:
        """The measurement of an exported model (or a :class:`ProgramFile`)."""
        model = {k: v for k, v in exported.to_dict().items() if k in
                 ("name", "dtype", "backend", "pte_path", "cache_key", "executorch_version", "input_shapes")}
        label = kwargs.pop("label", None) or f"{exported.name}_{exported.dtype}_{exported.backend}"
        return cls(pte=exported.pte_path, inputs=tuple(exported.input_files), label=label, model=model, **kwargs)

    def request(self, mode: str) -> RunRequest:
        build = {MODE_TRACE: self.build, MODE_TIMING: self.timing_build}.get(mode)
        return RunRequest(pte=self.pte, runs=self.runs, warmup=self.warmup, threads=self.threads,
                          out_dir=self.out_dir, inputs=self.inputs or None, variant=self.variant,
                          timeout_s=self.timeout_s, label=self.label, mode=mode, build=build)

    def recipe(self) -> dict[str, Any]:
        """How this measurement makes its numbers, for its artifact: the measuring code's version
        (:data:`MEASUREMENT_RECIPE`) and the runs and warm-up per block asked for (``--sme2-runs``,
        ``--sme2-warmup``; a time budget's shrinking is the machine's, not the recipe's)."""
        return {"measurement_recipe": MEASUREMENT_RECIPE, "runs": self.runs, "warmup": self.warmup}

    @property
    def modes(self) -> tuple[str, ...]:
        """The runs of one block: an untraced timing run then a traced one, or one traced run."""
        return ("timing", "trace") if self.latency == LATENCY_UNTRACED else ("trace",)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pte": str(self.pte), "inputs": [str(p) for p in self.inputs], "label": self.label,
            "model": dict(self.model), "variant": self.variant, "build": str(self.build) if self.build else None,
            "timing_build": str(self.timing_build) if self.timing_build else None, "runs": self.runs,
            "warmup": self.warmup, "blocks": self.blocks, "threads": self.threads,
            "timeout_s": self.timeout_s, "out_dir": str(self.out_dir), "latency": self.latency,
            "busy_limit": self.busy_limit, "time_budget_s": self.time_budget_s, "min_block_ms": self.min_block_ms,
            "max_block_ms": self.max_block_ms,
            "lock_file": str(self.lock_file) if self.lock_file else None, "precision": self.precision,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Measurement:
        return cls(
            pte=Path(d["pte"]), inputs=tuple(Path(p) for p in d.get("inputs", ())), label=str(d.get("label", "")),
            model=dict(d.get("model", {})), variant=d.get("variant"),
            build=Path(d["build"]) if d.get("build") else None,
            timing_build=Path(d["timing_build"]) if d.get("timing_build") else None, runs=int(d["runs"]),
            warmup=int(d["warmup"]),
            blocks=int(d["blocks"]), threads=int(d["threads"]), timeout_s=float(d.get("timeout_s", 600.0)),
            out_dir=Path(d.get("out_dir", "sme2_out")), latency=str(d.get("latency", LATENCY_TRACED)),
            busy_limit=float(d.get("busy_limit", PREEMPTED_LIMIT)), time_budget_s=float(d.get("time_budget_s", 0.0)),
            min_block_ms=float(d.get("min_block_ms", 0.0)), max_block_ms=float(d.get("max_block_ms", 0.0)),
            lock_file=Path(d["lock_file"]) if d.get("lock_file") else None,
            precision=float(d.get("precision", 0.0)),
        )


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


def _measure_blocks(
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


def _precision_plan(arms: Sequence[Measurement]) -> tuple[Looks | None, Callable[[list[list[Block]]], str] | None]:
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
        kernels = (f"emulator: the exported functions QEMU executed in one execution ({executed.source}); "
                   "what ran, not how long")
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


def _profile(runner: Runner, measurement: Measurement, blocks: list[Block], *, kernel_log: KernelLog | None,
             rules: CategoryRules | None, disturbance: str, invalid: str,
             executed: ExecutedKernels | None = None, rounds: tuple[str, ...] = (),
             analyzed: dict[int, Analysis] | None = None) -> Profile:
    """The profile of ``blocks``. ``analyzed``: each run's analysis by ``id(run)``, filled and reused, for a caller
    that profiles a growing list of the same runs with the same ``kernel_log``, ``rules`` and ``executed`` (the looks
    of :func:`measure_pair`); the caller keeps the runs alive, so their ids are theirs."""
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


def _reading_time(logs: Sequence[KernelLog | None], rules: CategoryRules | None,
                  executed: Sequence[ExecutedKernels | None]) -> Callable[[int, Block], float]:
    """``reading_s(arm, block)`` for :func:`_measure_blocks`' time budget: reads the block's traces as
    :func:`_profile` will and returns the seconds. Nothing is kept: a block measured again is dropped, and an
    analysis cached by ``id`` could then be handed to a later run that took its id."""
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
    looks, stop = _precision_plan([measurement])
    with measuring(measurement.lock_file, what=measurement.label, progress=progress):
        (blocks,), note, invalid, rounds = _measure_blocks(
            runner, [measurement], blocks=measurement.blocks, progress=progress, what=measurement.label, looks=looks,
            stop=stop, reading_s=_reading_time([kernel_log], rules, [executed]))
    # Reading the traces is seconds of CPU for a big model: not beside another worker's measurement.
    with heavy_work(measurement.lock_file, what=f"{measurement.label}: analysis", progress=progress):
        return _profile(runner, measurement, blocks, kernel_log=kernel_log, rules=rules, disturbance=note,
                        invalid=invalid, executed=executed, rounds=rounds)


def measure_pair(runner: Runner, a: Measurement, b: Measurement, *, kernel_logs: Sequence[KernelLog | None] = (),
                 rules: CategoryRules | None = None, progress: Progress | None = None,
                 what: str = "", executed: Sequence[ExecutedKernels | None] = (), looks: Looks | None = None,
                 stop: Callable[[Profile, Profile], bool] | None = None) -> tuple[Profile, Profile]:
    """Measure ``a`` and ``b`` in interleaved blocks (A,B / B,A / ...); returns their profiles.

    With ``looks`` and ``stop`` the pair is measured group-sequentially (:mod:`pytest_sme2.measure.sequential`): at each
    look before the last, ``stop(profile of a, profile of b)`` on the rounds so far may end it (the verdict is
    settled). Without them, a pair whose arms ask for a precision stops once both medians are that precise.
    """
    if a.blocks != b.blocks:
        raise ConfigError(f"an interleaved comparison needs the same number of blocks per arm ({a.blocks} != "
                          f"{b.blocks})")
    label = what or f"{a.label} vs {b.label}"
    logs = [*list(kernel_logs), None, None]
    ran = [*list(executed), None, None]

    # Every run is analyzed once: a look profiles the rounds so far, the result all of them, from the same analyses.
    analyzed: tuple[dict[int, Analysis], dict[int, Analysis]] = ({}, {})

    def settled(per_arm: list[list[Block]]) -> str:  # passed to _measure_blocks only when there is a ``stop``
        assert stop is not None and looks is not None
        so_far = [_profile(runner, m, blocks, kernel_log=logs[i], rules=rules, disturbance="", invalid="",
                           executed=ran[i], analyzed=analyzed[i])
                  for i, (m, blocks) in enumerate(zip((a, b), per_arm, strict=True))]
        return (f"the verdict was settled (looks at {', '.join(map(str, looks.rounds))} rounds, {looks.per_look:.2%} "
                "each)") if stop(so_far[0], so_far[1]) else ""

    rule: Callable[[list[list[Block]]], str] | None = settled if stop else None
    if stop is None:
        looks, rule = _precision_plan([a, b])
    with measuring(a.lock_file or b.lock_file, what=label, progress=progress):
        (blocks_a, blocks_b), note, invalid, rounds = _measure_blocks(
            runner, [a, b], blocks=a.blocks, progress=progress, what=label, looks=looks, stop=rule,
            reading_s=_reading_time(logs, rules, ran))
    with heavy_work(a.lock_file or b.lock_file, what=f"{label}: analysis", progress=progress):
        return (_profile(runner, a, blocks_a, kernel_log=logs[0], rules=rules, disturbance=note, invalid=invalid,
                         executed=ran[0], rounds=rounds, analyzed=analyzed[0]),
                _profile(runner, b, blocks_b, kernel_log=logs[1], rules=rules, disturbance=note, invalid=invalid,
                         executed=ran[1], rounds=rounds, analyzed=analyzed[1]))


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
