"""Model -> ``.pte`` (plus ETRecord and raw input files), cached by content.

:func:`export_model` lowers a registered model (or any ``torch.nn.Module``) with one of the
recipes below and stores the result under ``cache_dir/<name>/<key16>/``::

    model.pte        the ExecuTorch program
    model.etrecord   the ETRecord of the same export (graph + debug handles for the Inspector)
    input_0.bin ...  each example input as raw little-endian bytes, for executor_runner --inputs
    meta.json        shapes, dtypes, versions, the cache key, the export time
    export.log       what torch/executorch/torchao printed and warned while exporting (kept out of
                     the caller's output by :mod:`pytest_sme2.thirdparty`)

The key is a sha256 over everything that decides the bytes of the program: the model classes'
source (by qualified name, not by the module name a file happened to be imported under), the
module tree, every parameter and buffer, the example inputs, the recipe and the
torch/executorch/torchao versions; nothing in it depends on the process or the directory, so
another session or another checkout of the same project hits. Re-exporting the same thing gives
byte-identical files, so a hit can be returned at once. An entry is written in a temporary
directory and renamed into place, so a killed or concurrent export never leaves a half-written entry.

Recipes (verified on executorch 1.4.1 / torch 2.13 / torchao 0.18):

- ``fp32``: ``torch.export.export`` -> ``to_edge_transform_and_lower``.
- ``fp16``: the same on ``deepcopy(model).half()`` with half inputs; there is no fp16 flag.
- ``int8``: PT2E static quantization, ``XNNPACKQuantizer`` symmetric per-channel, calibrated on
  the example inputs plus a few seeded random batches of the same shape.
- backend ``xnnpack`` partitions with ``XnnpackPartitioner``; ``portable`` partitions nothing, so
  every operator runs on ExecuTorch's portable kernels (int8 ones on the quantized kernels, which an
  ``executor_runner`` must link to run such a program).

torch and executorch are imported inside the functions that need them (``pytest --help`` stays fast).
"""

from __future__ import annotations

import contextlib
import copy
import errno
import hashlib
import inspect
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from pytest_sme2.errors import ConfigError, ExportError, ModelError, unreadable
from pytest_sme2.models import ModelSpec, get_model
from pytest_sme2.progress import Progress, to_stderr
from pytest_sme2.store.files import TMP_PREFIX, ensure_dir, fsync_path, remove_stale_tmp, replace_atomically
from pytest_sme2.thirdparty import third_party_output

SCHEMA_VERSION = 1

#: Bump when a recipe changes in a way that changes the exported bytes; old cache entries then miss.
RECIPE_VERSION = 1

DTYPES = ("fp32", "fp16", "int8")
BACKENDS = ("xnnpack", "portable")
DEFAULT_CACHE_DIR = Path(".sme2_cache")

#: Random batches (besides the example inputs) that calibrate int8 observers.
CALIBRATION_BATCHES = 3
CALIBRATION_SEED = 0

PTE_FILE = "model.pte"
ETRECORD_FILE = "model.etrecord"
META_FILE = "meta.json"
EXPORT_LOG_FILE = "export.log"


