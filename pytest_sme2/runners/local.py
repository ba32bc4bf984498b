"""The local runner: the ExecuTorch Python runtime (pybindings) in this process.

Each :meth:`LocalRunner.run` loads the program, sets the runtime's thread pool, loads the method
and calls ``Method.execute`` ``warmup + runs`` times on the real inputs. What the block records
depends on ``RunRequest.mode``:

- ``trace`` (the default): the program is loaded with the event tracer on (``enable_etdump=True``)
  and, after the last execution, its ETDump is written into a fresh run directory
  (``out_dir/<stem>/<timestamp>-<pid>-<n>/<stem>.etdump``). The end-to-end time of each execution
  is the trace's ``Method::execute`` event, the span ``executor_runner`` times in its ``Iteration``
  lines; the operator events under it are the per-operator breakdown, read exactly as a host
  runner's trace. The Python wall time around each call is kept in ``metadata`` as a cross-check.
- ``timing``: the tracer is off; the end-to-end time of each execution is ``perf_counter_ns``
  around the ``Method.execute`` call. That span is wider than ``Method::execute``: it includes the
  pybindings call (copying the inputs in, cloning the outputs), which ``executor_runner`` does not
  pay and which grows with the input size (measured here: ~25 us for a 12 KB input, ~0.15-0.2 ms
  for MobileNetV3's 600 KB one). Never pool timing-mode and trace-mode E2E samples: they time
  different spans. :func:`timer_overhead_ns` measures the clock's own cost.
- ``log``: refused; the PyPI wheel's XNNPACK is built without logging.

Every mode also records the evidence of disturbance (see :mod:`pytest_sme2.device.load`): the CPU time of
each execution (``RunResult.cpu_ms``) and, for the block, CPU against wall time, the run delay of
the runtime's threads and the host's load and steal (``RunResult.load``).

The executorch 1.5 PyPI wheel has the event tracer; 1.4 and custom builds may not. A runtime
without it writes no ETDump (or one without execute or operator events): the result then carries
the clock's end-to-end times, ``per_operator=False`` and a one-line ``per_operator_note`` with the
fix, never an empty breakdown.
"""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import os
import statistics
import sys
import time
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sme2.device.codepaths import SHARED_OBJECTS, runtime_shared_objects
from pytest_sme2.device.facts import host_identity
from pytest_sme2.device.load import (
    SOURCE_PROCESS,
    SOURCE_THREAD,
    BlockLoad,
    block_load,
    host_load,
    involuntary_switches,
    run_delay_ns,
)
from pytest_sme2.errors import ConfigError, RunnerError, TraceError
from pytest_sme2.evidence.memory import LOAD_MS, PEAK_KB, PEAK_SOURCE, PeakDelta, PeakSource
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.program.export import load_pte_check
from pytest_sme2.runners.base import MODE_LOG, MODE_TRACE, Runner, RunRequest, RunResult, check_threads
from pytest_sme2.runners.executor_runner import new_run_dir
from pytest_sme2.runners.host import host_facts
from pytest_sme2.store.files import file_sha256

if TYPE_CHECKING:
    from pytest_sme2.options import Sme2Options
    from pytest_sme2.runners.registry import RunnerContext

#: How to get a runtime that records ETDumps; ends every "no per-operator timing" note.
TRACER_FIX = (
    "install executorch 1.5 or later (pip install 'executorch>=1.5'; its wheel has the event tracer) or use a "
    "runtime built with -DEXECUTORCH_BUILD_DEVTOOLS=ON -DEXECUTORCH_ENABLE_EVENT_TRACER=ON"
)

#: ``per_operator_note`` of a block run in ``timing`` mode: untraced on purpose.
TIMING_NOTE = "untraced block (run mode 'timing'): end-to-end time only"

LOG_REFUSAL = (
    "the local runner cannot record a kernel log (run mode 'log'): the executorch wheel's XNNPACK is built "
    "without logging. Record kernel names with an XNNPACK-logging executor_runner build on --sme2-device=host "
    "or android, or run the local runner in mode 'trace' or 'timing'"
)

