"""Inline SVG charts: category stacks, latency samples in run order, top operators, speedups.

The charts go into pytest-html extras and markdown/HTML reports, so they are plain SVG text: no
JavaScript (pytest-html does not run scripts in extras) and no element ids (a page holds many charts
and ids would collide); hover details come from SVG ``<title>`` children. One palette,
:data:`CATEGORY_COLORS`, colours each operator category the same way in every chart. Every number
drawn on a chart carries its unit (``ms``, ``%``, ``×``), tick labels included, and milliseconds
are written as in the tables (:func:`pytest_sme2.units.fmt_ms`). Every label is XML-escaped, and
the output is a pure function of the input (same numbers, same bytes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final
from xml.sax.saxutils import escape

import numpy as np

from pytest_sme2.analysis.run import OperatorDetail
from pytest_sme2.evidence.categories import CATEGORIES, CONVOLUTION, DATA_MOVEMENT, ELEMENTWISE, GEMM, OTHER
from pytest_sme2.units import fmt_ms

#: Colour of each operator category in every chart and table (Okabe-Ito based: colour-blind safe;
#: the two matrix-compute categories share the blue family, Data Movement stands out in vermillion).
CATEGORY_COLORS: Final[Mapping[str, str]] = MappingProxyType({
    CONVOLUTION: "#0072B2",
    GEMM: "#56B4E9",
    DATA_MOVEMENT: "#D55E00",
    ELEMENTWISE: "#009E73",
    OTHER: "#A0A0A0",
})
#: Series colours of latency charts (hues no category uses): current/SME2 on, SME2 off, extra series.
SERIES_COLORS: Final[tuple[str, ...]] = ("#8250DF", "#57606A", "#BF3989", "#1A7F37")
BASELINE_COLOR: Final = "#1F2328"

FONT: Final = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
TEXT: Final = "#1F2328"
MUTED: Final = "#57606A"
GRID: Final = "#D8DEE4"
# Average glyph width of the chart font at 11 px; SVG cannot measure text, so layout estimates it.
CHAR_W: Final = 6.3
BOLD_CHAR_W: Final = 7.2


def category_color(category: str) -> str:
    """The palette colour of ``category`` (mid grey for anything unknown)."""
    return CATEGORY_COLORS.get(category, "#888888")


def _esc(text: object) -> str:
    return escape(str(text), {'"': "&quot;"})


def _n(x: float) -> str:
    """A coordinate: one decimal, no trailing ``.0`` noise, stable across platforms."""
    s = f"{x:.1f}"
    return s[:-2] if s.endswith(".0") else s


def _text_color_on(fill: str) -> str:
    """White or near-black, whichever reads better on ``fill`` (WCAG relative luminance)."""
    r, g, b = (int(fill[i : i + 2], 16) / 255 for i in (1, 3, 5))

    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    lum = 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)
    return "#FFFFFF" if lum < 0.35 else TEXT


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] with about ``n`` steps of 1, 2, 2.5 or 5 x 10^k."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if hi <= lo:
        hi = lo + (abs(lo) * 0.1 or 1.0)
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-9))
    start = math.floor(lo / step + 1e-9) * step
    stop = math.ceil(hi / step - 1e-9) * step
    count = round((stop - start) / step)
    return [round(start + i * step, 12) for i in range(count + 1)]


def _tick_label(value: float, ticks: Sequence[float]) -> str:
    """A tick value with just the decimals its step needs (0.25 -> 2, 0.5 -> 1, 2 -> 0)."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    decimals = 0
    while decimals < 6 and abs(round(step, decimals) - step) > step * 1e-6:
        decimals += 1
    return f"{value:.{decimals}f}"


def _ellipsize(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[: max(1, max_chars - 1)] + "…"


def _text(x: float, y: float, content: str, *, size: float = 11, anchor: str = "start",
          fill: str = TEXT, weight: str | None = None, italic: bool = False, extra: str = "") -> str:
    attrs = f'x="{_n(x)}" y="{_n(y)}" font-size="{size:g}" fill="{fill}"'
    if anchor != "start":
        attrs += f' text-anchor="{anchor}"'
    if weight:
        attrs += f' font-weight="{weight}"'
    if italic:
        attrs += ' font-style="italic"'
    return f"<text {attrs}{extra}>{_esc(content)}</text>"


def _svg(width: float, height: float, title: str, body: list[str], *, kind: str) -> str:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="sme2-chart sme2-chart-{kind}" '
        f'width="{_n(width)}" height="{_n(height)}" viewBox="0 0 {_n(width)} {_n(height)}" role="img" '
        f'font-family="{_esc(FONT)}" style="max-width:100%;height:auto">'
    )
    parts = [head, f"<title>{_esc(title)}</title>",
             f'<rect class="sme2-bg" x="0" y="0" width="{_n(width)}" height="{_n(height)}" fill="#FFFFFF"/>',
             _text(12, 20, title, size=13, weight="600")]
    return "\n".join([*parts, *body, "</svg>"])


