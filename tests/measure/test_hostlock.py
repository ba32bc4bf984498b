"""The host's measuring lock (``pytest_sme2.measure.hostlock``): measurements take turns across processes, and a
sibling worker's heavy work (an export, a build, an analysis) waits while another process measures.

The processes are real (the ``executor_runner`` stand-in replaying the recorded toy_cnn trace, and small Python
children holding the lock); what is asserted is who waited and in what order, never how long.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from standin import make_standin

from pytest_sme2.runners.host import HostRunner

DATA = Path(__file__).parents[1] / "data"
TOY_TRACE = DATA / "toy_cnn_fp32_xnnpack_simd-on_t1.etdump"
TOY_PTE = DATA / "toy_cnn_fp32_xnnpack.pte"
TOY_INPUT = DATA / "toy_cnn_input_fp32.bin"
linux_only = pytest.mark.skipif(not Path("/proc/loadavg").exists(), reason="reads /proc (Linux only)")

#: Measures toy_cnn on a replaying stand-in runner with the measuring lock ``argv[2]`` ("" = none) once the file
#: ``argv[3]`` exists, printing progress lines and then the (start, end) of every run, from this process's own clock.
#: ``argv[4]`` is its index (0 or 1). A rendezvous makes the overlap structural, whatever the machine's load: its
#: first run touches ``started-<i>`` and waits until the other process has either started a run too (no lock: both
#: are inside a run together) or said it waits for the lock (``waiting-<i>``, touched by its progress callback).
_MEASURE_SCRIPT = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from standin import make_standin
from pytest_sme2.measure.profile import measure
from pytest_sme2.measure.recipe import Measurement
from pytest_sme2.runners.host import HostRunner

out, index = Path(sys.argv[1]), int(sys.argv[4])
meet = out.parent

class Timed(HostRunner):
    spans = []
    def run(self, request):
        if not self.spans:
            (meet / f"started-{{index}}").touch()
            other = 1 - index
            deadline = time.monotonic() + 120
            while not ((meet / f"started-{{other}}").exists() or (meet / f"waiting-{{other}}").exists()):
                if time.monotonic() > deadline:
                    raise SystemExit("the other measurement neither ran nor waited for the lock")
                time.sleep(0.005)
        start = time.time()
        result = super().run(request)
        self.spans.append((start, time.time()))
        return result

def progress(text):
    print("progress:", text, flush=True)
    if "waiting for another measurement" in text:
        (meet / f"waiting-{{index}}").touch()

runner = Timed(make_standin(out / "bin", trace={trace!r}))
m = Measurement(pte=Path({pte!r}), inputs=(Path({inputs!r}),), runs=2, warmup=0, blocks=3, busy_limit=1.0,
                out_dir=out / "runs", label="toy", lock_file=Path(sys.argv[2]) if sys.argv[2] else None)
print("ready", flush=True)
while not Path(sys.argv[3]).exists():
    time.sleep(0.01)
measure(runner, m, progress=progress)
print("spans:", json.dumps(Timed.spans), flush=True)
"""


def _two_measurements(tmp_path: Path, lock: Path | None) -> list[tuple[list[tuple[float, float]], str]]:
    """Two processes measuring at once (started together once both are past their imports); each one's run spans
    and its output."""
    script = _MEASURE_SCRIPT.format(tests=str(Path(__file__).parents[1]), trace=str(TOY_TRACE), pte=str(TOY_PTE),
                                    inputs=str(TOY_INPUT))
    tmp_path.mkdir(parents=True, exist_ok=True)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / f"p{i}"), str(lock or ""), str(go),
                               str(i)], stdout=subprocess.PIPE, text=True) for i in range(2)]
    for proc in procs:  # past their imports (seconds on a loaded machine), polling for the start
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    go.touch()
    out = []
    for proc in procs:
        text, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, text
        spans = json.loads(next(line for line in text.splitlines() if line.startswith("spans:"))[len("spans:"):])
        out.append(([(a, b) for a, b in spans], text))
    return out


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> bool:
    """Whether the measurement spanning ``a``'s runs and the one spanning ``b``'s overlap in time."""
    return min(s for s, _ in a) < max(e for _, e in b) and min(s for s, _ in b) < max(e for _, e in a)