#: ExecuTorch ``ScalarType`` codes (as ``TensorInfo.dtype()`` returns them) -> torch dtype names.
SCALAR_TYPES = {
    0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
    7: "float64", 11: "bool", 15: "bfloat16",
}

#: ExecuTorch ``Error`` codes that the Python runtime reports as ``error: 0x:NN``.
_ERROR_CODES = {
    0x01: "Internal", 0x02: "InvalidState", 0x10: "NotSupported", 0x11: "NotImplemented",
    0x12: "InvalidArgument", 0x13: "InvalidType", 0x14: "OperatorMissing", 0x20: "NotFound",
    0x21: "MemoryAllocationFailed", 0x22: "AccessFailed", 0x23: "InvalidProgram",
    0x24: "InvalidExternalData", 0x25: "OutOfResources", 0x30: "DelegateInvalidCompatibility",
    0x31: "DelegateMemoryAllocationFailed", 0x32: "DelegateInvalidHandle",
}


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


#: The extension module that executes programs, by name in the executorch versions that had it.
RUNTIME_MODULES = ("executorch.extension.pybindings._portable_lib", "executorch.extension.pybindings._C")


def runtime_files() -> tuple[str, Path, tuple[Path, ...]]:
    """(module name, its shared library, the executorch shared libraries beside it) of the Python runtime.

    Found without importing the runtime (which imports torch). The libraries matter as much as the
    module: in the PyPI wheel the XNNPACK backend and the optimized kernels are separate
    ``executorch/lib/*.so`` files that the module loads.
    """
    for name in RUNTIME_MODULES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin:
            module = Path(spec.origin)
            lib_dir = module.parent.parent.parent / "lib"  # executorch/extension/pybindings/_C.so -> executorch/lib
            libs = tuple(sorted(p for p in lib_dir.glob("*") if p.is_file() and (".so" in p.name or
                                                                                 p.suffix == ".dylib")))
            return name, module, libs
    raise RunnerError(
        f"the executorch Python runtime is not installed (none of {', '.join(RUNTIME_MODULES)} can be found; "
        f"executorch is {_package_version('executorch')}): pip install executorch, or use --sme2-device=host"
    )


def timer_overhead_ns(samples: int = 10_000) -> float:
    """Median nanoseconds between two back-to-back ``perf_counter_ns`` calls: the timer's own cost.

    This is the floor under every time the local runner reports; benchmarks subtract or compare
    against it. ``samples`` pairs take well under a millisecond each.
    """
    clock = time.perf_counter_ns
    deltas = []
    for _ in range(max(1, samples)):
        t0 = clock()
        t1 = clock()
        deltas.append(t1 - t0)
    return float(statistics.median(deltas))


