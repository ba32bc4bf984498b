"""The trend page: one static HTML file (no server, no network), an overview first, then one section per test and
device.

The overview has one row per series (the gate's median, and the on/off ratio where a test has one): the newest
value, its change against its baseline and against the previous run, the steps found (the newest one named), and a
sparkline. Each section then draws the median per run as percent against the current baseline on an axis of at
least +-5 % that states its range (a 3 % move between two runs stays a 3 % move, it does not fill the chart), with
the baseline each run was judged against and the steps (dashed lines labelled with size and commit range); the
per-category medians stacked from 0 ms; the on/off ratio from 0 where the test has one (an emulated pair is
labelled "emulated time ratio (not a speedup)"); and the instructions executed under emulation where they were counted
(flat between program changes, a step at each).

Charting: hand-written SVG plus a short inline script, not a vendored library. Compared (docs/history.md): uPlot
(MIT, ~50 kB, made for long series with zoom) and Chart.js 4 (MIT, ~200 kB) draw on a canvas, so a test can read only
pixels; SVG keeps every step, point and bar an element a browser test reads (``.step``, ``.point``), the palette of
the report's charts (:mod:`pytest_sme2.report.charts`), and needs no third-party file in the wheel. Zoom is the
script's: every element placed by run index carries ``data-i`` and is moved to the runs in view (buttons for the
last 30/100/500 runs, drag across a chart, double-click for all, ``page.html#last=100`` in a link); with more than
:data:`DOTS_UP_TO` runs in view a series is drawn as its line alone.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pytest_sme2.history.creep import Creep
from pytest_sme2.history.series import CATEGORY_PREFIX, E2E, INSTRUCTIONS, RATIO, FoundStep, Series, short
from pytest_sme2.report.charts import _nice_ticks, category_color
from pytest_sme2.units import fmt_ms

W, H, LEFT, RIGHT, TOP, BOTTOM = 1100, 250, 70, 40, 30, 46
#: A latency chart's y-axis spans at least this many percent either side of the baseline: a 3 % move between two
#: runs must look like 3 % of a run-to-run scale, not fill the chart (the axis states its range).
MIN_SPAN_PCT = 5.0
#: With more runs in view than this, points are drawn as the line alone (a dot per run would be a smear).
DOTS_UP_TO = 300
STATUS_COLORS = {"regression": "#CF222E", "improvement": "#1A7F37", "pass": "#8250DF", "drift": "#BF8700",
                 "invalid": "#57606A", "inconclusive": "#57606A", "failed": "#CF222E"}
STEP_COLORS = {"regression": "#CF222E", "improvement": "#1A7F37"}


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


@dataclass(frozen=True)
class _Frame:
    """Run index -> x over the whole history (the page's script moves elements by ``data-i`` to zoom); value -> y."""

    n: int
    lo: float
    hi: float

    def x(self, i: float) -> float:
        span = max(self.n - 1, 1)
        return LEFT + (W - LEFT - RIGHT) * (i / span if self.n > 1 else 0.5)

    def y(self, v: float) -> float:
        return TOP + (H - TOP - BOTTOM) * (1 - (v - self.lo) / (self.hi - self.lo))


def reference_ms(series: Series) -> tuple[float, str]:
    """What a latency series is drawn against: the baseline of its newest run that had one, else its first run."""
    for p in reversed(series.points):
        if p.baseline_ms:
            return p.baseline_ms, "the current baseline"
    return series.points[0].value, "the first run"


def _pct(v: float, ref: float) -> float:
    return (v / ref - 1) * 100


def _svg(kind: str, title: str, n: int, body: list[str]) -> str:
    # Bars and lines of the runs at the edges of a zoomed view stop at the plot's edges (the overflow is hidden).
    return (f'<svg class="chart {kind}" data-n="{n}" data-left="{LEFT}" data-right="{W - RIGHT}" width="{W}" '
            f'height="{H}" viewBox="0 0 {W} {H}" role="img" aria-label="{_e(title)}">'
            f'<clipPath id="plot-{kind}-{n}"><rect x="{LEFT}" y="0" width="{W - LEFT - RIGHT}" height="{H}"/>'
            f'</clipPath><text x="{LEFT}" y="16" class="ctitle">{_e(title)}</text>' + "".join(body) + "</svg>")


def _axes(f: _Frame, series: Series, label: Callable[[float], str], range_text: str) -> list[str]:
    out = [f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}" stroke="#8C959F"/>']
    for t in _nice_ticks(f.lo, f.hi, 5):
        if not f.lo - 1e-9 <= t <= f.hi + 1e-9:
            continue
        y = f.y(t)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}" stroke="#D8DEE4"/>'
                   f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{_e(label(t))}</text>')
    for i, p in enumerate(series.points):
        out.append(f'<text class="xtick tick" data-i="{i}" x="{f.x(i):.1f}" y="{H - BOTTOM + 16}" '
                   f"text-anchor=\"middle\">{_e(p.commit[:7] or '?')}</text>")
    out.append(f'<text x="{(LEFT + W) / 2:.1f}" y="{H - 8}" text-anchor="middle" class="axis">'
               f"runs, oldest first (commit) · {_e(range_text)}</text>")
    return out


