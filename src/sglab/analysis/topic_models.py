"""Topic measures of a trained one-layer model on topic-model documents (Li, Li & Risteski
2023): the word x word matrices where topic structure is encoded, and the attention classes.

Functions of a model and the word ids / documents it is probed with; the statistics
themselves are in :mod:`sglab.analysis.topics`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sglab.analysis.hooks import capture
from sglab.analysis.topics import (
    ATTENTION_CLASSES,
    attention_statistics,
    gram_matrix,
    topic_attention_ratios,
)


def word_gram(model, word_ids: torch.Tensor) -> np.ndarray:
    """E = W_E^T W_E over ``word_ids`` (rows and columns in that order)."""
    return gram_matrix(model.tok_emb.weight[word_ids])


def word_value_matrix(model, word_ids: torch.Tensor, layer: int = 0) -> np.ndarray:
    """W_V of the layer's attention restricted to ``word_ids`` (output x input word)."""
    value = model.blocks[layer].attn.weight_views()["W_V"].detach()
    return value[word_ids][:, word_ids].cpu().numpy()


def attention_class_statistics(model, tokens: torch.Tensor, real: torch.Tensor,
                               topic_of: torch.Tensor, reference_length: int
                               ) -> dict[int, dict[str, Any]]:
    """Per layer, :func:`~sglab.analysis.topics.attention_statistics` of the attention
    patterns on ``tokens`` (``real``: the positions that are not padding), rescaled so that
    uniform attention reads 1 / ``reference_length``."""
    patterns = capture(model, ["blocks.*.attn.pattern"], tokens, key_padding_mask=real)
    return {layer: attention_statistics(patterns[f"blocks.{layer}.attn.pattern"], tokens,
                                        topic_of, real, reference_length=reference_length)
            for layer in range(len(model.blocks))}


def topic_attention_summary(statistics: dict[str, Any], words_per_topic: int,
                            head: int = 0) -> dict[str, Any]:
    """One head's average attention on same-word (c1), same-topic-different-word (c2) and
    different-topic (c3) pairs, the pair-weighted same-topic average of c1 and c2, and the
    ratios alpha = c2 / c3, beta = c1 / c3 of the Stage-2 theorem."""
    c1, c2, c3 = (float(statistics[k][head]) for k in ATTENTION_CLASSES)
    n1, n2 = (int(x) for x in statistics["pairs"][:2])
    return {"same_word": c1, "same_topic_different_word": c2, "different_topic": c3,
            "same_topic": (c1 * n1 + c2 * n2) / max(n1 + n2, 1),
            "ratios": topic_attention_ratios(c1, c2, c3, words_per_topic)}


__all__ = ["attention_class_statistics", "topic_attention_summary", "word_gram",
           "word_value_matrix"]
