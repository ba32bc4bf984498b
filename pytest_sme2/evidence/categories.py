"""Operator categories: rules as data, matched on a normalized operator type.

The five categories are fixed (``Convolution``, ``GEMM``, ``Data Movement``, ``Elementwise``,
``Other``); the rules that map operator names to them are data that users may extend or replace.
Rules are regular expressions tried in order against the *normalized* op type (lower case, with
``_ . : /`` turned into spaces, so ``native_call_addmm.out`` reads ``native call addmm out``);
the first match wins, and anything unmatched is ``Other``.

The order matters: ``Convert (NC)`` must not reach the Convolution rule (it contains "conv"), and
pooling, reductions, softmax and norms are claimed by explicit ``Other`` rules before the
Data Movement and Elementwise rules could misread them (``Max Pooling`` is not ``max``imum).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from pytest_sme2.errors import ConfigError

CONVOLUTION = "Convolution"
GEMM = "GEMM"
DATA_MOVEMENT = "Data Movement"
ELEMENTWISE = "Elementwise"
OTHER = "Other"

#: The four measured categories, in report order; ``Other`` is always E2E minus their sum.
NAMED_CATEGORIES: tuple[str, ...] = (CONVOLUTION, GEMM, DATA_MOVEMENT, ELEMENTWISE)
CATEGORIES: tuple[str, ...] = (*NAMED_CATEGORIES, OTHER)

_NORMALIZE = re.compile(r"[_.:/]+")
_SPACES = re.compile(r"\s+")
_REPEAT_SUFFIX = re.compile(r"\s+#\d+$")


def op_type_of(event_name: str) -> str:
    """Strip XNNPACK's per-label repeat counter: ``Convolution (NHWC, F32) IGEMM #3`` -> ``... IGEMM``."""
    return _REPEAT_SUFFIX.sub("", event_name.strip())


def normalize(op_type: str) -> str:
    """Lower-case ``op_type`` and turn ``_ . : /`` into single spaces, for rule matching."""
    return _SPACES.sub(" ", _NORMALIZE.sub(" ", op_type.lower())).strip()


@dataclass(frozen=True)
class CategoryRule:
    """One rule: if ``pattern`` matches the normalized op type, the op belongs to ``category``."""

    category: str
    pattern: str

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ConfigError(
                f"category rule {self.pattern!r} names category {self.category!r}; "
                f"allowed: {', '.join(CATEGORIES)}"
            )
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ConfigError(
                f"category rule for {self.category!r} has an invalid regular expression "
                f"{self.pattern!r}: {exc}. Fix the pattern (Python `re` syntax)."
            ) from None


def _rules(category: str, patterns: Iterable[str]) -> tuple[CategoryRule, ...]:
    return tuple(CategoryRule(category, p) for p in patterns)


DEFAULT_RULES: tuple[CategoryRule, ...] = (
    *_rules(CONVOLUTION, [r"\b(de)?convolution\b", r"\bconv ?(transpose ?)?[123]d\b"]),
    *_rules(
        GEMM,
        [r"\bfully connected\b", r"\bbatch matrix multiply\b", r"\bgemm\b", r"\bmatmul\b",
         r"\b(addmm|mm|bmm|linear)\b"],
    ),
    *_rules(OTHER, [r"softmax", r"\bnorm\b", r"pool", r"\bmean\b", r"\bsum\b", r"\breduce"]),
    *_rules(
        DATA_MOVEMENT,
        [r"transpose", r"permute", r"reshape", r"\bview\b", r"copy", r"convert", r"\bpad",
         r"concatenate", r"\bcat\b", r"slice", r"split", r"expand", r"squeeze", r"depth to space",
         r"space to depth", r"\bclone\b", r"index select", r"gather", r"quantize"],
    ),
    *_rules(
        ELEMENTWISE,
        [r"\badd\b", r"subtract", r"\bsub\b", r"multiply", r"\bmul\b", r"divide", r"\bdiv\b",
         r"clamp", r"relu", r"gelu", r"sigmoid", r"tanh", r"hardswish", r"hardtanh", r"\belu\b",
         r"negate", r"\bneg\b", r"square", r"sqrt", r"\babs\b", r"\bexp\b", r"\blog\b", r"minimum",
         r"maximum", r"\bfloor\b", r"ceiling", r"\bround\b", r"\bbinary\b", r"\bunary\b", r"\bpow\b",
         r"\bwhere\b"],
    ),
)


