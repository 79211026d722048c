"""Mechanism measures of transformers trained on anchor functions (Zhang et al. 2024).

Functions of a trained model (and the token ids it is probed with) that the paper compares
between a symmetric and an inferential solution:

* :func:`query_condensation` -- groups of W_Q(1) neurons with cosine >= 0.7 (Sec. 5.3);
* :func:`embedding_eigenvalues` -- the spectrum of the covariance of input embeddings;
* :func:`weight_matrix_names`, :func:`weight_singular_values` -- singular values of every
  weight matrix in forward order;
* :func:`first_layer_outputs` -- the last-token output of the first block, X_ao(1), the
  vectors of the t-SNE map (Fig. 3b);
* :func:`attention_maps`, :func:`probe_attention` -- the attention maps of one input and
  the attention of the last token and of both anchors on the key item (Fig. 3a, 3c).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sglab.analysis.condensation import NeuronGroups, group_neurons, groups_covering
from sglab.analysis.hooks import capture
from sglab.analysis.spectra import covariance_eigenvalues, singular_values
from sglab.errors import SglabError
from sglab.train.loop import named_weights

QUERY_WEIGHT = "blocks.0.attn.W_Q"


@dataclass
class Condensation:
    """W_Q(1) neuron groups and how few of them cover ``coverage`` of the neurons."""

    groups: NeuronGroups
    covering: int  # fewest groups (largest first) holding ``coverage`` of the neurons
    fraction: float  # covering / neurons: about ``coverage`` uncondensed, near 0 condensed


def query_condensation(model, threshold: float = 0.7, coverage: float = 0.9) -> Condensation:
    """Condensation of the rows (neurons) of W_Q of the first attention layer."""
    groups = group_neurons(named_weights(model)[QUERY_WEIGHT].detach(), threshold=threshold)
    covering = groups_covering(groups.sizes, coverage)
    return Condensation(groups, covering, covering / len(groups.labels))


def embedding_eigenvalues(model, token_ids: torch.Tensor) -> np.ndarray:
    """Eigenvalues (descending) of the covariance of the embeddings of ``token_ids``."""
    return covariance_eigenvalues(model.tok_emb.weight.detach()[token_ids])


def weight_matrix_names(model) -> list[str]:
    """Every weight matrix in forward order, the fused qkv split into W_Q, W_K, W_V."""
    weights = named_weights(model)
    names = ["tok_emb.weight", "positions.table.weight"]
    for i in range(len(model.blocks)):
        names += [f"blocks.{i}.attn.{view}" for view in ("W_Q", "W_K", "W_V", "W_O")]
        names += [f"blocks.{i}.mlp.up.weight", f"blocks.{i}.mlp.out.weight"]
    names.append("head.weight")
    return [n for n in names if n in weights and weights[n].dim() == 2]


def weight_singular_values(model, names: list[str]) -> dict[str, np.ndarray]:
    """Singular values (descending) of each named weight matrix."""
    weights = named_weights(model)
    return {name: singular_values(weights[name].detach()) for name in names}


def first_layer_outputs(model, tokens: torch.Tensor) -> torch.Tensor:
    """(n, d): the last-token output of the first block after attention, residual and
    LayerNorm (X_ao(1)) for each row of ``tokens``."""
    return capture(model, ["blocks.0.resid_mid"], tokens)["blocks.0.resid_mid"][:, -1]


def attention_maps(model, tokens: torch.Tensor) -> list[np.ndarray]:
    """One (query x key) attention map per layer (first head) for one input sequence."""
    if tokens.dim() != 1:
        raise SglabError(f"expected one token sequence, got shape {tuple(tokens.shape)}")
    patterns = capture(model, ["blocks.*.attn.pattern"], tokens[None])
    return [patterns[f"blocks.{layer}.attn.pattern"][0, 0].numpy()
            for layer in range(len(model.blocks))]


def probe_attention(maps: list[np.ndarray], key_position: int) -> list[dict[str, float]]:
    """Per layer: the attention of the last token on the key item and on the two anchors
    (which follow the key), and of each anchor on the key."""
    first, second = key_position + 1, key_position + 2
    return [{"last→key": float(m[-1, key_position]), "last→first anchor": float(m[-1, first]),
             "last→second anchor": float(m[-1, second]),
             "first anchor→key": float(m[first, key_position]),
             "second anchor→key": float(m[second, key_position])} for m in maps]


__all__ = ["Condensation", "attention_maps", "embedding_eigenvalues", "first_layer_outputs",
           "probe_attention", "query_condensation", "weight_matrix_names",
           "weight_singular_values"]
