"""export_model on the three example models in every recipe, the content cache, and the errors users see.

Every export is run for real (torch.export + executorch lowering) and then executed with the local
runtime against the eager model, so a recipe that produced a loadable but wrong program fails here.
Exports share one cache directory per session (per xdist worker).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import example_models  # noqa: F401 - registers the example models
from example_models.models import ToyCNN
from pytest_sme2.errors import ConfigError, ExportError, ModelError
from pytest_sme2.models import get_model
from pytest_sme2.program.export import (
    META_FILE,
    TMP_PREFIX,
    ExportedModel,
    _publish,
    cache_key,
    export_model,
    load_pte_check,
)
from pytest_sme2.runners.local import LocalRunner

DATA = Path(__file__).parents[1] / "data"

#: Max |exported - eager fp32| relative to max |eager fp32|, per dtype. Measured on these models:
#: fp32 <= 4e-6, fp16 <= 0.017, int8 <= 0.092; a broken program is off by ~1.
TOLERANCE = {"fp32": 1e-4, "fp16": 0.05, "int8": 0.25}

RECIPES = [("fp32", "xnnpack"), ("fp16", "xnnpack"), ("int8", "xnnpack"), ("fp32", "portable")]
MODELS = ["toy_cnn", "tiny_transformer", "mobilenet_v3_small"]
# The portable native_layer_norm kernel returns wrong values in fp16, in executorch 1.4.1 and still in
# 1.5.1 (re-checked: a standalone nn.LayerNorm(256) on 1x128x256 unit-scale data is off by 22.75 on both
# backends, while eager fp16 is within 2.2e-3). LayerNorm is never delegated to XNNPACK, so every fp16
# transformer inherits it. Strict: tells us when it is fixed.
FP16_LAYER_NORM_BUG = pytest.mark.xfail(
    reason="executorch 1.4.1 and 1.5.1 portable native_layer_norm is wrong in fp16", strict=True,
    raises=AssertionError,
)


def _cases() -> list[object]:
    cases = []
    for name in MODELS:
        for dtype, backend in RECIPES:
            marks = [] if name == "toy_cnn" else [pytest.mark.slow]
            if name == "tiny_transformer" and dtype == "fp16":
                marks.append(FP16_LAYER_NORM_BUG)
            cases.append(pytest.param(name, dtype, backend, id=f"{name}-{dtype}-{backend}", marks=marks))
    # The other two portable recipes, on the cheap model.
    cases.append(pytest.param("toy_cnn", "fp16", "portable", id="toy_cnn-fp16-portable"))
    cases.append(pytest.param("toy_cnn", "int8", "portable", id="toy_cnn-int8-portable"))
    return cases


@pytest.fixture(scope="session")
def export_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sme2_export_cache")


Built = Callable[[str], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]


@pytest.fixture(scope="module")
def built() -> Built:
    """``built(name)`` -> the example model and its example inputs, built once in this module: the shapes and the eager
    reference of each recipe's case (MobileNetV3's build calibrates its BatchNorm statistics: seconds each time).
    export_model builds its own, as it must: the cold export and the cache hit are checked as they run."""
    done: dict[str, tuple[torch.nn.Module, tuple[torch.Tensor, ...]]] = {}

    def build(name: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
        if name not in done:
            done[name] = get_model(name).build()
        return done[name]

    return build


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(("name", "dtype", "backend"), _cases())
def test_recipe_exports_caches_and_computes_the_model(name: str, dtype: str, backend: str, export_cache: Path,
                                                     built: Built) -> None:
    lines: list[str] = []
    started = time.perf_counter()
    first = export_model(name, dtype=dtype, backend=backend, cache_dir=export_cache, progress=lines.append)
    cold_s = time.perf_counter() - started
    assert not first.cached
    # The stages show that a long export is alive; the last line says how long it took.
    assert lines[0].startswith(f"exporting {name} {dtype}/{backend}: starting (")
    assert any(": lowering for " in line for line in lines) and any(": torch.export.export" in line for line in lines)
    assert (": int8 quantization" in " ".join(lines)) == (dtype == "int8")
    assert lines[-1].startswith(f"exported {name} {dtype}/{backend} in ") and lines[-1].endswith(" s")
    progress_lines = len(lines)

    # Layout: cache/<name>/<key16>/{model.pte, model.etrecord, input_0.bin, meta.json}
    assert first.entry_dir == (export_cache / name / first.cache_key[:16]).absolute()
    assert load_pte_check(first.pte_path) == first.pte_path
    assert first.etrecord_path is not None and first.etrecord_path.stat().st_size > 0
    meta = json.loads((first.entry_dir / META_FILE).read_text())
    assert meta["cache_key"] == first.cache_key and meta["dtype"] == dtype and meta["backend"] == backend
    model, example = built(name)
    assert first.input_shapes == tuple(tuple(t.shape) for t in example)
    expected_dtype = "float16" if dtype == "fp16" else "float32"
    assert first.input_dtypes == (expected_dtype,) * len(example)
    for path, shape in zip(first.input_files, first.input_shapes, strict=True):
        assert path.stat().st_size == torch.Size(shape).numel() * (2 if dtype == "fp16" else 4)
    assert not list((export_cache / name).glob(f"{TMP_PREFIX}*")), "temporary export dirs left behind"

    pte_sha, pte_mtime = _sha256(first.pte_path), first.pte_path.stat().st_mtime_ns

    def no_export(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cache hit only builds the model and hashes it; it must not export again")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("pytest_sme2.program.export._lower_and_save", no_export)
        started = time.perf_counter()
        again = export_model(name, dtype=dtype, backend=backend, cache_dir=export_cache, progress=lines.append)
        cached_s = time.perf_counter() - started  # printed, not asserted: timings live in benchmarks/
    print(f"\n{name} {dtype}/{backend}: cold export {cold_s:.2f} s, cached {cached_s:.3f} s")
    assert again.cached and len(lines) == progress_lines, "a cache hit must neither export nor report progress"
    assert again.pte_path == first.pte_path and again.cache_key == first.cache_key
    assert _sha256(again.pte_path) == pte_sha and again.pte_path.stat().st_mtime_ns == pte_mtime

    # The program computes the model: run it on the stored inputs and compare with eager fp32.
    with torch.no_grad():
        reference = model(*example)
    output = LocalRunner().outputs(first.pte_path, first.load_inputs())[0].float()
    error = float((output - reference).abs().max()) / float(reference.abs().max())
    print(f"{name} {dtype}/{backend}: max relative error vs eager fp32 {error:.2e}")
    assert error <= TOLERANCE[dtype]


def test_reexport_is_byte_identical(export_cache: Path, tmp_path: Path) -> None:
    """The cache is only sound if the same inputs always give the same bytes."""
    cached = export_model("toy_cnn", cache_dir=export_cache, progress=None)
    fresh = export_model("toy_cnn", cache_dir=tmp_path, progress=None)
    assert not fresh.cached
    assert fresh.cache_key == cached.cache_key
    assert fresh.pte_path.read_bytes() == cached.pte_path.read_bytes()


def test_cache_key_tracks_weights_inputs_and_recipe() -> None:
    model, (x,) = get_model("toy_cnn").build()
    same, (same_x,) = get_model("toy_cnn").build()
    key = cache_key(model, (x,), dtype="fp32", backend="xnnpack")
    assert cache_key(same, (same_x,), dtype="fp32", backend="xnnpack") == key
    assert cache_key(model, (x,), dtype="fp16", backend="xnnpack") != key
    assert cache_key(model, (x,), dtype="fp32", backend="portable") != key
    assert cache_key(model, (x + 1e-3,), dtype="fp32", backend="xnnpack") != key, "input values calibrate int8"
    with torch.no_grad():
        same.fc.bias[0] += 1e-6
    assert cache_key(same, (same_x,), dtype="fp32", backend="xnnpack") != key
    assert cache_key(ToyCNN(width=8).eval(), (x,), dtype="fp32", backend="xnnpack") != key


MODEL_SOURCE = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)
"""


