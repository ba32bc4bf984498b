"""The lab (``--sme2-pool``): a pool of devices, one per pytest-xdist worker, and each test routed to a device that
serves it.

How it follows pytest-xdist's conventions:

- ``-n auto`` starts one worker per device of the pool (``pytest_xdist_auto_num_workers``);
- the controller discovers the pool once, prints it (``pytest_report_header``) and hands it to each worker with the
  name of the device that worker holds (``pytest_configure_node``: ``workerinput["sme2_pool"]``, ``["sme2_entry"]``);
  a worker that replaces a crashed one takes the crashed one's device;
- each worker collects the same tests and adds what a device test needs to its node id, as xdist's ``loadgroup`` adds a
  test's group (``test_a@sme2:sme2``); the scheduler (``pytest_xdist_make_scheduler``,
  :mod:`pytest_sme2.plugin.lab_scheduling`) routes by it. Where pytest-sme2 keys anything on a test (baselines, result
  records, run directories) it uses the id without that part (:func:`pytest_sme2.plugin.records.test_id`), so a test's
  baseline is the same with and without the pool;
- matrix mode (``--sme2-matrix``, ``sme2_device(matrix=True)``) parametrizes each device test over the devices that
  serve it (``test_a[EmuPhone_SME2]``), and each runs on its own device, with its own baseline and report row.

A device test is one that uses ``sme2_runner``, ``sme2_baseline`` or ``android_device``; others run on any worker.
When a device test fails, the worker asks the device's source whether it still answers (:func:`pool.alive`); when it
does not, that test's verdict is INVALID with the reason (nothing of its run was recorded: runners never return a
partial result), the controller's scheduler is told through the report, and every later test of that device is handed
back to the scheduler unrun, for another device that serves it or to be reported as not run.

Without pytest-xdist the session holds the pool's first device; tests that other devices serve are skipped with the
advice to run with ``-n auto``.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_sme2.errors import ConfigError
from pytest_sme2.options import Sme2Options
from pytest_sme2.plugin.lab_scheduling import DeviceScheduling
from pytest_sme2.plugin.records import NEED_MARK, update
from pytest_sme2.runners.pool import Discovery, Need, PoolEntry, serving, why_none

#: The fixtures that make a test a device test.
DEVICE_FIXTURES = frozenset({"sme2_runner", "sme2_baseline", "android_device"})
#: The pseudo-fixture a matrix test is parametrized over (the name of its device).
MATRIX_ARG = "sme2_pool_device"
#: The user property of a test report whose device dropped (the controller's scheduler reads it).
LOST_PROPERTY = "sme2_device_lost"

DISCOVERY_KEY = pytest.StashKey[Discovery]()
LAB_KEY = pytest.StashKey["Lab"]()


def register(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "sme2_device(needs='', *, matrix=False): with --sme2-pool, what this test needs of its device (comma "
        "separated: sme2, no-sme2, svl>=BITS, soc=NAME), added to --sme2-needs; matrix=True runs it once on every "
        "device that serves it (docs/lab.md)",
    )


@dataclass
class Lab:
    """A process's view of the pool: every device, those workers hold, and the one this process holds."""

    options: Sme2Options
    discovery: Discovery
    #: the devices held by some worker (all of them up to the number of workers), in pool order
    held: tuple[PoolEntry, ...]
    entry: PoolEntry | None
    xdist_worker: bool
    #: what became of this process's device ("" while it answers)
    lost: str = ""
    notes: list[str] = field(default_factory=list)

    def is_device_test(self, item: pytest.Item) -> bool:
        return bool(DEVICE_FIXTURES & set(getattr(item, "fixturenames", ())))

    def need(self, item: pytest.Item | Any) -> Need:
        """What ``item`` (or a metafunc's definition) needs: ``--sme2-needs``, its marker, its matrix device."""
        need = Need.parse(self.options.needs or "")
        marker = item.get_closest_marker("sme2_device")
        if marker is not None and marker.args:
            need = need.merged(Need.parse(str(marker.args[0]), where=f"sme2_device marker of {item.nodeid}"))
        callspec = getattr(item, "callspec", None)
        if callspec is not None and MATRIX_ARG in callspec.params:
            need = need.merged(Need(device=str(callspec.params[MATRIX_ARG])))
        return need

    def matrix(self, definition: Any) -> bool:
        marker = definition.get_closest_marker("sme2_device")
        return bool(self.options.matrix or (marker is not None and marker.kwargs.get("matrix")))

    # ------------------------------------------------------------------------------ collection

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if not DEVICE_FIXTURES & set(metafunc.fixturenames) or not self.matrix(metafunc.definition):
            return
        try:
            servers = serving(self.need(metafunc.definition), self.held)
        except ConfigError:
            return  # the test's setup fails with the marker's error
        if servers:
            # A parameter no fixture declares, as pytest-repeat adds its own: the test's id names its device.
            metafunc.fixturenames.append(MATRIX_ARG)
            metafunc.parametrize(MATRIX_ARG, [e.name for e in servers], ids=[e.name for e in servers])

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        if not self.xdist_worker:
            return
        for item in items:
            if self.is_device_test(item):
                try:
                    key = self.need(item).key()
                except ConfigError:
                    key = "any"  # its setup fails with the error
                suffix_nodeid(item, f"{item.nodeid}{NEED_MARK}{key}")

    # ------------------------------------------------------------------------------ running

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        if self.lost and self.xdist_worker and self.is_device_test(item) and self._served_by_others(item):
            # Not run here: reported done without a report, the controller's scheduler moves it to another device.
            item.session._setupstate.teardown_exact(nextitem)  # what pytest's own protocol ends with
            return True
        return None

    def _served_by_others(self, item: pytest.Item) -> bool:
        try:
            return bool(serving(self.need(item), self.held))
        except ConfigError:
            return False

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if not self.is_device_test(item):
            return
        try:
            need = self.need(item)
        except ConfigError as exc:
            pytest.fail(str(exc), pytrace=False)
        servers = serving(need, self.held)
        if not servers:
            unheld = serving(need, self.discovery.entries)
            if not unheld:
                pytest.skip(why_none(need, self.discovery.entries, self.discovery.left_out))
            held = ", ".join(e.name for e in self.held) or "none"
            pytest.skip(f"runs on {', '.join(e.name for e in unheld)} of the pool, and this session's workers hold "
                        f"{held}: run with pytest-xdist, one worker per device (-n auto)")
        if self.entry is None or need.unmet(self.entry):  # pragma: no cover - the scheduler sends it where it runs
            names = ", ".join(e.name for e in servers)
            pytest.skip(f"routed to a worker whose device does not serve it (served by {names})")
        if self.lost:
            pytest.skip(f"not run: {self.entry.name} dropped ({self.lost}) and no other device of the pool serves it")
        update(item, device=self.entry.name)

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if (report.failed and report.when in ("setup", "call") and self.entry is not None and not self.lost
                and self.is_device_test(item)):
            self._check_device(item, report)
        return report

    def _check_device(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """After a failed device test: if the device no longer answers, the test is INVALID and the device is lost."""
        from pytest_sme2.runners.pool import alive

        assert self.entry is not None
        why = alive(self.entry)
        if not why:
            return
        self.lost = why
        reason = f"device {self.entry.name} ({self.entry.source} {self.entry.address}) dropped during this test: {why}"
        verdict = invalid_verdict(reason, self.options)
        update(item, device=self.entry.name, verdict=verdict, note=reason)
        report.user_properties.append((LOST_PROPERTY, why))
        text = f"sme2 INVALID: {item.nodeid}\n{reason}\nNothing of this run was recorded."
        if verdict.failed:
            report.longrepr = text
        else:
            report.outcome = "skipped"
            report.longrepr = (str(item.path), (item.location[1] or 0), text)


def suffix_nodeid(item: pytest.Item, nodeid: str) -> None:
    """Give ``item`` the node id ``nodeid``: xdist's loadgroup convention (what the scheduler routes by, at the end of
    the node id). pytest keeps the id in a private attribute: ``_id`` (a NodeId, pytest 9.2), ``_nodeid`` before."""
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(nodeid)
    else:
        item._nodeid = nodeid  # type: ignore[attr-defined]


def invalid_verdict(reason: str, options: Sme2Options) -> Any:
    """An INVALID verdict whose only check says why the device could not measure."""
    from pytest_sme2.gate.verdict import Check, Status, Verdict

    return Verdict(Status.INVALID, (Check("device", Status.INVALID, reason),), explanation=(reason,),
                   strict=options.strict, fail_on=tuple(s for s in options.fail_on if s != "missing"))


# ---------------------------------------------------------------------------------------------- the controller


class LabController:
    """The controller's part under pytest-xdist: the pool to the workers, the scheduler, devices that dropped."""

    def __init__(self, config: pytest.Config, lab: Lab) -> None:
        self.config = config
        self.lab = lab
        #: device name -> the gateway id of the worker holding it
        self.holders: dict[str, str] = {}
        self.scheduler: DeviceScheduling | None = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        free = [e.name for e in self.lab.held if e.name not in self.holders]
        entry = free[0] if free else None
        if entry is not None:
            self.holders[entry] = node.gateway.id
        node.workerinput["sme2_pool"] = self.lab.discovery.to_dict()
        node.workerinput["sme2_held"] = [e.name for e in self.lab.held]
        node.workerinput["sme2_entry"] = entry

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        # A worker that replaces a crashed one takes its device.
        self.holders = {name: gw for name, gw in self.holders.items() if gw != node.gateway.id}

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        self.scheduler = DeviceScheduling(config, log, self.lab.held, self.not_run, self.say)
        return self.scheduler

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)
        for key, value in report.user_properties:
            if key == LOST_PROPERTY and node is not None and self.scheduler is not None:
                self.scheduler.device_lost(node, report.nodeid, str(value))

    def say(self, line: str) -> None:
        reporter = self.config.pluginmanager.getplugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(line)

    def not_run(self, nodeid: str, reason: str) -> None:
        """Report ``nodeid`` skipped as not run (no worker can run it any more)."""
        path, _, name = nodeid.partition("::")
        location = (path, None, name)
        text = f"not run: {reason}"
        hook = self.config.hook
        hook.pytest_runtest_logstart(nodeid=nodeid, location=location)
        # No line: the test never started (pytest's skip summary prints "path: reason" for None, as for a module's
        # skip marker; its type says int).
        skip: Any = (path, None, f"Skipped: {text}")
        report = pytest.TestReport(nodeid, location, {}, "skipped", skip, "setup")
        hook.pytest_runtest_logreport(report=report)
        hook.pytest_runtest_logfinish(nodeid=nodeid, location=location)