def _hover(series: Series, i: int, value: str) -> str:
    p = series.points[i]
    return (f"run {i + 1}: commit {p.commit[:12] or 'unknown'} ({p.branch or 'no branch'}), {p.time}\n"
            f"{value}, status {p.status}, artifact {p.artifact_id or '?'}")


def _line(f: _Frame, ys: Sequence[float], color: str, cls: str) -> str:
    pts = " ".join(f"{f.x(i):.1f},{y:.1f}" for i, y in enumerate(ys))
    return (f'<polyline class="{cls}" data-ys="{" ".join(f"{y:.1f}" for y in ys)}" points="{pts}" fill="none" '
            f'stroke="{color}" stroke-width="1.5"/>')


def _step_value(s: FoundStep) -> str:
    """A step's two values with their unit: ms, or a count of instructions executed under emulation."""
    if s.metric == INSTRUCTIONS:
        return f"{s.before:,.0f} → {s.after:,.0f} instructions executed under emulation"
    return f"{fmt_ms(s.before)} → {fmt_ms(s.after)} ms"


def _step_marks(f: _Frame, steps: Sequence[FoundStep]) -> list[str]:
    out = []
    for k, s in enumerate(steps):
        x = f.x(s.index - 0.5)
        ly = TOP + 10 + 12 * (k % 3)  # neighbouring steps' labels on different lines
        color = "#8C959F" if s.acknowledged else STEP_COLORS[s.kind]
        label = f"{s.pct:+.1f}% {s.commit_range}" + (" (ack)" if s.acknowledged else "")
        out.append(f'<g class="step" data-i="{s.index - 0.5}" data-pct="{s.pct:.2f}" '
                   f'data-commits="{_e(s.commit_range)}" data-label-width="{len(label) * 6.6:.0f}">'
                   f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{H - BOTTOM}" stroke="{color}" '
                   f'stroke-width="2" stroke-dasharray="5 3"/>'
                   f'<text x="{x + 4:.1f}" y="{ly}" class="steplabel" fill="{color}">{_e(label)}</text>'
                   f"<title>step {_e(label)}: {_e(_step_value(s))}, confidence "
                   f"{s.confidence:.4f}{', artifact changed' if s.artifact_changed else ', same artifact'}"
                   f"{_e(' — acknowledged: ' + s.acknowledged) if s.acknowledged else ''}</title></g>")
    return out


def _points(f: _Frame, series: Series, ys: Sequence[float], tips: Sequence[str], colors: Sequence[str]) -> list[str]:
    return [f'<circle class="point" data-i="{i}" cx="{f.x(i):.1f}" cy="{y:.1f}" r="3" fill="{c}" data-tip="{_e(t)}"/>'
            for i, (y, t, c) in enumerate(zip(ys, tips, colors, strict=True))]