def _legend(items: Sequence[tuple[str, str]], x: float, y: float, *, dashed: Sequence[str] = ()) -> list[str]:
    """Swatch + label pairs in a row; labels in ``dashed`` get a dashed outline swatch."""
    out = []
    for label, color in items:
        if label in dashed:
            out.append(f'<rect x="{_n(x)}" y="{_n(y - 9)}" width="10" height="10" fill="#FFFFFF" '
                       f'stroke="{TEXT}" stroke-dasharray="2 1.5"/>')
        else:
            out.append(f'<rect x="{_n(x)}" y="{_n(y - 9)}" width="10" height="10" rx="2" fill="{color}"/>')
        out.append(_text(x + 14, y, label, size=11, fill=MUTED))
        x += 14 + len(label) * CHAR_W + 14
    return out


def _x_axis(ticks: Sequence[float], scale: float, *, left: float, top: float, bottom: float, label: str,
            suffix: str = "") -> list[str]:
    """Vertical grid lines at ``ticks``, their labels under ``bottom``, and the axis title."""
    out = []
    for t in ticks:
        x = left + t * scale
        out.append(f'<line x1="{_n(x)}" y1="{_n(top)}" x2="{_n(x)}" y2="{_n(bottom)}" stroke="{GRID}"/>')
        out.append(_text(x, bottom + 14, _tick_label(t, ticks) + suffix, size=10, anchor="middle", fill=MUTED))
    span = (ticks[-1] - ticks[0]) * scale
    out.append(_text(left + span / 2, bottom + 30, label, size=11, anchor="middle", fill=MUTED))
    return out


# --------------------------------------------------------------------------------- category stacks


def category_stacked_bars(
    bars: Sequence[tuple[str, Mapping[str, float]]],
    *,
    title: str = "Where the time goes: operator categories",
    axis_label: str = "ms per run (mean of the measured runs)",
    width: int = 640,
    compare_to_first: bool = True,
) -> str:
    """Horizontal stacked bars, one per ``(label, {category: ms})``, e.g. SME2 off vs on.

    Every bar has one ``rect.sme2-seg`` per category in :data:`CATEGORIES` order (zero-width when
    absent), carrying ``data-category`` and ``data-value`` (ms) and a hover title with the share.
    Segments wide enough show their share; the bar total is printed at its end and, with
    ``compare_to_first``, how many times faster or slower it is than the first bar.
    """
    rows = [(str(label), {c: max(0.0, float(v.get(c, 0.0))) for c in CATEGORIES}) for label, v in bars]

    def faster(total: float, first: float) -> str:
        ratio = first / total
        return f"{ratio:.2f}× faster" if ratio >= 1 else f"{1 / ratio:.2f}× slower"

    return _stacked_bars(
        rows, CATEGORIES, category_color, title=title, width=width, kind="categories", axis_label=axis_label,
        axis_suffix=" ms", right=170.0 if compare_to_first and len(rows) > 1 else 84.0,
        segment=lambda cat, v: f'class="sme2-seg" data-category="{_esc(cat)}" data-value="{v:.6f}"',
        tip=lambda cat, v: f"{cat}: {v:.3f} ms", total_text=lambda t: f"{fmt_ms(t)} ms",
        compared=(lambda t, first: f"{faster(t, first)} than") if compare_to_first else None)


