"""Disturbance evidence: host load snapshots, and CPU against wall time with real competing processes.

The competing load is real: ``python -c "while True: pass"`` processes, two of them on this
machine's cores, started and killed by the test. Other work may share the machine while the tests
run, so the assertions compare blocks measured with and without the burners, interleaved, instead
of asserting absolute quiet values.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from standin import make_standin

from pytest_sme2.load import (
    SOURCE_CHILD,
    SOURCE_THREAD,
    BlockLoad,
    HostLoad,
    block_load,
    host_load,
    parse_loadavg,
    parse_proc_stat,
    run_delay_ns,
)
from pytest_sme2.runners.base import MODE_TIMING, RunRequest, RunResult
from pytest_sme2.runners.host import HostRunner, wait_with_rusage
from pytest_sme2.runners.local import LocalRunner

DATA = Path(__file__).parent / "data"
MOBILENET_PTE = DATA / "mobilenet_v3_small_like_fp32_xnnpack.pte"
MOBILENET_INPUT = DATA / "mobilenet_v3_small_like_input_fp32.bin"
TOY_TRACE = DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"
TOY_PTE = DATA / "toy_cnn_fp32_xnnpack.pte"
TOY_INPUT = DATA / "toy_cnn_input_fp32.bin"

linux_only = pytest.mark.skipif(not Path("/proc/loadavg").exists(), reason="reads /proc (Linux only)")


@contextmanager
def burners(count: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` real CPU-burning processes, running until the block ends (killed by their pid)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(0.3)  # past interpreter start-up: spinning by the time the measurement starts
        assert all(p.poll() is None for p in procs), "a burner died"
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=10)


# ------------------------------------------------------------------------------------ parsing


@linux_only
def test_host_load_reads_what_the_kernel_reports() -> None:
    snapshot = host_load()
    assert snapshot is not None
    # The kernel's loadavg via another path (os.getloadavg reads the same numbers, refreshed every 5 s).
    assert abs(snapshot.loadavg_1m - os.getloadavg()[0]) < 1.0
    assert snapshot.procs_running >= 1, "the reading thread itself is runnable"
    assert snapshot.cpus == len(os.sched_getaffinity(0))
    assert 0 <= snapshot.ticks_steal <= snapshot.ticks_total and 0 < snapshot.ticks_idle < snapshot.ticks_total
    assert HostLoad.from_dict(snapshot.to_dict()) == snapshot


def test_parsers_follow_the_proc_formats() -> None:
    # Formats from proc(5): loadavg "1m 5m 15m running/total lastpid"; the cpu line's 10 counters.
    assert parse_loadavg("2.14 1.23 0.90 4/124 18235\n") == (2.14, 4)
    total, idle, steal = parse_proc_stat("cpu  106737 103 13990 326152 1301 0 301 626 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    assert (total, idle, steal) == (106737 + 103 + 13990 + 326152 + 1301 + 0 + 301 + 626, 326152 + 1301, 626)
    with pytest.raises(ValueError):
        parse_proc_stat("intr 1 2 3\n")
    assert host_load(Path("/nonexistent")) is None, "no /proc (macOS): no snapshot, not a crash"


def test_block_load_shares_and_round_trip() -> None:
    before = HostLoad(loadavg_1m=0.5, procs_running=1, cpus=2, ticks_total=1000, ticks_idle=900, ticks_steal=10)
    after = HostLoad(loadavg_1m=2.9, procs_running=3, cpus=2, ticks_total=1200, ticks_idle=950, ticks_steal=16)
    load = block_load(before, after, source=SOURCE_THREAD, cpu_s=0.62, wall_s=1.0, threads=1, run_delay_s=0.38,
                      involuntary_switches=41)
    assert load.loadavg_1m == 2.9 and load.procs_running == 3 and load.cpus == 2
    assert load.steal_share == pytest.approx(6 / 200) and load.host_busy_share == pytest.approx(1 - 50 / 200)
    assert load.cpu_share == pytest.approx(0.62) and load.preempted_share == pytest.approx(0.38)
    assert load.run_delay_share == pytest.approx(0.38)
    assert load.describe() == (
        "preempted 38 % of wall time (thread cpu time, 1 thread); waited for a CPU 38 %; load 2.9 on 2 CPUs; "
        "3 runnable; steal 3.0 %"
    )
    assert BlockLoad.from_dict(load.to_dict()) == load
    # Two threads: the share is taken over threads x wall; a share above 1 (clock reads) is not negative.
    assert block_load(None, None, source=SOURCE_CHILD, cpu_s=1.0, wall_s=1.0, threads=2).preempted_share == 0.5
    assert block_load(None, None, source=SOURCE_THREAD, cpu_s=1.001, wall_s=1.0, threads=1).preempted_share == 0.0
    # Fewer ticks than a share can be read from: unknown, not 0 % or 100 %.
    short = HostLoad(loadavg_1m=0.5, procs_running=1, cpus=2, ticks_total=1002, ticks_idle=901, ticks_steal=10)
    assert block_load(before, short, source=SOURCE_THREAD, cpu_s=0.01, wall_s=0.01, threads=1).steal_share is None


def test_run_result_carries_cpu_and_load_through_a_dict(tmp_path: Path) -> None:
    result = LocalRunner().run(RunRequest(pte=TOY_PTE, runs=5, warmup=1, inputs=(TOY_INPUT,), mode=MODE_TIMING,
                                          out_dir=tmp_path))
    again = RunResult.from_dict(result.to_dict())
    assert again.cpu_ms == result.cpu_ms and again.load == result.load and again.load is not None
    # Results written before these fields existed still load.
    old = result.to_dict()
    del old["cpu_ms"], old["load"]
    assert RunResult.from_dict(old).load is None and RunResult.from_dict(old).cpu_ms == ()


# --------------------------------------------------------------------- a real competing process


def _mobilenet_block(tmp_path: Path) -> RunResult:
    return LocalRunner().run(RunRequest(pte=MOBILENET_PTE, runs=60, warmup=3, threads=1, inputs=(MOBILENET_INPUT,),
                                        mode=MODE_TIMING, out_dir=tmp_path))


def _per_execution_share(result: RunResult, q: float = 0.5) -> float:
    """The ``q`` quantile over the measured executions of CPU time / wall time."""
    shares = sorted(c / w for c, w in zip(result.cpu_ms[result.warmup:], result.measured_ms, strict=True))
    return shares[min(len(shares) - 1, int(q * len(shares)))]


@linux_only
def test_two_cpu_burners_show_as_preemption_in_the_local_result(tmp_path: Path) -> None:
    """MobileNetV3, 1 thread: blocks alone and blocks against two burners, interleaved."""
    quiet: list[RunResult] = []
    busy: list[RunResult] = []
    for _ in range(3):
        quiet.append(_mobilenet_block(tmp_path))
        with burners(2):
            busy.append(_mobilenet_block(tmp_path))
    # A 3 ms execution usually fits in one scheduler slice, so the median execution may run whole even under
    # load (benchmarks/results/disturbance.txt: median 0.998, p10 0.49); the preempted ones show in the low tail.
    quiet_share = statistics.median(_per_execution_share(r, 0.1) for r in quiet)
    busy_share = statistics.median(_per_execution_share(r, 0.1) for r in busy)
    quiet_block = statistics.median(r.load.cpu_share for r in quiet if r.load)
    busy_block = statistics.median(r.load.cpu_share for r in busy if r.load)
    evidence = busy[0].load.describe() if busy[0].load else ""
    print(f"\nCPU/wall per execution, p10: alone {quiet_share:.3f}, two burners {busy_share:.3f}; "
          f"per block: {quiet_block:.3f} / {busy_block:.3f}; busy block: {evidence}")
    # Three runnable tasks on two cores leave the measuring thread at most ~2/3 of a core.
    assert busy_share < 0.8 and busy_share < 0.85 * quiet_share
    assert busy_block < 0.8 and busy_block < 0.85 * quiet_block
    for r in busy:
        assert r.load is not None and r.load.procs_running is not None and r.load.procs_running >= 3
        assert r.load.involuntary_switches is not None and r.load.involuntary_switches > 0
        if r.load.run_delay_s is not None:  # kernels with schedstat: the wait is measured directly
            assert r.load.run_delay_share is not None and r.load.run_delay_share > 0.15


#: A child that only computes (about half a second of CPU here): its CPU/wall is the share of a core it got.
SPIN_CHILD = [sys.executable, "-c", "x = 0\nfor i in range(15_000_000):\n    x += i"]


def _child_load(tmp_path: Path) -> tuple[float, int]:
    """(CPU/wall, involuntary switches) of one run of ``SPIN_CHILD``, reaped by ``wait_with_rusage``."""
    started = time.perf_counter()
    proc = subprocess.Popen(SPIN_CHILD)
    code, usage, ended = wait_with_rusage(proc, 120)
    assert code == 0 and proc.returncode == 0
    return (usage.ru_utime + usage.ru_stime) / (ended - started), int(usage.ru_nivcsw)


@linux_only
def test_child_rusage_shows_the_burners(tmp_path: Path) -> None:
    """The host runner reaps its child with rusage: CPU/wall of a real process, alone and against two burners."""
    quiet: list[tuple[float, int]] = []
    busy: list[tuple[float, int]] = []
    for _ in range(2):
        quiet.append(_child_load(tmp_path))
        with burners(2):
            busy.append(_child_load(tmp_path))
    quiet_share = statistics.median(x for x, _ in quiet)
    busy_share = statistics.median(x for x, _ in busy)
    print(f"\nCPU-bound child: CPU/wall alone {quiet_share:.3f}, two burners {busy_share:.3f}; involuntary "
          f"switches {[n for _, n in quiet]} / {[n for _, n in busy]}")
    assert busy_share < 0.8 and busy_share < 0.85 * quiet_share
    assert all(n > 0 for _, n in busy)


def test_wait_with_rusage_times_out_and_leaves_the_child_running(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = time.perf_counter()
        with pytest.raises(subprocess.TimeoutExpired):
            wait_with_rusage(proc, 0.5)
        assert 0.5 <= time.perf_counter() - started < 5
        assert proc.poll() is None, "a timeout must not reap the child: the caller kills its process group"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_host_runner_result_carries_the_child_rusage(tmp_path: Path) -> None:
    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE))
    result = runner.run(RunRequest(pte=TOY_PTE, runs=29, warmup=1, inputs=(TOY_INPUT,), out_dir=tmp_path / "out"))
    load = result.load
    assert load is not None and load.source == SOURCE_CHILD and load.threads == 1
    assert load.cpu_s > 0 and 0 < load.wall_s <= result.metadata["wall_s"] + 0.01
    assert load.involuntary_switches is not None and load.involuntary_switches >= 0
    assert result.cpu_ms == (), "a subprocess gives no per-execution CPU time"
    assert RunResult.from_dict(result.to_dict()).load == load


@linux_only
def test_run_delay_counts_time_waiting_for_a_cpu() -> None:
    """schedstat's run delay grows while two burners compete with a spinning thread of ours."""
    before = run_delay_ns()
    if before is None:
        pytest.skip("this kernel has no schedstat (CONFIG_SCHED_INFO off)")
    with burners(2):
        start = time.perf_counter()
        while time.perf_counter() - start < 0.5:
            pass
        after = run_delay_ns()
    assert after is not None
    waited = (after - before) / 1e9
    print(f"\nrun delay over 0.5 s of spinning against two burners: {waited:.3f} s")
    assert waited > 0.05


