"""Hidden representations: t-SNE maps and how close two input classes lie.

Zhang et al. (2024, Fig. 3b) map the first-layer outputs X_ao(1) of many (anchor pair,
key) inputs with t-SNE and colour them by anchor pair: in the symmetric solution the
mirrored pairs (3,4) and (4,3) fall together.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.manifold import TSNE
from threadpoolctl import threadpool_limits

from sglab.errors import SglabError


def _array(vectors) -> np.ndarray:
    array = vectors.detach().cpu().double().numpy() if isinstance(vectors, torch.Tensor) else (
        np.asarray(vectors, dtype=np.float64))
    if array.ndim != 2:
        raise SglabError(f"expected an (n, d) array of vectors, got shape {array.shape}")
    return array


def tsne_map(vectors, seed: int = 0, perplexity: float = 30.0) -> np.ndarray:
    """2-D t-SNE embedding (scikit-learn, PCA start) of the rows of ``vectors``.

    Runs on one thread: the Barnes-Hut gradient slows down many times over when its
    OpenMP threads compete with other processes for the cores.
    """
    array = _array(vectors)
    if len(array) <= perplexity:
        raise SglabError(f"t-SNE with perplexity {perplexity} needs more than {perplexity:g} "
                         f"vectors, got {len(array)}")
    with threadpool_limits(limits=1):
        return TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed,
                    learning_rate="auto").fit_transform(array)


def centroid_cosine(vectors, labels, first, second) -> float:
    """Cosine between the mean vectors of the rows labelled ``first`` and ``second``,
    after removing the mean over all rows (so a shared offset does not count)."""
    array = _array(vectors)
    labels = np.asarray(labels)
    centered = array - array.mean(0, keepdims=True)
    means = []
    for label in (first, second):
        rows = labels == label
        if not rows.any():
            raise SglabError(f"no vector is labelled {label!r}")
        means.append(centered[rows].mean(0))
    norm = np.linalg.norm(means[0]) * np.linalg.norm(means[1])
    return float(means[0] @ means[1] / norm) if norm > 0 else 0.0
