"""Relative positional self-attention in the form of Transformer-XL (Dai et al., 2019).

Per head (thesis Sec. 4.2.1 / App. C.3, in the equivalent per-head form):

    q_i = W_q h_i,   k_j = W_kE h_j,   r_{j-i} = W_kP P_{j-i}
    logit_ij = ((q_i + u) . k_j + (q_i + v) . r_{j-i}) * s,   s = 1 / sqrt(d_head)

where P_d is the sinusoidal encoding of the signed distance d = j - i and u, v are
learned per-head vectors initialised to zero: (q_i . k_j) is content addressing,
(q_i . r) content-dependent relative position, (u . k_j) a global content bias and
(v . r) a global position bias. With a causal mask only d <= 0 is ever used (the
decoder form); without one, both signs are (the "symmetric" encoder form).

The distance term is computed once for every distance in [-(L-1), L-1] and then
gathered into the L x L matrix, so the cost is O(L^2) per head. With ``learned_scale`` s
is a trained scalar initialised to 1 / sqrt(d_head), as in the thesis code's relative
attention.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from sglab.models.attention import SelfAttention
from sglab.models.dropout import apply_dropout


def relative_sinusoids(distances: torch.Tensor, d_model: int) -> torch.Tensor:
    """Sinusoidal encodings of (signed) distances: [..., d_model], [sin | cos] halves."""
    half = d_model // 2
    frequencies = torch.exp(
        torch.arange(half, dtype=torch.float32, device=distances.device) * (-math.log(10000.0) / half)
    )
    angles = distances.to(torch.float32)[..., None] * frequencies
    encoding = torch.cat([angles.sin(), angles.cos()], dim=-1)
    if d_model % 2:
        encoding = F.pad(encoding, (0, 1))
    return encoding


class RelativeSelfAttention(SelfAttention):
    """Multi-head self-attention with Transformer-XL relative positions (no absolute PE).

    Shares the fused ``qkv`` (rows [W_q; W_kE; W_v]), the output projection, the
    ``pattern`` hook, ``weight_views`` and ``freeze`` with :class:`SelfAttention`.
    """

    def __init__(self, d_model: int, n_heads: int, causal: bool, bias: bool = False,
                 dropout: float = 0.0, out_projection: bool = True, key_dropout: float = 0.0,
                 learned_scale: bool = False):
        super().__init__(d_model, n_heads, causal, bias, dropout, None, out_projection)
        self.key_dropout = key_dropout  # on k and r before the scores (the thesis code's)
        scale = torch.tensor(1.0 / math.sqrt(self.head_dim))
        if learned_scale:
            self.scale = nn.Parameter(scale)
        else:
            self.register_buffer("scale", scale, persistent=False)
        self.position_key = nn.Linear(d_model, d_model, bias=False)  # W_kP
        self.content_bias = nn.Parameter(torch.zeros(n_heads, self.head_dim))  # u
        self.position_bias = nn.Parameter(torch.zeros(n_heads, self.head_dim))  # v

    def relative_logits(self, q: torch.Tensor) -> torch.Tensor:
        """(q_i + v) . r_{j-i} for every (i, j): [batch, heads, L, L] (unscaled)."""
        length = q.shape[-2]
        distances = torch.arange(-(length - 1), length, device=q.device)  # d = j - i
        encodings = relative_sinusoids(distances, self.n_heads * self.head_dim).to(q.dtype)
        r = self.position_key(encodings).view(2 * length - 1, self.n_heads, self.head_dim)
        r = apply_dropout(r, self.key_dropout, self.training)
        by_distance = (q + self.position_bias[:, None, :]) @ r.permute(1, 2, 0)  # [B, H, L, 2L-1]
        positions = torch.arange(length, device=q.device)
        index = (positions[None, :] - positions[:, None]) + (length - 1)  # j - i, shifted to >= 0
        return by_distance.gather(-1, index.expand(*by_distance.shape[:-2], length, length))

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        k = apply_dropout(k, self.key_dropout, self.training)
        content = (q + self.content_bias[:, None, :]) @ k.transpose(-2, -1)
        scores = (content + self.relative_logits(q)) * self.scale
        if self.causal:
            future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        if key_padding_mask is not None:
            scores = scores.masked_fill(~key_padding_mask[:, None, None, :], float("-inf"))
        probs = self.pattern(scores.softmax(-1))
        y = apply_dropout(probs, self.dropout, self.training) @ v
        return self.out(y.transpose(1, 2).reshape(batch, length, width))


__all__ = ["RelativeSelfAttention", "relative_sinusoids"]
