"""Mechanisms behind the init-scale phases: two exemplar models compared.

A symmetric and an inferential model of the ``init-scale`` experiment side by side:
condensation of W_Q(1), the embedding spectrum (and its growth over training, from
``train.snapshot_steps``), singular values of every weight matrix, a t-SNE of
first-layer outputs and the attention maps of the paper's (4,3) probe with key 99.
The measures themselves are in :mod:`sglab.analysis.anchor_mechanisms`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sglab.analysis.anchor_mechanisms import (
    attention_maps,
    embedding_eigenvalues,
    first_layer_outputs,
    probe_attention,
    weight_matrix_names,
    weight_singular_values,
)
from sglab.analysis.representations import centroid_cosine, tsne_map
from sglab.analysis.spectra import effective_rank
from sglab.experiments.runs import FinishedRun
from sglab.report.plots import Line, Panel, heatmap_grid, line_figure, scatter_panels
from sglab.tasks.anchors import (
    ALL_PAIRS,
    ITEM_MAX,
    ITEM_MIN,
    input_token_ids,
    probe_sequences,
    probe_unseen_input,
)

#: Centroid cosines shown for the first-layer outputs: two mirrored pairs and a non-mirrored one.
PAIR_COSINES = ((34, 43), (12, 21), (34, 12))


def probe_key_position(tokens) -> int:
    """Position of the key item in the (4,3) probe: the token before the first anchor."""
    return tokens.tolist().index(4) - 1


def mechanism_sections(exemplars: dict[str, dict[str, Any]], params: dict[str, Any],
                        out_dir: Path) -> list[dict[str, Any]]:
    """Report sections comparing a symmetric and an inferential exemplar run (records of
    :func:`sglab.experiments.init_scale.init_scale.measure`)."""
    labels = {kind: f"{kind} (gamma {r['gamma']:g}, depth {r['depth']}, seed {r['seed']})"
              for kind, r in exemplars.items()}
    chosen = "; ".join(
        f"{kind}: gamma {r['gamma']:g}, lr {r['lr']:g}, symmetric {r['symmetric']:.2f}, "
        f"inferential {r['inferential']:.2f}, seen {r['test']:.2f} ({r['solution']})"
        for kind, r in exemplars.items())
    condensation = heatmap_grid(
        out_dir, "condensation",
        [[(f"{labels[kind]}\n{r['condensation'].covering} groups cover 90% of neurons",
           r["condensation"].groups.reordered) for kind, r in exemplars.items()]],
        vmin=-1, vmax=1, cmap="RdBu_r", cell_size=4.4, title="condensation",
        caption="W_Q(1) neuron cosine similarity, small vs large init.")
    models = {kind: r["run"] for kind, r in exemplars.items()}
    return [
        {"title": "Condensation of W_Q(1)", "text": (
            f"Exemplar models, the runs of the smallest depth and first seed whose solution "
            f"is most clearly of each kind: {chosen}. Cosine similarity between the rows "
            "(neurons) of W_Q of the first attention layer, reordered so that neurons of "
            "one group (complete linkage, every pair cosine ≥ 0.7) are adjacent, largest "
            "group first."), "figures": [condensation]},
        _spectra_section(models, labels, out_dir),
        _tsne_section(models, labels, params, out_dir),
        _attention_section(models, labels, out_dir),
    ]


def _spectra_section(models: dict[str, FinishedRun], labels, out_dir):
    rows, shares = [], []
    tokens = input_token_ids()
    for kind, run in models.items():
        values = embedding_eigenvalues(run.model(), tokens)
        shares.append(Line(np.arange(1, len(values) + 1),
                           np.maximum(values / values.sum(), 1e-12), labels[kind]))
        rows.append([labels[kind], f"{effective_rank(values):.2f}",
                     f"{values[0] / values.sum():.3f}"])
    inferential = models["inferential"]
    steps = inferential.config.train.snapshot_steps
    history = np.array([embedding_eigenvalues(inferential.model(f"step_{s}"), tokens)[:6]
                        for s in steps])
    eigen = line_figure(out_dir, "embedding_spectrum", [
        Panel("eigenvalue / sum (embedding covariance)", shares, log_y=True, xlabel="index"),
        Panel(f"during training: {labels['inferential']}",
              [Line(steps, history[:, k], f"eigenvalue {k + 1}", marker="o")
               for k in range(history.shape[1])])],
        panel_width=5.5, height=3.6,
        title="embedding spectrum",
        caption="Embedding covariance eigenvalues (log scale) and their growth during "
                "training.")
    names = weight_matrix_names(inferential.model())
    spectra = {kind: weight_singular_values(run.model(), names) for kind, run in models.items()}
    singular = line_figure(out_dir, "singular_values", [
        Panel(name, [Line(np.arange(1, len(values[name]) + 1), values[name], kind)
                     for kind, values in spectra.items()], log_y=True)
        for name in names], columns=5, panel_width=2.6, height=2.1, xlabel="",
        title="singular values", caption="Singular values of each weight matrix (log scale).")
    return {"title": "Spectra", "text": (
        "Eigenvalues (divided by their sum) of the covariance of the input-token embeddings "
        f"(anchors and items {ITEM_MIN}-{ITEM_MAX}) and singular values of every weight "
        "matrix, for the two exemplar models; the right panel follows the six largest "
        "eigenvalues of the inferential model over training (weights kept at "
        "train.snapshot_steps)."),
        "tables": [{"columns": ["model", "effective rank", "largest eigenvalue share"],
                    "rows": rows}],
        "figures": [eigen, singular]}


def _tsne_section(models: dict[str, FinishedRun], labels, params, out_dir):
    panels, rows = [], []
    for kind, run in models.items():
        tokens, pairs = probe_sequences(run.config.task, params["tsne_points"] // len(ALL_PAIRS),
                                        seed=0)
        vectors = first_layer_outputs(run.model(), tokens[:, :-1])
        points = tsne_map(vectors, seed=0, perplexity=min(30.0, (len(vectors) - 1) / 3))
        panels.append((labels[kind], points, pairs.numpy(),
                       {10 * a + b: f"({a},{b})" for a, b in ALL_PAIRS}))
        rows.append([labels[kind], *[f"{centroid_cosine(vectors, pairs.numpy(), x, y):.3f}"
                                     for x, y in PAIR_COSINES]])
    unordered = sorted({tuple(sorted(p)) for p in ALL_PAIRS})
    # mirrored pairs share a hue of tab20: dark for a1 <= a2, light for a1 > a2
    colors = {10 * a + b: 2 * unordered.index(tuple(sorted((a, b)))) + (a > b)
              for a, b in ALL_PAIRS}
    figure = scatter_panels(out_dir, "tsne", panels, colors=colors, title="t-SNE",
                            caption="First-layer last-token outputs coloured by anchor pair.")
    return {"title": "t-SNE of first-layer outputs", "text": (
        "t-SNE of the last-token output of the first block (after attention, residual and "
        "LayerNorm: X_ao(1)) for sequences of every anchor pair with random keys; mirrored "
        "pairs share a hue (dark: a1 ≤ a2). The table gives the cosine between the "
        "centred class means in the full space."),
        "tables": [{"columns": ["model", "cos (3,4)-(4,3)", "cos (1,2)-(2,1)",
                                "cos (3,4)-(1,2)"], "rows": rows}],
        "figures": [figure]}


def _attention_section(models: dict[str, FinishedRun], labels, out_dir):
    n_layers = max(run.config.model.n_layers for run in models.values())
    grid, rows = [], []
    for kind, run in models.items():
        tokens = probe_unseen_input(run.config.task.seq_len)
        names = [str(t) for t in tokens.tolist()]
        maps = attention_maps(run.model(), tokens)
        grid.append([(f"{kind}: layer {i + 1}", m) for i, m in enumerate(maps)]
                    + [None] * (n_layers - len(maps)))
        rows += [[labels[kind], i + 1, *[f"{value:.2f}" for value in layer.values()]]
                 for i, layer in enumerate(probe_attention(maps, probe_key_position(tokens)))]
    figure = heatmap_grid(out_dir, "attention", grid, vmin=0, vmax=1, cmap="Blues",
                          ticklabels=names, xlabel="attended position",
                          ylabel="query position", title="attention maps",
                          caption="Attention maps of each layer for a (4,3) input.")
    return {"title": "Information flow", "text": (
        "Attention patterns (row: query position, column: key position) for the input "
        f"{' '.join(names)} (key 99, unseen pair (4,3)); the table lists the attention "
        "of the last token on the key and on both anchors, and of each anchor on the key."),
        "tables": [{"columns": ["model", "layer", "last→key", "last→anchor 4",
                                "last→anchor 3", "anchor 4→key", "anchor 3→key"],
                    "rows": rows}],
        "figures": [figure]}
