"""How the Neural Data Router routes (thesis Fig. 5.3): one test input, step by step; and
where a gated model's readout column reads from, by input length (Sec. 5.2.1).

:func:`routing_probe` runs a trained NDR on the longest test input of its task
(:func:`sglab.analysis.routing.probe_longest_input`: the attention of every step and head
and the mean copy-gate value of every column at every step), once per run. The report's
figures and the gate-order claim both read that probe, so the claim is measured whether or
not figures are drawn.

:func:`readout_by_length` measures the thesis's analysis of + rel + gate on backward CTL
("the network learns to attend to the last operation based on relative position
information. Since the result is read from the last column, this position changes with the
sequence length", Sec. 5.2.1): the attention of the readout column on the answer's column at
the last step, for every number of functions of the evaluation splits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from sglab.analysis.hooks import run, watching
from sglab.analysis.routing import (
    RoutingProbe,
    by_step,
    first_open_steps,
    max_over_heads,
    probe_longest_input,
)
from sglab.experiments.claims import Measured, NotMeasured
from sglab.experiments.runs import FinishedRun
from sglab.report.plots import Line, Panel, heatmap_grid, line_figure

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


@dataclass(frozen=True)
class ReadoutCell:
    """The inputs of one split with one number of functions."""

    split: str
    functions: int
    examples: int
    on_answer: float  # mean attention of the readout column on the answer's column
    accuracy: float
    # + abs/rel + gate only: the readout column's switch r at the last step, mean over heads
    # and inputs (Eq. D.7: 1 reads by relative offset, 0 by absolute position); else None
    relative_share: float | None = None


def answer_columns(task, input_ids: torch.Tensor) -> torch.Tensor:
    """Per CTL input (one row each, no padding): the column of the function applied last,
    which holds the answer once every function is applied (forward: the rightmost function,
    backward: the leftmost)."""
    is_function = torch.isin(input_ids, task.function_ids)
    positions = torch.arange(input_ids.shape[1]).expand_as(input_ids)
    if task.config.direction == "forward":
        return positions.masked_fill(~is_function, -1).amax(1)
    return positions.masked_fill(~is_function, input_ids.shape[1]).amin(1)


def readout_by_length(model, task, per_length: int = 50) -> list[ReadoutCell]:
    """For each evaluation split and number of functions, over its first ``per_length``
    inputs: the attention of the readout column (the model's ``readout``: first or last
    column) on the answer's column at the last step (max over heads), the accuracy and, for
    attention with an absolute/relative switch, that column's switch at the last step."""
    readout = model.config.readout
    if readout not in ("first", "last"):
        raise ValueError(f"the model reads out {readout!r}, not one column")
    patterns = ["blocks.*.attn.pattern"]
    if any(name.endswith("attn.relative_share") for name, _ in model.named_modules()):
        patterns.append("blocks.*.attn.relative_share")
    cells = []
    for split in task.eval_splits:
        examples = task.split(split)
        counts = examples.groups["length"]
        for functions in sorted(set(counts.tolist())):
            index = torch.nonzero(counts == functions).flatten()[:per_length]
            batch = examples.subset(index).batch()
            if not bool(batch.key_padding_mask.all()):
                raise ValueError(f"{split}: inputs with {functions} functions differ in length")
            captured: dict[str, torch.Tensor] = {}
            with watching(model, patterns, captured):
                logits = run(model, batch)  # one pass: the answers and every step's attention
            last_step = by_step(captured, "attn.pattern")[-1]  # [n, heads, N, N]
            reader = model.readout_positions(batch.input_ids, batch.key_padding_mask)
            answer = answer_columns(task, batch.input_ids)
            on_answer = last_step.amax(1)[torch.arange(len(index)), reader, answer]  # [n]
            correct = logits[:, 0].argmax(-1) == batch.targets[:, 0]
            shares = by_step(captured, "attn.relative_share")  # [steps, n, heads, N] or None
            share = (None if shares is None else
                     float(shares[-1][torch.arange(len(index)), :, reader].mean()))
            cells.append(ReadoutCell(split, functions, len(index), float(on_answer.mean()),
                                     float(correct.float().mean()), share))
    return cells


def readout_figure(curves: dict[str, list[tuple[int, list[ReadoutCell]]]], condition: str,
                   out_dir: Path) -> dict:
    """One panel per model: attention of the readout column on the answer's column (solid)
    and accuracy (dotted) against the number of functions, one colour per seed."""
    panels = []
    for model_name, seeds in curves.items():
        lines = []
        for color, (seed, cells) in enumerate(seeds):
            x = [c.functions for c in cells]
            lines += [Line(x, [c.on_answer for c in cells], f"seed {seed}", color, "-", "o"),
                      Line(x, [c.accuracy for c in cells], None, color, ":")]
        panels.append(Panel(model_name, lines, ylim=(-0.02, 1.02), integer_x=True))
    return line_figure(
        out_dir, "readout_attention", panels, title="Where the readout column reads",
        xlabel="functions", ylabel="attention on the answer's column",
        caption=f"{condition} CTL, checkpoint with the best OOD-validation accuracy: attention "
                "of the readout column on the column of the function applied last (solid; last "
                "step, max over heads; mean over up to 50 inputs per length) and accuracy "
                "(dotted). Training: 1-5 functions; OOD validation 6-8; test 9-10. Sec. 5.2.1: "
                "+ rel + gate attends by relative position, which moves with the length.")


def readout_table(curves: dict[str, list[tuple[int, list[ReadoutCell]]]]) -> dict:
    """Per model and seed, each split's mean over its lengths: attention on the answer's
    column / accuracy; and, where a model has the absolute/relative switch, the readout
    column's switch over every length (min-max)."""
    splits = list(dict.fromkeys(c.split for seeds in curves.values() for _, cells in seeds
                                for c in cells))
    switched = any(c.relative_share is not None for seeds in curves.values()
                   for _, cells in seeds for c in cells)
    rows = []
    for model_name, seeds in curves.items():
        for seed, cells in seeds:
            row = [model_name, str(seed)]
            for split in splits:
                here = [c for c in cells if c.split == split]
                row.append(f"{np.mean([c.on_answer for c in here]):.2f} / "
                           f"{np.mean([c.accuracy for c in here]):.2f}")
            if switched:
                shares = [c.relative_share for c in cells if c.relative_share is not None]
                row.append(f"{min(shares):.2f}-{max(shares):.2f}" if shares else "-")
            rows.append(row)
    columns = ["model", "seed", *splits]
    if switched:
        columns.append("readout switch r (1 relative, 0 absolute)")
    return {"title": "Attention of the readout column on the answer's column / accuracy, "
                     "mean over each split's lengths",
            "columns": columns, "rows": rows}


__all__ = ["ReadoutCell", "answer_columns", "gates_open_in_order", "readout_by_length",
           "readout_figure", "readout_table", "routing_figures", "routing_probe"]