@linux_only
def test_a_busy_machine_gives_an_invalid_verdict_never_a_regression(tmp_path: Path) -> None:
    """Issue 10: a changed program (same toy_cnn, one extra byte after the program: another artifact, the same
    speed) is judged against stored samples recorded before; while two CPU burners compete for the two cores
    it runs slower, and the gate must say it could not measure (INVALID, with the evidence), not REGRESSION."""
    from pytest_sme2.artifacts import ArtifactStore
    from pytest_sme2.baseline import BaselineStore
    from pytest_sme2.gate import GateConfig, Status
    from pytest_sme2.judge import GATED, RECORDED, Policy, judge
    from pytest_sme2.profile import Measurement, ProgramFile, measure

    runner = LocalRunner()
    baselines, artifacts = BaselineStore(tmp_path / "baselines"), ArtifactStore(tmp_path / "artifacts")
    kw = {"config": GateConfig(margin=5.0), "policy": Policy(confirm=False), "runner": runner,
          "baselines": baselines, "artifacts": ArtifactStore(tmp_path / "empty")}

    def measurement(pte: Path, busy_limit: float) -> Measurement:
        return Measurement.of(ProgramFile(pte, (TOY_INPUT,), "fp32", "xnnpack"), runs=10, warmup=3, blocks=8,
                              out_dir=tmp_path / "runs", busy_limit=busy_limit)

    # The baseline: recorded with the busy check off (this test shares the cores with the rest of the suite;
    # the recording is not what is tested).
    recorded = judge(measure(runner, measurement(TOY_PTE, 1.0)), test_id="t::toy", **{**kw, "artifacts": artifacts})
    assert recorded.outcome == RECORDED
    changed = tmp_path / "changed" / TOY_PTE.name
    changed.parent.mkdir()
    changed.write_bytes(TOY_PTE.read_bytes() + b"\0")
    with burners(2):
        busy = measure(runner, measurement(changed, 0.05))
        judged = judge(busy, test_id="t::toy", **kw)
    assert judged.outcome == GATED and judged.verdict is not None
    print(f"\nverdict under two burners: {judged.verdict.status.value}: {busy.invalid_reason}")
    assert judged.verdict.comparison.value == "stored"  # the changed artifact, its reference not kept
    assert judged.verdict.status == Status.INVALID, judged.message
    assert "stayed busy" in busy.invalid_reason and "preempted" in busy.invalid_reason