@dataclass(frozen=True)
class ExportedModel:
    """One exported program in the cache: the ``.pte``, its ETRecord and input files, and how it was made.

    ``export_seconds`` is how long the export took when it was made; a cache hit (``cached=True``)
    reports that original time, not the time of the lookup.
    """

    name: str
    dtype: str
    backend: str
    pte_path: Path
    etrecord_path: Path | None
    input_files: tuple[Path, ...]
    input_shapes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    cache_key: str
    executorch_version: str
    torch_version: str
    cached: bool
    export_seconds: float
    #: torch/executorch output of the export (None for entries written before it was kept)
    log_path: Path | None = None
    #: why the cache entry this export replaced was damaged ("" = it was not: a hit, or a first export)
    repaired: str = ""

    @property
    def entry_dir(self) -> Path:
        """The cache entry holding this export's files."""
        return self.pte_path.parent

    def load_inputs(self) -> tuple[Any, ...]:
        """The example inputs as tensors, read back from the input files."""
        import numpy as np
        import torch

        tensors = []
        for path, shape, dtype in zip(self.input_files, self.input_shapes, self.input_dtypes, strict=True):
            if dtype == "bfloat16":  # numpy has no bfloat16: the bytes were written as int16
                raw = torch.from_numpy(np.fromfile(path, dtype=np.int16)).view(torch.bfloat16)
            else:
                raw = torch.from_numpy(np.fromfile(path, dtype=np.dtype(dtype)))
            tensors.append(raw.reshape(shape))
        return tuple(tensors)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "name": self.name,
            "dtype": self.dtype,
            "backend": self.backend,
            "pte_path": str(self.pte_path),
            "etrecord_path": str(self.etrecord_path) if self.etrecord_path else None,
            "input_files": [str(p) for p in self.input_files],
            "input_shapes": [list(s) for s in self.input_shapes],
            "input_dtypes": list(self.input_dtypes),
            "cache_key": self.cache_key,
            "executorch_version": self.executorch_version,
            "torch_version": self.torch_version,
            "cached": self.cached,
            "export_seconds": self.export_seconds,
            "log_path": str(self.log_path) if self.log_path else None,
            "repaired": self.repaired,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExportedModel:
        return cls(
            name=str(data["name"]),
            dtype=str(data["dtype"]),
            backend=str(data["backend"]),
            pte_path=Path(data["pte_path"]),
            etrecord_path=Path(data["etrecord_path"]) if data.get("etrecord_path") else None,
            input_files=tuple(Path(p) for p in data.get("input_files", [])),
            input_shapes=tuple(tuple(int(d) for d in s) for s in data.get("input_shapes", [])),
            input_dtypes=tuple(str(d) for d in data.get("input_dtypes", [])),
            cache_key=str(data["cache_key"]),
            executorch_version=str(data.get("executorch_version", "")),
            torch_version=str(data.get("torch_version", "")),
            cached=bool(data.get("cached", False)),
            export_seconds=float(data.get("export_seconds", 0.0)),
            log_path=Path(data["log_path"]) if data.get("log_path") else None,
            repaired=str(data.get("repaired") or ""),
        )


# ---------------------------------------------------------------------------------------- export