def _describe_runtime_error(exc: BaseException) -> str:
    """``Failed to load program, error: 0x:23`` -> the same text plus the error's name."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    marker = "0x:"
    if marker in text:
        code_text = text.split(marker, 1)[1].split()[0].strip(" .,)")
        try:
            name = _ERROR_CODES.get(int(code_text, 16))
        except ValueError:
            name = None
        if name:
            text = f"{text} ({name})"
    return text


def import_runtime() -> None:
    """Import executorch's Python runtime (``executorch.runtime``, its pybindings and the quantized kernels) without
    its compiler, once per process.

    executorch 1.5's ``portable_lib`` imports ``executorch.exir._warnings`` (two decorators) for one annotation, and
    Python imports the package ``executorch.exir`` first: the whole compiler, torch._dynamo, torch._inductor and
    torchao, ~3-4 s of a process that only loads and runs programs (``benchmarks/runtime_import.py``). While the runtime
    is imported, ``executorch.exir`` is a bare package that finds its submodules (``_warnings`` is a leaf); then it is
    taken away, so a later ``import executorch.exir`` (an export) imports the real package. Where that cannot work (a
    runtime that needs more of ``exir`` to import), the runtime is imported as it always was.
    """
    import executorch.kernels.quantized  # int8 programs on the portable backend need its kernels
    if "executorch.runtime" in sys.modules:
        return
    if "executorch.exir" in sys.modules:  # the compiler is here already: nothing to spare
        import executorch.runtime
        return
    import executorch

    spec = importlib.util.find_spec("executorch.exir")
    bare = types.ModuleType("executorch.exir")
    bare.__path__ = list(spec.submodule_search_locations or ()) if spec is not None else []
    sys.modules["executorch.exir"] = bare
    try:
        import executorch.runtime
    except ImportError:
        pass
    finally:
        if sys.modules.get("executorch.exir") is bare:
            del sys.modules["executorch.exir"]
        if getattr(executorch, "exir", None) is bare:
            del executorch.exir
        for name in [m for m in sys.modules if m.startswith("executorch.exir.")]:
            del sys.modules[name]  # imported again, as submodules of the real package, when it is imported
    if "executorch.runtime" not in sys.modules:
        import executorch.runtime  # as it always was: with the compiler


class LocalRunner(Runner):
    """Run ``.pte`` files in this process with the executorch pybindings runtime, traced or untraced.

    ``runtime`` is the object programs are loaded with: ``None`` = ``executorch.runtime.Runtime.get()``.
    Anything with the same ``load_program`` works (tests pass a wrapper around the real runtime).
    """

    name = "local"
    in_process = True
    on_this_host = True

    def __init__(self, *, method: str | None = None, runtime: Any = None) -> None:
        #: the method to run; ``None`` = ``forward`` if present, else the first one (as executor_runner)
        self.method = method
        self.runtime = runtime

    def variants(self) -> tuple[str | None, ...]:
        """One build only: the installed executorch wheel."""
        return (None,)

    def has_build(self, variant: str | None, mode: str) -> bool:
        """The one runtime runs traced and untraced blocks; it cannot record an XNNPACK log."""
        return variant is None and mode != MODE_LOG

    @property
    def build(self) -> str:
        return f"executorch {_package_version('executorch')} pybindings (portable_lib)"

    def fingerprint(self) -> Mapping[str, Any]:
        """Host CPU facts and the runtime's versions; threads are not part of it (they are per run)."""
        return {
            **host_facts(),
            "runner": self.name,
            "executorch_version": _package_version("executorch"),
            "torch_version": _package_version("torch"),
        }

    def identity(self) -> Mapping[str, Any]:
        """This machine's :class:`~pytest_sme2.device.identity.DeviceIdentity` as a dict (no runtime versions)."""
        return host_identity().to_dict()

    def build_identity(self, variant: str | None = None) -> Mapping[str, Any]:
        """What runs the ``.pte``: the executorch version and the sha256 of the runtime module and its libraries.

        ``runtime_libs_sha256`` is the sha256 of the ``name sha256`` lines of every executorch shared
        library the module loads, so a rebuilt XNNPACK backend counts as another runtime too.
        """
        if variant is not None:
            raise ConfigError(f"the local runner has one build (the installed executorch wheel), not {variant!r}")
        name, module, libs = runtime_files()
        listing = "".join(f"{p.name} {file_sha256(p)}\n" for p in libs)
        return {
            "runtime_module": name,
            "executorch_version": _package_version("executorch"),
            "runtime_sha256": file_sha256(module),
            "runtime_libs_sha256": hashlib.sha256(listing.encode("utf-8")).hexdigest() if libs else "",
        }

    def timer_overhead_ns(self, samples: int = 10_000) -> float:
        """See :func:`timer_overhead_ns`: the cost of the clock this runner times executions with."""
        return timer_overhead_ns(samples)

    # ---------------------------------------------------------------------------------------- run

    def run(self, request: RunRequest, *, tensors: Sequence[Any] | None = None) -> RunResult:
        """Execute ``request.pte`` ``warmup + runs`` times, recording what ``request.mode`` asks for.

        Inputs are ``tensors`` when given, else the raw files of ``request.inputs`` (shapes and
        dtypes from the program), else all ones, like executor_runner without ``--inputs``.
        """
        check_threads(request.threads, os.cpu_count() or 0, "this host")
        if request.variant is not None:
            raise ConfigError(
                f"the local runner has one build (the installed executorch wheel), so it cannot run the "
                f"{request.variant!r} variant; SME2 on/off comparisons need --sme2-device=host or android "
                "with two executor_runner builds (--sme2-runner and --sme2-runner-off)"
            )
        if request.mode == MODE_LOG:
            raise ConfigError(LOG_REFUSAL)
        if request.executions < 1:
            raise ConfigError(f"nothing to run: warmup + runs is {request.executions}; ask for at least one run")
        traced = request.mode == MODE_TRACE
        # The runtime's modules first (a no-op after the first run): their first import maps the runtime's libraries,
        # which are no part of a program's footprint.
        import_runtime()

        peak = PeakDelta()
        peak.start()  # the high-water mark of this process from here: load + runs (PeakSource.DELTA says what)
        program, method, method_name, load_ms = self._load(request.pte, request.threads, etdump=traced)
        if tensors is not None:
            args, source = tuple(tensors), "tensors"
        elif request.inputs:
            args, source = read_input_files(method, request.pte, request.inputs), "files"
        else:
            args, source = _ones_inputs(method), "ones"
        overhead = timer_overhead_ns(2_000)
        block = _measure(method, args, request.executions, request.pte, _pool_threads(request.threads))
        peak_kb = peak.peak_kb()
        metadata: dict[str, Any] = {
            "mode": request.mode,
            "method": method_name,
            LOAD_MS: load_ms,
            **({PEAK_KB: peak_kb, PEAK_SOURCE: PeakSource.DELTA.value} if peak_kb is not None else {}),
            "inputs": source,
            "timer_overhead_ns": overhead,
        }
        objects = runtime_shared_objects()  # after the block: whatever the runtime loaded lazily is mapped by now
        if objects is not None:
            metadata[SHARED_OBJECTS] = objects
        if not traced:
            return self._clock_result(request, block, metadata, TIMING_NOTE)
        return self._traced_result(request, program, block, metadata)

    def _clock_result(self, request: RunRequest, block: _Block, metadata: dict[str, Any], note: str) -> RunResult:
        """E2E from ``perf_counter_ns`` around each call: timing mode, or a trace that did not come."""
        metadata["timing_scope"] = (
            "Method.execute from Python: includes the pybindings input copy and output clone (tens to "
            "hundreds of microseconds per call, growing with the input size)"
        )
        return RunResult(
            runner=self.name, e2e_ms=block.wall_ms, warmup=request.warmup, threads=request.threads,
            build=self.build, variant=None, per_operator=False, per_operator_note=note, metadata=metadata,
            cpu_ms=block.cpu_ms, load=block.load,
        )

    def _traced_result(self, request: RunRequest, program: Any, block: _Block, metadata: dict[str, Any]) -> RunResult:
        """Write the block's ETDump and read E2E and operators from it; without one, say why."""
        run_dir = new_run_dir(request)
        trace_path = run_dir / f"{request.stem}.etdump"
        metadata["run_dir"] = str(run_dir)
        runtime = f"the executorch {_package_version('executorch')} Python runtime"

        def untraced(why: str) -> RunResult:
            return self._clock_result(
                request, block, metadata, f"no per-operator timing: {why}; end-to-end time only. Fix: {TRACER_FIX}"
            )

        try:
            # debug_buffer_size=0 at load: no intermediate outputs are recorded and no debug file is written.
            program.write_etdump_result_to_file(str(trace_path), str(run_dir / f"{request.stem}.debug"))
        except Exception as exc:  # executorch raises RuntimeError("No etdump found") when it recorded nothing
            return untraced(f"{runtime} recorded no ETDump ({_describe_runtime_error(exc)})")
        if not trace_path.is_file() or trace_path.stat().st_size == 0:
            return untraced(f"{runtime} wrote no ETDump (it is built without the event tracer)")
        metadata["trace_file"] = str(trace_path)  # kept when it holds too little to be the result's trace
        try:
            timeline = read_etdump(trace_path, require_runs=False)
        except TraceError as exc:
            raise RunnerError(f"{runtime} wrote an ETDump that cannot be read: {exc}") from None
        if timeline.num_runs == 0:
            return untraced(f"the ETDump {runtime} wrote holds no Method::execute events")
        if timeline.num_runs != request.executions:
            raise RunnerError(
                f"the ETDump {trace_path} holds {timeline.num_runs} executions, but this block ran "
                f"{request.executions}: the trace is not this block's; run it again"
            )
        if not len(timeline.operators()):
            return untraced(f"the ETDump {runtime} wrote holds Method::execute but no operator events")
        e2e = tuple(float(x) for x in timeline.e2e_ms_per_run())
        gaps_us = [(w - t) * 1e3 for w, t in zip(block.wall_ms, e2e, strict=True)]
        metadata.update(
            timing_scope="Method::execute in the runtime's ETDump (the span executor_runner's Iteration lines "
            "time); python_wall_ms is perf_counter_ns around each call from Python, for comparison",
            python_wall_ms=list(block.wall_ms),
            python_minus_trace_median_us=statistics.median(gaps_us),
        )
        return RunResult(
            runner=self.name, e2e_ms=e2e, warmup=request.warmup, threads=request.threads, build=self.build,
            variant=None, trace_path=trace_path, per_operator=True, metadata=metadata, cpu_ms=block.cpu_ms,
            load=block.load,
        )

    def outputs(self, pte: str | Path, inputs: Sequence[Any] | None = None, *, threads: int = 1) -> list[Any]:
        """Execute ``pte`` once on ``inputs`` (tensors; None = all ones) and return its outputs."""
        _, method, _, _ = self._load(Path(pte), threads, etdump=False)
        args = tuple(inputs) if inputs is not None else _ones_inputs(method)
        return _execute_once(method, args, Path(pte))

    # ----------------------------------------------------------------------------------- loading

    def _load(self, pte: Path, threads: int, *, etdump: bool) -> tuple[Any, Any, str, float]:
        """(program, method, its name, load ms): loaded with the thread pool set first.

        ``etdump`` turns the program's event tracer on (a runtime without one accepts the flag and
        records nothing).

        The load time covers ``load_program`` + ``load_method`` only, not the (seconds long) first
        import of the runtime. Runtime failures become :class:`RunnerError`.
        """
        load_pte_check(pte)
        # With the quantized kernels (quantize/dequantize out-variants) registered, so int8 programs on the portable
        # backend load; without them they fail with OperatorMissing.
        import_runtime()
        from executorch.extension.pybindings import portable_lib
        from executorch.runtime import Runtime, Verification

        runtime = self.runtime if self.runtime is not None else Runtime.get()
        started = time.perf_counter_ns()
        try:
            program = runtime.load_program(
                str(pte), verification=Verification.Minimal, enable_etdump=etdump, debug_buffer_size=0
            )
        except Exception as exc:
            raise RunnerError(
                f"the executorch runtime could not load {pte}: {_describe_runtime_error(exc)}. The file "
                "passed the header check, so it is probably corrupt or from an incompatible executorch "
                f"version (this runtime is {_package_version('executorch')}); export it again."
            ) from None
        names = sorted(program.method_names)
        method_name = self.method or ("forward" if "forward" in names else (names[0] if names else ""))
        if method_name not in names:
            raise RunnerError(
                f"{pte} has no method {method_name!r}; it has: {', '.join(names) or '(none)'}"
            )
        # The pool is process-wide and XNNPACK captures it when a method is loaded: it must be sized
        # before load_method, and resetting it under a live method leaves that method pointing at a
        # freed pool, so reset only when the size really changes.
        if threads > 0 and portable_lib._threadpool_get_thread_count() != threads:
            portable_lib._unsafe_reset_threadpool(threads)
        try:
            method = program.load_method(method_name)
        except Exception as exc:
            hint = ""
            if "0x:14" in str(exc):
                hint = (
                    " The program uses an operator this runtime has no kernel for (the runtime logged "
                    "which, as 'Missing operator'); export it for a backend that covers it."
                )
            raise RunnerError(
                f"the executorch runtime could not load method {method_name!r} of {pte}: "
                f"{_describe_runtime_error(exc)}.{hint}"
            ) from None
        return program, method, method_name, (time.perf_counter_ns() - started) / 1e6


