"""Positional encodings: learned absolute, sinusoidal, rotary, or none (NoPE)."""

from __future__ import annotations

import math

import torch
from torch import nn


def sinusoidal_table(max_len: int, dim: int) -> torch.Tensor:
    """Vaswani et al.: PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...)."""
    position = torch.arange(max_len, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(max_len, dim)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div[: dim // 2])
    return table


class AbsolutePositions(nn.Module):
    """Adds a position vector to each token embedding (learned or sinusoidal)."""

    def __init__(self, kind: str, max_len: int, dim: int):
        super().__init__()
        self.max_len = max_len
        if kind == "learned":
            self.table = nn.Embedding(max_len, dim)
        else:
            self.register_buffer("fixed", sinusoidal_table(max_len, dim), persistent=False)
            self.table = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        if length > self.max_len:
            raise ValueError(f"sequence of length {length} exceeds model.positions.max_len={self.max_len}")
        pos = self.table.weight[:length] if self.table is not None else self.fixed[:length]
        return x + pos


class Rotary(nn.Module):
    """Rotary position embedding (Su et al.) applied to queries and keys."""

    def __init__(self, head_dim: int, max_len: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.arange(max_len, dtype=torch.float32)[:, None] * inv_freq[None]
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, H, T, Dh) -> rotated pairs (x1, x2) by the angle of each position."""
        length = x.shape[2]
        cos, sin = self.cos[:length].to(x.dtype), self.sin[:length].to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return out.flatten(-2)
