"""Condensation of neurons: how many directions the input weights of a layer occupy.

Zhang et al. (2024, Sec. 5.3 / Fig. 5) compare the rows (neurons) of W_Q of the first
attention layer by cosine similarity and group neurons whose similarity exceeds 0.7.
Here the grouping is complete-linkage hierarchical clustering on the cosine distance
1 - cos cut at 1 - 0.7, so every two neurons of one group have cosine >= 0.7. A
condensed layer has a few large groups; an uncondensed one has about one group per
neuron.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

from sglab.errors import SglabError


def _as_matrix(weight) -> np.ndarray:
    matrix = weight.detach().cpu().double().numpy() if isinstance(weight, torch.Tensor) else (
        np.asarray(weight, dtype=np.float64))
    if matrix.ndim != 2 or min(matrix.shape) == 0:
        raise SglabError(f"expected a non-empty 2-D weight matrix, got shape {matrix.shape}")
    return matrix


def cosine_similarity_matrix(weight) -> np.ndarray:
    """cos(w_i, w_j) between the rows of ``weight`` (n x n); a zero row has cosine 0."""
    matrix = _as_matrix(weight)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return np.clip(unit @ unit.T, -1.0, 1.0)


@dataclass
class NeuronGroups:
    """Groups of neurons with pairwise cosine >= threshold, largest group first."""

    labels: np.ndarray  # group index of each neuron (0 = largest group)
    order: np.ndarray  # neurons reordered so that every group is contiguous
    sizes: np.ndarray  # group sizes, descending
    similarity: np.ndarray  # cosine matrix in the original neuron order

    @property
    def reordered(self) -> np.ndarray:
        """The cosine matrix with rows and columns in ``order`` (the heatmap of the paper)."""
        return self.similarity[np.ix_(self.order, self.order)]


def group_neurons(weight, threshold: float = 0.7) -> NeuronGroups:
    """Complete-linkage clustering of the rows of ``weight`` at cosine ``threshold``."""
    if not -1.0 < threshold < 1.0:
        raise SglabError(f"cosine threshold must lie in (-1, 1), got {threshold}")
    similarity = cosine_similarity_matrix(weight)
    n = len(similarity)
    if n == 1:
        raw = np.zeros(1, dtype=int)
    else:
        distance = np.clip(1.0 - similarity, 0.0, 2.0)
        np.fill_diagonal(distance, 0.0)
        tree = linkage(squareform(distance, checks=False), method="complete")
        raw = fcluster(tree, t=1.0 - threshold, criterion="distance") - 1
    counts = np.bincount(raw)
    rank = np.empty_like(counts)
    rank[np.argsort(-counts, kind="stable")] = np.arange(len(counts))
    labels = rank[raw]
    order = np.argsort(labels, kind="stable")
    return NeuronGroups(labels, order, np.sort(counts)[::-1], similarity)


def groups_covering(sizes: np.ndarray, coverage: float = 0.9) -> int:
    """Fewest groups (largest first) that hold at least ``coverage`` of the neurons."""
    if not 0.0 < coverage <= 1.0:
        raise SglabError(f"coverage must lie in (0, 1], got {coverage}")
    sizes = np.sort(np.asarray(sizes))[::-1]
    needed = coverage * sizes.sum()
    return int(np.searchsorted(np.cumsum(sizes), needed - 1e-9) + 1)


def effective_directions(weight, threshold: float = 0.7, coverage: float = 0.9) -> float:
    """Groups covering ``coverage`` of the neurons, as a fraction of the neurons
    (about ``coverage`` when nothing condenses, near 0 for a few directions)."""
    groups = group_neurons(weight, threshold)
    return groups_covering(groups.sizes, coverage) / len(groups.labels)
