import math

import pytest
import torch

from sglab.analysis.hooks import watching
from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.models import relative
from sglab.models.relative import RelativeSelfAttention, relative_sinusoids
from sglab.models.transformer import make_attention
from sglab.train.evaluate import model_batch
from tests.conftest import tiny_model


def direct_relative_attention(module: RelativeSelfAttention, x, key_padding_mask=None,
                              key_scale=None):
    """Transformer-XL logits evaluated pair by pair, straight from the formula; ``key_scale``
    (head_dim values) multiplies every content key k and position key r (key dropout)."""
    heads, head_dim = module.n_heads, module.head_dim
    d = heads * head_dim
    w = module.qkv.weight
    w_q, w_k, w_v = w[:d], w[d:2 * d], w[2 * d:]
    batch, length, _ = x.shape
    out = torch.zeros(batch, length, d)
    for b in range(batch):
        for h in range(heads):
            rows = slice(h * head_dim, (h + 1) * head_dim)
            u, v = module.content_bias[h], module.position_bias[h]
            logits = torch.full((length, length), float("-inf"))
            for i in range(length):
                q = w_q[rows] @ x[b, i]
                for j in range(length):
                    if module.causal and j > i:
                        continue
                    if key_padding_mask is not None and not key_padding_mask[b, j]:
                        continue
                    k = w_k[rows] @ x[b, j]
                    p = relative_sinusoids(torch.tensor(j - i), d)
                    r = (module.position_key.weight @ p)[rows]
                    if key_scale is not None:
                        k, r = k * key_scale, r * key_scale
                    logits[i, j] = ((q + u) @ k + (q + v) @ r) * module.scale
            probs = logits.softmax(-1)
            values = x[b] @ w_v[rows].T
            out[b, :, rows] = probs @ values
    return module.out(out)


def test_the_fixed_scale_is_one_over_the_root_of_the_head_width():
    module = RelativeSelfAttention(d_model=8, n_heads=2, causal=False)
    assert float(module.scale) == pytest.approx(1 / math.sqrt(4))
    assert not any("scale" in name for name, _ in module.named_parameters())


