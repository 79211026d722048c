"""Condensation, spectra and representation analyses on matrices with known answers."""

import numpy as np
import pytest
import torch

from sglab.analysis.anchor_mechanisms import (
    attention_maps,
    embedding_eigenvalues,
    first_layer_outputs,
    probe_attention,
    query_condensation,
    weight_matrix_names,
    weight_singular_values,
)
from sglab.analysis.condensation import (
    cosine_similarity_matrix,
    effective_directions,
    group_neurons,
    groups_covering,
)
from sglab.analysis.representations import centroid_cosine, tsne_map
from sglab.analysis.spectra import (
    covariance_eigenvalues,
    effective_rank,
    singular_values,
    top_share,
)
from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.models import build_model
from sglab.tasks import build_task
from sglab.tasks.anchors import input_token_ids, probe_sequences, probe_unseen_input


def _condensed(directions: int, copies: list[int], dim: int = 32, noise: float = 0.3, seed: int = 0):
    """Rows that are noisy positive multiples of ``directions`` orthogonal unit vectors."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.standard_normal((dim, dim)))[0][:directions]
    rows, truth = [], []
    for i, n in enumerate(copies):
        for _ in range(n):
            jitter = noise * rng.standard_normal(dim) / np.sqrt(dim)  # norm about ``noise``
            rows.append(rng.uniform(0.5, 2.0) * (basis[i] + jitter))
            truth.append(i)
    order = rng.permutation(len(rows))
    return np.asarray(rows)[order], np.asarray(truth)[order]


def test_cosine_similarity_of_known_rows():
    weight = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, -3.0], [1.0, 1.0], [0.0, 0.0]])
    sim = cosine_similarity_matrix(weight)
    assert sim[0, 1] == pytest.approx(1.0) and sim[0, 2] == pytest.approx(0.0)
    assert sim[0, 3] == pytest.approx(2 ** -0.5) and sim[2, 3] == pytest.approx(-(2 ** -0.5))
    assert sim[4].tolist() == [0.0] * 5  # a zero row is similar to nothing
    assert np.allclose(sim, sim.T)


def test_groups_recover_planted_directions_largest_first():
    weight, truth = _condensed(3, [10, 6, 4])
    groups = group_neurons(weight, threshold=0.7)
    assert groups.sizes.tolist() == [10, 6, 4]
    for planted in range(3):  # each planted direction is exactly one group
        assert len(set(groups.labels[truth == planted].tolist())) == 1
    # the reordered matrix is block diagonal: high inside the blocks, low outside
    reordered, edges = groups.reordered, np.cumsum([0, 10, 6, 4])
    for i in range(3):
        block = reordered[edges[i]:edges[i + 1], edges[i]:edges[i + 1]]
        assert block.min() >= 0.7
    assert reordered[:10, 10:].max() < 0.5
    assert groups_covering(groups.sizes, 0.9) == 3


def test_every_pair_within_a_group_passes_the_threshold():
    weight = np.random.default_rng(1).standard_normal((40, 3))  # low dim: many near-parallel rows
    groups = group_neurons(weight, threshold=0.7)
    for label in np.unique(groups.labels):
        members = np.flatnonzero(groups.labels == label)
        assert groups.similarity[np.ix_(members, members)].min() >= 0.7 - 1e-9
    assert groups.sizes.sum() == 40 and groups.sizes[0] > 1


def test_random_wide_rows_do_not_condense():
    weight = torch.randn(64, 128, generator=torch.Generator().manual_seed(0))
    groups = group_neurons(weight)
    assert groups.sizes.tolist() == [1] * 64
    assert groups_covering(groups.sizes, 0.9) == 58  # ceil(0.9 * 64)
    assert effective_directions(weight) == pytest.approx(58 / 64)
    condensed, _ = _condensed(2, [32, 32], dim=128)
    assert effective_directions(condensed) == pytest.approx(2 / 64)


def test_groups_covering_and_bad_arguments():
    assert groups_covering(np.array([1, 5, 1, 3]), 0.9) == 3  # 5 + 3 + 1 = 9 of 10
    assert groups_covering(np.array([1, 5, 1, 3]), 0.5) == 1
    with pytest.raises(SglabError):
        groups_covering(np.array([1]), 0.0)
    with pytest.raises(SglabError):
        group_neurons(np.ones((3, 2)), threshold=1.5)
    with pytest.raises(SglabError):
        cosine_similarity_matrix(np.ones(3))


def test_covariance_eigenvalues_of_a_hand_computed_case():
    vectors = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
    # mean 0; covariance diag(2, 8) / 3
    assert covariance_eigenvalues(vectors) == pytest.approx([8 / 3, 2 / 3])
    shifted = vectors + torch.tensor([5.0, -7.0])  # the mean does not matter
    assert covariance_eigenvalues(shifted) == pytest.approx([8 / 3, 2 / 3])
    with pytest.raises(SglabError):
        covariance_eigenvalues(vectors[:1])


def test_singular_values_of_a_rotated_diagonal():
    rng = np.random.default_rng(0)
    u = np.linalg.qr(rng.standard_normal((5, 5)))[0]
    v = np.linalg.qr(rng.standard_normal((3, 3)))[0]
    weight = u[:, :3] @ np.diag([3.0, 2.0, 0.5]) @ v.T
    assert singular_values(weight) == pytest.approx([3.0, 2.0, 0.5])


def test_spectrum_summaries():
    assert effective_rank(np.ones(7)) == pytest.approx(7.0)
    assert effective_rank([5.0, 0.0, 0.0]) == pytest.approx(1.0)
    assert 1.0 < effective_rank([4.0, 1.0, 1.0]) < effective_rank([2.0, 1.0, 1.0]) < 3.0
    assert top_share([3.0, 1.0], 1) == pytest.approx(0.75)
    assert top_share([1.0, 3.0, 2.0, 2.0], 2) == pytest.approx(5 / 8)


def test_centroid_cosine_sees_merged_and_separate_classes():
    rng = np.random.default_rng(0)
    centers = {"a": np.array([5.0, 0, 0]), "b": np.array([5.0, 0, 0]), "c": np.array([0, 0, 5.0]),
               "d": np.array([0, 5.0, 0])}
    labels = np.repeat(list(centers), 50)
    vectors = np.stack([centers[k] for k in labels]) + 0.1 * rng.standard_normal((200, 3))
    assert centroid_cosine(vectors, labels, "a", "b") > 0.99
    assert centroid_cosine(vectors, labels, "a", "c") < 0.0
    with pytest.raises(SglabError):
        centroid_cosine(vectors, labels, "a", "zzz")


def test_tsne_keeps_separated_clusters_apart():
    rng = np.random.default_rng(0)
    vectors = np.concatenate([rng.standard_normal((40, 10)), 20 + rng.standard_normal((40, 10))])
    points = tsne_map(vectors, seed=0, perplexity=10)
    assert points.shape == (80, 2)
    first, second = points[:40], points[40:]
    within = max(np.ptp(first, axis=0).max(), np.ptp(second, axis=0).max())
    between = np.linalg.norm(first.mean(0) - second.mean(0))
    assert between > within
    with pytest.raises(SglabError):
        tsne_map(vectors[:5], perplexity=10)


# ----------------------------------------------------------------------------- exemplar models


def _anchor_model(n_layers: int = 2, d_model: int = 16):
    config = build_run_config({
        "task": {"name": "anchors", "train_size": 100, "test_size": 50, "unseen_size": 20},
        "model": {"name": "transformer", "n_layers": n_layers, "n_heads": 1, "d_model": d_model,
                  "d_ff": 2 * d_model, "norm": "post", "activation": "relu",
                  "tie_embeddings": False, "init": "gamma", "init_gamma": 0.5,
                  "pos_encoding": "learned", "attention_mask": "causal"}})
    task = build_task(config.task)
    torch.manual_seed(0)
    return config, build_model(config.model, len(task.vocab), task.max_length).eval()


def test_probe_attention_reads_the_key_and_anchor_cells():
    maps = np.zeros((6, 6))
    key = 2  # anchors at 3 and 4, the last token at 5
    maps[5, 2], maps[5, 3], maps[5, 4], maps[3, 2], maps[4, 2] = 0.1, 0.2, 0.3, 0.4, 0.5
    (layer,) = probe_attention([maps], key)
    assert layer == {"last→key": 0.1, "last→first anchor": 0.2, "last→second anchor": 0.3,
                     "first anchor→key": 0.4, "second anchor→key": 0.5}


def test_mechanism_measures_of_an_anchor_model():
    config, model = _anchor_model()
    names = weight_matrix_names(model)
    assert names[:3] == ["tok_emb.weight", "positions.table.weight", "blocks.0.attn.W_Q"]
    assert names[-1] == "head.weight" and "blocks.1.mlp.out.weight" in names
    spectra = weight_singular_values(model, names)
    assert list(spectra) == names
    assert all(np.all(np.diff(v) <= 1e-9) for v in spectra.values())  # descending
    eigen = embedding_eigenvalues(model, input_token_ids())
    assert len(eigen) == 16 and np.all(np.diff(eigen) <= 1e-9) and eigen[-1] >= 0
    condensed = query_condensation(model)
    assert 0 < condensed.fraction <= 1 and condensed.covering == round(condensed.fraction * 16)
    tokens = probe_unseen_input(config.task.seq_len)
    maps = attention_maps(model, tokens)
    assert len(maps) == 2 and maps[0].shape == (len(tokens), len(tokens))
    assert np.allclose(maps[0].sum(-1), 1.0) and np.allclose(np.triu(maps[0], 1), 0.0)  # causal
    sequences, _ = probe_sequences(config.task, 3, seed=0)
    assert first_layer_outputs(model, sequences[:, :-1]).shape == (16 * 3, 16)
    with pytest.raises(SglabError, match="one token sequence"):
        attention_maps(model, tokens[None])
