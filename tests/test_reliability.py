"""Reliability: every bad input and fault gets one clear message, its exit code, and intact data.

Cases already covered well elsewhere are listed in ``docs/reliability.md`` with their tests; this file
adds the rest: the CLI's exit codes, the huge trace's memory, baseline schema checks, unsafe test ids,
read-only and full directories (a private tmpfs, so they fail for root too), wrong uses of the
markers and fixtures, shell-safe runner commands, SIGKILL during writes, and ``-n 4`` baselines.

Read-only and full file systems: ``chmod`` does not stop root, so those tests mount a tmpfs (``ro``,
or ``size=64k`` filled up) in a private mount namespace of a child process: ``unshare -m`` as root,
``unshare -rm`` (a user namespace) otherwise, or ``sudo -n unshare -m``. The child runs the case
and prints JSON; the mount disappears with it.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from standin import make_standin

from pytest_sme2.cli import main
from pytest_sme2.errors import BaselineError, ConfigError, RunnerError
from pytest_sme2.runners.base import RunRequest
from pytest_sme2.runners.host import HostRunner
from pytest_sme2.store.baseline import Baseline, BaselineStore, safe_name
from pytest_sme2.store.files import TMP_PREFIX, write_atomic

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).parent.parent
TOY_PTE = DATA / "toy_cnn_fp32_xnnpack.pte"
TOY_INPUT = DATA / "toy_cnn_input_fp32.bin"
TOY_TRACE = DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"
TOY_PORTABLE_TRACE = DATA / "toy_cnn_fp32_portable_simd-on_t1.etdump"
HUGE_TRACE = REPO / "benchmarks" / "data" / "mobilenet_v3_small_like_fp32_xnnpack_simd-on_t1_n1000.etdump"


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run the CLI in-process: (exit code, stderr); a traceback would escape as an exception here."""
    capsys.readouterr()  # drop what imports printed before the command ran
    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


# ------------------------------------------------------------------------------------------- traces


def _trace_case(kind: str, tmp_path: Path) -> Path:
    data = TOY_TRACE.read_bytes()
    path = tmp_path / f"{kind}.etdump"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "random":
        path.write_bytes(random.Random(7).randbytes(3000))
    elif kind == "pte":
        return TOY_PTE
    elif kind == "header_only":
        path.write_bytes(data[:8])
    elif kind.startswith("cut"):
        path.write_bytes(data[: int(len(data) * float(kind.removeprefix("cut")))])
    elif kind == "no_execute":
        from standin.executor_runner import write_measured_etdump

        write_measured_etdump(path, (0, 1000), [])
    elif kind == "missing":
        pass
    return path


TRACE_CASES = {
    "empty": "is empty (0 bytes)",
    "random": "is not an ETDump: no 'ED00' file identifier",
    "pte": "It looks like an ExecuTorch program (.pte), not a trace",
    "header_only": "is 8 bytes, too short to be an ETDump",
    "cut0.01": "is truncated: its header declares 29920 bytes but the file has 299",
    "cut0.3": "is truncated: its header declares",
    "cut0.999": "is truncated: its header declares",
    "no_execute": "holds no execute events",
    "missing": "does not exist",
}


