"""Adaptive Computation Time over the steps of a shared layer (thesis appendix D.1).

One halting unit, shared by all steps, scores every column i after every step t:

    p̂(i,t) = sigmoid(W_H h(i,t) + b_H)                                      (D.1)
    T(i) = min(T_max, min{t' : sum_{t<=t'} p̂(i,t) >= 1 - eps})              (D.2)
    p(i,t) = p̂(i,t) for t < T(i),  R(i) at t = T(i),  0 after               (D.3)
    R(i) = 1 - sum_{t<T(i)} p̂(i,t)                                          (D.4)
    o(i) = sum_{t<=T(i)} p(i,t) h(i,t)                                       (D.5)

``graves`` ("A" in the thesis) is exactly this. ``ut`` ("U") is the variant of
Dehghani et al. (2019), Listings 1-2: a column halts when the running sum exceeds
1 - eps (strictly), and its output is the running state

    s(i,t) = w(i,t) h(i,t) + (1 - w(i,t)) s(i,t-1),   s(i,0) = 0,   o(i) = s(i,T_max)

with w = p̂ before the halting step, R at it and 0 after (the output is frozen once
the column halts). A column that reaches T_max without crossing the threshold gets no
remainder: its last weight is p̂ and R = 0, so its weights do not sum to one (the
mishandling the thesis points out).

In both variants halting only picks the readout steps: every column runs all T_max
steps, keeps updating after it halted and stays visible to the attention of the others.
The ponder loss is L_ACT = alpha * mean of R over the real (non-padding) columns.
"""

from __future__ import annotations

import torch
from torch import nn

from sglab.models.hookpoint import HookPoint

VARIANTS = ("graves", "ut")


def halting_weights(p_hat: torch.Tensor, threshold: float,
                    variant: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Readout weights of every step, remainders and halting steps.

    ``p_hat``: halting unit outputs, shape [steps, ...]. Returns ``weights`` (same shape:
    p for ``graves``, the recurrence weights w for ``ut``), the remainder R and the halting
    step T (1-based), both of shape ``p_hat.shape[1:]``.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown ACT variant {variant!r}; expected one of {VARIANTS}")
    n_steps = p_hat.shape[0]
    cumulative = p_hat.cumsum(0)
    step = torch.arange(n_steps, device=p_hat.device).view(-1, *[1] * (p_hat.dim() - 1))
    if variant == "graves":
        reached = cumulative >= threshold
        reached[-1] = True  # T_max
        halt = reached.int().argmax(0)  # first step that reached the threshold (0-based)
        before = step < halt
        remainder = 1 - (p_hat * before).sum(0)
        weights = p_hat * before + remainder * (step == halt)
        return weights, remainder, halt + 1
    reached = cumulative > threshold
    halted = reached.any(0)
    halt = torch.where(halted, reached.int().argmax(0), n_steps - 1)
    before = step < halt
    remainder = torch.where(halted, 1 - (p_hat * before).sum(0), torch.zeros_like(p_hat[0]))
    last = torch.where(halted, remainder, p_hat.gather(0, halt[None]).squeeze(0))
    weights = p_hat * before + last * (step == halt)
    return weights, remainder, halt + 1


def mix_states(states: torch.Tensor, weights: torch.Tensor, variant: str) -> torch.Tensor:
    """The output of every column from its states [steps, ..., d] and step weights [steps, ...]."""
    weights = weights.to(states.dtype).unsqueeze(-1)
    if variant == "graves":
        return (weights * states).sum(0)
    out = torch.zeros_like(states[0])
    for w, h in zip(weights, states):
        out = w * h + (1 - w) * out
    return out


class AdaptiveHalting(nn.Module):
    """The halting unit and the ACT readout of a shared-layer stack.

    Hook points: ``weights`` (readout weight of every step, [steps, batch, len]) and
    ``steps`` (the halting step T of every column, [batch, len]).
    """

    def __init__(self, d_model: int, variant: str, threshold: float, loss_weight: float,
                 bias_init: float):
        super().__init__()
        self.variant, self.threshold = variant, threshold
        self.loss_weight, self.bias_init = loss_weight, bias_init
        self.unit = nn.Linear(d_model, 1)
        self.weights, self.steps = HookPoint(), HookPoint()
        self.reset_bias()

    def reset_bias(self) -> None:
        nn.init.constant_(self.unit.bias, self.bias_init)

    fix_weights = reset_bias  # b_H survives any init scheme

    def forward(self, states: torch.Tensor,
                real: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``states`` [steps, batch, len, d], ``real`` [batch, len] (False = padding).

        Returns the output [batch, len, d], L_ACT (a scalar) and the halting steps [batch, len].
        """
        p_hat = torch.sigmoid(self.unit(states).float()).squeeze(-1)
        weights, remainder, steps = halting_weights(p_hat, self.threshold, self.variant)
        weights, steps = self.weights(weights), self.steps(steps)
        out = mix_states(states, weights, self.variant)
        count = real.sum().clamp(min=1)
        loss = self.loss_weight * (remainder * real).sum() / count
        return out, loss, steps


__all__ = ["AdaptiveHalting", "halting_weights", "mix_states"]
