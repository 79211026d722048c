"""The MoE layer's pieces against direct formulas: the entropy regularizer (Eq. 7.20), the
Switch loss (Eq. 7.16), S-BASE's Sinkhorn steps (Eq. 7.18), the hook points, the auxiliary
loss, and expert dropout never choosing a dropped expert."""

import math

import pytest
import torch
from torch import nn

from sglab.models.moe import MoE, entropy_regularizer, sinkhorn_log, switch_loss


def test_entropy_regularizer_is_sum_p_log_p_of_the_mean_router_distribution():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 6, dtype=torch.float64)  # [batch, tokens, experts]
    p = logits.reshape(-1, 6).softmax(-1).mean(0)
    assert entropy_regularizer(logits).item() == pytest.approx((p * p.log()).sum().item(), abs=1e-12)
    uniform = torch.zeros(4, 6)
    assert entropy_regularizer(uniform).item() == pytest.approx(-math.log(6), abs=1e-6)


@pytest.mark.parametrize("scale", ["equation", "code"])
def test_switch_loss_is_n_e_times_f_dot_p(scale):
    torch.manual_seed(0)
    probs = torch.randn(2, 4, 5).softmax(-1)
    experts = torch.tensor([[[0, 1], [0, 2], [0, 1], [3, 0]],
                            [[1, 2], [0, 1], [2, 1], [0, 3]]])  # expert 4 never chosen
    f = torch.zeros(5)
    for e in experts.reshape(-1):
        f[e] += 1
    f /= 8  # tokens (each of its K slots counts)
    expected = 5 * (f * probs.reshape(-1, 5).mean(0)).sum()
    if scale == "code":
        expected = expected / 25
    assert switch_loss(probs, experts, scale).item() == pytest.approx(expected.item(), rel=1e-6)


def test_sinkhorn_steps_alternate_expert_and_token_normalisation():
    torch.manual_seed(0)
    logits = torch.randn(7, 4, dtype=torch.float64)
    z = logits.clone()
    for _ in range(3):
        z = z - z.logsumexp(1, keepdim=True)
        z = z - z.logsumexp(0, keepdim=True)
    out = sinkhorn_log(logits)
    assert torch.allclose(out, z)
    assert torch.allclose(out.logsumexp(0), torch.zeros(4, dtype=torch.float64))


def test_a_default_moe_is_a_sigma_moe_with_sigmoid_scores_relu_and_no_loss():
    torch.manual_seed(0)
    moe = MoE(8, 4, 3, 2, n_layers=2).train()
    assert (moe.kind, moe.selection, moe.switch_loss_scale) == ("sigma_moe", "sigmoid", "equation")
    assert isinstance(moe.act, nn.ReLU) and moe.reg_weight == 0
    x = torch.randn(5, 8)
    logits, weights, experts = moe.route(x)
    assert torch.allclose(weights, torch.sigmoid(logits).gather(-1, experts))
    moe(x)
    assert moe.aux_loss is None  # reg_weight 0: no auxiliary loss, even in training


def test_hook_points_hold_scores_experts_and_gates_in_the_inputs_shape():
    torch.manual_seed(0)
    moe = MoE(8, 5, 3, 2, n_layers=2).eval()
    seen = {}
    for name in ("scores", "experts", "gates"):
        getattr(moe, name).register_forward_hook(
            lambda module, args, out, name=name: seen.__setitem__(name, out))
    x = torch.randn(2, 3, 8)
    moe(x)
    logits, weights, experts = moe.route(x.reshape(-1, 8))
    assert torch.equal(seen["scores"], logits.reshape(2, 3, 5))
    assert torch.equal(seen["experts"], experts.reshape(2, 3, 2))
    assert torch.equal(seen["gates"], weights.reshape(2, 3, 2))


