"""Was the CPU ours while a block ran? Host load snapshots and per-block disturbance evidence.

A busy machine is not a slower model: when another process competes for the cores, every execution
takes longer and a gate would call it a regression. The evidence that tells the two apart is
recorded where the time is measured:

- **CPU time against wall time.** A thread that ran the whole time it was being timed has
  CPU/wall ~= 1; a preempted one has less (it waited for a core). On the local runtime this is the
  measuring thread's CPU time around each ``Method.execute`` (``time.thread_time_ns``) with one
  runtime thread, or the whole process's CPU time over ``threads x wall`` with several (the pool's
  worker threads do part of the work; see :attr:`BlockLoad.cpu_share` for what that costs in
  sensitivity). For an ``executor_runner`` subprocess it is the child's rusage.
- **Run delay.** Linux's scheduler statistics (``/proc/<pid>/task/<tid>/schedstat``) count the time
  each thread was runnable but waiting for a CPU: preemption measured directly, whatever the
  threads do when idle.
- **The host around the block.** ``/proc/loadavg`` (1-minute load, tasks runnable right now) and
  the ``steal`` ticks of ``/proc/stat`` (time the hypervisor gave this VM's CPUs to someone else).

Measured on this project's 2-CPU VM (``benchmarks/disturbance.py``: MobileNetV3, 200 executions,
1 runtime thread): the block's ``cpu_share`` is 0.999 alone, 0.993-0.997 with one CPU burner and
0.61-0.65 with two; its run delay share 0.000 / 0.003-0.007 / 0.35-0.39. The *median* execution's
CPU/wall stays ~1.0 even with two burners (the scheduler's slices outlast a 3-5 ms execution, so
preemption hits some executions whole and spares the rest: the 10th percentile drops to 0.49), so
judge a block by its share, its run delay or its low percentiles, not by the median execution. One
burner on the other CPU slowed the median 4-14 % with CPU/wall at 1: the cores share caches and
the host's physical cores; only ``host_busy_share`` (~100 % instead of ~50 %) and
``procs_running`` show that. :attr:`BlockLoad.others_busy_share` takes the block's own CPU time off
``host_busy_share``: ~1 % alone, ~50 % beside one burner (1 thread on 2 CPUs).

**Blocks too short for the host's counters.** ``/proc/stat`` counts in ticks (10 ms of one CPU); a block spanning
fewer than :data:`MIN_TICKS` (0.1 s on 2 CPUs) cannot tell its host's share apart from rounding, and a 3 ms block of
toy_cnn on XNNPACK spans under one. :class:`HostWindow` reads the host between the blocks of a measurement instead
and, for a block too short to tell alone, gives the others' share over the shortest run of recent blocks (with the
gaps between them) that spans ``MIN_TICKS``: this process's own CPU time, and its reaped children's, over that span is
what it used, the rest of the busy ticks are other processes'. See :attr:`BlockLoad.window_others_share`.

Everything here reads ``/proc``; where it does not exist (macOS) the host snapshot is ``None`` and
only the CPU/wall evidence remains. The verdict (is a block disturbed?) is the gate's business;
this module only measures and describes.
"""

from __future__ import annotations

import math
import os
import resource
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")

#: ``BlockLoad.source`` values: how ``cpu_s`` was measured.
SOURCE_THREAD = "thread cpu time"
SOURCE_PROCESS = "process cpu time"
SOURCE_CHILD = "child rusage"

#: Fewest ``/proc/stat`` ticks (summed over CPUs; 100 per CPU-second) a block must span for its
#: steal and busy shares: below that one tick more or less moves a share by several percent.
MIN_TICKS = 20


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask), else the machine's logical CPUs."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0


# --------------------------------------------------------------------------------- host snapshots


@dataclass(frozen=True)
class HostLoad:
    """One snapshot of the host: ``/proc/loadavg`` and the aggregate ``cpu`` line of ``/proc/stat``.

    ``procs_running`` counts the tasks runnable at that instant, the reading thread included, so an
    otherwise idle machine reads 1. Tick counters are cumulative since boot (USER_HZ, usually 100/s);
    only differences between two snapshots mean anything.
    """

    loadavg_1m: float
    procs_running: int
    cpus: int
    ticks_total: int
    ticks_idle: int
    ticks_steal: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "loadavg_1m": self.loadavg_1m, "procs_running": self.procs_running, "cpus": self.cpus,
            "ticks_total": self.ticks_total, "ticks_idle": self.ticks_idle, "ticks_steal": self.ticks_steal,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HostLoad:
        return cls(
            loadavg_1m=float(d["loadavg_1m"]), procs_running=int(d["procs_running"]), cpus=int(d["cpus"]),
            ticks_total=int(d["ticks_total"]), ticks_idle=int(d["ticks_idle"]), ticks_steal=int(d["ticks_steal"]),
        )