def export_model(
    spec_or_module: ModelSpec | str | Any,
    *,
    dtype: str = "fp32",
    backend: str = "xnnpack",
    inputs: Sequence[Any] | None = None,
    cache_dir: str | Path = DEFAULT_CACHE_DIR,
    name: str | None = None,
    progress: Progress | None = to_stderr,
) -> ExportedModel:
    """Export a model to a ``.pte`` with ETRecord and input files, or return the cached export.

    ``spec_or_module`` is a :class:`~pytest_sme2.models.ModelSpec`, the name of a registered model,
    or a ``torch.nn.Module`` (then ``inputs`` is required). ``inputs`` replaces the model's example
    inputs. ``progress`` gets a line when an export starts and when it ends (``None`` = silent).

    Raises :class:`ModelError` when the model does not run on its inputs, :class:`ExportError` when
    the export itself fails or the cache cannot be written, :class:`ConfigError` for a dtype or
    backend that does not exist.
    """
    module, example_inputs, model_name, key = _keyed(spec_or_module, dtype, backend, inputs, name)
    cache_root = Path(cache_dir)
    model_dir = cache_root / _safe_dir_name(model_name)
    entry = model_dir / key[:16]

    hit, damage = _entry(entry, key)
    if hit is not None:
        return hit
    repaired = _set_aside_damaged(entry, key, cache_root) if damage else ""
    if repaired and progress is not None:
        progress(repaired)

    _check_inputs_run(module, example_inputs, model_name)
    tmp = _make_tmp_dir(model_dir, cache_root, key)
    label = f"{model_name} {dtype}/{backend}"
    started = time.perf_counter()

    def step(stage: str) -> None:
        if progress is not None:
            progress(f"exporting {label}: {stage} ({time.perf_counter() - started:.0f} s)")

    step("starting")
    try:
        try:
            saved_inputs = _lower_and_save(
                module, example_inputs, dtype=dtype, backend=backend, out=tmp, model_name=model_name,
                cache_root=cache_root, log=tmp / EXPORT_LOG_FILE, step=step,
            )
        except _LoweringFailed as exc:
            kept = model_dir / f"{key[:16]}-failed-{EXPORT_LOG_FILE}"
            raise _keep_failure_log(exc, tmp / EXPORT_LOG_FILE, kept) from None
        seconds = time.perf_counter() - started
        meta = _meta(model_name, dtype=dtype, backend=backend, key=key, inputs=saved_inputs, seconds=seconds,
                     has_etrecord=True, sizes=_sizes(tmp))
        _write_file(tmp / META_FILE, (json.dumps(meta, indent=2) + "\n").encode(), cache_root)
        fsync_path(tmp)
        _publish(tmp, entry)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already after a successful rename
    if progress is not None:
        progress(f"exported {label} in {seconds:.1f} s")
    result, damage = _entry(entry, key)
    if result is None:  # the entry was just renamed into place (ours or a concurrent export's, identical)
        raise ExportError(f"the export of {label} in {entry} is {damage or 'gone'} right after it was written: "
                          "something else writes to the export cache; point --sme2-cache-dir (or cache_dir=) at a "
                          "directory of its own")
    return replace(result, cached=False, repaired=repaired)


def find_cached(
    spec_or_module: ModelSpec | str | Any,
    *,
    dtype: str = "fp32",
    backend: str = "xnnpack",
    inputs: Sequence[Any] | None = None,
    cache_dir: str | Path = DEFAULT_CACHE_DIR,
    name: str | None = None,
) -> tuple[str, ExportedModel | None]:
    """``(cache key, the cached export or None)``: what :func:`export_model` would return at once, without exporting.

    Builds the model (its factory, under the fixed seed) to compute the key, so it raises what building does.
    """
    _, _, model_name, key = _keyed(spec_or_module, dtype, backend, inputs, name)
    return key, _entry(Path(cache_dir) / _safe_dir_name(model_name) / key[:16], key)[0]


def _keyed(
    spec_or_module: ModelSpec | str | Any, dtype: str, backend: str, inputs: Sequence[Any] | None, name: str | None
) -> tuple[Any, tuple[Any, ...], str, str]:
    """(module, example inputs, model name, cache key) of one export request, its dtype and backend checked."""
    if dtype not in DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    module, example_inputs, model_name = _resolve(spec_or_module, inputs, name)
    return module, example_inputs, model_name, cache_key(module, example_inputs, dtype=dtype, backend=backend)


def _resolve(
    spec_or_module: ModelSpec | str | Any, inputs: Sequence[Any] | None, name: str | None
) -> tuple[Any, tuple[Any, ...], str]:
    """(module in eval mode, example inputs, model name) from a spec, a registered name or a module."""
    import torch

    if isinstance(spec_or_module, str):
        spec_or_module = get_model(spec_or_module)
    if isinstance(spec_or_module, ModelSpec):
        module, example = spec_or_module.build()
        model_name = name or spec_or_module.name
    elif isinstance(spec_or_module, torch.nn.Module):
        module = spec_or_module.eval()
        model_name = name or type(spec_or_module).__name__
        if inputs is None:
            raise ModelError(
                f"export of module {model_name!r} needs example inputs: pass inputs=(tensor, ...) with "
                "the shapes its forward() takes, or register the model with @register_model"
            )
        example = ()
    else:
        raise ModelError(
            f"cannot export {type(spec_or_module).__name__} {spec_or_module!r}: pass a registered model "
            "name, a ModelSpec from pytest_sme2.models.get_model, or a torch.nn.Module with inputs=..."
        )
    chosen = tuple(inputs) if inputs is not None else tuple(example)
    if not chosen:
        raise ModelError(f"model {model_name!r} has no example inputs; pass inputs=(tensor, ...)")
    for i, t in enumerate(chosen):
        if not isinstance(t, torch.Tensor):
            raise ModelError(
                f"input {i} of model {model_name!r} is a {type(t).__name__}, not a tensor; "
                "executor_runner feeds tensors only, so every example input must be a torch.Tensor"
            )
    return module, chosen, model_name


