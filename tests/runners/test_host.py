"""The host runner (``pytest_sme2.runners.host``) against the ``executor_runner`` stand-in: what it runs, what it
checks of what ran, and every fault a runner process can have.

Expected numbers come from the recordings in tests/data, read independently of the code under test: the real
runner's own log lines and executorch's Inspector. The local runner's tests are in ``runners/test_local.py``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from standin import make_standin

from pytest_sme2.errors import ConfigError, RunnerError, TraceError
from pytest_sme2.evidence.trace import read_etdump
from pytest_sme2.runners import SME2_OFF, SME2_ON, make_runner
from pytest_sme2.runners.base import MODE_TIMING, RunRequest
from pytest_sme2.runners.executor_runner import check_what_ran, parse_iteration_ms
from pytest_sme2.runners.host import HostRunner
from pytest_sme2.runners.local import LocalRunner

DATA = Path(__file__).parents[1] / "data"
TOY_PTE = DATA / "toy_cnn_fp32_xnnpack.pte"
TOY_INPUT = DATA / "toy_cnn_input_fp32.bin"
TOY_TRACE = DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"

_OUTPUT = re.compile(r"OutputX 0: tensor\(sizes=\[[^\]]*\], \[([^\]]*)\]\)")


def _recorded_log(stem: str) -> str:
    return (DATA / f"{stem}.log").read_text()


def _inspector_e2e_ms(trace: Path) -> list[float]:
    """Method::execute durations (ms, run order) as executorch's own Inspector reads them."""
    from executorch.devtools import Inspector

    inspector = Inspector(etdump_path=str(trace))
    for block in inspector.event_blocks:
        for event in block.events:
            if event.name == "Method::execute":
                return [float(x) for x in event.perf_data.raw]
    raise AssertionError(f"Inspector found no Method::execute in {trace}")


def _request(tmp_path: Path, **overrides: object) -> RunRequest:
    fields: dict[str, object] = {
        "pte": TOY_PTE, "runs": 29, "warmup": 1, "threads": 1, "out_dir": tmp_path / "out", "inputs": (TOY_INPUT,),
        "timeout_s": 120.0,
    }
    fields.update(overrides)
    return RunRequest(**fields)  # type: ignore[arg-type]


@pytest.fixture
def replay_runner(tmp_path: Path) -> Path:
    return make_standin(tmp_path / "bin", trace=TOY_TRACE)


def test_replay_gives_exactly_the_recorded_e2e(replay_runner: Path, tmp_path: Path) -> None:
    runner = HostRunner(replay_runner)
    result = runner.run(_request(tmp_path))
    expected = _inspector_e2e_ms(TOY_TRACE)
    assert len(expected) == 30
    assert result.e2e_ms == pytest.approx(expected, rel=0, abs=1e-9)
    assert result.runner == "host" and result.per_operator and result.warmup == 1
    assert result.trace_path is not None and result.log_path is not None
    assert result.trace_path.read_bytes() == TOY_TRACE.read_bytes()
    assert result.trace_path.parent.parent == tmp_path / "out" / "toy_cnn_fp32_xnnpack"
    log = result.log_path.read_text()
    assert "replaying recorded trace toy_cnn_fp32_xnnpack_simd-on_t1.etdump (30 runs)" in log
    assert "not measured now" in log
    assert parse_iteration_ms(log) == pytest.approx(expected, abs=1e-6)  # logged with 6 decimals of a ms
    assert result.build.startswith(f"{replay_runner} (sha256 ")
    assert result.metadata["log_vs_trace_max_abs_diff_ms"] < 1e-6


