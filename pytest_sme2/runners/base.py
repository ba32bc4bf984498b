"""The Runner interface and the one result type every runner returns.

A runner takes a :class:`RunRequest` (a ``.pte``, how many executions, threads, where to put
files) and returns a :class:`RunResult` (per-execution end-to-end times, the trace if the runtime
recorded one, and facts about the build that produced them). Local runtime, host
``executor_runner`` and Android device all look the same from above.
"""

from __future__ import annotations

import platform
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pytest_sme2.device.load import BlockLoad
from pytest_sme2.errors import ConfigError
from pytest_sme2.store.files import file_sha256

if TYPE_CHECKING:
    from pytest_sme2.device.facts import DeviceInfo
    from pytest_sme2.evidence.instructions import InstructionCounts
    from pytest_sme2.evidence.qemu_log import ExecutedKernels

SCHEMA_VERSION = 1

#: Variant names for the two runner builds of an on/off comparison.
SME2_ON = "sme2_on"
SME2_OFF = "sme2_off"

#: What a run records (``RunRequest.mode``). ``timing``: end-to-end time only, no tracer, nothing
#: but the clock between the executions; ``trace``: an ETDump with per-operator events (the tracer
#: costs a little time per event); ``log``: a kernel-selection log from a logging build.
MODE_TIMING = "timing"
MODE_TRACE = "trace"
MODE_LOG = "log"
MODES = (MODE_TIMING, MODE_TRACE, MODE_LOG)

#: The option that gives each runner build: (mode, SME2-off arm?) -> flag.
BUILD_OPTIONS = {
    (MODE_TRACE, False): "--sme2-runner", (MODE_TRACE, True): "--sme2-runner-off",
    (MODE_TIMING, False): "--sme2-runner-timing", (MODE_TIMING, True): "--sme2-runner-off-timing",
    (MODE_LOG, False): "--sme2-runner-log", (MODE_LOG, True): "--sme2-runner-off-log",
}
#: What each kind of build is (for messages and docs/run-modes.md).
BUILD_KINDS = {
    MODE_TRACE: "traced build (-DEXECUTORCH_BUILD_DEVTOOLS=ON -DEXECUTORCH_ENABLE_EVENT_TRACER=ON)",
    MODE_TIMING: "timing-only build (no event tracer; -DEXECUTORCH_ENABLE_LOGGING=ON for its Iteration lines)",
    MODE_LOG: "XNNPACK-logging build (Debug, XNN_LOG_LEVEL=5)",
}


def build_option(mode: str, variant: str | None) -> str:
    """The ``--sme2-runner*`` flag that gives the ``mode`` build of ``variant`` (SME2 on = the default build)."""
    return BUILD_OPTIONS[(mode, variant == SME2_OFF)]


@dataclass(frozen=True)
class RunRequest:
    """What to run: one ``.pte``, ``warmup + runs`` executions in one process/block."""

    pte: Path
    runs: int
    warmup: int = 1
    threads: int = 1
    out_dir: Path = Path()
    #: raw little-endian input tensor files for executor_runner ``--inputs`` (None = all ones)
    inputs: tuple[Path, ...] | None = None
    #: ``None`` = the default build; ``"sme2_on"``/``"sme2_off"`` pick one of two runner builds
    variant: str | None = None
    timeout_s: float = 600.0
    #: a name for files written for this request (defaults to the .pte stem)
    label: str | None = None
    #: what to record: ``MODE_TRACE`` (default), ``MODE_TIMING`` or ``MODE_LOG``
    mode: str = MODE_TRACE
    #: a runner binary to use instead of the variant's build of this ``mode`` (a stored reference build);
    #: None = the variant's
    build: Path | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"unknown run mode {self.mode!r}; allowed: {', '.join(MODES)}")

    @property
    def executions(self) -> int:
        return self.warmup + self.runs

    @property
    def stem(self) -> str:
        base = self.label or self.pte.stem
        return f"{base}_{self.variant}" if self.variant else base


@dataclass(frozen=True)
class CountedRun:
    """What one counted process of an emulated device gives (:meth:`Runner.record_counted`): the instructions one
    method execution executed, and the kernels the process ran (the blocks QEMU translated for it), so the kernel
    evidence needs no process of its own when a test counts."""

    counts: InstructionCounts
    executed: ExecutedKernels


