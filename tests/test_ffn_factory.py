"""The MLP sub-block built from the ``ffn`` family: every setting of every kind reaches the
module, the parameter counts match the built modules, and PKM's init and score activation
(thesis App. F.1.3) hold."""

import math

import pytest
import torch
from torch import nn

from sglab.config import build_run_config
from sglab.models.ffn import (
    MLP,
    ProductKeyMemory,
    ffn_parameters,
    make_ffn,
    param_matched_d_ff,
)
from sglab.models.moe import MoE

D, LAYERS = 16, 3


def _model(*ffn: str, bias: bool = False):
    return build_run_config({}, [f"model.d_model={D}", f"model.n_layers={LAYERS}",
                                 "model.n_heads=2", f"model.bias={str(bias).lower()}",
                                 *[f"model.ffn.{s}" for s in ffn]]).model


def _built(*ffn: str, bias: bool = False, dropout: float = 0.0):
    model = _model(*ffn, bias=bias)
    return make_ffn(model.ffn, D, LAYERS, bias, dropout), model


def _weights(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.dim() >= 2)


def test_dense_and_topk_take_width_activation_bias_and_k():
    dense, config = _built("kind=dense", bias=True)
    assert isinstance(dense, MLP) and dense.up.out_features == 4 * D  # d_ff null: 4 d
    assert isinstance(dense.act, nn.GELU) and dense.top_k is None and dense.up.bias is not None
    relu, _ = _built("kind=dense", "d_ff=24", "activation=relu")
    assert relu.up.out_features == 24 and isinstance(relu.act, nn.ReLU) and relu.up.bias is None
    topk, _ = _built("kind=topk", "d_ff=24", "top_k=5")
    assert topk.top_k == 5 and topk.up.out_features == 24
    assert _built("kind=none")[0] is None and ffn_parameters(_model("kind=none")) == 0
    for module, model in (relu, _model("kind=dense", "d_ff=24")), (dense, config):
        assert ffn_parameters(model) == _weights(module)
        assert module.forward_flops_per_token() == 2 * 2 * D * module.up.out_features


def test_topk_keeps_the_k_largest_units_of_each_token():
    torch.manual_seed(0)
    topk, _ = _built("kind=topk", "d_ff=24", "top_k=5", "activation=relu")
    seen = []
    topk.hidden.register_forward_hook(lambda module, args, out: seen.append(out))
    x = torch.randn(2, 3, D)  # [batch, tokens, d]: fewer tokens than K, as at a short input
    topk(x)
    dense_u = torch.relu(topk.up(x))
    kept = seen[0] != 0
    assert (kept.sum(-1) <= 5).all()
    kth = dense_u.topk(5, dim=-1).values[..., -1:]
    assert torch.equal(seen[0], torch.where(dense_u >= kth, dense_u, torch.zeros_like(dense_u)))


@pytest.mark.parametrize("kind", ["dense", "pkm", "sigma_moe"])
def test_every_kind_takes_the_models_dropout(kind):
    settings = {"dense": [], "pkm": ["subkeys=4"],
                "sigma_moe": ["experts=4", "expert_size=4", "top_k=2"]}[kind]
    module, _ = _built(f"kind={kind}", *settings, dropout=0.3)
    assert module.drop.p == 0.3


@pytest.mark.parametrize("activation", ["relu", "softmax"])
def test_pkm_takes_its_settings_and_weights_its_selection(activation):
    torch.manual_seed(0)
    pkm, model = _built("kind=pkm", "subkeys=4", "heads=3", "top_k=12",
                        f"score_activation={activation}")
    assert isinstance(pkm, ProductKeyMemory)
    assert (pkm.n_sub, pkm.heads, pkm.top_k, pkm.activation) == (4, 3, 12, activation)
    assert ffn_parameters(model) == pkm.values.numel() + pkm.keys_a.numel() + pkm.keys_b.numel()
    # top_k 12 lies between n_sub * 2 and n_sub^2: each head scores n_sub sub-keys of each
    # half (two d/2 products) and reads min(K, n_sub^2) values
    assert pkm.forward_flops_per_token() == 2 * 3 * 4 * D + 2 * 3 * min(12, 16) * D
    more = ProductKeyMemory(D, 4, 3, 20, activation, n_layers=LAYERS)  # K above n_sub^2
    assert more.forward_flops_per_token() == 2 * 3 * 4 * D + 2 * 3 * 16 * D
    seen = []
    pkm.hidden.register_forward_hook(lambda module, args, out: seen.append(out))
    x = torch.randn(5, D)
    pkm(x)
    scores, _ = pkm.search(x)
    flat = scores.flatten(1)
    expected = flat.softmax(-1) if activation == "softmax" else torch.relu(flat)
    assert torch.allclose(seen[0], expected)
    if activation == "softmax":  # one softmax over every head's selection of a token
        assert torch.allclose(seen[0].sum(-1), torch.ones(5))


def test_pkm_init_std_follows_the_dense_pre_ln_mlp():
    torch.manual_seed(0)
    pkm = ProductKeyMemory(64, 32, 2, 8, "relu", n_layers=4)
    std = math.sqrt(2 / (4 * 64))
    for table in (pkm.keys_a, pkm.keys_b, pkm.values):
        assert table.std().item() == pytest.approx(std, rel=0.05)


@pytest.mark.parametrize("kind", ["sigma_moe", "switch", "s_base"])
def test_moe_kinds_take_every_setting(kind):
    torch.manual_seed(0)
    extra = {"sigma_moe": ["selection=softmax_after", "init=standard"],
             "switch": ["loss_scale=code"], "s_base": ["init=standard"]}[kind]
    moe, model = _built(f"kind={kind}", "experts=6", "expert_size=5", "top_k=2", "impl=sorted",
                        "expert_dropout=0.1", "hidden_dropout=0.2", "reg_weight=0.003",
                        f"activation={'gelu' if kind == 's_base' else 'relu'}", *extra)
    assert isinstance(moe, MoE) and moe.kind == kind
    assert (moe.n_experts, moe.expert_size, moe.top_k, moe.impl) == (6, 5, 2, "sorted")
    assert (moe.expert_dropout, moe.reg_weight, moe.hidden_drop.p) == (0.1, 0.003, 0.2)
    assert isinstance(moe.act, nn.GELU if kind == "s_base" else nn.ReLU)
    assert moe.selection == ("softmax_after" if kind == "sigma_moe" else "sigmoid")
    assert moe.switch_loss_scale == ("code" if kind == "switch" else "equation")
    assert ffn_parameters(model) == _weights(moe)


@pytest.mark.parametrize("init,fan_in", [("sigma", 64 * 16), ("standard", 16)])
def test_sigma_moe_init_takes_the_whole_width_as_the_values_fan_in(init, fan_in):
    """Sec. 7.4: sigma-MoE initializes W2 as a dense MLP of width N_E G would be."""
    torch.manual_seed(0)
    moe, _ = _built("kind=sigma_moe", "experts=64", "expert_size=16", "top_k=4", f"init={init}")
    assert moe.values.std().item() == pytest.approx(math.sqrt(2 / (fan_in * LAYERS)), rel=0.05)


def test_the_dense_twin_absorbs_the_selector_in_half_an_expert_count():
    assert param_matched_d_ff(5, 3) == 5 * 3 + 2  # N_E G + floor(N_E / 2)
    assert param_matched_d_ff(64, 16) == 1056
