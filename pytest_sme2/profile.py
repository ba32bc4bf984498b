"""Export -> run -> analyze: the one call both front ends (CLI and plugin) use.

A :class:`Profile` is what ``sme2_runner.profile(exported_model)`` returns: the pooled measured
E2E samples, the analysis (per-operator when the runner recorded a trace), the device and runner
fingerprint, and the raw run results. :func:`profile_on_off` measures the two runner builds of an
SME2 on/off comparison in interleaved blocks (ABBA...), so drift hits both arms alike.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .analysis import Analysis, analyze, analyze_e2e, merge
from .errors import ConfigError
from .gate import Samples
from .kernels import KernelLog
from .runners.base import SME2_OFF, SME2_ON, Runner, RunRequest, RunResult
from .trace import read_etdump

SCHEMA_VERSION = 1

Progress = Callable[[str], None]


def stderr_progress(message: str) -> None:
    print(f"[sme2] {message}", file=sys.stderr, flush=True)


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
    """A ``.pte`` made elsewhere (not by :func:`~pytest_sme2.export.export_model`), profiled as it is.

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
class Profile:
    """One model measured on one runner variant: samples, analysis, fingerprint, raw runs."""

    model: Mapping[str, Any]
    variant: str | None
    runner: str
    build: str
    threads: int
    fingerprint: Mapping[str, Any]
    analysis: Analysis
    runs: tuple[RunResult, ...] = ()
    device: Mapping[str, Any] = field(default_factory=dict)
    invalid_reason: str = ""
    note: str = ""

    @property
    def samples_ms(self) -> tuple[float, ...]:
        return self.analysis.measured_ms

    @property
    def per_operator(self) -> bool:
        return self.analysis.per_operator

    def samples(self) -> Samples:
        cats = self.analysis.category_per_run_ms if self.analysis.per_operator else {}
        return Samples(self.samples_ms, cats, self.invalid_reason, self.analysis.block_sizes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "model": dict(self.model),
            "variant": self.variant,
            "runner": self.runner,
            "build": self.build,
            "threads": self.threads,
            "fingerprint": dict(self.fingerprint),
            "device": dict(self.device),
            "invalid_reason": self.invalid_reason,
            "note": self.note,
            "analysis": self.analysis.to_dict(),
            "runs": [r.to_dict() for r in self.runs],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Profile:
        return cls(
            model=dict(d.get("model", {})), variant=d.get("variant"), runner=str(d["runner"]),
            build=str(d.get("build", "")), threads=int(d.get("threads", 1)),
            fingerprint=dict(d.get("fingerprint", {})), analysis=Analysis.from_dict(d["analysis"]),
            runs=tuple(RunResult.from_dict(r) for r in d.get("runs", [])), device=dict(d.get("device", {})),
            invalid_reason=str(d.get("invalid_reason", "")), note=str(d.get("note", "")),
        )


def analyze_run(result: RunResult, *, warmup: int, kernel_log: KernelLog | None = None) -> Analysis:
    """Analyze one run: from its trace when it has one, else from its E2E samples alone."""
    if result.trace_path is not None:
        return analyze(read_etdump(result.trace_path), warmup=warmup, kernel_log=kernel_log)
    return analyze_e2e(result.e2e_ms, warmup=warmup, source=f"{result.runner} runtime ({result.build})")


def _validate(runs: int, warmup: int, blocks: int) -> None:
    if runs < 1:
        raise ConfigError(f"runs must be at least 1 (got {runs}); set --sme2-runs / --runs to a positive number")
    if warmup < 0:
        raise ConfigError(f"warmup must be 0 or more (got {warmup}); set --sme2-warmup / --warmup")
    if blocks < 1:
        raise ConfigError(f"blocks must be at least 1 (got {blocks})")


def _fingerprint(runner: Runner, exported: ExportedLike, threads: int, variant: str | None) -> dict[str, Any]:
    fp = dict(runner.fingerprint())
    fp.update({"dtype": exported.dtype, "backend": exported.backend, "threads": threads})
    if variant is not None:
        fp["variant"] = variant
    return fp


def _profile_from_blocks(
    exported: ExportedLike, runner: Runner, results: list[RunResult], *, warmup: int, threads: int,
    variant: str | None, kernel_log: KernelLog | None,
) -> Profile:
    analyses = [analyze_run(r, warmup=warmup, kernel_log=kernel_log) for r in results]
    analysis = merge(analyses, source=exported.pte_path.name) if len(analyses) > 1 else analyses[0]
    invalid = "; ".join(str(r.metadata["invalid_reason"]) for r in results if r.metadata.get("invalid_reason"))
    notes = dict.fromkeys(r.per_operator_note for r in results if r.per_operator_note)
    device = results[0].metadata.get("device", {}) if results else {}
    return Profile(
        model={k: v for k, v in exported.to_dict().items() if k in
               ("name", "dtype", "backend", "pte_path", "cache_key", "executorch_version", "input_shapes")},
        variant=variant,
        runner=runner.name,
        build=results[0].build if results else "",
        threads=threads,
        fingerprint=_fingerprint(runner, exported, threads, variant),
        analysis=analysis,
        runs=tuple(results),
        device=device if isinstance(device, Mapping) else {},
        invalid_reason=invalid,
        note=" ".join(notes),
    )


def _request(exported: ExportedLike, *, runs: int, warmup: int, threads: int, out_dir: Path,
             variant: str | None, timeout_s: float, label: str | None) -> RunRequest:
    return RunRequest(
        pte=exported.pte_path, runs=runs, warmup=warmup, threads=threads, out_dir=out_dir,
        inputs=tuple(exported.input_files) or None, variant=variant, timeout_s=timeout_s,
        label=label or f"{exported.name}_{exported.dtype}_{exported.backend}",
    )


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
    progress: Progress | None = None,
) -> Profile:
    """Run ``exported`` on ``runner`` in ``blocks`` blocks of ``warmup + runs`` executions, then analyze."""
    _validate(runs, warmup, blocks)
    request = _request(exported, runs=runs, warmup=warmup, threads=threads, out_dir=out_dir,
                       variant=variant, timeout_s=timeout_s, label=label)
    results = []
    for b in range(blocks):
        if progress and blocks > 1:
            progress(f"{request.stem}: block {b + 1}/{blocks} on {runner.name}")
        results.append(runner.run(request))
    return _profile_from_blocks(exported, runner, results, warmup=warmup, threads=threads, variant=variant,
                                kernel_log=kernel_log)


