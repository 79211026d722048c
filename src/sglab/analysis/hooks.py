"""Capture activations by their stable dotted names without changing model code."""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from sglab.models.hookpoint import HookPoint
from sglab.names import match_names  # re-exported: analyses import it from here


def hook_names(model: nn.Module) -> list[str]:
    """All names that :func:`capture` accepts for this model."""
    return [name for name, module in model.named_modules() if isinstance(module, HookPoint)]


def _resolve(model: nn.Module, patterns: list[str]) -> dict[str, HookPoint]:
    points = {n: m for n, m in model.named_modules() if isinstance(m, HookPoint)}
    return {n: points[n] for n in match_names(list(points), patterns)}


@contextmanager
def watching(model: nn.Module, patterns: list[str], store: dict[str, torch.Tensor]):
    """Within the block, the named activations of every forward pass land in ``store``."""
    handles = []
    for name, point in _resolve(model, patterns).items():
        def hook(module, args, output, name=name):
            store[name] = output.detach()
        handles.append(point.register_forward_hook(hook))
    try:
        yield store
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def capture(model: nn.Module, patterns: list[str], input_ids: torch.Tensor,
            key_padding_mask: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Run one forward pass in eval mode and return the activations named by ``patterns``.

    Patterns may use shell wildcards: ``blocks.*.resid_post``, ``blocks.0.attn.pattern``.
    """
    was_training = model.training
    model.eval()
    out: dict[str, torch.Tensor] = {}
    try:
        with watching(model, patterns, out):
            model(input_ids, key_padding_mask=key_padding_mask)
    finally:
        model.train(was_training)
    return out