def test_replay_of_fewer_runs_is_the_recordings_first_runs(replay_runner: Path, tmp_path: Path,
                                                          reference_etdump: Callable[[Path], Any]) -> None:
    """Asked for 5 executions, the stand-in replays the recording's first 5: trace, log and result agree."""
    result = HostRunner(replay_runner).run(_request(tmp_path, runs=4, warmup=1))
    expected = _inspector_e2e_ms(TOY_TRACE)[:5]
    assert result.e2e_ms == pytest.approx(expected, rel=0, abs=1e-9) and result.metadata["trace_runs"] == 5
    assert result.log_path is not None and result.trace_path is not None
    log = result.log_path.read_text()
    assert "replaying the first 5 of the recording's 30 runs" in log
    assert parse_iteration_ms(log) == pytest.approx(expected, abs=1e-6)
    assert "Model executed successfully 5 time(s)" in log
    # executorch's own decoder sees the recording's load block and first 5 execute blocks, exactly.
    trimmed, recorded = reference_etdump(result.trace_path), reference_etdump(TOY_TRACE)
    assert trimmed.version == recorded.version and trimmed.run_data == recorded.run_data[:6]


def test_replay_of_more_runs_than_recorded_fails(replay_runner: Path, tmp_path: Path) -> None:
    """The stand-in never invents a run: 31 executions of a 30-run recording is its error, exit 2."""
    with pytest.raises(RunnerError, match="exited with code 2") as info:
        HostRunner(replay_runner).run(_request(tmp_path, runs=30, warmup=1))
    assert "--num_executions=31, but the recording toy_cnn_fp32_xnnpack_simd-on_t1.etdump holds 30 runs" in (
        info.value.stderr_tail)


def test_runs_never_overwrite_each_other(replay_runner: Path, tmp_path: Path) -> None:
    runner = HostRunner(replay_runner)
    first, second = runner.run(_request(tmp_path)), runner.run(_request(tmp_path))
    assert first.trace_path != second.trace_path and first.log_path != second.log_path
    assert first.trace_path is not None and first.trace_path.is_file()
    assert second.trace_path is not None and second.trace_path.is_file()