@linux_only
def test_two_processes_measuring_on_one_host_never_overlap(tmp_path: Path) -> None:
    """With the host's measuring lock, two processes' measurements run one after the other.

    Without the lock (the control) the same two measurements overlap; with it they never
    do, and the one that waited said so as progress (its runs, and its time budget, start after the wait).
    """
    (a, _), (b, _) = _two_measurements(tmp_path / "free", None)
    assert _overlap(a, b), "the control: two measurements started together overlap without the lock"
    lock = tmp_path / "cache" / "measuring.lock"
    (a, out_a), (b, out_b) = _two_measurements(tmp_path / "locked", lock)
    assert not _overlap(a, b), f"measurements overlapped: {a} / {b}"
    waited = [text for text in (out_a, out_b) if "waiting for another measurement on this host (pid " in text]
    assert len(waited) == 1, (out_a, out_b)
    assert "toy, since " in waited[0] and str(lock) in waited[0]


#: Holds the lock ``argv[1]`` as ``argv[2]`` ("measuring" or "heavy") until the file ``argv[4]`` exists, touching
#: ``argv[3]`` once it holds it.
_HOLD_SCRIPT = """
import sys, time
from pathlib import Path
from pytest_sme2.measure.hostlock import heavy_work, measuring

hold = measuring if sys.argv[2] == "measuring" else heavy_work
with hold(Path(sys.argv[1]), what="the holder"):
    Path(sys.argv[3]).touch()
    while not Path(sys.argv[4]).exists():
        time.sleep(0.01)
"""


