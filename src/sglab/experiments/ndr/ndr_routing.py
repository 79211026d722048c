"""How the Neural Data Router routes (thesis Fig. 5.3): one test input, step by step.

:func:`routing_probe` runs a trained NDR on the longest test input of its task and keeps
the attention (every step and head) and the mean copy-gate value of every column at
every step. The report's figures and the gate-order claim both read that probe, so the
claim is measured whether or not figures are drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from sglab.analysis.routing import gate_activity, max_over_heads, routing_trace
from sglab.experiments.legacy_claims import Claim, at_least, at_most, claim, not_measurable
from sglab.experiments.runs import FinishedRun
from sglab.report.plots import heatmap_grid


@dataclass
class RoutingProbe:
    """One test input through a trained NDR."""

    tokens: list[str]
    answer: str
    predicted: str
    attention: np.ndarray  # [steps, heads, columns, columns]
    gates: np.ndarray | None  # mean copy-gate value, [steps, columns]; None without a gate

    @property
    def steps(self) -> int:
        return self.attention.shape[0]

    def describe(self) -> str:
        return (f"Input: {' '.join(self.tokens)}; answer {self.answer}, "
                f"predicted {self.predicted}.")


def routing_probe(run: FinishedRun) -> RoutingProbe:
    """The run's best checkpoint on the longest input of its test split (computed once)."""

    def compute(run: FinishedRun) -> RoutingProbe:
        task, model = run.task, run.model("best")
        split = task.split("ood_test")
        example = split.subset(torch.tensor([int(split.lengths.argmax())]))
        batch = example.batch()
        trace = routing_trace(model, batch.input_ids, batch.key_padding_mask)
        with torch.no_grad():
            logits = model(batch.input_ids, key_padding_mask=batch.key_padding_mask)
        return RoutingProbe(
            tokens=task.vocab.decode(batch.input_ids[0, : int(batch.key_padding_mask[0].sum())]),
            answer=task.vocab.decode([int(example.labels[0])])[0],
            predicted=task.vocab.decode([int(logits[0, 0].argmax())])[0],
            attention=trace["attention"].numpy(),
            gates=gate_activity(trace["gates"]).numpy() if "gates" in trace else None)

    return run.measure("routing probe", compute)


def first_open_steps(activity: np.ndarray, threshold: float | None = 0.5,
                     min_rise: float = 0.1) -> list[int | None]:
    """For each column of a [steps, columns] gate-activity map, the first step (1-based)
    at which the column's gate opens (None if it never does).

    With a ``threshold``: the first step whose mean gate exceeds it. With
    ``threshold=None``: the first step at which the gate has risen halfway from its lowest
    to its highest value over the steps; a column whose gate rises by less than
    ``min_rise`` never opens. (A small NDR opens its gates only partway -- mean gate 0.2-0.5
    -- but in the same staircase order as the thesis's Fig. 5.3.)
    """
    steps = []
    for column in activity.T:
        if threshold is None:
            low, high = float(column.min()), float(column.max())
            if high - low < min_rise:
                steps.append(None)
                continue
            above = np.flatnonzero(column >= low + 0.5 * (high - low))
        else:
            above = np.flatnonzero(column > threshold)
        steps.append(int(above[0]) + 1 if len(above) else None)
    return steps


GATE_ORDER_STATEMENT = (
    "The NDR's copy gates open column by column, each once its input is ready: in the "
    "backward presentation the function next to the symbol updates first and the updates "
    "travel leftwards (Fig. 5.3).")


def gates_open_in_order_claim(probe: RoutingProbe) -> Claim:
    """Fig. 5.3: in backward CTL the function columns open their gates one after another,
    starting next to the symbol (right) and moving left."""
    from scipy.stats import spearmanr

    functions = [i for i, t in enumerate(probe.tokens) if t.isalpha() and len(t) == 1]
    if probe.gates is None or len(functions) < 3:
        return not_measurable("ndr-gates-open-in-order", GATE_ORDER_STATEMENT,
                               "no gate trace for a backward input with 3 or more functions")
    opened = first_open_steps(probe.gates, threshold=None)
    pairs = [(i, opened[i]) for i in functions if opened[i] is not None]
    rho = float(spearmanr(*zip(*pairs)).statistic) if len(pairs) >= 3 else float("nan")
    return claim(
        "ndr-gates-open-in-order", GATE_ORDER_STATEMENT,
        values={"Spearman ρ(position, step)": rho,
                "fraction of function columns that open": len(pairs) / len(functions)},
        rules=[at_most("Spearman ρ(position, step)", -0.8),
               at_least("fraction of function columns that open", 0.75)],
        context=("step at which each function column's mean gate has risen halfway from its "
                 "lowest to its highest value (columns rising by < 0.1 do not open), left to "
                 f"right: {[opened[i] for i in functions]}; ρ over the {len(pairs)} columns "
                 "that open"))


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


__all__ = ["RoutingProbe", "first_open_steps", "gates_open_in_order_claim", "routing_figures",
           "routing_probe"]
