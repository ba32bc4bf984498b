"""Baselines: one JSON file per test id and device fingerprint, written atomically.

A baseline keeps the raw measured samples (so the gate can re-run its statistics), the category
totals and per-run category values, the fingerprint that decides comparability, and a schema
version. Files are indented and key-sorted: human-readable, diff-friendly, meant to be committed.

File names: ``<safe test id>--<hash of the exact test id>@<fingerprint id>.json``. The safe part
keeps only ``[A-Za-z0-9._-]`` (no path separators, no ``..``), the hash keeps two ids that sanitize
to the same text apart, and the fingerprint id keeps devices apart.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .atomic import write_atomic
from .errors import BaselineError
from .gate import Samples

SCHEMA_VERSION = 1
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def fingerprint_id(fingerprint: Mapping[str, Any]) -> str:
    """A short stable id of a fingerprint (sha256 of its canonical JSON)."""
    canonical = json.dumps(dict(fingerprint), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def safe_name(test_id: str) -> str:
    """A file-name-safe, collision-free rendering of a pytest node id."""
    digest = hashlib.sha256(test_id.encode()).hexdigest()[:10]
    readable = _UNSAFE.sub("_", test_id).strip("._-")[:80] or "test"
    readable = readable.replace("..", "_")
    return f"{readable}--{digest}"


@dataclass(frozen=True)
class Baseline:
    """A stored reference measurement for one test on one device fingerprint."""

    test_id: str
    fingerprint: Mapping[str, Any]
    samples_ms: tuple[float, ...]
    category_totals_ms: Mapping[str, float] = field(default_factory=dict)
    category_per_run_ms: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    per_operator: bool = False
    stats: Mapping[str, Any] = field(default_factory=dict)
    top_operators: tuple[Mapping[str, Any], ...] = ()
    created: str = ""
    tool_version: str = ""
    #: measured runs per block (runner process), in order; () for baselines written before blocks were kept
    block_sizes: tuple[int, ...] = ()

    @property
    def fingerprint_id(self) -> str:
        return fingerprint_id(self.fingerprint)

    def samples(self) -> Samples:
        return Samples(self.samples_ms, self.category_per_run_ms if self.per_operator else {},
                       block_sizes=self.block_sizes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "test_id": self.test_id,
            "created": self.created,
            "tool_version": self.tool_version,
            "fingerprint_id": self.fingerprint_id,
            "fingerprint": dict(self.fingerprint),
            "per_operator": self.per_operator,
            "stats": dict(self.stats),
            "samples_ms": [round(x, 6) for x in self.samples_ms],
            "block_sizes": list(self.block_sizes),
            "category_totals_ms": {k: round(v, 6) for k, v in self.category_totals_ms.items()},
            "category_per_run_ms": {k: [round(x, 6) for x in v] for k, v in self.category_per_run_ms.items()},
            "top_operators": [dict(o) for o in self.top_operators],
        }

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<baseline>") -> Baseline:
        if not isinstance(data, Mapping):
            raise BaselineError(f"baseline {source} is not a JSON object; delete it and re-create it "
                                "with --sme2-update-baseline")
        version = data.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise BaselineError(f"baseline {source} has no integer schema_version: it is not a pytest-sme2 "
                                "baseline. Delete it and re-create it with --sme2-update-baseline")
        if version < 1:
            raise BaselineError(f"baseline {source} has schema_version {version}; versions start at 1, so it "
                                "is not a pytest-sme2 baseline. Delete it and re-create it with "
                                "--sme2-update-baseline")
        if version > SCHEMA_VERSION:
            raise BaselineError(
                f"baseline {source} has schema_version {version}, newer than this pytest-sme2 reads "
                f"({SCHEMA_VERSION}); upgrade pytest-sme2 (pip install -U pytest-sme2) — the file was left untouched"
            )
        _check_shape(data, source)
        try:
            return cls(
                test_id=str(data["test_id"]),
                fingerprint=dict(data["fingerprint"]),
                samples_ms=tuple(float(x) for x in data["samples_ms"]),
                category_totals_ms={str(k): float(v) for k, v in data.get("category_totals_ms", {}).items()},
                category_per_run_ms={
                    str(k): tuple(float(x) for x in v) for k, v in data.get("category_per_run_ms", {}).items()
                },
                per_operator=bool(data.get("per_operator", False)),
                stats=dict(data.get("stats", {})),
                top_operators=tuple(dict(o) for o in data.get("top_operators", [])),
                created=str(data.get("created", "")),
                tool_version=str(data.get("tool_version", "")),
                block_sizes=tuple(data.get("block_sizes", ())),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BaselineError(
                f"baseline {source} does not match the pytest-sme2 baseline schema ({type(exc).__name__}: {exc}); "
                "delete it and re-create it with --sme2-update-baseline"
            ) from None


def _check_shape(data: Mapping[str, Any], source: str) -> None:
    """The fields the gate computes with: present, of the right kind, and finite non-negative times.

    Without this an empty, NaN or negative ``samples_ms`` parsed fine and the gate reported
    "invalid", "inconclusive (+nan%)" or even "pass" against a meaningless baseline.
    """
    fix = "delete it and re-create it with --sme2-update-baseline"
    for key in ("test_id", "fingerprint", "samples_ms"):
        if key not in data:
            raise BaselineError(f"baseline {source} has no {key!r} field, so it does not match the pytest-sme2 "
                                f"baseline schema; {fix}")
    if not isinstance(data["fingerprint"], Mapping):
        raise BaselineError(f"baseline {source}: 'fingerprint' must be an object, found "
                            f"{type(data['fingerprint']).__name__}; {fix}")
    checks = [("samples_ms", data["samples_ms"])]
    per_run = data.get("category_per_run_ms", {})
    if isinstance(per_run, Mapping):
        checks += [(f"category_per_run_ms[{k!r}]", v) for k, v in per_run.items()]
    for name, values in checks:
        if not isinstance(values, list) or not values:
            raise BaselineError(f"baseline {source}: {name!r} must be a non-empty list of times in ms, found "
                                f"{_shown(values)}; {fix}")
        bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float))
               or not math.isfinite(v) or v < 0]
        if bad:
            raise BaselineError(f"baseline {source}: {name!r} holds {_shown(bad[0])}, not a finite time >= 0 ms; "
                                f"{fix}")
    blocks = data.get("block_sizes", [])
    if not isinstance(blocks, list) or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in blocks) \
            or (blocks and sum(blocks) != len(data["samples_ms"])):
        raise BaselineError(f"baseline {source}: 'block_sizes' must be positive whole numbers adding up to the "
                            f"{len(data['samples_ms'])} samples, found {_shown(blocks)}; {fix}")


def _shown(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


@dataclass(frozen=True)
class Lookup:
    """The result of looking a baseline up: the match, or the baselines for other fingerprints."""

    path: Path
    baseline: Baseline | None
    others: tuple[tuple[Path, Baseline], ...] = ()


class BaselineStore:
    """Baselines under one directory (``--sme2-baseline-dir``)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path_for(self, test_id: str, fingerprint: Mapping[str, Any]) -> Path:
        return self.root / f"{safe_name(test_id)}@{fingerprint_id(fingerprint)}.json"

    def read(self, path: Path) -> Baseline:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise BaselineError(f"cannot read baseline {path}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise BaselineError(
                f"baseline {path} is not UTF-8 text (byte {exc.start}): it is not a pytest-sme2 baseline. Restore "
                "it from version control or delete it and re-create it with --sme2-update-baseline"
            ) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BaselineError(
                f"baseline {path} is not valid JSON (line {exc.lineno}: {exc.msg}); restore it from version "
                "control or delete it and re-create it with --sme2-update-baseline"
            ) from None
        return Baseline.from_dict(data, source=str(path))

    def lookup(self, test_id: str, fingerprint: Mapping[str, Any]) -> Lookup:
        path = self.path_for(test_id, fingerprint)
        if path.is_file():
            return Lookup(path, self.read(path))
        others = []
        if self.root.is_dir():
            for other in sorted(self.root.glob(f"{safe_name(test_id)}@*.json")):
                try:
                    others.append((other, self.read(other)))
                except BaselineError:
                    continue
        return Lookup(path, None, tuple(others))

    def save(self, baseline: Baseline) -> Path:
        path = self.path_for(baseline.test_id, baseline.fingerprint)
        text = json.dumps(baseline.to_dict(), indent=1, sort_keys=True) + "\n"
        write_atomic(path, text, what="baseline")
        return path


def fingerprint_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Human-readable differences between two fingerprints: ``key: A != B``."""
    keys = sorted(set(a) | set(b))
    return [f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]
