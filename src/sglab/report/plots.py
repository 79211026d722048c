"""The figures experiments share, drawn from plain data.

Every function writes ``figures/<name>.png`` under ``out_dir`` and returns the
report's figure entry ``{"file", "title", "caption"}``. Experiments pass numbers
and labels; only this module (and :mod:`sglab.report.figures`) touch matplotlib.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.patches import Rectangle
from matplotlib.ticker import FormatStrFormatter, MaxNLocator, NullFormatter

from sglab.report.figures import new_figure, save_figure


@dataclass
class Line:
    """One curve: x and y values, a legend label, a colour index and a line style."""

    x: Sequence[float]
    y: Sequence[float]
    label: str | None = None
    color: int | None = None
    style: str = "-"
    marker: str | None = None


@dataclass
class Panel:
    """One axes of a line figure."""

    title: str
    lines: list[Line] = field(default_factory=list)
    vlines: list[tuple[float, int | None, str | None]] = field(default_factory=list)
    hlines: list[tuple[float, str | None]] = field(default_factory=list)
    ylim: tuple[float, float] | None = None
    bands: list[tuple[Sequence[float], Sequence[float], Sequence[float], int | None]] = field(
        default_factory=list)  # shaded (x, low, high, colour index), e.g. mean ± 2σ over seeds
    log_y: bool = False
    integer_x: bool = False
    xlabel: str | None = None  # this panel's x-axis label, if not the figure's


def metric_line(records: Sequence[dict], key: str, label: str | None = None,
                color: int | None = None, style: str = "-") -> Line:
    """A curve of ``key`` over the records that carry it (evaluation records and
    training-loss records ``{"step": .., "train/loss": ..}`` mix in ``metrics.jsonl``)."""
    points = [(r["step"], r[key]) for r in records if key in r]
    return Line([p[0] for p in points], [p[1] for p in points], label, color, style)


def mean_band(curves: Sequence[tuple[Sequence[float], Sequence[float]]], label: str | None,
              color: int | None, width: float = 2.0) -> tuple[Line, tuple]:
    """The mean of several (x, y) curves over their common x values and the band
    mean ± ``width`` standard deviations (one curve: a zero-width band), for
    ``Panel.lines`` and ``Panel.bands``."""
    common = sorted(set.intersection(*(set(x) for x, _ in curves))) if curves else []
    rows = np.array([[dict(zip(x, y))[step] for step in common] for x, y in curves], float)
    mean = rows.mean(0) if len(rows) else np.array([])
    spread = rows.std(0, ddof=1) * width if len(rows) > 1 else np.zeros_like(mean)
    return Line(common, list(mean), label, color), (common, list(mean - spread),
                                                    list(mean + spread), color)


def _entry(file: str, title: str, caption: str) -> dict[str, str]:
    return {"file": file, "title": title, "caption": caption or title}


def line_figure(out_dir: Path, name: str, panels: Sequence[Panel], *, title: str,
                caption: str = "", xlabel: str = "step", ylabel: str = "",
                panel_width: float = 4.2, height: float = 3.4,
                columns: int | None = None) -> dict[str, str]:
    """Curves in panels (learning curves, weight norms, accuracy by group, spectra), one
    row, or rows of ``columns`` panels."""
    ncols = min(columns or len(panels), len(panels)) or 1
    nrows = -(-len(panels) // ncols) if panels else 1
    fig, axes = new_figure(panel_width * ncols, height * nrows, ncols=ncols, nrows=nrows)
    flat = [ax for row in axes for ax in row]
    for ax in flat[len(panels):]:
        ax.axis("off")
    for ax, panel in zip(flat, panels):
        for line in panel.lines:
            color = None if line.color is None else f"C{line.color}"
            ax.plot(line.x, line.y, line.style, color=color, label=line.label,
                    marker=line.marker, ms=3)
        for x, low, high, color in panel.bands:
            ax.fill_between(x, low, high, color=None if color is None else f"C{color}",
                            alpha=0.2, lw=0)
        for x, color, label in panel.vlines:
            ax.axvline(x, color="k" if color is None else f"C{color}", ls=":" if label else "-",
                       alpha=1.0 if label else 0.3, lw=0.8 if label is None else 1.0,
                       label=label)
        for y, label in panel.hlines:
            ax.axhline(y, color="k", ls=":", label=label)
        ax.set_title(panel.title, fontsize=9 if ncols < 4 else 7)
        ax.set_xlabel(xlabel if panel.xlabel is None else panel.xlabel)
        if panel.ylim:
            ax.set_ylim(*panel.ylim)
        if panel.log_y:
            ax.set_yscale("log")
        if panel.integer_x:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if any(line.label for line in panel.lines) or any(v[2] for v in panel.vlines) \
                or any(h[1] for h in panel.hlines):
            ax.legend(fontsize=7)
    if ylabel:
        axes[0][0].set_ylabel(ylabel)
    return _entry(save_figure(fig, out_dir, name), title, caption)


def learning_curves(out_dir: Path, name: str, panels: Sequence[Panel], *,
                    title: str = "learning curves", caption: str = "",
                    ylabel: str = "exact match") -> dict[str, str]:
    """Metric values against training steps, one panel per group of runs."""
    return line_figure(out_dir, name, panels, title=title, caption=caption, ylabel=ylabel)


def accuracy_by_group(out_dir: Path, name: str,
                      panels: Sequence[tuple[str, dict[str, dict[int, float]], str]], *,
                      title: str, caption: str = "") -> dict[str, str]:
    """Accuracy per example group (length, depth, ...), one panel per (title,
    {series: {group: accuracy}}, x-axis label)."""
    figure_panels = []
    xlabel = panels[0][2] if panels else ""
    for panel_title, series, _ in panels:
        lines = [Line(sorted(values), [values[k] for k in sorted(values)], label, i, "-", "o")
                 for i, (label, values) in enumerate(series.items())]
        figure_panels.append(Panel(panel_title, lines, ylim=(-0.02, 1.02), integer_x=True))
    return line_figure(out_dir, name, figure_panels, title=title, caption=caption,
                       xlabel=xlabel, height=3.2)


def heatmap_grid(out_dir: Path, name: str, cells: Sequence[Sequence[tuple[str, Any]]], *,
                 title: str, caption: str = "", vmin: float | None = None,
                 vmax: float | None = None, cmap: str = "viridis", symmetric: bool = False,
                 colorbar: bool = True, cell_size: float = 3.2,
                 ticklabels: Sequence[str] | None = None, xlabel: str = "",
                 ylabel: str = "", xticklabels: Sequence[str] | None = None,
                 yticklabels: Sequence[str] | None = None) -> dict[str, str]:
    """Rows x columns of matrices (correlations, attention maps, gates, weights), each
    a (title, matrix); empty cells are left blank. ``symmetric`` centres the colour
    scale on 0; ``ticklabels`` names the rows and columns (e.g. tokens of an attention
    map); ``xticklabels`` / ``yticklabels`` name them separately (x labels turned vertical, e.g.
    tokens by step)."""
    nrows, ncols = len(cells), max(len(row) for row in cells)
    fig, axes = new_figure(cell_size * ncols + (0.6 if colorbar else 0), cell_size * nrows,
                           ncols=ncols, nrows=nrows)
    for i, row in enumerate(cells):
        for j in range(ncols):
            ax = axes[i][j]
            if j >= len(row) or row[j] is None:
                ax.axis("off")
                continue
            panel_title, matrix = row[j]
            matrix = np.asarray(matrix, dtype=float)
            low, high = vmin, vmax
            if symmetric:
                limit = float(np.abs(matrix).max()) or 1.0
                low, high = -limit, limit
            image = ax.imshow(matrix, vmin=low, vmax=high, cmap=cmap, interpolation="nearest")
            ax.set_title(panel_title, fontsize=9)
            xticks = list(xticklabels or ticklabels or [])
            yticks = list(yticklabels or ticklabels or [])
            ax.set_xticks(range(len(xticks)), xticks, fontsize=6,
                          rotation=0 if xticklabels is None else 90)
            ax.set_yticks(range(len(yticks)), yticks, fontsize=6)
            ax.set_xlabel(xlabel, fontsize=7)
            ax.set_ylabel(ylabel, fontsize=7)
            if colorbar:
                fig.colorbar(image, ax=ax, fraction=0.046)
    return _entry(save_figure(fig, out_dir, name), title, caption)


def annotated_heatmap(out_dir: Path, name: str, panels: Sequence[tuple[str, Any]], *,
                      xticklabels: Sequence[str], yticklabels: Sequence[str], xlabel: str,
                      ylabel: str, title: str, caption: str = "", fmt: str = "{:.2f}",
                      vmin: float = 0.0, vmax: float = 1.0, cmap: str = "viridis",
                      shaded: Any = None, colorbar_label: str = "") -> dict[str, str]:
    """Matrices with the value written in each cell, tick labels and a colour bar
    (phase diagrams). ``shaded``: a boolean mask of cells to hatch, same for every panel."""
    fig, axes = new_figure(4.4 * len(panels), 0.5 * len(yticklabels) + 2.4, ncols=len(panels))
    for ax, (panel_title, matrix) in zip(axes[0], panels):
        matrix = np.asarray(matrix, dtype=float)
        image = ax.imshow(matrix, vmin=vmin, vmax=vmax, cmap=cmap, origin="lower",
                          aspect="auto")
        for (i, j), value in np.ndenumerate(matrix):
            if not np.isnan(value):
                ax.text(j, i, fmt.format(value), ha="center", va="center", fontsize=7,
                        color="w" if value < (vmin + vmax) / 2 else "k")
            if shaded is not None and shaded[i][j]:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///",
                                       edgecolor="0.6", lw=0))
        ax.set_xticks(range(len(xticklabels)), [str(t) for t in xticklabels])
        ax.set_yticks(range(len(yticklabels)), [str(t) for t in yticklabels])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(panel_title, fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.046, label=colorbar_label)
    return _entry(save_figure(fig, out_dir, name), title, caption)


def seed_strip(out_dir: Path, name: str, groups: dict[str, Sequence[float]], *, title: str,
               caption: str = "", ylabel: str = "") -> dict[str, str]:
    """One dot per seed for each group, with the group mean as a bar."""
    fig, axes = new_figure(max(1.1 * len(groups), 3.0), 3.2)
    ax = axes[0][0]
    for i, values in enumerate(groups.values()):
        values = np.asarray(values, dtype=float)
        offsets = np.linspace(-0.15, 0.15, len(values)) if len(values) > 1 else [0.0]
        ax.plot(i + np.asarray(offsets), values, "o", color=f"C{i}", ms=4)
        if len(values):
            ax.hlines(values.mean(), i - 0.3, i + 0.3, color="k", lw=1)
    ax.set_xticks(range(len(groups)), list(groups), rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    return _entry(save_figure(fig, out_dir, name), title, caption)


def grouped_bars(out_dir: Path, name: str, groups: dict[str, dict[str, float]], *,
                 title: str, caption: str = "", ylabel: str = "",
                 ylim: tuple[float, float] | None = None) -> dict[str, str]:
    """Bars per category (x axis) for each series: ``{series: {category: value}}``."""
    categories = list(dict.fromkeys(c for series in groups.values() for c in series))
    fig, axes = new_figure(max(0.9 * len(categories) * max(len(groups), 1) / 2 + 1.5, 3.5), 3.2)
    ax = axes[0][0]
    width = 0.8 / max(len(groups), 1)
    for i, (label, series) in enumerate(groups.items()):
        x = np.arange(len(categories)) + (i - (len(groups) - 1) / 2) * width
        ax.bar(x, [series.get(c, np.nan) for c in categories], width, label=label, color=f"C{i}")
    ax.set_xticks(range(len(categories)), categories, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.legend(fontsize=8)
    return _entry(save_figure(fig, out_dir, name), title, caption)


def coloured_scatter_grid(out_dir: Path, name: str,
                          cells: Sequence[Sequence[tuple[str, Sequence[tuple[Any, Any, Any]]]]],
                          *, title: str, caption: str = "", xlabel: str = "", ylabel: str = "",
                          log_x: bool = False, ylim: tuple[float, float] | None = None
                          ) -> dict[str, str]:
    """Rows x columns of scatter panels, each (title, [(x, y, colour values), ...]), the
    points coloured by their third series (e.g. loss vs accuracy coloured by step)."""
    nrows, ncols = len(cells), max(len(row) for row in cells)
    fig, axes = new_figure(4.0 * ncols, 3.2 * nrows, ncols=ncols, nrows=nrows)
    for i, row in enumerate(cells):
        for j, (panel_title, series) in enumerate(row):
            ax = axes[i][j]
            xs = []
            for x, y, colour in series:
                ax.scatter(x, y, c=colour, cmap="viridis", s=12)
                xs += list(x)
            if log_x:
                ax.set_xscale("log")
                positive = [x for x in xs if x > 0]
                within_a_decade = bool(positive) and max(positive) / min(positive) < 10
                ax.xaxis.set_minor_formatter(FormatStrFormatter("%.2g") if within_a_decade
                                             else NullFormatter())
                ax.tick_params(axis="x", which="both", labelsize=7)
            ax.set_title(panel_title, fontsize=8)
            ax.set_xlabel(xlabel)
            if ylim:
                ax.set_ylim(*ylim)
        axes[i][0].set_ylabel(ylabel)
    return _entry(save_figure(fig, out_dir, name), title, caption)


def labelled_scatter(out_dir: Path, name: str,
                     panels: Sequence[tuple[str, dict[str, tuple[Sequence[float], Sequence[float]]]]],
                     *, title: str, caption: str = "", xlabel: str = "", ylabel: str = "",
                     limits: tuple[float, float] | None = None) -> dict[str, str]:
    """Scatter panels side by side, each (title, {series label: (xs, ys)}) with a legend
    (e.g. IID vs OOD accuracy of every seed, one colour per split)."""
    fig, axes = new_figure(3.8 * len(panels), 3.6, ncols=len(panels))
    for ax, (panel_title, series) in zip(axes[0], panels):
        for i, (label, (xs, ys)) in enumerate(series.items()):
            ax.scatter(xs, ys, s=16, color=f"C{i}", label=label, alpha=0.8)
        if limits is not None:
            ax.set_xlim(*limits)
            ax.set_ylim(*limits)
        ax.set_title(panel_title, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel(ylabel)
    return _entry(save_figure(fig, out_dir, name), title, caption)


def scatter_panels(out_dir: Path, name: str,
                   panels: Sequence[tuple[str, Any, Sequence[int], dict[int, str]]], *,
                   title: str, caption: str = "", colors: dict[int, int] | None = None,
                   palette: str = "tab20") -> dict[str, str]:
    """2-D point maps (t-SNE): per panel (title, points [n, 2], class id per point,
    {class id: legend label}); ``colors`` maps a class id to an index into ``palette``."""
    fig, axes = new_figure(4.4 * len(panels), 4.2, ncols=len(panels))
    for ax, (panel_title, points, classes, names) in zip(axes[0], panels):
        points, classes = np.asarray(points), np.asarray(classes)
        for class_id, label in names.items():
            chosen = classes == class_id
            index = (colors or {}).get(class_id)
            color = None if index is None else matplotlib.colormaps[palette](index)
            ax.scatter(points[chosen, 0], points[chosen, 1], s=4, color=color, label=label)
        ax.set_title(panel_title, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0][-1].legend(fontsize=6, markerscale=2, ncol=2, loc="best")
    return _entry(save_figure(fig, out_dir, name), title, caption)


def word_lists(out_dir: Path, name: str, columns: Sequence[tuple[str, Sequence[str]]], *,
               title: str, caption: str = "", per_row: int = 10) -> dict[str, str]:
    """Lists of words side by side (top words per topic), ``per_row`` lists a row."""
    ncols = min(per_row, len(columns)) or 1
    nrows = -(-len(columns) // ncols) if columns else 1
    longest = max((len(words) for _, words in columns), default=1)
    fig, axes = new_figure(1.25 * ncols, 0.55 + 0.17 * longest * nrows + 0.3 * nrows,
                           ncols=ncols, nrows=nrows)
    flat = [ax for row in axes for ax in row]
    for ax in flat:
        ax.axis("off")
    for ax, (heading, words) in zip(flat, columns):
        ax.set_title(heading, fontsize=8, loc="left")
        ax.text(0.0, 1.0, "\n".join(words), va="top", ha="left", fontsize=7,
                transform=ax.transAxes)
    return _entry(save_figure(fig, out_dir, name), title, caption)


__all__ = ["Line", "Panel", "accuracy_by_group", "annotated_heatmap", "coloured_scatter_grid",
           "heatmap_grid",
           "learning_curves", "line_figure", "metric_line", "scatter_panels", "seed_strip", "word_lists"]
