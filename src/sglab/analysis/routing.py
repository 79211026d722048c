"""Step-by-step routing of a shared-layer model: attention maps and copy-gate activity.

For one input, every computational step t has an attention map A_t (per head,
[target, source]) and, with the copy gate, a gate vector g^(i,t) per column i
(thesis Figs. 5.3, D.6, D.10). These functions capture them through the stable hook
names ``blocks.{t}.attn.pattern`` and ``blocks.{t}.gate`` and reduce them for plots.
"""

from __future__ import annotations

import re

import torch
from torch import nn

from sglab.analysis.hooks import capture


def _by_step(captured: dict[str, torch.Tensor], suffix: str) -> torch.Tensor | None:
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
    trace = {"attention": _by_step(captured, "attn.pattern")[:, 0, :, :length, :length]}
    gates = _by_step(captured, "gate")
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