@pytest.mark.parametrize("causal", [False, True])
def test_relative_attention_matches_pairwise_formula(causal):
    torch.manual_seed(0)
    module = RelativeSelfAttention(d_model=8, n_heads=2, causal=causal)
    with torch.no_grad():  # u and v start at zero; make them matter
        module.content_bias.normal_()
        module.position_bias.normal_()
    x = torch.randn(2, 5, 8)
    padding = torch.tensor([[True] * 5, [True, True, True, False, False]])
    with torch.no_grad():
        fast = module(x, padding)
        slow = direct_relative_attention(module, x, padding)
    torch.testing.assert_close(fast[0], slow[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fast[1, :3], slow[1, :3], rtol=1e-4, atol=1e-5)


def test_key_dropout_drops_the_content_and_position_keys_and_not_the_weights(monkeypatch):
    # the thesis code's relative attention applies its attention_dropout to k and r
    # (multi_head_relative_pos_attention.py:41,44); a fixed mask stands in for the random
    # one: every even channel of a head dropped, the odd ones scaled by 1 / (1 - p)
    torch.manual_seed(0)
    module = RelativeSelfAttention(d_model=8, n_heads=2, causal=False, dropout=0.0,
                                   key_dropout=0.5).train()
    with torch.no_grad():
        module.content_bias.normal_()
        module.position_bias.normal_()
    keep = (torch.arange(module.head_dim) % 2 == 1).float() / 0.5
    rates = []

    def fixed_dropout(x, p, training):
        rates.append(p)
        return x * keep if p and training else x

    monkeypatch.setattr(relative, "apply_dropout", fixed_dropout)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        fast = module(x)
        slow = direct_relative_attention(module, x, key_scale=keep)
        plain = direct_relative_attention(module, x)
    torch.testing.assert_close(fast, slow, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(fast, plain, atol=1e-3)
    assert sorted(rates) == [0.0, 0.5, 0.5]  # k, r at 0.5; the weights at 0
    with torch.no_grad():
        torch.testing.assert_close(module.eval()(x), plain, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("weight_dropout, expected", [(None, 0.5), (0.0, 0.0), (0.2, 0.2)])
@pytest.mark.parametrize("positions", ["relative", "learned"])
def test_attention_weight_dropout_defaults_to_the_model_dropout(positions, weight_dropout,
                                                               expected):
    extra = [] if weight_dropout is None else [f"model.attention.weight_dropout={weight_dropout}"]
    config = build_run_config({}, [f"model.positions={positions}", "model.dropout=0.5", *extra])
    assert make_attention(config.model, None).dropout == expected


def test_a_learned_scale_starts_at_the_fixed_one_trains_and_scales_the_logits():
    # the thesis code's relative attention trains its scale, initialised to 1/sqrt(d_head)
    # (multi_head_relative_pos_attention.py:23)
    torch.manual_seed(0)
    fixed = RelativeSelfAttention(d_model=8, n_heads=2, causal=False)
    learned = RelativeSelfAttention(d_model=8, n_heads=2, causal=False, learned_scale=True)
    learned.load_state_dict(fixed.state_dict(), strict=False)
    with torch.no_grad():
        learned.content_bias.normal_()
        fixed.content_bias.copy_(learned.content_bias)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        torch.testing.assert_close(learned(x), fixed(x))
    learned(x).square().sum().backward()
    assert learned.scale.grad is not None and learned.scale.grad.abs() > 0
    with torch.no_grad():
        learned.scale.fill_(1.7)
        torch.testing.assert_close(learned(x), direct_relative_attention(learned, x),
                                   rtol=1e-4, atol=1e-5)
        assert not torch.allclose(learned(x), fixed(x), atol=1e-3)


@pytest.mark.parametrize("attention_bias, model_bias, expected", [
    (None, True, True), (None, False, False), (False, True, False), (True, False, True)])
@pytest.mark.parametrize("positions", ["relative", "learned"])
def test_attention_biases_follow_the_model_unless_set(positions, attention_bias, model_bias,
                                                      expected):
    extra = [] if attention_bias is None else [f"model.attention.bias={attention_bias}"]
    config = build_run_config({}, [f"model.positions={positions}", f"model.bias={model_bias}",
                                   *extra])
    module = make_attention(config.model, None)
    assert (module.qkv.bias is not None) is expected
    assert (module.out.bias is not None) is expected


def test_learned_scale_needs_relative_positions():
    with pytest.raises(SglabError, match="positions.kind=relative"):
        build_run_config({}, ["model.positions=learned", "model.attention.learned_scale=true"])
    config = build_run_config({}, ["model.positions=relative",
                                   "model.attention.learned_scale=true"])
    assert isinstance(make_attention(config.model, None).scale, torch.nn.Parameter)


def test_key_dropout_needs_relative_positions():
    with pytest.raises(SglabError, match="positions.kind=relative"):
        build_run_config({}, ["model.positions=learned", "model.attention.key_dropout=0.1"])


def test_relative_pattern_is_shift_invariant_for_identical_tokens():
    # With every token equal the content terms are constant, so the logits depend on
    # j - i only: up to each row's softmax constant, row i+1 is row i shifted right.
    torch.manual_seed(1)
    module = RelativeSelfAttention(d_model=8, n_heads=2, causal=False)
    x = torch.randn(1, 1, 8).expand(1, 6, 8)
    with torch.no_grad(), watching(module, ["pattern"], {}) as seen:
        module(x)
    pattern = seen["pattern"][0, 0]
    assert not torch.allclose(pattern, torch.full_like(pattern, 1 / 6)), "positions must matter"
    logits = pattern.log()
    for i in range(5):
        torch.testing.assert_close(logits[i + 1, 1:] - logits[i + 1, 1],
                                   logits[i, :-1] - logits[i, 0], rtol=1e-4, atol=1e-4)


def test_transformer_relative_switch_trains_and_has_no_absolute_positions():
    task, model = tiny_model("model.pos_encoding=relative", "model.attention_mask=bidirectional")
    assert model.positions is None
    assert all(isinstance(block.attn, RelativeSelfAttention) for block in model.blocks)
    batch = model_batch(model, task.train_batch(8, torch.Generator().manual_seed(0)))
    logits = model(batch.input_ids, batch.key_padding_mask)
    assert logits.shape[:2] == batch.input_ids.shape and torch.isfinite(logits).all()