@dataclass(frozen=True)
class CategoryRules:
    """An ordered rule list with a compiled matcher; first match wins, unmatched -> ``Other``."""

    rules: tuple[CategoryRule, ...] = DEFAULT_RULES
    _compiled: tuple[tuple[re.Pattern[str], str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "_compiled", tuple((re.compile(r.pattern), r.category) for r in self.rules)
        )

    def categorize(self, op_type: str) -> str:
        """Category of an operator type (raw or already without its ``#k`` suffix)."""
        return _categorize_cached(self, op_type)

    def extended(self, extra: Sequence[CategoryRule]) -> CategoryRules:
        """A new rule set trying ``extra`` first, then these rules."""
        return CategoryRules((*extra, *self.rules))

    def to_list(self) -> list[dict[str, str]]:
        return [{"category": r.category, "pattern": r.pattern} for r in self.rules]

    @classmethod
    def from_list(cls, items: Iterable[Mapping[str, Any]], *, source: str = "rules") -> CategoryRules:
        rules = []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping) or set(item) != {"category", "pattern"}:
                raise ConfigError(
                    f"{source}: rule #{i} is {item!r}; each rule must be an object with exactly the "
                    'keys "category" and "pattern", e.g. {"category": "GEMM", "pattern": "\\\\bmy_gemm\\\\b"}'
                )
            try:
                rules.append(CategoryRule(str(item["category"]), str(item["pattern"])))
            except ConfigError as exc:
                raise ConfigError(f"{source}: rule #{i}: {exc}") from None
        return cls(tuple(rules))

    @classmethod
    def load(cls, path: Path, *, replace: bool = False) -> CategoryRules:
        """Read rules from a JSON file: a list of rules, or ``{"replace": bool, "rules": [...]}``.

        By default the file's rules are tried before the defaults (extend); ``replace`` drops them.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"category rules file {path} does not exist; pass an existing JSON file") from None
        except UnicodeDecodeError:
            raise ConfigError(f"category rules file {path} is not UTF-8 text (a binary file?); pass a JSON "
                              "file of rules") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"category rules file {path} is not valid JSON ({exc}); fix or remove it") from None
        if isinstance(data, Mapping):
            # A misspelt key would otherwise leave the defaults in place without a word.
            unknown = sorted(set(data) - {"replace", "rules"})
            if unknown:
                raise ConfigError(
                    f"category rules file {path} has unknown key(s) {', '.join(map(repr, unknown))}; "
                    'allowed: "rules" (the list of rules) and "replace" (true to drop the defaults)'
                )
            replace = bool(data.get("replace", replace))
            data = data.get("rules", [])
        if not isinstance(data, list):
            raise ConfigError(f"category rules file {path} must hold a list of rules or {{'rules': [...]}}")
        own = cls.from_list(data, source=str(path))
        return own if replace else DEFAULT.extended(own.rules)


@lru_cache(maxsize=4096)
def _categorize_cached(rules: CategoryRules, op_type: str) -> str:
    text = normalize(op_type_of(op_type))
    for pattern, category in rules._compiled:
        if pattern.search(text):
            return category
    return OTHER


DEFAULT = CategoryRules()


def categorize(op_type: str, rules: CategoryRules = DEFAULT) -> str:
    """Category of ``op_type`` under ``rules`` (the defaults unless given)."""
    return rules.categorize(op_type)
