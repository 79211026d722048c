"""Shared report figures are written as PNG files and described for the report."""

import numpy as np

from sglab.report.plots import (
    Line,
    Panel,
    accuracy_by_group,
    annotated_heatmap,
    heatmap_grid,
    learning_curves,
    metric_line,
    scatter_panels,
    seed_strip,
)

PNG = b"\x89PNG"


def _is_png(out_dir, entry):
    path = out_dir / entry["file"]
    return path.is_file() and path.read_bytes()[:4] == PNG


def test_every_plot_writes_a_png_and_a_figure_entry(tmp_path):
    records = [{"step": 1, "train/loss": 3.0}, {"step": 10, "ood_test/exact_match": 0.2},
               {"step": 20, "ood_test/exact_match": 0.6, "train/loss": 1.0}]
    line = metric_line(records, "ood_test/exact_match", "run")
    assert (line.x, line.y) == ([10, 20], [0.2, 0.6])
    assert metric_line(records, "train/loss").x == [1, 20]
    entries = [
        learning_curves(tmp_path, "curves", [Panel("a", [line], vlines=[(15, 0, None)],
                                                   hlines=[(0.5, "chance")])],
                        caption="curves"),
        accuracy_by_group(tmp_path, "groups", [("ood_test", {"A": {1: 0.9, 2: 0.5}}, "length")],
                          title="by length"),
        heatmap_grid(tmp_path, "maps", [[("x", np.eye(3)), ("y", -np.eye(3))], [("z", np.ones((2, 2)))]],
                     title="maps", symmetric=True),
        heatmap_grid(tmp_path, "gates", [[("", np.full((4, 3), 0.5))]], title="gates",
                     xticklabels=["a", "b", "c"], yticklabels=["1", "2", "3", "4"],
                     ylabel="step"),
        annotated_heatmap(tmp_path, "phase", [("inferential", [[0.1, 0.9], [np.nan, 0.5]])],
                          xticklabels=["0.3", "0.5"], yticklabels=["2", "3"], xlabel="gamma",
                          ylabel="depth", title="phase", shaded=[[True, False], [False, False]]),
        seed_strip(tmp_path, "strip", {"A": [0.1, 0.2], "B": [0.5]}, title="seeds"),
        scatter_panels(tmp_path, "tsne", [("t", np.random.default_rng(0).normal(size=(6, 2)),
                                           [0, 0, 1, 1, 2, 2], {0: "a", 1: "b", 2: "c"})],
                       title="t-SNE"),
    ]
    for entry in entries:
        assert set(entry) == {"file", "title", "caption"}
        assert entry["file"].startswith("figures/") and _is_png(tmp_path, entry)
    assert Line([0], [1]).style == "-"
