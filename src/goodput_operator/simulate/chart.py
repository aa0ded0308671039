"""A line chart as SVG, without a plotting library: goodput against fleet size or spares,
one line per policy."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

COLORS = {"ours": "#1b7f3b", "kubernetes": "#c0392b", "kueue": "#8e44ad", "kueue-30s": "#bb8fce",
          "hyperpod": "#d68910"}
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 640, 360, 60, 130, 40, 50


def line_chart(title: str, x_label: str, series: Mapping[str, Sequence[tuple[float, float]]],
               log_x: bool = False, y_label: str = "goodput %") -> str:
    """SERIES: name -> (x, y) points, y in percent."""
    points = [p for line in series.values() for p in line]
    if not points:
        return ""

    def fx(x: float) -> float:
        return math.log10(x) if log_x else x

    xs = [fx(x) for x, _ in points]
    x0, x1 = min(xs), max(xs)
    y0 = math.floor(min(y for _, y in points) / 5) * 5
    y1 = 100.0
    x1 = x1 if x1 > x0 else x0 + 1
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (fx(x) - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return TOP + (y1 - y) / max(y1 - y0, 1e-9) * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="14">'
           f'{escape(title)}</text>']
    step = 5 if y1 - y0 > 10 else 1
    for tick in range(int(y0), int(y1) + 1, step):
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{py(tick):.1f}" '
                   f'y2="{py(tick):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{py(tick) + 4:.1f}" text-anchor="end">'
                   f'{tick}</text>')
    for x in sorted({x for x, _ in points}):
        label = f"{x / 1000:g}k" if x >= 1000 else f"{x:g}"
        out.append(f'<text x="{px(x):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">'
                   f'{label}</text>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 10}" text-anchor="middle">'
               f'{escape(x_label)}</text>')
    out.append(f'<text x="14" y="{TOP + plot_h / 2}" text-anchor="middle" '
               f'transform="rotate(-90 14 {TOP + plot_h / 2})">{escape(y_label)}</text>')
    for index, (name, line) in enumerate(series.items()):
        color = COLORS.get(name, "#555")
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in sorted(line))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" '
                   f'points="{path}"/>')
        for x, y in line:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
        legend_y = TOP + 10 + 18 * index
        out.append(f'<rect x="{WIDTH - RIGHT + 14}" y="{legend_y - 9}" width="12" '
                   f'height="12" fill="{color}"/>')
        out.append(f'<text x="{WIDTH - RIGHT + 32}" y="{legend_y + 1}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)