def latency_chart(series: Series, steps: Sequence[FoundStep]) -> str:
    """The gate's median per run as percent against the baseline (the y-axis spans at least +-5 % and says so),
    the baseline each run was judged against, and the steps."""
    ref, what = reference_ms(series)
    pcts = [_pct(v, ref) for v in series.values]
    base = [_pct(p.baseline_ms, ref) if p.baseline_ms else None for p in series.points]
    known = pcts + [b for b in base if b is not None]
    lo, hi = min(*known, -MIN_SPAN_PCT), max(*known, MIN_SPAN_PCT)
    pad = (hi - lo) * 0.06
    f = _Frame(len(pcts), lo - pad, hi + pad)
    body = _axes(f, series, lambda t: f"{t:+.0f}%" if abs(t) >= 1 or t == 0 else f"{t:+.1f}%",
                 f"y: {f.lo:+.1f}% … {f.hi:+.1f}% against {what}, {fmt_ms(ref)} ms")
    body.append(f'<line x1="{LEFT}" y1="{f.y(0):.1f}" x2="{W - RIGHT}" y2="{f.y(0):.1f}" stroke="#1F2328" '
                f'stroke-width="0.8"><title>{_e(what)}: {_e(fmt_ms(ref))} ms</title></line>')
    # The baseline each run was judged against: a short level per run, absent where a run had none.
    body.append(f'<g clip-path="url(#plot-latency-{len(pcts)})">')
    for i, b in enumerate(base):
        if b is not None:
            body.append(f'<line class="baseline" data-i="{i}" x1="{f.x(i - 0.5):.1f}" x2="{f.x(i + 0.5):.1f}" '
                        f'y1="{f.y(b):.1f}" y2="{f.y(b):.1f}" stroke="#1F2328" stroke-dasharray="2 2"/>')
    body.append("</g>")
    ys = [f.y(v) for v in pcts]
    body.append(_line(f, ys, "#8250DF", "values"))
    body += _step_marks(f, steps)
    tips = [_hover(series, i, f"median {fmt_ms(v)} ms ({_pct(v, ref):+.1f}% against {what})")
            for i, v in enumerate(series.values)]
    body += _points(f, series, ys, tips, [STATUS_COLORS.get(p.status, "#8250DF") for p in series.points])
    return _svg("latency", f"median per run (the gate's), % against {what} ({fmt_ms(ref)} ms), and the baseline "
                "each run was judged against", len(pcts), body)


def category_chart(series: Sequence[Series]) -> str:
    """Per-category medians stacked (one bar per run and category) over the runs of the e2e series, from 0 ms."""
    if not series:
        return ""
    n = len(series[0].points)
    cats = [s for s in series if len(s.points) == n]
    if not cats:
        return ""
    totals = [sum(s.points[i].value for s in cats) for i in range(n)]
    f = _Frame(n, 0.0, max(totals) * 1.08 or 1.0)
    body = _axes(f, cats[0], lambda t: f"{fmt_ms(t)} ms", f"y: 0 … {fmt_ms(f.hi)} ms")
    below = [0.0] * n
    half = (W - LEFT - RIGHT) / max(n - 1, 1) / 2 if n > 1 else 12.0
    for s in cats:
        name = s.metric.removeprefix(CATEGORY_PREFIX)
        color = category_color(name)
        body.append(f'<g class="category" fill="{color}" fill-opacity="0.85" clip-path="url(#plot-categories-{n})">'
                    f"<title>{_e(name)}</title>")
        for i in range(n):
            top = below[i] + s.points[i].value
            body.append(f'<rect data-i="{i}" x="{f.x(i) - half:.1f}" width="{2 * half:.2f}" y="{f.y(top):.1f}" '
                        f'height="{f.y(below[i]) - f.y(top):.1f}"/>')
            below[i] = top
        body.append("</g>")
    x = LEFT + 260.0
    for s in cats:
        name = s.metric.removeprefix(CATEGORY_PREFIX)
        body.append(f'<rect x="{x:.0f}" y="7" width="10" height="10" fill="{category_color(name)}"/>'
                    f'<text x="{x + 14:.0f}" y="16" class="tick">{_e(name)}</text>')
        x += 14 + 6.6 * len(name) + 12
    return _svg("categories", "categories (median ms, stacked, from 0)", n, body)


