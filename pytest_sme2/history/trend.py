"""The trend page: one static HTML file (no server, no network), one section per test and device.

Each section has the gate's median per run over commits with the baseline it was judged against and the detected
steps (dashed lines labelled with size and commit range), the per-category medians stacked, and the on/off ratio
over time where the test has one (an emulated pair is labelled "emulated time ratio (not a speedup)").

Charting: hand-written SVG plus ~30 lines of inline JavaScript, not a vendored library. Compared (docs/history.md):
Chart.js 4 (MIT, ~200 kB minified) and uPlot (MIT, ~50 kB) give zoom and fast canvases, but would be a vendored,
versioned third-party file in the wheel with its licence to track, and canvas pixels a test cannot query; SVG gives
the hover (``<title>`` on every point, plus a tooltip box) and hundreds of points per chart with no dependency, the
same palette as the report's inline charts (:mod:`pytest_sme2.report.charts`), and elements a browser test reads
(``.step``, ``.point``). A chart wider than the page scrolls sideways instead of zooming.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..report.charts import category_color
from ..units import fmt_ms
from .creep import Creep
from .series import CATEGORY_PREFIX, E2E, RATIO, FoundStep, Series, short

W_MIN, H, LEFT, RIGHT, TOP, BOTTOM = 760, 240, 70, 40, 26, 46
STATUS_COLORS = {"regression": "#CF222E", "improvement": "#1A7F37", "pass": "#8250DF", "drift": "#BF8700",
                 "invalid": "#57606A", "inconclusive": "#57606A", "failed": "#CF222E"}
STEP_COLORS = {"regression": "#CF222E", "improvement": "#1A7F37"}


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


@dataclass(frozen=True)
class _Frame:
    n: int
    lo: float
    hi: float
    width: float

    def x(self, i: float) -> float:
        span = max(self.n - 1, 1)
        return LEFT + (self.width - LEFT - RIGHT) * (i / span if self.n > 1 else 0.5)

    def y(self, v: float) -> float:
        return TOP + (H - TOP - BOTTOM) * (1 - (v - self.lo) / (self.hi - self.lo))


def _ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    step = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(step)) if step > 0 else 1
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= step), default=step)
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(n + 2) if start + i * step <= hi + 1e-12]


def _frame(n: int, values: Sequence[float], zero: bool = False) -> _Frame:
    lo, hi = (0.0 if zero else min(values)), max(values)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0
    return _Frame(n=n, lo=max(0.0, lo - pad) if not zero else 0.0, hi=hi + pad, width=max(W_MIN, 8.0 * n + LEFT))


def _axes(f: _Frame, series: Series, unit: str) -> list[str]:
    out = [f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{f.width - RIGHT}" y2="{H - BOTTOM}" stroke="#8C959F"/>']
    for t in _ticks(f.lo, f.hi):
        y = f.y(t)
        label = fmt_ms(t) + " ms" if unit == "ms" else f"{t:.2f}{unit}"
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{f.width - RIGHT}" y2="{y:.1f}" stroke="#D8DEE4"/>'
                   f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{_e(label)}</text>')
    every = max(1, math.ceil(f.n / max(1, (f.width - LEFT) / 70)))
    for i, p in enumerate(series.points):
        if i % every == 0 or i == f.n - 1:
            out.append(f'<text x="{f.x(i):.1f}" y="{H - BOTTOM + 16}" text-anchor="middle" class="tick">'
                       f"{_e(p.commit[:7] or '?')}</text>")
    out.append(f'<text x="{(LEFT + f.width) / 2:.1f}" y="{H - 8}" text-anchor="middle" class="axis">'
               "runs, oldest first (commit)</text>")
    return out


def _svg(f: _Frame, kind: str, title: str, body: list[str]) -> str:
    return (f'<svg class="chart {kind}" width="{f.width:.0f}" height="{H}" viewBox="0 0 {f.width:.0f} {H}" '
            f'role="img" aria-label="{_e(title)}"><text x="{LEFT}" y="16" class="ctitle">{_e(title)}</text>'
            + "".join(body) + "</svg>")


def _hover(series: Series, i: int, value: str) -> str:
    p = series.points[i]
    return (f"run {i + 1}: commit {p.commit[:12] or 'unknown'} ({p.branch or 'no branch'}), {p.time}\n"
            f"{value}, status {p.status}, artifact {p.artifact_id or '?'}")


def latency_chart(series: Series, steps: Sequence[FoundStep]) -> str:
    vals = series.values
    base = [p.baseline_ms for p in series.points]
    f = _frame(len(vals), vals + [b for b in base if b])
    body = _axes(f, series, "ms")
    # The baseline each run was judged against: a step line, absent where a run had none.
    segs, prev = [], None
    for i, b in enumerate(base):
        if b:
            x0, x1 = f.x(i - 0.5 if i else i), f.x(i + 0.5 if i < f.n - 1 else i)
            segs.append(f"M{x0:.1f},{f.y(b):.1f}H{x1:.1f}" if prev != b or not segs else f"H{x1:.1f}")
        prev = b
    if segs:
        body.append(f'<path class="baseline" d="{"".join(segs)}" fill="none" stroke="#1F2328" '
                    'stroke-dasharray="2 3"><title>baseline median each run was gated against</title></path>')
    pts = " ".join(f"{f.x(i):.1f},{f.y(v):.1f}" for i, v in enumerate(vals))
    body.append(f'<polyline points="{pts}" fill="none" stroke="#8250DF" stroke-width="1.5"/>')
    for s in steps:
        x = (f.x(s.index - 1) + f.x(s.index)) / 2
        color = "#8C959F" if s.acknowledged else STEP_COLORS[s.kind]
        label = f"{s.pct:+.1f}% {s.commit_range}" + (" (ack)" if s.acknowledged else "")
        # The label goes on the side of the line with room for it (a step near the newest run is labelled leftwards).
        right = x + 4 + len(label) * 6.6 < f.width
        anchor, lx = ("start", x + 4) if right else ("end", x - 4)
        body.append(f'<g class="step" data-pct="{s.pct:.2f}" data-commits="{_e(s.commit_range)}">'
                    f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{H - BOTTOM}" stroke="{color}" '
                    f'stroke-width="2" stroke-dasharray="5 3"/>'
                    f'<text x="{lx:.1f}" y="{TOP + 10}" text-anchor="{anchor}" class="steplabel" fill="{color}">'
                    f"{_e(label)}</text>"
                    f"<title>step {_e(label)}: {fmt_ms(s.before)} → {fmt_ms(s.after)} ms, confidence "
                    f"{s.confidence:.4f}{', artifact changed' if s.artifact_changed else ', same artifact'}"
                    f"{_e(' — acknowledged: ' + s.acknowledged) if s.acknowledged else ''}</title></g>")
    for i, v in enumerate(vals):
        color = STATUS_COLORS.get(series.points[i].status, "#8250DF")
        tip = _hover(series, i, f"median {fmt_ms(v)} ms")
        body.append(f'<circle class="point" cx="{f.x(i):.1f}" cy="{f.y(v):.1f}" r="3.2" fill="{color}" '
                    f'data-tip="{_e(tip)}"><title>{_e(tip)}</title></circle>')
    return _svg(f, "latency", "median per run (the gate's) and its baseline", body)


def category_chart(series: Sequence[Series]) -> str:
    """Per-category medians stacked (one polygon per category) over the runs of the e2e series."""
    if not series:
        return ""
    n = len(series[0].points)
    cats = [s for s in series if len(s.points) == n]
    if not cats:
        return ""
    totals = [sum(s.points[i].value for s in cats) for i in range(n)]
    f = _frame(n, totals, zero=True)
    body = _axes(f, cats[0], "ms")
    below = [0.0] * n
    for s in cats:
        top = [below[i] + s.points[i].value for i in range(n)]
        name = s.metric.removeprefix(CATEGORY_PREFIX)
        # One run is a bar (a polygon through one x has no area), more runs a stacked band.
        xs = [(f.x(0) - 12, f.x(0) + 12)] if n == 1 else [(f.x(i), f.x(i)) for i in range(n)]
        poly = [f"{x:.1f},{f.y(top[i]):.1f}" for i in range(n) for x in xs[i]]
        poly += [f"{x:.1f},{f.y(below[i]):.1f}" for i in reversed(range(n)) for x in reversed(xs[i])]
        body.append(f'<polygon class="category" points="{" ".join(poly)}" fill="{category_color(name)}" '
                    f'fill-opacity="0.8"><title>{_e(name)}</title></polygon>')
        below = top
    # The legend after the title, each entry as wide as its name (the five categories fit the narrowest chart).
    x = LEFT + 220.0
    for s in cats:
        name = s.metric.removeprefix(CATEGORY_PREFIX)
        body.append(f'<rect x="{x:.0f}" y="7" width="10" height="10" fill="{category_color(name)}"/>'
                    f'<text x="{x + 14:.0f}" y="16" class="tick">{_e(name)}</text>')
        x += 14 + 6.6 * len(name) + 12
    return _svg(f, "categories", "categories (median ms, stacked)", body)


def ratio_chart(series: Series, steps: Sequence[FoundStep]) -> str:
    vals = series.values
    f = _frame(len(vals), [*vals, 1.0])
    body = _axes(f, series, "×")
    body.append(f'<line x1="{LEFT}" y1="{f.y(1):.1f}" x2="{f.width - RIGHT}" y2="{f.y(1):.1f}" stroke="#1F2328" '
                'stroke-dasharray="2 3"><title>1× (no difference)</title></line>')
    body.append('<polyline points="' + " ".join(f"{f.x(i):.1f},{f.y(v):.1f}" for i, v in enumerate(vals))
                + '" fill="none" stroke="#57606A" stroke-width="1.5"/>')
    label = series.ratio_label or "on/off ratio"
    if series.emulated and "emulated" not in label.lower():
        label = "Emulated time ratio (not a speedup)"
    for s in steps:
        x = (f.x(s.index - 1) + f.x(s.index)) / 2
        body.append(f'<g class="step" data-pct="{s.pct:.2f}"><line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" '
                    f'y2="{H - BOTTOM}" stroke="{STEP_COLORS[s.kind]}" stroke-dasharray="5 3"/>'
                    f"<title>{_e(f'{s.pct:+.1f}% {s.commit_range}')}</title></g>")
    for i, v in enumerate(vals):
        tip = _hover(series, i, f"{label} {v:.2f}×")
        body.append(f'<circle class="point" cx="{f.x(i):.1f}" cy="{f.y(v):.1f}" r="3" fill="#57606A" '
                    f'data-tip="{_e(tip)}"><title>{_e(tip)}</title></circle>')
    return _svg(f, "ratio", f"{label} per run", body)


SCRIPT = """
const tip = document.getElementById('tip');
document.querySelectorAll('circle.point').forEach(c => {
  c.addEventListener('mouseenter', e => { tip.textContent = c.dataset.tip; tip.style.display = 'block'; });
  c.addEventListener('mousemove', e => {
    tip.style.left = (e.pageX + 12) + 'px'; tip.style.top = (e.pageY + 12) + 'px';
  });
  c.addEventListener('mouseleave', () => { tip.style.display = 'none'; });
});
"""

CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif; color: #1F2328;
       margin: 24px; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; } .muted { color: #57606A; font-size: 13px; }
.scroll { overflow-x: auto; } svg text { font-size: 11px; fill: #1F2328; } svg .tick { fill: #57606A; }
svg .ctitle { font-weight: 600; } svg .steplabel { font-weight: 600; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #D8DEE4; padding: 3px 8px; white-space: nowrap; }
#tip { position: absolute; display: none; background: #FFF; border: 1px solid #8C959F; padding: 4px 8px;
       font-size: 12px; white-space: pre; pointer-events: none; box-shadow: 0 2px 6px rgba(0,0,0,.15); }
"""