def _stacked_bars(rows: Sequence[tuple[str, Mapping[str, float]]], keys: Sequence[str], color: Callable[[str], str],
                  *, title: str, width: int, kind: str, axis_label: str, axis_suffix: str, right: float,
                  segment: Callable[[str, float], str], tip: Callable[[str, float], str],
                  total_text: Callable[[float], str], compared: Callable[[float, float], str] | None,
                  unit: float = 1.0) -> str:
    """Horizontal stacked bars, one per ``(label, {key: value})``, segments in ``keys`` order: ``segment`` gives a
    segment's class and data attributes, ``tip`` its hover text, ``total_text`` the bar's total, ``compared`` the
    words before the first bar's name after every later bar (None: none). The axis is in ``unit``s of the values."""
    label_w = min(200.0, max(70.0, max((len(lbl) for lbl, _ in rows), default=4) * CHAR_W + 16))
    left, top = label_w, 58.0
    bar_h, gap = 28.0, 14.0
    plot_h = len(rows) * bar_h + max(0, len(rows) - 1) * gap
    bottom = top + plot_h + 8
    height = bottom + 40
    totals = [sum(v.values()) for _, v in rows]
    ticks = _nice_ticks(0.0, max(totals, default=0.0) / unit or 1.0)
    scale = (width - left - right) / ticks[-1] / unit
    present = [k for k in keys if any(v[k] > 0 for _, v in rows)]
    body = _legend([(k, color(k)) for k in present], 12, 40)
    body += _x_axis(ticks, scale * unit, left=left, top=top - 6, bottom=bottom, label=axis_label, suffix=axis_suffix)
    for i, ((label, values), total) in enumerate(zip(rows, totals, strict=True)):
        y = top + i * (bar_h + gap)
        body.append(_text(left - 8, y + bar_h / 2 + 4, _ellipsize(label, 30), size=12, anchor="end", weight="600"))
        x = left
        for key in keys:
            v = values[key]
            w = v * scale
            share = v / total if total > 0 else 0.0
            fill = color(key)
            body.append(
                f'<rect {segment(key, v)} x="{_n(x)}" '
                f'y="{_n(y)}" width="{_n(w)}" height="{_n(bar_h)}" fill="{fill}" stroke="#FFFFFF" '
                f'stroke-width="{1 if w >= 2 else 0}"><title>{_esc(f"{label} · {tip(key, v)} ({share:.1%})")}'
                "</title></rect>"
            )
            for text in (f"{key} {share:.0%}", f"{share:.0%}"):
                if w >= len(text) * CHAR_W + 8:
                    body.append(_text(x + w / 2, y + bar_h / 2 + 4, text, size=11, anchor="middle",
                                      fill=_text_color_on(fill)))
                    break
            x += w
        shown = total_text(total)
        body.append(_text(x + 6, y + bar_h / 2 + 4, shown, size=11, weight="600"))
        first = totals[0]
        if compared is not None and i > 0 and first > 0 and total > 0:
            # The total is bold, so wider per character than CHAR_W.
            body.append(_text(x + 6 + len(shown) * BOLD_CHAR_W + 8, y + bar_h / 2 + 4,
                              f"{compared(total, first)} {_ellipsize(rows[0][0], 14)}", size=10.5, fill=MUTED))
    return _svg(width, height, title, body, kind=kind)


# ----------------------------------------------------------------------------------- latency runs


@dataclass(frozen=True)
class SampleSeries:
    """One arm of a latency chart: measured samples in run order and the cold first run."""

    label: str
    samples_ms: tuple[float, ...]
    cold_ms: float | None = None
    color: str | None = None
    #: draw and label this series' median (off for a baseline drawn with its own reference line)
    show_median: bool = True


# The cold run is drawn in scale only when it is within this factor of the slowest measured run;
# beyond it, it would squash every measured point into a flat line, so it is marked off-scale.
_COLD_IN_SCALE = 1.6


_Label = tuple[float, str, str]  # y, text, colour


def _spread_labels(labels: list[_Label], min_gap: float, lo: float, hi: float) -> list[_Label]:
    """Push right-margin labels apart vertically so none overlap (keeps their order)."""
    out: list[_Label] = []
    for wanted, text, color in sorted(labels):
        y = max(wanted, lo)
        if out and y - out[-1][0] < min_gap:
            y = out[-1][0] + min_gap
        out.append((y, text, color))
    overflow = out[-1][0] - hi if out else 0.0
    return [(y - overflow, t, c) for y, t, c in out] if overflow > 0 else out


