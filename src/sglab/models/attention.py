"""Multi-head self-attention with causal or bidirectional masking.

A = (X W_Q)(X W_K)^T / sqrt(d_head) (+ M for causal masking, M_ij = -inf for j > i),
Y = softmax(A) X W_V  -- Zuo & Guerzhoy Eqs. 1-4.

The fused ``scaled_dot_product_attention`` kernel is used unless someone watches
the ``pattern`` hook point, in which case the probabilities are computed
explicitly so that they can be captured.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from sglab.models.hookpoint import HookPoint


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, causal: bool, bias: bool, dropout: float,
                 rotary: nn.Module | None = None):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.causal = causal
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = dropout
        self.rotary = rotary
        self.pattern = HookPoint()

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        mask = None  # boolean, True = may attend
        if key_padding_mask is not None and not self.causal:
            mask = key_padding_mask[:, None, None, :]
        dropout = self.dropout if self.training else 0.0
        if self.pattern.is_watched:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
            if self.causal:
                future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
                scores = scores.masked_fill(future, float("-inf"))
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            probs = self.pattern(scores.softmax(-1))
            y = F.dropout(probs, dropout, self.training) @ v
        else:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=self.causal and mask is None
            )
        return self.out(y.transpose(1, 2).reshape(batch, length, width))
