"""Gated absolute/relative positional attention (thesis appendix D.2, Eqs. D.6-D.7).

Transformer-XL-style attention whose positional term switches, per target column
and head, between the relative offset i - j and the absolute source index j:

  r_i  = sigmoid(W_ar h_i + b_ar)                                         (one per head)
  A_ij = s * [ (W_q h_i + b_qE) . W_kE h_j                                 (a) + (c)
             + (W_q h_i + b_qP) . W_kP (p_{i-j} r_i + p_j (1 - r_i)) ]     (b) + (d), (e)
  softmax over j; s is a learned scale initialized to 1/sqrt(d_head)

with p sinusoidal embeddings. r_i = 1 is pure relative attention, r_i = 0 attends by
absolute source index (the switch fixes backward CTL, where the readout must find
column 2 at a length-dependent offset). ``dropout`` drops attention weights;
``key_dropout`` drops the content keys W_kE h_j and the position keys W_kP p before the
scores, as the thesis code's relative attention applies its attention dropout.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from sglab.models.dropout import Dropout, apply_dropout
from sglab.models.hookpoint import HookPoint
from sglab.models.relative import relative_sinusoids


class AbsRelGatedAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0,
                 key_dropout: float = 0.0):
        super().__init__()
        self.n_heads, self.head_dim, self.d_model = n_heads, d_model // n_heads, d_model
        self.query = nn.Linear(d_model, d_model, bias=False)        # W_q
        self.key = nn.Linear(d_model, d_model, bias=False)          # W_kE
        self.position_key = nn.Linear(d_model, d_model, bias=False)  # W_kP
        self.value = nn.Linear(d_model, d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.content_bias = nn.Parameter(torch.zeros(n_heads, 1, self.head_dim))   # b_qE
        self.position_bias = nn.Parameter(torch.zeros(n_heads, 1, self.head_dim))  # b_qP
        self.switch = nn.Linear(d_model, n_heads)                   # W_ar, b_ar
        self.scale = nn.Parameter(torch.tensor(1.0 / math.sqrt(self.head_dim)))
        self.dropout = Dropout(dropout)
        self.key_dropout = key_dropout
        self.pattern = HookPoint()
        self.relative_share = HookPoint()  # r_i per head, [batch, heads, N]

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        batch, length, width = x.shape
        split = lambda t: t.view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        k = apply_dropout(k, self.key_dropout, self.training)
        content = (q + self.content_bias) @ k.transpose(-2, -1)               # terms (a), (c)
        offsets = torch.arange(length - 1, -length, -1, device=x.device)      # i - j = N-1 .. -(N-1)
        positions = torch.arange(length, device=x.device)
        # W_kP p for every offset, dropped once: the absolute term's p_j is offset j's row
        keys = self.position_key(relative_sinusoids(offsets, width))
        keys = apply_dropout(keys, self.key_dropout, self.training)
        keys = keys.view(-1, self.n_heads, self.head_dim).permute(1, 2, 0)  # [H, d_head, 2N-1]
        q_pos = q + self.position_bias
        relative = q_pos @ keys                                                 # [B, H, N, 2N-1]
        # column of offset i - j in ``relative`` is (N - 1) - (i - j)
        index = (length - 1) - (positions[:, None] - positions[None, :])
        relative = relative.gather(-1, index.expand(batch, self.n_heads, length, length))
        absolute = q_pos @ keys[..., (length - 1) - positions]                   # [B, H, N, N]
        r = self.relative_share(torch.sigmoid(self.switch(x)).transpose(1, 2))  # [B, H, N]
        r = r.unsqueeze(-1)
        scores = self.scale * (content + r * relative + (1 - r) * absolute)   # Eq. D.7
        if key_padding_mask is not None:
            scores = scores.masked_fill(~key_padding_mask[:, None, None, :], float("-inf"))
        weights = self.pattern(scores.softmax(-1))
        y = self.dropout(weights) @ v
        return self.out(y.transpose(1, 2).reshape(batch, length, width))
