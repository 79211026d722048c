"""Trainer options used by the topic experiment: SGD, squared loss, weight-norm logging."""


import pytest
import torch

from sglab.config import build_run_config
from sglab.errors import SglabError
from sglab.store import read_metrics
from sglab.tasks.base import target_loss
from sglab.train import Trainer
from sglab.train.loop import make_optimizer
from tests.conftest import tiny_config

TOPIC_RUN = {
    "task": {"name": "topics", "n_topics": 4, "words_per_topic": 4, "min_length": 10,
             "max_length": 12, "eval_documents": 16},
    "model": {"n_layers": 1, "n_heads": 1, "d_model": 18, "ffn": "none", "norm": "none",
              "residual_ablation": [0], "pos_encoding": "none", "attention_mask": "bidirectional",
              "embedding": "one_hot", "attention_out_projection": False, "output_bias": True},
    "train": {"steps": 20, "batch_size": 8, "eval_interval": 5, "log_interval": 10,
              "checkpoint_interval": 10, "warmup_steps": 0, "threads": 1},
}


def test_sgd_optimizer_and_momentum_validation():
    config = tiny_config("train.optimizer=sgd", "train.momentum=0.9", "train.lr=0.1")
    model = torch.nn.Linear(3, 2)
    optimizer = make_optimizer(model, config.train, torch.device("cpu"))
    assert isinstance(optimizer, torch.optim.SGD)
    assert optimizer.param_groups[0]["momentum"] == 0.9 and optimizer.param_groups[0]["lr"] == 0.1
    # one plain SGD step: w <- w - lr * (grad + weight_decay * w) on 2-D weights
    plain = tiny_config("train.optimizer=sgd", "train.lr=0.1", "train.weight_decay=0.0").train
    optimizer = make_optimizer(model, plain, torch.device("cpu"))
    before = model.weight.detach().clone()
    model(torch.ones(1, 3)).sum().backward()
    grad = model.weight.grad.clone()
    optimizer.step()
    assert torch.allclose(model.weight, before - 0.1 * grad)
    assert isinstance(make_optimizer(model, tiny_config().train, torch.device("cpu")),
                      torch.optim.AdamW)
    with pytest.raises(SglabError, match="momentum=0.9 is an SGD / RMSProp setting"):
        tiny_config("train.momentum=0.9")


def test_squared_loss_is_the_squared_distance_to_the_one_hot_target():
    logits = torch.randn(2, 3, 5)
    targets = torch.tensor([[1, -100, 4], [-100, -100, 0]])
    expected = ((logits[0, 0] - torch.eye(5)[1]) ** 2).sum() + \
        ((logits[0, 2] - torch.eye(5)[4]) ** 2).sum() + ((logits[1, 2] - torch.eye(5)[0]) ** 2).sum()
    assert target_loss(logits, targets, "squared") == pytest.approx(float(expected) / 3)
    assert target_loss(logits, targets) == pytest.approx(float(torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), targets.flatten())))


def test_weight_norms_are_logged_at_every_evaluation(tmp_path):
    config = build_run_config(TOPIC_RUN, [
        "train.optimizer=sgd", "train.lr=0.5", "train.loss=squared",
        "train.weight_norms=['blocks.0.attn.W_*', 'output_bias']"])
    summary = Trainer(config, tmp_path, printer=None).run()
    run_dir = tmp_path / config.run_id()
    records = read_metrics(run_dir)  # the evaluations (metrics.jsonl also holds training loss)
    assert [r["step"] for r in records] == [5, 10, 15, 20]
    keys = {k for k in records[-1] if k.startswith("weight_norm/")}
    assert keys == {"weight_norm/blocks.0.attn.W_Q", "weight_norm/blocks.0.attn.W_K",
                    "weight_norm/blocks.0.attn.W_V", "weight_norm/output_bias"}
    weights = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["model"]
    qkv = weights["blocks.0.attn.qkv.weight"]
    assert records[-1]["weight_norm/blocks.0.attn.W_V"] == pytest.approx(float(qkv[36:].norm()))
    assert records[-1]["weight_norm/blocks.0.attn.W_Q"] == pytest.approx(float(qkv[:18].norm()))
    assert records[-1]["weight_norm/output_bias"] == pytest.approx(
        float(weights["output_bias"].norm()))
    assert records[-1]["iid_test/squared_loss"] < records[0]["iid_test/squared_loss"]
    assert summary["final"] == records[-1] and summary["final"]["step"] == 20  # the last one
    assert 0 < summary["final"]["iid_test/accuracy"] <= 1


def test_unknown_weight_norm_name_is_an_error_before_anything_is_written(tmp_path):
    config = build_run_config(TOPIC_RUN, ["train.weight_norms=['blocks.0.attn.W_X']"])
    with pytest.raises(SglabError, match="no weight matches 'blocks.0.attn.W_X'"):
        Trainer(config, tmp_path, printer=None).run()
    assert not any(tmp_path.iterdir())
