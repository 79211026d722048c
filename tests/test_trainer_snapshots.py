"""train.snapshot_steps keeps the weights of chosen steps for analyses of training dynamics."""

import pytest
import torch

from sglab.errors import SglabError
from sglab.models import build_model
from sglab.tasks import build_task
from sglab.train.loop import load_trained, train
from tests.conftest import tiny_config


def test_snapshots_hold_the_weights_of_their_steps(tmp_path):
    config = tiny_config("train.snapshot_steps=[20, 0, 10, 10]")
    assert config.train.snapshot_steps == [0, 10, 20]
    train(config, tmp_path, printer=None)
    run_dir = tmp_path / config.run_id()
    states = {step: load_trained(run_dir, f"step_{step}")[2].state_dict() for step in (0, 10, 20)}
    last = load_trained(run_dir, "last")[2].state_dict()
    name = "blocks.0.attn.qkv.weight"
    torch.manual_seed(config.seed)  # step 0 is the initialization
    task = build_task(config.task)
    fresh = build_model(config.model, len(task.vocab), task.max_length)
    assert torch.equal(fresh.state_dict()[name], states[0][name])
    assert not torch.equal(states[0][name], states[10][name])
    assert not torch.equal(states[10][name], states[20][name])
    assert not torch.equal(states[20][name], last[name])  # 30 steps in all
    assert not (run_dir / "checkpoints" / "step_30.pt").exists()


def test_negative_snapshot_steps_are_rejected():
    with pytest.raises(SglabError, match="snapshot"):
        tiny_config("train.snapshot_steps=[-1]")
