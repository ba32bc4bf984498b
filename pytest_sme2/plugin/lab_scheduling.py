"""The pool's pytest-xdist scheduler (``pytest_xdist_make_scheduler``): each test to a worker whose device serves it.

Like xdist's ``LoadScheduling`` it waits for every worker's collection, checks they are identical, and hands tests out
as workers finish them; unlike it, a test goes only to a worker whose device serves what the test needs. What a test
needs travels in its node id, as xdist's own ``loadgroup`` carries a test's group (``test_a@sme2:sme2,svl>=256``: the
worker adds it at collection, :mod:`pytest_sme2.plugin.lab`); a test without it needs no device and goes anywhere, and
so does a device test no device of the pool serves (its worker skips it with the reason).

Each worker gets at most two tests at a time (the one it runs and the next: an xdist worker holds its next test before
it runs one), so when a device drops, little is queued behind it: the test it dropped in is that test's (invalid), and
every later test the worker had is handed back here when the worker reports it done without running it, then goes to
another worker whose device serves it, or is reported as not run with the reason. A worker is shut down (and so runs
its last test) once nothing left could go to it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from pytest_sme2.plugin.records import NEED_MARK
from pytest_sme2.runners.pool import Need, PoolEntry, serving

#: Tests handed to a worker at a time: the one it runs and the one it holds next.
IN_FLIGHT = 2


def need_of(nodeid: str) -> Need | None:
    """The need a node id carries (None: a test that needs no device)."""
    if NEED_MARK not in nodeid:
        return None
    return Need.parse(nodeid.rpartition(NEED_MARK)[2], where=nodeid)


def entry_of(node: Any) -> str | None:
    """The pool entry a worker holds (None: it holds no device)."""
    name = node.workerinput.get("sme2_entry")
    return None if name is None else str(name)


class DeviceScheduling:
    """A pytest-xdist scheduler (xdist's ``Scheduling`` protocol) routing tests by what their device can do.

    ``held`` are the pool's devices that workers hold; ``not_run(nodeid, reason)`` reports a test that no live worker
    can run any more (its device dropped and no other serves it); ``say(line)`` tells the user a test moved.
    """

    def __init__(self, config: Any, log: Any, held: Sequence[PoolEntry], not_run: Callable[[str, str], None],
                 say: Callable[[str], None] = lambda _line: None) -> None:
        from xdist.workermanage import parse_tx_spec_config

        self.numnodes = len(parse_tx_spec_config(config))
        self.config = config
        self.log = log.devicesched if log is not None else (lambda *_args: None)
        self.held = tuple(held)
        self.not_run = not_run
        self.say = say
        self.node2collection: dict[Any, list[str]] = {}
        self.node2pending: dict[Any, list[int]] = {}
        self.collection: list[str] | None = None
        #: per test, the names of the devices that serve it; None: any worker (no device needed, or none serves it)
        self.servers: list[frozenset[str] | None] = []
        self.unsent: list[int] = []
        #: device name -> what became of it
        self.lost: dict[str, str] = {}
        #: device name -> the test it dropped in (that test's own report says so; it is not moved)
        self.lost_in: dict[str, int] = {}

    # ------------------------------------------------------------------------------ xdist's Scheduling protocol

    @property
    def nodes(self) -> list[Any]:
        return list(self.node2pending)

    @property
    def collection_is_completed(self) -> bool:
        return len(self.node2collection) >= self.numnodes

    @property
    def tests_finished(self) -> bool:
        if not self.collection_is_completed or self.unsent:
            return False
        return all(len(pending) < IN_FLIGHT for pending in self.node2pending.values())

    @property
    def has_pending(self) -> bool:
        return bool(self.unsent) or any(self.node2pending.values())

    def add_node(self, node: Any) -> None:
        assert node not in self.node2pending
        self.node2pending[node] = []

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        from xdist.report import report_collection_diff

        assert node in self.node2pending
        if self.collection_is_completed and self.collection is not None and list(collection) != self.collection:
            other = next(iter(self.node2collection))
            self.log(report_collection_diff(self.collection, list(collection), other.gateway.id, node.gateway.id))
            return
        self.node2collection[node] = list(collection)

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is None:
            if not self._same_collections():
                return
            self.collection = next(iter(self.node2collection.values()))
            self.servers = [self._servers(nodeid) for nodeid in self.collection]
            self.unsent = list(range(len(self.collection)))
        self._dispatch_all()

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        self.node2pending[node].remove(item_index)
        name = entry_of(node)
        if name in self.lost and item_index != self.lost_in.get(name) and self.servers[item_index]:
            # The worker did not run it: its device had dropped (pytest_sme2.plugin.lab). Another device may.
            self._move(item_index, f"{name} dropped before it ran ({self.lost[name]})")
        self._dispatch_all()

    def mark_test_pending(self, item: str) -> None:
        assert self.collection is not None
        self.unsent.insert(0, self.collection.index(item))
        self._dispatch_all()

    def remove_pending_tests_from_node(self, node: Any, indices: Sequence[int]) -> None:
        raise NotImplementedError("the device scheduler never steals tests")

    def remove_node(self, node: Any) -> str | None:
        pending = self.node2pending.pop(node)
        if not pending:
            return None
        assert self.collection is not None
        crashed, rest = pending[0], pending[1:]
        for index in rest:
            self._move(index, f"the worker holding {entry_of(node) or 'no device'} went down")
        self._dispatch_all()
        return self.collection[crashed]

    # ------------------------------------------------------------------------------ devices dropping

    def device_lost(self, node: Any, nodeid: str, why: str) -> None:
        """``node``'s device dropped during ``nodeid``: none of its later tests run there (a test report said so)."""
        name = entry_of(node)
        if name is None or name in self.lost or self.collection is None:
            return
        self.lost[name] = why
        if nodeid in self.collection:
            self.lost_in[name] = self.collection.index(nodeid)
        self.log(f"device {name} of {node.gateway.id} dropped: {why}")
        for index in [i for i in self.unsent if not self._live_servers(i)]:
            self.unsent.remove(index)
            self._move(index, f"{name} dropped before it ran ({why})")

    # ------------------------------------------------------------------------------ routing

    def _servers(self, nodeid: str) -> frozenset[str] | None:
        need = need_of(nodeid)
        if need is None:
            return None
        names = frozenset(e.name for e in serving(need, self.held))
        return names or None

    def _can_run(self, node: Any, index: int) -> bool:
        servers = self.servers[index]
        if servers is None:
            return True
        name = entry_of(node)
        return name is not None and name in servers and name not in self.lost

    def _live_servers(self, index: int) -> float:
        servers = self.servers[index]
        return math.inf if servers is None else len(servers - self.lost.keys())

    def _pick(self, node: Any) -> int | None:
        """The next test for ``node``: of those it can run, the one the fewest devices serve (then collection order)."""
        fits = [i for i in self.unsent if self._can_run(node, i)]
        return min(fits, key=lambda i: (self._live_servers(i), i)) if fits else None

    def _may_get_more(self, node: Any) -> bool:
        """Whether a test could still come to ``node``: one not handed out, or one another worker holds (its device
        may drop)."""
        if any(self._can_run(node, i) for i in self.unsent):
            return True
        return any(self._can_run(node, i) for other, pending in self.node2pending.items() if other is not node
                   for i in pending)

    def _dispatch(self, node: Any) -> None:
        if node.shutting_down:
            return
        pending = self.node2pending[node]
        while len(pending) < IN_FLIGHT:
            index = self._pick(node)
            if index is None:
                break
            self.unsent.remove(index)
            pending.append(index)
            node.send_runtest_some([index])
        if len(pending) < IN_FLIGHT and not self._may_get_more(node):
            node.shutdown()

    def _dispatch_all(self) -> None:
        if self.collection is None:
            return
        for node in self.nodes:
            self._dispatch(node)

    def _move(self, index: int, why: str) -> None:
        """Hand ``index`` to another worker whose device serves it, or report it as not run."""
        assert self.collection is not None
        if any(self._can_run(node, index) for node in self.nodes if not node.shutting_down):
            self.unsent.insert(0, index)
            self.say(f"sme2 lab: {self.collection[index]}: {why}; moved to another device that serves it")
            return
        served = ", ".join(sorted(self.servers[index] or ())) or "none"
        self.not_run(self.collection[index], f"{why}; no other device of the pool that serves it is left "
                                             f"(devices that serve it: {served})")

    def _same_collections(self) -> bool:
        from xdist.report import report_collection_diff

        (first, col), *rest = self.node2collection.items()
        same = True
        for node, collection in rest:
            msg = report_collection_diff(col, collection, first.gateway.id, node.gateway.id)
            if msg:
                same = False
                self.log(msg)
        return same