def parse_loadavg(text: str) -> tuple[float, int]:
    """``"2.14 1.23 0.90 4/124 18235"`` -> ``(2.14, 4)``: 1-minute load and tasks runnable now."""
    fields = text.split()
    running = fields[3].split("/")[0]
    return float(fields[0]), int(running)


def parse_proc_stat(text: str) -> tuple[int, int, int]:
    """The aggregate ``cpu`` line of ``/proc/stat`` -> ``(total, idle, steal)`` ticks.

    ``idle`` includes ``iowait`` (a CPU waiting for I/O is free for another task). ``guest`` and
    ``guest_nice`` are already counted in ``user``/``nice``, so they are not added to the total.
    """
    for line in text.splitlines():
        if line.startswith("cpu "):
            values = [int(v) for v in line.split()[1:]]
            break
    else:
        raise ValueError("no aggregate 'cpu' line")
    values += [0] * (8 - len(values))
    user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
    total = user + nice + system + idle + iowait + irq + softirq + steal
    return total, idle + iowait, steal


def host_load(proc: Path = PROC) -> HostLoad | None:
    """A snapshot of the host's load now, or ``None`` where ``/proc`` cannot be read (not Linux)."""
    try:
        load, running = parse_loadavg((proc / "loadavg").read_text())
        total, idle, steal = parse_proc_stat((proc / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None
    return HostLoad(loadavg_1m=load, procs_running=running, cpus=cpu_count(), ticks_total=total,
                    ticks_idle=idle, ticks_steal=steal)


# ------------------------------------------------------------------------------- process counters


def run_delay_ns(pid: int | str = "self", proc: Path = PROC) -> int | None:
    """Nanoseconds the threads of ``pid`` have spent runnable but waiting for a CPU, summed over threads.

    The second field of each thread's ``schedstat``. ``None`` when the kernel does not provide it
    (built without ``CONFIG_SCHED_INFO``, or not Linux). A thread that ended in between is simply
    missing from the sum, so take differences over a span in which the threads live throughout.
    """
    total = 0
    found = False
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return None
    for task in tasks:
        try:
            fields = (task / "schedstat").read_text().split()
        except OSError:
            continue
        if len(fields) >= 2:
            total += int(fields[1])
            found = True
    return total if found else None


def involuntary_switches() -> int:
    """Involuntary context switches of this process so far (all threads): times the kernel took a core away."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw)


# ------------------------------------------------------------------------------------ block load


@dataclass(frozen=True)
class BlockLoad:
    """What one block of executions saw: its CPU time against its wall time, and the host around it.

    ``cpu_s`` and ``wall_s`` cover the same span (every execution of the block, warm-ups included,
    for the local runtime; the child's whole life for a runner subprocess). ``source`` says how
    ``cpu_s`` was measured (``SOURCE_*``). Host fields are the larger of the snapshots taken just
    before and just after the block (``None`` when ``/proc`` was unreadable); ``steal_share`` and
    ``host_busy_share`` are tick differences over the block, ``None`` when it spans fewer than
    ``MIN_TICKS`` (0.1 s on 2 CPUs). ``run_delay_s`` and ``involuntary_switches`` are ``None`` when
    not measured.
    """

    source: str
    cpu_s: float
    wall_s: float
    threads: int
    cpus: int
    loadavg_1m: float | None = None
    procs_running: int | None = None
    steal_share: float | None = None
    host_busy_share: float | None = None
    run_delay_s: float | None = None
    involuntary_switches: int | None = None
    #: for a block too short for its own ``host_busy_share``: the share of the host's CPU time other processes used
    #: over the recent blocks of its measurement spanning :data:`MIN_TICKS` (:class:`HostWindow`), and how long
    #: that window was; None when not measured
    window_others_share: float | None = None
    window_s: float | None = None

    @property
    def cpu_share(self) -> float:
        """``cpu_s / (threads x wall_s)``: 1 when every runtime thread ran throughout.

        With one thread this is the plain CPU/wall of the measuring thread, ~1 on a quiet machine.
        With several it also drops when the pool's threads idle for want of parallel work (a quiet
        machine reads below 1, by an amount that depends on the model), so it is a weaker signal
        there; ``run_delay_s`` is not affected by idling.
        """
        denominator = self.threads * self.wall_s
        return self.cpu_s / denominator if denominator > 0 else float("nan")

    @property
    def preempted_share(self) -> float:
        """``1 - cpu_share``, clamped to [0, 1]: the share of wall time the runtime did not run."""
        share = self.cpu_share
        if math.isnan(share):  # nothing was timed
            return float("nan")
        return min(1.0, max(0.0, 1.0 - share))

    @property
    def run_delay_share(self) -> float | None:
        """Run delay over ``threads x wall_s``: the share of the block the runtime's threads waited for a CPU."""
        if self.run_delay_s is None or self.wall_s <= 0:
            return None
        return self.run_delay_s / (self.threads * self.wall_s)

    @property
    def others_busy_share(self) -> float | None:
        """The share of the host's CPU time that others used during the block: ``host_busy_share`` less the block's
        own CPU time over ``cpus x wall_s``. ~0 on a quiet machine whatever the threads. A block too short for its
        own share takes its window's (:attr:`window_others_share`); None when neither was measured."""
        if self.host_busy_share is None or self.wall_s <= 0 or self.cpus <= 0:
            return self.window_others_share
        own = min(1.0, self.cpu_s / (self.cpus * self.wall_s))
        return max(0.0, self.host_busy_share - own)

    def describe(self) -> str:
        """One line of evidence, e.g. ``preempted 38 % of wall time (thread cpu time); load 2.9 on 2 CPUs``."""
        parts = [f"preempted {100 * self.preempted_share:.0f} % of wall time ({self.source}, {self.threads} thread"
                 f"{'s' if self.threads != 1 else ''})"]
        if self.run_delay_share is not None:
            parts.append(f"waited for a CPU {100 * self.run_delay_share:.0f} %")
        others = self.others_busy_share
        if others is not None:
            window = (f" (over the last {self.window_s:.2f} s of its measurement: the block alone was too short to "
                      "tell)") if self.host_busy_share is None and self.window_s is not None else ""
            parts.append(f"other processes used {100 * others:.0f} % of the host's CPU time{window}")
        if self.loadavg_1m is not None:
            parts.append(f"load {self.loadavg_1m:.1f} on {self.cpus} CPUs")
        if self.procs_running is not None:
            parts.append(f"{self.procs_running} runnable")
        if self.steal_share is not None and self.steal_share > 0:
            parts.append(f"steal {100 * self.steal_share:.1f} %")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source, "cpu_s": self.cpu_s, "wall_s": self.wall_s, "threads": self.threads,
            "cpus": self.cpus, "loadavg_1m": self.loadavg_1m, "procs_running": self.procs_running,
            "steal_share": self.steal_share, "host_busy_share": self.host_busy_share,
            "run_delay_s": self.run_delay_s, "involuntary_switches": self.involuntary_switches,
            "window_others_share": self.window_others_share, "window_s": self.window_s,
            # derived, for readers of the JSON; from_dict recomputes them
            "cpu_share": self.cpu_share, "preempted_share": self.preempted_share,
            "others_busy_share": self.others_busy_share,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BlockLoad:
        def opt_float(key: str) -> float | None:
            value = d.get(key)
            return None if value is None else float(value)

        def opt_int(key: str) -> int | None:
            value = d.get(key)
            return None if value is None else int(value)

        return cls(
            source=str(d["source"]), cpu_s=float(d["cpu_s"]), wall_s=float(d["wall_s"]),
            threads=int(d["threads"]), cpus=int(d["cpus"]), loadavg_1m=opt_float("loadavg_1m"),
            procs_running=opt_int("procs_running"), steal_share=opt_float("steal_share"),
            host_busy_share=opt_float("host_busy_share"), run_delay_s=opt_float("run_delay_s"),
            involuntary_switches=opt_int("involuntary_switches"), window_others_share=opt_float("window_others_share"),
            window_s=opt_float("window_s"),
        )


def block_load(
    before: HostLoad | None,
    after: HostLoad | None,
    *,
    source: str,
    cpu_s: float,
    wall_s: float,
    threads: int,
    run_delay_s: float | None = None,
    involuntary_switches: int | None = None,
) -> BlockLoad:
    """The :class:`BlockLoad` of a block measured between the host snapshots ``before`` and ``after``."""
    snapshots = [s for s in (before, after) if s is not None]
    steal = busy = None
    if before is not None and after is not None:
        ticks = after.ticks_total - before.ticks_total
        if ticks >= MIN_TICKS:  # over a few ticks a share says nothing: leave it unknown
            steal = (after.ticks_steal - before.ticks_steal) / ticks
            busy = 1.0 - (after.ticks_idle - before.ticks_idle) / ticks
    return BlockLoad(
        source=source,
        cpu_s=cpu_s,
        wall_s=wall_s,
        threads=max(1, threads),
        cpus=snapshots[-1].cpus if snapshots else cpu_count(),
        loadavg_1m=max(s.loadavg_1m for s in snapshots) if snapshots else None,
        procs_running=max(s.procs_running for s in snapshots) if snapshots else None,
        steal_share=steal,
        host_busy_share=busy,
        run_delay_s=run_delay_s,
        involuntary_switches=involuntary_switches,
    )


# ------------------------------------------------------------------------------- windows of blocks


def own_cpu_s() -> float:
    """CPU seconds (user + system) this process and its reaped children have used so far."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def _ticks_per_s() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, OSError, ValueError):
        return 100


@dataclass(frozen=True)
class WindowMark:
    """The host's counters and this process' own CPU time at one instant between blocks."""

    host: HostLoad
    own_cpu_s: float
    at_s: float  # time.monotonic()


class HostWindow:
    """Host readings between the blocks of one measurement: busy-host evidence for blocks too short to carry their own.

    :meth:`mark` reads the host (call it before the first block and after every round); :meth:`others_share` is the
    share of the host's CPU ticks that other processes used between the newest mark and the latest earlier one at
    least :data:`MIN_TICKS` before it: busy ticks less this process' own CPU time (and its reaped children's: a runner
    subprocess) in ticks. Own work between blocks (analysis, Python) is this process', so it is not counted as others';
    a sibling worker's export is. Older marks are dropped as they stop being needed, so a busy spell leaves the window
    within ``MIN_TICKS`` of its end.
    """

    def __init__(self, proc: Path = PROC) -> None:
        self._proc = proc
        self._marks: list[WindowMark] = []
        self._hz = _ticks_per_s()

    def mark(self) -> None:
        """Read the host now (nothing where ``/proc`` cannot be read)."""
        host = host_load(self._proc)
        if host is not None:
            self._marks.append(WindowMark(host, own_cpu_s(), time.monotonic()))

    def prime(self, *, limit_s: float = 1.0) -> None:
        """Read the host, then wait (idle, at most ``limit_s``) until it has counted :data:`MIN_TICKS`: so the first
        blocks of a measurement have a window too (the host just before them), not only the later ones."""
        self.mark()
        deadline = time.monotonic() + limit_s
        while self._marks and time.monotonic() < deadline:
            time.sleep(0.01)
            host = host_load(self._proc)
            if host is None or host.ticks_total - self._marks[0].host.ticks_total >= MIN_TICKS:
                break
        self.mark()

    def others_share(self) -> tuple[float, float] | None:
        """``(share of the host's CPU time other processes used, seconds)`` over the shortest recent window of at least
        :data:`MIN_TICKS`, ending at the newest mark; None until the marks span that many ticks."""
        if len(self._marks) < 2:
            return None
        last = self._marks[-1]
        start = next((i for i in range(len(self._marks) - 2, -1, -1)
                      if last.host.ticks_total - self._marks[i].host.ticks_total >= MIN_TICKS), None)
        if start is None:
            return None
        del self._marks[:start]  # what lies before the window is never needed again
        first = self._marks[0]
        ticks = last.host.ticks_total - first.host.ticks_total
        busy = ticks - (last.host.ticks_idle - first.host.ticks_idle)
        own = (last.own_cpu_s - first.own_cpu_s) * self._hz
        return min(1.0, max(0.0, (busy - own) / ticks)), last.at_s - first.at_s
