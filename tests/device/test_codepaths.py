"""The shared objects a runner maps, the code-path environment and the effective warm-up and runs are
part of the artifact: a change in one is judged, never excused as drift, and the verdict names it.

The runners are real processes: the ``executor_runner`` stand-in (``tests/standin``: a ``/bin/sh`` wrapper that
becomes a Python process replaying a recorded toy_cnn trace) read at its exit through ``ptrace``, and the local
runtime (this process' own map). The library that changes is a real one (a copy of the zlib this Python maps,
preloaded: an allocator or interposed libc function in a real project), changed the way a rebuild changes it.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
from standin import make_standin

from pytest_sme2.device.codepaths import SHARED_OBJECTS, mapped_at_exit, mapped_paths, runtime_shared_objects
from pytest_sme2.gate.verdict import Comparison, GateConfig
from pytest_sme2.judge import GATED, RECORDED, Judgement, Policy, judge
from pytest_sme2.measure.profile import Profile, measure
from pytest_sme2.measure.recipe import Measurement
from pytest_sme2.runners.host import HostRunner
from pytest_sme2.store.artifacts import Artifact, ArtifactStore
from pytest_sme2.store.baseline import BaselineStore

DATA = Path(__file__).parents[1] / "data"
TOY_TRACE = DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"
TOY_PTE = DATA / "toy_cnn_fp32_xnnpack.pte"
TOY_INPUT = DATA / "toy_cnn_input_fp32.bin"

linux_only = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc (Linux only)")


def _zlib_library() -> Path:
    """The zlib shared object this Python maps (its ``zlib`` module links it), or skip."""
    assert zlib.crc32(b"") == 0  # the module is loaded, so its library is mapped
    found = [p for p in mapped_paths(Path("/proc/self/maps").read_text().splitlines()) if Path(p).name.startswith(
        "libz.so")]
    if not found:
        pytest.skip("this Python links zlib statically: no libz shared object to preload")
    return Path(found[0])


def _measure(runner: HostRunner, tmp_path: Path, **kw: float) -> Profile:
    m = Measurement(pte=TOY_PTE, inputs=(TOY_INPUT,), runs=kw.pop("runs", 5), warmup=int(kw.pop("warmup", 3)),
                    blocks=4, busy_limit=1.0, out_dir=tmp_path / "runs", label="toy", **kw)  # type: ignore[arg-type]
    return measure(runner, m)


def _judge(profile: Profile, runner: HostRunner, tmp_path: Path) -> Judgement:
    return judge(profile, test_id="t::toy", runner=runner, baselines=BaselineStore(tmp_path / "baselines"),
                 artifacts=ArtifactStore(tmp_path / "artifacts"), config=GateConfig(margin=5.0),
                 policy=Policy(confirm=False))


@linux_only
def test_a_runner_process_is_read_at_its_exit_with_what_it_loaded_late() -> None:
    """ptrace stops the process at its exit with its memory still mapped: a library it dlopen'ed is there."""
    lines = mapped_at_exit(["python3", "-c", "import ctypes; ctypes.CDLL('libz.so.1')"], cwd=Path("/tmp"),
                           timeout_s=60)
    if lines is None:
        pytest.skip("ptrace is not allowed here")
    assert any(Path(p).name.startswith("libz.so") for p in mapped_paths(lines))
    assert any(Path(p).name.startswith("libc.so") for p in mapped_paths(lines))


