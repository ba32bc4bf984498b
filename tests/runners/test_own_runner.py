"""pytest-sme2's own runner on this host, against executorch's Python runtime, and as the plugin's host device.

Everything runs for real: toy_cnn exported three ways (fp32 on XNNPACK, fp32 on the portable kernels, int8 on
XNNPACK), the runner built from the wheel (session fixtures in ``conftest.py``), and every expectation computed
here on another path: outputs from ``executorch.runtime``, the planned memory from the ``.pte``'s own
flatbuffer (executorch's serializer), the trace decoded with executorch's ETDump decoder, the latency samples
from the runner's own ``Iteration`` lines.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_sme2.evidence.numerics import read_outputs
from pytest_sme2.runners.build import RunnerBuild, build_runner

pytestmark = pytest.mark.slow

#: toy_cnn's exports under test, as "dtype/backend"
CONFIGS = ["fp32/xnnpack", "fp32/portable", "int8/xnnpack"]
ITERATION = re.compile(r"^Iteration (\d+) of (\d+): ([0-9.eE+-]+) ms$", re.M)
EXAMPLE_MODELS = Path(__file__).parents[2] / "example_models" / "models.py"


def run_runner(binary: Path, pte: Path, inputs: tuple[Path, ...], *, executions: int, cwd: Path,
               etdump: Path | None = None, outputs: Path | None = None) -> str:
    """Run the runner once; returns its stderr (where it logs, as executor_runner does)."""
    cmd = [str(binary), "--model_path", str(pte), f"--num_executions={executions}",
           "--inputs", ",".join(str(p) for p in inputs)]
    if etdump is not None:
        cmd += ["--etdump_path", str(etdump)]
    if outputs is not None:
        cmd += ["--output_file", str(outputs)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=300, check=False)
    assert done.returncode == 0, f"{cmd} failed ({done.returncode}):\n{done.stderr[-2000:]}"
    return done.stderr


def python_runtime_outputs(exported: Any) -> list[np.ndarray[Any, Any]]:
    """The outputs of executorch's Python runtime for the export's example inputs."""
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(exported.pte_path).load_method("forward")
    return [t.detach().numpy() for t in method.execute(list(exported.load_inputs()))]


def assert_outputs_equal(runner_outputs: Path, expected: list[np.ndarray[Any, Any]]) -> None:
    got = read_outputs(runner_outputs)
    assert len(got) == len(expected)
    for out, ref in zip(got, expected, strict=True):
        assert out.shape == ref.shape and out.values.dtype == ref.dtype
        # Same libraries, same kernels, same inputs: the very same numbers.
        np.testing.assert_array_equal(out.values.reshape(out.shape), ref)


# ------------------------------------------------------------------------------------------ the runner itself


@pytest.mark.parametrize("executions", [1, 5])
@pytest.mark.parametrize("config", CONFIGS)
def test_outputs_equal_the_python_runtime(config: str, executions: int, host_runner_build: RunnerBuild,
                                          example_export: Callable[[str, str], Any], tmp_path: Path) -> None:
    exported = example_export(*config.split("/"))
    out = tmp_path / "outputs"
    run_runner(host_runner_build.path, exported.pte_path, exported.input_files, executions=executions, cwd=tmp_path,
               outputs=out)
    assert_outputs_equal(out, python_runtime_outputs(exported))


def test_a_runner_that_sets_its_inputs_only_once_is_caught(example_export: Callable[[str, str], Any],
                                                          host_runner_build: RunnerBuild, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The portable program's planned input slot is reused by intermediates: inputs must be set before every
    execution. The runner as it was before that fix (inputs set for the first execution only) gives other
    outputs from the second execution on, and the comparison above sees it."""
    from pytest_sme2.runners import build as runner_build

    source = runner_build.runner_source().decode()
    loop = "for (size_t k = 0; k < input_tensors.size(); ++k) {"
    assert source.count(loop) == 1, "the runner's input loop changed: update this test's mutation"
    mutated = source.replace(loop, "for (size_t k = 0; i == 0 && k < input_tensors.size(); ++k) {").encode()
    monkeypatch.setattr(runner_build, "runner_source", lambda: mutated)
    once = build_runner(runner_build.TARGET_HOST, cache_dir=tmp_path / "cache")
    assert once.key != host_runner_build.key  # the source is part of the cache key
    exported = example_export("fp32", "portable")
    expected = python_runtime_outputs(exported)
    for executions, equal in ((1, True), (5, False)):
        out = tmp_path / f"outputs_{executions}"
        run_runner(once.path, exported.pte_path, exported.input_files, executions=executions, cwd=tmp_path,
                   outputs=out)
        got = read_outputs(out)[0]
        assert np.array_equal(got.values.reshape(got.shape), expected[0]) is equal, executions


