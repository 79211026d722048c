"""Capture and edit activations by their stable dotted names without changing model code.

:func:`capture` runs a model on the same batch the evaluator runs it on
(:func:`sglab.train.evaluate.forward_batch`), so it works for every model: decoder-only,
encoder-decoder (``source_ids``), the DNC's bit rows. ``edit`` replaces activations during
that pass (ablations, activation patching), in the spirit of TransformerLens's
``run_with_hooks``: ``{hook name or pattern: function}``, the function gets the activation
and returns its replacement (or None to keep the activation, e.g. after editing it in
place). :func:`run` returns the model's output under such edits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import contextmanager, nullcontext

import torch
from torch import nn

from sglab.errors import SglabError
from sglab.models.hookpoint import HookPoint
from sglab.names import match_names  # re-exported: analyses import it from here
from sglab.tasks.base import Batch
from sglab.train.evaluate import forward_batch, model_batch

Edit = Callable[[torch.Tensor], torch.Tensor | None]


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


@contextmanager
def editing(model: nn.Module, edit: Mapping[str, Edit]):
    """Within the block, the activation of every hook point that a key of ``edit`` names (a
    name or a shell pattern, ``blocks.*.resid_post``) is replaced by what its function
    returns (None: the activation as the function left it)."""
    handles = []
    try:
        for pattern, function in edit.items():
            for point in _resolve(model, [pattern]).values():
                def hook(module, args, output, function=function):
                    replaced = function(output)
                    return output if replaced is None else replaced
                handles.append(point.register_forward_hook(hook))
        yield
    finally:
        for handle in handles:
            handle.remove()


def as_batch(batch_or_ids: Batch | torch.Tensor,
             key_padding_mask: torch.Tensor | None = None) -> Batch:
    """A :class:`Batch` as given, or one made of token ids and their padding mask."""
    if isinstance(batch_or_ids, Batch):
        if key_padding_mask is not None:
            raise SglabError("pass the padding mask inside the batch, not beside it")
        return batch_or_ids
    return Batch(batch_or_ids, None, key_padding_mask)


@torch.no_grad()
def _forward(model: nn.Module, batch: Batch, patterns: list[str],
             edit: Mapping[str, Edit] | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    was_training = model.training
    model.eval()
    out: dict[str, torch.Tensor] = {}
    try:  # edits first: a captured activation is the edited one, as the model reads it
        with editing(model, edit) if edit else nullcontext(), watching(model, patterns, out):
            output = forward_batch(model, model_batch(model, batch))
    finally:
        model.train(was_training)
    return output, out


def capture(model: nn.Module, patterns: list[str], batch_or_ids: Batch | torch.Tensor,
            key_padding_mask: torch.Tensor | None = None,
            edit: Mapping[str, Edit] | None = None) -> dict[str, torch.Tensor]:
    """Run one forward pass in eval mode and return the activations named by ``patterns``.

    ``batch_or_ids``: a :class:`Batch` (what the evaluator runs the model on: encoder
    inputs, bit rows, ...; a ``next_token`` batch is read as the model reads it, see
    :func:`sglab.train.evaluate.model_batch`), or token ids with an optional
    ``key_padding_mask``. Patterns may use shell wildcards: ``blocks.*.resid_post``,
    ``blocks.0.attn.pattern``. ``edit``: activations replaced during the pass
    (:func:`editing`); the captured ones are the edited ones.
    """
    return _forward(model, as_batch(batch_or_ids, key_padding_mask), patterns, edit)[1]


def run(model: nn.Module, batch_or_ids: Batch | torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        edit: Mapping[str, Edit] | None = None) -> torch.Tensor:
    """The model's output (eval mode) on a batch, or token ids, with ``edit`` applied (see
    :func:`capture`)."""
    return _forward(model, as_batch(batch_or_ids, key_padding_mask), [], edit)[0]


__all__ = ["as_batch", "capture", "editing", "hook_names", "match_names", "run", "watching"]
