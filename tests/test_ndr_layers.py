"""Layers of the Neural Data Router: geometric attention, copy gate, shared layers, readout."""

import pytest
import torch

from sglab.analysis.hooks import capture
from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.models import build_model
from sglab.models.geometric import GeometricAttention, geometric_weights
from sglab.models.transformer import restrict_outputs

NDR = ["model.attention=geometric", "model.copy_gate=true", "model.norm=post",
       "model.attention_mask=bidirectional", "model.pos_encoding=none", "model.readout=last",
       "model.d_model=16", "model.n_heads=2", "model.d_ff=32", "model.tie_embeddings=false"]


def direct_geometric(logits: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Eqs. 5.7-5.8 evaluated literally: A_ij = P_ij * prod over S_ij of (1 - P_ik)."""
    p = torch.sigmoid(logits.double())
    n = p.shape[-1]
    out = torch.zeros_like(p)
    for i in range(n):
        for j in range(n):
            if i == j or not real[j]:
                continue
            if i < j:
                s = [k for k in range(n) if k not in (i, j) and abs(i - k) < abs(i - j)]
            else:
                s = [k for k in range(n) if k not in (i, j) and abs(i - k) <= abs(i - j)]
            weight = p[i, j]
            for k in s:
                if real[k]:  # padded columns are transparent
                    weight = weight * (1 - p[i, k])
            out[i, j] = weight
    return out


@pytest.mark.parametrize("length,n_real", [(7, 7), (9, 6), (1, 1), (2, 1)])
def test_geometric_weights_equal_direct_product_over_S(length, n_real):
    torch.manual_seed(length)
    logits = torch.randn(3, length, length) * 3
    logits[0] = 0.7  # every P equal: ties decide the order (right side counts as closer)
    real = torch.arange(length) < n_real
    fast = geometric_weights(logits, real[None, None, :])
    for b in range(3):
        expected = direct_geometric(logits[b], real)
        assert torch.allclose(fast[b].double(), expected, atol=1e-5), b


def test_geometric_ties_prefer_the_right_source_and_rows_sum_below_one():
    logits = torch.full((1, 5, 5), 10.0)  # every source matches almost surely
    weights = geometric_weights(logits)[0]
    assert torch.all(weights.diagonal() == 0)
    # from the middle column both neighbours match; the right one is closer by the tie rule
    assert weights[2, 3] > 0.99 and weights[2, 1] < 0.01
    assert torch.all(weights.sum(-1) <= 1 + 1e-6)
    normalized = geometric_weights(torch.randn(2, 6, 6), normalize=True)
    assert torch.allclose(normalized.sum(-1), torch.ones(2, 6), atol=1e-5)


def test_geometric_attention_ignores_padding_and_has_directional_channels():
    torch.manual_seed(0)
    attention = GeometricAttention(16, 2).eval()
    x = torch.randn(1, 6, 16)
    mask = torch.tensor([[True] * 4 + [False] * 2])
    changed = x.clone()
    changed[:, 4:] = torch.randn(1, 2, 16)
    a, b = attention(x, mask), attention(changed, mask)
    assert torch.allclose(a[:, :4], b[:, :4], atol=1e-6)
    # with zero content weights, the direction term alone decides left vs right
    with torch.no_grad():
        attention.query.weight.zero_()
        attention.query.bias.zero_()
        attention.direction.weight.zero_()
        attention.direction.bias.copy_(torch.tensor([8.0, 8.0, -8.0, -8.0]))  # LR on, RL off
    weights = attention.logits(x)
    pattern = geometric_weights(weights)
    assert pattern[0, :, 2, 3].min() > 0.99 and pattern[0, :, 2, :2].max() < 1e-3


def test_geometric_logits_follow_eq_5_10_from_the_thesis_codes_start():
    """z_ij = alpha q_i . k_j + beta (d_LR,i if j > i else d_RL,i) + gamma (Eqs. 5.9-5.10),
    starting at alpha = 1/sqrt(d_head), beta = 1, gamma = 0; queries carry a bias, keys,
    values and the output projection none."""
    torch.manual_seed(0)
    attention = GeometricAttention(8, 2).eval()
    assert attention.alpha.item() == pytest.approx(0.5) and attention.beta.item() == 1.0
    assert attention.gamma.item() == 0.0
    assert attention.query.bias is not None and attention.direction.bias is not None
    assert attention.key.bias is None and attention.value.bias is None
    assert attention.out.bias is None
    with torch.no_grad():
        attention.alpha.fill_(0.4)
        attention.beta.fill_(1.3)
        attention.gamma.fill_(0.7)
    x = torch.randn(2, 5, 8)
    q = attention.query(x).view(2, 5, 2, 4)
    k = attention.key(x).view(2, 5, 2, 4)
    d = attention.direction(x).view(2, 5, 2, 2)  # [..., 0: left to right, 1: right to left, head]
    expected = torch.empty(2, 2, 5, 5)
    for b in range(2):
        for h in range(2):
            for i in range(5):
                for j in range(5):
                    direction = d[b, i, 0, h] if j >= i else d[b, i, 1, h]
                    expected[b, h, i, j] = 0.4 * q[b, i, h] @ k[b, j, h] + 1.3 * direction + 0.7
    assert torch.allclose(attention.logits(x), expected, atol=1e-5)


@pytest.mark.parametrize("normalize", [False, True])
def test_geometric_attention_normalizes_its_rows_only_when_asked(normalize):
    torch.manual_seed(0)
    attention = GeometricAttention(8, 2, normalize=normalize).eval()
    x = torch.randn(1, 6, 8)
    seen = []
    attention.pattern.register_forward_hook(lambda module, args, out: seen.append(out))
    attention(x)
    sums = seen[0].sum(-1)
    if normalize:
        assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5)
    else:
        assert (sums < 0.999).any() and (sums <= 1 + 1e-6).all()


def _ndr(*overrides: str):
    config = build_run_config({"task": {"name": "ctl"}}, [*NDR, *overrides])
    torch.manual_seed(0)
    return config, build_model(config.model, 24, 14)


def test_gate_bias_starts_at_minus_three():
    _, model = _ndr("model.n_layers=3")
    for block in model.blocks:
        assert torch.all(block.gate_ffn.out.bias == -3.0)
        assert block.gate_ffn.out.weight.shape == (16, 16) and block.gate_ffn.up.weight.shape == (16, 16)
    _, other = _ndr("model.n_layers=1", "model.copy_gate_bias_init=-1.5")
    assert torch.all(other.blocks[0].gate_ffn.out.bias == -1.5)


def test_torch_init_keeps_unit_embeddings_and_uses_the_ndr_xavier_bounds():
    """init=torch (the NDR code's): embeddings N(0, 1), so a copying column keeps its token
    identity at the scale of the LayerNorm'd updates; the GPT init would make them 0.02."""
    _, model = _ndr("model.n_layers=2", "model.d_model=64", "model.init=torch",
                    "model.ndr_init=xavier")
    assert 0.9 < model.tok_emb.weight.std().item() < 1.1
    attention, block = model.blocks[0].attn, model.blocks[0]
    assert attention.direction.weight.abs().max() <= (6 / (64 + 2)) ** 0.5
    assert attention.direction.weight.abs().max() > 0.9 * (6 / (64 + 2)) ** 0.5  # not Linear's default
    assert torch.all(block.gate_ffn.out.bias == -3.0)
    assert torch.all(block.mlp.up.bias == 0)
    _, gpt = _ndr("model.n_layers=2", "model.d_model=64", "model.init=default")
    assert gpt.tok_emb.weight.std().item() < 0.03


def test_code_init_keeps_linear_defaults_for_directions_and_ffn_biases():
    """ndr_init=code: the thesis code re-initializes an unused positional projection, so the
    directional projection keeps nn.Linear's U(+-1/sqrt(d)); FFN biases keep theirs too."""
    _, model = _ndr("model.n_layers=2", "model.d_model=64", "model.init=torch")
    attention, block = model.blocks[0].attn, model.blocks[0]
    bound = 64 ** -0.5
    assert attention.direction.weight.abs().max() <= bound
    assert attention.direction.weight.abs().max() > 0.9 * bound
    assert torch.all(attention.query.bias == 0)
    xavier = (6 / (64 + attention.head_dim)) ** 0.5  # fan_in d, fan_out d_head
    assert attention.query.weight.abs().max() <= xavier
    assert attention.query.weight.abs().max() > 0.9 * xavier  # Xavier, not Linear's default
    assert block.mlp.up.bias.abs().max() > 0 and block.mlp.up.bias.abs().max() <= bound
    assert torch.all(block.gate_ffn.out.bias == -3.0)


def test_ctlpp_code_init_gives_values_and_merge_d_by_d_bounds_and_keeps_biases():
    """ndr_init=ctlpp_code with attention.kv_bias (the CTL++ code's NDR attention): W_q and
    W_kE Xavier over d -> d_head, W_v and W_o over d -> d (narrower), key and value biases
    at nn.Linear's U(+-1/sqrt(d)); the NDR code's scheme has no key bias."""
    _, model = _ndr("model.n_layers=2", "model.d_model=64", "model.n_heads=4",
                    "model.init.kind=torch", "model.init.ndr_init=ctlpp_code",
                    "model.attention.kv_bias=true")
    attention = model.blocks[0].attn
    per_head, whole = (6 / (64 + 16)) ** 0.5, (6 / (64 + 64)) ** 0.5
    for linear, bound in ((attention.query, per_head), (attention.key, per_head),
                          (attention.value, whole), (attention.out, whole)):
        assert 0.9 * bound < linear.weight.abs().max() <= bound
    for linear in (attention.query, attention.key, attention.value):
        assert 0.9 * 64 ** -0.5 < linear.bias.abs().max() <= 64 ** -0.5
    _, code = _ndr("model.n_layers=2", "model.d_model=64", "model.n_heads=4", "model.init=torch")
    assert code.blocks[0].attn.key.bias is None and code.blocks[0].attn.value.bias is None
    assert code.blocks[0].attn.value.weight.abs().max() > whole  # d -> d_head bounds


@pytest.mark.parametrize("attention", ["relative", "abs_rel_gated"])
def test_code_init_of_the_tanh_gated_layers_follows_the_thesis_code(attention):
    """ndr_init=code for "+ rel + gate" / "+ abs/rel + gate": relative attention gets Xavier
    W_q (d -> d), [W_kE; W_v] (one d -> 2d map), W_kP and no projection bias; the data FFN's
    output layer keeps nn.Linear's U(+-1/sqrt(d_ff)); the NDR's keeps Xavier gain 5/3."""
    position = (["model.pos_encoding=relative"] if attention == "relative" else
                ["model.pos_encoding=none", "model.attention=abs_rel_gated"])
    gated = [o for o in NDR if not o.startswith(("model.attention=", "model.pos_encoding="))]
    config = build_run_config({"task": {"name": "ctl"}}, [
        *gated, *position, "model.update_norm=tanh", "model.n_layers=2", "model.d_model=64",
        "model.d_ff=256", "model.n_heads=1", "model.init=torch", "model.bias=true"])
    torch.manual_seed(0)
    block = build_model(config.model, 24, 14).blocks[0]
    attn, d = block.attn, 64
    if attention == "relative":
        q, kv, bias = attn.qkv.weight[:d], attn.qkv.weight[d:], attn.qkv.bias
        assert torch.all(bias == 0)
    else:
        q, kv = attn.query.weight, torch.cat([attn.key.weight, attn.value.weight])
    for weight, bound in ((q, (6 / (2 * d)) ** 0.5), (kv, (6 / (3 * d)) ** 0.5),
                          (attn.position_key.weight, (6 / (2 * d)) ** 0.5)):
        assert 0.95 * bound < weight.abs().max() <= bound
    default = 256 ** -0.5  # nn.Linear's bound for fan_in = d_ff
    assert 0.95 * default < block.mlp.out.weight.abs().max() <= default
    _, ndr = _ndr("model.n_layers=2", "model.d_model=64", "model.d_ff=256", "model.init=torch")
    xavier = 5 / 3 * (6 / (64 + 256)) ** 0.5
    assert 0.95 * xavier < ndr.blocks[0].mlp.out.weight.abs().max() <= xavier


@pytest.mark.parametrize("ffn", ["relu", "gelu_residual"])
def test_copy_gated_layer_follows_eqs_5_1_to_5_5(ffn):
    """The layer's order of operations against the equations written out with the block's
    own weights: post-LN attention (5.1), no residual around the data FFN (5.2; App. E adds
    one), a d -> d -> d gate FFN on a (5.3), h' = g*u + (1-g)*h (5.4)."""
    _, model = _ndr("model.n_layers=1", f"model.copy_gate_ffn={ffn}")
    block = model.blocks[0].eval()
    h = torch.randn(2, 6, 16)
    act = torch.nn.functional.gelu if ffn == "gelu_residual" else torch.relu
    ffn_of = lambda f, x: f.out.weight @ act(f.up.weight @ x + f.up.bias) + f.out.bias  # 5.5
    layer_norm = lambda ln, x: torch.nn.functional.layer_norm(x, (16,), ln.weight, ln.bias)
    expected = torch.empty_like(h)
    attention = block.attn(h, None)
    for b in range(2):
        for i in range(6):
            a = layer_norm(block.ln_1, attention[b, i] + h[b, i])                        # 5.1
            data = ffn_of(block.mlp, a) + (a if ffn == "gelu_residual" else 0)
            u = layer_norm(block.ln_2, data)                                             # 5.2
            g = torch.sigmoid(ffn_of(block.gate_ffn, a))                                 # 5.3
            expected[b, i] = g * u + (1 - g) * h[b, i]                                   # 5.4
    assert torch.allclose(block(h, None), expected, atol=1e-5)


def test_gate_dropout_of_one_forces_a_copy():
    _, model = _ndr("model.n_layers=2", "model.gate_dropout=0.99")
    block = model.blocks[0]
    block.gate_dropout = 1.0  # every gate vector zeroed: h' = h exactly (Eq. 5.4 with g = 0)
    block.train()
    x = torch.randn(3, 5, 16)
    assert torch.equal(block(x, None), x)
    block.eval()  # no gate dropout in evaluation: the layer updates
    assert not torch.allclose(block(x, None), x)


def test_gate_dropout_zeroes_whole_columns():
    _, model = _ndr("model.n_layers=1", "model.gate_dropout=0.5")
    block = model.blocks[0].train()
    torch.manual_seed(1)
    gates = capture_train(block, torch.randn(8, 6, 16))
    zero_columns = (gates == 0).all(-1)
    assert zero_columns.any() and (~zero_columns).any()
    assert torch.all((gates == 0).any(-1) == zero_columns)  # zeros come as whole vectors


def capture_train(block, x):
    store = {}
    handle = block.gate.register_forward_hook(lambda m, a, out: store.__setitem__("g", out))
    block(x, None)
    handle.remove()
    return store["g"]


def test_shared_layers_share_weights_and_run_extra_steps_at_test_time():
    config, model = _ndr("model.n_layers=3", "model.shared_layers=true", "model.eval_steps=5")
    distinct = {id(p) for p in model.parameters()}
    assert len(distinct) == len(list(model.blocks[0].parameters())) + \
        len([p for n, p in model.named_parameters() if not n.startswith("blocks.")])
    x = torch.randint(1, 24, (2, 7))
    mask = torch.ones_like(x, dtype=torch.bool)
    model.eval()
    names = sorted(capture(model, ["blocks.*.gate"], x, mask))
    assert names == [f"blocks.{t}.gate" for t in range(5)]  # one hook name per step
    model.train()
    trained = {}
    from sglab.analysis.hooks import watching
    with watching(model, ["blocks.*.gate"], trained):
        model(x, key_padding_mask=mask)
    assert sorted(trained) == [f"blocks.{t}.gate" for t in range(3)]
    # more steps change the prediction of the eval-mode model (the loop really runs longer)
    model.eval()
    five = model(x, key_padding_mask=mask)
    model.config.block.eval_steps = None
    three = model(x, key_padding_mask=mask)
    assert five.shape == three.shape == (2, 1, 24) and not torch.allclose(five, three)


def test_with_eval_steps_runs_the_trained_layer_longer_and_leaves_the_model_alone():
    _, model = _ndr("model.n_layers=3", "model.shared_layers=true")
    x = torch.randint(1, 24, (2, 7))
    mask = torch.ones_like(x, dtype=torch.bool)
    model.eval()
    three = model(x, key_padding_mask=mask)
    # the same number of steps computes the same; five steps equal a model built to run five
    assert torch.equal(model.with_eval_steps(3)(x, key_padding_mask=mask), three)
    five = model.with_eval_steps(5)
    _, built = _ndr("model.n_layers=3", "model.shared_layers=true", "model.eval_steps=5")
    built.load_state_dict(model.state_dict(), strict=False)  # the twins share blocks.0's tensors
    built.eval()
    assert torch.allclose(five(x, key_padding_mask=mask), built(x, key_padding_mask=mask))
    assert not torch.allclose(five(x, key_padding_mask=mask), three)
    # the weights are the same tensors; the model it came from still runs 3 steps
    assert {id(p) for p in five.parameters()} == {id(p) for p in model.parameters()}
    assert model.steps == 3 and len(model.blocks) == 3 and five.steps == 5
    assert torch.equal(model(x, key_padding_mask=mask), three)
    assert sorted(capture(five, ["blocks.*.gate"], x, mask)) == [f"blocks.{t}.gate"
                                                                 for t in range(5)]
    assert sorted(capture(model, ["blocks.*.gate"], x, mask)) == [f"blocks.{t}.gate"
                                                                  for t in range(3)]
    # the model's own hooks come along: a classification head's class mask (restrict_outputs)
    restrict_outputs(model, [1, 2, 3], 24)
    restricted = model(x, key_padding_mask=mask)
    assert torch.equal(model.with_eval_steps(3)(x, key_padding_mask=mask), restricted)
    assert (model.with_eval_steps(5)(x, key_padding_mask=mask)[..., 4:] < -5e3).all()
    _, separate = _ndr("model.n_layers=3")
    with pytest.raises(SglabError, match="shared-layer"):
        separate.with_eval_steps(5)


def test_readout_reads_the_last_real_column():
    _, model = _ndr("model.n_layers=2", "model.readout=last")
    model.eval()
    x = torch.randint(1, 24, (1, 6))
    padded = torch.cat([x, torch.zeros(1, 3, dtype=torch.long)], 1)
    mask = torch.arange(9)[None] < 6
    assert torch.allclose(model(x, key_padding_mask=torch.ones_like(x, dtype=torch.bool)),
                          model(padded, key_padding_mask=mask), atol=1e-5)


def test_bad_ndr_configs_are_clear_errors():
    with pytest.raises(SglabError, match="bidirectional"):
        build_run_config({}, ["model.attention=geometric"])
    with pytest.raises(SglabError, match="norm=post"):
        build_run_config({}, ["model.copy_gate=true", "model.attention_mask=bidirectional"])
    with pytest.raises(SglabError, match="eval_steps needs shared=true"):
        build_run_config({}, ["model.eval_steps=4"])
    with pytest.raises(SglabError, match="eval_steps needs shared=true"):
        build_run_config({}, ["model.block.eval_steps=4"])
    with pytest.raises(SglabError, match="norm=post"):  # the new form: block.norm
        build_run_config({}, ["model.block.kind=copy_gate", "model.block.norm=pre",
                              "model.attention_mask=bidirectional"])
    with pytest.raises(SglabError, match="set ffn.kind=dense"):
        build_run_config({}, ["model.block.kind=copy_gate", "model.ffn.kind=none"])
    with pytest.raises(SglabError, match="readout"):
        from sglab.tasks import build_task
        build_task(build_run_config({"task": {"name": "ctl"}}, []).task).check_model(
            build_run_config({}, ["model.attention_mask=bidirectional"]).model)


def test_abs_rel_gated_attention_switches_between_relative_and_absolute_positions():
    from sglab.models.abs_rel import AbsRelGatedAttention

    torch.manual_seed(0)
    attention = AbsRelGatedAttention(16, 2).eval()
    with torch.no_grad():  # position-only scores: no content term
        attention.key.weight.zero_()
        attention.switch.weight.zero_()
    x = torch.randn(1, 1, 16).expand(1, 8, 16)  # identical columns: only positions differ
    store = {}

    def pattern(bias: float) -> torch.Tensor:
        with torch.no_grad():
            attention.switch.bias.fill_(bias)
        handle = attention.pattern.register_forward_hook(lambda m, a, out: store.__setitem__("p", out))
        attention(x)
        handle.remove()
        return store["p"][0]

    relative = pattern(30.0)  # r = 1: scores depend on the offset i - j only
    ratio = lambda p, i, j, k: p[:, i, j] / p[:, i, k]  # softmax normalizers cancel
    assert torch.allclose(ratio(relative, 3, 2, 5), ratio(relative, 4, 3, 6), rtol=1e-4)
    assert not torch.allclose(relative[:, 0], relative[:, 5], atol=1e-3)
    absolute = pattern(-30.0)  # r = 0: scores depend on the source index j only
    assert torch.allclose(absolute[:, 0], absolute[:, 5], atol=1e-5)
    padded = capture(attention, ["pattern"], x, torch.tensor([[True] * 6 + [False] * 2]))
    assert torch.all(padded["pattern"][..., 6:] == 0)


def direct_abs_rel_attention(module, x, key_scale=None):
    """Eq. D.7 evaluated pair by pair: s [(q_i + b_qE) . k_j + (q_i + b_qP) . W_kP (p_{i-j}
    r_i + p_j (1 - r_i))]; ``key_scale`` (d_head values) multiplies every content key and
    position key (key dropout)."""
    from sglab.models.relative import relative_sinusoids

    heads, head_dim, d = module.n_heads, module.head_dim, module.d_model
    batch, length, _ = x.shape
    out = torch.zeros(batch, length, d)
    scale = torch.ones(head_dim) if key_scale is None else key_scale
    for b in range(batch):
        r = torch.sigmoid(module.switch(x[b]))  # [length, heads]
        for h in range(heads):
            rows = slice(h * head_dim, (h + 1) * head_dim)
            logits = torch.zeros(length, length)
            for i in range(length):
                q = module.query.weight[rows] @ x[b, i]
                for j in range(length):
                    k = (module.key.weight[rows] @ x[b, j]) * scale
                    rel = (module.position_key.weight @ relative_sinusoids(torch.tensor(i - j), d))[rows]
                    ab = (module.position_key.weight @ relative_sinusoids(torch.tensor(j), d))[rows]
                    position = rel * scale * r[i, h] + ab * scale * (1 - r[i, h])
                    logits[i, j] = module.scale * ((q + module.content_bias[h, 0]) @ k
                                                   + (q + module.position_bias[h, 0]) @ position)
            out[b, :, rows] = logits.softmax(-1) @ (x[b] @ module.value.weight[rows].T)
    return module.out(out)


def test_abs_rel_key_dropout_drops_content_and_position_keys_once(monkeypatch):
    # the thesis code's "+ abs/rel + gate" is its relative attention with the absolute gate:
    # attention_dropout on k and on the position keys, whose absolute term reads the same
    # dropped keys (multi_head_relative_pos_attention.py:41,44,47); a fixed mask stands in
    # for the random one
    from sglab.models import abs_rel
    from sglab.models.abs_rel import AbsRelGatedAttention

    torch.manual_seed(0)
    module = AbsRelGatedAttention(8, 2, dropout=0.0, key_dropout=0.5).train()
    with torch.no_grad():
        module.content_bias.normal_()
        module.position_bias.normal_()
        module.switch.bias.normal_()
    keep = (torch.arange(module.head_dim) % 2 == 1).float() / 0.5
    rates = []

    def fixed_dropout(t, p, training):
        rates.append(p)
        if not (p and training):
            return t
        return (t.view(*t.shape[:-1], -1, module.head_dim) * keep).view_as(t) \
            if t.shape[-1] == module.d_model else t * keep

    monkeypatch.setattr(abs_rel, "apply_dropout", fixed_dropout)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        fast = module(x)
        torch.testing.assert_close(fast, direct_abs_rel_attention(module, x, keep),
                                   rtol=1e-4, atol=1e-5)
        plain = direct_abs_rel_attention(module, x)
        assert not torch.allclose(fast, plain, atol=1e-3)
        assert sorted(rates) == [0.5, 0.5]  # the content keys, the position keys: once each
        torch.testing.assert_close(module.eval()(x), plain, rtol=1e-4, atol=1e-5)