def ratio_label_of(series: Series) -> str:
    label = series.ratio_label or "on/off ratio"
    if series.emulated and "emulated" not in label.lower():
        label = "Emulated time ratio (not a speedup)"
    return label


def ratio_chart(series: Series, steps: Sequence[FoundStep]) -> str:
    """The on/off ratio per run from 0 (an honest scale for a ratio), 1x marked."""
    vals = series.values
    f = _Frame(len(vals), 0.0, max([*vals, 1.0]) * 1.15)
    label = ratio_label_of(series)
    body = _axes(f, series, lambda t: f"{t:.2f}×", f"y: 0 … {f.hi:.2f}×")
    body.append(f'<line x1="{LEFT}" y1="{f.y(1):.1f}" x2="{W - RIGHT}" y2="{f.y(1):.1f}" stroke="#1F2328" '
                'stroke-dasharray="2 3"><title>1× (no difference)</title></line>')
    ys = [f.y(v) for v in vals]
    body.append(_line(f, ys, "#57606A", "values"))
    body += _step_marks(f, steps)
    body += _points(f, series, ys, [_hover(series, i, f"{label} {v:.2f}×") for i, v in enumerate(vals)],
                    ["#57606A"] * len(vals))
    return _svg("ratio", f"{label} per run", len(vals), body)


def count_chart(series: Series, steps: Sequence[FoundStep]) -> str:
    """Instructions executed under emulation per execution, per run, as percent against the first run (at least
    +-5 %): exact counts, so the line is flat between program changes and steps exactly at them."""
    ref = series.points[0].value
    pcts = [_pct(v, ref) for v in series.values]
    lo, hi = min(*pcts, -MIN_SPAN_PCT), max(*pcts, MIN_SPAN_PCT)
    pad = (hi - lo) * 0.06
    f = _Frame(len(pcts), lo - pad, hi + pad)
    body = _axes(f, series, lambda t: f"{t:+.0f}%" if abs(t) >= 1 or t == 0 else f"{t:+.1f}%",
                 f"y: {f.lo:+.1f}% … {f.hi:+.1f}% against the first run, {ref:,.0f} instructions")
    ys = [f.y(v) for v in pcts]
    body.append(_line(f, ys, "#CC79A7", "values"))
    body += _step_marks(f, steps)
    tips = [_hover(series, i, f"{v:,.0f} instructions executed under emulation ({_pct(v, ref):+.3f}%)")
            for i, v in enumerate(series.values)]
    body += _points(f, series, ys, tips, ["#CC79A7"] * len(pcts))
    return _svg("instructions", "instructions executed under emulation per execution (a count, not a time), % against "
                f"the first run ({ref:,.0f})", len(pcts), body)


def sparkline(series: Series) -> str:
    """A small line of the whole series on the latency chart's scale (percent against its reference, +-5 % at
    least; a ratio from 0), the newest run dotted."""
    w, h = 160, 28
    if series.metric == RATIO:
        vals, lo, hi = series.values, 0.0, max([*series.values, 1.0]) * 1.1
    else:
        ref, _ = reference_ms(series)
        vals = [_pct(v, ref) for v in series.values]
        lo, hi = min(*vals, -MIN_SPAN_PCT), max(*vals, MIN_SPAN_PCT)
    n = len(vals)

    def xy(i: int, v: float) -> str:
        x = 2 + (w - 4) * (i / (n - 1) if n > 1 else 0.5)
        return f"{x:.1f},{2 + (h - 4) * (1 - (v - lo) / (hi - lo)):.1f}"

    last = xy(n - 1, vals[-1]).split(",")
    return (f'<svg class="spark" width="{w}" height="{h}" viewBox="0 0 {w} {h}"><polyline points="'
            + " ".join(xy(i, v) for i, v in enumerate(vals))
            + f'" fill="none" stroke="#8250DF" stroke-width="1"/><circle cx="{last[0]}" cy="{last[1]}" r="2" '
            'fill="#1F2328"/></svg>')


def _anchor(test_id: str, identity_id: str) -> str:
    return "s-" + "".join(c if c.isalnum() else "-" for c in f"{test_id}-{identity_id}")


