"""Mixture-of-experts MLP layers (thesis Ch. 7): sigma-MoE, Switch and S-BASE.

The d_ff key-value pairs of a two-layer MLP are split into N_E experts of G pairs
(W1^e in R^{G x d_model}, W2^e in R^{d_model x G}, Eq. 7.11); a selector W3 in
R^{N_E x d_model} scores the experts and each token uses its top-K:

    y = sum_{e in E_x} s[e] W2^e act(W1^e x),   E_x = arg topk(s, K)          (Eq. 7.12)

Routers (``kind``):

- ``sigma_moe`` (Eqs. 7.19-7.21): s = sigmoid(W3 x), top-K without renormalisation;
  ``selection`` ablations ``softmax_before`` (softmax over all experts, then top-K) and
  ``softmax_after`` (top-K of the logits, softmax over the K selected = renormalised).
- ``switch`` (Eqs. 7.14-7.16): s = softmax(W3 x), top-K after the softmax, no capacity limit;
  loss N_E * f . p (``switch_loss_scale=code``: the authors' code, N_E^2 smaller).
- ``s_base`` (Eqs. 7.17-7.18): s = sigmoid(W3 x); in training the experts are chosen by
  top-K of 3 log-space Sinkhorn steps on the logits (balanced assignment), the mixing
  weight stays sigmoid(logit); in evaluation top-K of the sigmoid.

Expert dropout (training only): each (token, expert) score is zeroed with probability
delta before top-K, without rescaling, so a dropped expert is never chosen while K others
remain. The entropy regulariser (Eq. 7.20) is sum_e p[e] log p[e] with p the mean of
softmax(W3 x) over all tokens of the batch; ``aux_loss`` holds gamma times it (training).
``reg_scope=selected`` (softmax after top-K only) takes p over the K chosen slots instead, as
the authors' code does for that ablation: unchosen experts get no balancing gradient.

Implementations (``impl``): ``masked`` computes every expert and weights the outputs by
a dense [tokens, N_E] gate (works under ``vmap``); ``sorted`` sorts the (token, slot)
pairs by expert and runs one matmul per non-empty expert (data-dependent shapes).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from sglab.models.dropout import Dropout, keep_mask
from sglab.models.hookpoint import HookPoint


def entropy_regularizer(logits: torch.Tensor) -> torch.Tensor:
    """sum_e p[e] log p[e], p = mean over tokens of softmax(logits) (Eq. 7.20), in log space."""
    logp = F.log_softmax(logits.reshape(-1, logits.shape[-1]), dim=-1)
    log_mean = torch.logsumexp(logp, dim=0) - math.log(logp.shape[0])
    return (log_mean.exp() * log_mean).sum()


def switch_loss(probs: torch.Tensor, experts: torch.Tensor, scale: str) -> torch.Tensor:
    """N_E * f . p (Eq. 7.16): f = fraction of tokens routed to each expert (over all K
    slots), p = mean router probability; ``scale=code`` divides by N_E^2."""
    n_experts = probs.shape[-1]
    probs = probs.reshape(-1, n_experts)
    counts = F.one_hot(experts.reshape(probs.shape[0], -1), n_experts).sum(1).to(probs.dtype)
    f, p = counts.mean(0), probs.mean(0)
    loss = n_experts * (f * p).sum()
    return loss / n_experts**2 if scale == "code" else loss


def sinkhorn_log(logits: torch.Tensor, steps: int = 3) -> torch.Tensor:
    """Log-space Sinkhorn on [tokens, N_E]: alternately normalise over experts and over
    tokens (approximate balanced assignment, Eq. 7.18)."""
    z = logits
    for _ in range(steps):
        z = z - torch.logsumexp(z, dim=-1, keepdim=True)
        z = z - torch.logsumexp(z, dim=0, keepdim=True)
    return z


class MoE(nn.Module):
    def __init__(self, d_model: int, n_experts: int, expert_size: int, top_k: int, n_layers: int,
                 kind: str = "sigma_moe", selection: str = "sigmoid", init: str = "sigma",
                 impl: str = "masked", expert_dropout: float = 0.0, hidden_dropout: float = 0.0,
                 reg_weight: float = 0.0, switch_loss_scale: str = "equation",
                 reg_scope: str = "experts", activation: str = "relu", dropout: float = 0.0):
        super().__init__()
        self.n_experts, self.expert_size, self.top_k = n_experts, expert_size, top_k
        self.kind, self.selection, self.impl = kind, selection, impl
        self.expert_dropout, self.reg_weight = expert_dropout, reg_weight
        self.switch_loss_scale, self.reg_scope = switch_loss_scale, reg_scope
        self.keys = nn.Parameter(torch.empty(n_experts, d_model, expert_size))     # W1^e
        self.values = nn.Parameter(torch.empty(n_experts, expert_size, d_model))   # W2^e
        self.selector = nn.Parameter(torch.empty(n_experts, d_model))              # W3
        self.act = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.hidden_drop = Dropout(hidden_dropout)
        self.drop = Dropout(dropout)
        # selector logits [.., N_E], chosen experts [.., K] and their selection weights [.., K]
        self.scores, self.experts, self.gates = HookPoint(), HookPoint(), HookPoint()
        self.aux_loss: torch.Tensor | None = None
        self.reset_parameters(n_layers, init)

    @torch.no_grad()
    def reset_parameters(self, n_layers: int, init: str) -> None:
        d_model, d_ff = self.keys.shape[1], self.n_experts * self.expert_size
        if self.kind == "switch":  # Switch Transformer: std sqrt(0.1 / fan_in)
            nn.init.normal_(self.keys, std=math.sqrt(0.1 / d_model))
            nn.init.normal_(self.values, std=math.sqrt(0.1 / self.expert_size))
            nn.init.normal_(self.selector, std=math.sqrt(0.1 / d_model))
            return
        std1 = math.sqrt(2 / (d_model * n_layers))  # Sec. 7.4 init, as the dense pre-LN MLP
        fan_in2 = d_ff if init == "sigma" else self.expert_size
        nn.init.normal_(self.keys, std=std1)
        nn.init.normal_(self.values, std=math.sqrt(2 / (fan_in2 * n_layers)))
        w3 = torch.randn_like(self.selector)
        w3 = w3 / w3.norm(dim=1, keepdim=True)  # rows of equal norm
        self.selector.copy_(w3 * (std1 / w3.std()))

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(logits [N, N_E], weights [N, K], experts [N, K]) for tokens x [N, d]."""
        logits = x @ self.selector.T
        if self.kind == "switch" or self.selection == "softmax_before":
            scores = logits.softmax(-1)
        elif self.selection == "softmax_after":
            scores = logits
        else:
            scores = torch.sigmoid(logits)
        rank = scores
        if self.training and self.expert_dropout > 0:
            keep = keep_mask(scores, self.expert_dropout)
            low = -torch.inf if self.selection == "softmax_after" else -1.0
            scores = torch.where(keep, scores, torch.zeros_like(scores))
            rank = torch.where(keep, scores, torch.full_like(scores, low))
        if self.kind == "s_base" and self.training:
            rank = sinkhorn_log(torch.where(rank < 0, torch.full_like(rank, -1e9), logits))
        _, experts = rank.topk(self.top_k, dim=-1)
        weights = scores.gather(-1, experts)
        if self.selection == "softmax_after":
            weights = rank.gather(-1, experts).softmax(-1)
        return logits, weights, experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        logits, weights, experts = self.route(x)
        self.scores(logits.reshape(*shape[:-1], -1))
        self.experts(experts.reshape(*shape[:-1], -1))
        self.gates(weights.reshape(*shape[:-1], -1))
        y = self.masked(x, weights, experts) if self.impl == "masked" else self.sorted(
            x, weights, experts)
        self.aux_loss = None
        if self.training and self.reg_weight > 0:
            if self.kind == "switch":
                reg = switch_loss(logits.softmax(-1), experts, self.switch_loss_scale)
            elif self.reg_scope == "selected":  # over the K chosen slots (authors' code)
                reg = entropy_regularizer(logits.gather(-1, experts))
            else:
                reg = entropy_regularizer(logits)
            self.aux_loss = self.reg_weight * reg
        return self.drop(y.reshape(shape))

    def masked(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        gate = torch.zeros(x.shape[0], self.n_experts, dtype=x.dtype, device=x.device)
        gate = gate.scatter_add(1, experts, weights)
        h = self.act(torch.einsum("nd,edg->neg", x, self.keys)) * gate[..., None]
        return torch.einsum("neg,egd->nd", self.hidden_drop(h), self.values)

    def sorted(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        flat = experts.reshape(-1)
        order = flat.argsort(stable=True)
        tokens = order // self.top_k
        counts = torch.bincount(flat, minlength=self.n_experts).tolist()
        w = weights.reshape(-1)[order]
        y = torch.zeros_like(x)
        start = 0
        for e, count in enumerate(counts):
            if count == 0:
                continue
            seg = slice(start, start + count)
            h = self.act(x[tokens[seg]] @ self.keys[e]) * w[seg, None]
            y = y.index_add(0, tokens[seg], self.hidden_drop(h) @ self.values[e])
            start += count
        return y

    def forward_flops_per_token(self) -> int:
        """Selector plus the K chosen experts (what ``sorted`` computes; ``masked`` computes
        all N_E experts)."""
        d = self.keys.shape[1]
        return 2 * d * self.n_experts + 2 * 2 * d * self.expert_size * self.top_k


__all__ = ["MoE", "entropy_regularizer", "sinkhorn_log", "switch_loss"]
