"""The lab's device pool: every device a session can reach, what each one is, and which of them serve a test.

A *source* finds the devices of one kind and reads each one's identity; it returns a :class:`Discovery`: the
devices it can use (:class:`PoolEntry`) and those it had to leave out (:class:`LeftOut`, each with its fix). The
sources are named by ``--sme2-pool`` (``adb``, ``ssh``) and registered here, one row each, like the runner registry's
devices: ``adb`` is :mod:`pytest_sme2.runners.android.source` (every ``adb devices`` entry in state ``device``, after
``adb connect`` of ``--sme2-adb-connect``); a source of one's own is one function and one :func:`register_source`.

An entry says which registry device runs it and with which options (``{"serial": "R5CX..."}``): a pytest-xdist
worker that holds it makes its runner from the session's options with those replaced, so an entry is measured by the
same runner as a device given on the command line. Entries are plain data (:meth:`PoolEntry.to_dict`): the controller
discovers the pool once and hands it to the workers.

What a test needs is a :class:`Need` (``sme2``, ``svl>=256``, ``soc=MT6993``, from ``--sme2-needs`` and the
``sme2_device`` marker); :meth:`Need.unmet` says why an entry does not serve it, so a test no device serves is
skipped with the reason of each. Pure functions over plain values: no pytest, no adb here.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pytest_sme2.errors import ConfigError, Sme2Error

if TYPE_CHECKING:
    from pytest_sme2.options import Sme2Options

#: Bumped when the meaning of a field of :class:`PoolEntry` changes (the controller and its workers must agree).
POOL_VERSION = 1

#: Not in a pool entry's name: "-" too, which pytest puts between a test's parameters (a matrix test's id names its
#: device).
_UNSAFE = re.compile(r"[^A-Za-z0-9._]+")


@dataclass(frozen=True)
class PoolEntry:
    """One device of the pool: where it is reached, which runner measures it, and what it can do.

    ``name`` is short, unique in the pool and stable across sessions (the phone's model, not its port: an STF or
    ``adb connect`` address changes between sessions, and a matrix test's id carries the name). ``options`` are the
    :class:`~pytest_sme2.options.Sme2Options` fields that make its runner (``{"serial": ...}``), ``device`` the
    runner registry row. ``sme2`` / ``svl_bits`` / ``rooted`` are None where the device does not say.
    """

    name: str
    source: str
    address: str
    device: str
    options: Mapping[str, Any] = field(default_factory=dict)
    model: str = ""
    soc: str = ""
    #: one ``4x Arm C1-Pro 2.70 GHz`` per cluster, slowest first
    clusters: tuple[str, ...] = ()
    sme2: bool | None = None
    #: the streaming vector length (SME), in bits
    svl_bits: int | None = None
    rooted: bool | None = None
    #: the cpufreq governors of its CPUs (``schedutil``; ``performance/schedutil`` when they differ)
    governor: str = ""
    #: what emulates it ("" for real hardware): its times are emulated time
    emulated: str = ""
    #: its :class:`~pytest_sme2.device.identity.DeviceIdentity` as a dict (what its baselines are keyed on)
    identity: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """``EmuPhone_SME2  adb 127.0.0.1:40123  Mediatek MT6993, 4x ... ; SME2 yes, SVL 512 bit; not rooted; ...``"""
        sme2 = {True: "SME2 yes", False: "SME2 no", None: "SME2 unknown"}[self.sme2]
        svl = f", SVL {self.svl_bits} bit" if self.svl_bits else ""
        rooted = {True: "rooted", False: "not rooted", None: "root unknown"}[self.rooted]
        parts = [", ".join(x for x in (self.model, self.soc) if x) or self.address, " + ".join(self.clusters),
                 f"{sme2}{svl}", rooted, f"governor {self.governor or 'unknown'}"]
        if self.emulated:
            parts.append(f"EMULATED ({self.emulated})")
        return f"{self.name}: {self.source} {self.address}: " + "; ".join(p for p in parts if p)

    def to_dict(self) -> dict[str, Any]:
        return {"version": POOL_VERSION, "name": self.name, "source": self.source, "address": self.address,
                "device": self.device, "options": dict(self.options), "model": self.model, "soc": self.soc,
                "clusters": list(self.clusters), "sme2": self.sme2, "svl_bits": self.svl_bits, "rooted": self.rooted,
                "governor": self.governor, "emulated": self.emulated, "identity": dict(self.identity)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PoolEntry:
        if data.get("version") != POOL_VERSION:
            raise ConfigError(f"a pool entry of version {data.get('version')!r} reached a pytest-sme2 that reads "
                              f"version {POOL_VERSION}: the controller and its workers run different pytest-sme2 "
                              "versions; install one version for both")
        return cls(name=data["name"], source=data["source"], address=data["address"], device=data["device"],
                   options=dict(data["options"]), model=data["model"], soc=data["soc"],
                   clusters=tuple(data["clusters"]), sme2=data["sme2"], svl_bits=data["svl_bits"],
                   rooted=data["rooted"], governor=data["governor"], emulated=data["emulated"],
                   identity=dict(data["identity"]))

    def runner_options(self, options: Sme2Options) -> Sme2Options:
        """``options`` made this entry's: its registry device and the options that reach it (its serial, host)."""
        import dataclasses

        fields = {f.name for f in dataclasses.fields(options)}
        unknown = sorted(set(self.options) - fields)
        if unknown:
            raise ConfigError(f"pool entry {self.name} ({self.source} source) sets {', '.join(unknown)}, which are not "
                              "options of pytest-sme2 (Sme2Options fields); fix that source")
        # A mixed pool's options for its other devices (--sme2-runner-libs for the phones, --sme2-ssh-config for the
        # hosts) are not this device's: its runner is made without them, as a device given alone would be.
        from pytest_sme2.runners import registry

        row = registry.device(self.device)
        defaults = {f.name: f.default for f in dataclasses.fields(options) if f.default is not dataclasses.MISSING}
        foreign = {o for name in registry.names() for o in registry.device(name).options if not row.takes(o)}
        changes: dict[str, Any] = {o: defaults[o] for o in foreign if o in defaults}
        changes.update(device=self.device, **self.options)
        return dataclasses.replace(options, **changes)


@dataclass(frozen=True)
class LeftOut:
    """A device a source found but cannot use (unauthorized, offline, unreachable), and how to fix it."""

    source: str
    address: str
    reason: str

    def describe(self) -> str:
        return f"left out: {self.source} {self.address or '(the source)'}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "address": self.address, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LeftOut:
        return cls(str(data["source"]), str(data["address"]), str(data["reason"]))


@dataclass(frozen=True)
class Discovery:
    """What the sources found: the pool, and the devices left out of it."""

    entries: tuple[PoolEntry, ...] = ()
    left_out: tuple[LeftOut, ...] = ()

    def __add__(self, other: Discovery) -> Discovery:
        return Discovery(self.entries + other.entries, self.left_out + other.left_out)

    def lines(self) -> list[str]:
        """The pool as printed once per session: one line per device, then one per device left out."""
        head = f"sme2 device pool: {len(self.entries)} device(s)"
        if self.left_out:
            head += f", {len(self.left_out)} left out"
        return [head, *(f"  {e.describe()}" for e in self.entries), *(f"  {x.describe()}" for x in self.left_out)]

    def to_dict(self) -> dict[str, Any]:
        return {"entries": [e.to_dict() for e in self.entries], "left_out": [x.to_dict() for x in self.left_out]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Discovery:
        return cls(tuple(PoolEntry.from_dict(e) for e in data["entries"]),
                   tuple(LeftOut.from_dict(x) for x in data["left_out"]))


#: ``discover(options, progress) -> Discovery``: a source's whole job. ``progress`` shows a transient status line.
SourceFunction = Callable[["Sme2Options", Callable[[str], None]], Discovery]
#: ``alive(entry) -> ""`` when the device still answers, else what became of it (asked after a test of it failed:
#: a device that dropped mid-test makes that test invalid and its other tests move to another device).
AliveFunction = Callable[[PoolEntry], str]


@dataclass(frozen=True)
class Source:
    """One ``--sme2-pool`` value: its discover function and its liveness check (``"module:function"`` or callables,
    imported when used, so ``--help`` imports no source)."""

    name: str
    discover: str | SourceFunction
    alive: str | AliveFunction | None = None


_SOURCES: dict[str, Source] = {}


def register_source(name: str, discover: str | SourceFunction, alive: str | AliveFunction | None = None) -> None:
    """Add a device source named ``name`` (a ``--sme2-pool`` value). ``alive`` (optional): without it a device of this
    source that drops mid-test fails that test, and its other tests stay on it."""
    source = Source(name, discover, alive)
    known = _SOURCES.get(name)
    if known is not None and known != source:
        raise ConfigError(f"device source {name!r} is registered twice ({known.discover!r} and {discover!r}); give the "
                          "second another name")
    _SOURCES[name] = source


def source_names() -> tuple[str, ...]:
    return tuple(_SOURCES)


def _source(name: str) -> Source:
    try:
        return _SOURCES[name]
    except KeyError:
        raise ConfigError(f"--sme2-pool {name!r} is not a device source ({', '.join(_SOURCES)}); a source of your own "
                          "is one function and one register_source row (docs/lab.md)") from None


def _function(found: Any, name: str) -> Any:
    if not isinstance(found, str):
        return found
    module, _, function = found.partition(":")
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"device source {name!r}: {found!r} cannot be loaded ({type(exc).__name__}: {exc}); fix its "
                          "register_source row") from None


def _load(name: str) -> SourceFunction:
    loaded: SourceFunction = _function(_source(name).discover, name)
    return loaded


def alive(entry: PoolEntry) -> str | None:
    """"" when ``entry``'s device still answers, what became of it when it does not, None when its source cannot
    tell (it registered no ``alive``)."""
    check = _source(entry.source).alive
    if check is None:
        return None
    answer: str = _function(check, entry.source)(entry)
    return answer


def discover(options: Sme2Options, progress: Callable[[str], None] | None = None) -> Discovery:
    """Every device of the sources in ``options.pool``, named uniquely; a source that fails as a whole (no adb
    server) is left out with its error, and the others go on."""
    found = Discovery()
    for name in options.pool:
        source = _load(name)
        try:
            found += source(options, progress or (lambda _text: None))
        except Sme2Error as exc:
            found += Discovery(left_out=(LeftOut(name, "", str(exc)),))
    return Discovery(unique_names(found.entries), found.left_out)


def entry_name(text: str) -> str:
    """A name usable in a test id and a file name: ``EmuPhone SME2`` -> ``EmuPhone_SME2``."""
    return _UNSAFE.sub("_", text).strip("._") or "device"


def unique_names(entries: Iterable[PoolEntry]) -> tuple[PoolEntry, ...]:
    """The entries, in address order, with names made unique by ``_2``, ``_3`` (two phones of one model)."""
    seen: dict[str, int] = {}
    out = []
    for entry in sorted(entries, key=lambda e: (e.name, e.source, e.address)):
        base = entry_name(entry.name)
        seen[base] = seen.get(base, 0) + 1
        out.append(replace(entry, name=base if seen[base] == 1 else f"{base}_{seen[base]}"))
    return tuple(out)


# ------------------------------------------------------------------------------------------------ needs


_SVL = re.compile(r"^svl\s*>=\s*(\d+)$")


@dataclass(frozen=True)
class Need:
    """What a test needs of its device: SME2 on (or off), a minimum streaming vector length, a SoC, one device.

    Spelt as a comma list (``--sme2-needs``, the :meth:`key` of a test): ``sme2``, ``no-sme2``, ``svl>=256``,
    ``soc=MT6993`` (a substring of the SoC, case-insensitive), ``device=NAME`` (one pool entry: a matrix test's).
    """

    sme2: bool | None = None
    min_svl: int | None = None
    soc: str | None = None
    device: str | None = None

    @classmethod
    def parse(cls, text: str, where: str = "--sme2-needs") -> Need:
        need = cls()
        for raw in (text or "").split(","):
            term = raw.strip()
            if not term or term == "any":
                continue
            low = term.lower()
            svl = _SVL.match(low)
            if low in ("sme2", "sme2=on", "sme2=yes"):
                need = replace(need, sme2=True)
            elif low in ("no-sme2", "sme2=off", "sme2=no"):
                need = replace(need, sme2=False)
            elif svl:
                need = replace(need, min_svl=int(svl.group(1)))
            elif low.startswith("soc="):
                need = replace(need, soc=term[4:].strip())
            elif low.startswith("device="):
                need = replace(need, device=term[7:].strip())
            else:
                raise ConfigError(f"{where}: {term!r} is not a device need; allowed, comma separated: sme2, no-sme2, "
                                  "svl>=BITS, soc=NAME, device=NAME (e.g. 'sme2,svl>=512')")
        return need

    def merged(self, other: Need) -> Need:
        """This need with ``other``'s terms added (a marker's over the session's)."""
        return Need(sme2=self.sme2 if other.sme2 is None else other.sme2,
                    min_svl=self.min_svl if other.min_svl is None else other.min_svl,
                    soc=self.soc if other.soc is None else other.soc,
                    device=self.device if other.device is None else other.device)

    def key(self) -> str:
        """The canonical comma list (``any`` for none): equal needs, equal keys."""
        terms = []
        if self.sme2 is not None:
            terms.append("sme2" if self.sme2 else "no-sme2")
        if self.min_svl is not None:
            terms.append(f"svl>={self.min_svl}")
        if self.soc:
            terms.append(f"soc={self.soc}")
        if self.device:
            terms.append(f"device={self.device}")
        return ",".join(terms) or "any"

    def unmet(self, entry: PoolEntry) -> str:
        """Why ``entry`` does not serve this need ("" when it does); an unknown fact never serves."""
        if self.device is not None and entry.name != self.device:
            return f"it is not {self.device}"
        if self.sme2 is not None and entry.sme2 is not self.sme2:
            have = {True: "has SME2", False: "has no SME2", None: "does not say whether it has SME2"}[entry.sme2]
            return f"it {have}"
        if self.min_svl is not None and (entry.svl_bits or 0) < self.min_svl:
            have = f"its SVL is {entry.svl_bits} bit" if entry.svl_bits else "its SVL is unknown"
            return f"{have}, below {self.min_svl}"
        if self.soc and self.soc.lower() not in entry.soc.lower():
            return f"its SoC is {entry.soc or 'unknown'}, not {self.soc}"
        return ""


def serving(need: Need, entries: Sequence[PoolEntry]) -> tuple[PoolEntry, ...]:
    """The entries that serve ``need``, in pool order."""
    return tuple(e for e in entries if not need.unmet(e))


def why_none(need: Need, entries: Sequence[PoolEntry], left_out: Sequence[LeftOut] = ()) -> str:
    """The skip reason of a test no device serves: what it needs, and why each device does not serve it."""
    if not entries:
        reason = f"no device of the pool can run it (needs {need.key()}): the pool is empty"
    else:
        each = "; ".join(f"{e.name}: {need.unmet(e)}" for e in entries)
        reason = f"no device of the pool can run it (needs {need.key()}): {each}"
    if left_out:
        reason += f" ({len(left_out)} device(s) left out of the pool: see the pool's lines at the session's start)"
    return reason


def parse_list(text: str | None) -> tuple[str, ...]:
    """``"adb, ssh"`` -> ``("adb", "ssh")``; empty or None -> ``()`` (``--sme2-pool``, ``--sme2-adb-connect``)."""
    return tuple(s.strip() for s in (text or "").replace("\n", ",").split(",") if s.strip())


register_source("adb", "pytest_sme2.runners.android.source:discover", "pytest_sme2.runners.android.source:alive")
register_source("ssh", "pytest_sme2.runners.ssh.source:discover", "pytest_sme2.runners.ssh.source:alive")
