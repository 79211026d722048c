"""MLP approximations of thesis Ch. 7: Top-K, PKM, sigma-MoE, Switch, S-BASE."""

import math

import pytest
import torch
from torch.func import functional_call, stack_module_state, vmap
from torch.utils.flop_counter import FlopCounterMode

from sglab.models.ffn import MLP, ProductKeyMemory, ffn_parameters, param_matched_d_ff
from sglab.models.moe import MoE, entropy_regularizer, sinkhorn_log, switch_loss
from sglab.models.transformer import TransformerConfig
from tests.conftest import tiny_model

D = 16


def _moe(**kw):
    args = dict(d_model=D, n_experts=6, expert_size=5, top_k=2, n_layers=2)
    args.update(kw)
    return MoE(**args)


def _per_token(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """Reference: every token on its own, y = sum_{e in E_x} s[e] W2^e relu(W1^e x)."""
    _, weights, experts = moe.route(x)
    rows = []
    for n in range(x.shape[0]):
        y = torch.zeros(D)
        for w, e in zip(weights[n], experts[n]):
            y = y + w * (torch.relu(x[n] @ moe.keys[e]) @ moe.values[e])
        rows.append(y)
    return torch.stack(rows)


def test_topk_with_k_equal_d_ff_is_the_dense_mlp_and_smaller_k_keeps_k_units():
    torch.manual_seed(0)
    dense = MLP(D, 24, False, "relu", 0.0)
    topk = MLP(D, 24, False, "relu", 0.0, top_k=24)
    topk.load_state_dict(dense.state_dict())
    x = torch.randn(7, D)
    assert torch.allclose(dense(x), topk(x))
    topk.top_k = 3
    u = torch.relu(dense.up(x))
    kept = u.topk(3, dim=-1)
    expected = torch.zeros_like(u).scatter(-1, kept.indices, kept.values) @ dense.out.weight.T
    assert torch.allclose(topk(x), expected, atol=1e-6)


def test_sigma_moe_with_all_experts_is_eq_7_12_and_unit_scores_give_the_dense_mlp():
    torch.manual_seed(0)
    moe = _moe(top_k=6)
    x = torch.randn(9, D)
    s = torch.sigmoid(x @ moe.selector.T)
    expected = sum(s[:, e:e + 1] * (torch.relu(x @ moe.keys[e]) @ moe.values[e]) for e in range(6))
    assert torch.allclose(moe(x), expected, atol=1e-5)
    # scores of 1 for every expert: the dense MLP with W1 = [W1^e], W2 = [W2^e]
    moe.selection = "softmax_after"
    with torch.no_grad():
        moe.selector.zero_()  # equal logits: softmax over the K = N_E selected is 1/N_E
    w1 = torch.cat(list(moe.keys), dim=1)
    w2 = torch.cat(list(moe.values), dim=0)
    assert torch.allclose(moe(x) * 6, torch.relu(x @ w1) @ w2, atol=1e-5)


@pytest.mark.parametrize("top_k,n_tokens,tied", [(2, 11, False), (1, 11, False), (2, 3, False),
                                                 (3, 8, True)])
def test_masked_sorted_and_per_token_agree_in_outputs_and_gradients(top_k, n_tokens, tied):
    torch.manual_seed(1)
    masked = _moe(top_k=top_k, n_experts=8)
    if tied:  # all scores equal: the routing falls back to topk's tie order, in both impls
        with torch.no_grad():
            masked.selector.zero_()
    sorted_ = _moe(top_k=top_k, n_experts=8, impl="sorted")
    sorted_.load_state_dict(masked.state_dict())
    x = torch.randn(n_tokens, D)
    outs, grads = [], []
    for module, fn in ((masked, masked), (sorted_, sorted_), (masked, lambda t: _per_token(masked, t))):
        module.zero_grad()
        y = fn(x)
        (y * torch.linspace(-1, 1, D)).sum().backward()
        outs.append(y.detach())
        grads.append([p.grad.clone() for p in module.parameters()])
    _, _, experts = masked.route(x)
    if n_tokens * top_k < 8:
        assert len(experts.unique()) < 8  # some experts are empty
    for y, g in zip(outs[1:], grads[1:]):
        assert torch.allclose(outs[0], y, atol=1e-5)
        for a, b in zip(grads[0], g):
            assert torch.allclose(a, b, atol=1e-5)


def test_vmapped_members_equal_members_alone():
    torch.manual_seed(2)
    members = [_moe(n_experts=4, top_k=2) for _ in range(3)]
    params, buffers = stack_module_state(members)
    x = torch.randn(3, 5, D)

    def one(p, b, xi):
        return functional_call(members[0], (p, b), (xi,))

    together = vmap(one)(params, buffers, x)
    for k, m in enumerate(members):
        assert torch.allclose(together[k], m(x[k]), atol=1e-5)


def test_pkm_search_finds_the_brute_force_top_k():
    torch.manual_seed(3)
    pkm = ProductKeyMemory(D, n_subkeys=7, heads=2, top_k=5, activation="relu", n_layers=2)
    x = torch.randn(10, D)
    scores, index = pkm.search(x)
    half = D // 2
    for h in range(2):
        u_a = x[:, :half] @ pkm.keys_a[h].T
        u_b = x[:, half:] @ pkm.keys_b[h].T
        i = torch.arange(49)
        full = u_b[:, i // 7] + u_a[:, i % 7]  # Eq. 7.8
        best = full.topk(5, dim=-1)
        assert torch.allclose(scores[:, h], best.values, atol=1e-6)
        assert torch.equal(index[:, h], best.indices)
    y = pkm(x)
    w = torch.relu(scores.flatten(1))
    expected = (w[..., None] * pkm.values[index.flatten(1)]).sum(1)
    assert torch.allclose(y, expected, atol=1e-5)


def test_entropy_regularizer_and_switch_loss_by_hand():
    torch.manual_seed(4)
    logits = torch.randn(2, 5, 4)
    p = logits.reshape(-1, 4).softmax(-1).mean(0)
    assert torch.allclose(entropy_regularizer(logits), (p * p.log()).sum(), atol=1e-6)
    probs = logits.softmax(-1)
    experts = probs.argmax(-1, keepdim=True)
    f = torch.stack([(experts == e).float().mean() for e in range(4)])
    eq = 4 * (f * probs.reshape(-1, 4).mean(0)).sum()
    assert torch.allclose(switch_loss(probs, experts, "equation"), eq)
    assert torch.allclose(switch_loss(probs, experts, "code"), eq / 16)
    # the MoE leaves gamma * regulariser in aux_loss in training only
    moe = _moe(reg_weight=0.1)
    x = torch.randn(6, D)
    moe(x)
    assert torch.allclose(moe.aux_loss, 0.1 * entropy_regularizer(x @ moe.selector.T))
    moe.eval()
    moe(x)
    assert moe.aux_loss is None


def test_sinkhorn_balances_the_assignment():
    torch.manual_seed(5)
    z = sinkhorn_log(torch.randn(8, 4) * 3, steps=50).exp()
    assert torch.allclose(z.sum(0), torch.ones(4), atol=1e-4)  # each expert: one unit of mass
    assert torch.allclose(z.sum(1), torch.full((8,), 0.5), atol=1e-3)  # tokens / N_E each


def test_dropped_experts_are_never_chosen_and_evaluation_is_untouched():
    torch.manual_seed(6)
    moe = _moe(n_experts=8, top_k=2, expert_dropout=0.5)
    x = torch.randn(50, D)
    torch.manual_seed(7)
    _, weights, experts = moe.route(x)
    torch.manual_seed(7)
    keep = torch.rand(50, 8) >= 0.5
    enough = keep.sum(1) >= 2
    assert keep.gather(1, experts)[enough].all()
    assert (weights[~keep.gather(1, experts)] == 0).all()
    moe.eval()
    plain = _moe(n_experts=8, top_k=2).eval()
    plain.load_state_dict(moe.state_dict())
    assert torch.equal(moe(x), plain(x))


def test_sigma_moe_init_stds():
    torch.manual_seed(8)
    moe = MoE(64, 16, 128, 4, n_layers=4)
    assert moe.keys.std().item() == pytest.approx(math.sqrt(2 / (64 * 4)), rel=0.02)
    assert moe.values.std().item() == pytest.approx(math.sqrt(2 / (2048 * 4)), rel=0.02)
    norms = moe.selector.norm(dim=1)
    assert torch.allclose(norms, norms[0].expand(16), rtol=1e-5)
    assert moe.selector.std().item() == pytest.approx(math.sqrt(2 / (64 * 4)), rel=1e-4)
    standard = MoE(64, 16, 128, 4, n_layers=4, init="standard")
    assert standard.values.std().item() == pytest.approx(math.sqrt(2 / (128 * 4)), rel=0.02)
    switch = MoE(64, 16, 128, 4, n_layers=4, kind="switch")
    assert switch.values.std().item() == pytest.approx(math.sqrt(0.1 / 128), rel=0.02)


def _cfg(**kw):
    return TransformerConfig(**kw)


@pytest.mark.parametrize("d_model,n_experts,expert_size,d_ff", [
    (412, 16, 128, 2053), (512, 16, 128, 2053), (1024, 32, 128, 4110), (412, 128, 128, 16480)])
def test_paper_twins_match_parameters_within_half_a_percent_per_layer(d_model, n_experts,
                                                                      expert_size, d_ff):
    dense = ffn_parameters(_cfg(d_model=d_model, n_heads=4, d_ff=d_ff))
    moe = ffn_parameters(_cfg(d_model=d_model, n_heads=4, ffn="sigma_moe", moe_experts=n_experts,
                              moe_expert_size=expert_size, moe_top_k=4))
    assert abs(dense - moe) / moe < 0.005
    twin = ffn_parameters(_cfg(d_model=d_model, n_heads=4,
                               d_ff=param_matched_d_ff(n_experts, expert_size)))
    assert abs(twin - moe) / moe < 0.005


FFNS = {
    "dense": ["model.d_ff=48"],
    "topk": ["model.d_ff=48", "model.ffn=topk", "model.ffn_top_k=8"],
    "pkm": ["model.ffn=pkm", "model.pkm_subkeys=5", "model.pkm_heads=2", "model.pkm_top_k=4"],
    "sigma_moe": ["model.ffn=sigma_moe", "model.moe_experts=4", "model.moe_expert_size=12",
                  "model.moe_top_k=2", "model.moe_impl=sorted"],
    "switch": ["model.ffn=switch", "model.moe_experts=4", "model.moe_expert_size=12",
               "model.moe_top_k=1", "model.moe_impl=sorted"],
    "s_base": ["model.ffn=s_base", "model.moe_experts=4", "model.moe_expert_size=12",
               "model.moe_top_k=2", "model.moe_impl=sorted"],
}


@pytest.mark.parametrize("kind", list(FFNS))
def test_parameter_counts_flops_and_aux_loss_of_every_ffn_in_the_stack(kind):
    relu = [] if kind == "pkm" else ["model.activation=relu"]  # PKM: pkm_activation
    _, model = tiny_model(*relu, *FFNS[kind])
    block = model.blocks[0]
    own = sum(p.numel() for p in block.mlp.parameters())
    assert own == ffn_parameters(model.config)
    x = torch.randn(13, model.config.d_model)
    with FlopCounterMode(display=False) as counter:
        block.mlp(x)
    assert counter.get_total_flops() == 13 * block.mlp.forward_flops_per_token()
    ids = torch.randint(1, 10, (2, 6))
    model.train()
    model(ids)
    if kind in ("sigma_moe", "switch", "s_base"):
        parts = [b.mlp.aux_loss for b in model.blocks]
        assert torch.allclose(model.aux_loss, sum(parts))
    else:
        assert model.aux_loss is None


@pytest.mark.parametrize("fields,message", [
    (dict(ffn="sigma_moe", moe_experts=4, moe_expert_size=8, moe_top_k=5),
     "ffn.top_k=5 is larger than ffn.experts=4"),
    (dict(ffn="pkm", pkm_subkeys=4, d_model=15, n_heads=1), "must be even"),
    (dict(ffn="sigma_moe", moe_experts=4, moe_expert_size=8, moe_top_k=2, pkm_subkeys=3),
     "pkm_subkeys=3 has no effect without ffn=pkm"),
    (dict(ffn="switch", moe_experts=4, moe_expert_size=8, moe_top_k=1,
          moe_selection="softmax_after"), "ffn=sigma_moe"),
    (dict(ffn="dense", moe_top_k=2), "moe_top_k=2 has no effect"),
    (dict(ffn="sigma_moe", moe_experts=4, moe_expert_size=8, moe_top_k=2, d_ff=32), "d_ff=32"),
    (dict(ffn="topk"), "ffn.top_k"),  # required
    (dict(ffn={"kind": "sigma_moe", "experts": 4, "expert_size": 8, "top_k": 2, "d_ff": 32}),
     "d_ff"),  # the new form: a field the kind does not have is an unknown key
])
def test_bad_ffn_configs_are_rejected_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        _cfg(**fields)


@pytest.mark.parametrize("d_model,n_layers,vocab,d_ff,n_experts,millions", [
    (412, 16, 8000, 2053, 16, 47), (512, 12, 257, 2053, 16, 41), (1024, 18, 8000, 4110, 32, 262)])
def test_paper_model_sizes_wt_s_e8_wt_b(d_model, n_layers, vocab, d_ff, n_experts, millions):
    """Tab. F.2: 47M (WT-S), 41M (E8), 262M (WT-B) with relative attention, untied embeddings;
    the sigma-MoE twin (G 128, K 4) within 0.5% of the dense model."""
    from sglab.models import build_model

    common = dict(d_model=d_model, n_layers=n_layers, n_heads=4, pos_encoding="relative",
                  tie_embeddings=False, activation="relu")
    with torch.device("meta"):
        dense = build_model(TransformerConfig(**common, d_ff=d_ff), vocab, 64).num_parameters()
        moe = build_model(TransformerConfig(**common, ffn="sigma_moe", moe_experts=n_experts,
                                            moe_expert_size=128, moe_top_k=4), vocab,
                          64).num_parameters()
    assert dense / 1e6 == pytest.approx(millions, rel=0.01)
    assert abs(moe - dense) / dense < 0.005


@pytest.mark.parametrize("settings,message", [
    (["model.ffn=sigma_moe", "model.moe_experts=4", "model.moe_expert_size=8",
      "model.moe_top_k=5"], "choose K <= N_E"),
    (["model.ffn=pkm", "model.pkm_subkeys=4", "model.d_model=15", "model.n_heads=1"],
     "must be even"),
])
def test_cli_bad_ffn_exits_2_and_writes_nothing(tmp_path, capsys, settings, message):
    from sglab.cli import main

    runs = tmp_path / "runs"
    assert main(["train", "--runs-dir", str(runs), *[f"--set={s}" for s in settings]]) == 2
    assert message in capsys.readouterr().err
    assert not runs.exists() or not any(runs.iterdir())


def test_only_masked_moe_runs_join_ensembles(monkeypatch):
    from sglab.train.ensemble import ensemble_key
    from tests.conftest import tiny_config

    moe = ["model.activation=relu", "model.ffn=sigma_moe", "model.moe_experts=4",
           "model.moe_expert_size=8", "model.moe_top_k=2"]
    assert ensemble_key(tiny_config(*moe)) is not None
    assert ensemble_key(tiny_config(*moe, "model.moe_impl=sorted")) is None
    # expert dropout draws per-member keyed masks in an ensemble (sglab.models.dropout); on a
    # CPU such runs train alone, as every run with dropout
    from sglab.sweep.jobs import executions

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    dropped = [tiny_config(*moe, "model.expert_dropout=0.1", f"seed={s}") for s in (0, 1)]
    assert ensemble_key(dropped[0]) is not None
    assert executions(dropped, True) == ["alone", "alone"]


def test_ensemble_of_sigma_moe_runs_matches_the_runs_alone(tmp_path):
    """Masked routing under vmap, with the balancing loss in model.aux_loss per member."""
    from tests.test_ensemble import assert_same_as_alone, member_configs

    configs = member_configs("model.activation=relu", "model.ffn=sigma_moe",
                             "model.moe_experts=4", "model.moe_expert_size=8",
                             "model.moe_top_k=2", "model.moe_reg_weight=0.01")[:2]
    assert_same_as_alone(configs, tmp_path)


def test_model_flops_per_token_adds_three_times_each_ffn_forward():
    """Training FLOPs = 6 x matmul parameters + attention; an MLP's share is 3 x its forward."""
    _, dense = tiny_model("model.d_ff=48")
    c = dense.config
    expected = 6 * (c.n_layers * (4 * c.d_model**2 + 2 * c.d_model * 48)
                    + dense.tok_emb.weight.numel()) + 6 * c.n_layers * 2 * 10 * c.d_model
    assert dense.flops_per_token(10) == expected
    _, moe = tiny_model("model.activation=relu", *FFNS["sigma_moe"])
    mlp = moe.blocks[0].mlp.forward_flops_per_token()
    assert moe.flops_per_token(10) == expected - 3 * c.n_layers * (4 * c.d_model * 48 - mlp)
    # a copy-gated (NDR) block adds its gate FFN, d_model -> d_model -> d_model (Eq. 5.4)
    _, ndr = tiny_model("model.d_ff=48", "model.copy_gate=true", "model.norm=post")
    assert ndr.flops_per_token(10) == expected + 3 * c.n_layers * 2 * 2 * c.d_model**2
