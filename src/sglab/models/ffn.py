"""The MLP sub-block of a Transformer layer and its approximations (thesis Ch. 7).

``model.ffn.kind``: ``dense`` (y = W2 act(W1 x)), ``topk`` (keep the K largest units of
u = act(W1 x), Eqs. 7.6-7.7; computed densely, a quality probe), ``pkm`` (product-key
memory, Eq. 7.8 and App. F.1.3), ``sigma_moe`` / ``switch`` / ``s_base`` (models/moe.py).
Every module has ``forward_flops_per_token()``: the matmul FLOPs (2 x multiply-adds) of
one token's forward pass through the layer.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from sglab.models.dropout import Dropout
from sglab.models.hookpoint import HookPoint
from sglab.models.moe import MoE
from sglab.models.transformer_config import MOE_KINDS


class MLP(nn.Module):
    """y = W2 act(W1 x); with ``top_k`` only the K largest units of u reach W2 (Eq. 7.7)."""

    def __init__(self, d_model: int, d_ff: int, bias: bool, activation: str, dropout: float,
                 top_k: int | None = None):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.out = nn.Linear(d_ff, d_model, bias=bias)
        self.act = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.top_k = top_k
        self.hidden = HookPoint()
        self.drop = Dropout(dropout)

    def forward(self, x):
        u = self.act(self.up(x))
        if self.top_k is not None and self.top_k < u.shape[-1]:
            kth = u.topk(self.top_k, dim=-1).values[..., -1:]  # E_x = arg topk(u, K), Eq. 7.6
            u = torch.where(u >= kth, u, torch.zeros_like(u))
        return self.drop(self.out(self.hidden(u)))

    def forward_flops_per_token(self) -> int:
        return 2 * 2 * self.up.in_features * self.up.out_features


class ProductKeyMemory(nn.Module):
    """PKM without query projection or batch norm (thesis App. F.1.3).

    Per head h the input halves x_a | x_b score the sub-key tables (u_a = K_a^h x_a,
    u_b = K_b^h x_b, n_sub rows each); value i has score u[i] = u_b[i // n_sub] +
    u_a[i mod n_sub] (Eq. 7.8). The top-K of each half, then of their K^2 sums, hold the
    global top-K. The heads' selected scores go through ReLU (or one softmax over all
    heads' selections) and weight rows of one shared value table [n_sub^2, d_model].
    """

    def __init__(self, d_model: int, n_subkeys: int, heads: int, top_k: int, activation: str,
                 n_layers: int, dropout: float = 0.0):
        super().__init__()
        half = d_model // 2
        self.n_sub, self.heads, self.top_k, self.activation = n_subkeys, heads, top_k, activation
        std = math.sqrt(2 / (n_layers * d_model))
        self.keys_a = nn.Parameter(torch.randn(heads, n_subkeys, half) * std)
        self.keys_b = nn.Parameter(torch.randn(heads, n_subkeys, half) * std)
        self.values = nn.Parameter(torch.randn(n_subkeys**2, d_model) * std)
        self.hidden = HookPoint()
        self.drop = Dropout(dropout)

    def search(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores and value indices [N, heads, K] of the top-K values per head."""
        half = x.shape[-1] // 2
        u_a = torch.einsum("nd,hsd->nhs", x[:, :half], self.keys_a)
        u_b = torch.einsum("nd,hsd->nhs", x[:, half:], self.keys_b)
        k = min(self.top_k, self.n_sub)
        va, ia = u_a.topk(k, dim=-1)
        vb, ib = u_b.topk(k, dim=-1)
        sums = (vb[..., :, None] + va[..., None, :]).flatten(-2)            # Eq. 7.8
        index = (ib[..., :, None] * self.n_sub + ia[..., None, :]).flatten(-2)
        scores, pos = sums.topk(min(self.top_k, sums.shape[-1]), dim=-1)
        return scores, index.gather(-1, pos)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        scores, index = self.search(x.reshape(-1, shape[-1]))
        scores, index = scores.flatten(1), index.flatten(1)
        weights = scores.softmax(-1) if self.activation == "softmax" else torch.relu(scores)
        weights = self.hidden(weights)
        y = torch.einsum("nk,nkd->nd", weights, self.values[index])
        return self.drop(y.reshape(shape))

    def forward_flops_per_token(self) -> int:
        d = self.values.shape[1]
        return 2 * self.heads * self.n_sub * d + 2 * self.heads * min(
            self.top_k, self.n_sub**2) * d


def make_ffn(ffn, d_model: int, n_layers: int, bias: bool, dropout: float) -> nn.Module | None:
    """The MLP sub-block of a transformer's ``ffn`` family (None for kind ``none``)."""
    if ffn.kind == "none":
        return None
    if ffn.kind in ("dense", "topk"):
        return MLP(d_model, ffn.d_ff or 4 * d_model, bias, ffn.activation, dropout,
                   ffn.top_k if ffn.kind == "topk" else None)
    if ffn.kind == "pkm":
        return ProductKeyMemory(d_model, ffn.subkeys, ffn.heads, ffn.top_k, ffn.score_activation,
                                n_layers, dropout)
    return MoE(d_model, ffn.experts, ffn.expert_size, ffn.top_k, n_layers, kind=ffn.kind,
               selection=getattr(ffn, "selection", "sigmoid"), init=getattr(ffn, "init", "sigma"),
               reg_scope=getattr(ffn, "reg_scope", "experts"),
               impl=ffn.impl, expert_dropout=ffn.expert_dropout,
               hidden_dropout=ffn.hidden_dropout, reg_weight=ffn.reg_weight,
               switch_loss_scale=getattr(ffn, "loss_scale", "equation"),
               activation=ffn.activation, dropout=dropout)


def ffn_parameters(config) -> int:
    """Parameters of one MLP sub-block of a TransformerConfig: dense 2 d d_ff; MoE
    2 d N_E G + N_E d; PKM n^2 d + heads n d (biases not counted)."""
    ffn, d = config.ffn, config.d_model
    if ffn.kind == "none":
        return 0
    if ffn.kind in ("dense", "topk"):
        return 2 * d * (ffn.d_ff or 4 * d)
    if ffn.kind == "pkm":
        return ffn.subkeys**2 * d + ffn.heads * ffn.subkeys * d
    return 2 * d * ffn.experts * ffn.expert_size + ffn.experts * d


def param_matched_d_ff(n_experts: int, expert_size: int) -> int:
    """Dense twin of an MoE layer: N_E G + N_E / 2 absorbs the selector (notes section 8)."""
    return n_experts * expert_size + n_experts // 2


__all__ = ["MLP", "MOE_KINDS", "ProductKeyMemory", "ffn_parameters", "make_ffn",
           "param_matched_d_ff"]