@pytest.mark.parametrize("backend", ["xnnpack", "portable"])
def test_a_traced_run_holds_every_execution_and_its_operators(backend: str, host_runner_build: RunnerBuild,
                                                              example_export: Callable[[str, str], Any],
                                                              reference_etdump: Callable[[Path], Any],
                                                              tmp_path: Path) -> None:
    exported = example_export("fp32", backend)
    trace = tmp_path / "run.etdump"
    log = run_runner(host_runner_build.path, exported.pte_path, exported.input_files, executions=4, cwd=tmp_path,
                     etdump=trace)
    assert f"ETDump written to file '{trace}'." in log
    decoded = reference_etdump(trace)
    executes = [rd for rd in decoded.run_data if any(e.profile_event and e.profile_event.name == "Method::execute"
                                                     for e in rd.events)]
    assert len(executes) == 4
    for rd in executes:
        names = Counter((e.profile_event.name or e.profile_event.delegate_debug_id_str)
                        for e in rd.events if e.profile_event)
        if backend == "xnnpack":  # XNNPACK's profiler: one event per operator, three convolutions and a linear
            assert sum(n.startswith("Convolution (NHWC, F32)") for n in names) == 3
            assert sum(n.startswith("Fully Connected (NC, F32)") for n in names) == 1
        else:  # the portable kernels: one event per operator call
            assert names["native_call_convolution.out"] == 3


def test_a_timing_only_run_writes_no_trace_and_logs_every_iteration(host_runner_build: RunnerBuild,
                                                                   example_export: Callable[[str, str], Any],
                                                                   tmp_path: Path) -> None:
    exported = example_export("fp32", "xnnpack")
    log = run_runner(host_runner_build.path, exported.pte_path, exported.input_files, executions=7, cwd=tmp_path)
    assert list(tmp_path.iterdir()) == []  # no trace (executor_runner's default etdump name included)
    assert "ETDump" not in log
    lines = ITERATION.findall(log)
    assert [(int(i), int(n)) for i, n, _ in lines] == [(i, 7) for i in range(1, 8)]
    assert all(float(ms) > 0 for _, _, ms in lines)
    assert "Model executed successfully 7 time(s)" in log


@pytest.mark.parametrize("config", CONFIGS)
def test_planned_memory_is_the_programs_memory_plan(config: str, host_runner_build: RunnerBuild,
                                                    example_export: Callable[[str, str], Any], tmp_path: Path) -> None:
    from executorch.exir._serialize._program import deserialize_pte_binary

    exported = example_export(*config.split("/"))
    log = run_runner(host_runner_build.path, exported.pte_path, exported.input_files, executions=1, cwd=tmp_path)
    m = re.search(r"^sme2_runner planned_memory: buffers=(\d+) total_bytes=(\d+) sizes=([\d,]*)$", log, re.M)
    assert m is not None, log
    # The plan as the program's flatbuffer states it: non_const_buffer_sizes[0] is reserved (constants), the
    # rest are the planned buffers MethodMeta::memory_planned_buffer_size() reports.
    plan = next(p for p in deserialize_pte_binary(exported.pte_path.read_bytes()).program.execution_plan
                if p.name == "forward")
    sizes = [int(s) for s in plan.non_const_buffer_sizes[1:]]
    assert sizes and sum(sizes) > 0
    assert int(m.group(1)) == len(sizes)
    assert [int(s) for s in m.group(3).split(",")] == sizes
    assert int(m.group(2)) == sum(sizes)


# ------------------------------------------------------------------------------------------ as the plugin's host device


PROFILE_TEST = textwrap.dedent("""\
    import pytest

    @pytest.mark.sme2_model("toy_cnn", dtype="fp32", backend="xnnpack")
    def test_profile(exported_model, sme2_runner, sme2_baseline):
        sme2_baseline.check(sme2_runner.profile(exported_model))
    """)
HOST_TESTS = PROFILE_TEST + textwrap.dedent("""\

    @pytest.mark.sme2_model("toy_cnn", dtype="fp32", backend="xnnpack")
    def test_on_off(exported_model, sme2_runner, sme2_baseline):
        sme2_baseline.check(sme2_runner.profile_on_off(exported_model))
    """)


