"""A report table as data: columns, rows of typed cells, notes.

:mod:`pytest_sme2.report.tables` builds every table once as a :class:`Table`; the markdown, HTML
and terminal renderers each turn it into their format. A cell keeps its value and what the value
*is* (milliseconds, a share of E2E, a ratio, an operator category, a verdict status ...), so each
format can dress it (a colour swatch, a status pill, a share bar) while the number itself is
written by :func:`cell_text`, the same everywhere.

Text cells may hold ```code``` spans (identifiers) and newlines; markdown keeps the spans, HTML
turns them into ``<code>``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pytest_sme2.units import UNKNOWN, fmt_change, fmt_interval, fmt_ms, fmt_pct, fmt_x


class Kind(str, Enum):
    """What a cell holds; decides how its value is written and dressed."""

    TEXT = "text"  #: words, possibly with `code` spans and newlines
    CODE = "code"  #: one identifier: an operator, kernel, check, file or test id
    MS = "ms"  #: milliseconds (the column title carries the unit)
    SHARE = "share"  #: a fraction of E2E, written as a percent
    RATIO = "ratio"  #: a speedup ``off / on``, written ``2.59×``; ``low``/``high`` its CI
    CHANGE = "change"  #: a ratio new / old, written as a signed percent
    COUNT = "count"  #: calls per run, samples, runs
    DELTA_MS = "delta-ms"  #: a signed difference in milliseconds
    DELTA_PP = "delta-pp"  #: a signed difference of shares, in percentage points
    CATEGORY = "category"  #: an operator category (a colour swatch in HTML)
    BACKEND = "backend"  #: an operator's backend: a delegate name or ``portable`` (a tag in HTML)
    STATUS = "status"  #: a verdict status (a pill in HTML)


@dataclass(frozen=True)
class Cell:
    """One value and its kind; ``note`` follows it in parentheses, ``mark`` is a footnote sign."""

    kind: Kind
    value: str | float | None
    low: float | None = None
    high: float | None = None
    strong: bool = False
    note: str = ""
    mark: str = ""
    #: SHARE cells: the category whose colour draws a bar of the share (HTML)
    bar: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind.value, "value": self.value}
        for key in ("low", "high", "strong", "note", "mark", "bar"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out


@dataclass(frozen=True)
class Column:
    """A column title (units in the title: ``SME2 on ms``) and whether its values align right."""

    title: str
    numeric: bool = False


@dataclass(frozen=True)
class Table:
    """Columns, rows of cells and the notes a reader needs to read them.

    A ``keyed`` table has one name cell and one value cell per row (a key/value list such as the
    device identity); its columns are untitled.
    """

    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]
    notes: tuple[str, ...] = ()
    keyed: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (cells keep their raw values and kinds), for tools that read tables."""
        return {"title": self.title, "keyed": self.keyed,
                "columns": [{"title": c.title, "numeric": c.numeric} for c in self.columns],
                "rows": [[c.to_dict() for c in row] for row in self.rows], "notes": list(self.notes)}


# ------------------------------------------------------------------------------- cell builders


def text(value: str, *, strong: bool = False) -> Cell:
    return Cell(Kind.TEXT, value, strong=strong)


def code(value: str) -> Cell:
    return Cell(Kind.CODE, value)


def ms(value: float | None, *, strong: bool = False) -> Cell:
    return Cell(Kind.MS, value, strong=strong)


def share(value: float | None, *, bar: str = "") -> Cell:
    return Cell(Kind.SHARE, value, bar=bar)


def ratio(value: float | None, low: float | None = None, high: float | None = None, *, mark: str = "") -> Cell:
    return Cell(Kind.RATIO, value, low, high, mark=mark)


def change(value: float | None) -> Cell:
    return Cell(Kind.CHANGE, value)


def count(value: float | None) -> Cell:
    return Cell(Kind.COUNT, value)


def delta_ms(value: float | None) -> Cell:
    return Cell(Kind.DELTA_MS, value)


def delta_pp(value: float | None) -> Cell:
    return Cell(Kind.DELTA_PP, value)


def category(name: str) -> Cell:
    return Cell(Kind.CATEGORY, name)


def backend(name: str) -> Cell:
    return Cell(Kind.BACKEND, name)


def status(value: str, *, note: str = "") -> Cell:
    return Cell(Kind.STATUS, value, note=note)


EMPTY = Cell(Kind.TEXT, "")


# -------------------------------------------------------------------------------------- writing


def _number(x: float | str | None) -> float | None:
    return None if x is None or isinstance(x, str) else float(x)


def cell_text(cell: Cell) -> str:
    """The plain text of a cell's value, without markup (``—`` for an unknown number)."""
    v = cell.value
    k = cell.kind
    if k is Kind.MS:
        out = fmt_ms(_number(v))
    elif k is Kind.SHARE:
        out = fmt_pct(_number(v))
    elif k is Kind.RATIO:
        known = cell.low is not None and cell.high is not None
        out = fmt_interval(_number(v), cell.low, cell.high) if known else fmt_x(_number(v))
    elif k is Kind.CHANGE:
        out = fmt_change(_number(v))
    elif k is Kind.COUNT:
        n = _number(v)
        out = UNKNOWN if n is None or not math.isfinite(n) else f"{n:g}"
    elif k in (Kind.DELTA_MS, Kind.DELTA_PP):
        n = _number(v)
        out = UNKNOWN if n is None or not math.isfinite(n) else f"{n:+.3f}" if k is Kind.DELTA_MS else f"{n:+.1f}"
    elif v is None:
        out = UNKNOWN
    else:
        out = str(v)
    if cell.mark and out != UNKNOWN:
        out += f" {cell.mark}"
    return out


def plain_value(value: Any, *, nested: bool = False) -> str:
    """Any JSON-like identity value as one readable line.

    Scalars as they are (booleans as yes/no), lists joined with commas, mappings as ``key=value``;
    inside a list or mapping, a mapping is written ``key=value key=value`` and a list of scalars
    ``a,b,c``, so the outer separators stay unambiguous: ``[{cpus: [0, 1], max_khz: 2}, ...]``
    reads ``cpus=0,1 max_khz=2; ...``.
    """
    if value is None:
        return UNKNOWN
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Mapping):
        parts = [f"{k}={plain_value(v, nested=True)}" for k, v in value.items() if v not in (None, "", [], {})]
        return (" " if nested else ", ").join(parts) or UNKNOWN
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        items = [plain_value(v, nested=True) for v in value]
        compound = any(isinstance(v, (Mapping, list, tuple)) for v in value)
        sep = "; " if compound else ("," if nested else ", ")
        return sep.join(items) or UNKNOWN
    return str(value)
