"""The one-layer topic model as a configuration of the one Transformer stack."""

import pytest
import torch

from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.models import build_model
from sglab.tasks import build_task
from sglab.tasks.base import target_loss
from sglab.train.loop import make_optimizer, named_weights
from tests.conftest import tiny_model

ONE_LAYER = ["model.n_layers=1", "model.n_heads=1", "model.ffn=none", "model.block.norm=none",
             "model.block.residual_ablation=[0]", "model.positions=none",
             "model.attention_mask=bidirectional", "model.attention.out_projection=false",
             "model.embedding.output_bias=true", "task.n_topics=4", "task.words_per_topic=5",
             "task.min_length=12", "task.max_length=16", "task.eval_documents=8"]
VOCAB = 4 * 5 + 2


def topic_model(*overrides, seed=0):
    config = build_run_config({"task": {"name": "topics"}}, [*ONE_LAYER, *overrides])
    task = build_task(config.task)
    torch.manual_seed(seed)
    return config, task, build_model(config.model, len(task.vocab), task.max_length)


def _views(model):
    return {k: v.detach().clone() for k, v in model.blocks[0].attn.weight_views().items()}


def _train(config, task, model, steps=5):
    train = config.train.model_copy(update={"lr": 0.05, "weight_decay": 0.1})
    optimizer = make_optimizer(model, train, torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        batch = task.train_batch(8, generator)
        loss = target_loss(model(batch.input_ids, key_padding_mask=batch.key_padding_mask),
                             batch.targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_frozen_one_hot_embeddings_and_uniform_attention_stay_frozen(optimizer):
    config, task, model = topic_model("model.embedding=one_hot", f"model.d_model={VOCAB}",
                                      "model.uniform_attention=true", f"train.optimizer={optimizer}")
    before = _views(model)
    assert torch.equal(model.tok_emb.weight, torch.eye(VOCAB))
    assert torch.equal(before["W_Q"], torch.zeros(VOCAB, VOCAB))
    assert torch.equal(before["W_K"], torch.zeros(VOCAB, VOCAB))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"blocks.0.attn.qkv.trainable_weight", "output_bias"}
    bias_before = model.output_bias.detach().clone()
    _train(config, task, model)
    after = _views(model)
    assert torch.equal(model.tok_emb.weight, torch.eye(VOCAB))
    assert torch.equal(after["W_Q"], before["W_Q"]) and torch.equal(after["W_K"], before["W_K"])
    assert not torch.equal(after["W_V"], before["W_V"])
    assert not torch.equal(model.output_bias, bias_before)


def test_identity_value_stays_identity_while_query_and_key_train():
    config, task, model = topic_model("model.d_model=8", "model.identity_value=true")
    before = _views(model)
    emb_before = model.tok_emb.weight.detach().clone()
    assert torch.equal(before["W_V"], torch.eye(8))
    _train(config, task, model)
    after = _views(model)
    assert torch.equal(after["W_V"], torch.eye(8))
    assert not torch.equal(after["W_Q"], before["W_Q"])
    assert not torch.equal(after["W_K"], before["W_K"])
    assert not torch.equal(model.tok_emb.weight, emb_before)
    # the frozen rows survive a state-dict round trip
    _, _, fresh = topic_model("model.d_model=8", "model.identity_value=true", seed=1)
    fresh.load_state_dict(model.state_dict())
    assert torch.equal(_views(fresh)["W_Q"], after["W_Q"])


def test_everything_frozen_but_the_embeddings():
    config, task, model = topic_model("model.d_model=8", "model.identity_value=true",
                                      "model.uniform_attention=true")
    assert {n for n, p in model.named_parameters()} == {"tok_emb.weight", "output_bias"}
    _train(config, task, model, steps=2)
    assert torch.equal(_views(model)["W_V"], torch.eye(8))


def test_uniform_attention_model_computes_the_formula_exactly():
    """f(X) = W_E^T (W_V W_E X) Attn + b with Attn uniform over the non-padding keys."""
    config, task, model = topic_model("model.d_model=6", "model.uniform_attention=true")
    with torch.no_grad():
        model.output_bias.normal_()
    x = task.train_batch(5, torch.Generator().manual_seed(1))
    out = model(x.input_ids, key_padding_mask=x.key_padding_mask)
    W_E = model.tok_emb.weight.detach().T  # (d, D): columns are embeddings
    W_V = _views(model)["W_V"]
    b = model.output_bias.detach()
    for i in range(5):
        X = torch.nn.functional.one_hot(x.input_ids[i], VOCAB).T.float()  # (D, N)
        real = x.key_padding_mask[i].float()
        attn = real[:, None].expand(-1, len(real)) / real.sum()  # column j: uniform over keys
        expected = W_E.T @ (W_V @ W_E @ X) @ attn + b[:, None]
        assert torch.allclose(out[i].T, expected, atol=1e-5)
    # one-hot embeddings: f(X) = W_V X Attn + b, the same output at every position
    config, task, model = topic_model("model.embedding=one_hot", f"model.d_model={VOCAB}",
                                      "model.uniform_attention=true")
    out = model(x.input_ids, key_padding_mask=x.key_padding_mask)
    W_V = _views(model)["W_V"]
    for i in range(5):
        real = x.key_padding_mask[i]
        counts = torch.bincount(x.input_ids[i][real], minlength=VOCAB).float()
        assert torch.allclose(out[i], (W_V @ counts / real.sum()).expand_as(out[i]), atol=1e-5)


def test_general_attention_matches_a_direct_softmax_computation():
    config, task, model = topic_model("model.d_model=6", "model.init=gamma", "model.init_gamma=0.3")
    x = task.train_batch(3, torch.Generator().manual_seed(2))
    out = model(x.input_ids, key_padding_mask=x.key_padding_mask)
    views = _views(model)
    W_E = model.tok_emb.weight.detach().T
    for i in range(3):
        Z = W_E @ torch.nn.functional.one_hot(x.input_ids[i], VOCAB).T.float()
        scores = (views["W_K"] @ Z).T @ (views["W_Q"] @ Z) / 6 ** 0.5  # (key, query)
        scores[~x.key_padding_mask[i]] = float("-inf")
        attn = scores.softmax(0)  # column-wise softmax: column j is query j
        expected = W_E.T @ (views["W_V"] @ Z) @ attn + model.output_bias.detach()[:, None]
        assert torch.allclose(out[i].T, expected, atol=1e-5)


def test_one_hot_embedding_needs_d_model_equal_to_vocabulary_size():
    with pytest.raises(SglabError, match=f"set model.d_model={VOCAB}"):
        topic_model("model.embedding=one_hot", "model.d_model=16")


def test_ffn_none_removes_the_mlp_and_defaults_are_unchanged():
    _, _, model = topic_model("model.d_model=8")
    assert not any(".mlp." in n or "ln_2" in n for n, _ in model.named_parameters())
    with pytest.raises(SglabError, match="d_ff=64 has no effect without ffn=dense or ffn=topk"):
        build_run_config({}, ["model.ffn=none", "model.d_ff=64"])  # the old flat names
    with pytest.raises(SglabError, match="unknown key 'model.ffn.d_ff'"):
        build_run_config({}, ["model.ffn.kind=none", "model.ffn.d_ff=64"])
    # post-norm and pre-norm blocks without MLP: x = ln_1(x + attn(x)), x = x + attn(ln_1(x))
    for norm in ("pre", "post"):
        task, model = tiny_model(f"model.norm={norm}", "model.ffn=none")
        block, x = model.blocks[0], torch.randn(2, 5, 16)
        with torch.no_grad():
            expected = (x + block.attn(block.ln_1(x), None) if norm == "pre"
                        else block.ln_1(x + block.attn(x, None)))
            assert torch.allclose(block(x, None), expected, atol=1e-6)
    _, default = tiny_model()
    names = {n for n, _ in default.named_parameters()}
    assert {"blocks.0.attn.qkv.weight", "blocks.0.attn.out.weight", "blocks.0.mlp.up.weight",
            "blocks.0.ln_2.weight"} <= names
    assert "output_bias" not in names and default.output_bias is None
    assert set(named_weights(default)) >= {"blocks.1.attn.W_Q", "blocks.1.attn.W_K",
                                           "blocks.1.attn.W_V", "blocks.1.attn.W_O"}


def test_weight_views_slice_the_fused_projection():
    _, model = tiny_model()
    attn = model.blocks[0].attn
    views = attn.weight_views()
    assert torch.equal(torch.cat([views["W_Q"], views["W_K"], views["W_V"]]), attn.qkv.weight)
    x = torch.randn(2, 4, 16)
    assert torch.allclose(x @ views["W_V"].T, attn.qkv(x)[..., 32:], atol=1e-6)
