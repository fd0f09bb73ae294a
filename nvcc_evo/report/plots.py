"""Plots with matplotlib (the `report` extra): a search's Pareto front, its
convergence (best so far against evaluations and wall time, the baseline
drawn) and the GA-vs-random chart. `--report` and benchmarks/ use them;
matplotlib is imported here only, and only when a plot is drawn (never on
the compile path, never by a retune).

Each function takes plain numbers and returns a matplotlib Figure; `svg`
turns one into SVG text (for inlining in an HTML page), `save` writes it.
"""
from __future__ import annotations

import importlib.util
import io
import math
from pathlib import Path
from typing import Any, Sequence

from nvcc_evo.errors import EnvironmentProblem

Point = tuple[float, float]


MISSING = "no plots: they need matplotlib (pip install 'nvcc-evo[report]')"


def available() -> bool:
    """Whether matplotlib is installed (the page is written without plots where not)."""
    return importlib.util.find_spec("matplotlib") is not None


# matplotlib's objects (an optional library, imported only for a plot): untyped here.
Figure = Any
Axes = Any


def _pyplot() -> Any:
    try:
        import matplotlib                   # an extra (nvcc-evo[report]): loaded for a plot only
    except ImportError:
        raise EnvironmentProblem("plots need matplotlib: pip install 'nvcc-evo[report]'") from None
    matplotlib.use("Agg")                   # files only: no display, no GUI toolkit
    matplotlib.rcParams["svg.hashsalt"] = "nvcc-evo"      # the same plot, the same SVG bytes
    matplotlib.rcParams["svg.fonttype"] = "none"          # text stays text: smaller, searchable,
                                                          # the reader's font
    import matplotlib.pyplot as plt
    return plt


def _finite(points: Sequence[Point]) -> list[Point]:
    return [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]


def front_figure(points: Sequence[Point], front: Sequence[Point], title: str, x_label: str,
                 y_label: str, baseline: Point | None = None, chosen: Point | None = None,
                 log: bool = False) -> Figure:
    """Every candidate as a dot, the Pareto front as a line through its points,
    the baseline and the chosen point marked."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6.4, 4.4), layout="constrained")
    points, front = _finite(points), sorted(_finite(front))
    if points:
        axes.scatter(*zip(*points), s=14, color="#9aa7b8", label=f"candidates ({len(points)})",
                     zorder=1)
    if front:
        axes.plot(*zip(*front), "-o", color="#d62728", markersize=5,
                  label=f"Pareto front ({len(front)})", zorder=3,
                  drawstyle="steps-post" if len(front) > 1 else "default")
    if baseline is not None and all(map(math.isfinite, baseline)):
        axes.scatter(*baseline, marker="s", s=60, color="black", label="baseline (defaults)",
                     zorder=4)
    if chosen is not None and all(map(math.isfinite, chosen)):
        axes.scatter(*chosen, marker="*", s=180, color="#2ca02c", edgecolor="black", label="chosen",
                     zorder=5)
    if log and points and all(x > 0 and y > 0 for x, y in points):
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
        for values, axis, scale in ((points, axes.xaxis, axes.set_xscale),
                                    (points, axes.yaxis, axes.set_yscale)):
            coordinate = [p[0] if axis is axes.xaxis else p[1] for p in values]
            if max(coordinate) / min(coordinate) > 10:        # a narrow range reads better on a
                                                              # linear axis
                scale("log")
                axis.set_major_locator(LogLocator(subs=(1, 2, 5)))      # 100, 200, 500, 1000: plain
                                                                        # numbers
                axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                axis.set_minor_formatter(NullFormatter())
    axes.set(xlabel=x_label, ylabel=y_label)
    axes.set_title(title, fontsize="medium", wrap=True)
    axes.grid(True, alpha=0.3)
    _legend(axes)
    return figure


def _legend(axes: Axes) -> None:
    """The legend of what was drawn; where nothing was (every evaluation
    failed), a word saying so instead of matplotlib's warning on stderr."""
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="small")
    else:
        axes.text(0.5, 0.5, "no finite values to draw (every evaluation failed?)", ha="center",
                  va="center", transform=axes.transAxes, color="#555555")


def best_so_far(values: Sequence[float]) -> list[float]:
    """The running minimum (inf until the first finite value)."""
    best, out = math.inf, []
    for value in values:
        best = min(best, value) if math.isfinite(value) else best
        out.append(best)
    return out


def convergence_figure(values: Sequence[float], seconds: Sequence[float] | None,
                       baseline: float | None, title: str, label: str) -> Figure:
    """Best so far of one objective against evaluations and, where each
    evaluation's time is known, against wall time; the baseline a dashed line."""
    plt = _pyplot()
    panels = 2 if seconds else 1
    figure, axes = plt.subplots(1, panels, figsize=(6.4 if panels == 1 else 10.5, 3.8),
                                layout="constrained", squeeze=False)
    best = best_so_far(values)
    xs: list[tuple[Sequence[float], str]] = [(range(1, len(best) + 1), "evaluations")]
    xs += [(list(seconds), "wall time (s)")] if seconds else []
    for axis, (x, x_label) in zip(axes[0], xs):
        shown = [(a, b) for a, b in zip(x, best) if math.isfinite(b)]
        if shown:
            axis.step(*zip(*shown), where="post", color="#1f77b4", label="best so far")
            axis.scatter(*zip(*_finite(list(zip(x, values)))), s=8, color="#9aa7b8",
                         label="each evaluation")
        if baseline is not None and math.isfinite(baseline):
            axis.axhline(baseline, color="black", linestyle="--", linewidth=1, label="baseline")
        axis.set(xlabel=x_label, ylabel=label)
        axis.grid(True, alpha=0.3)
        _clip_outliers(axis, values, baseline)
    _legend(axes[0][0])
    figure.suptitle(title, fontsize="medium")
    return figure


def _clip_outliers(axis: Axes, values: Sequence[float], baseline: float | None) -> None:
    """Candidates far worse than the baseline would flatten the curve that
    matters: the y axis stops at 3x the baseline (and says so)."""
    finite = [v for v in values if math.isfinite(v)]
    if not (baseline and math.isfinite(baseline) and baseline > 0):
        return
    if finite and max(finite) > 3 * baseline:
        axis.set_ylim(min(finite + [baseline]) * 0.9, 3 * baseline)
        axis.set_ylabel(axis.get_ylabel() + " (clipped at 3x baseline)")


def curves_figure(curves: dict[str, Sequence[Point]], title: str, x_label: str, y_label: str,
                  y_max: float | None = None,
                  reference: tuple[str, float] | None = None) -> Figure:
    """Named curves against a common x (GA against random search); values
    above `y_max` drawn at it (the axis says so); a reference line (the optimum)."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    for name, points in curves.items():
        points = [(x, min(y, y_max) if y_max is not None else y) for x, y in _finite(points)]
        if points:
            axes.plot(*zip(*points), label=name)
    if reference is not None:
        axes.axhline(reference[1], color="black", linestyle="--", linewidth=1, label=reference[0])
    axes.set(xlabel=x_label, ylabel=y_label + (f" (clipped at {y_max:.4g})" if y_max else ""))
    axes.set_title(title, fontsize="medium", wrap=True)
    axes.grid(True, alpha=0.3)
    _legend(axes)
    return figure


def svg(figure: Figure) -> str:
    """The figure as an SVG element (no XML prolog: for inlining in HTML)."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    _pyplot().close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def save(figure: Figure, path: Path) -> Path:
    # same data, same file
    figure.savefig(path, metadata={"Date": None} if str(path).endswith(".svg") else None)
    _pyplot().close(figure)
    return path
