"""The devices pytest-sme2 can measure on: one row each, read by the pytest plugin and the CLI alike.

A row says everything a front end needs to know about a device: its name, the options it takes (fields of
:class:`~pytest_sme2.options.Sme2Options`; the plugin spells them ``--sme2-<name>``, the CLI ``--<name>``), its own
conflicts, whether it measures on this host's CPUs (and so takes the host's measuring lock, and refuses more threads
than the host has CPUs), what it cannot do (its skips), and a factory that makes its runner from the resolved options.
Nothing else in the package decides anything by a device's name (but the ``android_device`` fixture, the phone's
own): a new device is one module (its :class:`~pytest_sme2.runners.base.Runner`)
plus one row, :func:`register_device`\\ ed from a module pytest-sme2 imports for models (``sme2_models``, ``--models``,
or a package's ``pytest_sme2.models`` entry point; DEVELOPERS.md, "Adding a device").

The factory is named as ``"module:function"`` and imported when the runner is made, so reading the registry (every
``--help``, every option check) imports no runner.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pytest_sme2.errors import ConfigError
from pytest_sme2.runners.build import TARGET_HOST, TARGET_LINUX_AARCH64

if TYPE_CHECKING:
    from pytest_sme2.options import Sme2Options
    from pytest_sme2.runners.base import Runner

#: The options that give ``executor_runner`` builds (``--sme2-runner`` ...): a device running such binaries takes them.
RUNNER_BUILDS = ("runner", "runner_off", "runner_timing", "runner_off_timing", "runner_log", "runner_off_log")
#: What a phone takes besides its builds.
ANDROID_OPTIONS = ("serial", "libcxx", "runner_libs", "big_cores", "cooldown", "fixed_performance")
#: What the emulated device takes besides its one runner.
QEMU_OPTIONS = ("qemu", "aarch64_wheel", "emulated_timing", "count_instructions")

#: What an Arm host over ssh takes besides its one runner (pytest-sme2's own is cross-built from the aarch64 wheel).
SSH_OPTIONS = ("ssh_host", "ssh_config", "aarch64_wheel")

#: ``--sme2-device=qemu``'s defaults for the options the user did not set (command line or ini): one execution per
#: arm gives the SME2 question's answers (the trace's operators, QEMU's log of the kernels that ran, the outputs) ...
EMULATED_DEFAULTS = MappingProxyType({"blocks": 1, "runs": 1, "warmup": 0})
#: ... and with ``--sme2-emulated-timing``, emulated time measured in full, to be gated against the emulated baseline.
EMULATED_TIMING_DEFAULTS = MappingProxyType({"blocks": 6, "runs": 3, "warmup": 1})


@dataclass(frozen=True)
class Spelling:
    """How a front end writes an option: the plugin ``--sme2-serial`` and ``--sme2-device=android``, the CLI
    ``--serial`` and ``--device android``. ``offered``: the options the front end has (None = every one)."""

    prefix: str
    device_flag: str
    offered: frozenset[str] | None = None

    def flag(self, option: str) -> str:
        return self.prefix + option.replace("_", "-")

    def device(self, name: str) -> str:
        return f"{self.device_flag}{name}"


PYTEST = Spelling("--sme2-", "--sme2-device=")


@dataclass(frozen=True)
class RunnerContext:
    """What a factory gets besides the options: the front end's progress line and the xdist worker (None outside)."""

    progress: Callable[[str], None] | None = None
    worker: str | None = None
    #: where pytest-sme2's own runner builds are kept (``<cache dir>/runners``; None: ``build_runner``'s default)
    runner_cache: Path | None = None


@dataclass(frozen=True)
class Device:
    """One device's row (see the module docstring)."""

    name: str
    #: what it is, one sentence (the front ends' help)
    summary: str
    #: ``function(options, context) -> Runner``, or ``"module:function"`` naming it, imported when the runner is made
    #: (the built-in rows: reading the registry imports no runner)
    factory: str | Callable[[Sme2Options, RunnerContext], Runner]
    #: the device-specific Sme2Options fields it takes; any other device's is refused with it
    options: tuple[str, ...] = ()
    #: its runs use this host's CPUs: they take turns under the host's measuring lock with every other measurement
    #: here (``measure.hostlock``), and exports and builds wait for them
    host_lock: bool = False
    #: its runtime threads are this host's CPUs: more threads than the host has are refused
    host_threads: bool = False
    #: the target of pytest-sme2's own runner it builds from the executorch wheel when ``runner`` is not given
    #: (``runners.build``; None: it builds none)
    own_runner: str | None = None
    #: that own runner is its own timing build (its latency is untraced by default)
    own_runner_untraced: bool = False
    #: it runs SME2-on/off builds; False: an on/off test is skipped with :attr:`no_on_off`
    on_off: bool = True
    #: why an SME2 on/off test cannot run on it (said by the skip)
    no_on_off: str = ""
    #: it compares export backends of one model (``profile(backend=...)``, ``compare_backends``): the local runtime
    compares_backends: bool = False
    #: its own defaults for options the user did not set: ``defaults(resolved values) -> {field: value}``
    defaults: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    #: its own conflicts beyond the options it takes: ``check(options, spelling)`` raises ConfigError
    check: Callable[[Sme2Options, Spelling], None] | None = None

    def takes(self, option: str) -> bool:
        return option in self.options

    def builds_own_runner(self, options: Sme2Options) -> bool:
        """Whether these options make it run pytest-sme2's own runner (built from the wheel), not a user's build."""
        return self.own_runner is not None and options.runner is None

    def make(self, options: Sme2Options, context: RunnerContext | None = None) -> Runner:
        """The runner of these options (the factory's errors are its own: a ConfigError is a usage error)."""
        make = self.factory
        if isinstance(make, str):
            module, _, function = make.partition(":")
            try:
                make = getattr(importlib.import_module(module), function)
            except (ImportError, AttributeError) as exc:
                raise ConfigError(f"device {self.name!r}: its factory {self.factory!r} cannot be "
                                  f"loaded ({type(exc).__name__}: {exc}); fix its register_device row") from None
        runner: Runner = make(options, context or RunnerContext())
        return runner