def test_cache_key_ignores_the_module_name_a_class_was_imported_under(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A models file is ``my_models`` in one session and ``_sme2_models_...`` or ``pkg.my_models`` in another;
    the key follows the class's source, not that name — but a change of source still changes it."""
    import importlib.util
    import inspect

    def build(path: Path, module_name: str) -> torch.nn.Module:
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        # inspect.getsource finds a class's file through its module, as it does for a real import.
        monkeypatch.setitem(sys.modules, module_name, module)
        spec.loader.exec_module(module)
        assert "return self.fc" in inspect.getsource(module.Net), "the key must see the source, not a repr"
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return module.Net().eval()

    first, second = tmp_path / "a" / "my_models.py", tmp_path / "b" / "models_copy.py"
    for path in (first, second):
        path.parent.mkdir()
        path.write_text(MODEL_SOURCE)
    x = (torch.ones(1, 4),)
    key = cache_key(build(first, "_sme2_models_123"), x, dtype="fp32", backend="xnnpack")
    assert cache_key(build(second, "pkg.my_models"), x, dtype="fp32", backend="xnnpack") == key
    second.write_text(MODEL_SOURCE.replace("return self.fc(x)", "return self.fc(x) * 2"))
    assert cache_key(build(second, "pkg.my_models_v2"), x, dtype="fp32", backend="xnnpack") != key


def test_wrong_input_shape_is_a_model_error_naming_model_and_shapes(tmp_path: Path) -> None:
    with pytest.raises(ModelError) as info:
        export_model("toy_cnn", inputs=(torch.randn(1, 4, 32, 32),), cache_dir=tmp_path, progress=None)
    message = str(info.value)
    assert "'toy_cnn'" in message and "1x4x32x32 float32" in message
    assert "Traceback" not in message
    assert not list(tmp_path.rglob("*.pte"))


class _DataDependent(torch.nn.Module):
    """Runs eagerly, but torch.export cannot trace a branch on a tensor's value."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x - 1


def test_export_failure_names_model_recipe_stage_and_first_line(tmp_path: Path) -> None:
    with pytest.raises(ExportError) as info:
        export_model(_DataDependent(), inputs=(torch.ones(2, 3),), name="branchy", cache_dir=tmp_path, progress=None)
    assert not isinstance(info.value, ModelError), "the model runs; it is the export that fails"
    message = str(info.value)
    assert message.startswith("exporting branchy fp32/xnnpack failed in torch.export.export: ")
    assert "Traceback" not in message and len(message.splitlines()) == 1
    assert not list((tmp_path / "branchy").glob(f"{TMP_PREFIX}*")), "a failed export must clean up"
    # What torch printed and warned while failing is kept, and the message says where.
    (kept,) = (tmp_path / "branchy").glob("*-failed-export.log")
    assert message.endswith(f" torch/executorch output of this export: {kept}")
    assert kept.read_text().startswith("==== export branchy fp32/xnnpack: torch.export.export (")


def test_unwritable_cache_dir_is_an_export_error_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the cache directory should be")
    cache_dir = blocker / "cache"

    def no_export(*args: object, **kwargs: object) -> None:
        raise AssertionError("must fail before spending seconds on an export")

    monkeypatch.setattr("pytest_sme2.program.export._lower_and_save", no_export)
    with pytest.raises(ExportError) as info:
        export_model("toy_cnn", cache_dir=cache_dir, progress=None)
    assert str(cache_dir) in str(info.value) and "--sme2-cache-dir" in str(info.value)


def test_bad_choices_and_missing_inputs() -> None:
    with pytest.raises(ConfigError, match="fp32, fp16, int8"):
        export_model("toy_cnn", dtype="bf16", progress=None)
    with pytest.raises(ConfigError, match="xnnpack, portable"):
        export_model("toy_cnn", backend="vulkan", progress=None)
    with pytest.raises(ModelError, match="needs example inputs"):
        export_model(ToyCNN(), progress=None)
    with pytest.raises(ModelError, match="unknown model 'no_such_model'"):
        export_model("no_such_model", progress=None)


def test_debris_of_killed_exports_is_ignored_and_cleaned(tmp_path: Path) -> None:
    model, inputs = get_model("toy_cnn").build()
    key = cache_key(model, inputs, dtype="fp32", backend="portable")
    model_dir = tmp_path / "toy_cnn"
    stale = model_dir / f"{TMP_PREFIX}{key[:16]}-killed"
    fresh = model_dir / f"{TMP_PREFIX}{key[:16]}-in-progress"
    for d in (stale, fresh):
        d.mkdir(parents=True)
        (d / "model.pte").write_bytes(b"half-written")
    two_hours_ago = time.time() - 7200
    os.utime(stale, (two_hours_ago, two_hours_ago))
    # An entry directory without meta.json can only be foreign; it must not be served.
    (model_dir / key[:16]).mkdir()
    (model_dir / key[:16] / "model.pte").write_bytes(b"junk")

    exported = export_model("toy_cnn", backend="portable", cache_dir=tmp_path, progress=None)
    assert not exported.cached
    load_pte_check(exported.pte_path)
    assert not stale.exists(), "debris older than an hour is removed"
    assert fresh.exists(), "a recent temp dir may belong to a concurrent export"


def test_losing_a_publish_race_keeps_the_winner(tmp_path: Path) -> None:
    winner = tmp_path / "entry"
    winner.mkdir()
    (winner / META_FILE).write_text("{}")
    (winner / "model.pte").write_bytes(b"winner")
    loser = tmp_path / ".tmp-loser"
    loser.mkdir()
    (loser / "model.pte").write_bytes(b"loser")
    assert _publish(loser, winner) is False
    assert not loser.exists()
    assert (winner / "model.pte").read_bytes() == b"winner"


def test_load_pte_check_rejects_foreign_and_cut_files(tmp_path: Path) -> None:
    good = DATA / "toy_cnn_fp32_xnnpack.pte"
    assert load_pte_check(good) == good
    cases = {
        "missing.pte": None,
        "trace.pte": (DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump").read_bytes(),
        "cut.pte": good.read_bytes()[: good.stat().st_size // 2],
        "random.pte": os.urandom(256),
        "tiny.pte": b"ET",
    }
    expected = {
        "missing.pte": "does not exist",
        "trace.pte": "ETDump trace, not a program",
        "cut.pte": f"header declares {good.stat().st_size} bytes but the file has {good.stat().st_size // 2}",
        "random.pte": "is not an ExecuTorch program",
        "tiny.pte": "is not an ExecuTorch program",
    }
    for name, data in cases.items():
        path = tmp_path / name
        if data is not None:
            path.write_bytes(data)
        with pytest.raises(ExportError) as info:
            load_pte_check(path)
        assert str(path) in str(info.value) and expected[name] in str(info.value), name
    with pytest.raises(ExportError, match="is a directory"):
        load_pte_check(tmp_path)


def test_exported_model_round_trips_through_a_dict(export_cache: Path) -> None:
    exported = export_model("toy_cnn", cache_dir=export_cache, progress=None)
    data = exported.to_dict()
    assert data["schema_version"] == 1
    assert ExportedModel.from_dict(json.loads(json.dumps(data))) == exported
    assert exported.log_path == exported.entry_dir / "export.log" and exported.log_path.is_file()


def test_etrecord_holds_the_programs_of_this_export(export_cache: Path) -> None:
    from executorch.devtools import parse_etrecord

    exported = export_model("toy_cnn", cache_dir=export_cache, progress=None)
    assert exported.etrecord_path is not None
    record = parse_etrecord(str(exported.etrecord_path))
    assert record.exported_program is not None
    edge_targets = [str(n.target) for n in record.edge_dialect_program.graph_module.graph.nodes]
    assert sum("aten.convolution" in t for t in edge_targets) == 3  # toy_cnn's three convolutions


def test_importing_export_and_runners_does_not_import_torch() -> None:
    code = (
        "import sys, pytest_sme2.program.export, pytest_sme2.runners.local, pytest_sme2.runners.host; "
        "heavy = [m for m in ('torch', 'executorch') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_export_keeps_torch_structured_trace_out_of_captured_logs(tmp_path: Path) -> None:
    """pytest attaches its capture handlers to non-propagating loggers such as ``torch.__trace``
    (always DEBUG): an export must neither feed it graph dumps nor leave the handler detached."""
    import logging

    trace_log = logging.getLogger("torch.__trace")
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect()
    trace_log.addHandler(handler)
    try:
        export_model("toy_cnn", backend="portable", cache_dir=tmp_path, progress=None)
        assert handler in trace_log.handlers  # put back afterwards
    finally:
        trace_log.removeHandler(handler)
    assert records == [], f"{len(records)} torch.__trace records reached a foreign handler during export"