def render_page(series: Sequence[Series], steps: Sequence[FoundStep], creeps: Sequence[Creep] = (), *,
                title: str = "pytest-sme2 history") -> str:
    """The whole page: a steps table, then one section per test x device identity."""
    groups: dict[tuple[str, str], list[Series]] = {}
    for s in series:
        groups.setdefault((s.test_id, s.identity_id), []).append(s)
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
             f"<style>{CSS}</style></head><body><h1>{_e(title)}</h1>"]
    runs = max((len(s.points) for s in series), default=0)
    parts.append(f"<p class='muted'>{len(groups)} test(s) × device, up to {runs} run(s) each. Steps: E-divisive "
                 "means with a t-test (docs/history.md). Hover a point for its commit.</p>")
    if steps:
        parts.append("<div class='scroll'><table class='steps'><tr><th>test</th><th>device</th><th>metric</th>"
                     "<th>step</th>"
                     "<th>commits</th><th>confidence</th><th>artifact</th><th>acknowledged</th></tr>")
        for st in steps:
            parts.append(f"<tr class='{st.kind}'><td>{_e(st.test_id)}</td><td>{_e(st.identity_id)}</td>"
                         f"<td>{_e(st.metric)}</td><td>{st.pct:+.1f}% ({fmt_ms(st.before)} → {fmt_ms(st.after)})</td>"
                         f"<td><code>{_e(st.commit_range)}</code></td><td>{st.confidence:.4f}</td>"
                         f"<td>{'changed' if st.artifact_changed else 'same'}</td><td>{_e(st.acknowledged)}</td></tr>")
        parts.append("</table></div>")
    else:
        parts.append("<p>No steps found.</p>")
    for c in creeps:
        parts.append(f"<p class='creep'>Creep: {_e(c.test_id)} on {_e(c.identity_id)}: {c.pct:+.1f}% over the last "
                     f"{c.runs} runs of one artifact ({_e(c.commit_range)}).</p>")
    for (test_id, identity_id), group in groups.items():
        by_metric = {s.metric: s for s in group}
        e2e = by_metric.get(E2E)
        first = group[0]
        parts.append(f"<section class='series' data-test='{_e(test_id)}' data-device='{_e(identity_id)}'>"
                     f"<h2>{_e(first.label or test_id)}</h2><p class='muted'><code>{_e(test_id)}</code> on "
                     f"<code>{_e(identity_id)}</code> {_e(first.identity)}"
                     f"{' — emulated time, not a device' if first.emulated else ''}</p>")
        if e2e is not None:
            own = [s for s in steps if (s.test_id, s.identity_id, s.metric) == (test_id, identity_id, E2E)]
            parts.append(f"<div class='scroll'>{latency_chart(e2e, own)}</div>")
        cats = [s for s in group if s.metric.startswith(CATEGORY_PREFIX)]
        if cats:
            parts.append(f"<div class='scroll'>{category_chart(cats)}</div>")
        if RATIO in by_metric:
            own = [s for s in steps if (s.test_id, s.identity_id, s.metric) == (test_id, identity_id, RATIO)]
            parts.append(f"<div class='scroll'>{ratio_chart(by_metric[RATIO], own)}</div>")
        parts.append("</section>")
    parts.append(f"<div id='tip'></div><script>{SCRIPT}</script></body></html>")
    return "\n".join(parts) + "\n"


__all__ = ["render_page", "short"]
