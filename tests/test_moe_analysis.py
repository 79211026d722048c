"""Unit sparsity and expert usage of MLP layers (thesis Figs. 7.1, 7.3, F.3)."""

import math

import pytest
import torch

from sglab.analysis.hooks import hook_names
from sglab.analysis.moe import (
    active_units,
    co_occurrence,
    dead_experts,
    expert_usage,
    ffn_statistics,
    mlp_flops_per_token,
    top_share,
    usage_entropy,
)
from tests.conftest import tiny_model


def test_usage_dead_experts_entropy_and_co_occurrence_by_hand():
    experts = torch.tensor([[0, 1], [0, 2], [1, 0]])
    usage = expert_usage(experts, 4)
    assert usage.tolist() == pytest.approx([3 / 6, 2 / 6, 1 / 6, 0])
    assert dead_experts(usage) == 1
    p = torch.tensor([0.5, 2 / 6, 1 / 6])
    assert usage_entropy(usage) == pytest.approx(float(-(p * p.log()).sum()) / math.log(4))
    assert usage_entropy(torch.full((8,), 1 / 8)) == pytest.approx(1.0)
    assert usage_entropy(torch.tensor([1.0, 0, 0])) == 0.0
    co = co_occurrence(experts, 4)
    assert co[0, 1] == 2 and co[1, 0] == 2 and co[0, 2] == 1 and co[1, 2] == 0 and co[0, 0] == 0


def test_usage_by_selection_weight_and_top_share_by_hand():
    # Fig. 7.3 counts the selection weights sel(x), not the number of selections
    experts = torch.tensor([[0, 1], [0, 2], [1, 0]])
    gates = torch.tensor([[0.5, 0.25], [0.5, 0.5], [1.0, 0.25]])
    usage = expert_usage(experts, 4, gates)
    assert usage.tolist() == pytest.approx([1.25 / 3, 1.25 / 3, 0.5 / 3, 0])
    assert top_share(usage, 0.25) == pytest.approx(1.25 / 3)
    assert top_share(usage, 0.5) == pytest.approx(2.5 / 3)
    assert top_share(torch.full((8,), 1 / 8), 0.25) == pytest.approx(0.25)


def test_active_units_counts_nonzero_units_per_token():
    hidden = torch.tensor([[[0.0, 1.0, 2.0], [0.0, 0.0, 3.0]]])
    assert active_units(hidden) == 1.5


def test_ffn_statistics_of_dense_topk_and_moe_models():
    _, dense = tiny_model("model.activation=relu", "model.d_ff=40")
    ids = torch.randint(1, 10, (4, 8))
    stats = ffn_statistics(dense, ids)
    assert len(stats["active_units"]) == 2 and all(0 < a <= 40 for a in stats["active_units"])
    _, topk = tiny_model("model.activation=relu", "model.d_ff=40", "model.ffn=topk",
                         "model.ffn_top_k=3")
    assert all(a <= 3 for a in ffn_statistics(topk, ids)["active_units"])
    _, moe = tiny_model("model.activation=relu", "model.ffn=sigma_moe", "model.moe_experts=5",
                        "model.moe_expert_size=8", "model.moe_top_k=2")
    assert {"blocks.0.mlp.scores", "blocks.1.mlp.experts", "blocks.1.mlp.gates"} <= set(
        hook_names(moe))
    stats = ffn_statistics(moe, ids)
    for usage, dead in zip(stats["usage"], stats["dead_experts"]):
        assert len(usage) == 5 and sum(usage) == pytest.approx(1.0)
        assert usage == sorted(usage, reverse=True) and dead == sum(u == 0 for u in usage)
    assert all(0 <= h <= 1 for h in stats["usage_entropy"])
    assert all(1 / 5 <= s <= 1 for s in stats["top_quarter_share"])  # top 1 of 5 experts
    # K = 2 distinct experts per token: each token adds 1 to two symmetric off-diagonal cells
    for matrix in stats["co_occurrence"]:
        co = torch.tensor(matrix)
        assert co.shape == (5, 5) and torch.equal(co, co.T) and co.diagonal().eq(0).all()
        assert co.sum().item() == pytest.approx(2.0)
    # the gates are the sigmoid scores of the chosen experts (Eq. 7.11)
    from sglab.analysis.hooks import capture

    got = capture(moe, ["blocks.0.mlp.*"], ids)
    chosen = torch.sigmoid(got["blocks.0.mlp.scores"]).gather(-1, got["blocks.0.mlp.experts"])
    assert torch.allclose(got["blocks.0.mlp.gates"], chosen)


def test_mlp_flops_per_token_with_and_without_the_selector():
    """The thesis's "% FLOPs" counts the K chosen experts only (Sec. 7.5.3): K G / d_ff."""
    _, dense = tiny_model("model.activation=relu", "model.d_ff=40")
    d_model = dense.config.d_model
    assert mlp_flops_per_token(dense) == mlp_flops_per_token(dense, selector=False) \
        == 2 * 2 * d_model * 40
    _, moe = tiny_model("model.activation=relu", "model.ffn=sigma_moe", "model.moe_experts=5",
                        "model.moe_expert_size=8", "model.moe_top_k=2")
    experts = 2 * 2 * d_model * 8 * 2
    assert mlp_flops_per_token(moe, selector=False) == experts
    assert mlp_flops_per_token(moe) == experts + 2 * d_model * 5