@dataclass(frozen=True)
class RunResult:
    """Per-execution end-to-end latencies from one run, plus the trace and build facts.

    ``e2e_ms`` holds *every* execution in order, the first ``warmup`` of them cold/warm-up;
    statistics use ``measured_ms``. ``trace_path`` is set only when the runtime recorded an ETDump
    with operator events. ``cpu_ms`` (when the runner can measure it per execution, same order as
    ``e2e_ms``) and ``load`` are the evidence of disturbance: see :mod:`pytest_sme2.device.load`.
    """

    runner: str
    e2e_ms: tuple[float, ...]
    warmup: int
    threads: int
    build: str
    variant: str | None = None
    trace_path: Path | None = None
    log_path: Path | None = None
    per_operator: bool = False
    #: why per-operator timing is missing, when it is
    per_operator_note: str = ""
    host: str = field(default_factory=platform.node)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: CPU time of each execution (ms), same order as ``e2e_ms``; () when not measured per execution
    cpu_ms: tuple[float, ...] = ()
    #: CPU/wall of the block and the host's load around it; None when not measured
    load: BlockLoad | None = None

    @property
    def measured_ms(self) -> tuple[float, ...]:
        return self.e2e_ms[self.warmup :]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "runner": self.runner,
            "variant": self.variant,
            "e2e_ms": list(self.e2e_ms),
            "warmup": self.warmup,
            "threads": self.threads,
            "build": self.build,
            "trace_path": str(self.trace_path) if self.trace_path else None,
            "log_path": str(self.log_path) if self.log_path else None,
            "per_operator": self.per_operator,
            "per_operator_note": self.per_operator_note,
            "host": self.host,
            "metadata": dict(self.metadata),
            "cpu_ms": list(self.cpu_ms),
            "load": self.load.to_dict() if self.load is not None else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResult:
        return cls(
            runner=str(data["runner"]),
            variant=data.get("variant"),
            e2e_ms=tuple(float(x) for x in data["e2e_ms"]),
            warmup=int(data["warmup"]),
            threads=int(data["threads"]),
            build=str(data["build"]),
            trace_path=Path(data["trace_path"]) if data.get("trace_path") else None,
            log_path=Path(data["log_path"]) if data.get("log_path") else None,
            per_operator=bool(data.get("per_operator", False)),
            per_operator_note=str(data.get("per_operator_note", "")),
            host=str(data.get("host", "")),
            metadata=dict(data.get("metadata", {})),
            cpu_ms=tuple(float(x) for x in data.get("cpu_ms", ())),
            load=BlockLoad.from_dict(data["load"]) if data.get("load") else None,
        )


class Runner(ABC):
    """Anything that can execute a ``.pte`` and report per-execution latency: every capability the library uses.

    A base class with the defaults, not a Protocol: a device of one's own (DEVELOPERS.md, "Adding a device")
    implements :meth:`identity`, :meth:`build_identity` and :meth:`run` and inherits a sensible answer for every
    other capability, so no caller probes for one with ``getattr`` and a runner missing one of the three fails
    when it is made, naming the method, not in the middle of a measurement.
    """

    #: the device's name, as the registry names it (:mod:`pytest_sme2.runners.registry`): "local", "host", ...
    name: str = ""
    #: it runs the program in this Python process (the executorch runtime), not a runner binary: the profile's
    #: sources say "local runtime", and the tracer's cost is the runtime's
    in_process: bool = False
    #: its runs are processes on this machine, so this process's environment (the code-path variables) is theirs
    on_this_host: bool = False
    #: it can record the kernels that executed (:meth:`record_executed`: QEMU's in_asm log)
    records_executed: bool = False
    #: it can count the instructions a method execution executes (:meth:`record_counts`: QEMU's exec log)
    records_counts: bool = False
    #: called about once a second while a long run goes on (the plugin's status line and the CLI show the elapsed
    #: time with it); set by the front end, None = nothing to tell
    heartbeat: Callable[[], None] | None = None

    @property
    def emulated(self) -> bool:
        """Its times are emulated time (QEMU, an Android emulator): labelled so everywhere, never an SME2 speedup."""
        return False

    def variants(self) -> tuple[str | None, ...]:
        """Variants this runner can run (``(None,)`` when it has a single build)."""
        return (None,)

    @abstractmethod
    def identity(self) -> Mapping[str, Any]:
        """The device's :class:`~pytest_sme2.device.identity.DeviceIdentity` as a dict; no runtime or runner facts."""

    @abstractmethod
    def build_identity(self, variant: str | None) -> Mapping[str, Any]:
        """What executes the ``.pte`` for ``variant`` besides the ``.pte``: runtime version, binary hashes."""

    @abstractmethod
    def run(self, request: RunRequest) -> RunResult:
        """Execute ``request``; raise :class:`~pytest_sme2.errors.RunnerError` when it fails."""

    def has_build(self, variant: str | None, mode: str) -> bool:
        """Whether ``variant`` has a build that records ``mode`` (by default: traced runs only)."""
        return mode == MODE_TRACE

    def runner_for(self, variant: str | None) -> Path | None:
        """The runner binary of ``variant``, kept in the artifact store beside a baseline; None = no binary."""
        return None

    def binary_for(self, variant: str | None, mode: str = MODE_TRACE) -> Path | None:
        """The binary of ``variant`` that records ``mode`` (when :meth:`has_build`); None = no binary."""
        return None

    def device_info(self) -> DeviceInfo | None:
        """Facts of the device (its SME2 support, for skips); None when the runner cannot tell."""
        return None

    def run_settings(self) -> Mapping[str, Any]:
        """How runs are made on the device when that changes their speed (a phone's pinning): part of the identity
        a baseline is keyed on."""
        return {}

    def record_executed(self, request: RunRequest) -> ExecutedKernels | None:
        """Run ``request`` once and say which kernels executed (when :attr:`records_executed`); None otherwise."""
        return None

    def record_counts(self, request: RunRequest) -> InstructionCounts | None:
        """Instructions one method execution of ``request`` executes (when :attr:`records_counts`); None otherwise."""
        counted = self.record_counted(request)
        return counted.counts if counted is not None else None

    def record_counted(self, request: RunRequest) -> CountedRun | None:
        """:meth:`record_counts` with the kernels the counted process ran (when :attr:`records_counts`); None
        otherwise."""
        return None


