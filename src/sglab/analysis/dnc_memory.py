"""Probes of a trained DNC's memory (thesis Ch. 2, Figs. 2.2b and 2.4): the time-stacked
states of its memory module on a batch (forward and backward link distributions, read
modes, read masks) and the summaries the chapter reads from them."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from sglab.analysis.hooks import capture


def memory_states(model: nn.Module, inputs: torch.Tensor, names: list[str]
                  ) -> dict[str, torch.Tensor]:
    """The DNC's memory states ``names`` (``forward_links``, ``backward_links``,
    ``read_modes``, ``read_masks``, ...) over time on ``inputs``, each [batch, time, ...]
    (one eval-mode forward pass)."""
    found = capture(model, [f"dnc.{n}" for n in names], inputs)
    return {n: found[f"dnc.{n}"] for n in names if f"dnc.{n}" in found}


def probe(run: Any, names: list[str]) -> tuple[dict[str, torch.Tensor], Any]:
    """The memory states of a finished run's last model on the first batch of its
    validation set, and that batch; computed once per run and list of names. ``run``: a
    finished run (``model()``, ``task`` and ``measure(name, compute)``)."""
    def compute(run):
        data = run.task.valid[0]
        return memory_states(run.model(), data.inputs, names), data
    return run.measure("probe/" + ",".join(names), compute)


def read_shares(modes: torch.Tensor, backward: torch.Tensor, forward: torch.Tensor) -> torch.Tensor:
    """How much of the read weighting w^r = pi[1] b + pi[2] c + pi[3] f (Eq. A.12) each mode
    supplies: pi[k] times the mass of its distribution, [..., 3] for (backward, content,
    forward); the content weights sum to 1. A mode weight on empty links reads nothing, so
    this, besides pi, says which addressing a read uses."""
    return modes * torch.stack([backward.sum(-1), torch.ones_like(backward[..., 0]),
                                forward.sum(-1)], dim=-1)


def forward_reads(forward: torch.Tensor, backward: torch.Tensor, modes: torch.Tensor,
                  read: torch.Tensor) -> dict[str, Any]:
    """Fig. 2.4 in numbers for one sequence of one read head: ``forward``/``backward`` link
    distributions [time, cells], read modes pi [time, 3] (backward, content, forward) and
    the steps that read (``read``, a [time] mask). ``peak``: the mean over read steps of
    the forward distribution's largest entry; ``modes``: the mean pi over read steps;
    ``shares``: the mean share of the read weighting each mode supplies
    (:func:`read_shares`)."""
    shares = read_shares(modes, backward, forward)
    return {"peak": float(forward[read].amax(-1).mean()),
            "modes": modes[read].mean(0).tolist(), "shares": shares[read].mean(0).tolist()}


def read_mask_switch(mask: torch.Tensor) -> dict[str, float | int]:
    """Fig. 2.2b in numbers: a key-value sequence's read mask [time, channels] over its
    three phases of L + 1 steps (store, query by keys, query by values). ``switch``: the
    mean absolute difference over channels between the mean mask of the key-query phase
    and of the value-query phase; ``within``: the same between the two halves of the
    key-query phase (0 for one word); ``words``: L."""
    words = mask.shape[0] // 3 - 1
    keys, values = mask[words + 1: 2 * words + 1], mask[2 * words + 2: 3 * words + 2]
    switch = float((keys.mean(0) - values.mean(0)).abs().mean())
    half = max(words // 2, 1)
    within = float((keys[:half].mean(0) - keys[half:].mean(0)).abs().mean()) \
        if words > 1 else 0.0
    return {"switch": switch, "within": within, "words": words}


__all__ = ["forward_reads", "memory_states", "probe", "read_mask_switch", "read_shares"]