class _LoweringFailed(ExportError):
    """torch.export or the lowering failed (not a cache write): what torch printed is worth keeping."""


def _keep_failure_log(exc: ExportError, log: Path, keep: Path) -> ExportError:
    """The same error, naming where the failed export's torch/executorch output was kept."""
    try:
        if not log.is_file() or log.stat().st_size == 0:
            return ExportError(str(exc))
        shutil.move(log, keep)
    except OSError:
        return ExportError(str(exc))
    return ExportError(f"{exc} torch/executorch output of this export: {keep}")


def _safe_dir_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".") or "model"


def _shapes_text(inputs: Sequence[Any]) -> str:
    return ", ".join(f"{'x'.join(str(d) for d in t.shape) or 'scalar'} {_dtype_name(t.dtype)}" for t in inputs)


def _dtype_name(torch_dtype: Any) -> str:
    return str(torch_dtype).removeprefix("torch.")


def _first_line(exc: BaseException) -> str:
    """``Type: first non-empty line`` of an exception: what to show instead of a traceback."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else "(no message)"
    if text.endswith(":") and len(lines) > 1:
        # "...mismatched dtypes:" alone names no operator; the culprit is on the next line.
        text = f"{text} {lines[1]}"
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(exc).__name__}: {text}"


def _check_inputs_run(module: Any, inputs: tuple[Any, ...], model_name: str) -> None:
    """Run the model eagerly once so wrong inputs fail as a ModelError, not deep inside torch.export."""
    import torch

    try:
        with torch.no_grad():
            module(*inputs)
    except Exception as exc:
        raise ModelError(
            f"model {model_name!r} does not run on the inputs given ({_shapes_text(inputs)}): "
            f"{_first_line(exc)}. Pass inputs with the shapes and dtypes its forward() expects."
        ) from None


# ------------------------------------------------------------------------------------- cache key


def _versions() -> dict[str, str]:
    out = {}
    for package in ("executorch", "torch", "torchao"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "not installed"
    return out


def _class_sources(module: Any) -> list[str]:
    """Qualified name and source of every non-torch class in the module tree, sorted.

    The module name is left out on purpose: it depends on how the defining file was imported (a
    models file may be ``my_models`` in one session and ``pkg.my_models`` in another), while the
    source text is what defines the class. ``repr`` stands in when the source is unavailable.
    """
    sources: set[str] = set()
    seen: set[type] = set()
    for sub in module.modules():
        cls = type(sub)
        # torch's own classes are pinned by the torch version in the key.
        if cls in seen or cls.__module__.split(".", maxsplit=1)[0] == "torch":
            continue
        seen.add(cls)
        try:
            text = inspect.getsource(cls)
        except (OSError, TypeError):  # defined in a REPL or a compiled module
            text = repr(sub)
        sources.add(f"{cls.__qualname__}\n{text}")
    return sorted(sources)


def _hash_tensor(h: Any, label: str, tensor: Any) -> None:
    import torch

    t = tensor.detach().cpu().contiguous()
    h.update(f"{label}|{_dtype_name(t.dtype)}|{tuple(t.shape)}|".encode())
    try:
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    except (RuntimeError, TypeError):  # quantized or otherwise exotic tensors
        h.update(repr(t).encode())


def cache_key(module: Any, inputs: Sequence[Any], *, dtype: str, backend: str) -> str:
    """The sha256 (hex) that names an export: source, module tree, weights, inputs, recipe, versions.

    The input *values* are part of it, not just shapes: they are stored as the input files and
    they calibrate the int8 recipe, so different values give a different entry.
    """
    import torch

    h = hashlib.sha256()
    h.update(f"pytest-sme2 export recipe {RECIPE_VERSION}|{dtype}|{backend}|".encode())
    h.update(json.dumps(_versions(), sort_keys=True).encode())
    for source in _class_sources(module):
        h.update(source.encode())
    h.update(repr(module).encode())
    state = module.state_dict()
    for key in sorted(state):
        value = state[key]
        if isinstance(value, torch.Tensor):
            _hash_tensor(h, f"state:{key}", value)
        else:
            h.update(f"state:{key}={value!r}".encode())
    # Non-persistent buffers are not in the state dict but still shape the program.
    for key, buf in sorted(module.named_buffers()):
        if key not in state:
            _hash_tensor(h, f"buffer:{key}", buf)
    for i, t in enumerate(inputs):
        _hash_tensor(h, f"input:{i}", t)
    return h.hexdigest()


# --------------------------------------------------------------------------------------- recipes


@contextlib.contextmanager
def _torch_trace_log_muted() -> Iterator[None]:
    """Detach foreign handlers from torch's structured-trace logger while exporting.

    ``torch.__trace`` is always at DEBUG and never propagates; torch serializes a graph dump for it
    whenever it has a handler. pytest attaches its log-capture handlers to every non-propagating
    logger, so under pytest (torch imported before the test) each export computed ~600 such dumps
    and a failing test's report printed them all. torch's own trace file handler stays, and
    ``TORCH_TRACE``/``TORCH_DTRACE`` (asking for those dumps) turn this off.
    """
    if os.environ.get("TORCH_TRACE") or os.environ.get("TORCH_DTRACE"):
        yield
        return
    import logging

    trace_log = logging.getLogger("torch.__trace")
    foreign = [h for h in trace_log.handlers if type(h).__name__ != "LazyTraceHandler"]
    for handler in foreign:
        trace_log.removeHandler(handler)
    try:
        yield
    finally:
        for handler in foreign:
            trace_log.addHandler(handler)


def _lower_and_save(
    module: Any, inputs: tuple[Any, ...], *, dtype: str, backend: str, out: Path, model_name: str, cache_root: Path,
    log: Path, step: Callable[[str], None],
) -> list[Any]:
    """Run the recipe and write model.pte, model.etrecord and input_<i>.bin into ``out``.

    Returns the inputs as exported (half precision for fp16), which are the ones written to disk. Each stage
    runs with torch/executorch's own output and warnings diverted to ``log`` (they are ours, not the caller's);
    ``step`` is told of each stage between them, where the terminal is the caller's again.
    """
    import torch

    stage = "preparing the model"
    label = f"{model_name} {dtype}/{backend}"

    def quiet() -> Any:
        return _quiet(log, f"export {label}: {stage}")

    try:
        if dtype == "fp16":
            stage = "converting to fp16"
            module = copy.deepcopy(module).half()
            inputs = tuple(t.half() if t.is_floating_point() else t for t in inputs)
        with torch.no_grad():
            stage = "torch.export.export"
            step(stage)
            with quiet():
                program = torch.export.export(module, inputs)
            if dtype == "int8":
                stage = "int8 quantization (PT2E, XNNPACKQuantizer)"
                step("int8 quantization")
                with quiet():
                    program = _quantize_int8(program, inputs)
        stage = "lowering (to_edge_transform_and_lower)"
        step(f"lowering for {backend}")
        with quiet():
            from executorch.exir import to_edge_transform_and_lower

            if dtype == "int8" and backend == "portable":
                # Quantize/dequantize ops stay in the graph and need their out-variant kernels registered.
                import executorch.kernels.quantized  # noqa: F401

            partitioners: list[Any] = []
            if backend == "xnnpack":
                from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

                partitioners = [XnnpackPartitioner()]
            edge = to_edge_transform_and_lower(program, partitioner=partitioners, generate_etrecord=True)
        stage = "to_executorch"
        step("writing the program")
        with quiet():
            executorch_program = edge.to_executorch()
            etrecord = executorch_program.get_etrecord()
    except Exception as exc:
        raise _LoweringFailed(
            f"exporting {label} failed in {stage}: {_first_line(exc)}. The model may use an operator "
            f"or Python construct that torch.export or the {backend} backend does not support; "
            "run the same export in Python to see the full error."
        ) from None
    try:
        executorch_program.save(str(out / PTE_FILE))
        etrecord.save(str(out / ETRECORD_FILE))
    except OSError as exc:
        raise _cache_error(cache_root, exc) from None
    except Exception as exc:
        raise ExportError(f"saving the export of {label} failed: {_first_line(exc)}") from None
    for i, t in enumerate(inputs):
        _write_file(out / f"input_{i}.bin", _raw_bytes(t), cache_root)
    fsync_path(out / PTE_FILE)
    fsync_path(out / ETRECORD_FILE)
    return list(inputs)


@contextlib.contextmanager
def _quiet(log: Path, label: str) -> Iterator[None]:
    with _torch_trace_log_muted(), third_party_output(log, label=label):
        yield


def _quantize_int8(program: Any, inputs: tuple[Any, ...]) -> Any:
    """PT2E static int8: prepare, calibrate on the example inputs plus seeded batches, convert, re-export."""
    import torch
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer()
    quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(program.module(), quantizer)
    prepared(*inputs)
    # A seeded generator keeps calibration, and so the exported bytes, reproducible.
    generator = torch.Generator().manual_seed(CALIBRATION_SEED)
    for _ in range(CALIBRATION_BATCHES):
        batch = tuple(
            torch.randn(t.shape, generator=generator, dtype=t.dtype) if t.is_floating_point() else t
            for t in inputs
        )
        prepared(*batch)
    return torch.export.export(convert_pt2e(prepared), inputs)


def _raw_bytes(tensor: Any) -> bytes:
    """A tensor's elements as raw little-endian bytes: the executor_runner ``--inputs`` format."""
    import torch

    t = tensor.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16; the bits are what matter
        t = t.view(torch.int16)
    data: bytes = t.numpy().tobytes()
    return data


