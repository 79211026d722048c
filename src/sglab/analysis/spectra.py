"""Spectra of weights: how many directions carry the weight (Zhang et al. 2024, Sec. 5.3).

A small-initialization (low-complexity) model has a few large eigenvalues of the
embedding covariance and a few large singular values per layer; a large-init model
has a flat spectrum. Two scalar summaries make spectra comparable across models:
the share of the top ``k`` values and the effective rank exp(H(p)), p = values / sum
(Roy & Vetterli 2007).
"""

from __future__ import annotations

import numpy as np
import torch

from sglab.errors import SglabError


def _matrix(weight) -> torch.Tensor:
    matrix = weight.detach().cpu().double() if isinstance(weight, torch.Tensor) else (
        torch.as_tensor(np.asarray(weight), dtype=torch.float64))
    if matrix.dim() != 2 or min(matrix.shape) == 0:
        raise SglabError(f"expected a non-empty 2-D matrix, got shape {tuple(matrix.shape)}")
    return matrix


def covariance_eigenvalues(vectors) -> np.ndarray:
    """Eigenvalues (descending) of the covariance of the rows of ``vectors`` (n x d)."""
    matrix = _matrix(vectors)
    if matrix.shape[0] < 2:
        raise SglabError("a covariance needs at least two vectors")
    centered = matrix - matrix.mean(0, keepdim=True)
    covariance = centered.T @ centered / (matrix.shape[0] - 1)
    values = torch.linalg.eigvalsh(covariance).clamp_min(0.0)
    return values.flip(0).numpy()


def singular_values(weight) -> np.ndarray:
    """Singular values of a weight matrix, descending."""
    return torch.linalg.svdvals(_matrix(weight)).numpy()


def top_share(values, k: int = 1) -> float:
    """Sum of the ``k`` largest values over the sum of all."""
    values = np.sort(np.asarray(values, dtype=np.float64))[::-1]
    total = values.sum()
    return float(values[:k].sum() / total) if total > 0 else 0.0


def effective_rank(values) -> float:
    """exp of the entropy of values / sum(values): 1 for one direction, n for a flat spectrum."""
    values = np.asarray(values, dtype=np.float64)
    values = values[values > 0]
    if not len(values):
        return 0.0
    p = values / values.sum()
    return float(np.exp(-(p * np.log(p)).sum()))