def profile_on_off(
    exported: ExportedLike,
    runner: Runner,
    *,
    runs: int,
    warmup: int = 1,
    threads: int = 1,
    out_dir: Path = Path("sme2_out"),
    blocks: int = 4,
    timeout_s: float = 600.0,
    kernel_logs: Mapping[str, KernelLog] | None = None,
    label: str | None = None,
    progress: Progress | None = None,
) -> tuple[Profile, Profile]:
    """Measure the SME2-off and SME2-on builds in interleaved blocks; returns ``(off, on)``.

    Block order alternates OFF,ON / ON,OFF (ABBA) so linear drift and thermal build-up cancel.
    """
    _validate(runs, warmup, blocks)
    available = runner.variants()
    missing = [v for v in (SME2_ON, SME2_OFF) if v not in available]
    if missing:
        raise ConfigError(
            f"the {runner.name} runner has no {' / '.join(missing)} build: an SME2 on/off comparison needs two "
            "executor_runner builds (--sme2-runner for SME2 on, --sme2-runner-off for SME2 off)"
        )
    results: dict[str, list[RunResult]] = {SME2_OFF: [], SME2_ON: []}
    for b in range(blocks):
        order = (SME2_OFF, SME2_ON) if b % 2 == 0 else (SME2_ON, SME2_OFF)
        for variant in order:
            if progress:
                progress(f"{exported.name}: block {b + 1}/{blocks}, {variant}")
            request = _request(exported, runs=runs, warmup=warmup, threads=threads, out_dir=out_dir,
                               variant=variant, timeout_s=timeout_s, label=label)
            results[variant].append(runner.run(request))
    logs = kernel_logs or {}
    off, on = (
        _profile_from_blocks(exported, runner, results[v], warmup=warmup, threads=threads, variant=v,
                             kernel_log=logs.get(v))
        for v in (SME2_OFF, SME2_ON)
    )
    return off, on