# ----------------------------------------------------------------------------------------- cache


def _cache_error(cache_root: Path, exc: OSError) -> ExportError:
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        fix = "free disk space, or point --sme2-cache-dir at a disk with room"
    else:
        fix = "point --sme2-cache-dir (or cache_dir=) at a writable directory"
    where = f" ({exc.filename})" if exc.filename else ""
    return ExportError(f"cannot write the export cache {cache_root}{where}: {reason}; {fix}")


def _write_file(path: Path, data: bytes, cache_root: Path) -> None:
    try:
        replace_atomically(path, lambda fh: fh.write(data))
    except OSError as exc:
        raise _cache_error(cache_root, exc) from None


def _make_tmp_dir(model_dir: Path, cache_root: Path, key: str) -> Path:
    """A fresh private directory beside the final entry (same filesystem, so the rename is atomic)."""
    try:
        ensure_dir(model_dir)
        remove_stale_tmp(model_dir)
        return Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{key[:16]}-", dir=model_dir))
    except OSError as exc:
        raise _cache_error(cache_root, exc) from None


def _publish(tmp: Path, entry: Path) -> bool:
    """Rename a finished ``tmp`` directory to ``entry``; False when another export got there first.

    A directory rename is atomic and refuses a non-empty target, so of two concurrent exports of
    the same key exactly one wins and the other's identical files are discarded.
    """
    if entry.exists() and not (entry / META_FILE).is_file():
        shutil.rmtree(entry, ignore_errors=True)  # not one of ours: only a published entry has meta
    try:
        tmp.rename(entry)
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            shutil.rmtree(tmp, ignore_errors=True)
            return False
        raise _cache_error(entry.parent.parent, exc) from None
    fsync_path(entry.parent)
    return True