def latency_series_chart(
    series: Sequence[SampleSeries],
    *,
    baseline_ms: float | None = None,
    title: str = "E2E latency per run",
    width: int = 640,
    height: int = 270,
) -> str:
    """Run-order scatter of one or more series, cold runs marked, medians and a baseline line.

    Points are ``circle.sme2-pt`` (``data-series``, ``data-run``, ``data-value``); the cold run is
    ``path.sme2-cold`` at run 0 (an arrow at the top edge when it is far off scale). A box strip at
    the right shows each series' distribution (min, p25, median, p75, max).
    """
    arms = [
        SampleSeries(s.label, tuple(float(x) for x in s.samples_ms), s.cold_ms,
                     s.color or SERIES_COLORS[i % len(SERIES_COLORS)], s.show_median)
        for i, s in enumerate(series)
    ]
    left, right, top, bottom_pad = 72.0, 180.0, 56.0, 44.0
    plot_w, plot_h = width - left - right, height - top - bottom_pad
    bottom = top + plot_h
    measured = [x for s in arms for x in s.samples_ms]
    hottest = max(measured, default=1.0)
    in_scale = [s.cold_ms for s in arms if s.cold_ms is not None and s.cold_ms <= hottest * _COLD_IN_SCALE]
    values = measured + in_scale + ([baseline_ms] if baseline_ms is not None else [])
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0
    yt = _nice_ticks(max(0.0, lo - pad), hi + pad, 5)
    y0, y1 = yt[0], yt[-1]

    def ymap(v: float) -> float:
        return bottom - (v - y0) / (y1 - y0) * plot_h

    runs = max((len(s.samples_ms) for s in arms), default=1)
    step = plot_w / (runs + 1)

    def xmap(run: int) -> float:
        return left + (run + 0.5) * step

    body: list[str] = []
    legend = [(s.label, s.color or "") for s in arms]
    lx = 12.0
    for label, color in legend:
        body.append(f'<circle cx="{_n(lx + 5)}" cy="36" r="4" fill="{color}"/>')
        body.append(_text(lx + 14, 40, label, fill=MUTED))
        lx += 14 + len(label) * CHAR_W + 16
    if any(s.cold_ms is not None for s in arms):
        body.append(f'<path d="M{_n(lx + 5)} 31 l5 5 l-5 5 l-5 -5 z" fill="#FFFFFF" stroke="{TEXT}" '
                    'stroke-width="1.5"/>')
        body.append(_text(lx + 14, 40, "cold run 0 (excluded)", fill=MUTED))
        lx += 14 + 21 * CHAR_W + 16
    if baseline_ms is not None:
        body.append(f'<line x1="{_n(lx)}" y1="36" x2="{_n(lx + 18)}" y2="36" stroke="{BASELINE_COLOR}" '
                    'stroke-width="1.5" stroke-dasharray="5 3"/>')
        body.append(_text(lx + 22, 40, "baseline median", fill=MUTED))
    for t in yt:
        y = ymap(t)
        body.append(f'<line x1="{_n(left)}" y1="{_n(y)}" x2="{_n(left + plot_w)}" y2="{_n(y)}" stroke="{GRID}"/>')
        body.append(_text(left - 6, y + 3.5, _tick_label(t, yt) + " ms", size=10, anchor="end", fill=MUTED))
    body.append(_text(12, top + plot_h / 2, "E2E latency (ms)", size=11, anchor="middle", fill=MUTED,
                      extra=f' transform="rotate(-90 12 {_n(top + plot_h / 2)})"'))
    xt = [t for t in _nice_ticks(0, runs, 6) if float(t).is_integer() and t <= runs]
    for t in xt:
        body.append(_text(xmap(int(t)), bottom + 14, f"{int(t)}", size=10, anchor="middle", fill=MUTED))
    body.append(f'<line x1="{_n(left)}" y1="{_n(bottom)}" x2="{_n(left + plot_w)}" y2="{_n(bottom)}" '
                f'stroke="{MUTED}"/>')
    body.append(_text(left + plot_w / 2, bottom + 32, "run, in execution order (run 0 = cold)", fill=MUTED,
                      anchor="middle"))
    labels: list[_Label] = []
    if baseline_ms is not None:
        yb = ymap(baseline_ms)
        body.append(f'<line class="sme2-baseline" x1="{_n(left)}" y1="{_n(yb)}" x2="{_n(left + plot_w)}" '
                    f'y2="{_n(yb)}" stroke="{BASELINE_COLOR}" stroke-width="1.5" stroke-dasharray="5 3">'
                    f"<title>{_esc(f'baseline median {baseline_ms:.3f} ms')}</title></line>")
        labels.append((yb + 4, f"baseline {fmt_ms(baseline_ms)} ms", BASELINE_COLOR))
    for s in arms:
        color = s.color or TEXT
        if s.samples_ms:
            pts = " ".join(f"{_n(xmap(i + 1))},{_n(ymap(v))}" for i, v in enumerate(s.samples_ms))
            body.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="1" opacity="0.35"/>')
            for i, v in enumerate(s.samples_ms):
                body.append(
                    f'<circle class="sme2-pt" data-series="{_esc(s.label)}" data-run="{i + 1}" data-value="{v:.6f}" '
                    f'cx="{_n(xmap(i + 1))}" cy="{_n(ymap(v))}" r="2.6" fill="{color}">'
                    f"<title>{_esc(f'{s.label} run {i + 1}: {v:.3f} ms')}</title></circle>"
                )
        if s.samples_ms and s.show_median:
            med = float(np.median(s.samples_ms))
            ym = ymap(med)
            body.append(f'<line class="sme2-median" x1="{_n(left)}" y1="{_n(ym)}" x2="{_n(left + plot_w)}" '
                        f'y2="{_n(ym)}" stroke="{color}" stroke-width="1.2" stroke-dasharray="2 2"/>')
            labels.append((ym + 4, f"median {fmt_ms(med)} ms", color))
        if s.cold_ms is not None:
            x = xmap(0)
            tip = f"<title>{_esc(f'{s.label} cold run 0: {s.cold_ms:.3f} ms (not in the statistics)')}</title>"
            if s.cold_ms <= hottest * _COLD_IN_SCALE:
                y = ymap(s.cold_ms)
                body.append(f'<path class="sme2-cold" data-value="{s.cold_ms:.6f}" d="M{_n(x)} {_n(y - 6)} l6 6 '
                            f'l-6 6 l-6 -6 z" fill="#FFFFFF" stroke="{color}" stroke-width="1.8">{tip}</path>')
                body.append(_text(x + 8, y - 6, f"cold {fmt_ms(s.cold_ms)} ms", size=10, fill=color))
            else:
                y = top + 2
                body.append(f'<path class="sme2-cold sme2-offscale" data-value="{s.cold_ms:.6f}" d="M{_n(x)} {_n(y)} '
                            f'l6 9 l-12 0 z" fill="#FFFFFF" stroke="{color}" stroke-width="1.8">{tip}</path>')
                body.append(_text(x + 9, y + 9, f"cold {fmt_ms(s.cold_ms)} ms ↑ off scale", size=10, fill=color))
    # Distribution strip: a box per series, on the same y scale as the points.
    bx = left + plot_w + 14
    for i, s in enumerate(arms):
        if not s.samples_ms:
            continue
        q = np.percentile(np.asarray(s.samples_ms), [0, 25, 50, 75, 100])
        cx = bx + i * 18 + 6
        color = s.color or TEXT
        tip = (f"{s.label}: min {q[0]:.3f}, p25 {q[1]:.3f}, median {q[2]:.3f}, p75 {q[3]:.3f}, "
               f"max {q[4]:.3f} ms ({len(s.samples_ms)} runs)")
        body.append(f'<g class="sme2-box"><title>{_esc(tip)}</title>'
                    f'<line x1="{_n(cx)}" y1="{_n(ymap(q[0]))}" x2="{_n(cx)}" y2="{_n(ymap(q[4]))}" stroke="{color}"/>'
                    f'<rect x="{_n(cx - 5)}" y="{_n(ymap(q[3]))}" width="10" '
                    f'height="{_n(max(1.0, ymap(q[1]) - ymap(q[3])))}" fill="{color}" fill-opacity="0.25" '
                    f'stroke="{color}"/>'
                    f'<line x1="{_n(cx - 6)}" y1="{_n(ymap(q[2]))}" x2="{_n(cx + 6)}" y2="{_n(ymap(q[2]))}" '
                    f'stroke="{color}" stroke-width="2.5"/></g>')
    lx = bx + len(arms) * 18 + 6
    for y, text, color in _spread_labels(labels, 13, top + 8, bottom):
        body.append(_text(lx, y, text, size=10.5, fill=color, weight="600"))
    return _svg(width, height, title, body, kind="latency")


