"""Minimal SVG charts (no plotting library needed): line charts of series
and scatter plots, for the benchmark reports."""
from __future__ import annotations

import math
from xml.sax.saxutils import escape

WIDTH, HEIGHT, MARGIN = 640, 400, 60
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")


def _scale(values, low_px, high_px, log: bool = False):
    warp = math.log10 if log else (lambda v: v)
    low, high = warp(min(values)), warp(max(values))
    span = (high - low) or 1.0
    return lambda v: low_px + (warp(v) - low) / span * (high_px - low_px)


def chart(series: dict[str, list[tuple[float, float]]], title: str, x_label: str, y_label: str,
          lines: bool | set[str] = True, log: bool = False, y_max: float | None = None) -> str:
    """An SVG document: one polyline (or set of dots) per named series;
    `lines` as a set names the series drawn as lines, the rest as dots.
    `log`: both axes logarithmic (positive values); `y_max`: y values above
    it are drawn at it (the axis says so)."""
    if y_max is not None:
        series = {name: [(x, min(y, y_max)) for x, y in values] for name, values in series.items()}
        y_label += f" (clipped at {y_max:.4g})"
    points = [p for values in series.values() for p in values]
    sx = _scale([p[0] for p in points], MARGIN, WIDTH - 20, log)
    sy = _scale([p[1] for p in points], HEIGHT - MARGIN, 30, log)
    if log:
        x_label, y_label = x_label + ", log scale", y_label + ", log scale"
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" '
             f'font-size="12">', f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
             f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="14">{escape(title)}</text>',
             f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - 20}" y2="{HEIGHT - MARGIN}" stroke="black"/>',
             f'<line x1="{MARGIN}" y1="30" x2="{MARGIN}" y2="{HEIGHT - MARGIN}" stroke="black"/>',
             f'<text x="{WIDTH / 2}" y="{HEIGHT - 20}" text-anchor="middle">{escape(x_label)}</text>',
             f'<text x="15" y="{HEIGHT / 2}" text-anchor="middle" transform="rotate(-90 15 {HEIGHT / 2})">'
             f'{escape(y_label)}</text>']
    for axis, values, scale in (("x", [p[0] for p in points], sx), ("y", [p[1] for p in points], sy)):
        for value in (min(values), max(values)):
            x, y = (scale(value), HEIGHT - MARGIN + 15) if axis == "x" else (MARGIN - 5, scale(value) + 4)
            anchor = "middle" if axis == "x" else "end"
            parts.append(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{value:.4g}</text>')
    for index, (name, values) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        coords = [(sx(x), sy(y)) for x, y in values]
        if lines is True or (isinstance(lines, set) and name in lines):
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        else:
            parts.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in coords)
        parts.append(f'<text x="{WIDTH - 160}" y="{45 + 16 * index}" fill="{colour}">{escape(name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
