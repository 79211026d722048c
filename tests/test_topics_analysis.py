"""Topic analyses on hand-built inputs with known answers, and the theory check."""

import math

import numpy as np
import pytest
import torch

from sglab.analysis.topics import (
    attention_statistics,
    detect_two_stages,
    gram_matrix,
    population_value_gap,
    theoretical_gap,
    topic_attention_ratios,
    topic_block_statistics,
    uniform_attention_least_squares,
)
from sglab.config import build_run_config
from sglab.tasks import build_task
from sglab.tasks.topics import corrupt, sample_documents


def test_block_statistics_of_a_hand_built_block_matrix():
    topics = np.repeat(np.arange(3), 4)  # 3 topics of 4 words
    same = topics[:, None] == topics[None, :]
    matrix = np.where(same, 0.5, 0.2)
    np.fill_diagonal(matrix, 2.0)
    stats = topic_block_statistics(matrix, topics)
    assert stats["same_topic"] == pytest.approx(0.5)  # diagonal excluded
    assert stats["different_topic"] == pytest.approx(0.2)
    assert stats["gap"] == pytest.approx(0.3) and stats["ratio"] == pytest.approx(2.5)
    with_diagonal = topic_block_statistics(matrix, topics, include_diagonal=True)
    assert with_diagonal["same_topic"] == pytest.approx((3 * 0.5 + 2.0) / 4)
    negative = topic_block_statistics(np.where(same, 0.5, -0.1), topics)
    assert math.isnan(negative["ratio"]) and negative["gap"] == pytest.approx(0.6)
    with pytest.raises(ValueError, match="does not match"):
        topic_block_statistics(matrix, topics[:5])


def test_gram_matrix_of_topic_aligned_embeddings():
    # word embedding = its topic's unit vector + a word-specific orthogonal part
    eye = np.eye(8)
    table = np.stack([eye[w // 2] + 0.5 * eye[4 + w % 4] for w in range(8)])
    gram = gram_matrix(torch.tensor(table))
    assert np.allclose(gram, table @ table.T)
    stats = topic_block_statistics(gram, np.arange(8) // 2)
    # same topic (w, w+1): 1 + 0.25 * [w%4 == (w+1)%4] = 1; different: 0.25 when w%4 agree
    assert stats["same_topic"] == pytest.approx(1.0)
    assert stats["different_topic"] == pytest.approx(0.25 * 8 / 48)
    assert stats["ratio"] > 1


def test_attention_statistics_on_a_hand_built_pattern():
    # vocabulary: 0 pad, 1 mask, words 2..5 with topics 0,0,1,1
    topic_of = torch.tensor([-1, -1, 0, 0, 1, 1])
    tokens = torch.tensor([[2, 2, 3, 4, 0]])  # last position is padding
    real = tokens != 0
    pattern = torch.zeros(1, 2, 5, 5)
    pattern[0, 0] = torch.tensor([[0.4, 0.3, 0.2, 0.1, 0.0]] * 5)  # head 0: same row per query
    pattern[0, 1, :, :4] = 0.25  # head 1: uniform over the 4 real keys
    stats = attention_statistics(pattern, tokens, topic_of, real)
    # pairs (query, key) among positions 0..3 (words 2,2,3,4):
    # same word: (0,0),(0,1),(1,0),(1,1),(2,2),(3,3); same topic diff word: (0,2),(1,2),(2,0),(2,1)
    # different topic: (0,3),(1,3),(2,3),(3,0),(3,1),(3,2)
    assert stats["pairs"].tolist() == [6, 4, 6]
    row = [0.4, 0.3, 0.2, 0.1]
    assert stats["same_word"][0] == pytest.approx((row[0] + row[1] + row[0] + row[1] + row[2]
                                                   + row[3]) / 6)
    assert stats["same_topic_different_word"][0] == pytest.approx((row[2] + row[2] + row[0]
                                                                   + row[1]) / 4)
    assert stats["different_topic"][0] == pytest.approx((3 * row[3] + row[0] + row[1]
                                                         + row[2]) / 6)
    for name in ("same_word", "same_topic_different_word", "different_topic"):
        assert stats[name][1] == pytest.approx(0.25)
    scaled = attention_statistics(pattern, tokens, topic_of, real, reference_length=100)
    assert scaled["different_topic"][1] == pytest.approx(0.01)  # uniform reads 1/100
    ratios = topic_attention_ratios(0.02, 0.015, 0.01, words_per_topic=10)
    assert ratios["alpha"] == pytest.approx(1.5) and ratios["beta"] == pytest.approx(2.0)
    assert ratios["weighted"] == pytest.approx(0.9 * 1.5 + 0.1 * 2.0)


def test_two_stage_detection_on_synthetic_curves():
    steps = np.arange(0, 1001, 25)
    value = 0.1 + 3 / (1 + np.exp(-(steps - 200) / 40))  # grows first
    key = 0.1 + 2 / (1 + np.exp(-(steps - 700) / 40))  # leaves 0.1 after ~500
    found = detect_two_stages(steps, key, key * 1.1, value)
    assert found["two_stage"] and 450 <= found["boundary_step"] <= 600
    assert found["value_growth_before_boundary"] > 25
    assert found["key_query_growth_before_boundary"] < 2
    together = detect_two_stages(steps, value, value, value)  # everything grows at once
    assert not together["two_stage"] and together["boundary_step"] < 200
    never = detect_two_stages(steps, 0.1 + steps * 1e-5, 0.1 + steps * 1e-5, value)
    assert not never["two_stage"]  # K and Q never leave their initialization
    with pytest.raises(ValueError, match="initial norms must be positive"):
        detect_two_stages(steps, np.zeros_like(value), key, value)


def test_population_optimum_matches_the_theorem_for_every_tau():
    """Exact least squares over all topic sets of the N -> infinity objective."""
    for tau in (1, 2, 3):
        for p_m, p_c, p_r in ((0.15, 0.1, 0.1), (0.3, 0.0, 0.2)):
            stats = population_value_gap(6, 5, tau, p_m, p_c, p_r)
            assert stats["gap"] == pytest.approx(theoretical_gap(5, p_m, p_c), rel=1e-9)
    assert theoretical_gap(10, 0.15, 0.1) == pytest.approx(0.115607, rel=1e-5)


def test_finite_document_least_squares_approaches_the_theorem():
    cfg = build_run_config({"task": {"name": "topics", "min_length": 100, "max_length": 100}},
                           ["model.attention_mask=bidirectional"]).task
    task = build_task(cfg)
    rng = np.random.default_rng(0)
    batch = corrupt(cfg, sample_documents(cfg, 6000, rng), rng, len(task.vocab))
    weights, _ = uniform_attention_least_squares(batch.input_ids, batch.targets,
                                                 batch.key_padding_mask, len(task.vocab))
    words = task.word_ids.numpy()
    stats = topic_block_statistics(weights[np.ix_(words, words)], task.topic_of[words].numpy(),
                                   include_diagonal=True)
    assert stats["gap"] == pytest.approx(task.theoretical_gap(), rel=0.03)