def latency_samples_chart(
    samples_ms: Sequence[float],
    *,
    cold_ms: float | None = None,
    baseline_ms: float | None = None,
    title: str = "E2E latency per run",
    label: str = "measured",
    width: int = 640,
) -> str:
    """One series in run order: measured samples, the cold run marked, the baseline median as a line."""
    return latency_series_chart([SampleSeries(label, tuple(samples_ms), cold_ms)], baseline_ms=baseline_ms,
                                title=title, width=width)


# -------------------------------------------------------------------------------------- operators


def operator_bars(
    details: Sequence[OperatorDetail],
    top: int = 10,
    *,
    title: str = "Top operators by time per run",
    width: int = 640,
) -> str:
    """Horizontal bars of the ``top`` operators by total ms per run, coloured by category.

    Portable (non-delegated) operators get a dashed outline and ``portable`` after their value.
    """
    rows = sorted(details, key=lambda o: (-o.total_ms, o.name))[:top]
    left = min(290.0, max(80.0, max((len(o.name) for o in rows), default=8) * CHAR_W + 16))
    label_chars = int((left - 16) / CHAR_W)
    right, top_y = 150.0, 58.0
    bar_h, gap = 16.0, 7.0
    bottom = top_y + len(rows) * (bar_h + gap)
    height = bottom + 44
    ticks = _nice_ticks(0.0, max((o.total_ms for o in rows), default=0.0) or 1.0)
    scale = (width - left - right) / ticks[-1]
    present = [c for c in CATEGORIES if any(o.category == c for o in rows)]
    legend = [(c, category_color(c)) for c in present]
    if any(o.backend == "portable" for o in rows):
        legend.append(("portable (not delegated)", ""))
    body = _legend(legend, 12, 40, dashed=("portable (not delegated)",))
    body += _x_axis(ticks, scale, left=left, top=top_y - 6, bottom=bottom, label="ms per run", suffix=" ms")
    for i, o in enumerate(rows):
        y = top_y + i * (bar_h + gap)
        portable = o.backend == "portable"
        body.append(_text(left - 8, y + bar_h / 2 + 4, _ellipsize(o.name, label_chars), anchor="end",
                          italic=portable))
        w = o.total_ms * scale
        outline = f' stroke="{TEXT}" stroke-dasharray="3 2" stroke-width="1.2"' if portable else ""
        tip = (f"{o.name}: {o.total_ms:.3f} ms per run ({o.share:.1%} of E2E), {o.count:g} calls × "
               f"{o.avg_ms:.4f} ms, {o.category}, {o.backend or 'unknown backend'}")
        body.append(
            f'<rect class="sme2-op" data-category="{_esc(o.category)}" data-value="{o.total_ms:.6f}" '
            f'x="{_n(left)}" y="{_n(y)}" width="{_n(w)}" height="{_n(bar_h)}" rx="2" '
            f'fill="{category_color(o.category)}"{outline}><title>{_esc(tip)}</title></rect>'
        )
        value = f"{fmt_ms(o.total_ms)} ms · {o.share:.1%}" + (" · portable" if portable else "")
        body.append(_text(left + w + 6, y + bar_h / 2 + 4, value, size=10.5, fill=TEXT if not portable else "#A40E26"))
    return _svg(width, height, title, body, kind="operators")