_DEVICES: dict[str, Device] = {}


def register_device(device: Device) -> Device:
    """Add ``device`` to the registry (once per name: the same row again is fine, another row of that name is not)."""
    known = _DEVICES.get(device.name)
    if known is not None and _where(known.factory) != _where(device.factory):
        raise ConfigError(f"device {device.name!r} is registered twice: with the factory {_where(known.factory)} and "
                          f"with {_where(device.factory)}; give the second another name")
    if not device.name or not device.name.replace("_", "").replace("-", "").isalnum():
        raise ConfigError(f"device name {device.name!r}: use letters, digits, '-' and '_' (it is an option's value)")
    _DEVICES[device.name] = device
    return device


def _where(factory: object) -> str:
    """``module:function`` of a factory (a module imported again registers the same row again: that is no clash)."""
    if isinstance(factory, str):
        return factory
    return f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', repr(factory))}"


def names() -> tuple[str, ...]:
    """Every registered device's name, the built-in ones first."""
    return tuple(_DEVICES)


def device(name: str, *, sources: str = "") -> Device:
    """The row of ``name``; an unknown name lists the registered ones (``sources``: where more were looked for)."""
    if name not in _DEVICES:  # an installed package's: its pytest_sme2.models entry point may register devices too
        from pytest_sme2.models import discover

        discover()
    try:
        return _DEVICES[name]
    except KeyError:
        where = f", in {sources}" if sources else ""
        raise ConfigError(f"invalid choice: {name!r} is not a registered device ({', '.join(_DEVICES)}); a device of "
                          f"your own is one module with one register_device row{where} (DEVELOPERS.md, 'Adding a "
                          "device')") from None


def help_text(default: str = "local") -> str:
    """What ``--sme2-device`` / ``--device`` take: each registered device, what it is."""
    listed = ", ".join(f"{d.name} = {d.summary}" for d in _DEVICES.values())
    return f"where models run: {listed}; or a device of your own (DEVELOPERS.md, 'Adding a device'). Default: {default}"


# ------------------------------------------------------------------------------------------------ checks


def _given(options: Sme2Options, option: str) -> bool:
    """Whether ``option`` was set to something other than its default (``--sme2-cooldown=0`` is the default)."""
    defaults = {f.name: f.default for f in dataclasses.fields(options)}
    value = getattr(options, option)
    return value is not None and value is not False and value != defaults.get(option)


def check_options(options: Sme2Options, spelling: Spelling = PYTEST) -> Device:
    """Refuse what this device cannot take: its own conflicts, then any other device's option. Returns its row."""
    row = device(options.device)
    if row.check is not None:
        row.check(options, spelling)
    owners: dict[str, list[str]] = {}
    for other in _DEVICES.values():
        for option in other.options:
            owners.setdefault(option, []).append(other.name)
    foreign = [o for o in owners if not row.takes(o) and _given(options, o)]
    if not foreign:
        return row
    if spelling.offered is None:
        option = foreign[0]
        flag, value = spelling.flag(option), getattr(options, option)
        shown = f" {value}" if isinstance(value, str) else ""
        where = " or ".join(spelling.device(n) for n in owners[option])
        raise ConfigError(f"{flag}{shown} only applies to {where} (device is {options.device!r}); add "
                          f"{spelling.device(owners[option][0])} or drop {flag}")
    # A front end with a few of the options (the CLI): name every one it has that the same devices take.
    group = owners[foreign[0]]
    flags = [spelling.flag(o) for o in owners if owners[o] == group and o in spelling.offered]
    listed = flags[0] if len(flags) == 1 else f"{', '.join(flags[:-1])} and {flags[-1]}"
    verb = "applies" if len(flags) == 1 else "apply"
    raise ConfigError(f"{listed} {verb} to {' or '.join(spelling.device(n) for n in group)} only "
                      f"(device is {options.device!r})")