@pytest.mark.parametrize("kind", ["sigma_moe", "switch"])
def test_the_auxiliary_loss_is_gamma_times_the_kinds_regulariser(kind):
    torch.manual_seed(0)
    moe = MoE(8, 5, 3, 2, n_layers=2, kind=kind, reg_weight=0.25, switch_loss_scale="code").train()
    x = torch.randn(6, 8)
    moe(x)
    logits, _, experts = moe.route(x)
    expected = (switch_loss(logits.softmax(-1), experts, "code") if kind == "switch"
                else entropy_regularizer(logits))
    assert moe.aux_loss.item() == pytest.approx(0.25 * expected.item(), rel=1e-6)
    moe.eval()(x)
    assert moe.aux_loss is None


def test_selected_reg_scope_leaves_a_collapsed_router_unpenalised():
    """The authors' softmax-after-top-K ablation regularises the softmax over the K chosen
    slots: routing every token to the same experts costs it nothing, and the selector rows
    of the experts never chosen get no gradient; Eq. 7.20 over all experts pulls them in."""
    torch.manual_seed(0)
    aux = {}
    for scope in ("experts", "selected"):
        moe = MoE(8, 6, 3, 2, n_layers=2, selection="softmax_after", reg_weight=1.0,
                  reg_scope=scope).train()
        with torch.no_grad():
            moe.selector.zero_()
            moe.selector[:2] = torch.tensor([1.0] * 8)  # experts 0 and 1 win for x > 0
        x = torch.rand(50, 8) + 0.1
        moe(x)
        assert set(moe.route(x)[2].unique().tolist()) == {0, 1}
        aux[scope] = moe.aux_loss.item()
        moe.aux_loss.backward()
        unused_grad = moe.selector.grad[2:].abs().sum().item()
        if scope == "selected":
            assert unused_grad == 0.0
        else:
            assert unused_grad > 0.0
    # both slots carry the same logit for every token: the K-slot mean is uniform over K, its
    # minimum; over the 6 experts the mass sits on 2, far above -log 6
    assert aux["selected"] == pytest.approx(-math.log(2), abs=1e-5)
    assert aux["experts"] > -math.log(6) + 0.5


def test_selected_reg_scope_needs_softmax_after():
    from pydantic import ValidationError

    from sglab.models.transformer_config import SigmaMoEFFN
    with pytest.raises(ValidationError, match="reg_scope=selected"):
        SigmaMoEFFN(experts=4, expert_size=2, top_k=2, reg_scope="selected")
    assert SigmaMoEFFN(experts=4, expert_size=2, top_k=2, reg_scope="selected",
                       selection="softmax_after").reg_scope == "selected"


def test_softmax_after_with_expert_dropout_renormalises_over_kept_experts_only():
    """With logits below -1 a dropped expert must still never be chosen (while K remain)."""
    torch.manual_seed(0)
    moe = MoE(8, 6, 3, 2, n_layers=2, selection="softmax_after", expert_dropout=0.2).train()
    with torch.no_grad():
        moe.selector.copy_(moe.selector.abs() + 0.1)
    x = -torch.rand(200, 8) - 1  # negative inputs: every logit negative, most below -1
    logits = x @ moe.selector.T
    assert (logits < -1).float().mean() > 0.5
    torch.manual_seed(1)
    _, weights, experts = moe.route(x)
    # the chosen experts' weights are the softmax of their own logits (dropped ones rank -inf)
    assert torch.allclose(weights, logits.gather(-1, experts).softmax(-1), atol=1e-6)


def test_s_base_training_with_expert_dropout_never_routes_to_a_dropped_expert():
    torch.manual_seed(0)
    moe = MoE(8, 6, 3, 2, n_layers=2, kind="s_base", expert_dropout=0.2).train()
    torch.manual_seed(1)
    logits, weights, experts = moe.route(torch.randn(50, 8))
    # a dropped expert's score is 0; with 6 experts at 0.2 every token here keeps K = 2
    assert (weights > 0).all()
    assert torch.allclose(weights, torch.sigmoid(logits).gather(-1, experts))
