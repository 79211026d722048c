"""Multi-head self-attention with causal or bidirectional masking.

A = (X W_Q)(X W_K)^T / sqrt(d_head) (+ M for causal masking, M_ij = -inf for j > i),
Y = softmax(A) X W_V  -- Zuo & Guerzhoy Eqs. 1-4.

The fused ``scaled_dot_product_attention`` kernel is used unless someone watches
the ``pattern`` hook point, in which case the probabilities are computed
explicitly so that they can be captured.

Q, K and V come from one fused ``qkv`` projection (rows [W_Q; W_K; W_V]);
``weight_views()`` names the slices. :meth:`SelfAttention.freeze` fixes W_Q = W_K = 0
(uniform attention over the allowed keys) and/or W_V = I, as in the one-layer model
of Li et al. (2023): the frozen rows become buffers and only the others train.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from sglab.models.dropout import apply_dropout, drawing_member_masks
from sglab.models.hookpoint import HookPoint


class PartlyFrozenLinear(nn.Module):
    """y = x W^T + b where the output rows marked in ``frozen_rows`` are fixed buffers.

    Only the other rows are parameters, so an optimizer never sees (or decays) the
    frozen ones. ``weight`` and ``bias`` read like those of an ``nn.Linear``.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, frozen_rows: torch.Tensor):
        super().__init__()
        rows = torch.arange(weight.shape[0])
        self.register_buffer("trainable_rows", rows[~frozen_rows], persistent=False)
        keep = frozen_rows[:, None]
        self.register_buffer("frozen_weight", torch.where(keep, weight, 0.0).detach().clone())
        self.trainable_weight = (nn.Parameter(weight[~frozen_rows].detach().clone())
                                 if bool((~frozen_rows).any()) else None)
        if bias is None:
            self.frozen_bias, self.trainable_bias = None, None
        else:
            self.register_buffer("frozen_bias", torch.where(frozen_rows, bias, 0.0).detach().clone())
            self.trainable_bias = (nn.Parameter(bias[~frozen_rows].detach().clone())
                                   if self.trainable_weight is not None else None)

    @property
    def weight(self) -> torch.Tensor:
        if self.trainable_weight is None:
            return self.frozen_weight
        return self.frozen_weight.index_copy(0, self.trainable_rows, self.trainable_weight)

    @property
    def bias(self) -> torch.Tensor | None:
        if self.frozen_bias is None or self.trainable_bias is None:
            return self.frozen_bias
        return self.frozen_bias.index_copy(0, self.trainable_rows, self.trainable_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


def _inside_vmap(tensor: torch.Tensor) -> bool:
    """True inside ``torch.func.vmap`` (ensembles), where the fused kernel has no batching
    rule on CPU and would be run member by member."""
    return torch._C._functorch.is_batchedtensor(tensor)


def _unfused(pattern: HookPoint, q: torch.Tensor, dropout: float) -> bool:
    """Attention computed step by step rather than by the fused kernel: where its pattern
    is watched, inside ``vmap``, or where dropout draws keyed masks (inside
    :func:`~sglab.models.dropout.member_masks`, which the fused kernel's own dropout
    ignores: a member's model run alone under its key then masks as inside the ensemble)."""
    return pattern.is_watched or _inside_vmap(q) or bool(dropout and drawing_member_masks())


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, causal: bool, bias: bool, dropout: float,
                 rotary: nn.Module | None = None, out_projection: bool = True,
                 frozen: tuple[bool, bool] = (False, False)):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.causal = causal
        self.frozen = frozen  # (W_Q = W_K = 0, W_V = I): fixed by fix_weights after the init
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias) if out_projection else nn.Identity()
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
        if _unfused(self.pattern, q, dropout):
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
            if self.causal:
                future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
                scores = scores.masked_fill(future, float("-inf"))
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            probs = self.pattern(scores.softmax(-1))
            y = apply_dropout(probs, dropout, self.training) @ v
        else:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=self.causal and mask is None
            )
        return self.out(y.transpose(1, 2).reshape(batch, length, width))

    def weight_views(self) -> dict[str, torch.Tensor]:
        """W_Q, W_K, W_V (each d_model x d_model, heads stacked by rows) and W_O if present."""
        d = self.n_heads * self.head_dim
        weight = self.qkv.weight
        views = {"W_Q": weight[:d], "W_K": weight[d:2 * d], "W_V": weight[2 * d:]}
        if isinstance(self.out, nn.Linear):
            views["W_O"] = self.out.weight
        return views

    def fix_weights(self) -> None:
        """Fix the weights ``frozen`` names (the model calls this after its init scheme)."""
        self.freeze(*self.frozen)

    def freeze(self, query_key_zero: bool, value_identity: bool) -> None:
        """Fix W_Q = W_K = 0 (and their biases) and/or W_V = I (bias 0); the rest trains."""
        if not (query_key_zero or value_identity):
            return
        d = self.n_heads * self.head_dim
        weight = self.qkv.weight.detach().clone()
        bias = None if self.qkv.bias is None else self.qkv.bias.detach().clone()
        frozen = torch.zeros(3 * d, dtype=torch.bool)
        if query_key_zero:
            frozen[: 2 * d] = True
            weight[: 2 * d] = 0.0
            if bias is not None:
                bias[: 2 * d] = 0.0
        if value_identity:
            frozen[2 * d:] = True
            weight[2 * d:] = torch.eye(d)
            if bias is not None:
                bias[2 * d:] = 0.0
        self.qkv = PartlyFrozenLinear(weight, bias, frozen)


class CrossAttention(nn.Module):
    """Multi-head attention from a sequence x to an encoder output (no positions).

    A = (x W_Q)(m W_K)^T / sqrt(d_head), keys masked by the memory's padding mask
    (True = real token); Y = softmax(A) m W_V W_O. The encoder-decoder attention of
    the thesis (Sec. 4.2.1): plain content attention, no positional information.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool, dropout: float):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.query = nn.Linear(d_model, d_model, bias=bias)
        self.key_value = nn.Linear(d_model, 2 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = dropout
        self.pattern = HookPoint()

    def forward(self, x: torch.Tensor, memory: torch.Tensor,
                memory_mask: torch.Tensor | None = None) -> torch.Tensor:
        batch, length, width = x.shape
        q = self.query(x).view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)
        k, v = self.key_value(memory).view(batch, memory.shape[1], 2, self.n_heads,
                                           self.head_dim).permute(2, 0, 3, 1, 4)
        mask = None if memory_mask is None else memory_mask[:, None, None, :]
        dropout = self.dropout if self.training else 0.0
        if _unfused(self.pattern, q, dropout):
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            probs = self.pattern(scores.softmax(-1))
            y = apply_dropout(probs, dropout, self.training) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        return self.out(y.transpose(1, 2).reshape(batch, length, width))
