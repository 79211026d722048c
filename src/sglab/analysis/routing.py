"""Step-by-step routing of a shared-layer model: attention maps and copy-gate activity.

For one input, every computational step t has an attention map A_t (per head,
[target, source]) and, with the copy gate, a gate vector g^(i,t) per column i
(thesis Figs. 5.3, D.6, D.10). These functions capture them through the stable hook
names ``blocks.{t}.attn.pattern`` and ``blocks.{t}.gate`` and reduce them for plots;
:func:`probe_longest_input` runs a trained model on the longest input of a split and
keeps both, and :func:`first_open_steps` reads the step at which each column's gate opens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from sglab.analysis.hooks import capture


def by_step(captured: dict[str, torch.Tensor], suffix: str) -> torch.Tensor | None:
    """The captured ``blocks.{t}.<suffix>`` activations stacked in step order (None if
    none was captured)."""
    steps = sorted((int(m.group(1)), v) for k, v in captured.items()
                   if (m := re.fullmatch(rf"blocks\.(\d+)\.{re.escape(suffix)}", k)))
    return torch.stack([v for _, v in steps]) if steps else None


def routing_trace(model: nn.Module, input_ids: torch.Tensor,
                  key_padding_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Attention and gates of the first example of a batch, for every step.

    Returns ``attention`` [steps, heads, N, N] (target x source) and, when the model has
    copy gates, ``gates`` [steps, N, d_model]; padding columns are cut off.
    """
    patterns = ["blocks.*.attn.pattern"]
    names = {name for name, _ in model.named_modules()}
    if any(name.endswith(".gate") for name in names):
        patterns.append("blocks.*.gate")
    captured = capture(model, patterns, input_ids[:1],
                       None if key_padding_mask is None else key_padding_mask[:1])
    length = int(key_padding_mask[0].sum()) if key_padding_mask is not None else input_ids.shape[1]
    trace = {"attention": by_step(captured, "attn.pattern")[:, 0, :, :length, :length]}
    gates = by_step(captured, "gate")
    if gates is not None:
        trace["gates"] = gates[:, 0, :length]
    return trace


def max_over_heads(attention: torch.Tensor) -> torch.Tensor:
    """[steps, heads, N, N] -> [steps, N, N] (the thesis's view for many heads)."""
    return attention.amax(dim=1)


def gate_activity(gates: torch.Tensor) -> torch.Tensor:
    """Mean gate value per column and step: [steps, N, d] -> [steps, N]."""
    return gates.mean(dim=-1)


def active_steps(gates: torch.Tensor, threshold: float = 0.5) -> torch.Tensor:
    """For each column, the steps at which its mean gate exceeds ``threshold``: [N, steps] bool."""
    return (gate_activity(gates) > threshold).T


@dataclass
class RoutingProbe:
    """One input through a trained shared-layer model, step by step."""

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


def probe_longest_input(model: nn.Module, task: Any, split: str = "ood_test") -> RoutingProbe:
    """``model`` (a sequence classifier of ``task``) on the longest input of ``split``: its
    attention at every step and head, the mean copy-gate value of every column at every step,
    and its prediction for that input."""
    examples = task.split(split)
    example = examples.subset(torch.tensor([int(examples.lengths.argmax())]))
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