# --------------------------------------------------------------------------------------- speedups


@dataclass(frozen=True)
class SpeedupBar:
    """One bar of a speedup chart: estimate and optional CI; ``note`` is printed muted after it."""

    label: str
    estimate: float
    low: float | None = None
    high: float | None = None
    color: str = SERIES_COLORS[0]
    note: str = ""


def speedup_bars(
    rows: Sequence[SpeedupBar],
    *,
    title: str = "Speedup (SME2 off / SME2 on), 95% CI",
    width: int = 640,
    axis_label: str = "speedup (×); right of the 1× line = faster",
) -> str:
    """Horizontal speedup bars with CI whiskers and a reference line at 1x (no change)."""
    finite = [r for r in rows if math.isfinite(r.estimate)]
    label_w = min(200.0, max(80.0, max((len(r.label) for r in finite), default=4) * CHAR_W + 16))
    left, right, top = label_w, 190.0, 44.0
    bar_h, gap = 18.0, 8.0
    bottom = top + len(finite) * (bar_h + gap)
    height = bottom + 44
    hi = max([1.0] + [max(r.estimate, r.high or 0.0) for r in finite])
    ticks = _nice_ticks(0.0, hi * 1.05)
    scale = (width - left - right) / ticks[-1]
    body = _x_axis(ticks, scale, left=left, top=top - 6, bottom=bottom,
                   label=axis_label, suffix="×")
    for i, r in enumerate(finite):
        y = top + i * (bar_h + gap)
        body.append(_text(left - 8, y + bar_h / 2 + 4, _ellipsize(r.label, 30), anchor="end"))
        ci = f" (95% CI {r.low:.2f}–{r.high:.2f})" if r.low is not None and r.high is not None else ""
        body.append(
            f'<rect class="sme2-speedup" data-value="{r.estimate:.6f}" x="{_n(left)}" y="{_n(y)}" '
            f'width="{_n(max(0.0, r.estimate) * scale)}" height="{_n(bar_h)}" rx="2" fill="{r.color}">'
            f"<title>{_esc(f'{r.label}: {r.estimate:.2f}×{ci}')}</title></rect>"
        )
        end = r.estimate
        if r.low is not None and r.high is not None:
            yc = y + bar_h / 2
            xl, xh = left + r.low * scale, left + r.high * scale
            body.append(f'<path d="M{_n(xl)} {_n(yc - 5)} v10 M{_n(xl)} {_n(yc)} H{_n(xh)} M{_n(xh)} {_n(yc - 5)} v10" '
                        f'stroke="{TEXT}" stroke-width="1.3" fill="none"/>')
            end = max(end, r.high)
        label = f"{r.estimate:.2f}×" + (f" [{r.low:.2f}×–{r.high:.2f}×]" if ci else "")
        body.append(_text(left + end * scale + 6, y + bar_h / 2 + 4, label, size=10.5, weight="600"))
        if r.note:
            body.append(_text(left + end * scale + 6 + len(label) * BOLD_CHAR_W + 6, y + bar_h / 2 + 4, r.note,
                              size=10, fill=MUTED, italic=True))
    # Drawn last so the bars do not hide it.
    x1 = left + scale
    body.append(f'<line class="sme2-ref" x1="{_n(x1)}" y1="{_n(top - 10)}" x2="{_n(x1)}" y2="{_n(bottom)}" '
                f'stroke="{TEXT}" stroke-width="1.5" stroke-dasharray="4 3"/>')
    body.append(_text(x1 + 4, top - 12, "1× = no change", size=10, fill=MUTED))
    return _svg(width, height, title, body, kind="speedup")


