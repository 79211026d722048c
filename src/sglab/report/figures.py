"""Figure helpers: headless matplotlib, saved as PNG files next to results.json."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from sglab.io import atomic_write_bytes


def new_figure(width: float = 6.0, height: float = 4.0, ncols: int = 1, nrows: int = 1):
    return plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False)


def save_figure(fig, out_dir: Path, name: str) -> str:
    """Write ``figures/<name>.png`` atomically; return the path relative to ``out_dir``."""
    relative = f"figures/{name}.png"
    fig.tight_layout()
    atomic_write_bytes(Path(out_dir) / relative, lambda f: fig.savefig(f, format="png", dpi=110))
    plt.close(fig)
    return relative


def heatmap(ax, matrix, title: str, vmin: float = 0.0, vmax: float = 1.0, cmap: str = "viridis"):
    image = ax.imshow(matrix, vmin=vmin, vmax=vmax, cmap=cmap, interpolation="nearest")
    ax.set_title(title, fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
    return image


def metric_curves(ax, records: list[dict], keys: list[str], label_prefix: str = ""):
    for key in keys:
        points = [(r["step"], r[key]) for r in records if key in r]
        if points:
            steps, values = zip(*points)
            ax.plot(steps, values, label=f"{label_prefix}{key}")
    ax.set_xlabel("step")