def inputs_argv(paths: Sequence[str], *, fix: str) -> list[str]:
    """``["--inputs", "a,b"]`` for executor_runner (``[]`` without inputs); ``fix`` ends the error.

    executor_runner splits ``--inputs`` on commas, so a path containing one is refused, not split.
    """
    with_comma = [p for p in paths if "," in p]
    if with_comma:
        raise ConfigError(
            f"input file path {with_comma[0]} contains a comma, which executor_runner --inputs uses as its "
            f"separator; {fix}"
        )
    return ["--inputs", ",".join(paths)] if paths else []


def check_threads(threads: int, cores: int, where: str) -> None:
    """Refuse more runtime threads than ``where`` has CPUs (``cores`` 0 = unknown: not checked).

    Threads beyond the cores only wait for each other: the measurement would time the scheduler.
    """
    if cores > 0 and threads > cores:
        raise ConfigError(
            f"{threads} threads asked for, but {where} has {cores} CPUs: extra threads would only wait for a core, "
            f"so the latency would time the scheduler, not the model. Use --sme2-threads (CLI: --threads) {cores} "
            "or fewer."
        )


class BinaryBuilds(Runner):
    """A runner of ``executor_runner`` binaries: its ``variants``, ``has_build``, ``runner_for`` and ``binary_for``.

    Subclasses set ``name``, ``builds`` (variant -> the traced binary; ``None`` is the single build) and,
    optionally, ``mode_builds`` (``MODE_TIMING`` / ``MODE_LOG`` -> variant -> binary): the timing-only and
    XNNPACK-logging builds of each arm.
    """

    name: str
    builds: Mapping[str | None, Path]
    mode_builds: Mapping[str, Mapping[str | None, Path]] = MappingProxyType({})

    def variants(self) -> tuple[str | None, ...]:
        return tuple(self.builds)

    def has_build(self, variant: str | None, mode: str) -> bool:
        """Whether ``variant`` has a build that records ``mode`` (every variant has its traced build)."""
        if mode == MODE_TRACE:
            return variant in self.builds
        return variant in self.mode_builds.get(mode, {})

    def binary_for(self, variant: str | None, mode: str = MODE_TRACE) -> Path:
        """The executor_runner binary of ``variant`` that records ``mode``; a missing one names its option."""
        if mode == MODE_TRACE:
            return self.runner_for(variant)
        try:
            return self.mode_builds.get(mode, {})[variant]
        except KeyError:
            arm = "the SME2-off arm" if variant == SME2_OFF else "the SME2-on (default) arm"
            raise ConfigError(
                f"the {self.name} runner has no {BUILD_KINDS[mode]} for {arm}: a {mode!r} run needs one. Pass it "
                f"with {build_option(mode, variant)} (see docs/run-modes.md)"
            ) from None

    def builds_identity(self, variant: str | None) -> dict[str, str]:
        """The sha256 of every binary of ``variant`` whose runs give numbers: the traced build and the timing one.

        The log build gives evidence (kernel names), not numbers, so it is not part of the artifact.
        """
        ident = {"runner_sha256": file_sha256(self.runner_for(variant))}
        if self.has_build(variant, MODE_TIMING):
            ident["timing_runner_sha256"] = file_sha256(self.binary_for(variant, MODE_TIMING))
        return ident

    def build_hashes(self) -> dict[str, str]:
        """Short sha256 of every binary of every mode, for fingerprints (``default``, ``sme2_off/log``, ...)."""
        out: dict[str, str] = {}
        per_mode = {MODE_TRACE: self.builds, **self.mode_builds}
        for mode, builds in per_mode.items():
            for variant, path in builds.items():
                key = (variant or "default") + ("" if mode == MODE_TRACE else f"/{mode}")
                try:
                    out[key] = file_sha256(path)[:16]
                except OSError:
                    out[key] = "missing"
        return out

    def runner_for(self, variant: str | None) -> Path:
        """The executor_runner binary of ``variant``."""
        try:
            return self.builds[variant]
        except KeyError:
            have = ", ".join(repr(v) for v in self.builds)
            raise ConfigError(
                f"the {self.name} runner has no {variant!r} build; it has: {have}. Pass --sme2-runner (SME2 on) "
                "and --sme2-runner-off (SME2 off) for an on/off comparison."
            ) from None
