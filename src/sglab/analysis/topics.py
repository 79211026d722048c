"""Analyses of models trained on topic-model documents (Li, Li & Risteski 2023).

Pure functions on tensors/arrays:

* :func:`topic_block_statistics` -- mean same-topic vs different-topic entries of a
  word x word matrix (embedding Gram matrix E = W_E^T W_E, value matrix W_V), their
  gap and ratio. Diagonal (i == j) entries are excluded by default.
* :func:`attention_statistics` -- average attention weight for key/query pairs with
  the same word, the same topic but a different word, and different topics, per head;
  :func:`attention_class_sums`, :func:`attention_ratio` and :func:`bootstrap_interval`
  give the per-example sums, the pooled same/different-topic ratio and its bootstrap
  interval over examples.
* :func:`ratio_permutation_test` -- a block ratio with a label-permutation p-value.
  Topics may be one label per word or a membership matrix (words listed under several
  topics: same topic = sharing one), see :func:`same_topic_mask`.
* :func:`detect_two_stages` -- the stage boundary in ||W_K||, ||W_Q||, ||W_V|| curves.
* :func:`theoretical_gap`, :func:`population_value_gap`,
  :func:`uniform_attention_least_squares` -- the theory check: the block gap
  1 / (v (1 - (1 - p_c) p_m)) of the optimal W_V (or E) under uniform attention and
  squared loss, from the formula, from an exact least-squares solve over the
  N -> infinity population, and from a least-squares fit on finite documents.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch


def _numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def gram_matrix(embedding: torch.Tensor | np.ndarray) -> np.ndarray:
    """E = W_E^T W_E for an embedding table with one row per token: E[i, j] = <e_i, e_j>."""
    table = _numpy(embedding)
    return table @ table.T


def same_topic_mask(topics) -> np.ndarray:
    """Which pairs of items share a topic. ``topics``: one topic label per item (n,), or a
    boolean membership matrix (n, topics) for items listed under several topics (two
    items are then same-topic when they share any topic, different-topic when none)."""
    topics = np.asarray(topics)
    if topics.ndim == 2:
        member = topics.astype(np.float64)
        return (member @ member.T) > 0
    return topics[:, None] == topics[None, :]


def topic_block_statistics(matrix, topics, include_diagonal: bool = False) -> dict[str, float]:
    """Same-topic and different-topic means of a square word x word ``matrix``.

    ``topics[i]`` is the topic of row/column i (or row i of a boolean word x topic
    membership matrix, see :func:`same_topic_mask`). Returns ``same_topic``,
    ``different_topic``, ``gap`` (same - different) and ``ratio`` (same / different,
    nan when the different-topic mean is not positive, where a ratio means nothing).
    """
    m = _numpy(matrix)
    n = len(topics)
    if m.shape != (n, n):
        raise ValueError(f"matrix of shape {m.shape} does not match {n} topic labels")
    same = same_topic_mask(topics)
    same_mask = same if include_diagonal else same & ~np.eye(n, dtype=bool)
    same_mean = float(m[same_mask].mean()) if same_mask.any() else math.nan
    diff_mean = float(m[~same].mean()) if (~same).any() else math.nan
    ratio = same_mean / diff_mean if diff_mean > 0 else math.nan
    return {"same_topic": same_mean, "different_topic": diff_mean,
            "gap": same_mean - diff_mean, "ratio": ratio}


def cosine_matrix(vectors) -> np.ndarray:
    """Cosine similarity of every pair of rows."""
    v = _numpy(vectors)
    unit = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    return unit @ unit.T


def ratio_permutation_test(matrix, topics, permutations: int = 200,
                           seed: int = 0) -> dict[str, float]:
    """Same-topic / different-topic ratio of ``matrix`` (pairs of distinct words; the seed's
    "Avg embedding Cosine Similarity / Dot Product (Same-topic/Diff-topic)") and its
    one-sided p-value from ``permutations`` random relabellings of the words:
    p = (1 + #{permuted ratio >= observed}) / (1 + permutations)."""
    observed = topic_block_statistics(matrix, topics)
    rng = np.random.default_rng(seed)
    topics = np.asarray(topics)
    m = _numpy(matrix)
    at_least = 0
    for _ in range(permutations):
        order = rng.permutation(len(topics))
        ratio = topic_block_statistics(m, topics[order])["ratio"]
        at_least += int(not math.isnan(ratio) and ratio >= observed["ratio"])
    p_value = (1 + at_least) / (1 + permutations) if not math.isnan(observed["ratio"]) else math.nan
    return {**observed, "p_value": p_value}


ATTENTION_CLASSES = ("same_word", "same_topic_different_word", "different_topic")


def _membership(topic_of: torch.Tensor) -> torch.Tensor:
    """(vocab, topics) boolean membership from one topic per id (-1: none) or as given."""
    topic_of = topic_of.cpu()
    if topic_of.dim() == 2:
        return topic_of.bool()
    known = topic_of >= 0
    n_topics = int(topic_of.max()) + 1 if bool(known.any()) else 1
    member = torch.zeros(len(topic_of), n_topics, dtype=torch.bool)
    member[known.nonzero().squeeze(1), topic_of[known]] = True
    return member


def attention_class_sums(patterns: torch.Tensor, tokens: torch.Tensor, topic_of: torch.Tensor,
                         key_mask: torch.Tensor | None = None
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per example: summed attention weight per pair class and head, and pair counts.

    Inputs as :func:`attention_statistics` (``topic_of`` may also be a boolean (vocab,
    topics) membership matrix: same topic = sharing one). Returns ``sums`` (batch,
    heads, 3), ``counts`` (batch, 3) for :data:`ATTENTION_CLASSES`, and ``keys`` (batch,):
    the number of real keys of each example (for rescaling).
    """
    patterns = patterns.detach().double().cpu()
    tokens = tokens.cpu()
    if key_mask is None:
        key_mask = torch.ones_like(tokens, dtype=torch.bool)
    key_mask = key_mask.cpu().bool()
    member = _membership(topic_of)[tokens]  # (batch, length, topics)
    valid = key_mask & member.any(-1)
    pair_valid = valid[:, :, None] & valid[:, None, :]  # (batch, query, key)
    same_word = tokens[:, :, None] == tokens[:, None, :]
    member = member.double()
    same_topic = torch.einsum("bqt,bkt->bqk", member, member) > 0
    classes = [same_word, same_topic & ~same_word, ~same_topic]
    sums, counts = [], []
    for cls in classes:
        chosen = (cls & pair_valid).double()
        sums.append(torch.einsum("bhqk,bqk->bh", patterns, chosen))
        counts.append(chosen.sum(dim=(1, 2)))
    return (torch.stack(sums, -1).numpy(), torch.stack(counts, -1).long().numpy(),
            key_mask.sum(1).numpy())


def attention_statistics(patterns: torch.Tensor, tokens: torch.Tensor, topic_of: torch.Tensor,
                         key_mask: torch.Tensor | None = None,
                         reference_length: int | None = None) -> dict[str, np.ndarray]:
    """Average attention weight per pair class and head.

    ``patterns``: (batch, heads, query, key) probabilities; ``tokens``: (batch, length)
    ids; ``topic_of``: topic per token id (-1 for special tokens, which are skipped as
    queries and keys), or a boolean (vocab, topics) membership matrix for words listed
    under several topics; ``key_mask``: True where a position is a real token.
    A pair (query j, key i) is "same word" when w_i == w_j (i == j included),
    "same topic, different word" when the words differ but share a topic, and
    "different topic" otherwise. With ``reference_length`` each weight is scaled by
    (number of real keys) / reference_length, so uniform attention reads
    1 / reference_length whatever the document length.

    Returns arrays of shape (heads,) keyed by :data:`ATTENTION_CLASSES`, and
    ``pairs`` (3,): how many pairs each class averages over.
    """
    sums, counts, keys = attention_class_sums(patterns, tokens, topic_of, key_mask)
    if reference_length is not None:
        sums = sums * (keys / reference_length)[:, None, None]
    total, pairs = sums.sum(0), counts.sum(0)
    out: dict[str, np.ndarray] = {
        name: total[:, c] / pairs[c] if pairs[c] else np.full(total.shape[0], np.nan)
        for c, name in enumerate(ATTENTION_CLASSES)}
    out["pairs"] = pairs
    return out


def attention_ratio(sums: np.ndarray, counts: np.ndarray, weights: np.ndarray | None = None
                    ) -> np.ndarray:
    """Same-topic-different-word / different-topic mean attention from per-example
    ``sums`` (examples, heads, 3) and ``counts`` (examples, 3), pooled over heads (every
    head sees the same pairs). ``weights`` (resamples, examples): one ratio per row (a
    bootstrap); else a scalar array."""
    per_example = sums.sum(1)  # (examples, 3)
    if weights is None:
        weights = np.ones((1, len(sums)))
        single = True
    else:
        single = False
    s, c = weights @ per_example, weights @ counts.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (s[:, 1] / c[:, 1]) / (s[:, 2] / c[:, 2])
    return ratio[0] if single else ratio


def bootstrap_interval(sums: np.ndarray, counts: np.ndarray, resamples: int = 1000,
                       level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`attention_ratio`, resampling examples."""
    rng = np.random.default_rng(seed)
    n = len(sums)
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=resamples).astype(np.float64)
    ratios = attention_ratio(sums, counts, weights)
    tail = (1 - level) / 2
    low, high = np.nanquantile(ratios, [tail, 1 - tail])
    return float(low), float(high)


def topic_attention_ratios(same_word: float, same_topic_different_word: float,
                           different_topic: float, words_per_topic: int) -> dict[str, float]:
    """alpha = c2 / c3, beta = c1 / c3 and the frequency-weighted same-topic /
    different-topic ratio ((v - 1) / v) alpha + (1 / v) beta of the Stage-2 theorem."""
    alpha = same_topic_different_word / different_topic
    beta = same_word / different_topic
    v = words_per_topic
    return {"alpha": alpha, "beta": beta, "weighted": (v - 1) / v * alpha + beta / v}


def detect_two_stages(steps, key_norms, query_norms, value_norms, start_factor: float = 2.0,
                      value_factor: float = 10.0, final_factor: float = 10.0) -> dict:
    """Find where ||W_K|| and ||W_Q|| start to grow and test for two stages.

    The first entries are the initial norms. The boundary is the first step at which
    the mean of ||W_K|| / ||W_K||_0 and ||W_Q|| / ||W_Q||_0 reaches ``start_factor``
    (K and Q leave their small initialization). Two stages are detected when, at the
    last logged step before the boundary, ||W_V|| has already grown ``value_factor``-fold
    (stage 1: V grows while K and Q stay near 0), and K and Q do grow later (their mean
    growth reaches ``final_factor``; stage 2).
    """
    steps = np.asarray(steps, dtype=np.float64)
    k, q, v = (np.asarray(x, dtype=np.float64) for x in (key_norms, query_norms, value_norms))
    if min(k[0], q[0], v[0]) <= 0:
        raise ValueError("initial norms must be positive (the growth factors divide by them)")
    key_query = (k / k[0] + q / q[0]) / 2
    above = np.flatnonzero(key_query >= start_factor)
    index = int(above[0]) if above.size else len(steps) - 1
    before = max(index - 1, 0)
    value_before = float(v[before] / v[0])
    rise = v.max() - v[0]
    share = float((v[before] - v[0]) / rise) if rise > 0 else 0.0
    final = float(key_query.max())
    two_stage = bool(above.size and index > 0 and value_before >= value_factor
                     and final >= final_factor)
    return {
        "boundary_step": float(steps[index]), "boundary_index": index,
        "value_growth_before_boundary": value_before,
        "value_share_before_boundary": share,
        "key_query_growth_before_boundary": float(key_query[before]),
        "key_growth": float(k.max() / k[0]), "query_growth": float(q.max() / q[0]),
        "value_growth": float(v.max() / v[0]), "two_stage": two_stage,
    }


def theoretical_gap(words_per_topic: int, mask_probability: float, keep_probability: float) -> float:
    """1 / (v (1 - (1 - p_c) p_m)) (Li et al. 2023, Theorems 1 and 2, informal form)."""
    return 1.0 / (words_per_topic * (1 - (1 - keep_probability) * mask_probability))


def population_value_gap(n_topics: int, words_per_topic: int, topics_per_document: int,
                         mask_probability: float, keep_probability: float,
                         random_probability: float) -> dict[str, float]:
    """Exact squared-loss optimum of W_V (one-hot embeddings, uniform attention) as N -> inf.

    With uniform attention every output column is W u + b, u the token frequencies of
    the corrupted document: u = c p_S + p_m p_r r + p_m (1 - p_c - p_r) e_[MASK], with
    p_S uniform over the words of the document's topic set S, r uniform over all
    words and c = 1 - (1 - p_c) p_m; the expected target is p_S. Solving the least
    squares problem over every topic set (minimum-norm solution) gives W; returns its
    block statistics over words.
    """
    T, v, tau = n_topics, words_per_topic, topics_per_document
    n_words = T * v
    dim = n_words + 1  # words, then [MASK]
    c = 1 - (1 - keep_probability) * mask_probability
    features, targets = [], []
    for subset in itertools.combinations(range(T), tau):
        p = np.zeros(dim)
        for t in subset:
            p[t * v:(t + 1) * v] = 1.0 / (tau * v)
        u = c * p
        u[:n_words] += mask_probability * random_probability / n_words
        u[n_words] += mask_probability * (1 - keep_probability - random_probability)
        features.append(np.append(u, 1.0))  # bias column
        targets.append(p[:n_words])
    solution = np.linalg.lstsq(np.asarray(features), np.asarray(targets), rcond=None)[0]
    weights = solution[:n_words, :].T  # (output word, input word)
    stats = topic_block_statistics(weights, np.arange(n_words) // v)
    stats["theory"] = theoretical_gap(v, mask_probability, keep_probability)
    return stats


def uniform_attention_least_squares(inputs: torch.Tensor, targets: torch.Tensor,
                                    key_mask: torch.Tensor, vocab_size: int,
                                    ignore_index: int = -100) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares (W, b) of f = W u + b on finite corrupted documents.

    u is the mean one-hot vector of the keys each query attends to (uniform attention,
    one-hot embeddings); every selected position of a document shares it, so the fit
    is a weighted least squares of each document's mean target on u. Returns the
    minimum-norm W (vocab x vocab, output x input) and b.
    """
    inputs, targets, key_mask = inputs.cpu(), targets.cpu(), key_mask.cpu().bool()
    n = inputs.shape[0]
    counts = torch.zeros(n, vocab_size, dtype=torch.float64)
    counts.scatter_add_(1, inputs, key_mask.double())
    u = counts / key_mask.sum(1, keepdim=True).clamp(min=1)
    scored = targets != ignore_index
    target_counts = torch.zeros(n, vocab_size, dtype=torch.float64)
    target_counts.scatter_add_(1, targets.clamp(min=0), scored.double())
    count = scored.sum(1).double()
    keep = count > 0
    mean_target = target_counts[keep] / count[keep, None]
    root = count[keep].sqrt()[:, None]
    design = torch.cat([u[keep], torch.ones(int(keep.sum()), 1, dtype=torch.float64)], 1)
    solution = np.linalg.lstsq((design * root).numpy(), (mean_target * root).numpy(), rcond=None)[0]
    return solution[:vocab_size].T, solution[vocab_size]
