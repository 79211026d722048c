"""Activation correlation matrices (Zuo & Guerzhoy, Sec. 6).

The activations of one layer over a set of inputs of equal length, shape
(n_examples, T, d), are rasterized row-major -- position-major, features inside --
into (n_examples, T * d); the absolute Pearson correlation between every pair of
coordinates is the matrix. Diagonal blocks hold same-position pairs; an
off-diagonal block means information moved between positions.
"""

from __future__ import annotations

import numpy as np
import torch


def correlation_matrix(activations: torch.Tensor | np.ndarray, eps: float = 1e-8) -> np.ndarray:
    """|Pearson r| between all coordinates of (n, T, d) activations -> (T*d, T*d).

    Constant coordinates (zero variance, e.g. a position that always holds the same
    token) get correlation 0 instead of NaN.
    """
    x = activations.detach().cpu().double().numpy() if isinstance(activations, torch.Tensor) \
        else np.asarray(activations, dtype=np.float64)
    flat = x.reshape(x.shape[0], -1)
    centered = flat - flat.mean(0, keepdims=True)
    std = centered.std(0)
    live = std > eps
    z = np.zeros_like(centered)
    z[:, live] = centered[:, live] / std[live]
    corr = np.abs(z.T @ z) / flat.shape[0]
    return corr


def block_summary(corr: np.ndarray, positions: int) -> dict[str, float]:
    """Mean |r| inside same-position blocks (diagonal excluded) and across positions.

    ``off_diagonal_ratio`` = across / within: larger means more correlation between
    different positions relative to correlation within a position. Only coordinates
    with non-zero variance take part.
    """
    size = corr.shape[0]
    width = size // positions
    live = corr.diagonal() > 0.5  # |r| of a live coordinate with itself is 1
    block = np.arange(size) // width
    same = block[:, None] == block[None, :]
    pair_live = live[:, None] & live[None, :]
    not_self = ~np.eye(size, dtype=bool)
    within = corr[same & pair_live & not_self]
    across = corr[~same & pair_live]
    within_mean = float(within.mean()) if within.size else float("nan")
    across_mean = float(across.mean()) if across.size else float("nan")
    return {
        "within_position": within_mean,
        "across_position": across_mean,
        "off_diagonal_ratio": across_mean / within_mean if within.size and within_mean else float("nan"),
        "live_positions": len(np.unique(block[live])),
    }
