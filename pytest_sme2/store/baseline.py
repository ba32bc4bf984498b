"""Baselines: one JSON file per test and device identity, written atomically.

A baseline belongs to a test on a device: its file is keyed on the test id and the *identity* (the
device identity — CPU vendor/family/model/stepping or Arm clusters, ISA features, cores — plus the
test's threads, dtype, backend and runner variant). It records what it measured — the *artifact*
(:class:`~pytest_sme2.store.artifacts.Artifact`: the ``.pte``, its inputs, the runtime or runner build) — and
the raw measured samples in blocks (so the gate can re-run its statistics), the per-run category times
of the traced runs, what rebuilding its program needs (the commit, the model's registry entry and export
options: :mod:`pytest_sme2.measure.rebuild`), and a schema version. Files are indented and key-sorted: human-readable,
diff-friendly, meant to be committed.

File names: ``<safe test id>--<hash of the exact test id>@<identity id>.json``. The safe part keeps only
``[A-Za-z0-9._-]``, the hash keeps two ids that sanitize to the same text apart, and the identity id
keeps devices apart. Schema 1 files (written before the device identity existed) are recognised and
reported as such, never compared.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_sme2.device.identity import short_differences, short_name
from pytest_sme2.errors import BaselineError, check_schema_version
from pytest_sme2.evidence.categories import OTHER
from pytest_sme2.evidence.instructions import LABEL, InstructionCounts
from pytest_sme2.evidence.memory import Memory
from pytest_sme2.gate.stats import times_problem
from pytest_sme2.gate.verdict import Samples
from pytest_sme2.store.artifacts import Artifact
from pytest_sme2.store.files import read_json, write_atomic

SCHEMA_VERSION = 2
#: Schema versions written before baselines carried the device identity and the artifact.
LEGACY_VERSIONS = (1,)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_FIX = "delete it and re-create it with --sme2-update-baseline"
#: What a test whose device had no baseline says: its measurement became the baseline, and nothing was judged.
NO_BASELINE_RECORDED = "no baseline for this device: recorded, not gated"


def identity_id(identity: Mapping[str, Any]) -> str:
    """A short stable id of an identity (sha256 of its canonical JSON)."""
    canonical = json.dumps(dict(identity), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


#: kept for callers of the first release
fingerprint_id = identity_id

#: What a count baseline is keyed on, of a measured identity: the emulated CPU and what runs on it, not the host.
COUNT_KEYS = ("arch", "isa", "runner", "dtype", "backend", "threads", "variant")
#: The key that keeps a count baseline apart from every baseline of time on the same emulated CPU.
COUNTED = "counted"


def counts_identity(identity: Mapping[str, Any]) -> dict[str, Any]:
    """What a count baseline is keyed on: ``identity`` without the host.

    Instructions executed under emulation depend on the program, the runner build, QEMU and the emulated CPU, not on
    the host that emulates it (its CPU, its core count), so one count baseline serves every host: the emulator is kept
    without its ``; on <host CPU>`` part, the emulated ``/proc/cpuinfo``'s CPU count (QEMU shows the host's) is
    dropped. A host where the counts differ is then found by the gate, not hidden behind another key.
    """
    keyed = {k: identity[k] for k in COUNT_KEYS if k in identity}
    emulator = str(identity.get("emulator", "")).split("; on ", 1)[0]
    keyed.update(emulator=emulator, counted=LABEL, summary=f"{LABEL}: {emulator or identity.get('runner', '?')}")
    return keyed


def safe_name(test_id: str) -> str:
    """A file-name-safe, collision-free rendering of a pytest node id."""
    digest = hashlib.sha256(test_id.encode()).hexdigest()[:10]
    readable = _UNSAFE.sub("_", test_id).strip("._-")[:80] or "test"
    readable = readable.replace("..", "_")
    return f"{readable}--{digest}"


@dataclass(frozen=True)
class Recipe:
    """What rebuilding a baseline's program needs: the registry entry, the export options, where the code was."""

    #: the registered model name (``register_model``)
    model: str
    dtype: str
    backend: str
    #: the file that registered the model, relative to the git checkout's root (absolute outside one)
    models_file: str
    #: the checkout's HEAD when the baseline was recorded ("" outside git)
    commit: str = ""
    #: the models file had uncommitted changes then: ``commit`` does not hold the code that was measured
    dirty: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "dtype": self.dtype, "backend": self.backend, "models_file": self.models_file,
                "commit": self.commit, "dirty": self.dirty}

    @classmethod
    def maybe(cls, data: Any) -> Recipe | None:
        """The recipe stored in a baseline, or None (absent in baselines written before recipes existed)."""
        if not isinstance(data, Mapping) or not data.get("model"):
            return None
        return cls(str(data["model"]), str(data.get("dtype", "fp32")), str(data.get("backend", "xnnpack")),
                   str(data.get("models_file", "")), str(data.get("commit", "")), bool(data.get("dirty", False)))


