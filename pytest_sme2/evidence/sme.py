"""Trace operator names -> SME evidence: which operators took XNNPACK's SME (packed-LHS) path, which did not.

XNNPACK names an operator by its data types, and the SME/KleidiAI GEMMs have data types of their own:
with SME2 on, the same ``.pte`` runs ``Convolution (NHWC, PF32) IGEMM`` where a CPU without SME runs
``Convolution (NHWC, F32) IGEMM``. So a trace proves the SME path ran without a logging build: that is
the evidence here. Which names prove what is data, ``data/sme_operator_rules.json``, each rule with the
XNNPACK source it was checked against. A packed name proves SME *or* SME2 kernels (XNNPACK picks SME2
first when the CPU reports both); the device's features say which.

Operators fall in four groups, in first-seen order: ``sme`` (took the packed path), ``not_sme`` (a
GEMM/IGEMM micro-kernel off the SME path: what SME could have run and did not), ``undetermined`` (QP8
GEMMs: one name for SME2 and NEON kernels) and ``other`` (depthwise, elementwise, data movement and
portable ``native_call_*`` operators: no GEMM to move to SME).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_sme2.errors import ConfigError, check_schema_version
from pytest_sme2.evidence.categories import op_type_of

SCHEMA_VERSION = 1
SME = "sme"
NOT_SME = "not_sme"
UNDETERMINED = "undetermined"
OTHER = "other"
EVIDENCE_KINDS = (SME, NOT_SME, UNDETERMINED, OTHER)
#: The rules file shipped in the package.
RULES_FILE = "sme_operator_rules.json"
_PORTABLE = "native_call_"
# "<operator> (<data types>)[ <micro-kernel type>]"; names without a tuple (native_call_*) have only an operator
_NAME = re.compile(r"^(?P<operator>[^(]*?)\s*\((?P<dtypes>[^)]*)\)\s*(?P<microkernel>.*)$")


@dataclass(frozen=True)
class OperatorRule:
    """One rule: an operator type matching every given regex has this ``evidence`` (``""`` = any)."""

    id: str
    evidence: str
    meaning: str
    source: str
    operator: str = ""
    dtypes: str = ""
    microkernel: str = ""

    def matches(self, operator: str, dtypes: str, microkernel: str) -> bool:
        return all(not pattern or re.search(pattern, text) is not None
                   for pattern, text in ((self.operator, operator), (self.dtypes, dtypes),
                                         (self.microkernel, microkernel)))


@dataclass(frozen=True)
class OperatorRules:
    """The ordered rules (first match wins; no match -> ``other``) and what they were checked against."""

    rules: tuple[OperatorRule, ...]
    checked_against: str = ""
    source: str = RULES_FILE

    def rule_for(self, op_type: str) -> OperatorRule | None:
        """The first rule matching ``op_type`` (``#k`` suffix allowed), None when none does."""
        name = op_type_of(op_type)
        m = _NAME.match(name)
        operator, dtypes, microkernel = (m["operator"], m["dtypes"], m["microkernel"]) if m else (name, "", "")
        return next((r for r in self.rules if r.matches(operator, dtypes, microkernel)), None)

    def evidence_of(self, op_type: str) -> str:
        rule = self.rule_for(op_type)
        return rule.evidence if rule else OTHER

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str) -> OperatorRules:
        check_schema_version(data, reads=SCHEMA_VERSION, what="SME operator rules", source=source,
                             fix="reinstall pytest-sme2 or fix the file")
        rules = []
        for i, item in enumerate(data.get("rules", ())):
            try:
                rule = OperatorRule(id=str(item["id"]), evidence=str(item["evidence"]), meaning=str(item["meaning"]),
                                    source=str(item["source"]), operator=str(item.get("operator", "")),
                                    dtypes=str(item.get("dtypes", "")), microkernel=str(item.get("microkernel", "")))
            except (KeyError, TypeError) as exc:
                raise ConfigError(f"SME operator rules {source}: rule #{i} lacks {exc}; every rule needs id, "
                                  "evidence, meaning and source") from None
            if rule.evidence not in EVIDENCE_KINDS:
                raise ConfigError(f"SME operator rules {source}: rule {rule.id!r} has evidence {rule.evidence!r}; "
                                  f"allowed: {', '.join(EVIDENCE_KINDS)}")
            for field in (rule.operator, rule.dtypes, rule.microkernel):
                try:
                    re.compile(field)
                except re.error as exc:
                    raise ConfigError(f"SME operator rules {source}: rule {rule.id!r} has a bad regex "
                                      f"{field!r} ({exc})") from None
            rules.append(rule)
        return cls(tuple(rules), str(data.get("checked_against", "")), source)

    @classmethod
    def load(cls, path: str | Path) -> OperatorRules:
        p = Path(path)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"SME operator rules {p} cannot be read ({exc}); pass a JSON file like "
                              f"pytest_sme2/data/{RULES_FILE}") from None
        return cls.from_dict(data, source=str(p))