# --------------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class MemoryBar:
    """One arm of the memory chart: planned MB, the peak's median MB and the blocks' (min, max) peak."""

    label: str
    planned_mb: float
    peak_mb: float | None
    peak_range_mb: tuple[float, float] | None = None
    #: the process' resident memory before it opened the program (runner + libraries; under QEMU the emulator too)
    start_mb: float | None = None


PLANNED_COLOR: Final = "#8250DF"
PEAK_COLOR: Final = "#0969DA"
START_COLOR: Final = "#AFB8C1"


def memory_bars(rows: Sequence[MemoryBar], *, title: str = "Memory: planned vs peak, per arm", width: int = 640,
                note: str = "") -> str:
    """Two horizontal bars per arm, planned (exact) and peak (median, whisker = the blocks' range), in MB."""
    label_w = min(200.0, max(80.0, max((len(r.label) for r in rows), default=4) * CHAR_W + 16))
    left, right, top = label_w, 130.0, 52.0
    bar_h, pair_gap, gap = 14.0, 3.0, 12.0
    step = 2 * bar_h + pair_gap + gap
    bottom = top + len(rows) * step - gap
    height = bottom + 48 + (14 if note else 0)
    hi = max([0.001] + [max(r.planned_mb, r.peak_mb or 0.0, (r.peak_range_mb or (0.0, 0.0))[1]) for r in rows])
    ticks = _nice_ticks(0.0, hi * 1.05)
    scale = (width - left - right) / ticks[-1]
    legend = [("planned (exact)", PLANNED_COLOR), ("peak (median of blocks)", PEAK_COLOR)]
    if any(r.start_mb is not None for r in rows):
        legend.append(("of it: the process before the load", START_COLOR))
    body = _legend(legend, left, 38)
    body += _x_axis(ticks, scale, left=left, top=top - 6, bottom=bottom, label="MB", suffix="")
    for i, r in enumerate(rows):
        y = top + i * step
        body.append(_text(left - 8, y + bar_h + 4, _ellipsize(r.label, 30), anchor="end"))
        planned_text = f"{r.planned_mb:.3f} MB" if r.planned_mb < 10 else f"{r.planned_mb:.1f} MB"
        body.append(f'<rect class="sme2-mem-planned" data-value="{r.planned_mb:.6f}" x="{_n(left)}" y="{_n(y)}" '
                    f'width="{_n(max(0.5, r.planned_mb * scale))}" height="{_n(bar_h)}" rx="2" fill="{PLANNED_COLOR}">'
                    f"<title>{_esc(f'{r.label}: planned {planned_text}')}</title></rect>")
        body.append(_text(left + r.planned_mb * scale + 6, y + bar_h - 3, planned_text, size=10, fill=MUTED))
        yp = y + bar_h + pair_gap
        if r.peak_mb is None:
            body.append(_text(left + 4, yp + bar_h - 3, "peak not measured", size=10, fill=MUTED, italic=True))
            continue
        body.append(f'<rect class="sme2-mem-peak" data-value="{r.peak_mb:.6f}" x="{_n(left)}" y="{_n(yp)}" '
                    f'width="{_n(r.peak_mb * scale)}" height="{_n(bar_h)}" rx="2" fill="{PEAK_COLOR}">'
                    f"<title>{_esc(f'{r.label}: peak {r.peak_mb:.1f} MB')}</title></rect>")
        if r.start_mb is not None and 0 < r.start_mb <= r.peak_mb:
            tip = f"{r.label}: {r.start_mb:.1f} MB before the load, +{r.peak_mb - r.start_mb:.1f} MB added"
            body.append(f'<rect class="sme2-mem-start" x="{_n(left)}" y="{_n(yp)}" '
                        f'width="{_n(r.start_mb * scale)}" height="{_n(bar_h)}" rx="2" fill="{START_COLOR}">'
                        f"<title>{_esc(tip)}</title></rect>")
        end = r.peak_mb
        if r.peak_range_mb is not None:
            lo, hi_ = r.peak_range_mb
            yc = yp + bar_h / 2
            body.append(f'<path d="M{_n(left + lo * scale)} {_n(yc - 4)} v8 M{_n(left + lo * scale)} {_n(yc)} '
                        f'H{_n(left + hi_ * scale)} M{_n(left + hi_ * scale)} {_n(yc - 4)} v8" stroke="{TEXT}" '
                        'stroke-width="1.2" fill="none"/>')
            end = max(end, hi_)
        added = f" (+{r.peak_mb - r.start_mb:.1f} MB)" if r.start_mb is not None else ""
        body.append(_text(left + end * scale + 6, yp + bar_h - 3, f"{r.peak_mb:.1f} MB{added}", size=10, weight="600"))
    if note:
        body.append(_text(12, height - 10, note, size=10, fill=MUTED, italic=True))
    return _svg(width, height, title, body, kind="memory")