@dataclass(frozen=True)
class Baseline:
    """A stored reference measurement for one test on one device identity."""

    test_id: str
    identity: Mapping[str, Any]
    samples_ms: tuple[float, ...]
    block_sizes: tuple[int, ...]
    artifact: Artifact | None = None
    category_per_run_ms: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    category_block_sizes: tuple[int, ...] = ()
    category_totals_ms: Mapping[str, float] = field(default_factory=dict)
    per_operator: bool = False
    #: where the E2E samples came from (untraced runs, traced runs, a timing-only build)
    latency_source: str = ""
    stats: Mapping[str, Any] = field(default_factory=dict)
    top_operators: tuple[Mapping[str, Any], ...] = ()
    created: str = ""
    tool_version: str = ""
    #: delegated operator events per run by category (the gate's tick floor; absent in older baselines)
    category_operators: Mapping[str, float] = field(default_factory=dict)
    #: planned memory, program size, load time and peak per block (absent in baselines written before pytest-sme2
    #: measured memory: then memory is not gated against this baseline, and the verdict says so)
    memory: Memory | None = None
    #: what rebuilding its program needs (model, dtype, backend, models file, commit; see ``rebuild``): absent in
    #: baselines written before it was recorded, and for models only the test's own process can build
    rebuild: Recipe | None = None
    #: instructions executed under emulation per execution, of the measured arm and of an on/off pair's SME2-off arm
    #: (a count baseline, keyed on :func:`counts_identity`; :mod:`pytest_sme2.gate.instructions`)
    instructions: InstructionCounts | None = None
    instructions_off: InstructionCounts | None = None

    @property
    def identity_id(self) -> str:
        return identity_id(self.identity)

    def samples(self) -> Samples:
        cats = self.category_per_run_ms if self.per_operator else {}
        return Samples(self.samples_ms, self.block_sizes, cats, self.category_block_sizes if cats else (),
                       label=f"baseline recorded {self.created or '(unknown date)'}",
                       category_operators=dict(self.category_operators) if cats else {})

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "test_id": self.test_id,
            "created": self.created,
            "tool_version": self.tool_version,
            "identity_id": self.identity_id,
            "identity": dict(self.identity),
            "artifact": self.artifact.to_dict() if self.artifact else None,
            "per_operator": self.per_operator,
            "latency_source": self.latency_source,
            "stats": dict(self.stats),
            "samples_ms": [round(x, 6) for x in self.samples_ms],
            "block_sizes": list(self.block_sizes),
            "category_totals_ms": {k: round(v, 6) for k, v in self.category_totals_ms.items()},
            "category_per_run_ms": {k: [round(x, 6) for x in v] for k, v in self.category_per_run_ms.items()},
            "category_block_sizes": list(self.category_block_sizes),
            "top_operators": [dict(o) for o in self.top_operators],
            **({"category_operators": dict(self.category_operators)} if self.category_operators else {}),
            **({"memory": self.memory.to_dict()} if self.memory else {}),
            **({"rebuild": self.rebuild.to_dict()} if self.rebuild else {}),
            **({"instructions": self.instructions.to_dict()} if self.instructions else {}),
            **({"instructions_off": self.instructions_off.to_dict()} if self.instructions_off else {}),
        }

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<baseline>") -> Baseline:
        if not isinstance(data, Mapping):
            raise BaselineError(f"baseline {source} is not a JSON object; {_FIX}")
        version = check_schema_version(data, reads=SCHEMA_VERSION, what="baseline", source=source,
                                       error=BaselineError, fix=_FIX, then=" — the file was left untouched")
        if version in LEGACY_VERSIONS:
            raise LegacyBaselineError(source)
        _check_shape(data, source)
        try:
            art = data.get("artifact")
            return cls(
                test_id=str(data["test_id"]),
                identity=dict(data["identity"]),
                samples_ms=tuple(float(x) for x in data["samples_ms"]),
                block_sizes=tuple(int(n) for n in data["block_sizes"]),
                artifact=Artifact.from_dict(art) if art else None,
                category_per_run_ms={
                    str(k): tuple(float(x) for x in v) for k, v in data.get("category_per_run_ms", {}).items()
                },
                category_block_sizes=tuple(int(n) for n in data.get("category_block_sizes", ())),
                category_totals_ms={str(k): float(v) for k, v in data.get("category_totals_ms", {}).items()},
                per_operator=bool(data.get("per_operator", False)),
                latency_source=str(data.get("latency_source", "")),
                stats=dict(data.get("stats", {})),
                top_operators=tuple(dict(o) for o in data.get("top_operators", [])),
                created=str(data.get("created", "")),
                tool_version=str(data.get("tool_version", "")),
                category_operators={str(k): float(v) for k, v in data.get("category_operators", {}).items()},
                memory=Memory.maybe(data.get("memory")),
                rebuild=Recipe.maybe(data.get("rebuild")),
                instructions=_counts(data.get("instructions")),
                instructions_off=_counts(data.get("instructions_off")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BaselineError(
                f"baseline {source} does not match the pytest-sme2 baseline schema ({type(exc).__name__}: {exc}); "
                f"{_FIX}"
            ) from None


def _counts(data: Any) -> InstructionCounts | None:
    return InstructionCounts.from_dict(data) if isinstance(data, Mapping) else None


class LegacyBaselineError(BaselineError):
    """A baseline written by the first release: no device identity, no artifact — never compared."""

    def __init__(self, source: str) -> None:
        self.source = source
        super().__init__(
            f"baseline {source} was written by an earlier pytest-sme2 (schema 1) without the device identity "
            "(CPU family/model/stepping, ISA features) and without the artifact it measured, so it cannot be "
            "matched to a device and is not compared; delete it (the next run records a new one in its place, or "
            "--sme2-update-baseline writes it now)"
        )


def _check_shape(data: Mapping[str, Any], source: str) -> None:
    """The fields the gate computes with: present, of the right kind, and finite non-negative times.

    Without this an empty, NaN or negative ``samples_ms`` parsed fine and the gate reported
    "invalid", "inconclusive (+nan%)" or even "pass" against a meaningless baseline.
    """
    for key in ("test_id", "identity", "samples_ms", "block_sizes"):
        if key not in data:
            raise BaselineError(f"baseline {source} has no {key!r} field, so it does not match the pytest-sme2 "
                                f"baseline schema; {_FIX}")
    if not isinstance(data["identity"], Mapping):
        raise BaselineError(f"baseline {source}: 'identity' must be an object, found "
                            f"{type(data['identity']).__name__}; {_FIX}")
    checks = [("samples_ms", data["samples_ms"], "block_sizes")]
    per_run = data.get("category_per_run_ms", {})
    if isinstance(per_run, Mapping):
        checks += [(f"category_per_run_ms[{k!r}]", v, "category_block_sizes") for k, v in per_run.items()]
    for name, values, blocks_key in checks:
        problem = times_problem(values, data.get(blocks_key, []), name, blocks_key,
                                blocks_required=blocks_key == "block_sizes")
        if problem:
            raise BaselineError(f"baseline {source}: {problem}; {_FIX}")


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


@dataclass(frozen=True)
class Lookup:
    """The result of looking a baseline up: the match, or what else exists for the test."""

    path: Path
    baseline: Baseline | None
    #: baselines of the same test for other identities (other devices, threads, ...)
    others: tuple[tuple[Path, Baseline], ...] = ()
    #: schema-1 files of the same test (no identity: never compared)
    legacy: tuple[Path, ...] = ()


class BaselineStore:
    """Baselines under one directory (``--sme2-baseline-dir``)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path_for(self, test_id: str, identity: Mapping[str, Any]) -> Path:
        return self.root / f"{safe_name(test_id)}@{identity_id(identity)}.json"

    def read(self, path: Path) -> Baseline:
        data = read_json(path, what="baseline", error=BaselineError, fix="restore it from version control or delete "
                         "it and re-create it with --sme2-update-baseline")
        return Baseline.from_dict(data, source=str(path))

    def lookup(self, test_id: str, identity: Mapping[str, Any]) -> Lookup:
        path = self.path_for(test_id, identity)
        if path.is_file():
            return Lookup(path, self.read(path))
        others, legacy = [], []
        if self.root.is_dir():
            for other in sorted(self.root.glob(f"{safe_name(test_id)}@*.json")):
                try:
                    others.append((other, self.read(other)))
                except LegacyBaselineError:
                    legacy.append(other)
                except BaselineError:
                    continue
        return Lookup(path, None, tuple(others), tuple(legacy))

    def save(self, baseline: Baseline) -> Path:
        """Write ``baseline`` atomically — only if it reads back as the same baseline.

        A baseline the next run would refuse (a negative category time, a block list that does not add
        up) is refused here, with the reason, instead of being written.
        """
        path = self.path_for(baseline.test_id, baseline.identity)
        _check_categories_fit(baseline)
        data = baseline.to_dict()
        try:
            Baseline.from_dict(json.loads(json.dumps(data)), source=str(path))
        except BaselineError as exc:
            raise BaselineError(f"not writing the baseline for {baseline.test_id}: it would not read back ({exc})") \
                from None
        write_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n", what="baseline")
        return path


def _check_categories_fit(baseline: Baseline) -> None:
    """Refuse named categories that add up to more than the end-to-end time (a negative ``Other``).

    ``Other`` is E2E minus the named categories, so a negative one means operator time was counted
    beyond the execution that holds it: a trace whose events the analysis could not place.
    """
    other = [x for x in baseline.category_per_run_ms.get(OTHER, ()) if x < 0]
    total = baseline.category_totals_ms.get(OTHER, 0.0)
    if not other and total >= 0:
        return
    worst = min([*other, total])
    raise BaselineError(
        f"not writing the baseline for {baseline.test_id}: its named categories add up to more than the "
        f"end-to-end time ({OTHER} {worst:.4g} ms{f' in {len(other)} run(s)' if other else ' on average'}), "
        "so some operator time was counted twice or lies outside Method::execute. Check the trace's operator "
        "events (pytest-sme2 analyze on the run's .etdump) and record the baseline again"
    )


def identity_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Human-readable differences between two identities: ``key: A != B``."""
    keys = sorted(set(a) | set(b))
    return [f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]


#: kept for callers of the first release
fingerprint_diff = identity_diff


@dataclass(frozen=True)
class OtherBaseline:
    """A baseline of the same test for another device or configuration: named, never compared."""

    file: str
    #: the other device in a few words (:func:`~pytest_sme2.device.identity.short_name`)
    device: str
    #: what differs, in a few words (``model 1 != 17; isa: 10 features differ``)
    differs: str
    #: every difference in full (``key: A != B``, reference != this measurement)
    differences: tuple[str, ...]

    def describe(self) -> str:
        return f"{self.device} ({self.differs or 'same device'})"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "device": self.device, "differs": self.differs,
                "differences": list(self.differences)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OtherBaseline:
        return cls(str(d["file"]), str(d["device"]), str(d.get("differs", "")),
                   tuple(str(x) for x in d.get("differences", ())))


def other_baselines(lookup: Lookup, identity: Mapping[str, Any]) -> tuple[OtherBaseline, ...]:
    """The baselines ``lookup`` found for other identities, each with what differs from ``identity``."""
    return tuple(OtherBaseline(path.name, short_name(other.identity), short_differences(other.identity, identity),
                               tuple(identity_diff(other.identity, identity)) or ("identity id",))
                 for path, other in lookup.others)