def run_plugin(pytester: pytest.Pytester, cache: Path, *args: str) -> pytest.RunResult:
    """pytest in a subprocess on a project using the example models and the shared export/runner cache."""
    if not (pytester.path / "pytest.ini").exists():
        pytester.makeini(f"[pytest]\nsme2_models = {EXAMPLE_MODELS}\n")
    return pytester.runpytest_subprocess(
        f"--sme2-cache-dir={cache}", "--sme2-busy-limit=100", "--sme2-blocks=2", "--sme2-runs=3",
        "--sme2-warmup=1", "--sme2-json=r.json", "-p", "no:cacheprovider", "-p", "no:randomly", "-rs", *args,
        timeout=600)


def test_host_device_without_a_runner_uses_ours_for_timing_and_breakdown(
        pytester: pytest.Pytester, sme2_shared_cache: Path, host_runner_build: RunnerBuild,
        example_export: Callable[[str, str], Any], reference_etdump: Callable[[Path], Any]) -> None:
    example_export("fp32", "xnnpack")  # exported once for the session, found in the cache by the plugin
    pytester.makepyfile(test_host=HOST_TESTS)
    result = run_plugin(pytester, sme2_shared_cache, "--sme2-device=host")
    result.assert_outcomes(passed=1, skipped=1)
    tests = {t["test_id"].split("::")[-1]: t for t in json.loads((pytester.path / "r.json").read_text())["tests"]}
    profile = tests["test_profile"]["profile"]
    runner = str(host_runner_build.path)
    assert profile["latency_source"].startswith(f"timing build: {runner} ")
    assert profile["breakdown_source"].startswith(f"trace build: {runner} ")
    runs = profile["runs"]
    assert [r["metadata"]["mode"] for r in runs] == ["timing", "trace"] * 2
    # The latency samples are the timing runs' own Iteration lines (after the warm-up); those runs wrote no trace.
    logged = []
    for r in runs[::2]:
        assert "--etdump_path" not in r["metadata"]["command"]
        lines = ITERATION.findall(Path(r["log_path"]).read_text())
        logged += [float(ms) for _, _, ms in lines[1:]]
    assert profile["latency_ms"] == pytest.approx(logged, abs=1e-6)
    # The breakdown is the traced runs': their Method::execute spans, per operator.
    traced = []
    for r in runs[1::2]:
        execs = [e.profile_event for rd in reference_etdump(Path(r["trace_path"])).run_data for e in rd.events
                 if e.profile_event and e.profile_event.name == "Method::execute"]
        traced += [(p.end_time - p.start_time) / 1e6 for p in execs[1:]]  # ns ticks -> ms, warm-up left out
    assert profile["analysis"]["e2e_ms"]["per_run"] == pytest.approx(traced, rel=1e-6)
    assert any(o for o in profile["analysis"]["operator_details"])
    # SME2 on/off cannot be measured with one x86 build: the skip says where it can.
    skip = re.search(r"SKIPPED \[1\] .*", result.stdout.str())
    assert skip is not None and "--sme2-device=qemu" in skip.group(0)
    assert "runs pytest-sme2's own runner as one build on this CPU" in skip.group(0)


def test_a_runner_built_without_xnnpack_fails_with_the_missing_backend(
        pytester: pytest.Pytester, sme2_shared_cache: Path, example_export: Callable[[str, str], Any],
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_sme2.runners import build as runner_build

    monkeypatch.setattr(runner_build, "LIBRARIES",
                        tuple(n for n in runner_build.LIBRARIES if n != "executorch_backend_xnnpack"))
    without = build_runner(runner_build.TARGET_HOST, cache_dir=tmp_path_factory.mktemp("no_xnnpack"))
    needed = subprocess.run(["readelf", "-d", str(without.path)], capture_output=True, text=True, check=False).stdout
    assert "libexecutorch.so" in needed and "libexecutorch_backend_xnnpack" not in needed
    example_export("fp32", "xnnpack")
    pytester.makepyfile(test_host=PROFILE_TEST)
    result = run_plugin(pytester, sme2_shared_cache, "--sme2-device=host", f"--sme2-runner={without.path}")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "Backend XnnpackBackend is not registered" in out
    assert "an operator or backend the program needs is not in this runner's libraries" in out
