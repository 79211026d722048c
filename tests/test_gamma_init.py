"""Initialization rate gamma: every weight matrix and embedding ~ N(0, d_in^(-2 gamma))."""

import pytest
import torch
from torch import nn

from sglab.config import build_run_config
from sglab.models import build_model
from sglab.models.init import init_std


def _model(gamma: float, init: str = "gamma"):
    config = build_run_config({"model": {
        "name": "transformer", "n_layers": 2, "n_heads": 1, "d_model": 96, "d_ff": 288,
        "norm": "post", "activation": "relu", "tie_embeddings": False, "init": init,
        "init_gamma": gamma, "max_len": 64}})
    torch.manual_seed(0)
    return build_model(config.model, vocab_size=201, max_len=9)


def _fan_in(name: str, model) -> int:
    """d_in of each tensor, written out from the architecture (not read from the module)."""
    d_model, d_ff = 96, 288
    if name == "tok_emb.weight":
        return 201  # one-hot token input
    if name == "positions.table.weight":
        return 64  # one-hot position input (max_len rows)
    if name.endswith("mlp.out.weight"):
        return d_ff
    return d_model  # qkv, attention output, mlp.up, head


@pytest.mark.parametrize("gamma", [0.3, 0.5, 0.8])
def test_every_weight_has_std_d_in_to_the_minus_gamma(gamma):
    model = _model(gamma)
    checked = []
    for name, param in model.named_parameters():
        if param.dim() < 2:
            continue
        expected = _fan_in(name, model) ** (-gamma)
        std = float(param.detach().std())
        assert abs(std / expected - 1) < 0.08, (name, std, expected)
        assert abs(float(param.detach().mean())) < 0.2 * expected, name
        checked.append(name)
    # embeddings, positions, each block's qkv / attention output / both MLP layers, the head
    assert len(checked) == 2 + 2 * 4 + 1 and "head.weight" in checked
    assert "positions.table.weight" in checked


def test_layer_norm_gains_are_one_and_gamma_changes_only_the_scale():
    small, large = _model(0.8), _model(0.3)
    for name, param in small.named_parameters():
        if param.dim() == 1:
            assert torch.equal(param, torch.ones_like(param)), name
    # same seed: the same draw, scaled by d_in^(0.3 - 0.8)
    ratio = 96 ** (0.3 - 0.8)
    torch.testing.assert_close(small.blocks[0].attn.qkv.weight,
                               large.blocks[0].attn.qkv.weight * ratio)


def test_default_init_is_not_the_gamma_scale():
    model = _model(0.5, init="default")  # init_gamma at its default: init=gamma only sets it
    std = float(model.blocks[0].attn.qkv.weight.detach().std())
    assert abs(std - 0.02) < 0.002 and init_std(nn.Linear(96, 96), 0.5) > 0.1