def test_wrapper_still_works_when_copied(replay_runner: Path, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere" / "executor_runner"
    moved.parent.mkdir()
    shutil.copy2(replay_runner, moved)
    result = HostRunner(moved).run(_request(tmp_path))
    assert result.e2e_ms == pytest.approx(_inspector_e2e_ms(TOY_TRACE), abs=1e-9)


def test_variants_pick_their_own_build(tmp_path: Path) -> None:
    off_trace = DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-off_t1.etdump"
    on_trace = DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-on_t1.etdump"
    runner = HostRunner(variants={
        SME2_ON: make_standin(tmp_path / "on", trace=on_trace),
        SME2_OFF: make_standin(tmp_path / "off", trace=off_trace),
    })
    assert runner.variants() == (SME2_ON, SME2_OFF)
    result = runner.run(_request(tmp_path, variant=SME2_OFF))
    assert result.variant == SME2_OFF
    assert result.e2e_ms == pytest.approx(_inspector_e2e_ms(off_trace), abs=1e-9)
    assert result.trace_path is not None and "toy_cnn_fp32_xnnpack_sme2_off" in str(result.trace_path)
    assert set(runner.fingerprint()["runner_sha256"]) == {SME2_ON, SME2_OFF}
    with pytest.raises(ConfigError, match="no None build"):
        runner.run(_request(tmp_path))


def test_make_runner_builds_a_host_runner(replay_runner: Path, tmp_path: Path) -> None:
    runner = make_runner("host", runner_path=replay_runner, timeout_s=60)
    assert isinstance(runner, HostRunner) and None in runner.variants()
    assert len(runner.run(_request(tmp_path)).e2e_ms) == 30


def test_measure_mode_writes_a_trace_both_readers_accept(tmp_path: Path) -> None:
    runner = HostRunner(make_standin(tmp_path / "bin", mode="measure"))
    result = runner.run(_request(tmp_path, runs=5, warmup=1))
    assert result.trace_path is not None and result.log_path is not None
    assert result.trace_path.read_bytes()[8:12] == b"ED00"  # size-prefixed, like the runtime's files
    timeline = read_etdump(result.trace_path)
    assert timeline.num_runs == 6
    assert timeline.operators().empty, "the stand-in must not invent per-operator events"
    assert not result.per_operator and "no operator events" in result.per_operator_note
    inspector = _inspector_e2e_ms(result.trace_path)
    assert result.e2e_ms == pytest.approx(inspector, abs=1e-9)
    assert parse_iteration_ms(result.log_path.read_text()) == pytest.approx(inspector, abs=1e-6)
    assert all(0 < t < 1000 for t in result.e2e_ms)
    # It really ran the model: the printed outputs are the recorded executor_runner's outputs.
    printed = _OUTPUT.search(result.log_path.read_text())
    recorded = _OUTPUT.search(_recorded_log(TOY_TRACE.stem))
    assert printed and recorded and printed.group(1) == recorded.group(1)


@pytest.mark.parametrize(
    ("fault", "expected", "returncode"),
    [
        ("crash", r"exited with code 134 \(a shell's report of SIGABRT\)", 134),
        ("garbage", r"exited 0 but wrote something that is not a trace", 0),
        ("no_trace", r"exited 0 but wrote no trace at .*toy_cnn_fp32_xnnpack\.etdump", 0),
        ("exec_format", r"Exec format error", None),
    ],
)
def test_faults_become_runner_errors(fault: str, expected: str, returncode: int | None, tmp_path: Path) -> None:
    path = make_standin(tmp_path / "bin", fault=fault)
    with pytest.raises(RunnerError) as info:
        HostRunner(path).run(_request(tmp_path))
    error = info.value
    assert re.search(expected, str(error)), str(error)
    assert str(path) in str(error)
    assert error.returncode == returncode
    assert error.command is not None and str(path) in " ".join(error.command)
    if fault == "crash":
        assert "assert failed" in error.stderr_tail and "Aborted" in error.stderr_tail
    if fault == "garbage":
        assert isinstance(error.__cause__, TraceError)


def test_hang_times_out_and_the_process_group_is_killed(tmp_path: Path) -> None:
    path = make_standin(tmp_path / "bin", fault="hang")
    started = time.monotonic()
    with pytest.raises(RunnerError, match=r"timed out after 3 s") as info:
        HostRunner(path, timeout_s=3).run(_request(tmp_path))
    assert time.monotonic() - started < 30
    match = re.search(r"hanging forever \(pid (\d+)\)", info.value.stderr_tail)
    assert match, info.value.stderr_tail
    pid = int(match.group(1))
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_missing_and_non_executable_runners(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "executor_runner"
    with pytest.raises(RunnerError, match=f"executor_runner not found at {re.escape(str(missing))}.*EVENT_TRACER"):
        HostRunner(missing).run(_request(tmp_path))
    plain = tmp_path / "executor_runner"
    plain.write_text("#!/bin/sh\nexit 0\n")
    plain.chmod(0o644)
    with pytest.raises(RunnerError, match=r"is not executable; make it so with: chmod \+x"):
        HostRunner(plain).run(_request(tmp_path))


def _sh_runner(directory: Path, action: str) -> Path:
    """A tiny shell 'runner' that finds --etdump_path and runs ``action`` with it as $TRACE."""
    path = directory / "executor_runner"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/sh\n"
        'while [ $# -gt 0 ]; do [ "$1" = --etdump_path ] && TRACE="$2"; shift; done\n'
        f"{action}\n"
    )
    path.chmod(0o755)
    return path


def test_a_trace_left_at_the_path_is_never_taken_for_this_run(tmp_path: Path) -> None:
    request = _request(tmp_path)
    run_dir = tmp_path / "reused"
    run_dir.mkdir()
    stale = run_dir / f"{request.stem}.etdump"
    shutil.copyfile(TOY_TRACE, stale)
    runner = HostRunner(make_standin(tmp_path / "bin", fault="no_trace"))
    with pytest.raises(RunnerError, match="exited 0 but wrote no trace"):
        runner.run_in(request, run_dir)
    assert not stale.exists(), "the old trace must be removed before the run"


def test_a_stale_copy_with_an_old_mtime_is_rejected(tmp_path: Path) -> None:
    old = tmp_path / "old.etdump"
    shutil.copyfile(TOY_TRACE, old)
    os.utime(old, (time.time() - 86400, time.time() - 86400))
    runner = HostRunner(_sh_runner(tmp_path / "bin", f'cp -p "{old}" "$TRACE"'))
    with pytest.raises(RunnerError, match="is older than this run"):
        runner.run(_request(tmp_path))


def test_an_etdump_without_execute_events_is_a_trace_error(tmp_path: Path) -> None:
    """A tracer-enabled runner that recorded no execution: the TraceError teaches the fix."""
    from standin.executor_runner import write_measured_etdump

    empty = tmp_path / "load_only.etdump"
    write_measured_etdump(empty, (0, 1000), [])
    runner = HostRunner(_sh_runner(tmp_path / "bin", f'cp "{empty}" "$TRACE"'))
    with pytest.raises(TraceError, match="holds no execute events"):
        runner.run(_request(tmp_path))


def test_standin_rejects_unknown_flags_like_gflags(replay_runner: Path) -> None:
    proc = subprocess.run([str(replay_runner), "--bogus_flag=1"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 1
    assert "ERROR: unknown command line flag 'bogus_flag'" in proc.stderr


def test_standin_replay_refuses_without_a_recording(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="replay mode needs an existing recorded trace"):
        make_standin(tmp_path, trace=tmp_path / "missing.etdump")


def test_killed_by_signal_is_reported(tmp_path: Path) -> None:
    runner = HostRunner(_sh_runner(tmp_path / "bin", "kill -SEGV $$"))
    with pytest.raises(RunnerError, match=r"exited with code -11 \(killed by SIGSEGV\)") as info:
        runner.run(_request(tmp_path))
    assert info.value.returncode == -signal.SIGSEGV


def test_cli_profile_refuses_an_unwritable_out_before_measuring(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_sme2.measure.profile
    from pytest_sme2.cli import main

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("measured although the results could not be saved")

    monkeypatch.setattr(pytest_sme2.measure.profile, "profile_exported", never)
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")  # a file where a directory must go stops root too
    out = blocker / "results"
    code = main(["profile", "--pte", str(TOY_PTE), "--inputs", str(TOY_INPUT), "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert f"cannot write --out directory {out}" in err and "Nothing was changed" in err


def test_more_threads_than_cpus_is_refused_before_running(capsys: pytest.CaptureFixture[str]) -> None:
    import os

    from pytest_sme2.cli import main
    from pytest_sme2.errors import ConfigError

    cores = os.cpu_count() or 1
    with pytest.raises(ConfigError, match=rf"{cores + 1} threads asked for, but this host has {cores} CPUs"):
        LocalRunner().run(RunRequest(pte=TOY_PTE, runs=1, warmup=0, threads=cores + 1, inputs=(TOY_INPUT,)))
    LocalRunner().run(RunRequest(pte=TOY_PTE, runs=1, warmup=0, threads=cores, inputs=(TOY_INPUT,),
                                 mode=MODE_TIMING))  # at the limit
    assert main(["profile", "--pte", str(TOY_PTE), "--inputs", str(TOY_INPUT), "--threads", "200"]) == 2
    assert "Use --sme2-threads (CLI: --threads)" in capsys.readouterr().err


def test_a_relative_out_dir_still_gives_the_runner_paths_that_exist(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner runs in its run directory: a relative ``--sme2-out-dir`` handed to it as is pointed nowhere (QEMU's
    ``-D`` in_asm log). Run directories are absolute."""
    monkeypatch.chdir(tmp_path)
    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE))
    result = runner.run(_request(tmp_path, out_dir=Path("rel"), runs=3))
    assert result.trace_path is not None and result.trace_path.is_absolute() and result.trace_path.is_file()
    assert str(result.trace_path).startswith(str(tmp_path / "rel"))


#: a real executor_runner log (30 executions, its success line 'Model executed successfully 30 time(s)')
RECORDED_LOG = DATA / "toy_cnn_fp16_xnnpack_simd-on_t1.log"


def _five(tmp_path: Path) -> RunRequest:
    return RunRequest(pte=TOY_PTE, runs=4, warmup=1, out_dir=tmp_path / "out", inputs=(TOY_INPUT,), timeout_s=120.0)


def test_host_runner_refuses_a_runner_that_ignores_num_executions(tmp_path: Path) -> None:
    """Asked for 5 executions, a runner that replays all 30 recorded runs is an error, not 30 samples."""
    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE, fault="ignore_count"))
    with pytest.raises(RunnerError, match=r"asked for 5 executions \(--num_executions=5\), the trace holds 30") as info:
        runner.run(_five(tmp_path))
    assert "honours --num_executions" in str(info.value) and ".log" in str(info.value)
    # The honest stand-in, asked the same, gives exactly 5.
    assert len(HostRunner(make_standin(tmp_path / "ok", trace=TOY_TRACE)).run(_five(tmp_path)).e2e_ms) == 5


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda log: log.replace("Model executed successfully 30 time(s)", "Model executed"),
         r"its log has no 'Model executed successfully 30 time\(s\)' line"),
        (lambda log: log.replace("Model executed successfully 30 time(s)", "Model executed successfully 29 time(s)"),
         r"asked for 30 executions \(--num_executions=30\), its log says 'Model executed successfully 29 time\(s\)'"),
    ],
    ids=["no-success-line", "other-count"],
)
def test_a_runner_log_without_its_success_line_is_an_error(tmp_path: Path, edit: Callable[[str], str],
                                                           match: str) -> None:
    """A log in executor_runner's format must end with the success line for the executions asked."""
    request = RunRequest(pte=TOY_PTE, runs=29, warmup=1)
    log = RECORDED_LOG.read_text()
    check_what_ran("executor_runner x", request, 30, log, cmd=["x"], log_path=RECORDED_LOG, log_tail="")  # as recorded
    with pytest.raises(RunnerError, match=match):
        check_what_ran("executor_runner x", request, 30, edit(log), cmd=["x"], log_path=RECORDED_LOG, log_tail="")
    # A build with logging off prints nothing: then the trace's count is all there is to check.
    check_what_ran("executor_runner x", request, 30, "", cmd=["x"], log_path=RECORDED_LOG, log_tail="")


def test_a_stand_in_maps_the_same_libraries_whether_its_recording_was_cached_or_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A runner's shared libraries are part of its identity (a baseline whose runner loaded others cannot be re-run):
    the stand-in's first replay of a recording (its reader's numpy and pandas, in a child process) and a cached one
    map the same. (Before, the first mapped 99 objects and a cached one 19: one build, two identities by test order.)"""
    from pytest_sme2.device.codepaths import mapped_at_exit, mapped_paths

    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the stand-in's cache of recordings: empty
    runner = make_standin(tmp_path / "bin", trace=DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-off_t1.etdump")
    cmd = [str(runner), "--model_path", str(DATA / "toy_cnn_fp32_xnnpack.pte"), "--num_executions", "1"]
    cold = mapped_at_exit(cmd, cwd=tmp_path / "cold", timeout_s=120)
    assert list((tmp_path / "sme2-standin-recordings").glob("*.json")), "the first replay fills the cache"
    warm = mapped_at_exit(cmd, cwd=tmp_path / "warm", timeout_s=120)
    assert cold is not None and warm is not None
    assert mapped_paths(cold) == mapped_paths(warm)  # each sorted
