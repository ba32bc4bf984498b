"""The pool's xdist scheduler (pytest_sme2.plugin.lab_scheduling) driven as xdist's DSession drives it, with workers
that record what they are sent: routing by need, a device that drops, a worker that crashes."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_sme2.plugin.lab_scheduling import DeviceScheduling
from pytest_sme2.runners.pool import PoolEntry

pytestmark = pytest.mark.fast

A = PoolEntry("A", "adb", "a:1", "android", sme2=True, svl_bits=512)
B = PoolEntry("B", "adb", "b:1", "android", sme2=False)
C = PoolEntry("C", "adb", "c:1", "android", sme2=True, svl_bits=256)

COLLECTION = [
    "t.py::test_plain",
    "t.py::test_any@sme2:any",
    "t.py::test_sme2[0]@sme2:sme2",
    "t.py::test_sme2[1]@sme2:sme2",
    "t.py::test_no_sme2@sme2:no-sme2",
    "t.py::test_wide@sme2:svl>=512",
    "t.py::test_matrix[A]@sme2:sme2,device=A",
    "t.py::test_matrix[C]@sme2:sme2,device=C",
    "t.py::test_huge@sme2:svl>=4096",
]


@dataclass(eq=False)
class Worker:
    """What the scheduler sees of an xdist WorkerController: sent tests are queued here, run by :meth:`finish`."""

    gwid: str
    entry: str | None
    queue: list[int] = field(default_factory=list)
    shutting_down: bool = False

    @property
    def gateway(self) -> Any:
        return SimpleNamespace(id=self.gwid)

    @property
    def workerinput(self) -> dict[str, Any]:
        return {"sme2_entry": self.entry}

    def send_runtest_some(self, indices: list[int]) -> None:
        self.queue.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


class Session:
    """Drives the scheduler as DSession does; ``ran`` = (test, worker) in the order they finished."""

    def __init__(self, *workers: Worker, held: tuple[PoolEntry, ...] = (A, B, C)) -> None:
        self.not_run: list[tuple[str, str]] = []
        self.said: list[str] = []
        config = SimpleNamespace(getvalue=lambda name: ["popen"] * len(workers))
        self.sched = DeviceScheduling(config, None, held, lambda n, why: self.not_run.append((n, why)),
                                      self.said.append)
        self.workers = workers
        self.ran: list[tuple[str, str]] = []
        for w in workers:
            self.sched.add_node(w)
        for w in workers:
            self.sched.add_node_collection(w, COLLECTION)
        self.sched.schedule()

    def finish(self, worker: Worker) -> str:
        """``worker`` finishes its first test: it runs it, unless its device dropped in an earlier test and the test
        needs a device (then the worker reports it done unrun, as pytest_sme2.plugin.lab's worker does)."""
        index = worker.queue.pop(0)
        lost = worker.entry in self.sched.lost and self.sched.lost_in.get(str(worker.entry)) != index
        if not (lost and self.sched.servers[index]):
            self.ran.append((COLLECTION[index], worker.gwid))
        self.sched.mark_test_complete(worker, index)
        return COLLECTION[index]

    def run_all(self) -> None:
        while not self.sched.tests_finished:
            busy = [w for w in self.workers if w.queue and (len(w.queue) >= 2 or w.shutting_down)]
            assert busy, "no worker can make progress: the session would hang"
            self.finish(busy[0])
        for w in self.workers:  # DSession's shutdown: each runs what it holds
            while w.queue:
                self.finish(w)


def _where(session: Session) -> dict[str, str]:
    where = {}
    for test, gw in session.ran:
        assert test not in where, f"{test} ran twice"
        where[test] = gw
    return where


def test_each_test_runs_once_on_a_worker_whose_device_serves_it() -> None:
    a, b, c = Worker("gw0", "A"), Worker("gw1", "B"), Worker("gw2", "C")
    s = Session(a, b, c)
    s.run_all()
    where = _where(s)
    assert set(where) == set(COLLECTION)  # every test once, the one no device serves too (its worker skips it)
    assert where["t.py::test_sme2[0]@sme2:sme2"] in ("gw0", "gw2")
    assert where["t.py::test_sme2[1]@sme2:sme2"] in ("gw0", "gw2")
    assert where["t.py::test_no_sme2@sme2:no-sme2"] == "gw1"
    assert where["t.py::test_wide@sme2:svl>=512"] == "gw0"
    assert where["t.py::test_matrix[A]@sme2:sme2,device=A"] == "gw0"
    assert where["t.py::test_matrix[C]@sme2:sme2,device=C"] == "gw2"
    assert s.not_run == [] and s.said == []
    assert all(w.shutting_down for w in (a, b, c))


def test_a_worker_without_a_device_gets_only_tests_that_need_none() -> None:
    a, spare = Worker("gw0", "A"), Worker("gw1", None)
    s = Session(a, spare, held=(A,))
    s.run_all()
    where = _where(s)
    assert {t for t, gw in where.items() if gw == "gw1"} <= {"t.py::test_plain", "t.py::test_no_sme2@sme2:no-sme2",
                                                            "t.py::test_huge@sme2:svl>=4096",
                                                            "t.py::test_matrix[C]@sme2:sme2,device=C"}
    assert where["t.py::test_any@sme2:any"] == "gw0"


def test_a_dropped_devices_held_test_moves_to_another_device_that_serves_it() -> None:
    a, b, c = Worker("gw0", "A"), Worker("gw1", "B"), Worker("gw2", "C")
    s = Session(a, b, c)
    assert [COLLECTION[i] for i in c.queue] == ["t.py::test_matrix[C]@sme2:sme2,device=C",
                                                 "t.py::test_sme2[0]@sme2:sme2"]
    # C drops during its first test: that test's report says so (the worker makes it INVALID) ...
    s.sched.device_lost(c, "t.py::test_matrix[C]@sme2:sme2,device=C", "device offline")
    s.finish(c)
    # ... and the worker hands back the test it held, unrun: it goes to A, the other SME2 device.
    assert s.finish(c) == "t.py::test_sme2[0]@sme2:sme2"
    assert s.said == ["sme2 lab: t.py::test_sme2[0]@sme2:sme2: C dropped before it ran (device offline); moved to "
                      "another device that serves it"]
    s.run_all()
    where = _where(s)
    assert where["t.py::test_sme2[0]@sme2:sme2"] == "gw0"
    assert not [t for t, gw in where.items() if gw == "gw2" and "matrix[C]" not in t and "@sme2:" in t
                and "svl>=4096" not in t]
    assert s.not_run == []


def test_tests_only_a_dropped_device_serves_are_reported_not_run_and_the_session_ends() -> None:
    a, b, c = Worker("gw0", "A"), Worker("gw1", "B"), Worker("gw2", "C")
    s = Session(a, b, c)
    # A drops in its first test: test_wide (svl>=512) and test_matrix[A] are A's only.
    first = COLLECTION[a.queue[0]]
    s.sched.device_lost(a, first, "disappeared")
    s.finish(a)
    s.run_all()
    where = _where(s)
    gone = {n for n, _ in s.not_run}
    assert {"t.py::test_wide@sme2:svl>=512", "t.py::test_matrix[A]@sme2:sme2,device=A"} - {first} <= gone
    assert not gone & set(where)  # reported not run, never run
    assert all("A dropped" in why and "no other device of the pool that serves it is left" in why
               for _, why in s.not_run)
    assert set(where) | gone == set(COLLECTION)


def test_a_crashed_workers_tests_go_to_the_others() -> None:
    a, c = Worker("gw0", "A"), Worker("gw2", "C")
    s = Session(a, c, held=(A, C))
    held = [COLLECTION[i] for i in c.queue]
    crashed = s.sched.remove_node(c)
    assert crashed == held[0]  # what DSession reports as the crash
    s.workers = (a,)
    s.run_all()
    assert held[1] in _where(s) or held[1] in {n for n, _ in s.not_run}
