"""The plan of a measurement: what is measured (program, inputs, runner variant or build) and how (runs, warm-up,
blocks, threads, where the latency comes from, a precision to stop at, a time budget, the host's measuring lock).

A :class:`Measurement` is enough to measure a profile again, in this session or another: the block engine
(:mod:`pytest_sme2.measure.blocks`) runs it, :mod:`pytest_sme2.measure.profile` turns the blocks into a Profile that
carries it. Its recipe (:meth:`Measurement.recipe`, :data:`MEASUREMENT_RECIPE`) goes into every artifact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pytest_sme2.device.identity import LATENCY_MODES, LATENCY_TRACED, LATENCY_UNTRACED
from pytest_sme2.errors import ConfigError
from pytest_sme2.runners.base import MODE_TIMING, MODE_TRACE, RunRequest

#: The version of how a measurement turns runs into numbers (which runs count, how they are timed and blocked, how
#: warm-up and disturbed blocks are handled). Bump it when that changes, as ``export.RECIPE_VERSION`` is bumped when
#: an export recipe changes: every artifact records it (``Artifact.recipe``), so a baseline measured by other
#: measuring code is a changed artifact, re-measured beside the candidate, never "unchanged".
MEASUREMENT_RECIPE = 1

#: A block whose measuring thread was preempted (or waited for a CPU) for more than this share of its wall
#: time ran on a busy machine (measured, MobileNetV3, 1 thread: quiet 0.1 %, one CPU burner on the two
#: cores 0.7 %, two burners 35 %; benchmarks/results/disturbance.txt).
PREEMPTED_LIMIT = 0.05


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
    #: 1.0 switches the check off (see :func:`~pytest_sme2.measure.blocks.disturbance_of`)
    busy_limit: float = PREEMPTED_LIMIT
    #: seconds the blocks of one measurement may take (0 = no limit): a slow model gets fewer runs per block,
    #: then fewer blocks (never fewer than blocks.MIN_BLOCKS), decided from the second block's time (the first carries
    #: one-time start-up)
    time_budget_s: float = 0.0
    #: milliseconds the measured runs of a block should take (0 = exactly ``runs``): a model faster than that gets
    #: more runs per block after the first, its executions up to blocks.SHORT_BLOCK_RUNS_FACTOR x ``runs`` (see
    #: :func:`~pytest_sme2.measure.blocks._size_blocks`)
    min_block_ms: float = 0.0
    #: milliseconds a block's executions, warm-up included, should take at most (0 = no limit): a slower model gets
    #: one warm-up and fewer runs per block after the first, never fewer than blocks.MIN_RUNS (see
    #: :func:`~pytest_sme2.measure.blocks._size_blocks`)
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

