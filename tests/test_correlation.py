import numpy as np
import torch

from sglab.analysis.correlation import block_summary, correlation_matrix


def test_correlation_matrix_matches_numpy_and_is_position_major():
    rng = np.random.default_rng(0)
    acts = rng.normal(size=(500, 3, 4))
    corr = correlation_matrix(torch.tensor(acts))
    assert corr.shape == (12, 12)
    assert np.allclose(corr, np.abs(np.corrcoef(acts.reshape(500, 12), rowvar=False)))


def test_constant_coordinates_give_zero_not_nan():
    acts = np.random.default_rng(0).normal(size=(100, 2, 3))
    acts[:, 0, :] = 1.0  # a position that always holds the same token
    corr = correlation_matrix(acts)
    assert np.isfinite(corr).all()
    assert (corr[:3] == 0).all()
    assert block_summary(corr, 2)["live_positions"] == 1


def test_block_summary_separates_local_and_shared_information():
    rng = np.random.default_rng(0)
    n, positions, width = 2000, 4, 8
    tokens = rng.normal(size=(n, positions, 1))
    mix = rng.normal(size=(1, 1, width))
    local = tokens * mix + 0.3 * rng.normal(size=(n, positions, width))
    shared = tokens.mean(1, keepdims=True) * mix + 0.3 * rng.normal(size=(n, positions, width))
    local_ratio = block_summary(correlation_matrix(local), positions)["off_diagonal_ratio"]
    shared_ratio = block_summary(correlation_matrix(shared), positions)["off_diagonal_ratio"]
    assert local_ratio < 0.1
    assert shared_ratio > 0.9
