"""How the Neural Data Router routes (thesis Fig. 5.3): one test input, step by step.

:func:`routing_probe` runs a trained NDR on the longest test input of its task
(:func:`sglab.analysis.routing.probe_longest_input`: the attention of every step and head
and the mean copy-gate value of every column at every step), once per run. The report's
figures and the gate-order claim both read that probe, so the claim is measured whether or
not figures are drawn.
"""

from __future__ import annotations

from pathlib import Path

import torch

from sglab.analysis.routing import (
    RoutingProbe,
    first_open_steps,
    max_over_heads,
    probe_longest_input,
)
from sglab.experiments.claims import Measured, NotMeasured
from sglab.experiments.runs import FinishedRun
from sglab.report.plots import heatmap_grid

RHO = "Spearman ρ(position, step)"
OPENED = "fraction of function columns that open"


def routing_probe(run: FinishedRun) -> RoutingProbe:
    """The run's best checkpoint on the longest input of its test split (computed once)."""
    return run.measure("routing probe",
                       lambda run: probe_longest_input(run.model("best"), run.task, "ood_test"))


def gates_open_in_order(probe: RoutingProbe) -> Measured | NotMeasured:
    """Fig. 5.3: in backward CTL the function columns open their gates one after another,
    starting next to the symbol (right) and moving left: the Spearman correlation of a
    function column's position and the step at which its gate opens, and the fraction of
    function columns that open at all."""
    from scipy.stats import spearmanr

    functions = [i for i, t in enumerate(probe.tokens) if t.isalpha() and len(t) == 1]
    if probe.gates is None or len(functions) < 3:
        return NotMeasured("no gate trace for a backward input with 3 or more functions")
    opened = first_open_steps(probe.gates, threshold=None)
    pairs = [(i, opened[i]) for i in functions if opened[i] is not None]
    rho = float(spearmanr(*zip(*pairs)).statistic) if len(pairs) >= 3 else float("nan")
    return Measured(
        {RHO: rho, OPENED: len(pairs) / len(functions)},
        "step at which each function column's mean gate has risen halfway from its lowest to "
        "its highest value (columns rising by < 0.1 do not open), left to right: "
        f"{[opened[i] for i in functions]}; ρ over the {len(pairs)} columns that open "
        f"(input {' '.join(probe.tokens)})")


def routing_figures(probe: RoutingProbe, condition: str, out_dir: Path) -> list[dict]:
    """Attention (max over heads) per step, gate activity per column and step, and (with
    several heads) every head at a few steps."""
    attention, steps, tokens = max_over_heads(torch.from_numpy(probe.attention)).numpy(), \
        probe.steps, probe.tokens
    ncols = min(steps, 7)
    cells = [[(f"step {t + 1}", attention[t]) for t in range(row, min(row + ncols, steps))]
             for row in range(0, steps, ncols)]
    figures = [heatmap_grid(
        out_dir, "ndr_attention", cells, title="NDR attention per step", vmin=0, vmax=1,
        colorbar=False, cell_size=2.2, xticklabels=tokens, yticklabels=tokens,
        caption=f"NDR ({condition}), input '{' '.join(tokens)}' -> {probe.answer}: geometric "
                "attention at every step (rows: target column, columns: source column; max "
                "over heads).")]
    if probe.gates is not None:
        figures.append(heatmap_grid(
            out_dir, "ndr_gates", [[("", probe.gates)]], title="NDR gate activity", vmin=0,
            vmax=1, cmap="magma", cell_size=max(0.3 * len(tokens), 4.0), xticklabels=tokens,
            yticklabels=[str(t + 1) for t in range(steps)], ylabel="step",
            caption="Mean copy-gate value g per column (x) and step (y) for the same input: "
                    "columns update only when their input is ready, one after another."))
    n_heads = probe.attention.shape[1]
    if n_heads > 1:
        shown = list(range(0, steps, max(steps // 4, 1)))[:4]
        cells = [[(f"step {t + 1} head {h + 1}", probe.attention[t, h]) for h in range(n_heads)]
                 for t in shown]
        figures.append(heatmap_grid(
            out_dir, "ndr_attention_heads", cells, title="NDR attention per head", vmin=0,
            vmax=1, colorbar=False, cell_size=2.2,
            caption="Selected steps, every head separately."))
    return figures


__all__ = ["gates_open_in_order", "routing_figures", "routing_probe"]
