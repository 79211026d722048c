"""What the improved-DNC experiments share (thesis Ch. 2): the parameters of a preset, the
arms, the loss-curve figure, the memory-state heatmaps and the measures of the claims on
constructed states (the equations of D and S on hand-built memory states, no training).

The presets train the DNC as the authors' code does: RMSProp (momentum 0.9, eps 1e-10, L2
decay 1e-5 on every matrix, the embeddings of token models included; gradient-norm clip
10), constant lr. The probes of trained memories are in :mod:`sglab.analysis.dnc_memory`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from sglab.experiments.claims import Measured
from sglab.experiments.runs import Arm, FinishedRun, RunSet
from sglab.experiments.spec import ExperimentParams, RunConfigDict
from sglab.models.dnc import (
    MemoryState,
    content_weights,
    interface_size,
    memory_step,
    sharpen,
    split_interface,
)
from sglab.report.plots import Panel, heatmap_grid, learning_curves, mean_band

SPLIT = "iid_valid"


class DNCParams(ExperimentParams):
    base: RunConfigDict  # the run config every variant starts from
    variants: list[str]  # the DNC variants compared (DNC, DNC-D, DNC-MD, DNC-MDS, ...)
    mask_min: float | None = None  # delta, the masks' floor (Eq. A.2), where M is on
    mask_bias_init: float | None = None  # initial bias of the mask logits, where M is on


def dnc_arms(params: dict[str, Any]) -> list[Arm]:
    """One arm per variant and seed; ``mask_min`` (delta) and ``mask_bias_init`` only where
    M is on."""
    arms = []
    for variant in params["variants"]:
        overrides: dict[str, Any] = {"model.variant": variant}
        for key in ("mask_min", "mask_bias_init"):
            if "M" in variant.removeprefix("DNC") and params.get(key):
                overrides[f"model.{key}"] = params[key]
        arms += [Arm({"variant": variant}, params["base"], overrides, seed)
                 for seed in params["seeds"]]
    return arms


def loss_area(run: FinishedRun) -> float:
    """Mean validation loss over every evaluation: the area under the loss curve per step."""
    return statistics.mean(r[f"{SPLIT}/loss"] for r in run.evaluations)


def steps_to_loss(run: FinishedRun, threshold: float) -> float:
    """First evaluated step whose validation loss is at most ``threshold`` (inf: never)."""
    return next((r["step"] for r in run.evaluations if r[f"{SPLIT}/loss"] <= threshold),
                float("inf"))


def results_table(runs: RunSet, variants: list[str]) -> dict[str, Any]:
    columns = {
        "exact match": lambda g: g.mean_std(f"{SPLIT}/exact_match", 3),
        "bit accuracy": lambda g: g.mean_std(f"{SPLIT}/bit_accuracy", 4),
        "wrong bits / sequence": lambda g: g.mean_std(f"{SPLIT}/wrong_bits", 2),
        "loss": lambda g: g.mean_std(f"{SPLIT}/loss", 3),
        "mean loss over training": lambda g: g.mean_std(loss_area, 3),
    }
    table = runs.table(["variant"], columns, "Validation after the last iteration "
                                             "(mean ± std over seeds)")
    order = {v: i for i, v in enumerate(variants)}
    table["rows"].sort(key=lambda row: order.get(row[0], 99))
    return table


def curve_figure(runs: RunSet, variants: list[str], out_dir: Path, name: str, title: str,
                 metric: str, ylabel: str, caption: str, panel_title: str = "",
                 transform: Callable[[float], float] | None = None) -> dict[str, str]:
    """One evaluation metric over training, mean ± 2σ over seeds per variant (thesis
    Figs. 2.2a, 2.3b, 2.5); ``transform`` maps each logged value (e.g. accuracy -> error)."""
    panel = Panel(panel_title or title)
    for i, variant in enumerate(variants):
        curves = [r.curve(metric) for r in runs.where(variant=variant)]
        if transform is not None:
            curves = [(x, [transform(v) for v in y]) for x, y in curves]
        if curves:
            line, band = mean_band(curves, variant, i)
            panel.lines.append(line)
            panel.bands.append(band)
    return learning_curves(out_dir, name, [panel], title=title, ylabel=ylabel, caption=caption)


def loss_figure(runs: RunSet, variants: list[str], out_dir: Path, title: str,
                ylabel: str = "loss per sequence",
                caption: str = "Loss: binary cross-entropy summed over bits and steps. The "
                               "training loss is not logged per evaluation; the fixed "
                               "validation set stands in for it.") -> dict[str, str]:
    """Validation loss, mean ± 2σ over seeds per variant (thesis Figs. 2.2a, 2.3b)."""
    return curve_figure(runs, variants, out_dir, "loss", "validation loss", f"{SPLIT}/loss",
                        ylabel, "Validation loss during training: mean over seeds, shaded ± 2 "
                        "standard deviations. " + caption, panel_title=title)


def best_seed(runs: RunSet) -> FinishedRun:
    """The run with the lowest final validation loss. The mechanism figures (thesis Figs.
    2.2b, 2.4) show a network that learned its task; a seed still on the loss plateau shows
    none, and which seeds leave it is a lottery at CPU budgets (README)."""
    return min(runs, key=lambda run: run.final[f"{SPLIT}/loss"])


def state_heatmaps(out_dir: Path, name: str, panels: list[tuple[str, torch.Tensor]], title: str,
                   caption: str, ylabel: str) -> dict[str, str]:
    """Time x something heatmaps (first sequence of the probed batch), one per panel."""
    cells = [[(t, m.T.numpy()) for t, m in panels]]
    return heatmap_grid(out_dir, name, cells, title=title, caption=caption, xlabel="time step",
                        ylabel=ylabel, vmin=0.0, vmax=1.0, cell_size=3.6)


def constructed_state_measures(cells: int = 8, width: int = 6) -> dict[str, Measured]:
    """The claims on D and S measured on constructed states (no training involved): a cell
    read at t-1 and freed with retention psi = 0, looked up by its old content with and
    without D (Eqs. 2.3, 2.4); S applied to random link distributions and sharpness values
    s = oneplus(.) (Eq. A.10)."""
    g = torch.Generator().manual_seed(0)
    old = torch.randn(width, generator=g)
    state = MemoryState.zeros(1, cells, width, 1, torch.zeros(1))
    state.memory[0, 0] = old
    state.memory[0, 1:] = 0.05 * torch.randn(cells - 1, width, generator=g)
    state.read_weights[0, 0, 0] = 1.0  # cell 0 read at t-1 ...
    xi = torch.randn(1, interface_size(width, 1, masked=False, sharp=False), generator=g)
    parts = split_interface(xi, width, 1, masked=False, sharp=False)
    parts["free_gates"] = torch.ones(1, 1)  # ... and freed: psi = 0 there
    parts["write_gate"] = torch.zeros(1, 1)
    weight = {}
    for dealloc in (True, False):
        new, _ = memory_step(state, parts, dealloc_content=dealloc)
        weight[dealloc] = float(content_weights(new.memory, old[None, None],
                                                torch.tensor([[50.0]]))[0, 0, 0])
    d = torch.rand(256, cells, generator=g) ** 4
    d = d / d.sum(-1, keepdim=True)
    s = 1 + torch.nn.functional.softplus(4 * torch.randn(256, generator=g))  # oneplus
    gain = sharpen(d, s).amax(-1) - ((d + 1e-6) / (d + 1e-6).sum(-1, keepdim=True)).amax(-1)
    return {
        "dealloc-erases-freed-cells": Measured(
            {"lookup weight of the freed cell with D": weight[True],
             "lookup weight of the freed cell without D": weight[False],
             "uniform": 1 / cells},
            f"{cells} cells; one step with free gate 1 on the cell read at t-1 and write gate "
            "0; content lookup with the freed cell's old content as key, strength 50"),
        "sharpening-never-flattens-links": Measured(
            {"smallest gain of the peak": float(gain.min()), "distributions": 256},
            "largest entry of S(d, s) minus that of d, over random link distributions d "
            f"over {cells} cells and sharpness values s = oneplus(4 z), z standard normal"),
    }


__all__ = ["DNCParams", "SPLIT", "best_seed", "constructed_state_measures", "curve_figure",
           "dnc_arms", "loss_area", "loss_figure", "results_table", "state_heatmaps",
           "steps_to_loss"]