# ---------------------------------------------------------------------------------------------- wiring


def _xdist_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no" and bool(
        config.getoption("numprocesses", None))


def discovered(config: pytest.Config, options: Sme2Options) -> Discovery:
    """The pool, discovered once per session (on the controller, or the only process)."""
    if DISCOVERY_KEY not in config.stash:
        from pytest_sme2.runners.pool import discover

        try:
            config.stash[DISCOVERY_KEY] = discover(options)
        except ConfigError as exc:
            raise pytest.UsageError(f"pytest-sme2: {exc}") from None
    return config.stash[DISCOVERY_KEY]


def auto_workers(config: pytest.Config) -> int | None:
    """``-n auto`` with a pool: one worker per device (None: no pool, xdist decides)."""
    from pytest_sme2.plugin.config import build_options

    # Asked before pytest_configure, of every session with -n auto: the options are built only for a pool.
    if not (config.getoption("sme2_pool", None) or config.getini("sme2_pool")):
        return None
    options = build_options(config)
    return max(1, len(discovered(config, options).entries))


def configure(config: pytest.Config, options: Sme2Options) -> Sme2Options:
    """Set up the lab in this process (nothing without ``--sme2-pool``); the options of the device it holds."""
    if not options.pool:
        return options
    _check(options)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and "sme2_pool" in workerinput:
        discovery = Discovery.from_dict(workerinput["sme2_pool"])
        held_names = list(workerinput["sme2_held"])
        held = tuple(e for e in discovery.entries if e.name in held_names)
        entry = next((e for e in held if e.name == workerinput["sme2_entry"]), None)
        lab = Lab(options, discovery, held, entry, xdist_worker=True)
    else:
        discovery = discovered(config, options)
        if _xdist_controller(config):
            workers = int(config.getoption("numprocesses"))
            held = discovery.entries[:workers]
            lab = Lab(options, discovery, held, None, xdist_worker=False)
            if len(discovery.entries) > workers:
                lab.notes.append(f"{len(discovery.entries) - workers} device(s) of the pool have no worker "
                                 f"({', '.join(e.name for e in discovery.entries[workers:])}): -n auto gives one "
                                 "worker per device")
            config.pluginmanager.register(LabController(config, lab), "sme2_lab_controller")
            config.stash[LAB_KEY] = lab
            return options
        held = discovery.entries[:1]
        lab = Lab(options, discovery, held, held[0] if held else None, xdist_worker=False)
        if len(discovery.entries) > 1:
            lab.notes.append(f"without pytest-xdist this session holds {held[0].name} only: -n auto gives one worker "
                             "per device")
    config.stash[LAB_KEY] = lab
    config.pluginmanager.register(lab, "sme2_lab")
    if lab.entry is None:
        return options
    from pytest_sme2.runners.registry import check_options, resolve

    try:
        held_options = resolve(lab.entry.runner_options(options))
        check_options(held_options)
    except ConfigError as exc:
        raise pytest.UsageError(f"pytest-sme2: pool device {lab.entry.name}: {exc}") from None
    lab.options = held_options
    return held_options