def overview_table(groups: Mapping[tuple[str, str], Sequence[Series]], steps: Sequence[FoundStep]) -> str:
    """One row per test x device and metric (latency, on/off ratio): newest value, change against its baseline and
    against the previous run, the steps found, a sparkline."""
    rows = []
    for (test_id, identity_id), group in groups.items():
        for s in group:
            if s.metric not in (E2E, RATIO, INSTRUCTIONS):
                continue
            last = s.points[-1]
            prev = s.points[-2] if len(s.points) > 1 else None
            if s.metric == E2E:
                latest = f"{fmt_ms(last.value)} ms"
                vs_base = f"{_pct(last.value, last.baseline_ms):+.1f}%" if last.baseline_ms else "no baseline"
                what = "median" + (" (emulated)" if s.emulated else "")
            elif s.metric == INSTRUCTIONS:
                latest, vs_base, what = f"{last.value:,.0f}", "—", "instructions executed under emulation"
            else:
                latest, vs_base, what = f"{last.value:.2f}×", "—", ratio_label_of(s)
            vs_prev = f"{_pct(last.value, prev.value):+.1f}%" if prev else "—"
            own = [st for st in steps if (st.test_id, st.identity_id, st.metric) == (test_id, identity_id, s.metric)]
            found = "none" if not own else (f"{len(own)}; newest {own[-1].pct:+.1f}% at "
                                            f"<code>{_e(own[-1].commit_range)}</code>"
                                            + (" (ack)" if own[-1].acknowledged else ""))
            kind = f" {own[-1].kind}" if own and not own[-1].acknowledged else ""
            rows.append(f"<tr class='overview{kind}'><td><a href='#{_anchor(test_id, identity_id)}'>"
                        f"{_e(s.label or test_id)}</a><br><code class='muted'>{_e(test_id)}</code></td>"
                        f"<td><code>{_e(identity_id)}</code></td><td>{_e(what)}</td><td>{len(s.points)}</td>"
                        f"<td class='num'>{_e(latest)}</td><td class='num'>{_e(vs_base)}</td>"
                        f"<td class='num'>{_e(vs_prev)}</td><td>{found}</td><td>{sparkline(s)}</td></tr>")
    return ("<table class='overview'><tr><th>test</th><th>device</th><th>metric</th><th>runs</th><th>latest</th>"
            "<th>vs its baseline</th><th>vs previous run</th><th>steps found</th><th>history (±5 % at least)</th>"
            "</tr>" + "".join(rows) + "</table>")


