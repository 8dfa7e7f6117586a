"""Charts as native SVG text: panels of lines, markers, error bars and bars over a log 2
axis of GPU counts (or named categories), a linear y axis from 0, and one legend.

Why not matplotlib: drawing the report's figures with it (text as paths, so that no font
is looked up) took most of the page's time; these charts are a few hundred elements of
plain SVG, their text ``<text>`` in a generic font family (the browser's own sans-serif:
nothing fetched, the page's CSP unchanged). The bytes are a pure function of the data:
coordinates with one decimal, values with Python's shortest round-trip ``repr``, no
id, clock or locale read. Every mark of a data point carries its value (``data-gpus``,
``data-v``: the table's value before any scaling), so a reader or a test can map a
figure back to its table.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

from campaign.report.html import esc

# matplotlib's default cycle (tab10), so a series has the colour harvest's PNG gives it
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf")
PLOT_W, PLOT_H = 460, 300  # the plot area of one panel (px of the viewBox)
LEFT, TOP, BOTTOM, RIGHT = 66, 30, 54, 18  # a panel's margins: tick labels, title, axis labels
PANEL_W, PANEL_H = LEFT + PLOT_W + RIGHT, TOP + PLOT_H + BOTTOM
CHAR_W = 6.6  # a 12 px sans-serif character, about: sizes the legend's column


def color(i: int) -> str:
    """The ``i``-th series colour (matplotlib's ``C{i % 10}``)."""
    return COLORS[i % len(COLORS)]


def px(v: float) -> str:
    """A coordinate: one decimal, ``.`` whatever the locale."""
    return f"{v:.1f}"


def value(v) -> str:
    """A data value as text: ints as ints, floats as Python's shortest round-trip form."""
    if isinstance(v, bool) or v is None:
        return str(v)
    return str(v) if isinstance(v, int) else repr(float(v))


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Ticks 0, s, 2s, ... covering ``top``, ``s`` a 1, 2, 2.5 or 5 x 10^k step."""
    if not top > 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    n = math.ceil(top / step - 1e-9)
    return [round(i * step, 12) for i in range(n + 1)]


def tick_label(v: float) -> str:
    return f"{v:g}"


class Panel:
    """One plot: a title, a y axis from 0 to ``ytop`` (rounded up to a tick), and either a
    log 2 x axis of GPU counts (``gpus``) or categories at 0, 1, ... (``categories``:
    (x, label) pairs, a label's lines split on newlines). Marks are added in data
    coordinates and drawn in the order added."""

    def __init__(self, title: str, ylabel: str, *, ytop: float, gpus: Sequence[int] = (),
                 categories: Sequence[tuple[float, str]] = (), xlim: Optional[tuple[float, float]] = None,
                 xlabel: str = "GPUs (N)"):
        self.title, self.ylabel, self.xlabel = title, ylabel, xlabel
        self.yticks = nice_ticks(ytop)
        self.ytop = self.yticks[-1]
        self.gpus, self.categories = list(gpus), list(categories)
        if self.gpus:
            self.log = True
            lo, hi = min(self.gpus) / 1.25, max(self.gpus) * 1.25
            self.x0, self.x1 = math.log2(lo), math.log2(hi)
        else:
            self.log = False
            xs = [x for x, _ in self.categories] or [0.0]
            self.x0, self.x1 = xlim or (min(xs) - 0.6, max(xs) + 0.6)
        self.marks: list[str] = []

    def x(self, v: float) -> float:
        """A data x (GPU count or category position) in px of the panel."""
        t = math.log2(v) if self.log else v
        return LEFT + (t - self.x0) / (self.x1 - self.x0) * PLOT_W

    def y(self, v: float) -> float:
        return TOP + PLOT_H - v / self.ytop * PLOT_H

    def line(self, pts: Sequence[tuple[float, float]], stroke: str, *, dash: bool = False, opacity: float = 1.0,
             attrs: str = "") -> None:
        """A polyline through (x, y) data points (nothing for fewer than two)."""
        if len(pts) < 2:
            return
        d = " ".join(f"{px(self.x(a))},{px(self.y(b))}" for a, b in pts)
        extra = (" stroke-dasharray=\"6 4\"" if dash else "") + \
            (f" stroke-opacity=\"{opacity:g}\"" if opacity < 1 else "")
        self.marks.append(f"<polyline points=\"{d}\" fill=\"none\" stroke=\"{stroke}\" stroke-width=\"1.6\""
                          f"{extra}{attrs}/>")

    def hline(self, v: float, stroke: str = "#000", *, dash: bool = True, opacity: float = 0.6) -> None:
        """A horizontal line at data y ``v`` across the plot."""
        extra = " stroke-dasharray=\"6 4\"" if dash else ""
        self.marks.append(f"<line x1=\"{px(LEFT)}\" x2=\"{px(LEFT + PLOT_W)}\" y1=\"{px(self.y(v))}\" "
                          f"y2=\"{px(self.y(v))}\" stroke=\"{stroke}\" stroke-opacity=\"{opacity:g}\"{extra}/>")

    def band(self, lower: Sequence[tuple[float, float]], upper: Sequence[tuple[float, float]], fill: str) -> None:
        """A shaded interval between two curves (data points, the same x's)."""
        pts = list(lower) + list(reversed(upper))
        d = " ".join(f"{px(self.x(a))},{px(self.y(b))}" for a, b in pts)
        self.marks.append(f"<polygon points=\"{d}\" fill=\"{fill}\" fill-opacity=\"0.15\" stroke=\"none\"/>")

    def vline(self, x: float, stroke: str, *, attrs: str = "") -> None:
        """A dashed vertical line at data x ``x`` across the plot."""
        cx = px(self.x(x))
        self.marks.append(f"<line x1=\"{cx}\" x2=\"{cx}\" y1=\"{px(TOP)}\" y2=\"{px(TOP + PLOT_H)}\" "
                          f"stroke=\"{stroke}\" stroke-opacity=\"0.6\" stroke-dasharray=\"2 3\"{attrs}/>")

    def marker(self, x: float, yv: float, fill: str, *, hollow: bool = False, attrs: str = "") -> None:
        """A point's circle (hollow: white inside), carrying ``attrs`` (its data-* values)."""
        inside = "#fff" if hollow else fill
        self.marks.append(f"<circle cx=\"{px(self.x(x))}\" cy=\"{px(self.y(yv))}\" r=\"3.5\" fill=\"{inside}\" "
                          f"stroke=\"{fill}\" stroke-width=\"1.4\"{attrs}/>")

    def errorbar(self, x: float, lo: float, hi: float, stroke: str) -> None:
        """A vertical interval from ``lo`` to ``hi`` with caps."""
        cx, y0, y1 = self.x(x), self.y(lo), self.y(hi)
        self.marks.append(f"<path d=\"M{px(cx)} {px(y0)}V{px(y1)}M{px(cx - 3)} {px(y0)}h6M{px(cx - 3)} {px(y1)}h6\" "
                          f"stroke=\"{stroke}\" fill=\"none\"/>")

    def bar(self, x: float, bottom: float, height: float, width: float, fill: str, attrs: str = "") -> None:
        """A bar centred on data x ``x``, ``width`` in data units, from ``bottom`` up ``height``."""
        left, right = self.x(x - width / 2), self.x(x + width / 2)
        top, base = self.y(bottom + height), self.y(bottom)
        self.marks.append(f"<rect x=\"{px(left)}\" y=\"{px(top)}\" width=\"{px(right - left)}\" "
                          f"height=\"{px(max(base - top, 0.0))}\" fill=\"{fill}\" stroke=\"#fff\" "
                          f"stroke-width=\"0.5\"{attrs}/>")

    def tick(self, x: float, yv: float, half_width: float, attrs: str = "") -> None:
        """A black horizontal tick ``half_width`` data units either side of x (a measured total)."""
        self.marks.append(f"<line x1=\"{px(self.x(x - half_width))}\" x2=\"{px(self.x(x + half_width))}\" "
                          f"y1=\"{px(self.y(yv))}\" y2=\"{px(self.y(yv))}\" stroke=\"#000\" "
                          f"stroke-width=\"2\"{attrs}/>")

    def label(self, x: float, yv: float, text: str, fill: str = "#000", dy: float = -4) -> None:
        """Small text centred at a data point (a bar's name)."""
        self.marks.append(f"<text x=\"{px(self.x(x))}\" y=\"{px(self.y(yv) + dy)}\" text-anchor=\"middle\" "
                          f"font-size=\"10\" fill=\"{fill}\">{esc(text)}</text>")

    def note(self, text: str) -> None:
        """Text in the middle of the plot (no data)."""
        self.marks.append(f"<text x=\"{px(LEFT + PLOT_W / 2)}\" y=\"{px(TOP + PLOT_H / 2)}\" "
                          f"text-anchor=\"middle\">{esc(text)}</text>")

    def group(self, attrs: str, body_from: int) -> None:
        """Wrap the marks added since index ``body_from`` in one ``<g>`` carrying ``attrs``."""
        inner = "".join(self.marks[body_from:])
        del self.marks[body_from:]
        self.marks.append(f"<g{attrs}>{inner}</g>")

    def render(self, ox: float, oy: float) -> str:
        """The panel at (ox, oy) of its figure: grid, axes, ticks, labels, then its marks."""
        out = [f"<g transform=\"translate({px(ox)},{px(oy)})\">"]
        bottom = TOP + PLOT_H
        for t in self.yticks:
            y = px(self.y(t))
            out.append(f"<line x1=\"{px(LEFT)}\" x2=\"{px(LEFT + PLOT_W)}\" y1=\"{y}\" y2=\"{y}\" stroke=\"#000\" "
                       f"stroke-opacity=\"0.12\"/><text x=\"{px(LEFT - 6)}\" y=\"{y}\" text-anchor=\"end\" "
                       f"dominant-baseline=\"middle\">{tick_label(t)}</text>")
        xticks = [(g, str(g)) for g in self.gpus] if self.log else self.categories
        for xv, text in xticks:
            x = px(self.x(xv))
            if self.log:
                out.append(f"<line x1=\"{x}\" x2=\"{x}\" y1=\"{px(TOP)}\" y2=\"{px(bottom)}\" stroke=\"#000\" "
                           f"stroke-opacity=\"0.12\"/>")
            lines = str(text).split("\n")
            spans = "".join(f"<tspan x=\"{x}\" dy=\"{0 if i == 0 else 13}\">{esc(s)}</tspan>"
                            for i, s in enumerate(lines))
            out.append(f"<text y=\"{px(bottom + 16)}\" text-anchor=\"middle\">{spans}</text>")
        out.append(f"<rect x=\"{px(LEFT)}\" y=\"{px(TOP)}\" width=\"{px(PLOT_W)}\" height=\"{px(PLOT_H)}\" "
                   f"fill=\"none\" stroke=\"#444\"/>")
        out.append(f"<text x=\"{px(LEFT + PLOT_W / 2)}\" y=\"{px(TOP - 10)}\" text-anchor=\"middle\" "
                   f"font-size=\"14\">{esc(self.title)}</text>")
        out.append(f"<text x=\"{px(LEFT + PLOT_W / 2)}\" y=\"{px(PANEL_H - 6)}\" text-anchor=\"middle\">"
                   f"{esc(self.xlabel)}</text>")
        out.append(f"<text transform=\"translate(14,{px(TOP + PLOT_H / 2)}) rotate(-90)\" text-anchor=\"middle\">"
                   f"{esc(self.ylabel)}</text>")
        out += self.marks
        out.append("</g>")
        return "".join(out)


def _swatch(style: str, fill: str, x: float, y: float) -> str:
    """A legend entry's symbol: line, dash, filled or hollow point, bar, or tick."""
    if style in ("line", "dash"):
        dash = " stroke-dasharray=\"6 4\"" if style == "dash" else ""
        mark = f"<circle cx=\"{px(x + 11)}\" cy=\"{px(y)}\" r=\"3\" fill=\"{fill}\"/>" if style == "line" else ""
        return f"<line x1=\"{px(x)}\" x2=\"{px(x + 22)}\" y1=\"{px(y)}\" y2=\"{px(y)}\" stroke=\"{fill}\" " \
               f"stroke-width=\"1.6\"{dash}/>" + mark
    if style in ("point", "hollow", "faded"):
        inside = "#fff" if style == "hollow" else fill
        fade = " opacity=\"0.4\"" if style == "faded" else ""
        return f"<circle cx=\"{px(x + 11)}\" cy=\"{px(y)}\" r=\"3.5\" fill=\"{inside}\" stroke=\"{fill}\"{fade}/>"
    if style == "tick":
        return f"<line x1=\"{px(x + 2)}\" x2=\"{px(x + 20)}\" y1=\"{px(y)}\" y2=\"{px(y)}\" stroke=\"#000\" " \
               f"stroke-width=\"2\"/>"
    return f"<rect x=\"{px(x + 4)}\" y=\"{px(y - 5)}\" width=\"14\" height=\"10\" fill=\"{fill}\"/>"


def legend_width(entries: Sequence[tuple[str, str, str]], title: str = "") -> float:
    chars = max([len(label) for label, _, _ in entries] + [len(title)])
    return 34 + CHAR_W * chars if entries else 0.0


def render_legend(entries: Sequence[tuple[str, str, str]], x: float, y: float, title: str = "") -> str:
    """Entries (label, colour, style) one a line from (x, y) down."""
    out = []
    if title:
        out.append(f"<text x=\"{px(x)}\" y=\"{px(y)}\" font-weight=\"600\">{esc(title)}</text>")
        y += 17
    for label, fill, style in entries:
        out.append(_swatch(style, fill, x, y - 4) + f"<text x=\"{px(x + 28)}\" y=\"{px(y)}\">{esc(label)}</text>")
        y += 17
    return "".join(out)


def figure_svg(name: str, panels: Sequence[Panel], legend: Sequence[tuple[str, str, str]] = (),
               suptitle: str = "", legend_title: str = "") -> str:
    """Panels side by side, the legend in a column right of them, an optional title above:
    one ``<svg>`` element sized by its viewBox (the page's CSS scales it to the column)."""
    head = 24 if suptitle else 0
    lw = legend_width(legend, legend_title)
    legend_h = TOP + 17 * (len(legend) + (1 if legend_title else 0))
    width = PANEL_W * len(panels) + lw + (12 if lw else 0)
    height = head + max(PANEL_H, legend_h + 10)
    body = [p.render(i * PANEL_W, head) for i, p in enumerate(panels)]
    if suptitle:
        body.insert(0, f"<text x=\"{px(width / 2)}\" y=\"17\" text-anchor=\"middle\" font-size=\"15\">"
                       f"{esc(suptitle)}</text>")
    if legend:
        body.append(render_legend(legend, PANEL_W * len(panels) + 4, head + TOP + 8, legend_title))
    return (f"<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {px(width)} {px(height)}\" "
            f"width=\"{px(width)}\" height=\"{px(height)}\" role=\"img\" aria-label=\"{esc(name)}\" "
            f"data-chart=\"{esc(name)}\" font-family=\"sans-serif\" font-size=\"12\" fill=\"#1b1f24\">"
            + "".join(body) + "</svg>")