@lru_cache(maxsize=1)
def default_rules() -> OperatorRules:
    """The rules shipped with pytest-sme2 (``pytest_sme2/data/sme_operator_rules.json``)."""
    text = resources.files("pytest_sme2").joinpath("data", RULES_FILE).read_text(encoding="utf-8")
    return OperatorRules.from_dict(json.loads(text), source=f"pytest_sme2/data/{RULES_FILE}")


@dataclass(frozen=True)
class TraceEvidence:
    """What one trace's operator names say about SME: each operator type in one group, in first-seen order."""

    sme: tuple[str, ...] = ()
    not_sme: tuple[str, ...] = ()
    undetermined: tuple[str, ...] = ()
    other: tuple[str, ...] = ()
    source: str = ""

    @property
    def has_sme(self) -> bool:
        """True when at least one operator took the SME packed-LHS path."""
        return bool(self.sme)

    def kind_of(self, op_type: str) -> str | None:
        """The group ``op_type`` (`` #k`` suffix allowed) is in: ``sme``, ``not_sme``, ...; None if not in the trace."""
        name = op_type_of(op_type)
        return next((kind for kind in EVIDENCE_KINDS if name in getattr(self, kind)), None)

    @property
    def gemm_like(self) -> tuple[str, ...]:
        """Every operator with a GEMM micro-kernel: on SME, off it, or not telling."""
        return self.sme + self.not_sme + self.undetermined

    @property
    def portable(self) -> tuple[str, ...]:
        """The operators ExecuTorch's portable (non-delegated) kernels ran."""
        return tuple(o for o in self.other if o.startswith(_PORTABLE))

    @property
    def left_off_sme(self) -> tuple[str, ...]:
        """What is still left on NEON/portable: GEMMs off the SME path first, then the portable operators."""
        return self.not_sme + self.portable

    def summary(self) -> str:
        """One line: ``2 of 3 GEMM-like operators on the SME path (e.g. ...); not: ...``."""
        n = len(self.gemm_like)
        if not n:
            return "no GEMM-like operator in the trace"
        parts = [f"{len(self.sme)} of {n} GEMM-like operator{'s' if n != 1 else ''} on the SME path"
                 + (f" (e.g. `{self.sme[0]}`)" if self.sme else "")]
        if self.not_sme:
            parts.append(f"off it: {', '.join(f'`{o}`' for o in self.not_sme[:3])}"
                         + (f" and {len(self.not_sme) - 3} more" if len(self.not_sme) > 3 else ""))
        if self.undetermined:
            parts.append(f"{len(self.undetermined)} QP8 GEMM{'s' if len(self.undetermined) != 1 else ''} the name "
                         "does not tell")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "source": self.source, "sme": list(self.sme),
                "not_sme": list(self.not_sme), "undetermined": list(self.undetermined), "other": list(self.other)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TraceEvidence:
        check_schema_version(data, reads=SCHEMA_VERSION, what="trace SME evidence", missing=SCHEMA_VERSION)
        return cls(**{k: tuple(str(o) for o in data.get(k, ())) for k in EVIDENCE_KINDS},
                   source=str(data.get("source", "")))


def trace_evidence(op_types: Iterable[str], *, rules: OperatorRules | None = None, source: str = "") -> TraceEvidence:
    """Sort a trace's operator types (``op_type`` strings; a `` #k`` suffix is stripped) by SME evidence.

    Each distinct type is listed once, in the order first seen.
    """
    r = rules or default_rules()
    groups: dict[str, list[str]] = {k: [] for k in EVIDENCE_KINDS}
    for name in dict.fromkeys(op_type_of(str(o)) for o in op_types):
        groups[r.evidence_of(name)].append(name)
    return TraceEvidence(**{k: tuple(v) for k, v in groups.items()}, source=source)


def merge_evidence(evidence: Iterable[TraceEvidence]) -> TraceEvidence | None:
    """The evidence of several traces of one program (pooled blocks): each group's names, first seen first.

    None when there is none. A name in different groups (rules changed between them) keeps its first group.
    """
    items = list(evidence)
    if not items:
        return None
    placed: dict[str, str] = {}
    for ev in items:
        for kind in EVIDENCE_KINDS:
            for name in getattr(ev, kind):
                placed.setdefault(name, kind)
    return TraceEvidence(**{k: tuple(n for n, kind in placed.items() if kind == k) for k in EVIDENCE_KINDS},
                         source=items[0].source)