SCRIPT = """
const DOTS = %DOTS%;
const tip = document.getElementById('tip');
document.addEventListener('mouseover', e => {
  const c = e.target.closest && e.target.closest('circle.point');
  if (c) { tip.textContent = c.dataset.tip; tip.style.display = 'block'; }
});
document.addEventListener('mousemove', e => {
  if (tip.style.display === 'block') { tip.style.left = (e.pageX + 12) + 'px'; tip.style.top = (e.pageY + 12) + 'px'; }
});
document.addEventListener('mouseout', e => {
  if (e.target.closest && e.target.closest('circle.point')) tip.style.display = 'none';
});
// Zoom: every element of a chart placed by run index (data-i) is moved to the runs in view, a..b.
function place(svg, a, b) {
  const n = +svg.dataset.n, L = +svg.dataset.left, R = +svg.dataset.right;
  a = Math.max(0, Math.min(a, n - 1)); b = Math.max(a, Math.min(b, n - 1));
  const span = Math.max(b - a, 1), X = i => L + (R - L) * (n > 1 ? (i - a) / span : 0.5);
  const shown = b - a + 1, every = Math.max(1, Math.ceil(shown / ((R - L) / 70)));
  svg.dataset.a = a; svg.dataset.b = b;
  svg.querySelectorAll('[data-i]').forEach(el => {
    const i = +el.dataset.i, inView = i >= a - 0.5 && i <= b + 0.5;
    let show = inView;
    if (el.tagName === 'circle') { show = inView && shown <= DOTS; el.setAttribute('cx', X(i).toFixed(1)); }
    else if (el.tagName === 'rect') {
      const h = n > 1 ? (R - L) / span / 2 : 12;
      el.setAttribute('x', (X(i) - h).toFixed(1)); el.setAttribute('width', (2 * h).toFixed(2));
    } else if (el.tagName === 'line') {
      el.setAttribute('x1', X(i - 0.5).toFixed(1)); el.setAttribute('x2', X(i + 0.5).toFixed(1));
    } else if (el.tagName === 'text') { show = inView && (i - a) % every === 0; el.setAttribute('x', X(i).toFixed(1)); }
    else if (el.tagName === 'g') {
      const x = X(i), line = el.querySelector('line'), label = el.querySelector('text');
      line.setAttribute('x1', x.toFixed(1)); line.setAttribute('x2', x.toFixed(1));
      const right = x + 4 + +el.dataset.labelWidth < +svg.getAttribute('width');
      label.setAttribute('x', (right ? x + 4 : x - 4).toFixed(1));
      label.setAttribute('text-anchor', right ? 'start' : 'end');
    }
    el.style.display = show ? '' : 'none';
  });
  svg.querySelectorAll('polyline.values').forEach(pl => {
    const ys = pl.dataset.ys.split(' '), pts = [];
    for (let i = a; i <= b; i++) pts.push(X(i).toFixed(1) + ',' + ys[i]);
    pl.setAttribute('points', pts.join(' '));
  });
}
function zoomSection(sec, a, b) {
  sec.querySelectorAll('svg.chart').forEach(svg => place(svg, a, b));
  const first = sec.querySelector('svg.chart');
  const note = sec.querySelector('.inview');
  if (first && note) note.textContent = 'runs ' + (+first.dataset.a + 1) + '–' + (+first.dataset.b + 1) + ' of ' +
    first.dataset.n + ' in view (drag across a chart to zoom, double-click for all)';
}
function lastRuns(k) {
  document.querySelectorAll('section.series').forEach(sec => {
    const svg = sec.querySelector('svg.chart'); if (!svg) return;
    const n = +svg.dataset.n; zoomSection(sec, k ? Math.max(0, n - k) : 0, n - 1);
  });
}
document.querySelectorAll('button[data-last]').forEach(btn =>
  btn.addEventListener('click', () => lastRuns(+btn.dataset.last)));
document.querySelectorAll('section.series').forEach(sec => {
  let from = null;
  const runAt = (svg, e) => {
    const r = svg.getBoundingClientRect(), L = +svg.dataset.left, R = +svg.dataset.right;
    const a = +(svg.dataset.a || 0), b = +(svg.dataset.b || (+svg.dataset.n - 1));
    const fx = ((e.clientX - r.left) * (+svg.getAttribute('width') / r.width) - L) / (R - L);
    return Math.round(a + Math.max(0, Math.min(1, fx)) * Math.max(b - a, 1));
  };
  sec.querySelectorAll('svg.chart').forEach(svg => {
    svg.addEventListener('mousedown', e => { from = runAt(svg, e); e.preventDefault(); });
    svg.addEventListener('mouseup', e => {
      if (from === null) return;
      const to = runAt(svg, e);
      if (Math.abs(to - from) >= 2) zoomSection(sec, Math.min(from, to), Math.max(from, to));
      from = null;
    });
    svg.addEventListener('dblclick', () => zoomSection(sec, 0, +svg.dataset.n - 1));
  });
  zoomSection(sec, 0, 1e9);
});
// A link can open the page zoomed: page.html#last=100
const wanted = /last=(\\d+)/.exec(location.hash);
if (wanted) lastRuns(+wanted[1]);
""".replace("%DOTS%", str(DOTS_UP_TO))

CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif; color: #1F2328;
       margin: 24px; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; } .muted { color: #57606A; font-size: 13px; }
.scroll { overflow-x: auto; } svg text { font-size: 11px; fill: #1F2328; } svg .tick { fill: #57606A; }
svg .ctitle { font-weight: 600; } svg .steplabel { font-weight: 600; } svg.chart { cursor: crosshair; }
svg .axis { fill: #57606A; }
table { border-collapse: collapse; font-size: 13px; margin-bottom: 12px; }
td, th { border: 1px solid #D8DEE4; padding: 3px 8px; white-space: nowrap; vertical-align: middle; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.overview.regression td:nth-child(8) { color: #CF222E; font-weight: 600; }
tr.overview.improvement td:nth-child(8) { color: #1A7F37; font-weight: 600; }
.zoom button { font-size: 13px; margin-right: 4px; }
#tip { position: absolute; display: none; background: #FFF; border: 1px solid #8C959F; padding: 4px 8px;
       font-size: 12px; white-space: pre; pointer-events: none; box-shadow: 0 2px 6px rgba(0,0,0,.15); }
"""


def render_page(series: Sequence[Series], steps: Sequence[FoundStep], creeps: Sequence[Creep] = (), *,
                title: str = "pytest-sme2 history") -> str:
    """The whole page: an overview of every series, the steps table, then one section per test x device identity."""
    groups: dict[tuple[str, str], list[Series]] = {}
    for s in series:
        groups.setdefault((s.test_id, s.identity_id), []).append(s)
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
             f"<style>{CSS}</style></head><body><h1>{_e(title)}</h1>"]
    runs = max((len(s.points) for s in series), default=0)
    parts.append(f"<p class='muted'>{len(groups)} test(s) × device, up to {runs} run(s) each. Steps: E-divisive "
                 "means with a t-test (docs/history.md). Latency is drawn as percent against the baseline, on an "
                 f"axis of at least ±{MIN_SPAN_PCT:g} % that states its range; hover a point for its commit.</p>")
    parts.append("<h2>Overview</h2>" + overview_table(groups, steps))
    parts.append("<p class='zoom'>Runs in view: <button data-last='0'>all</button><button data-last='500'>last 500"
                 "</button><button data-last='100'>last 100</button><button data-last='30'>last 30</button> "
                 "<span class='muted'>or drag across a chart; double-click it for all runs.</span></p>")
    if steps:
        parts.append("<div class='scroll'><table class='steps'><tr><th>test</th><th>device</th><th>metric</th>"
                     "<th>step</th>"
                     "<th>commits</th><th>confidence</th><th>artifact</th><th>acknowledged</th></tr>")
        for st in steps:
            parts.append(f"<tr class='{st.kind}'><td>{_e(st.test_id)}</td><td>{_e(st.identity_id)}</td>"
                         f"<td>{_e(st.metric)}</td><td>{st.pct:+.1f}% ({_e(_step_value(st))})</td>"
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
        parts.append(f"<section class='series' id='{_anchor(test_id, identity_id)}' data-test='{_e(test_id)}' "
                     f"data-device='{_e(identity_id)}'>"
                     f"<h2>{_e(first.label or test_id)}</h2><p class='muted'><code>{_e(test_id)}</code> on "
                     f"<code>{_e(identity_id)}</code> {_e(first.identity)}"
                     f"{' — emulated time, not a device' if first.emulated else ''}</p><p class='muted inview'></p>")
        if e2e is not None:
            own = [s for s in steps if (s.test_id, s.identity_id, s.metric) == (test_id, identity_id, E2E)]
            parts.append(f"<div class='scroll'>{latency_chart(e2e, own)}</div>")
        cats = [s for s in group if s.metric.startswith(CATEGORY_PREFIX)]
        if cats:
            parts.append(f"<div class='scroll'>{category_chart(cats)}</div>")
        if RATIO in by_metric:
            own = [s for s in steps if (s.test_id, s.identity_id, s.metric) == (test_id, identity_id, RATIO)]
            parts.append(f"<div class='scroll'>{ratio_chart(by_metric[RATIO], own)}</div>")
        if INSTRUCTIONS in by_metric:
            own = [s for s in steps if (s.test_id, s.identity_id, s.metric) == (test_id, identity_id, INSTRUCTIONS)]
            parts.append(f"<div class='scroll'>{count_chart(by_metric[INSTRUCTIONS], own)}</div>")
        parts.append("</section>")
    parts.append(f"<div id='tip'></div><script>{SCRIPT}</script></body></html>")
    return "\n".join(parts) + "\n"


__all__ = ["render_page", "short"]