def _sizes(entry: Path) -> dict[str, int]:
    """Each file of a finished entry and its size in bytes, for meta.json: a later read checks them."""
    return {p.name: p.stat().st_size for p in sorted(entry.iterdir())
            if p.is_file() and p.name not in (META_FILE, EXPORT_LOG_FILE)}


def _meta(
    name: str, *, dtype: str, backend: str, key: str, inputs: list[Any], seconds: float, has_etrecord: bool,
    sizes: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    versions = _versions()
    return {
        "schema_version": SCHEMA_VERSION,
        "recipe_version": RECIPE_VERSION,
        "name": name,
        "dtype": dtype,
        "backend": backend,
        "cache_key": key,
        "files": {
            "pte": PTE_FILE,
            "etrecord": ETRECORD_FILE if has_etrecord else None,
            "log": EXPORT_LOG_FILE,
            "inputs": [f"input_{i}.bin" for i in range(len(inputs))],
        },
        #: file name -> bytes: an entry whose files differ (cut off, deleted) is damaged and exported again
        "sizes": dict(sizes or {}),
        "input_shapes": [list(t.shape) for t in inputs],
        "input_dtypes": [_dtype_name(t.dtype) for t in inputs],
        "executorch_version": versions["executorch"],
        "torch_version": versions["torch"],
        "torchao_version": versions["torchao"],
        "export_seconds": round(seconds, 3),
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _entry(entry: Path, key: str) -> tuple[ExportedModel | None, str]:
    """``(the cached export in entry, "")`` when it is complete and made for ``key``; ``(None, "")`` when there is no
    entry; ``(None, what is wrong)`` when the entry is damaged (meta.json unreadable, a file missing or of another
    size than meta.json records, a ``.pte`` shorter than its header declares): never served, exported again."""
    if not entry.is_dir():
        return None, ""
    try:
        meta = json.loads((entry / META_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"{META_FILE} is missing"
    except (OSError, ValueError) as exc:
        return None, f"{META_FILE} is unreadable ({exc})"
    try:
        files = meta["files"]
        base = entry.absolute()
        pte = base / files["pte"]
        etrecord = base / files["etrecord"] if files.get("etrecord") else None
        log = base / files["log"] if files.get("log") else None
        inputs = tuple(base / f for f in files["inputs"])
        if meta.get("cache_key") != key:
            return None, f"its {META_FILE} is for another cache key ({str(meta.get('cache_key'))[:16]})"
        missing = [p.name for p in (pte, *inputs) if not p.is_file()]
        if missing:
            return None, f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing"
        damage = _size_damage(base, meta.get("sizes"), pte)
        if damage:
            return None, damage
        return ExportedModel(
            name=str(meta["name"]),
            dtype=str(meta["dtype"]),
            backend=str(meta["backend"]),
            pte_path=pte,
            etrecord_path=etrecord if etrecord is not None and etrecord.is_file() else None,
            input_files=inputs,
            input_shapes=tuple(tuple(int(d) for d in s) for s in meta["input_shapes"]),
            input_dtypes=tuple(str(d) for d in meta["input_dtypes"]),
            cache_key=key,
            executorch_version=str(meta["executorch_version"]),
            torch_version=str(meta["torch_version"]),
            cached=True,
            export_seconds=float(meta["export_seconds"]),
            log_path=log if log is not None and log.is_file() else None,
        ), ""
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return None, f"its {META_FILE} does not match the schema ({type(exc).__name__}: {exc})"


def _size_damage(base: Path, sizes: Any, pte: Path) -> str:
    """What differs from the sizes meta.json recorded ("" = nothing); an entry from before sizes were recorded
    gets its ``.pte`` checked against the size its own header declares."""
    if not isinstance(sizes, Mapping) or not sizes:
        try:
            load_pte_check(pte)
        except ExportError:
            return f"{pte.name} is shorter than its header declares (cut off while it was written)"
        return ""
    for name, size in sizes.items():
        path = base / str(name)
        try:
            found = path.stat().st_size
        except OSError:
            return f"{name} is missing"
        if found != size:
            return f"{name} has {found} bytes where {size} were written"
    return ""


def _set_aside_damaged(entry: Path, key: str, cache_root: Path) -> str:
    """Move a damaged entry out of the way (it is never served again) and say what was wrong, once.

    Under the cache's lock the entry is read again: of two processes that found it damaged, one moves it and the
    other finds no entry (or the fresh one a third published), so a good entry is never removed. ""= nothing
    was moved here (another process did it)."""
    from pytest_sme2.store.files import file_lock

    try:
        with file_lock(entry.parent / f".repair-{key[:16]}.lock"):
            _, damage = _entry(entry, key)
            if not damage:
                return ""
            aside = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}damaged-{key[:16]}-", dir=entry.parent))
            entry.rename(aside / entry.name)
    except OSError as exc:
        raise _cache_error(cache_root, exc) from None
    shutil.rmtree(aside, ignore_errors=True)
    return f"export cache entry {entry} was damaged ({damage}): removed, exporting it again"


# ------------------------------------------------------------------------------------ .pte check

_PTE_IDENTIFIER = re.compile(rb"ET\d\d")
_EXTENDED_HEADER_MAGIC = b"eh00"


def load_pte_check(path: str | Path) -> Path:
    """Check that ``path`` is a complete ExecuTorch program; return it, or raise :class:`ExportError`.

    A ``.pte`` is a flatbuffer with the identifier ``ETxx`` (``ET12`` for executorch 1.x) at bytes
    4-8, usually followed by an extended header (``eh00``) that declares the program and segment
    sizes, which reveals a truncated copy before the runtime trips over it.
    """
    p = Path(path)
    try:
        with p.open("rb") as fh:
            head = fh.read(64)
        size = p.stat().st_size
    except OSError as exc:
        raise unreadable(p, exc, what="program file", fix="export the model first (export_model)", inside=".pte",
                         error=ExportError) from None
    if len(head) < 8 or not _PTE_IDENTIFIER.fullmatch(head[4:8]):
        found = head[4:8] if len(head) >= 8 else head
        hint = ""
        if head[8:12] == b"ED00" or head[4:8] == b"ED00":
            hint = " It is an ETDump trace, not a program."
        elif head[:4] == b"\x7fELF":
            hint = " It is an executable, not a program."
        elif head[:2] == b"PK":
            hint = " It is a zip archive (a torch .pt/.pt2 file?), not an ExecuTorch program."
        raise ExportError(
            f"{p} is not an ExecuTorch program: expected an identifier like 'ET12' at bytes 4-8, "
            f"found {found!r} ({size} bytes).{hint} Pass a .pte written by export_model or "
            "ExecutorchProgramManager.save()."
        )
    if head[8:12] == _EXTENDED_HEADER_MAGIC and len(head) >= 32:
        program_size = int.from_bytes(head[16:24], "little")
        segment_base = int.from_bytes(head[24:32], "little")
        header_len = int.from_bytes(head[12:16], "little")
        segment_size = int.from_bytes(head[32:40], "little") if header_len > 24 and len(head) >= 40 else 0
        expected = max(program_size, segment_base + segment_size)
        if size < expected:
            raise ExportError(
                f"{p} is truncated: its header declares {expected} bytes but the file has {size}. "
                "It was probably cut off while being written or copied; export it again."
            )
    return p