def _torch_dtype(code: int, pte: Path, index: int) -> Any:
    import torch

    name = SCALAR_TYPES.get(int(code))
    if name is None:
        raise RunnerError(
            f"input {index} of {pte} has ExecuTorch scalar type {code}, which the local runner cannot feed"
        )
    return getattr(torch, name)


def read_input_files(method: Any, pte: Path, files: Sequence[Path]) -> tuple[Any, ...]:
    """Tensors from raw input files, shaped and typed by the method's own input metadata."""
    import torch

    raws = _read_all(files)
    tensors = []
    for (sizes, dtype), raw in zip(_fitting_inputs(method.metadata, pte, files, raws), raws, strict=True):
        # bytearray: torch.frombuffer wants a writable buffer; an empty one it refuses outright.
        t = torch.frombuffer(bytearray(raw), dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors.append(t.reshape(sizes))
    return tuple(tensors)


def check_input_files(pte: Path, files: Sequence[Path], method: str = "forward") -> None:
    """Input files that do not fit ``pte``'s method are bad input, said before any runner starts (an executor_runner
    says so only after its launch, as a failed run). The local runtime reads the program's metadata without loading
    a delegate; a program it cannot read is left to the runner to judge."""
    try:
        import_runtime()
        from executorch.runtime import Runtime, Verification

        meta = Runtime.get().load_program(str(pte), verification=Verification.Minimal).metadata(method)
    except Exception:  # not ours to judge: the runner reads the program and says what is wrong
        return
    _fitting_inputs(meta, pte, files, _read_all(files))


def _read_all(files: Sequence[Path]) -> list[bytes]:
    try:
        return [Path(path).read_bytes() for path in files]
    except OSError as exc:
        raise ConfigError(f"cannot read input file {exc.filename}: {exc.strerror}") from None


def _fitting_inputs(meta: Any, pte: Path, files: Sequence[Path],
                    raws: Sequence[bytes]) -> list[tuple[tuple[int, ...], Any]]:
    """The (sizes, torch dtype) of each input of ``meta`` (a method's metadata), after checking that ``files`` (read:
    ``raws``) are one per input, each exactly its bytes: input files that do not fit the program are bad input
    (exit 2), not a failed run."""
    expected = meta.num_inputs()
    if len(files) != expected:
        raise ConfigError(
            f"{pte} takes {expected} input(s) but {len(files)} input file(s) were given: "
            f"{', '.join(str(f) for f in files)}"
        )
    shapes = []
    for i, (path, raw) in enumerate(zip(files, raws, strict=True)):
        info = meta.input_tensor_meta(i)
        sizes = tuple(info.sizes())
        dtype = _torch_dtype(info.dtype(), pte, i)
        if len(raw) != info.nbytes():
            raise ConfigError(
                f"input file {path} has {len(raw)} bytes, but input {i} of {pte} is "
                f"{'x'.join(map(str, sizes))} {str(dtype).removeprefix('torch.')} = {info.nbytes()} bytes; "
                "pass the input files written by the export of this .pte"
            )
        shapes.append((sizes, dtype))
    return shapes


def _ones_inputs(method: Any) -> tuple[Any, ...]:
    import torch

    meta = method.metadata
    infos = [meta.input_tensor_meta(i) for i in range(meta.num_inputs())]
    return tuple(
        torch.ones(tuple(info.sizes()), dtype=_torch_dtype(info.dtype(), Path("<program>"), i))
        for i, info in enumerate(infos)
    )


def _pool_threads(requested: int) -> int:
    """Threads the runtime's pool really has (``requested`` 0 leaves the pool's default)."""
    if requested > 0:
        return requested
    from executorch.extension.pybindings import portable_lib

    return max(1, int(portable_lib._threadpool_get_thread_count()))


@dataclass(frozen=True)
class _Block:
    """One block's clock readings: wall and CPU time per execution, and the block's load."""

    wall_ms: tuple[float, ...]
    cpu_ms: tuple[float, ...]
    load: BlockLoad


def _measure(method: Any, args: tuple[Any, ...], count: int, pte: Path, threads: int) -> _Block:
    """Run the executions between two host snapshots; per execution, wall and CPU time.

    One runtime thread does all the work on the calling thread, so its CPU clock is the thread's
    own (immune to other Python threads of the process). With several, the pool's workers do part
    of it, so the clock is the whole process's CPU time, and the block's share is taken over
    ``threads x wall`` (see :attr:`~pytest_sme2.device.load.BlockLoad.cpu_share`).
    """
    cpu_clock, source = (time.thread_time_ns, SOURCE_THREAD) if threads <= 1 else (time.process_time_ns, SOURCE_PROCESS)
    before = host_load()
    delay0, switches0 = run_delay_ns(), involuntary_switches()
    cpu0, wall0 = cpu_clock(), time.perf_counter_ns()
    wall_ns, cpu_ns = _time_executions(method, args, count, pte, cpu_clock)
    wall1, cpu1 = time.perf_counter_ns(), cpu_clock()
    delay1, switches1 = run_delay_ns(), involuntary_switches()
    after = host_load()
    load = block_load(
        before, after, source=source, cpu_s=(cpu1 - cpu0) / 1e9, wall_s=(wall1 - wall0) / 1e9, threads=threads,
        run_delay_s=(delay1 - delay0) / 1e9 if delay0 is not None and delay1 is not None else None,
        involuntary_switches=switches1 - switches0,
    )
    return _Block(tuple(t / 1e6 for t in wall_ns), tuple(t / 1e6 for t in cpu_ns), load)


def _time_executions(
    method: Any, args: tuple[Any, ...], count: int, pte: Path, cpu_clock: Callable[[], int] = time.thread_time_ns
) -> tuple[list[int], list[int]]:
    """(wall ns, CPU ns) of each of ``count`` executions.

    The CPU clock brackets the wall clock, so its (system-call) cost stays out of the wall time the
    gate uses; the CPU time of an execution may exceed its wall time by about a microsecond (the
    cost of the clock reads inside the bracket).
    """
    clock = time.perf_counter_ns
    execute = method.execute
    wall: list[int] = []
    cpu: list[int] = []
    # A collection pause inside a timed call would be measured as model time (timeit does the same).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(count):
            c0 = cpu_clock()
            t0 = clock()
            try:
                execute(args)
            except Exception as exc:
                raise RunnerError(
                    f"executing {pte} failed on execution {i + 1} of {count}: {_describe_runtime_error(exc)}. "
                    "Check that the inputs match the shapes and dtypes the model was exported with."
                ) from None
            t1 = clock()
            c1 = cpu_clock()
            wall.append(t1 - t0)
            cpu.append(c1 - c0)
    finally:
        if gc_was_enabled:
            gc.enable()
    return wall, cpu


def _execute_once(method: Any, args: tuple[Any, ...], pte: Path) -> list[Any]:
    try:
        return list(method.execute(args))
    except Exception as exc:
        raise RunnerError(f"executing {pte} failed: {_describe_runtime_error(exc)}") from None


def from_options(options: Sme2Options, context: RunnerContext) -> LocalRunner:
    """The registry's factory (:mod:`pytest_sme2.runners.registry`): the local runtime takes no option of its own."""
    return LocalRunner()