@linux_only
def test_a_rebuilt_preloaded_library_and_the_preload_itself_make_the_artifact_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same runner, program and inputs; the library it preloads is rebuilt (other bytes), then no longer
    preloaded. Each is a changed artifact,
    judged as a runtime change (its reference cannot run with the baseline's library), the verdict naming it."""
    library = tmp_path / "lib" / "libz.so.1"
    library.parent.mkdir()
    library.write_bytes(_zlib_library().read_bytes())
    monkeypatch.setenv("LD_PRELOAD", str(library))
    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE))
    baseline = _measure(runner, tmp_path)
    assert baseline.artifact is not None and baseline.artifact.shared_objects is not None
    assert "libz.so.1" in baseline.artifact.shared_objects, "the preloaded library is in the runner's map"
    assert baseline.artifact.environment == {"LD_PRELOAD": str(library)}
    assert _judge(baseline, runner, tmp_path).outcome == RECORDED

    same = _judge(_measure(runner, tmp_path), runner, tmp_path)
    assert same.verdict is not None and same.verdict.comparison is Comparison.UNCHANGED, same.message

    library.write_bytes(library.read_bytes() + b"\0")  # rebuilt: other content, same name and path
    rebuilt = _judge(_measure(runner, tmp_path), runner, tmp_path)
    assert rebuilt.outcome == GATED and rebuilt.verdict is not None
    assert rebuilt.verdict.comparison is Comparison.RUNTIME, rebuilt.message
    assert "shared objects changed (libz.so.1 " in rebuilt.message

    monkeypatch.delenv("LD_PRELOAD")
    unloaded = _judge(_measure(runner, tmp_path), runner, tmp_path)
    assert unloaded.verdict is not None and unloaded.verdict.comparison is Comparison.RUNTIME, unloaded.message
    assert "-libz.so.1" in unloaded.message
    assert f"environment changed (LD_PRELOAD {library} -> (unset))" in unloaded.message


@linux_only
def test_the_warm_up_block_sizing_chose_is_part_of_the_artifact(tmp_path: Path) -> None:
    """The same runs and warm-up asked for (the recipe), but block sizing (``max_block_ms``: a slower machine, or a
    tighter setting) cut the warm-up from 3 to 1 per block: the first executions now count, so the artifact changed."""
    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE))
    assert _judge(_measure(runner, tmp_path), runner, tmp_path).outcome == RECORDED
    cut = _measure(runner, tmp_path, max_block_ms=1e-6)
    assert cut.artifact is not None and cut.artifact.executions == {"warmup": 1, "runs": 3}
    judged = _judge(cut, runner, tmp_path)
    assert judged.verdict is not None and judged.verdict.comparison is not Comparison.UNCHANGED, judged.message
    assert "effective warm-up changed (3 -> 1 per block" in judged.message
    assert "effective runs changed (5 -> 3 per block" in judged.message


@linux_only
def test_a_baseline_written_before_is_read_and_says_what_it_does_not_record(tmp_path: Path) -> None:
    """A baseline without the new fields is an unknown, not a change: unchanged, with a note naming what is not
    compared; nothing fails and the file is read as it is."""
    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE))
    recorded = _judge(_measure(runner, tmp_path), runner, tmp_path)
    data = json.loads(recorded.baseline_path.read_text())
    for key in ("shared_objects", "environment", "executions"):
        assert key in data["artifact"]
        del data["artifact"][key]
    recorded.baseline_path.write_text(json.dumps(data))
    judged = _judge(_measure(runner, tmp_path), runner, tmp_path)
    assert judged.verdict is not None and judged.verdict.comparison is Comparison.UNCHANGED, judged.message
    assert ("the baseline does not record the shared objects its runner mapped, the code-path environment, the "
            "effective warm-up and runs") in judged.message
    old = Artifact.from_dict(data["artifact"])
    assert old.unrecorded() and old.differences(Artifact.from_dict({**data["artifact"], "environment": {}})) == []


@linux_only
def test_the_local_runtime_records_what_it_can_call_into(tmp_path: Path) -> None:
    """The local runtime's map: executorch's libraries and the C/C++ runtime, not the modules the session imported."""
    from pytest_sme2.runners.base import MODE_TIMING, RunRequest
    from pytest_sme2.runners.local import LocalRunner

    result = LocalRunner().run(RunRequest(pte=TOY_PTE, inputs=(TOY_INPUT,), runs=2, warmup=0, out_dir=tmp_path,
                                          mode=MODE_TIMING))
    objects = result.metadata[SHARED_OBJECTS]
    assert objects == runtime_shared_objects()
    assert any(name.startswith("libexecutorch") for name in objects)
    assert any(name.startswith("libc.so") for name in objects)
    assert not any("_multiarray_umath" in name or name.startswith("libz.so") for name in objects), objects