def _wait_for(path: Path, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + 120  # a hang guard, not a timing: the other side is told to go on at once
    while not path.exists():
        assert proc is None or proc.poll() is None, "the holder died"
        assert time.monotonic() < deadline, f"{path.name} never came"
        time.sleep(0.01)


def _held_by_another_process(tmp_path: Path, lock: Path, how: str) -> tuple[subprocess.Popen[bytes], Path]:
    holding, release = tmp_path / f"holding-{how}", tmp_path / f"release-{how}"
    proc = subprocess.Popen([sys.executable, "-c", _HOLD_SCRIPT, str(lock), how, str(holding), str(release)])
    _wait_for(holding, proc)
    return proc, release


def _in_a_thread(tmp_path: Path, hold: Any, lock: Path, name: str) -> tuple[threading.Thread, list[str]]:
    """Enter ``hold(lock)`` in a thread; it touches ``waiting-<name>`` when its progress says it waits, records
    ``entered`` when it holds, and leaves at once."""
    events: list[str] = []

    def progress(text: str) -> None:
        events.append(f"progress: {text}")
        (tmp_path / f"waiting-{name}").touch()

    def work() -> None:
        with hold(lock, what=name, progress=progress):
            events.append("entered")

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread, events


def _joined(thread: threading.Thread) -> None:
    thread.join(timeout=120)  # a hang guard: a deadlock fails the test instead of hanging the suite
    assert not thread.is_alive(), "it never got the lock: deadlock"


@linux_only
def test_heavy_work_and_measurements_take_turns_across_processes(tmp_path: Path) -> None:
    """A sibling worker's export, build or analysis (``heavy_work``) waits while another process
    measures, and a measurement waits while another process does heavy work; structural (who waited, in what order),
    not timed."""
    from pytest_sme2.measure.hostlock import heavy_work, measuring

    lock = tmp_path / "cache" / "measuring.lock"
    measurer, release = _held_by_another_process(tmp_path, lock, "measuring")
    thread, events = _in_a_thread(tmp_path, heavy_work, lock, "export")
    _wait_for(tmp_path / "waiting-export")
    assert events and events[0].startswith("progress: export: waiting for the measurement on this host to end")
    assert "entered" not in events, "heavy work ran beside a measurement"
    release.touch()
    _joined(thread)
    assert measurer.wait(timeout=60) == 0
    assert events[-1] == "entered"

    worker, release = _held_by_another_process(tmp_path, lock, "heavy")
    thread, events = _in_a_thread(tmp_path, measuring, lock, "toy")
    _wait_for(tmp_path / "waiting-toy")
    assert "entered" not in events, "a measurement ran beside another process' export"
    assert "waiting for pytest-sme2's own work on this host (pid " in events[0], events
    assert "the holder, since " in events[0] and "(an export, build or analysis)" in events[0]
    release.touch()
    _joined(thread)
    assert worker.wait(timeout=60) == 0
    assert events[-1] == "entered"


@linux_only
def test_heavy_work_and_a_measurement_in_one_process_never_wait_for_themselves(tmp_path: Path) -> None:
    """Analysis inside this process' own measurement, a measurement inside its own export, heavy work inside heavy
    work: each goes ahead (each runs in a thread that must finish: a deadlock fails, it does not hang the suite)."""
    from pytest_sme2.measure.hostlock import heavy_work, measuring

    lock = tmp_path / "measuring.lock"
    done: list[str] = []

    def nested() -> None:
        with measuring(lock, what="m"), heavy_work(lock, what="analysis"):
            done.append("analysis inside a measurement")
        with heavy_work(lock, what="export"), heavy_work(lock, what="build"):
            done.append("heavy inside heavy")
            with measuring(lock, what="m"):
                done.append("a measurement inside heavy work")
        with heavy_work(lock, what="after"):  # everything was released: a fresh hold
            done.append("released")

    thread = threading.Thread(target=nested, daemon=True)
    thread.start()
    _joined(thread)
    assert len(done) == 4
    # ... and another process can take it, exclusively, afterwards: nothing was left held
    holder, release = _held_by_another_process(tmp_path, lock, "measuring")
    release.touch()
    assert holder.wait(timeout=60) == 0


@linux_only
@pytest.mark.parametrize("where", ["heavy work", "a measurement", "a measurement inside heavy work"])
def test_ctrl_c_while_taking_the_lock_leaves_it_free(where: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyboardInterrupt between taking the lock and holding it (while the holder's line is written) leaves no
    descriptor holding it: the session's end, or the next session of this process, would wait for it forever."""
    import fcntl
    import os

    from pytest_sme2.measure import hostlock
    from pytest_sme2.measure.hostlock import heavy_work, measuring

    lock = tmp_path / "measuring.lock"
    real_write = hostlock._write_holder

    def interrupted(fd: int, what: str, *, heavy: bool = False) -> None:
        if what == "interrupted":
            raise KeyboardInterrupt
        real_write(fd, what, heavy=heavy)

    monkeypatch.setattr(hostlock, "_write_holder", interrupted)
    with pytest.raises(KeyboardInterrupt):
        if where == "heavy work":
            with heavy_work(lock, what="interrupted"):
                pass
        elif where == "a measurement":
            with measuring(lock, what="interrupted"):
                pass
        else:
            with heavy_work(lock, what="export"), measuring(lock, what="interrupted"):
                pass
    assert not hostlock._SHARED and not hostlock._HELD
    other = os.open(lock, os.O_RDWR)  # another open file: conflicts with any hold left in this process
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError if a hold was left
    finally:
        os.close(other)
    with measuring(lock, what="next") as waited:  # and the process measures again
        assert waited == 0.0


def test_analysis_and_the_log_run_hold_the_lock_shared_after_the_measurement(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Wiring: a measurement's trace analysis and the unmeasured XNNPACK-log run are heavy work (they wait for a
    sibling's measurement), taken on the measurement's own lock file and never while it measures."""
    import contextlib

    from pytest_sme2.measure import hostlock, profile
    from pytest_sme2.measure.profile import measure, record_kernel_log
    from pytest_sme2.measure.recipe import Measurement

    lock = tmp_path / "measuring.lock"
    seen: list[tuple[str, Path | None, bool]] = []
    real = hostlock.heavy_work

    @contextlib.contextmanager
    def recording(lock_file: Path | None, *, what: str = "", progress: Any = None) -> Iterator[float]:
        seen.append((what, lock_file, bool(hostlock._HELD)))
        with real(lock_file, what=what, progress=progress) as waited:
            yield waited

    monkeypatch.setattr(profile, "heavy_work", recording)
    log = DATA / "mobilenet_v3_small_like_fp32_xnnpack_simd-on_t1.xnnlog"
    runner = HostRunner(make_standin(tmp_path / "bin", trace=TOY_TRACE),
                        log={None: make_standin(tmp_path / "log", xnnlog=log, tracer=False)})
    m = Measurement(pte=TOY_PTE, inputs=(TOY_INPUT,), runs=2, warmup=0, blocks=2, busy_limit=1.0,
                    out_dir=tmp_path / "runs", label="toy", lock_file=lock)
    measure(runner, m)
    record_kernel_log(runner, m)
    assert [(what, where) for what, where, _ in seen] == [("toy: analysis", lock), ("toy: the XNNPACK log run", lock)]
    assert not any(measuring for _, _, measuring in seen), "heavy work was entered while this process measured"