def _check(options: Sme2Options) -> None:
    """What a pool cannot take, before any device is asked: a bad --sme2-needs, a phone or an ssh host chosen by
    hand."""
    try:
        Need.parse(options.needs or "")
    except ConfigError as exc:
        raise pytest.UsageError(f"pytest-sme2: {exc}") from None
    if options.serial:
        raise pytest.UsageError(
            f"--sme2-serial {options.serial} chooses one phone, and --sme2-pool gives each pytest-xdist worker a "
            "device of the pool: drop --sme2-serial (the pool takes every phone adb lists as 'device'), or drop "
            "--sme2-pool")
    if options.ssh_host:
        raise pytest.UsageError(
            f"--sme2-ssh-host {options.ssh_host} chooses one host, and --sme2-pool gives each pytest-xdist worker a "
            "device of the pool: drop --sme2-ssh-host and list the hosts with --sme2-ssh-hosts (ini sme2_ssh_hosts, "
            "one per line), or drop --sme2-pool")


def header(config: pytest.Config) -> Sequence[str]:
    """The pool, printed once at the session's start (the controller's header; workers print none)."""
    lab = config.stash.get(LAB_KEY, None)
    if lab is None or lab.xdist_worker:
        return []
    return [*lab.discovery.lines(), *lab.notes]