def check_threads_here(options: Sme2Options, cpus: int) -> None:
    """More threads than this host's ``cpus`` on a device whose runs use them is a usage error."""
    from pytest_sme2.runners.base import check_threads

    if device(options.device).host_threads:
        check_threads(options.threads, cpus, "this host")


def resolve(options: Sme2Options) -> Sme2Options:
    """``options`` with what their device's row decides of them (whether it runs pytest-sme2's own runner)."""
    row = device(options.device)
    own = row.builds_own_runner(options)
    return dataclasses.replace(options, own_runner=own, own_runner_untraced=own and row.own_runner_untraced)


def make_runner(options: Sme2Options, context: RunnerContext | None = None) -> Runner:
    """The runner of ``options.device``, made by its row's factory."""
    return device(options.device).make(options, context)


def _builds_given(options: Sme2Options) -> dict[str, Path]:
    return {o: getattr(options, o) for o in RUNNER_BUILDS if getattr(options, o) is not None}


# ------------------------------------------------------------------------------------------------ the built-in rows


def _local_check(options: Sme2Options, spelling: Spelling) -> None:
    given = _builds_given(options)
    if given:
        raise ConfigError(
            f"{'/'.join(spelling.flag(o) for o in given)} are executor_runner builds for {spelling.device('host')} or "
            f"android; the local device uses the executorch Python runtime. Add {spelling.device('host')} (or android)."
        )


def _android_check(options: Sme2Options, spelling: Spelling) -> None:
    if options.runner is None:
        raise ConfigError(
            f"{spelling.device('android')} needs {spelling.flag('runner')} PATH: an Android arm64 executor_runner "
            "built with -DEXECUTORCH_BUILD_DEVTOOLS=ON -DEXECUTORCH_ENABLE_EVENT_TRACER=ON (see docs/android.md)"
        )


def _qemu_check(options: Sme2Options, spelling: Spelling) -> None:
    extra = [spelling.flag(o) for o in _builds_given(options) if o != "runner"]
    if extra:
        raise ConfigError(
            f"{', '.join(extra)}: {spelling.device('qemu')} runs one runner on two emulated CPUs (SME2 on: -cpu max; "
            f"off: -cpu max,sme=off), so it takes no second build; give only {spelling.flag('runner')} (an aarch64 "
            "Linux runner) or nothing (pytest-sme2's own, cross-built from the executorch wheel)")


def _ssh_check(options: Sme2Options, spelling: Spelling) -> None:
    if not options.ssh_host:
        raise ConfigError(f"{spelling.device('ssh')} needs {spelling.flag('ssh_host')} user@host[:port] (or a Host of "
                          "your ssh config): the Arm Linux host or Mac to measure on (docs/lab.md)")


def _qemu_defaults(values: Mapping[str, Any]) -> Mapping[str, Any]:
    # Emulation runs 150-500x slower than native (and SME2 code far slower than that on some hosts: 48 s per
    # tiny_transformer fp32 execution on an Intel Xeon, issue 30), and emulated time is no device's: what the
    # emulated device is for is which kernels ran and whether the outputs agree, one execution per arm.
    return EMULATED_TIMING_DEFAULTS if values.get("emulated_timing") else EMULATED_DEFAULTS


def _builtin(rows: Iterable[Device]) -> None:
    for row in rows:
        register_device(row)


_builtin((
    Device("local", "the executorch Python runtime in this process (E2E and a per-operator ETDump per block)",
           "pytest_sme2.runners.local:from_options", host_lock=True, host_threads=True, on_off=False,
           compares_backends=True, no_on_off="the local executorch runtime has no SME2 build switch",
           check=_local_check),
    Device("host", "a runner on this machine (pytest-sme2's own, built from the executorch wheel, or your build)",
           "pytest_sme2.runners.host:from_options", options=RUNNER_BUILDS, host_lock=True, host_threads=True,
           own_runner=TARGET_HOST, own_runner_untraced=True),
    Device("android", "a phone over adb", "pytest_sme2.runners.android.runner:from_options",
           options=(*RUNNER_BUILDS, *ANDROID_OPTIONS), check=_android_check),
    Device("qemu", "an emulated Armv9 CPU with SME2 on (-cpu max) and off (sme=off) running the aarch64 runner under "
           "qemu-aarch64: real Arm code, emulated time", "pytest_sme2.runners.qemu:from_options",
           options=("runner", *QEMU_OPTIONS), host_lock=True, own_runner=TARGET_LINUX_AARCH64, defaults=_qemu_defaults,
           check=_qemu_check),
    Device("ssh", "an Arm Linux host (or a Mac) over ssh: the runner pushed once per content, run pinned, its trace "
           "pulled", "pytest_sme2.runners.ssh.runner:from_options", options=("runner", *SSH_OPTIONS),
           own_runner=TARGET_LINUX_AARCH64, own_runner_untraced=True, on_off=False,
           no_on_off="the ssh device runs one runner build on the host's own CPU", check=_ssh_check),
))
