"""Sparsity of MLP units and expert usage (thesis Figs. 7.1, 7.3, F.1-F.4).

Pure reductions of captured activations plus :func:`ffn_statistics`, which captures
``blocks.{i}.mlp.hidden`` (dense / Top-K units), ``blocks.{i}.mlp.experts`` (chosen
experts, [.., K]) and ``blocks.{i}.mlp.gates`` (their selection weights) of every layer on a
batch of inputs, and :func:`mlp_flops_per_token`, the compute of one MLP sub-block.
"""

from __future__ import annotations

import fnmatch
import math
import re

import torch
from torch import nn

from sglab.analysis.hooks import capture, hook_names
from sglab.models.moe import MoE


def active_units(hidden: torch.Tensor) -> float:
    """Mean number of nonzero units per token (hidden: [..., d_ff])."""
    return float((hidden != 0).reshape(-1, hidden.shape[-1]).sum(-1).float().mean())


def expert_usage(experts: torch.Tensor, n_experts: int,
                 gates: torch.Tensor | None = None) -> torch.Tensor:
    """Share of each expert [N_E]: of all (token, slot) selections, or, given ``gates`` (the
    selection weights of the chosen experts, shaped like ``experts``), of the total selection
    weight sel(x) (thesis Fig. 7.3: "the total proportion of the expert selection weights")."""
    weights = None if gates is None else gates.reshape(-1).float()
    counts = torch.bincount(experts.reshape(-1), weights=weights, minlength=n_experts).float()
    return counts / counts.sum().clamp_min(1e-12)


def top_share(usage: torch.Tensor, fraction: float = 0.25) -> float:
    """Share of the total held by the most popular ``fraction`` of experts (collapse: -> 1)."""
    n = max(1, round(fraction * len(usage)))
    return float(usage.sort(descending=True).values[:n].sum())


def dead_experts(usage: torch.Tensor) -> int:
    """Experts that were never chosen."""
    return int((usage == 0).sum())


def usage_entropy(usage: torch.Tensor) -> float:
    """Entropy of the usage distribution divided by log N_E (1 = uniform, 0 = one expert)."""
    p = usage[usage > 0]
    return float(-(p * p.log()).sum() / math.log(len(usage))) if len(usage) > 1 else 1.0


def co_occurrence(experts: torch.Tensor, n_experts: int) -> torch.Tensor:
    """[N_E, N_E]: how often experts i != j are chosen for the same token (thesis Fig. F.3)."""
    one_hot = torch.zeros(experts.reshape(-1, experts.shape[-1]).shape[0], n_experts)
    one_hot.scatter_(1, experts.reshape(-1, experts.shape[-1]), 1.0)
    counts = one_hot.T @ one_hot
    return counts.fill_diagonal_(0)


def _layers(captured: dict[str, torch.Tensor], suffix: str) -> list[torch.Tensor]:
    found = sorted((int(m.group(1)), v) for k, v in captured.items()
                   if (m := re.fullmatch(rf"blocks\.(\d+)\.mlp\.{suffix}", k)))
    return [v for _, v in found]


def ffn_statistics(model: nn.Module, input_ids: torch.Tensor) -> dict[str, list]:
    """Per layer: ``active_units`` (dense/Top-K), or, for MoE layers, ``usage`` (share of the
    selection weight per expert, sorted by popularity, descending; Fig. 7.3), its
    ``usage_entropy`` and ``top_quarter_share``, and ``dead_experts`` (never chosen)."""
    names = set(hook_names(model))
    patterns = [p for p in ("blocks.*.mlp.hidden", "blocks.*.mlp.experts", "blocks.*.mlp.gates")
                if any(fnmatch.fnmatchcase(n, p) for n in names)]
    captured = capture(model, patterns, input_ids) if patterns else {}
    out: dict[str, list] = {}
    hidden = _layers(captured, "hidden")
    if hidden:
        out["active_units"] = [active_units(h) for h in hidden]
    experts = _layers(captured, "experts")
    if experts:
        n_experts = model.config.ffn.experts
        gates = _layers(captured, "gates")
        usages = [expert_usage(e, n_experts, g) for e, g in zip(experts, gates, strict=True)]
        out["usage"] = [u.sort(descending=True).values.tolist() for u in usages]
        out["dead_experts"] = [dead_experts(expert_usage(e, n_experts)) for e in experts]
        out["usage_entropy"] = [usage_entropy(u) for u in usages]
        out["top_quarter_share"] = [top_share(u) for u in usages]
        if experts[0].shape[-1] > 1:
            out["co_occurrence"] = [
                (co_occurrence(e, n_experts) / e.reshape(-1, e.shape[-1]).shape[0]).tolist()
                for e in experts]
    return out


def mlp_flops_per_token(model: nn.Module, selector: bool = True) -> int:
    """Forward matmul FLOPs per token of the first block's MLP sub-block (dense, Top-K, PKM
    or MoE). ``selector=False`` leaves out an MoE's expert scores (2 d_model N_E), as the
    thesis's "% FLOPs" does (Sec. 7.5.3): the K chosen experts only."""
    mlp = model.blocks[0].mlp
    flops = mlp.forward_flops_per_token()
    if not selector and isinstance(mlp, MoE):
        flops -= 2 * mlp.selector.numel()
    return flops


__all__ = ["active_units", "co_occurrence", "dead_experts", "expert_usage", "ffn_statistics",
           "mlp_flops_per_token", "top_share", "usage_entropy"]
