"""Do functions of two groups produce compatible representations of a symbol?
(CTL++, thesis Sec. 6.3, Figs. 6.3, E.5-E.7.)

For one output symbol, every function f gives the classifier-input vector of the
input ``f s`` with f(s) = that symbol. If the network represents the symbol the same
way whichever function produced it, the 32 x 32 cosine matrix is flat; if it keeps a
representation per function group, the matrix splits into group blocks, and a function
of the other group may not read it. The matrix rows are clustered (complete linkage on
Euclidean distances between rows, cut at half the largest merge distance, as the thesis
code does) and the clusters compared with the groups by the adjusted Rand index.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import pdist

from sglab.errors import SglabError


def cosine_matrix(vectors) -> np.ndarray:
    """Pairwise cosine similarity of the rows of ``vectors`` [n, d]."""
    x = np.asarray(vectors, dtype=np.float64)
    if x.ndim != 2 or len(x) < 2:
        raise SglabError(f"cosine_matrix needs an [n >= 2, d] matrix, got shape {x.shape}")
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return x @ x.T


def complete_linkage_clusters(similarity: np.ndarray, cut: float = 0.5) -> np.ndarray:
    """Cluster ids (0, 1, ...) of the rows of a similarity matrix: complete linkage on
    Euclidean distances between rows, cut at ``cut`` x the largest merge distance."""
    distances = pdist(np.asarray(similarity, dtype=np.float64))
    if distances.max(initial=0.0) <= 1e-12:  # identical rows: one cluster
        return np.zeros(len(similarity), dtype=int)
    tree = linkage(distances, method="complete")
    return fcluster(tree, t=cut * tree[:, 2].max(), criterion="distance") - 1


def adjusted_rand_index(a, b) -> float:
    """Adjusted Rand index of two labelings (1: the same partition; about 0: unrelated)."""
    a, b = np.unique(a, return_inverse=True)[1], np.unique(b, return_inverse=True)[1]
    table = np.zeros((a.max() + 1, b.max() + 1))
    np.add.at(table, (a, b), 1)

    def pairs(counts):
        return float((counts * (counts - 1) / 2).sum())

    index, rows, cols = pairs(table), pairs(table.sum(1)), pairs(table.sum(0))
    total = len(a) * (len(a) - 1) / 2
    expected = rows * cols / total if total else 0.0
    top = (rows + cols) / 2
    if top == expected:  # both partitions trivial (one cluster, or all singletons)
        return 1.0
    return (index - expected) / (top - expected)


def group_separation(similarity: np.ndarray, groups) -> float:
    """Mean within-group cosine (off the diagonal) minus mean between-group cosine."""
    groups = np.asarray(groups)
    same = groups[:, None] == groups[None, :]
    off_diagonal = ~np.eye(len(groups), dtype=bool)
    return float(similarity[same & off_diagonal].mean() - similarity[~same].mean())


@dataclass
class SymbolClusters:
    """Per output symbol: cosine matrix, cluster ids, separation and ARI vs the groups."""

    similarity: list[np.ndarray]
    clusters: list[np.ndarray]
    separation: list[float]
    ari: list[float]


def symbol_clusters(features, groups) -> SymbolClusters:
    """``features`` [symbols, functions, d] (one classifier input per function that
    produces the symbol), ``groups`` [functions] -> :class:`SymbolClusters`."""
    features = np.asarray(features, dtype=np.float64)
    if features.ndim != 3 or features.shape[1] != len(groups):
        raise SglabError(f"features must be [symbols, {len(groups)} functions, d], "
                         f"got shape {features.shape}")
    sims = [cosine_matrix(f) for f in features]
    clusters = [complete_linkage_clusters(s) for s in sims]
    return SymbolClusters(sims, clusters, [group_separation(s, groups) for s in sims],
                          [adjusted_rand_index(c, groups) for c in clusters])


# ----------------------------------------------------------------------------- Fig. E.2


def compatibility_matrix(correct, row_labels, col_labels
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Accuracy of ``f2 f1 s`` grouped by (label of f1, label of f2) (thesis App. E.2.1,
    Fig. E.2): ``correct`` [n_first, n_second] (1 where the model is right on f2(f1(s))
    for that pair, s fixed so that f1(s) is one symbol), ``row_labels`` [n_first] (e.g. the
    cluster of f1's output), ``col_labels`` [n_second] (e.g. the group of f2).
    Returns (row label values, column label values, mean accuracy [rows, columns])."""
    correct = np.asarray(correct, dtype=np.float64)
    row_labels, col_labels = np.asarray(row_labels), np.asarray(col_labels)
    if correct.shape != (len(row_labels), len(col_labels)):
        raise SglabError(f"correct must be [{len(row_labels)} first functions, "
                         f"{len(col_labels)} second functions], got shape {correct.shape}")
    rows, row_ids = np.unique(row_labels, return_inverse=True)
    cols, col_ids = np.unique(col_labels, return_inverse=True)
    sums = np.zeros((len(rows), len(cols)))
    counts = np.zeros((len(rows), len(cols)))
    np.add.at(sums, (row_ids[:, None], col_ids[None, :]), correct)
    np.add.at(counts, (row_ids[:, None], col_ids[None, :]), 1)
    return rows, cols, sums / counts


def group_specific_gap(correct, clusters, groups) -> float:
    """How much better a cluster of f1's outputs is read by its own group than by the
    others (Fig. E.2a: C1 works only with G_a): over the clusters, the largest
    accuracy(cluster, its majority group) - mean accuracy(cluster, the other groups).
    Needs at least two groups; with one cluster the gap is that of all functions."""
    clusters, groups = np.asarray(clusters), np.asarray(groups)
    cluster_ids, group_ids, matrix = compatibility_matrix(correct, clusters, groups)
    if len(group_ids) < 2:
        raise SglabError("group_specific_gap needs functions of at least two groups")
    gaps = []
    for i, c in enumerate(cluster_ids):
        members, counts = np.unique(groups[clusters == c], return_counts=True)
        own = int(np.flatnonzero(group_ids == members[np.argmax(counts)])[0])
        gaps.append(matrix[i, own] - np.delete(matrix[i], own).mean())
    return float(max(gaps))
