"""The local runner: the ExecuTorch Python runtime (pybindings) in this process, end-to-end timing only.

Each :meth:`LocalRunner.run` loads the program, sets the runtime's thread pool, loads the method
and calls ``Method.execute`` ``warmup + runs`` times on the real inputs, timing every call with
``time.perf_counter_ns``. The PyPI ``executorch`` wheel is built without the event tracer, so
there is no ETDump and no per-operator timing here; the result says so in ``per_operator_note``.

The times include the pybindings call (copying inputs in and cloning outputs, a few microseconds),
which a C++ ``executor_runner`` does not pay; for models of a few tens of microseconds that is a
visible share. :func:`timer_overhead_ns` measures the clock's own cost for comparison.
"""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ..artifacts import file_sha256
from ..device import host_identity
from ..errors import ConfigError, RunnerError
from ..export import load_pte_check
from .base import RunRequest, RunResult, check_threads
from .host import host_facts

PER_OPERATOR_NOTE = (
    "The local runner uses the executorch Python runtime from PyPI, which is built without the event "
    "tracer: it records no ETDump, so only end-to-end time per execution is available, no per-operator "
    "timing. For per-operator timing use --sme2-device=host with an executor_runner built with "
    "-DEXECUTORCH_BUILD_DEVTOOLS=ON -DEXECUTORCH_ENABLE_EVENT_TRACER=ON (pass it with --sme2-runner)."
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


class LocalRunner:
    """Run ``.pte`` files in this process with the executorch pybindings runtime (E2E timing only)."""

    name = "local"

    def __init__(self, *, method: str | None = None) -> None:
        #: the method to run; ``None`` = ``forward`` if present, else the first one (as executor_runner)
        self.method = method

    def variants(self) -> tuple[str | None, ...]:
        """One build only: the installed executorch wheel."""
        return (None,)

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
        """This machine's :class:`~pytest_sme2.identity.DeviceIdentity` as a dict (no runtime versions)."""
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
        """Execute ``request.pte`` ``warmup + runs`` times and time each ``Method.execute`` call.

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
        if request.executions < 1:
            raise ConfigError(f"nothing to run: warmup + runs is {request.executions}; ask for at least one run")
        method, method_name, load_ms = self._load(request.pte, request.threads)
        if tensors is not None:
            args, source = tuple(tensors), "tensors"
        elif request.inputs:
            args, source = read_input_files(method, request.pte, request.inputs), "files"
        else:
            args, source = _ones_inputs(method), "ones"
        overhead = timer_overhead_ns(2_000)
        times_ns = _time_executions(method, args, request.executions, request.pte)
        return RunResult(
            runner=self.name,
            e2e_ms=tuple(t / 1e6 for t in times_ns),
            warmup=request.warmup,
            threads=request.threads,
            build=self.build,
            variant=None,
            per_operator=False,
            per_operator_note=PER_OPERATOR_NOTE,
            metadata={
                "method": method_name,
                "load_ms": load_ms,
                "inputs": source,
                "timer_overhead_ns": overhead,
                "timing_scope": "Method.execute from Python: includes the pybindings input copy and "
                "output clone (a few microseconds per call)",
            },
        )

    def outputs(self, pte: str | Path, inputs: Sequence[Any] | None = None, *, threads: int = 1) -> list[Any]:
        """Execute ``pte`` once on ``inputs`` (tensors; None = all ones) and return its outputs."""
        method, _, _ = self._load(Path(pte), threads)
        args = tuple(inputs) if inputs is not None else _ones_inputs(method)
        return _execute_once(method, args, Path(pte))

    # ----------------------------------------------------------------------------------- loading

    def _load(self, pte: Path, threads: int) -> tuple[Any, str, float]:
        """(method, its name, load ms): program and method loaded with the thread pool set first.

        The load time covers ``load_program`` + ``load_method`` only, not the (seconds long) first
        import of the runtime. Runtime failures become :class:`RunnerError`.
        """
        load_pte_check(pte)
        # Registers the quantized kernels (quantize/dequantize out-variants) with the runtime, so
        # int8 programs on the portable backend load; without it they fail with OperatorMissing.
        import executorch.kernels.quantized  # noqa: F401
        from executorch.extension.pybindings import portable_lib
        from executorch.runtime import Runtime, Verification

        started = time.perf_counter_ns()
        try:
            program = Runtime.get().load_program(str(pte), verification=Verification.Minimal)
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
        return method, method_name, (time.perf_counter_ns() - started) / 1e6


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

    meta = method.metadata
    expected = meta.num_inputs()
    if len(files) != expected:
        raise RunnerError(
            f"{pte} takes {expected} input(s) but {len(files)} input file(s) were given: "
            f"{', '.join(str(f) for f in files)}"
        )
    tensors = []
    for i, path in enumerate(files):
        info = meta.input_tensor_meta(i)
        sizes = tuple(info.sizes())
        dtype = _torch_dtype(info.dtype(), pte, i)
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise RunnerError(f"cannot read input file {path}: {exc.strerror}") from None
        if len(raw) != info.nbytes():
            raise RunnerError(
                f"input file {path} has {len(raw)} bytes, but input {i} of {pte} is "
                f"{'x'.join(map(str, sizes))} {str(dtype).removeprefix('torch.')} = {info.nbytes()} bytes; "
                "pass the input files written by the export of this .pte"
            )
        # bytearray: torch.frombuffer wants a writable buffer; an empty one it refuses outright.
        t = torch.frombuffer(bytearray(raw), dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors.append(t.reshape(sizes))
    return tuple(tensors)


def _ones_inputs(method: Any) -> tuple[Any, ...]:
    import torch

    meta = method.metadata
    infos = [meta.input_tensor_meta(i) for i in range(meta.num_inputs())]
    return tuple(
        torch.ones(tuple(info.sizes()), dtype=_torch_dtype(info.dtype(), Path("<program>"), i))
        for i, info in enumerate(infos)
    )


def _time_executions(method: Any, args: tuple[Any, ...], count: int, pte: Path) -> list[int]:
    clock = time.perf_counter_ns
    execute = method.execute
    times: list[int] = []
    # A collection pause inside a timed call would be measured as model time (timeit does the same).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(count):
            t0 = clock()
            try:
                execute(args)
            except Exception as exc:
                raise RunnerError(
                    f"executing {pte} failed on execution {i + 1} of {count}: {_describe_runtime_error(exc)}. "
                    "Check that the inputs match the shapes and dtypes the model was exported with."
                ) from None
            times.append(clock() - t0)
    finally:
        if gc_was_enabled:
            gc.enable()
    return times


def _execute_once(method: Any, args: tuple[Any, ...], pte: Path) -> list[Any]:
    try:
        return list(method.execute(args))
    except Exception as exc:
        raise RunnerError(f"executing {pte} failed: {_describe_runtime_error(exc)}") from None