@pytest.mark.parametrize("kind", list(TRACE_CASES))
def test_cli_bad_trace_exits_2_with_one_line(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _trace_case(kind, tmp_path)
    out = tmp_path / "out" / "summary.json"
    code, err = _cli(capsys, "analyze", str(trace), "--json", str(out))
    assert code == 2
    assert err.startswith("pytest-sme2 analyze: error: ") and str(trace) in err
    assert TRACE_CASES[kind] in err
    assert len(err.strip().splitlines()) == 1
    assert not out.parent.exists(), "nothing is written for a bad trace"
    code, err = _cli(capsys, "export-trace", str(trace), "--out", str(out))
    assert code == 2 and TRACE_CASES[kind] in err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmHWM from Linux's /proc/self/status")
def test_huge_trace_memory_is_bounded(tmp_path: Path) -> None:
    """The real 1000-run trace (14 MB, 1.0 M events) analyzed by the CLI in a child: peak RSS measured."""
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across execve, so a child forked from a pytest worker
    # that has torch loaded would report the worker's ~500 MB. VmHWM belongs to the new address space.
    script = textwrap.dedent("""
        import re, sys
        from pytest_sme2.cli import main
        code = main(["analyze", sys.argv[1], "--json", sys.argv[2], "--quiet"])
        with open("/proc/self/status") as status:
            print(code, re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1))
    """)
    proc = subprocess.run([sys.executable, "-c", script, str(HUGE_TRACE), str(tmp_path / "a.json")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    code, maxrss_kb = proc.stdout.split()[-2:]
    assert code == "0"
    summary = json.loads((tmp_path / "a.json").read_text())
    assert summary["runs"]["total"] == 1000
    peak_mb = int(maxrss_kb) / 1024
    print(f"peak RSS analyzing {HUGE_TRACE.name} ({HUGE_TRACE.stat().st_size / 1e6:.1f} MB): {peak_mb:.0f} MB")
    # Measured 188 MB (68 MB of it imports); a per-event Python object model would need GBs.
    assert peak_mb < 512


# ------------------------------------------------------------------------------------------- models


def test_cli_unknown_model_lists_the_registered_ones(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    examples = Path(__file__).parent.parent / "example_models" / "models.py"
    code, err = _cli(capsys, "profile", "--model", "resnet9000", "--models-from", str(examples),
                     "--cache-dir", str(tmp_path / "c"), "--out", str(tmp_path / "o"))
    assert code == 2
    # Other tests of this process may have registered more; the example file's three are listed.
    listed = re.search(r"unknown model 'resnet9000'; registered models: ([^.]+)\. ", err)
    assert listed, err
    assert {"mobilenet_v3_small", "tiny_transformer", "toy_cnn"} <= set(listed.group(1).split(", "))
    assert "--sme2-models" in err and "profile --models" in err and "pytest_sme2.models entry point" in err
    assert not (tmp_path / "c").exists() and not (tmp_path / "o").exists()


def test_wrong_input_dtype_is_a_model_error(tmp_path: Path) -> None:
    import torch

    from pytest_sme2.errors import ModelError
    from pytest_sme2.program.export import export_model

    with pytest.raises(ModelError) as info:
        export_model("toy_cnn", inputs=(torch.ones(1, 3, 32, 32, dtype=torch.int64),), cache_dir=tmp_path,
                     progress=None)
    message = str(info.value)
    assert "'toy_cnn' does not run on the inputs given (1x3x32x32 int64)" in message
    assert "Pass inputs with the shapes and dtypes its forward() expects" in message
    assert not any(tmp_path.iterdir())


def test_export_failing_inside_executorch_names_model_recipe_and_the_operator(tmp_path: Path) -> None:
    """torch.export accepts complex tensors; executorch's edge verifier rejects them during lowering."""
    import torch

    from pytest_sme2.errors import ExportError, ModelError
    from pytest_sme2.program.export import export_model

    class Complex(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x.to(torch.complex64) * 2).real

    with pytest.raises(ExportError) as info:
        export_model(Complex(), inputs=(torch.randn(4, 8),), name="complex_net", backend="portable",
                     cache_dir=tmp_path, progress=None)
    assert not isinstance(info.value, ModelError)
    message = str(info.value)
    assert message.startswith("exporting complex_net fp32/portable failed in lowering (to_edge_transform_and_lower): "
                              "SpecViolationError: These operators are taking Tensor inputs with mismatched dtypes: ")
    # The first line alone ends in ':'; the operator that broke it is what the user needs (fix).
    assert "aten.mul.Tensor" in message and "complex64" in message
    assert len(message.splitlines()) == 1
    assert not list(tmp_path.rglob("*.pte"))


# ------------------------------------------------------------------------------------------ baselines


def _baseline(samples: tuple[float, ...] = (1.0, 1.1, 1.2), test_id: str = "t.py::test_a") -> Baseline:
    return Baseline(test_id=test_id, identity={"arch": "x", "threads": 1}, samples_ms=samples,
                    block_sizes=(len(samples),))


BAD_BASELINES: dict[str, tuple[Any, str]] = {
    "array": ([1, 2], "is not a JSON object"),
    "null_version": ({"schema_version": None}, "has no integer schema_version"),
    "string_version": ({"schema_version": "1"}, "has no integer schema_version"),
    "bool_version": ({"schema_version": True}, "has no integer schema_version"),
    "version_0": ({"schema_version": 0}, "has schema_version 0; versions start at 1"),
    "newer": ({"schema_version": 3}, "has schema_version 3, newer than this pytest-sme2 reads (2); upgrade"),
    "legacy": ({"schema_version": 1, "test_id": "t", "fingerprint": {}, "samples_ms": [1.0]},
               "was written by an earlier pytest-sme2 (schema 1) without the device identity"),
    "no_samples": ({"schema_version": 2, "test_id": "t", "identity": {}, "block_sizes": [1]},
                   "has no 'samples_ms' field"),
    "no_blocks": ({"block_sizes": []}, "'block_sizes' must be positive whole numbers adding up"),
    "empty_samples": ({"samples_ms": []}, "'samples_ms' must be a non-empty list of times in ms, found []"),
    "nan_samples": ({"samples_ms": [1.0, float("nan")]}, "'samples_ms' holds nan, not a finite time >= 0 ms"),
    "negative_samples": ({"samples_ms": [1.0, -2.0]}, "'samples_ms' holds -2.0, not a finite time"),
    "string_samples": ({"samples_ms": "1,2,3"}, "'samples_ms' must be a non-empty list"),
    "identity_list": ({"identity": ["arch"]}, "'identity' must be an object, found list"),
    "category_scalar": ({"category_per_run_ms": {"GEMM": 5}}, "\"category_per_run_ms['GEMM']\" must be a non-empty"),
    "category_blocks": ({"category_per_run_ms": {"GEMM": [1.0, 2.0]}, "category_block_sizes": [1]},
                        "'category_block_sizes' must be positive whole numbers adding up to the 2 values"),
    "top_operators_ints": ({"top_operators": [1]}, "does not match the pytest-sme2 baseline schema (TypeError"),
    "blocks_not_adding_up": ({"block_sizes": [1, 1]}, "'block_sizes' must be positive whole numbers adding up"),
    "blocks_zero": ({"block_sizes": [0]}, "'block_sizes' must be positive whole numbers"),
}


@pytest.mark.parametrize("case", list(BAD_BASELINES))
def test_bad_baseline_files_are_baseline_errors_and_left_untouched(case: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    change, expected = BAD_BASELINES[case]
    base = _baseline().to_dict()
    # A dict with a schema_version replaces the whole file; any other dict changes fields of a good one.
    data = change if not isinstance(change, dict) or "schema_version" in change else {**base, **change}
    path = tmp_path / "b.json"
    text = json.dumps(data)
    path.write_text(text)
    with pytest.raises(BaselineError) as info:
        BaselineStore(tmp_path).read(path)
    assert str(path) in str(info.value) and expected in str(info.value)
    assert "--sme2-update-baseline" in str(info.value) or "upgrade pytest-sme2" in str(info.value)
    assert path.read_text() == text
    # The CLI reads the same files (compare): exit 2 naming the file; a file with samples_ms is read as a
    # baseline (same message), anything else is "neither an analysis summary, a baseline file, nor ...".
    good = tmp_path / "good.json"
    good.write_text(json.dumps(base))
    code, err = _cli(capsys, "compare", str(path), str(good))
    assert code == 2 and str(path) in err
    if isinstance(data, dict) and "samples_ms" in data:
        assert expected in err


def test_non_utf8_and_cut_baselines(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    path = store.save(_baseline())
    full = path.read_bytes()
    path.write_bytes(b"\xff\xfe" + full)
    with pytest.raises(BaselineError, match=r"is not UTF-8 text \(byte 0\)"):
        store.read(path)
    path.write_bytes(full[: len(full) // 2])
    with pytest.raises(BaselineError, match="is not valid JSON"):
        store.read(path)
    # lookup of that id must not crash on its own broken file either: it is the exact match, so it raises
    with pytest.raises(BaselineError):
        store.lookup("t.py::test_a", {"arch": "x", "threads": 1})


def test_baseline_of_another_fingerprint_is_found_not_used(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    other = store.save(_baseline())
    lookup = store.lookup("t.py::test_a", {"arch": "x", "threads": 2})
    assert lookup.baseline is None
    assert [p for p, _ in lookup.others] == [other]
    assert lookup.path != other and lookup.path.parent == tmp_path


UNSAFE_IDS = [
    "tests/test_a.py::test_x[../../etc/passwd]",
    "t.py::test[..]",
    "t.py::test[/abs/path]",
    "t.py::test[a b;rm -rf ~]",
    "t.py::test[\x00nul]",
    "t.py::test[C:\\windows]",
    "t.py::test[ünï©ødé]",
    "t.py::test[" + "x" * 400 + "]",
    "..",
    "",
    # Two ids that sanitize to the same readable text must still get two files.
    "t.py::test[a/b]",
    "t.py::test[a_b]",
    "t.py::test[a?b]",
]


def test_unsafe_test_ids_stay_inside_the_dir_and_never_collide(tmp_path: Path) -> None:
    root = tmp_path / "baselines"
    store = BaselineStore(root)
    paths = {}
    for i, test_id in enumerate(UNSAFE_IDS):
        path = store.save(_baseline((float(i + 1),), test_id=test_id))
        assert path.parent == root, test_id
        assert path.resolve().parent == root.resolve()
        name = path.name
        assert "/" not in name and "\\" not in name and "\x00" not in name and not name.startswith(".")
        assert ".." not in name and len(name.encode()) < 255
        paths[test_id] = path
    assert len(set(paths.values())) == len(UNSAFE_IDS)
    assert sorted(p.name for p in root.iterdir()) == sorted(p.name for p in paths.values())
    for i, test_id in enumerate(UNSAFE_IDS):
        baseline = store.read(paths[test_id])
        assert baseline.test_id == test_id and baseline.samples_ms == (float(i + 1),)
    assert len({safe_name(t) for t in UNSAFE_IDS}) == len(UNSAFE_IDS)


def test_baseline_dir_that_is_a_file_or_a_device(tmp_path: Path) -> None:
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    with pytest.raises(BaselineError) as info:
        BaselineStore(blocker / "baselines").save(_baseline())
    assert f"cannot write baseline {blocker}/baselines/" in str(info.value) and "Nothing was changed" in str(info.value)
    assert blocker.read_text() == "x"
    # A target that is not a regular file is refused, never replaced (fix: /dev/full was swapped for a file).
    with pytest.raises(BaselineError, match="cannot write report /dev/null: it is not a regular file"):
        write_atomic("/dev/null", "{}", what="report")
    assert Path("/dev/null").is_char_device()
    with pytest.raises(BaselineError, match="it is a directory"):
        write_atomic(tmp_path, "{}", what="results JSON")


# --------------------------------------------------------------------- read-only and full file systems


def _namespace_prefix() -> list[str]:
    """How to run a child in a private mount namespace where it may mount a tmpfs; skip if impossible."""
    candidates = [["unshare", "-m"]] if os.geteuid() == 0 else [["unshare", "-rm"], ["sudo", "-n", "unshare", "-m"]]
    for prefix in candidates:
        if shutil.which(prefix[0]) is None:
            continue
        script = "d=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs $d && umount $d && rmdir $d"
        probe = subprocess.run([*prefix, "sh", "-c", script], capture_output=True, timeout=30, check=False)
        if probe.returncode == 0:
            return prefix
    pytest.skip("cannot mount a tmpfs in a private mount namespace here (unshare -m / -rm / sudo -n all refused); "
                "read-only and full directories cannot be simulated for root otherwise")


_TMPFS_HELPERS = textwrap.dedent("""
    import json, os, subprocess, sys
    from pathlib import Path

    def tmpfs(path, options):
        Path(path).mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)
        return Path(path)

    def remount_ro(path):
        subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)

    def fill(path):
        # Leave the file system with no free block: the next write gets ENOSPC.
        fd = os.open(Path(path) / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while os.write(fd, bytes(4096)):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)

    def listing(path):
        return sorted(str(p.relative_to(path)) for p in Path(path).rglob("*"))
""")


def _in_tmpfs_child(tmp_path: Path, body: str, timeout: float = 300) -> dict[str, Any]:
    prefix = _namespace_prefix()
    script = _TMPFS_HELPERS + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(Path(__file__).parent)])}
    proc = subprocess.run([*prefix, sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                          timeout=timeout, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


_REPORT_BODY = """
    from pytest_sme2.store.baseline import Baseline, BaselineStore
    from pytest_sme2.errors import Sme2Error
    from pytest_sme2.cli import main
    from pytest_sme2.results import SessionResults, write_results
    import contextlib, io

    root = Path(sys.argv[1])
    results_file = write_results(root / "results.json", SessionResults(tests=()))
    old = Baseline(test_id="t.py::test_a", identity={"a": 1}, samples_ms=(1.0, 2.0), block_sizes=(2,))
    new = Baseline(test_id="t.py::test_a", identity={"a": 1}, samples_ms=tuple(float(i) for i in range(5000)),
                   block_sizes=(5000,))
    result = {}
    for case, options in (("read_only", "size=1m"), ("full", "size=64k")):
        d = tmpfs(root / case, options)
        store = BaselineStore(d / "baselines")
        path = store.save(old)
        before = path.read_bytes()
        remount_ro(d) if case == "read_only" else fill(d)
        try:
            store.save(new)
            result[case] = {"error": None}
        except Sme2Error as exc:
            result[case] = {"error": str(exc), "exit_code": exc.exit_code}
        result[case]["intact"] = path.read_bytes() == before
        result[case]["files"] = listing(d / "baselines")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["report", str(results_file), "--out", str(d / "report.md")])
        result[case]["report"] = [code, err.getvalue()]
    print(json.dumps(result))
"""


def test_baselines_and_reports_on_read_only_and_full_file_systems(tmp_path: Path) -> None:
    out = _in_tmpfs_child(tmp_path, _REPORT_BODY)
    ro, full = out["read_only"], out["full"]
    assert ro["error"].startswith("cannot write baseline ") and "Read-only file system" in ro["error"]
    assert "make the directory writable or choose another location. Nothing was changed." in ro["error"]
    assert full["error"].startswith("cannot write baseline ") and "No space left on device" in full["error"]
    assert "free disk space or choose another location. Nothing was changed." in full["error"]
    for case in (ro, full):
        assert case["exit_code"] == 2
        assert case["intact"], "the old baseline must survive a failed write"
        assert len(case["files"]) == 1 and not case["files"][0].startswith(TMP_PREFIX), case["files"]
        code, err = case["report"]
        assert code == 2 and err.startswith("pytest-sme2 report: error: cannot write markdown report ")
    assert "Read-only file system" in ro["report"][1] and "No space left on device" in full["report"][1]




def test_export_cache_on_read_only_and_full_file_systems(tmp_path: Path) -> None:
    out = _in_tmpfs_child(tmp_path, """
        import torch
        from pytest_sme2.program.export import export_model
        from pytest_sme2.errors import ExportError

        root = Path(sys.argv[1])
        result = {}
        for case, options in (("read_only", "size=1m"), ("full", "size=64k")):
            d = tmpfs(root / case, options)
            (d / "cache").mkdir()
            remount_ro(d) if case == "read_only" else fill(d)
            torch.manual_seed(0)
            try:
                export_model(torch.nn.Linear(64, 64), inputs=(torch.randn(2, 64),), name="linear",
                             cache_dir=d / "cache", progress=None)
                result[case] = {"error": None}
            except ExportError as exc:
                result[case] = {"error": str(exc), "exit_code": exc.exit_code}
            result[case]["files"] = listing(d / "cache")
        print(json.dumps(result))
    """)
    ro, full = out["read_only"], out["full"]
    cache = f"{tmp_path}/read_only/cache"
    assert ro["error"].startswith(f"cannot write the export cache {cache}") and "Read-only file system" in ro["error"]
    assert "point --sme2-cache-dir (or cache_dir=) at a writable directory" in ro["error"]
    assert full["error"].startswith(f"cannot write the export cache {tmp_path}/full/cache")
    assert "No space left on device; free disk space, or point --sme2-cache-dir at a disk with room" in full["error"]
    for case in (ro, full):
        assert case["exit_code"] == 2
        # No half-written entry: at most the (empty) model directory.
        assert case["files"] in ([], ["linear"]), case["files"]


# ------------------------------------------------------------------------------ markers and fixtures


WRONG_USES = {
    "test_model_not_a_name": ("sme2_model takes exactly one positional argument", "error"),
    "test_factory_returns_a_string": ("returned a str as its module; it must return a torch.nn.Module", "error"),
    "test_inputs_of_wrong_dtype": ("does not run on the inputs given (1x3x32x32 int64)", "error"),
    "test_nan_margin": ("sme2_threshold latency_pct=nan must be a positive number (finite: not nan or inf)", "failed"),
    "test_infinite_budget": ("sme2_threshold p50_ms=inf must be a positive number (finite: not nan or inf)", "failed"),
    "test_unknown_variant": ("sme2_runner.profile(variant='sme3'): unknown variant; allowed: None", "failed"),
    "test_profile_of_a_path": ("sme2_runner.profile() takes the exported_model fixture (an ExportedModel); got str",
                               "failed"),
    "test_zero_runs": ("runs must be at least 1 (got 0)", "failed"),
    "test_model_marker_without_its_fixture": ("has @pytest.mark.sme2_model but does not use the exported_model "
                                              "fixture, which is what reads it, so the marker would do nothing",
                                              "error"),
    "test_threshold_without_its_fixture": ("has @pytest.mark.sme2_threshold but does not use the sme2_baseline "
                                           "fixture", "error"),
    "test_check_of_none": ("sme2_baseline.check() takes what sme2_runner.profile() or profile_on_off() returned; "
                           "got NoneType", "failed"),
}

WRONG_USE_TESTS = """
    import pytest, torch
    from pathlib import Path
    from pytest_sme2.program.export import ExportedModel

    DATA = Path({data!r})
    MODEL = ExportedModel(name="toy_cnn", dtype="fp32", backend="xnnpack", pte_path=DATA / "toy_cnn_fp32_xnnpack.pte",
                          etrecord_path=None, input_files=(DATA / "toy_cnn_input_fp32.bin",),
                          input_shapes=((1, 3, 32, 32),), input_dtypes=("float32",), cache_key="recorded",
                          executorch_version="", torch_version="", cached=True, export_seconds=0.0)

    @pytest.mark.sme2_model(123)
    def test_model_not_a_name(exported_model): pass

    @pytest.mark.sme2_model(lambda: "not a module", inputs=(torch.ones(1),))
    def test_factory_returns_a_string(exported_model): pass

    @pytest.mark.sme2_model("toy_cnn", inputs=(torch.ones(1, 3, 32, 32, dtype=torch.int64),))
    def test_inputs_of_wrong_dtype(exported_model): pass

    @pytest.mark.sme2_threshold(latency_pct=float("nan"))
    def test_nan_margin(sme2_baseline): sme2_baseline.gate_config()

    @pytest.mark.sme2_threshold(p50_ms=float("inf"))
    def test_infinite_budget(sme2_baseline): sme2_baseline.gate_config()

    def test_unknown_variant(sme2_runner): sme2_runner.profile(MODEL, variant="sme3")

    def test_profile_of_a_path(sme2_runner): sme2_runner.profile("model.pte")

    def test_zero_runs(sme2_runner): sme2_runner.profile(MODEL, runs=0)

    def test_check_of_none(sme2_baseline): sme2_baseline.check(None)

    @pytest.mark.sme2_model("toy_cnn")
    def test_model_marker_without_its_fixture(sme2_runner): pass

    @pytest.mark.sme2_threshold(latency_pct=5)
    def test_threshold_without_its_fixture(): pass
"""


def test_wrong_uses_of_markers_and_fixtures_fail_that_test_without_a_traceback(pytester: pytest.Pytester) -> None:
    pytester.makeini(f"[pytest]\nsme2_models = {REPO / 'example_models' / 'models.py'}\n")
    pytester.makepyfile(test_wrong=textwrap.dedent(WRONG_USE_TESTS.format(data=str(DATA))))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-rfE",
                                           f"--sme2-cache-dir={pytester.path / 'cache'}", timeout=300)
    out = result.stdout.str()
    errors = sum(1 for _, kind in WRONG_USES.values() if kind == "error")
    result.assert_outcomes(failed=len(WRONG_USES) - errors, errors=errors)
    assert "Traceback" not in out and "AttributeError" not in out
    for test, (message, kind) in WRONG_USES.items():
        line = next((ln for ln in out.splitlines() if ln.startswith(("FAILED", "ERROR")) and f"::{test} " in ln), "")
        assert line.startswith("FAILED" if kind == "failed" else "ERROR"), (test, line)
        assert message in out, (test, message)
    assert not (pytester.path / "cache").exists() or not list((pytester.path / "cache").rglob("*.pte"))


@pytest.mark.parametrize("target", ["dir", "device"])
def test_report_path_that_cannot_be_a_file_is_one_error_at_the_end(pytester: pytest.Pytester, target: str) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_x="def test_x(): pass")
    path = str(pytester.path) if target == "dir" else "/dev/null"
    result = pytester.runpytest("-p", "no:cacheprovider", f"--sme2-json={path}")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    out = result.stdout.str() + result.stderr.str()
    assert f"pytest-sme2: cannot write results JSON {path}: it is " in out
    assert "Traceback" not in out
    result.assert_outcomes(passed=1)
    assert Path("/dev/null").is_char_device()


# ------------------------------------------------------------------------------------------- runners


def test_host_runner_commands_are_argument_lists_safe_from_shell_metacharacters(tmp_path: Path) -> None:
    """A .pte path, an out dir and a runner path full of shell syntax: run verbatim, nothing executed."""
    evil = "a b;touch PWNED $(touch PWNED2) `touch PWNED3`"
    pte = tmp_path / evil / "model;touch PWNED.pte"
    pte.parent.mkdir()
    shutil.copyfile(TOY_PTE, pte)
    runner_path = make_standin(tmp_path / "bin dir;touch PWNED", trace=TOY_TRACE, name="executor runner")
    request = RunRequest(pte=pte, runs=29, warmup=1, out_dir=tmp_path / f"out {evil}", inputs=(TOY_INPUT,),
                         timeout_s=120)
    cwd = Path.cwd()
    result = HostRunner(runner_path).run(request)
    assert len(result.e2e_ms) == 30
    command = result.metadata["command"]
    assert command[0] == str(runner_path) and str(pte) in command
    assert result.trace_path is not None and str(result.trace_path).startswith(str(tmp_path / f"out {evil}"))
    for where in (tmp_path, cwd, result.trace_path.parent):
        assert not [p for p in where.rglob("PWNED*") if p.name.startswith("PWNED")], where
    # A failure shows the command quoted so that it can be pasted back into a shell as is.
    crash = make_standin(tmp_path / "crash dir;touch PWNED", fault="crash", name="executor runner")
    with pytest.raises(RunnerError) as info:
        HostRunner(crash).run(request)
    shown = next(ln for ln in str(info.value).splitlines() if ln.startswith("  command: "))
    assert shlex.split(shown.removeprefix("  command: ")) == info.value.command
    assert info.value.returncode == 134
    assert not [p for p in tmp_path.rglob("PWNED*") if p.name.startswith("PWNED")]
    # executor_runner splits --inputs on commas: such a path is refused, never split into two files.
    comma_input = tmp_path / "in,put.bin"
    shutil.copyfile(TOY_INPUT, comma_input)
    with pytest.raises(ConfigError, match=rf"input file path {re.escape(str(comma_input))} contains a comma, .*"
                                          "move or rename the file"):
        HostRunner(runner_path).run(replace(request, inputs=(comma_input,)))


@pytest.mark.parametrize(("content", "expected"), [
    (b"", "is not an ExecuTorch program: expected an identifier like 'ET12' at bytes 4-8, found b'' (0 bytes)"),
    (TOY_TRACE.read_bytes(), "It is an ETDump trace, not a program."),
    (TOY_PTE.read_bytes()[:20000], f"is truncated: its header declares {TOY_PTE.stat().st_size} bytes but the file "
                                   "has 20000"),
], ids=["empty", "trace", "cut"])
def test_host_runner_checks_the_pte_before_starting_the_runner(content: bytes, expected: str, tmp_path: Path) -> None:
    from pytest_sme2.errors import ExportError

    pte = tmp_path / "model.pte"
    pte.write_bytes(content)
    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE))  # replay would not notice the bad file
    request = RunRequest(pte=pte, runs=29, out_dir=tmp_path / "out", inputs=(TOY_INPUT,))
    with pytest.raises(ExportError) as info:
        runner.run(request)
    assert str(info.value).startswith(f"{pte} ") and expected in str(info.value)
    assert info.value.exit_code == 2
    assert not (tmp_path / "out").exists(), "nothing ran"


LINEAR_MODELS = """
import torch
from pytest_sme2.models import register_model

@register_model("reliability_linear")
def linear():
    torch.manual_seed(0)
    return torch.nn.Linear(8, 8), (torch.randn(1, 8),)
"""


@pytest.fixture(scope="module")
def linear_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export cache (and the models file) shared by the CLI runner tests: the model is exported once."""
    cache = tmp_path_factory.mktemp("linear_cache")
    (cache / "models.py").write_text(LINEAR_MODELS)
    return cache


@pytest.mark.parametrize(("fault", "expected"), [
    ("crash", "exited with code 134 (a shell's report of SIGABRT) while running "),
    ("garbage", "exited 0 but wrote something that is not a trace: "),
    ("no_trace", "exited 0 but wrote no trace at "),
])
def test_cli_runner_failures_exit_3(fault: str, expected: str, tmp_path: Path, linear_cache: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    runner = make_standin(tmp_path / "bin", fault=fault)
    code, err = _cli(capsys, "profile", "--model", "reliability_linear", "--models-from",
                     str(linear_cache / "models.py"), "--backend", "portable", "--runner", str(runner), "--runs", "2",
                     "--cache-dir", str(linear_cache), "--out", str(tmp_path / "out"), "--timeout", "60")
    assert code == 3
    assert f"pytest-sme2 profile: error: executor_runner {runner} {expected}" in err, err
    if fault == "garbage":  # random bytes on stdout are summarized, never sent raw to the terminal
        assert "characters of binary output, not shown" in err
        assert not [c for c in err if not c.isprintable() and c not in "\n\t"]
    assert f"  command: {runner} --model_path " in err
    assert not list((tmp_path / "out").rglob("analysis_summary.json"))


def test_cli_runner_option_is_checked_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "executor_runner"
    plain.write_text("#!/bin/sh\n")
    for path, message in ((tmp_path / "missing", "does not exist; pass the path of your executor_runner build"),
                          (plain, f"is not executable; run: chmod +x {plain}")):
        with pytest.raises(SystemExit) as info:
            main(["profile", "--model", "toy_cnn", "--runner", str(path)])
        assert info.value.code == 2
        assert message in capsys.readouterr().err


# ----------------------------------------------------------------------------------- SIGKILL mid-write


_WRITER = textwrap.dedent("""
    import json, sys
    from pytest_sme2.store.files import write_atomic
    target, size, i = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print("ready", flush=True)
    while True:
        i += 1
        write_atomic(target, json.dumps({"version": i, "pad": str(i % 10) * size}), what="payload")
""")


def test_sigkill_during_write_atomic_leaves_a_complete_version(tmp_path: Path) -> None:
    target = tmp_path / "payload.json"
    target.write_text(json.dumps({"version": 0, "pad": ""}))
    rng = random.Random(11)
    versions_seen = set()
    for _ in range(12):
        # Each writer continues the numbering, so a loaded machine (few writes per writer) still shows the
        # kills landing at different points.
        start = str(max(versions_seen, default=0))
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(target), str(4 << 20), start],
                                stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.01, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        data = json.loads(target.read_text())  # parses: one complete version, never a mix
        assert data["pad"] == (str(data["version"] % 10) * (4 << 20) if data["version"] else "")
        versions_seen.add(data["version"])
        others = [p.name for p in tmp_path.iterdir() if p != target]
        assert all(name.startswith(TMP_PREFIX) for name in others), others
    assert len(versions_seen) > 3, "the kills must land at different points of the loop"


def test_debris_of_killed_writers_is_removed_once_stale(tmp_path: Path) -> None:
    stale, fresh = tmp_path / f"{TMP_PREFIX}killed.json", tmp_path / f"{TMP_PREFIX}in-progress.json"
    for debris in (stale, fresh):
        debris.write_text('{"half": ')
    two_hours_ago = time.time() - 7200
    os.utime(stale, (two_hours_ago, two_hours_ago))
    write_atomic(tmp_path / "b.json", "{}")
    assert not stale.exists(), "debris older than an hour is removed on the next write"
    assert fresh.exists(), "a recent temp file may belong to a concurrent writer"


REPLAY_CONFTEST = """
    import os
    from pathlib import Path
    import pytest
    import pytest_sme2.store.files as atomic
    import pytest_sme2.store.baseline as baseline
    import pytest_sme2.results as results
    from pytest_sme2.program.export import ExportedModel

    DATA = Path({data!r})
    _write = atomic.write_atomic

    _baselines_written = []

    def _logged(path, data, *, what="file"):
        # Who writes what: one line per write, appended (small O_APPEND writes do not interleave).
        with open(Path(__file__).parent / "writes.log", "a") as fh:
            fh.write(f"{{os.environ.get('PYTEST_XDIST_WORKER', 'controller')}}\\t{{what}}\\t{{path}}\\n")
        written = _write(path, data, what=what)
        if what == "baseline":
            _baselines_written.append(path)
            # A kill test's fixed point: alive, between two baselines, however slowly its parent polls.
            if len(_baselines_written) == int(os.environ.get("SME2_TEST_PAUSE_AFTER_BASELINES", "0")):
                import time
                time.sleep(600)
        return written

    atomic.write_atomic = baseline.write_atomic = results.write_atomic = _logged

    @pytest.fixture
    def recorded_model():
        # The recorded toy_cnn program; the stand-in runner replays its recorded trace.
        return ExportedModel(name="toy_cnn", dtype="fp32", backend="xnnpack",
                             pte_path=DATA / "toy_cnn_fp32_xnnpack.pte", etrecord_path=None,
                             input_files=(DATA / "toy_cnn_input_fp32.bin",), input_shapes=((1, 3, 32, 32),),
                             input_dtypes=("float32",), cache_key="recorded", executorch_version="",
                             torch_version="", cached=True, export_seconds=0.0)
"""

REPLAY_TESTS = """
    import pytest

    @pytest.mark.parametrize("n", range({n}))
    def test_many(n, recorded_model, sme2_runner, sme2_baseline):
        sme2_baseline.check(sme2_runner.profile(recorded_model))
"""


def _replay_project(pytester: pytest.Pytester, tmp_path: Path, n: int) -> tuple[Path, list[str]]:
    current = tmp_path / "current.etdump"
    shutil.copyfile(TOY_TRACE, current)
    runner = make_standin(tmp_path / "bin", trace=current)
    pytester.makeini("[pytest]\n")
    pytester.makeconftest(textwrap.dedent(REPLAY_CONFTEST.format(data=str(DATA))))
    pytester.makepyfile(test_many=textwrap.dedent(REPLAY_TESTS.format(n=n)))
    args = ["-p", "no:cacheprovider", "-p", "no:randomly", "--sme2-device=host", f"--sme2-runner={runner}",
            "--sme2-runs=29", "--sme2-warmup=1", "--sme2-blocks=1", "--sme2-update-baseline", "--sme2-busy-limit=100"]
    return current, args


def _samples_of_trace(trace: Path) -> tuple[float, ...]:
    from pytest_sme2.evidence.trace import read_etdump

    return tuple(round(float(x), 6) for x in read_etdump(trace).e2e_ms_per_run()[1:])


def test_xdist_n4_update_baseline_writes_every_baseline_and_reports_once(pytester: pytest.Pytester, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # When this suite itself runs under xdist, its worker id must not leak into the inner controller.
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    _, args = _replay_project(pytester, tmp_path, 8)
    result = pytester.runpytest_subprocess(*args, "-n", "4", "--sme2-json=r.json", "--sme2-markdown=r.md",
                                           timeout=300)
    result.assert_outcomes(passed=8)
    store = BaselineStore(pytester.path / ".sme2_baselines")
    files = sorted(store.root.iterdir())
    assert len(files) == 8 and all(f.suffix == ".json" for f in files)
    expected = _samples_of_trace(TOY_TRACE)
    ids = {store.read(f).test_id for f in files}
    assert ids == {f"test_many.py::test_many[{n}]" for n in range(8)}
    assert all(store.read(f).samples_ms == expected for f in files)
    report = json.loads((pytester.path / "r.json").read_text())
    assert sorted(t["test_id"] for t in report["tests"]) == sorted(ids)
    markdown = (pytester.path / "r.md").read_text()
    assert all(test_id in markdown for test_id in ids)
    writes = [line.split("\t") for line in (pytester.path / "writes.log").read_text().splitlines()]
    reports = [(who, what) for who, what, _ in writes if what != "baseline"]
    assert sorted(reports) == [("controller", "history run"), ("controller", "markdown report"),
                               ("controller", "results JSON")]
    baseline_writers = {who for who, what, _ in writes if what == "baseline"}
    assert baseline_writers <= {"gw0", "gw1", "gw2", "gw3"} and len(baseline_writers) > 1


def test_update_baseline_replaces_a_corrupt_baseline(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """The corrupt-baseline message says to re-create it with --sme2-update-baseline: that must work (fix)."""
    _, args = _replay_project(pytester, tmp_path, 2)
    pytester.runpytest_subprocess(*args, timeout=300).assert_outcomes(passed=2)
    store = BaselineStore(pytester.path / ".sme2_baselines")
    broken = sorted(store.root.iterdir())[0]
    broken.write_text('{"schema_version": 1, "samples_ms": [1.0,')
    result = pytester.runpytest_subprocess(*args, timeout=300)
    result.assert_outcomes(passed=2)
    assert f"baseline written: {broken}" in result.stdout.str()
    assert store.read(broken).samples_ms == _samples_of_trace(TOY_TRACE)


def test_sigkill_of_a_real_update_baseline_run_keeps_every_baseline_whole(pytester: pytest.Pytester,
                                                                         tmp_path: Path) -> None:
    """Baselines from one recording, then an update from another, SIGKILLed mid-run: old or new, never half."""
    n = 6
    current, args = _replay_project(pytester, tmp_path, n)
    pytester.runpytest_subprocess(*args, "--sme2-json=r.json", timeout=300).assert_outcomes(passed=n)
    old, new = _samples_of_trace(TOY_TRACE), _samples_of_trace(TOY_PORTABLE_TRACE)
    assert old != new
    shutil.copyfile(TOY_PORTABLE_TRACE, current)  # same runner binary, so same fingerprint and file names
    store = BaselineStore(pytester.path / ".sme2_baselines")
    report_before = (pytester.path / "r.json").read_bytes()
    cmd = [sys.executable, "-m", "pytest", *args, "--sme2-json=r.json", "-q"]
    rewritten: list[int] = []
    for wanted in (1, 3):  # kill once the first baseline was rewritten, then (second run) the first three
        # The run pauses after its wanted-th baseline (the conftest): killed mid-run on any machine's timing.
        proc = subprocess.Popen(cmd, cwd=pytester.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True,  # its own group: the kill takes the runner child too
                                env={**os.environ, "SME2_TEST_PAUSE_AFTER_BASELINES": str(wanted)})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            done = [f for f in store.root.glob("*.json") if not f.name.startswith(TMP_PREFIX)]
            if sum(1 for f in done if _safe_samples(store, f) == new) >= wanted:
                break
            time.sleep(0.002)
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        complete = [f for f in store.root.iterdir() if not f.name.startswith(TMP_PREFIX)]
        assert len(complete) == n, sorted(f.name for f in store.root.iterdir())
        samples = [store.read(f).samples_ms for f in complete]  # each parses: no partial file
        assert all(s in (old, new) for s in samples)
        rewritten.append(sum(s == new for s in samples))
        # The results file is written at the very end, so a killed run leaves the previous one whole.
        assert (pytester.path / "r.json").read_bytes() == report_before
    assert rewritten == [1, 3], f"kills must land mid-run, where the runs paused: {rewritten}"


def _safe_samples(store: BaselineStore, path: Path) -> tuple[float, ...] | None:
    try:
        return store.read(path).samples_ms
    except (BaselineError, OSError):
        return None