# --------------------------------------------------------------------------------- instructions


#: Colour of each kind of instruction executed under emulation (Okabe-Ito hues; SME stands out).
KIND_COLORS: Final[Mapping[str, str]] = MappingProxyType({
    "sme": "#CC79A7", "sve": "#E69F00", "neon": "#0072B2", "load_store": "#009E73", "scalar": "#A0A0A0",
    "undecoded": "#F0E442",
})


def instruction_kind_bars(bars: Sequence[tuple[str, Mapping[str, int]]], kinds: Sequence[str], *,
                          title: str, width: int = 640) -> str:
    """Horizontal stacked bars of instructions executed under emulation, one per ``(arm, {kind: count})``: a count
    per execution, never a time. Each segment is a ``rect.sme2-kind`` with ``data-kind`` and ``data-value``; the
    total is printed at the bar's end and, after the first bar, its ratio to the first (a ratio of counts)."""
    rows = [(str(label), {k: float(max(0, int(v.get(k, 0)))) for k in kinds}) for label, v in bars]
    most = max((sum(v.values()) for _, v in rows), default=0.0)
    unit, unit_name = next(((u, name) for u, name in ((1e6, "million "), (1e3, "thousand ")) if most >= u), (1.0, ""))
    return _stacked_bars(
        rows, kinds, lambda k: KIND_COLORS.get(k, "#888888"), title=title, width=width, kind="instructions",
        axis_label=f"{unit_name}instructions per execution (executed under emulation: a count, not a time)",
        axis_suffix="", right=200.0, unit=unit,
        segment=lambda k, v: f'class="sme2-kind" data-kind="{_esc(k)}" data-value="{int(v)}"',
        tip=lambda k, v: f"{k}: {int(v):,}", total_text=lambda t: f"{int(t):,}",
        compared=lambda t, first: f"{t / first:.3f}× the count of")
