"""Directional geometric attention of the Neural Data Router (thesis Sec. 5.1.2).

For target (query) column i and source (key) column j of one head:

  P_ij = sigmoid(alpha * q_i . k_j + beta * D_ij + gamma)                 (Eq. 5.10)
  D_ij = W_LR h_i + b_LR  if i <= j,   W_RL h_i + b_RL  if i > j          (Eq. 5.9)
  A_ij = P_ij * prod_{k in S_ij} (1 - P_ik),  A_ii = 0                    (Eq. 5.7)
  S_ij = {k not in {i, j} : |i - k| <  |i - j|}  if i < j                  (Eq. 5.8)
         {k not in {i, j} : |i - k| <= |i - j|}  if j < i

Sources are visited nearest first and, at equal distance, the right one counts as
closer; every match down-weights all farther sources (stick breaking). Padded
sources and the diagonal get P = 0, so they are transparent. The product is taken
in log space from one cumulative sum per row, O(N^2) per head:

  C_i[k] = sum_{m <= k} log(1 - P_im)
  log prod = C_i[j - 1] - C_i[2i - j]              for j > i  (C_i[negative] = 0)
  log prod = C_i[min(2i - j, N - 1)] - C_i[j]      for j < i

Rows are not normalized (sum <= 1) unless ``normalize`` is set (the reported NDR runs
leave it off).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from sglab.models.dropout import Dropout
from sglab.models.hookpoint import HookPoint


def _gather_indices(length: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices into the zero-padded cumulative sum Cp (Cp[k + 1] = C[k], Cp[0] = 0).

    Returns (upper, lower) with log prod_ij = Cp[upper_ij] - Cp[lower_ij].
    """
    i = torch.arange(length, device=device)[:, None]
    j = torch.arange(length, device=device)[None, :]
    right = j > i
    upper = torch.where(right, j, torch.clamp(2 * i - j, max=length - 1) + 1)
    lower = torch.where(right, torch.clamp(2 * i - j + 1, min=0), j + 1)
    return upper, lower


def geometric_weights(logits: torch.Tensor, source_mask: torch.Tensor | None = None,
                      normalize: bool = False) -> torch.Tensor:
    """A from the logits z of Eq. 5.10 (``[..., N, N]``, query x source), Eqs. 5.7-5.8.

    ``source_mask`` (broadcastable bool, True = real token) makes padded sources transparent.
    """
    length = logits.shape[-1]
    blocked = torch.eye(length, dtype=torch.bool, device=logits.device)
    if source_mask is not None:
        blocked = blocked | ~source_mask
    logits = logits.masked_fill(blocked, float("-inf"))  # P = 0, log(1 - P) = 0
    log_p = F.logsigmoid(logits)
    log_not_p = F.logsigmoid(-logits)
    cumulative = F.pad(log_not_p.cumsum(-1), (1, 0))  # Cp[0] = 0
    upper, lower = _gather_indices(length, logits.device)
    shape = (*logits.shape[:-1], length)
    log_product = (cumulative.gather(-1, upper.expand(shape))
                   - cumulative.gather(-1, lower.expand(shape)))
    weights = torch.exp(log_p + log_product)
    if normalize:
        weights = weights / weights.sum(-1, keepdim=True).clamp_min(1e-6)
    return weights


class GeometricAttention(nn.Module):
    """Multi-head directional geometric self-attention (bidirectional by construction)."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, normalize: bool = False,
                 kv_bias: bool = False):
        super().__init__()
        self.n_heads, self.head_dim, self.d_model = n_heads, d_model // n_heads, d_model
        self.query = nn.Linear(d_model, d_model, bias=True)    # W_q, b_q
        # W_kE and W_v; Eq. 5.10 has no key bias (the NDR code neither), the CTL++ code's
        # layer has key and value biases (kv_bias)
        self.key = nn.Linear(d_model, d_model, bias=kv_bias)
        self.value = nn.Linear(d_model, d_model, bias=kv_bias)
        self.direction = nn.Linear(d_model, 2 * n_heads)       # [W_LR; W_RL] per head (Eq. 5.9)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.alpha = nn.Parameter(torch.tensor(1.0 / math.sqrt(self.head_dim)))
        self.beta = nn.Parameter(torch.tensor(1.0))
        self.gamma = nn.Parameter(torch.tensor(0.0))
        self.dropout = Dropout(dropout)  # on the content keys only, never the directions
        self.normalize = normalize
        self.pattern = HookPoint()

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """z_ij of Eq. 5.10, shape [batch, heads, N, N]."""
        batch, length, _ = x.shape
        split = lambda t: t.view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)
        q, k = split(self.query(x)), split(self.dropout(self.key(x)))
        content = q @ k.transpose(-2, -1)
        left_to_right, right_to_left = self.direction(x).view(
            batch, length, 2, self.n_heads).permute(2, 0, 3, 1).unsqueeze(-1)  # [B, H, N, 1]
        source_right = torch.ones(length, length, dtype=torch.bool, device=x.device).triu()
        direction = torch.where(source_right, left_to_right, right_to_left)  # Eq. 5.9
        return self.alpha * content + self.beta * direction + self.gamma

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        batch, length, width = x.shape
        mask = None if key_padding_mask is None else key_padding_mask[:, None, None, :]
        weights = self.pattern(geometric_weights(self.logits(x), mask, self.normalize))
        v = self.value(x).view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)
        y = weights @ v
        return self.out(y.transpose(1, 2).reshape(batch, length, width))
